"""Rows of AIConfigurator's silicon_sample.csv mapped to the project's inputs, or refused.

aiconfigurator-core 0.12.0 ships `aiconfigurator_core/systems/silicon_sample.csv`: end-to-end
TTFT and TPOT of real deployments (engine, version, system, TP/EP, ISL/OSL, concurrency =
batch_size). Each aggregated (`mode == agg`) row becomes a SiliconCase (GPU preset, model id,
engine profile, tp, ep, weight formats, ISL, OSL, concurrency, and the benchmark's timed run:
src/validation/silicon_source.py) or a refusal reason naming what the project cannot model.
Nothing of the serving simulator runs here.
"""
from __future__ import annotations

import importlib.util
import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from src.validation.bench_run import length_bounds
from src.validation.silicon_source import DEFAULT_PROMPTS_PER_CLIENT, bench_run_of

# silicon_sample.csv `system` -> GPU preset of src/presets/gpus.toml (systems without a preset
# are refused: b300_sxm, gb200, ...)
# backend -> engine profile of src/presets/engines.toml (trtllm: TensorRT-LLM's PyTorch backend,
# a profile another change adds; refused while it is absent)
BACKEND_ENGINE = {"vllm": "vllm-v1", "sglang": "sglang", "trtllm": "trtllm"}
# gemm_quant_mode / moe_quant_mode -> src/costmodel/formats.py FORMATS name (int4_wo, a
# weight-only INT4 kernel, has no format there and is refused)
QUANT_FORMAT = {"bf16": "bf16", "float16": "bf16", "fp8": "fp8", "fp8_block": "fp8-block",
                "nvfp4": "nvfp4", "mxfp4": "mxfp4", "w4a16_mxfp4": "mxfp4"}
# model_path not bundled with aiconfigurator-core 0.12.0 -> the bundled id of the same
# architecture (the row's gemm/moe quant columns then give the weight formats, as for any row):
# an instruction-tuned release of a base model keeps its config.json's architecture, and each
# nvidia/ checkpoint is NVIDIA ModelOpt's quantisation of the model named (their model cards on
# huggingface.co: "quantized version of Meta's Llama 3.1 8B Instruct", "... of DeepSeek AI's
# DeepSeek R1", "... of Qwen3-32B"); design.md, "Silicon validation", lists the mapping.
SAME_ARCHITECTURE = {
    "meta-llama/Llama-3.1-8B-Instruct": "meta-llama/Meta-Llama-3.1-8B",
    "nvidia/Llama-3.1-8B-Instruct-FP8": "meta-llama/Meta-Llama-3.1-8B",
    "nvidia/DeepSeek-R1-NVFP4": "deepseek-ai/DeepSeek-R1",
    "nvidia/Qwen3-32B-NVFP4": "Qwen/Qwen3-32B",
}
FIT_SYSTEM = "h100_sxm"  # the only system the host terms are fitted to (issue 23 section 3)


def silicon_csv_path() -> Path:
    """The CSV inside the installed aiconfigurator-core (located, never imported)."""
    spec = importlib.util.find_spec("aiconfigurator_core")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("aiconfigurator-core is not installed (requirements.txt)")
    return Path(list(spec.submodule_search_locations)[0]) / "systems" / "silicon_sample.csv"


def load_rows(path: str | Path | None = None) -> pd.DataFrame:
    """The aggregated rows, in file order."""
    data = pd.read_csv(path or silicon_csv_path())
    return data[data["mode"] == "agg"].reset_index(drop=True)


