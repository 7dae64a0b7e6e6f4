"""Benchmark the serving simulator: simulated requests per CPU-second vs numpy's raw variate rate.

    python scripts/benchmark_serving.py              # 6 rates x 5 policies, 4 x 500 requests each
    python scripts/benchmark_serving.py --workers 1  # in one process (default: one per core)
    python scripts/benchmark_serving.py --engine numpy   # the numpy engine, for comparison

The reference sweep is the default `python run.py serve` one: the default hardware scenario
(H100, Llama-3.1-8B + Llama-3.2-1B, vllm-v1), rates 1-32 requests/s, policies none, fixed,
schedule, adaptive, off-above, ShareGPT lengths, 2,000 requests per (policy, rate) in 4
replications. Nothing is written.

A request-step is one running request in one engine step; each speculative one draws one
uniform variate (src/online/counter_rng.py). numpy's rate of drawing Exp(1) variates into a
large array is the yardstick, as in scripts/benchmark.py: the ratio says how close the whole
sweep (scheduler, pricing, statistics) comes to merely drawing its random numbers. CPU time is
this process's and its worker processes' (user + system), the steady figure on a shared machine;
the sweep's CPU excludes the imports and the engine's one-time load of its compiled code (a
warm-up sweep of one rate runs first).
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from dataclasses import replace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from scripts.benchmark import raw_rate  # noqa: E402
from src.online.cli import config_from_args, make_parser  # noqa: E402
from src.online.study import benchmark_line, run_serving  # noqa: E402


def cpu_s() -> float:
    """User + system CPU seconds of this process and its finished children."""
    a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--rates", default="1,2,4,8,16,32")
    ap.add_argument("--requests", default="500")
    ap.add_argument("--engine", choices=("default", "numpy"), default="default",
                    help="default: the compiled engine where it applies; numpy: the numpy one")
    args = ap.parse_args()
    cfg = config_from_args(
        make_parser().parse_args(
            ["--rates", args.rates, "--requests", args.requests, "--replications", "4"]
        )
    )
    if args.engine == "numpy":
        from src.online import study
        from src.online.engine_numpy import NumpyEngine

        study.Engine = NumpyEngine  # (this process and forked workers)
    run_serving(replace(cfg, rates_per_s=cfg.rates_per_s[-1:]), workers=1)  # warm-up
    load = os.getloadavg()[0]
    cpu0, start = cpu_s(), time.perf_counter()
    result = run_serving(cfg, workers=args.workers)
    wall, cpu = time.perf_counter() - start, cpu_s() - cpu0
    print(benchmark_line(result))
    for s in result["speed"]:
        print(
            f"  rate {s['rate']:g}/s: {s['wall_s']:.1f} s, {s['requests']} requests, "
            f"{s['steps']:.3g} steps, {s['slot_steps']:.3g} request-steps"
        )
    requests = sum(s["requests"] for s in result["speed"])
    request_steps = sum(s["slot_steps"] for s in result["speed"])
    raw_wall, raw_cpu = raw_rate()
    print(f"sweep                       {wall:.2f} s wall, {cpu:.2f} s CPU ({os.cpu_count()} "
          f"cores, load average {load:.1f} at the start)")
    print(f"simulated                   {requests / cpu:.3e} requests per CPU-s, "
          f"{request_steps / cpu:.3e} request-steps per CPU-s")
    print(f"numpy Exp(1), 1M-blocks     {raw_cpu:.3e} variates per CPU-s")
    print(f"ratio simulator / numpy     {request_steps / cpu / raw_cpu:.3f} (request-steps per "
          "CPU-s / variates per CPU-s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
