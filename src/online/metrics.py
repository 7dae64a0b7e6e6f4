"""Serving metrics per (policy, rate), with confidence intervals over replications.

Definitions follow vLLM's `benchmark_serving` (per request; times in seconds):

* TTFT = first token - arrival; TPOT = (finish - first token) / (output tokens - 1), for requests
  of more than one output token; ITL = the gaps between a request's successive token emissions
  (a verification that commits several tokens emits them together: one gap); E2E = finish - arrival;
  queueing delay = start of the first step that scheduled the request - arrival.
* Throughputs divide by the makespan, the first arrival (0) to the last finish: output tokens/s,
  requests/s, and goodput = requests meeting both SLOs (TTFT <= slo_ttft_s and TPOT <= slo_tpot_s)
  per second.
* mean batch = time-average of the running sequences while the engine is busy; KV use = time-average
  fraction of the KV cache's blocks in use while busy; Little's law: time-average running sequences
  over the makespan = request throughput x mean time from first scheduling to finish.

Each replication gives one value of each metric (its p50, p90, p99, throughput...); the reported
value is the mean over the R replications and its interval is Student's t with R - 1 degrees of
freedom (the replications are independent; batch means, e.g. Law, "Simulation Modeling and
Analysis", 5th ed., 9.5). Speedups compare a policy with `none` on the same requests (common random
numbers): the ratio is formed per replication (none / policy for latencies, policy / none for
throughputs) and averaged the same way.
"""

from __future__ import annotations

import numpy as np
from scipy.special import stdtrit  # Student-t quantile; scipy.stats costs ~0.5 s to import

from src.online.engine import ITL_BIN_EDGES_MS, EngineResult

PERCENTILES = (50, 90, 99)
LATENCIES = ("ttft", "tpot", "itl", "e2e")
THROUGHPUTS = ("output_throughput_tok_s", "request_throughput_req_s", "goodput_req_s")


def mean_ci(values: np.ndarray, level: float) -> tuple[float, float, float]:
    """(mean, low, high) of per-replication values (NaN where fewer than 2 finite values)."""
    v = np.asarray(values, float)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return (np.nan, np.nan, np.nan)
    m = float(v.mean())
    if v.size < 2:
        return (m, np.nan, np.nan)
    half = stdtrit(v.size - 1, 0.5 + level / 2) * v.std(ddof=1) / np.sqrt(v.size)
    return (m, m - half, m + half)


def mean_ci_positive(values: np.ndarray, level: float) -> tuple[float, float, float]:
    """(mean, low, high) of per-replication values of a positive quantity (a throughput, a
    latency) with an interval on the log scale, so it never reaches 0:

        low, high = mean x exp(-+ t_{R-1} x sd(log v) / sqrt(R))

    To first order in the spread sd(log v) = sd(v) / mean, so this is mean_ci's Student-t
    interval where that is narrow; where it is wide (R = 2: t = 12.7) the linear one goes below
    zero, this one stays positive and is wider above than below, as a ratio's is. Falls back to
    mean_ci clipped at 0 where a value is <= 0."""
    v = np.asarray(values, float)
    v = v[np.isfinite(v)]
    m, lo, hi = mean_ci(v, level)
    if v.size < 2 or not (v > 0).all():
        return (m, max(lo, 0.0) if np.isfinite(lo) else lo, hi)
    half = stdtrit(v.size - 1, 0.5 + level / 2) * np.log(v).std(ddof=1) / np.sqrt(v.size)
    return (m, float(m * np.exp(-half)), float(m * np.exp(half)))


def histogram_percentiles(hist: np.ndarray, qs=PERCENTILES) -> np.ndarray:
    """[rows, len(qs)] percentiles (ms) of binned gaps: the geometric middle of the bin where the
    cumulative count first reaches q% (bins about 1.2% wide)."""
    total = hist.sum(axis=1, keepdims=True)
    cum = np.cumsum(hist, axis=1)
    mids = np.sqrt(ITL_BIN_EDGES_MS[:-1] * ITL_BIN_EDGES_MS[1:])
    out = np.full((hist.shape[0], len(qs)), np.nan)
    for i, q in enumerate(qs):
        idx = (cum >= total * q / 100.0).argmax(axis=1)
        out[:, i] = np.where(total[:, 0] > 0, mids[idx], np.nan)
    return out


