"""Benchmark the serving simulator: simulated requests and engine steps per second of wall time.

    python scripts/benchmark_serving.py              # 6 rates x 5 policies, 4 x 500 requests each
    python scripts/benchmark_serving.py --workers 1  # in one process (default: one per core)

The sweep is the default `python run.py serve` one: the default hardware scenario (H100,
Llama-3.1-8B + Llama-3.2-1B), rates 1-32 requests/s, policies none, fixed, schedule, adaptive,
off-above, ShareGPT lengths, 2,000 requests per (policy, rate) in 4 replications. Nothing is
written.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from src.online.cli import config_from_args, make_parser
from src.online.study import benchmark_line, run_serving


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--rates", default="1,2,4,8,16,32")
    ap.add_argument("--requests", default="500")
    args = ap.parse_args()
    cfg = config_from_args(
        make_parser().parse_args(
            ["--rates", args.rates, "--requests", args.requests, "--replications", "4"]
        )
    )
    start = time.perf_counter()
    result = run_serving(cfg, workers=args.workers)
    print(benchmark_line(result))
    for s in result["speed"]:
        print(
            f"  rate {s['rate']:g}/s: {s['wall_s']:.1f} s, {s['requests']} requests, "
            f"{s['steps']:.3g} steps"
        )
    print(f"total {time.perf_counter() - start:.1f} s wall, {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    sys.exit(main())
