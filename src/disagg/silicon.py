"""silicon_sample.csv's disaggregated rows: mapped to a [disagg] deployment and estimated, or
refused with a reason. Fitted to nothing (no term is tuned to these rows).

aiconfigurator-core 0.12.0's systems/silicon_sample.csv (`mode == disagg`) gives per row the
prefill and decode workers (prefill_num_workers, prefill_tp_size, prefill_attention_dp_size,
prefill_moe_tp_size, prefill_moe_ep_size, and decode_*), ISL, OSL, the benchmark's concurrency
(`silicon_concurrency=N` in silicon_data_source) and the measured mean TTFT and TPOT. Its
tp_size is attention TP inside a DP rank, GPUs per worker = tp x attention_dp = moe_tp x moe_ep
(the convention of src/disagg/config.py). A row runs as a greedy deployment: the CSV does not
say whether MTP ran, so every row is priced without speculation (a doubt on the TPOT errors).
The KV cache is FP8 on both pools (RECIPE_KV_CACHE: the benchmark's recipes set it).
Each row runs at the benchmark's mean prompt and output lengths (sa-bench draws them uniformly
in [0.8 L, L]: the row's isl and osl are the maxima), and the predicted TTFT is the benchmark's
mean: its opening burst (every client's first request sent at once to the idle pools) for one
request in SA_BENCH_PROMPTS_PER_CLIENT, the steady state for the rest (src/disagg/sa_bench.py);
predicted_steady_ttft_ms and predicted_burst_ttft_ms are its two parts.

    error = predicted / measured - 1   (src/validation/silicon.py relative_error)
"""
from __future__ import annotations

import math
import re
from dataclasses import replace

import pandas as pd

from src.config import ConfigError
from src.costmodel import CostModelInputError
from src.validation.silicon import relative_error
from src.validation.silicon_rows import (
    BACKEND_ENGINE,
    QUANT_FORMAT,
    _int,
    silicon_csv_path,
    system_gpus,
)

VALIDATION_SYSTEMS = ("h200_sxm", "b200_sxm")  # issue 25 section 3
COLUMNS = ("id", "system", "backend", "model", "engine", "isl", "osl", "concurrency",
           "prefill", "decode", "kv_link", "runnable", "refusal", "measured_tpot_ms",
           "predicted_tpot_ms", "tpot_error", "measured_ttft_ms", "predicted_ttft_ms",
           "ttft_error", "predicted_steady_ttft_ms", "predicted_burst_ttft_ms",
           "predicted_queue_ms", "predicted_prefill_ms", "predicted_transfer_ms",
           "prefill_utilisation", "decode_requests_per_worker")
_CONCURRENCY = re.compile(r"silicon_concurrency=(\d+)")
# The KV cache the rows' deployments ran: FP8. The rows are InferenceX runs of srt-slurm recipes
# (design.md, "What a row's measured TTFT holds"); every recipe read sets it on both pools:
# SGLang `kv-cache-dtype: "fp8_e4m3"` (recipes/b200-fp4/8k1k/stp/max-tpt-dep4-7p-dep8-2d.yaml,
# b200-fp8/8k1k/stp/max-tpt-dep8-1p1d.yaml), TensorRT-LLM `kv_cache_config: dtype: fp8`
# (recipes/trtllm/b200-fp8/8k1k/stp/ctx1_gen4_tp8_batch32_eplb0_mtp0_128.yaml,
# trtllm/h200/8k1k/stp/c128_ctx1_gen1_dep8_batch256_eplb0_mtp0.yaml). The CSV has no KV column.
RECIPE_KV_CACHE = "fp8"


def load_disagg_rows(path=None) -> pd.DataFrame:
    data = pd.read_csv(path or silicon_csv_path())
    return data[data["mode"] == "disagg"].reset_index(drop=True)


def row_concurrency(row) -> int | None:
    """The benchmark's concurrency: silicon_data_source's silicon_concurrency, else decode
    batch per rank x DP ranks x workers."""
    m = _CONCURRENCY.search(str(row.get("silicon_data_source", "")))
    if m:
        return int(m.group(1))
    b, w, d = (_int(row.get(f"decode_{k}")) for k in ("batch_size", "num_workers",
                                                     "attention_dp_size"))
    return b * w * d if b and w and d else None


_SAME_MEASUREMENT = ("system", "backend", "isl", "osl", "silicon_ttft_ms", "silicon_tpot_ms")