def per_replication(
    res: EngineResult, rows: np.ndarray, slo_ttft_s: float, slo_tpot_s: float, gpus: int = 1
) -> dict[str, np.ndarray]:
    """Every metric of each row (replication) of `rows`: name -> [len(rows)]."""
    arrival = res.arrival_s[rows]
    first = res.first_token_s[rows]
    finish = res.finish_s[rows]
    out_tokens = res.output_tokens[rows]
    valid = np.isfinite(arrival)
    ttft = first - arrival
    multi = valid & (out_tokens > 1)
    tpot = np.where(multi, (finish - first) / np.maximum(out_tokens - 1, 1), np.nan)
    e2e = finish - arrival
    queue = res.first_scheduled_s[rows] - arrival
    makespan = res.makespan_s[rows]
    n = valid.sum(axis=1)
    m: dict[str, np.ndarray] = {}
    with np.errstate(all="ignore"):
        for name, x in (("ttft", ttft), ("tpot", tpot), ("e2e", e2e)):
            p = np.nanpercentile(np.where(valid, x, np.nan), PERCENTILES, axis=1)
            for q, v in zip(PERCENTILES, p):
                m[f"{name}_p{q}_s"] = v
            m[f"{name}_mean_s"] = np.nanmean(np.where(valid, x, np.nan), axis=1)
        itl = histogram_percentiles(res.itl_histogram[rows]) * 1e-3
        for i, q in enumerate(PERCENTILES):
            m[f"itl_p{q}_s"] = itl[:, i]
        hist = res.itl_histogram[rows]
        mids = np.sqrt(ITL_BIN_EDGES_MS[:-1] * ITL_BIN_EDGES_MS[1:])
        m["itl_mean_s"] = (hist * mids).sum(axis=1) / hist.sum(axis=1) * 1e-3
        # the benchmarks' means in their unit (vllm/benchmarks/serve.py calculate_metrics): mean
        # TTFT and TPOT over requests; mean ITL over every gap of every request, exact: a
        # request's gaps add up to finish - first token, and the histogram counts them
        m["ttft_mean_ms"] = m["ttft_mean_s"] * 1e3
        m["tpot_mean_ms"] = m["tpot_mean_s"] * 1e3
        decode_s = np.where(valid, finish - first, 0.0).sum(axis=1)
        m["itl_mean_ms"] = decode_s / hist.sum(axis=1) * 1e3
        m["queue_delay_mean_s"] = np.nanmean(np.where(valid, queue, np.nan), axis=1)
        m["queue_delay_p99_s"] = np.nanpercentile(np.where(valid, queue, np.nan), 99, axis=1)
        meets = valid & (ttft <= slo_ttft_s) & ((out_tokens <= 1) | (tpot <= slo_tpot_s))
        m["output_throughput_tok_s"] = np.where(valid, out_tokens, 0).sum(axis=1) / makespan
        m["request_throughput_req_s"] = n / makespan
        # per GPU: over the target's tp GPUs (the draft shares them); per user: one request's
        # output tokens per second while it decodes, 1 / mean TPOT (AIConfigurator's
        # tokens/s/user = 1000 / tpot_ms, aiconfigurator_core/sdk/backends/base_backend.py)
        m["output_tok_s_per_gpu"] = m["output_throughput_tok_s"] / gpus
        m["output_tok_s_per_user"] = 1.0 / m["tpot_mean_s"]
        m["goodput_req_s"] = meets.sum(axis=1) / makespan
        m["slo_attainment"] = meets.sum(axis=1) / n
        m["mean_batch"] = res.running_integral_s[rows] / res.busy_s[rows]
        m["kv_use"] = res.kv_integral_s[rows] / res.busy_s[rows]
        m["busy_fraction"] = res.busy_s[rows] / makespan
        m["mean_running"] = res.running_integral_s[rows] / makespan
        in_service = np.where(valid, finish - res.first_scheduled_s[rows], np.nan)
        m["little_rhs"] = m["request_throughput_req_s"] * np.nanmean(in_service, axis=1)
        m["acceptance_rate"] = res.accepted_drafts[rows] / np.maximum(res.proposed_drafts[rows], 1)
        g = res.decode_steps_by_gamma[rows]
        m["mean_gamma"] = (g * np.arange(g.shape[1])).sum(axis=1) / np.maximum(g.sum(axis=1), 1)
        m["preemptions_per_request"] = res.preemptions[rows].sum(axis=1) / n
        m["steps"] = res.steps[rows]
        m["makespan_s"] = makespan
    return m


RATIO_LOWER_IS_BETTER = tuple(f"{n}_p{q}_s" for n in LATENCIES for q in PERCENTILES)


def summarise(per_rep: dict[str, np.ndarray], level: float) -> dict[str, float]:
    """Mean and CI of every metric: name, name_ci_low, name_ci_high."""
    row = {}
    for name, v in per_rep.items():
        m, lo, hi = mean_ci(v, level)
        row[name], row[f"{name}_ci_low"], row[f"{name}_ci_high"] = m, lo, hi
    return row


def speedups(
    policy: dict[str, np.ndarray], baseline: dict[str, np.ndarray], level: float
) -> dict[str, float]:
    """Per-replication ratios against the baseline (none): latency metrics baseline / policy
    (> 1 = faster), throughputs policy / baseline, averaged with their CI."""
    row = {}
    with np.errstate(all="ignore"):
        for name in RATIO_LOWER_IS_BETTER:
            m, lo, hi = mean_ci(baseline[name] / policy[name], level)
            key = f"{name.removesuffix('_s')}_speedup"
            row[key], row[f"{key}_ci_low"], row[f"{key}_ci_high"] = m, lo, hi
        for name in THROUGHPUTS:
            m, lo, hi = mean_ci(policy[name] / baseline[name], level)
            key = f"{name}_gain"
            row[key], row[f"{key}_ci_low"], row[f"{key}_ci_high"] = m, lo, hi
    return row
