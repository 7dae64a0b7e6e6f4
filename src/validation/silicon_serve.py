"""Greedy closed-loop serving of one SiliconCase, in process: predicted TPOT and TTFT means.

The deployment is the case's GPU, model (by Hugging Face id), tp, ep and weight formats, with no
draft; `serve --concurrency C --policies none` runs it (src/online/study.py run_serving, the
same function the command calls) with the requests of the row's benchmark
(src/validation/silicon_source.py): for an InferenceX row, 10 C requests whose prompt and output
lengths are uniform on the integers int(0.8 L) .. L (benchmark_serving.py's random dataset), the
first C sent together to the empty engine (the opening burst) and the run's mean TTFT and TPOT
over all of them, as the benchmark's; for a row whose benchmark is not established, 4 C requests
at fixed lengths ISL and OSL (`--workload fixed:ISL:OSL`). REPLICATIONS replications, one
process, the scenario's seed: the same inputs give the same numbers. The
engine's scheduler limits are the case's engine's defaults on its GPU (engine_limits.py: SGLang's
chunked_prefill_size is 16384 on B200 / GB200, 8192 on H100 / H200; vLLM's and TensorRT-LLM's
token budget 8192).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from src.hardware.scenario import Scenario, default_hardware_scenario
from src.validation.silicon_rows import SiliconCase

REPLICATIONS = 2  # serve's minimum; every replication has its own random streams
SEED = 20261203
# the largest tensor-parallel group of one HGX node (8 NVLink GPUs: NVIDIA HGX H100/H200/B200
# datasheets); rows labelled above it are where the CSV records GPU counts as tp_size
# (design.md, "The GB200 TensorRT-LLM rows")
KV_HOLD_ABOVE_TP = 8


@dataclass(frozen=True)
class SiliconScenario(Scenario):
    """A scenario whose target's dense and expert weight formats are set apart (a measured row's
    checkpoint, e.g. gpt-oss: BF16 attention, MXFP4 experts) and whose engine host terms may be
    overridden (the fitted ones of host_fits.toml); ep is the Scenario's own."""

    weight_format: str = ""  # "" = the checkpoint's
    expert_weight_format: str = ""
    host_terms: tuple[tuple[str, float], ...] = ()  # EngineProfile field -> value

    def target_formats(self) -> dict[str, str]:
        """The formats set apart, and the Scenario's `kv_cache` where set (the disaggregated
        validation's recipes run an FP8 KV cache: src/disagg/silicon.py RECIPE_KV_CACHE)."""
        out = {k: v for k, v in (("weight_format", self.weight_format),
                                 ("expert_weight_format", self.expert_weight_format)) if v}
        if self.kv_cache:
            out["kv_cache_format"] = self.kv_cache
        return out

    def cost_model(self, engine_profile=None):
        from src.costmodel import engine_profile as named_profile
        engine = engine_profile or self.engine_profiles[0]
        if isinstance(engine, str):
            engine = named_profile(engine)
        return super().cost_model(replace(engine, **dict(self.host_terms)))


def length_distributions(case: SiliconCase):
    """(prompt, output) length distributions of the case's benchmark: fixed at ISL and OSL, or
    uniform on benchmark_serving.py's int(ratio L) .. L."""
    from src.config import FixedLength, UniformLength
    if case.range_ratio >= 1.0:
        return FixedLength(case.isl), FixedLength(case.osl)
    (pl, ph), (ol, oh) = case.length_bounds()
    return UniformLength(pl, ph), UniformLength(ol, oh)


def workload_name(case: SiliconCase) -> str:
    """`fixed:ISL:OSL`, or `random:ISL:OSL:ratio` for benchmark_serving.py's random dataset."""
    if case.range_ratio >= 1.0:
        return f"fixed:{case.isl}:{case.osl}"
    return f"random:{case.isl}:{case.osl}:{case.range_ratio:g}"


