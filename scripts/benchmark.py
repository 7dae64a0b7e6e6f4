"""Benchmark the simulator: simulated request-steps per second vs numpy's raw variate rate.

    python scripts/benchmark.py            # the default reference grid (392 points)
    python scripts/benchmark.py --quick    # batch sizes 1, 8, 64 only
    python scripts/benchmark.py --cost hardware   # the same grid under the hardware cost model
                                                  # (H100, Llama-3.1-8B + Llama-3.2-1B, ideal engine)

A request-step is one active request in one decoding step (speculative or greedy). Each speculative
request-step consumes one Exp(1) variate (src/acceptance.py), so numpy's rate of drawing Exp(1)
variates in the same block shapes is an upper bound on what a numpy simulator could reach; the
ratio says how close the engine loop is to it.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import replace

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from src.config import StudyConfig  # noqa: E402
from src.costmodel import FlatCostModel  # noqa: E402
from src.hardware.scenario import default_hardware_scenario  # noqa: E402
from src.sweep import run_grid  # noqa: E402


class CountingCost:
    """A cost model that counts what the engine asks of it. Every decoding step, greedy or
    speculative, makes exactly one target pass over its active slots (positions 1 for greedy,
    gamma + 1 for speculative), so the active slots of those calls are the request-steps."""

    def __init__(self, cost):
        self.cost, self.time_unit = cost, cost.time_unit
        self.request_steps = {"speculative": 0, "greedy": 0}
        self.step_shapes = []  # [R, B] of every speculative step: one Exp(1) per slot is drawn

    def target_pass_time(self, active, positions_per_seq, context_len_tokens):
        greedy = bool(np.all(np.asarray(positions_per_seq) == 1))
        self.request_steps["greedy" if greedy else "speculative"] += int(active.sum())
        if not greedy:
            self.step_shapes.append(active.shape)
        return self.cost.target_pass_time(active, positions_per_seq, context_len_tokens)

    def draft_passes_time(self, active, gamma, context_len_tokens):
        return self.cost.draft_passes_time(active, gamma, context_len_tokens)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="batch sizes 1, 8, 64 only")
    parser.add_argument("--cost", choices=("flat", "hardware"), default="flat",
                        help="flat (default) or the default hardware scenario's cost model, ideal engine")
    args = parser.parse_args()
    cfg = StudyConfig()
    if args.quick:
        cfg = replace(cfg, batch_sizes=(1, 8, 64))
    start = time.perf_counter()
    if args.cost == "flat":
        cost = CountingCost(FlatCostModel(cfg.draft_cost))
    else:
        cost = CountingCost(default_hardware_scenario().cost_model("ideal"))
    df = run_grid(cfg, cost)
    elapsed = time.perf_counter() - start
    counts = cost.request_steps
    request_steps = counts["speculative"] + counts["greedy"]

    # numpy's raw rate: the same number of Exp(1) variates, drawn in the engine's block shapes
    rng = np.random.default_rng(0)
    buffers = {shape: np.empty(shape[::-1]) for shape in set(cost.step_shapes)}  # [B, R] as drawn
    n_drawn, t0 = 0, time.perf_counter()
    for shape in cost.step_shapes:
        rng.standard_exponential(out=buffers[shape])
        n_drawn += buffers[shape].size
    raw_block = n_drawn / (time.perf_counter() - t0)
    bulk = np.empty(1_000_000)
    t0 = time.perf_counter()
    for _ in range(20):
        rng.standard_exponential(out=bulk)
    raw_bulk = 20 * bulk.size / (time.perf_counter() - t0)

    print(f"cost model                  {args.cost}")
    print(f"grid points                 {len(df)}")
    print(f"simulation time             {elapsed:.2f} s")
    print(f"request-steps simulated     {request_steps:.3e} (speculative {counts['speculative']:.3e}, "
          f"greedy {counts['greedy']:.3e})")
    print(f"simulator rate              {request_steps / elapsed:.3e} request-steps/s")
    print(f"numpy Exp(1), engine blocks {raw_block:.3e} variates/s (ratio simulator/numpy {request_steps / elapsed / raw_block:.3f})")
    print(f"numpy Exp(1), 1M-blocks    {raw_bulk:.3e} variates/s (ratio {request_steps / elapsed / raw_bulk:.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
