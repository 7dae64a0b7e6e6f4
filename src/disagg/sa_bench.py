"""What srt-slurm's sa-bench sends, as the disaggregated silicon validation models it: the
requests' mean lengths and the opening burst in each row's mean TTFT.

The disaggregated rows of silicon_sample.csv (InferenceX multi-node runs) were measured by
sa-bench: InferenceX's runners/launch_b200-dgxc-slurm.sh and launch_h200-dgxc-slurm.sh
(SemiAnalysisAI/InferenceX at 6a5dad4, 2026-03-23) clone ishandhanani/srt-slurm at branch
sa-submission-q1-2026 and submit its recipes, whose `benchmark: type: "sa-bench"`,
`req_rate: "inf"`. sa-bench's bench.sh (src/srtctl/benchmarks/scripts/sa-bench/bench.sh, read at
2ef1b6d; the branch itself was not readable here) first runs a warm-up pass and then, per
concurrency C, `benchmark_serving.py --dataset-name random --random-range-ratio 0.8
--num-prompts $((concurrency * 5)) --max-concurrency C --request-rate inf --ignore-eos`.

Lengths. Its sample_random_requests draws each prompt and output length uniformly from the
integers int(0.8 L) .. L (numpy randint(lower, upper + 1)), so a row's nominal ISL and OSL are
the maxima; the estimate runs at the mean, mean_length(L) = (int(0.8 L) + L) / 2 (1024 -> 921,
8192 -> 7372), prompts and outputs alike (the steady state takes every request at one length).

Burst. Every request is created at once behind an asyncio.Semaphore(C), TTFT timed from the
request's send (after the semaphore) to its first streamed chunk, the mean over all 5 C
requests (silicon_ttft_ms is that mean: NVIDIA's aisimulate cohort tool fills it with the
InferenceX result's metrics mean_ttft x 1000). The warm-up has drained (its own run ends with
its last request), so the first C requests are sent together to an idle deployment:

    TTFT = (burst + (W - 1) x steady) / W,   W = SA_BENCH_PROMPTS_PER_CLIENT = 5

burst: the mean TTFT of C prompts sent at t = 0 to the idle prefill pool, each its queue + pass +
KV transfer on the pool's batched FCFS servers (src/disagg/prefill_front.py fcfs_latency_s: the
same passes, token budget and pricing as `serve`); steady: the closed-loop steady state
(src/disagg/closed_loop.py) for the other (W - 1) C requests.

Where it breaks: the requests after the burst are taken at the steady state, though the burst's
completions stagger the second wave's sends by the burst's own spread (so the second wave is not
yet the steady state) and the last wave drains with fewer clients; lengths are taken at their
mean, not spread over the range (a burst of mixed lengths packs its passes differently).
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from src.disagg.prefill_budget import prefill_token_budget
from src.disagg.prefill_front import PrefillPool, fcfs_latency_s
from src.disagg.transfer import kv_link
from src.online.engine_limits import engine_limits
from src.validation import bench_run

SA_BENCH_PROMPTS_PER_CLIENT = 5  # sa-bench bench.sh: num_prompts=$((concurrency * 5))
SA_BENCH_RANGE_RATIO = bench_run.RANDOM_RANGE_RATIO  # sa-bench bench.sh: --random-range-ratio 0.8


def mean_length(nominal: int, ratio: float = SA_BENCH_RANGE_RATIO) -> int:
    """The mean of sa-bench's uniform integer lengths int(ratio x L) .. L, rounded down
    (src/validation/bench_run.py, shared with the aggregated validation)."""
    return bench_run.mean_length(nominal, ratio)


def validation_pool(scenario, disagg) -> PrefillPool:
    """The prefill pool of a validation row at its engine's default token budget (sglang:
    chunked_prefill_size / dp; others: the engine's max_num_batched_tokens default,
    src/disagg/prefill_budget.py), as `serve` builds it (src/disagg/serve.py prefill_pool)."""
    pre, dec = disagg.prefill, disagg.decode
    cost = replace(scenario, tp=pre.gpus_per_worker, ep=pre.ep).cost_model()
    engine, gpu = scenario.engine_profiles[0], cost.gpu
    tokens = engine_limits(engine, gpu.memory_gb, gpu.name).max_num_batched_tokens
    return PrefillPool(prefill_cost=cost, prefill_dp=pre.dp, servers=pre.workers * pre.dp,
                       model=cost.target, link=kv_link(disagg.link(), gpu), prefill_tp=pre.tp,
                       decode_tp=dec.tp, budget_tokens=prefill_token_budget(engine, gpu, pre.dp,
                                                                           tokens))


def burst_ttft_ms(pool: PrefillPool, concurrency: int, isl: int) -> float:
    """Mean queue + pass + transfer (ms) of `concurrency` prompts of `isl` tokens sent at once
    to the idle pool."""
    lat_s, _, _ = fcfs_latency_s(np.zeros(int(concurrency)), np.full(int(concurrency), int(isl)),
                                 pool)
    return float(np.mean(lat_s)) * 1e3


def benchmark_ttft_ms(steady_ms: float, burst_ms: float,
                      prompts_per_client: int = SA_BENCH_PROMPTS_PER_CLIENT) -> float:
    """The run's mean TTFT: one request per client in the burst, the rest at the steady state
    (src/validation/bench_run.py)."""
    return bench_run.benchmark_ttft_ms(steady_ms, burst_ms, prompts_per_client)