@dataclass(frozen=True)
class SiliconCase:
    """One measured deployment in the project's terms."""

    row_id: str
    system: str
    backend: str
    gpu: str
    model: str  # Hugging Face id priced (src/costmodel/hf_ids.py resolves it offline): the row's
    # model_path, or the bundled id of its architecture (SAME_ARCHITECTURE)
    engine: str
    tp: int  # GPUs of the replica (an attention-DP row: tp_size x attention_dp_size)
    ep: int
    weight_format: str
    expert_weight_format: str
    isl: int
    osl: int
    concurrency: int
    measured_tpot_ms: float
    measured_ttft_ms: float
    attention_dp: int = 1  # attention-DP ranks (each tp / attention_dp GPUs of attention TP)
    # the benchmark's timed run (src/validation/silicon_source.py): prompt and output lengths
    # uniform on int(range_ratio x isl) .. isl (osl alike; 1.0: fixed at isl, osl), and
    # prompts_per_client x concurrency requests, the first concurrency sent at once
    benchmark: str = ""
    range_ratio: float = 1.0
    prompts_per_client: int = DEFAULT_PROMPTS_PER_CLIENT

    def length_bounds(self) -> tuple[tuple[int, int], tuple[int, int]]:
        """((prompt low, high), (output low, high)): the inclusive integer ranges drawn."""
        return length_bounds(self.isl, self.range_ratio), length_bounds(self.osl, self.range_ratio)

    def mean_lengths(self) -> tuple[float, float]:
        """The mean prompt and output lengths the benchmark sent."""
        (pl, ph), (ol, oh) = self.length_bounds()
        return (pl + ph) / 2, (ol + oh) / 2


def attention_dp_refusal(row, tp: int, dp: int, ep: int) -> str:
    """Why an attention-DP row's layout cannot be run ("" where it can): its MoE split must
    cover the worker's tp x dp GPUs as moe_tp x moe_ep (AIConfigurator's ModelConfig rule) and
    be one the attention-DP step prices: the experts TP-split (ep 1) or one EP rank per GPU."""
    g = tp * dp
    moe_tp = _int(row["moe_tp_size"]) or 1
    if moe_tp * ep != g:
        return (f"attention DP layout: moe_tp_size {moe_tp} x moe_ep_size {ep} is not the "
                f"{g} GPUs of tp_size {tp} x attention_dp_size {dp}")
    if ep not in (1, g):
        return (f"attention DP with MoE TP x EP: moe_tp_size {moe_tp}, moe_ep_size {ep} (the "
                f"attention-DP step prices ep 1 or ep = the {g} GPUs)")
    return ""


def _int(value) -> int | None:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return int(v) if math.isfinite(v) and v == int(v) else None


def system_gpus(presets=None) -> dict[str, str]:
    """silicon_sample.csv's system -> GPU preset id: the preset naming it as its kernel_system
    (src/presets/gpus.toml), so a GPU preset added there is validated too."""
    if presets is None:
        from src.costmodel.presets import load_presets
        presets = load_presets()
    return {g.kernel_system: gid for gid, g in presets.gpus.items() if g.kernel_system}