def duplicates_without_workers(rows: pd.DataFrame) -> dict[int, str]:
    """{index: id} of the rows without worker counts that repeat, float for float, the measured
    TTFT and TPOT (same system, backend, ISL, OSL and concurrency) of a row that has them: the
    older CSV dumps (source_file=2026-03-25.csv, 2026-04-06.csv) carry one coarse tp/ep for both
    pools and no worker counts, and 111 of their H200/B200 rows are the same measurement as a
    db-dump row (whose counts and per-pool shapes are kept there). Refused as such, not
    estimated twice."""
    key = [rows[c] for c in _SAME_MEASUREMENT] + [rows.apply(row_concurrency, axis=1)]
    keys = list(zip(*key))
    has = rows.prefill_num_workers.notna() & rows.decode_num_workers.notna()
    first = {}
    for k, h, rid in zip(keys, has, rows["id"]):
        if h:
            first.setdefault(k, rid)
    return {i: first[k] for i, (k, h) in enumerate(zip(keys, has)) if not h and k in first}


def pool_table(row, pool: str, moe: bool = True) -> dict | str:
    """The [disagg] keys of one pool of a row, or a refusal reason. moe False (a dense model):
    the moe_tp / moe_ep columns describe no layer (the CSV writes 1, 1 beside tp 4 for
    Qwen3-32B) and are not checked; ep is 1."""
    workers = _int(row[f"{pool}_num_workers"])
    tp, dp = _int(row[f"{pool}_tp_size"]), _int(row[f"{pool}_attention_dp_size"])
    moe_tp, ep, pp = (_int(row[f"{pool}_moe_tp_size"]) or 1, _int(row[f"{pool}_moe_ep_size"]) or 1,
                      _int(row[f"{pool}_pp_size"]))
    if not workers:
        return f"worker counts missing: {pool}_num_workers is empty"
    if not tp or not dp:
        return f"bad row: {pool} tp or attention_dp missing"
    if pp not in (None, 1):
        return f"pp>1: {pool}_pp_size {pp}"
    if not moe:
        return {f"{pool}_workers": workers, f"{pool}_tp": tp, f"{pool}_dp": dp, f"{pool}_ep": 1}
    if moe_tp * ep != tp * dp:
        return f"bad row: {pool} moe_tp x moe_ep {moe_tp * ep} != tp x attention_dp {tp * dp}"
    if ep not in (1, tp * dp):
        return f"moe_tp x ep mix: {pool} moe_tp {moe_tp}, moe_ep {ep}"
    return {f"{pool}_workers": workers, f"{pool}_tp": tp, f"{pool}_dp": dp, f"{pool}_ep": ep}


def map_row(row, presets):
    """(scenario, DisaggConfig, isl, osl, concurrency) of one row, or a refusal reason."""
    system, backend = str(row["system"]), str(row["backend"])
    system_gpu = system_gpus(presets)
    if system not in system_gpu:
        return f"unknown GPU: no preset for system {system}"
    engine = BACKEND_ENGINE.get(backend)
    from src.costmodel import load_engine_profiles
    if engine is None or engine not in load_engine_profiles():
        return f"no engine profile: backend {backend}"
    gq, mq = str(row["gemm_quant_mode"]), str(row["moe_quant_mode"])
    if gq not in QUANT_FORMAT or mq not in QUANT_FORMAT:
        return f"unsupported quant: gemm {gq}, moe {mq}"
    model_id = str(row["model_path"])
    try:
        spec = presets.model(model_id, "model")
    except CostModelInputError:
        return f"unknown model: {model_id}"
    table = {}
    for pool in ("prefill", "decode"):
        t = pool_table(row, pool, moe=bool(spec.n_routed_experts))
        if isinstance(t, str):
            return t
        table.update(t)
    conc, isl, osl = row_concurrency(row), _int(row["isl"]), _int(row["osl"])
    if not conc or not isl or not osl:
        return "bad row: concurrency, isl or osl missing"
    wf, ewf = QUANT_FORMAT[gq], QUANT_FORMAT[mq] if spec.n_routed_experts else ""
    from src.costmodel.formats import runnable_weight_formats
    gpu = presets.gpu(system_gpu[system])
    if any(f and f not in runnable_weight_formats(gpu) for f in (wf, ewf)):
        return f"unsupported quant: {wf}/{ewf} on {gpu.gpu_id}"
    spec = replace(spec, weight_format=wf, kv_cache_format=RECIPE_KV_CACHE,
                   **({"expert_weight_format": ewf} if ewf else {}))
    from src.disagg.config import disagg_from_table
    try:
        disagg = disagg_from_table(table, spec, gpu, presets.params)
    except ConfigError as e:
        return f"shape refused: {e}"
    from src.hardware.scenario import default_hardware_scenario
    from src.validation.silicon_serve import SiliconScenario
    base = default_hardware_scenario()
    scenario = replace(SiliconScenario(**{f: getattr(base, f) for f in base.__dataclass_fields__}),
                       name=f"silicon-{row['id']}", gpu_id=gpu.gpu_id, target_model_id=model_id,
                       draft="ngram", draft_tp=1, engine_profiles=(engine,), weight_format=wf,
                       expert_weight_format=ewf, kv_cache=RECIPE_KV_CACHE)
    return scenario, disagg, isl, osl, conc