def serve_config(case: SiliconCase, host_terms: dict | None = None):
    """The ServeConfig of `serve --concurrency C --policies none` with the benchmark's requests."""
    from src.online.config import ServeConfig
    base = default_hardware_scenario()
    scenario = SiliconScenario(
        **{f: getattr(base, f) for f in base.__dataclass_fields__},
    )
    scenario = replace(scenario, name=f"silicon-{case.row_id}", gpu_id=case.gpu,
                       target_model_id=case.model, draft="ngram", tp=case.tp, draft_tp=1,
                       engine_profiles=(case.engine,), ep=case.ep,
                       attention_dp=case.attention_dp,
                       weight_format=case.weight_format,
                       expert_weight_format=case.expert_weight_format,
                       host_terms=tuple(sorted((host_terms or {}).items())))
    from src.costmodel.presets import load_presets
    from src.online.engine_limits import engine_limits, replica_limits
    gpu = load_presets().gpu(case.gpu)
    mode = base.study.quality_modes[0]
    prompt_len, output_len = length_distributions(case)
    return ServeConfig(
        scenario=scenario, engine_profile=case.engine, rates_per_s=(float(case.concurrency),),
        policies="none", workload=workload_name(case),
        prompt_len=prompt_len, output_len=output_len,
        workload_source="silicon_sample.csv", alpha_mode=mode, alpha=base.study.alpha_modes[mode],
        requests_per_replication=case.prompts_per_client * case.concurrency,
        replications=REPLICATIONS, seed=SEED, concurrency=(case.concurrency,),
        limits=replica_limits(case.engine, engine_limits(case.engine, gpu.memory_gb, gpu.name),
                              case.attention_dp))


def kv_hold_refusal(case: SiliconCase, cost) -> str:
    """The refusal of a row whose labelled layout cannot hold its concurrency's KV cache: fewer
    than C sequences of ISL + OSL cached tokens fit on a GPU after the weights (cost.kv_fits,
    the memory rule serve admits by), so the engine as labelled would run fewer than C at once
    and queue the rest (design.md, "The GB200 TensorRT-LLM rows": DeepSeek-R1 labelled tp 64 at
    concurrency 538 holds 249 sequences; the measured 1.4 s TTFT is not a queue of minutes, so
    the label is not the deployment). "" when it holds. Only rows labelled above one 8-GPU node
    (KV_HOLD_ABOVE_TP): at tp <= 8 the same shortfall is a real deployment the engine queues
    (Llama-3.1-70B FP8 at tp 1 on H200, concurrency 128, measured TTFT 128-369 s) or a KV
    capacity the engines have and the model lacks, both findings, not labels to refuse."""
    if case.tp <= KV_HOLD_ABOVE_TP:
        return ""
    tokens = case.isl + case.osl
    fits = cost.largest_batch_that_fits(tokens, limit=case.concurrency)
    if fits >= case.concurrency:
        return ""
    return (f"layout cannot hold KV: tp {case.tp}, ep {case.ep} holds {fits} sequences of "
            f"{tokens} tokens per replica, the concurrency is {case.concurrency}")


def predict(case: SiliconCase, host_terms: dict | None = None) -> dict | str:
    """{"tpot_ms", "ttft_ms"} (means over requests, as the CSV's), or why the model refuses."""
    from src.config import ConfigError
    from src.costmodel import CostModelInputError
    from src.online.study import run_serving
    try:
        cfg = serve_config(case, host_terms)
        held = kv_hold_refusal(case, cfg.scenario.cost_model())
        if held:
            return held
        table = run_serving(cfg, workers=1)["table"]
    except (ConfigError, CostModelInputError) as e:
        text = str(e)
        kind = "does not fit" if ("fit" in text or "KV cache" in text) else "model refuses"
        return f"{kind}: {text.splitlines()[0][:160]}"
    row = table[table.policy == "none"].iloc[0]
    return {"tpot_ms": float(row["tpot_mean_ms"]), "ttft_ms": float(row["ttft_mean_ms"])}