def map_row(row, engines: set[str], presets=None) -> SiliconCase | str:
    """The case of one CSV row, or a refusal reason (one short phrase, counted by its text up to
    the first ':')."""
    system, backend = str(row["system"]), str(row["backend"])
    from src.costmodel.presets import load_presets
    presets = presets or load_presets()
    system_gpu = system_gpus(presets)
    if system not in system_gpu:
        return f"unknown GPU: no preset for system {system}"
    engine = BACKEND_ENGINE.get(backend)
    if engine is None:
        return f"unknown engine: backend {backend}"
    if engine not in engines:
        return f"no engine profile: {engine} (backend {backend}) is not in engines.toml"
    pp, adp = _int(row["pp_size"]), _int(row["attention_dp_size"])
    if adp is None and pd.isna(row["attention_dp_size"]):
        # the CSV's older sources (aic-auto-gap-analysis rows without a gtl job, e.g. every
        # h100_sxm sglang and trtllm row) leave the column empty: AIConfigurator's own default,
        # attention_dp_size = 1 (aiconfigurator_core/sdk/config.py, ModelConfig)
        adp = 1
    if pp != 1:
        return f"pp>1: pp_size {row['pp_size']}"
    if not adp or adp < 1:
        return f"attention DP: attention_dp_size {row['attention_dp_size']} is not a rank count"
    tp, ep = _int(row["tp_size"]), _int(row["moe_ep_size"]) or 1
    conc, isl, osl = _int(row["batch_size"]), _int(row["isl"]), _int(row["osl"])
    if not tp or not conc or not isl or not osl:
        return "bad row: tp_size, batch_size, isl or osl missing"
    if adp > 1:
        # AIConfigurator's convention: tp_size is attention TP inside one DP rank, the worker
        # has tp_size x attention_dp_size GPUs (= moe_tp_size x moe_ep_size), and batch_size is
        # one rank's: the concurrency is global_bs = batch_size x attention_dp_size
        # (aiconfigurator_core/sdk/backends/base_backend.py, BaseBackend's static estimate:
        # `global_bs = bs * model.config.attention_dp_size; concurrency = global_bs`); the CSV's
        # silicon_data_source `silicon_concurrency=N` says the same on 168 of its 169 such rows
        refused = attention_dp_refusal(row, tp, adp, ep)
        if refused:
            return refused
        tp, conc = tp * adp, conc * adp
    gq, mq = str(row["gemm_quant_mode"]), str(row["moe_quant_mode"])
    # both quant columns empty (precision bf16 or empty; Llama-3.1-8B, Qwen3-32B rows of the
    # older sources): the checkpoint's own formats
    unquantised = (pd.isna(row["gemm_quant_mode"]) and pd.isna(row["moe_quant_mode"])
                   and str(row["precision"]) in ("bf16", "nan"))
    if unquantised:
        gq = mq = "bf16"
    if gq not in QUANT_FORMAT or mq not in QUANT_FORMAT:
        return f"unsupported quant: gemm {gq}, moe {mq}"
    model = str(row["model_path"])
    model = SAME_ARCHITECTURE.get(model, model)
    from src.costmodel import CostModelInputError
    from src.costmodel.formats import runnable_weight_formats
    try:
        spec = presets.model(model, "model")
    except CostModelInputError:
        return f"unknown model: {model} is not bundled with aiconfigurator-core"
    except Exception as e:  # a config.json the reader refuses (architecture it does not model)
        return f"unknown model: {model} ({str(e).splitlines()[0][:80]})"
    wf = QUANT_FORMAT[gq]
    ewf = QUANT_FORMAT[mq] if spec.n_routed_experts else ""
    if unquantised:
        wf, ewf = spec.weight_format, spec.expert_weight_format
    # a checkpoint stored in 128x128-block FP8 (config.json quantization_config.weight_block_size,
    # e.g. Qwen/Qwen3-235B-A22B-FP8, DeepSeek-V3/R1) runs block-FP8 kernels whatever the row's
    # label: vLLM's Fp8Config reads weight_block_size and takes the block path
    # (vllm/model_executor/layers/quantization/fp8.py, `self.block_quant = ... weight_block_size
    # is not None`), so a row labelled `fp8` on such a checkpoint is priced as fp8-block
    if wf == "fp8" and spec.weight_format == "fp8-block":
        wf = "fp8-block"
    if ewf == "fp8" and (spec.expert_weight_format or spec.weight_format) == "fp8-block":
        ewf = "fp8-block"
    if spec.expert_weight_format == "mxfp4" and str(row["precision"]) == "fp4":
        # gpt-oss ships its experts in MXFP4 only (config.json quant_method mxfp4) and the
        # rest in BF16; the CSV labels those runs nvfp4/fp4, so the checkpoint's formats run
        wf, ewf = spec.weight_format, spec.expert_weight_format
    gpu = presets.gpu(system_gpu[system])
    able = runnable_weight_formats(gpu)
    for f in (wf, ewf):
        if f and f not in able:
            return f"unsupported quant: {f} on {system_gpu[system]}"
    if adp > 1:
        from src.attention_dp.shape import shape_refusal
        names = {"tp": "tp_size", "dp": "attention_dp_size", "ep": "moe_ep_size"}
        refused = shape_refusal(spec, tp // adp, adp, ep, names)
        if refused:
            return f"attention DP shape: {refused[1]}"
    run = bench_run_of(row.get("silicon_data_source"))
    return SiliconCase(
        row_id=str(row["id"]), system=system, backend=backend, gpu=system_gpu[system],
        model=model, engine=engine, tp=tp, attention_dp=adp, ep=ep if ep > 1 else 1,
        weight_format=wf,
        expert_weight_format=ewf, isl=isl, osl=osl, concurrency=conc,
        measured_tpot_ms=float(row["silicon_tpot_ms"]),
        measured_ttft_ms=float(row["silicon_ttft_ms"]), benchmark=run.benchmark,
        range_ratio=run.range_ratio, prompts_per_client=run.prompts_per_client)


def reason_kind(reason: str) -> str:
    """The counted class of a refusal: its text up to the first ':'."""
    return reason.split(":", 1)[0]