def predict(scenario, disagg, isl: int, osl: int, concurrency: int):
    """(the greedy steady-state estimate (src/disagg/closed_loop.py), the opening burst's mean
    TTFT in ms (src/disagg/sa_bench.py)), both at sa-bench's mean lengths of the nominal isl and
    osl, or a refusal reason."""
    from src.attention_dp.worker import DecodeWorker
    from src.disagg.closed_loop import estimate
    from src.disagg.sa_bench import burst_ttft_ms, mean_length, validation_pool
    pre, dec = disagg.prefill, disagg.decode
    isl, osl = mean_length(isl), mean_length(osl)
    try:
        prefill_cost = replace(scenario, tp=pre.gpus_per_worker, ep=pre.ep).cost_model()
        decode_cost = replace(scenario, tp=dec.gpus_per_worker, ep=dec.ep).cost_model()
        est = estimate(prefill_cost, DecodeWorker(decode_cost, dec), disagg, isl, osl,
                       concurrency)
        return est, burst_ttft_ms(validation_pool(scenario, disagg), concurrency, isl)
    except (ConfigError, CostModelInputError) as e:
        text = str(e).splitlines()[0][:160]
        kind = 'does not fit' if ('fit' in text or ' GB ' in text) else 'model refuses'
        return f"{kind}: {text}"


def table_row(row, mapped, predicted) -> dict:
    """One output row; predicted: predict()'s (estimate, burst ms), a refusal reason, or None
    (not run)."""
    from src.disagg.sa_bench import benchmark_ttft_ms
    out = dict.fromkeys(COLUMNS, "")
    out.update(id=row["id"], system=row["system"], backend=row["backend"],
               model=row["model_path"], isl=row["isl"], osl=row["osl"],
               concurrency=row_concurrency(row) or "", runnable=False,
               measured_tpot_ms=float(row["silicon_tpot_ms"]),
               measured_ttft_ms=float(row["silicon_ttft_ms"]), predicted_tpot_ms=math.nan,
               predicted_ttft_ms=math.nan, tpot_error=math.nan, ttft_error=math.nan)
    if not isinstance(mapped, str):
        scenario, disagg = mapped[0], mapped[1]
        out.update(engine=scenario.engine_profiles[0], prefill=disagg.prefill.label(),
                   decode=disagg.decode.label(), kv_link=disagg.link())
    reason = mapped if isinstance(mapped, str) else predicted if isinstance(predicted, str) \
        else ""
    if reason or predicted is None:
        out["refusal"] = reason or "not run: outside --systems or --limit"
        return out
    est, burst_ms = predicted
    ttft = benchmark_ttft_ms(est.ttft_ms, burst_ms)
    out.update(runnable=True, predicted_tpot_ms=est.tpot_ms, predicted_ttft_ms=ttft,
               tpot_error=relative_error(est.tpot_ms, out["measured_tpot_ms"]),
               ttft_error=relative_error(ttft, out["measured_ttft_ms"]),
               predicted_steady_ttft_ms=est.ttft_ms, predicted_burst_ttft_ms=burst_ms,
               predicted_queue_ms=est.queue_ms, predicted_prefill_ms=est.prefill_ms,
               predicted_transfer_ms=est.transfer_ms, prefill_utilisation=est.prefill_utilisation,
               decode_requests_per_worker=est.decode_requests_per_worker)
    return out


def run(systems=VALIDATION_SYSTEMS, limit: int | None = None, say=lambda m: None):
    """The table (a DataFrame in CSV order) over the rows of `systems`; at most `limit` rows
    estimated (the rest mapped and listed as not run)."""
    from src.costmodel.presets import load_presets
    presets = load_presets()
    rows = load_disagg_rows()
    rows = rows[rows.system.isin(systems)].reset_index(drop=True)
    out, ran = [], 0
    twins = duplicates_without_workers(rows)
    for i, row in rows.iterrows():
        mapped = (f"same measurement as a row with worker counts: {twins[i]}" if i in twins
                  else map_row(row, presets))
        est = None
        if not isinstance(mapped, str) and (limit is None or ran < limit):
            est = predict(*mapped)
            ran += 1
        out.append(table_row(row, mapped, est))
        if (i + 1) % 50 == 0:
            say(f"  {i + 1}/{len(rows)} rows")
    return pd.DataFrame(out, columns=list(COLUMNS))
