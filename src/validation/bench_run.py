"""What a benchmark_serving.py timed run sends and what its mean TTFT holds, shared by the
aggregated and the disaggregated silicon validations.

Both benchmarks behind silicon_sample.csv's InferenceX rows are forks of vLLM's
benchmark_serving.py: InferenceX's own utils/bench_serving/benchmark_serving.py (single node,
the aggregated rows) and srt-slurm's sa-bench copy (multi-node, the disaggregated rows). Both
run `--dataset-name random --random-range-ratio R --request-rate inf --max-concurrency C
--num-prompts W x C --ignore-eos` after a warm-up that has drained (asyncio.gather), and report
mean_ttft_ms over all W x C prompts.

Lengths. sample_random_requests draws each prompt and output length uniformly from the integers
int(R L) .. L (numpy randint(lower, upper + 1); InferenceX utils/bench_serving/
benchmark_serving.py sample_uniform, SemiAnalysisAI/InferenceX at 235b232, 2026-04-07), so a
row's nominal ISL and OSL are the maxima. R = 0.8 in both: InferenceX's
.github/workflows/benchmark-tmpl.yml `RANDOM_RANGE_RATIO: 0.8` (same commit), sa-bench's bench.sh
`--random-range-ratio 0.8`.

Run mean. Every request is created at once behind asyncio.Semaphore(C), so the first C are sent
together to an idle deployment (the opening burst) and the other (W - 1) C as slots free; TTFT
is timed from each request's send, the mean over all W C:

    TTFT = (burst + (W - 1) x steady) / W

burst: the mean TTFT of the first C requests, steady: of the others. The disaggregated estimate
computes the two parts apart (src/disagg/sa_bench.py); the aggregated one simulates all W C
requests from an empty engine, so its mean is this sum by construction.
"""
from __future__ import annotations

RANDOM_RANGE_RATIO = 0.8  # InferenceX benchmark-tmpl.yml RANDOM_RANGE_RATIO; sa-bench bench.sh


def length_bounds(nominal: int, ratio: float = RANDOM_RANGE_RATIO) -> tuple[int, int]:
    """The inclusive integer range sample_random_requests draws a length of `nominal` from."""
    return int(int(nominal) * ratio), int(nominal)


def mean_length(nominal: int, ratio: float = RANDOM_RANGE_RATIO) -> int:
    """The mean of the uniform integers int(ratio x L) .. L, rounded down."""
    low, high = length_bounds(nominal, ratio)
    return (low + high) // 2


def benchmark_ttft_ms(steady_ms: float, burst_ms: float, prompts_per_client: int) -> float:
    """The run's mean TTFT: one request per client in the burst, the rest at the steady state."""
    w = int(prompts_per_client)
    if w < 1:
        raise ValueError("prompts_per_client must be at least 1")
    return (burst_ms + (w - 1) * steady_ms) / w
