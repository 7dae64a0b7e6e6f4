"""Benchmark the simulator: simulated request-steps per second vs numpy's raw Exp(1) variate rate.

    python scripts/benchmark.py            # the default reference grid (392 points)
    python scripts/benchmark.py --quick    # batch sizes 1, 8, 64 only
    python scripts/benchmark.py --cost hardware   # the same grid under the hardware cost model
                                                  # (H100, Llama-3.1-8B + 3.2-1B, ideal engine)
    python scripts/benchmark.py --trees    # the tree grid: 8 SGLang shapes x 7 batch sizes x 4
                                           # modes of h100-llama8b-eagle-trees, engine sglang

A request-step is one active request in one decoding step (speculative or greedy). Each speculative
request-step consumes one Exp(1) variate (src/acceptance.py), so numpy's rate of drawing Exp(1)
variates into a large array is the yardstick: the ratio says how close the whole sweep (engine,
pricing, statistics) comes to merely drawing the random numbers it needs. Times are wall clock and
CPU of this process; on a shared machine the CPU figures are the steadier ones.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import replace

import numpy as np
import pandas as pd

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from src.config import StudyConfig  # noqa: E402
from src.costmodel import FlatCostModel  # noqa: E402
from src.hardware.scenario import default_hardware_scenario, load_scenario  # noqa: E402
from src.sweep import Sweep, run_grid  # noqa: E402


class CountingSweep(Sweep):
    """The sweep, counting the request-steps (active slot-steps) of every run it makes."""

    def __init__(self, cfg, cost):
        super().__init__(cfg, cost)
        self.request_steps = {"speculative": 0.0, "greedy": 0.0}

    def greedy(self, mode, serving, batch_size, block):
        fresh = (serving, batch_size, block) not in self._greedy
        stats = super().greedy(mode, serving, batch_size, block)
        if fresh:
            self.request_steps["greedy"] += stats.active_slot_steps.sum()
        return stats

    def speculative(self, *args):
        stats = super().speculative(*args)
        self.request_steps["speculative"] += stats.active_slot_steps.sum()
        return stats

    def speculative_tree(self, *args):
        stats = super().speculative_tree(*args)
        self.request_steps["speculative"] += stats.active_slot_steps.sum()
        return stats


TREE_SCENARIO = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                             "configs", "scenarios", "h100-llama8b-eagle-trees.toml")


def tree_grid(cfg, cost, sweep) -> pd.DataFrame:
    """The tree shapes of cfg (no chains) at every batch size and mode: the tree benchmark."""
    rows = []
    for b in cfg.batch_sizes:
        for m in cfg.quality_modes:
            for s in cfg.serving_modes:
                rows += sweep.grid_points(m, s, b, cfg.trees, cfg.verification)
    return pd.DataFrame(rows)


def raw_rate(seconds: float = 1.0) -> tuple[float, float]:
    """numpy's Exp(1) variates per second (wall, CPU), drawn into a 1M-element array."""
    rng, bulk = np.random.default_rng(0), np.empty(1_000_000)
    n, wall, cpu = 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - wall < seconds:
        rng.standard_exponential(out=bulk)
        n += bulk.size
    return n / (time.perf_counter() - wall), n / (time.process_time() - cpu)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="batch sizes 1, 8, 64 only")
    parser.add_argument("--cost", choices=("flat", "hardware"), default="flat",
                        help="flat (default) or the default hardware scenario's cost model, ideal "
                        "engine")
    parser.add_argument("--trees", action="store_true",
                        help="the tree grid of configs/scenarios/h100-llama8b-eagle-trees.toml "
                        "(its 8 tree shapes, no chains) under engine profile sglang")
    args = parser.parse_args()
    cfg = StudyConfig()
    if args.trees:
        scenario = load_scenario(TREE_SCENARIO)
        cfg, cost, args.cost = scenario.study, scenario.cost_model("sglang"), "hardware (sglang)"
    if args.quick:
        cfg = replace(cfg, batch_sizes=(1, 8, 64))
    if args.trees:
        pass  # the scenario's cost model, set above
    elif args.cost == "flat":
        cost = FlatCostModel(cfg.draft_cost)
    else:
        cost = default_hardware_scenario().cost_model("ideal")
    warm = replace(cfg, batch_sizes=(1,), gammas=(1,), quality_modes=cfg.quality_modes[:1],
                   trees=cfg.trees[:1])  # loads the compiled loops
    run_grid(warm, cost)
    sweep = CountingSweep(cfg, cost)
    wall, cpu = time.perf_counter(), time.process_time()
    df = tree_grid(cfg, cost, sweep) if args.trees else run_grid(cfg, cost, sweep=sweep)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    counts = sweep.request_steps
    request_steps = counts["speculative"] + counts["greedy"]
    raw_wall, raw_cpu = raw_rate()
    half_width = (df.speedup_ci_high - df.speedup_ci_low) / 2

    print(f"cost model                  {args.cost}")
    print(f"grid points                 {len(df)} (widest speedup CI half-width "
          f"{half_width.max():.4f})")
    print(f"simulation time             {wall:.2f} s wall, {cpu:.2f} s CPU")
    print(f"request-steps simulated     {request_steps:.3e} (speculative "
          f"{counts['speculative']:.3e}, greedy {counts['greedy']:.3e})")
    print(f"simulator rate              {request_steps / wall:.3e} request-steps/s wall, "
          f"{request_steps / cpu:.3e} per CPU-s")
    print(f"numpy Exp(1), 1M-blocks     {raw_wall:.3e} variates/s wall, {raw_cpu:.3e} per CPU-s")
    print(f"ratio simulator / numpy     {request_steps / wall / raw_wall:.3f} wall, "
          f"{request_steps / cpu / raw_cpu:.3f} CPU (speculative request-steps only: "
          f"{counts['speculative'] / cpu / raw_cpu:.3f} CPU)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
