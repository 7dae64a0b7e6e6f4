"""The sweep engine: every (quality mode, serving mode, batch size, gamma) of a StudyConfig.

Each grid point simulates greedy and speculative decoding on the identical requests, adding blocks
of independent replications until the speedup's confidence interval is as tight as
`ci_half_width` (design.md, "Statistics"). Every block of every grid point has its own random
stream, so subsets and reorderings of the grid give the same numbers.
"""
from __future__ import annotations

import time
from dataclasses import replace

import pandas as pd

from src.baseline import simulate_greedy
from src.config import StudyConfig
from src.costmodel import CostModel
from src.metrics import grid_point_metrics
from src.processes import stderr_line
from src.serving import concat_stats
from src.speculative import simulate_speculative
from src.workload import make_requests, stream

GRID_KEYS = ("quality_mode", "serving_mode", "batch_size", "gamma")
TREE_KEYS = ("tree_steps", "tree_topk", "tree_tokens")  # the shape: a chain is (gamma, 1, gamma+1)


class Sweep:
    """Caches what grid points share: requests per (mode, batch, block), greedy runs per
    (serving mode, batch, block). Greedy depends only on lengths, which every mode shares."""

    def __init__(self, cfg: StudyConfig, cost: CostModel):
        self.cfg, self.cost = cfg, cost
        self._requests: dict = {}
        self._greedy: dict = {}
        self._trees: dict = {}

    def requests(self, mode: str, batch_size: int, block: int):
        key = (mode, batch_size, block)
        if key not in self._requests:
            cfg = self.cfg
            self._requests[key] = make_requests(
                cfg.seed, mode, cfg.alpha_modes[mode], cfg.output_len, cfg.prompt_len, batch_size,
                block, cfg.replications_per_block(batch_size), cfg.requests_per_slot * batch_size)
        return self._requests[key]

    def greedy(self, mode: str, serving: str, batch_size: int, block: int):
        key = (serving, batch_size, block)
        if key not in self._greedy:
            self._greedy[key] = simulate_greedy(self.requests(mode, batch_size, block), batch_size,
                                                serving, self.cost)
        return self._greedy[key]

    def speculative(self, mode: str, serving: str, batch_size: int, block: int, gamma: int,
                    verification: str):
        """Block `block` of one grid point, from its own stream (..., gamma, verification,
        block)."""
        rng = stream(self.cfg.seed, "accept", mode, serving, batch_size, gamma, verification, block)
        (stats,) = simulate_speculative(self.requests(mode, batch_size, block), batch_size, serving,
                                        self.cost, [gamma], verification, [rng])
        return stats

    def speculative_tree(self, mode: str, serving: str, batch_size: int, block: int,
                         shape, verification: str):
        """Block `block` of a tree grid point (src/treesim/serve.py), from its own stream."""
        from src.treesim.grid import tree_block
        return tree_block(self, mode, serving, batch_size, block, shape, verification)

    def grid_points(self, mode: str, serving: str, batch_size: int, gammas: tuple,
                    verification: str) -> list[dict]:
        """Rows for every gamma of one (mode, serving mode, batch size).

        `gammas` may hold tree shapes (src/treeshape/shape.TreeShape) beside the chains' ints.
        Block b of gamma g uses the requests of block b and the stream keyed (..., g, b). A gamma
        whose CI is still too wide takes as many further blocks as its own variance says it needs
        (blocks_to_add) and is checked again; it depends only on its own blocks, so its numbers do
        not depend on which other gammas run beside it.
        """
        cfg = self.cfg
        block_reps = cfg.replications_per_block(batch_size)
        rows = {}
        for g in gammas:
            greedy, spec = [], []
            wanted = 1
            while g not in rows:
                for block in range(len(spec), wanted):
                    greedy.append(self.greedy(mode, serving, batch_size, block))
                    spec.append(self.speculative(mode, serving, batch_size, block, g, verification)
                                if isinstance(g, int) else
                                self.speculative_tree(mode, serving, batch_size, block, g,
                                                      verification))
                row = grid_point_metrics(concat_stats(greedy), concat_stats(spec), batch_size,
                                         cfg.confidence)
                half_width = (row["speedup_ci_high"] - row["speedup_ci_low"]) / 2
                if half_width <= cfg.ci_half_width or row["replications"] >= cfg.max_replications:
                    rows[g] = row
                wanted += blocks_to_add(half_width, cfg.ci_half_width, row["replications"],
                                        block_reps, cfg.max_replications)
        alpha_mean = float(self.requests(mode, batch_size, 0).alpha.mean())
        return [{"quality_mode": mode, "serving_mode": serving, "batch_size": batch_size,
                 "gamma": g if isinstance(g, int) else g.drafts,
                 **dict(zip(TREE_KEYS, (g, 1, g + 1) if isinstance(g, int) else
                            (g.steps, g.topk, g.tokens))),
                 "verification": verification, "alpha_mean": alpha_mean, **rows[g]} for g in gammas]


def blocks_to_add(half_width: float, target: float, replications: int, block_reps: int,
                  max_replications: int) -> int:
    """Further blocks a grid point needs for a CI half-width of `target`: the half-width shrinks
    as 1 / sqrt(replications), so n (half_width / target)^2 replications are needed, here with a
    20% margin (an estimate from few replications is rough), at least one block and no more than
    max_replications allow."""
    needed = 1.2 * replications * (half_width / target) ** 2 - replications
    room = -(-(max_replications - replications) // block_reps)
    return int(min(max(1, -(-needed // block_reps)), max(room, 1)))


def _points_job(cfg: StudyConfig, cost: CostModel, batch_size: int, mode: str, serving: str,
                verification: str) -> list[dict]:
    """The rows of one (batch size, mode, serving mode), in a fresh Sweep (an executor's task: the
    same rows as in a shared one, since every block has its own stream)."""
    return Sweep(cfg, cost).grid_points(mode, serving, batch_size, draft_shapes(cfg),
                                        verification)


def run_grid(cfg: StudyConfig, cost: CostModel, verification: str | None = None,
             progress=None, sweep: Sweep | None = None, executor=None) -> pd.DataFrame:
    """Sweep every (quality mode, serving mode, batch size, gamma) of cfg; one row per point.

    Pass the `sweep` of an earlier call with the same workload and cost model to reuse its
    requests and greedy runs. `executor` (src/executor.py, e.g. Dask): each (batch size, mode,
    serving mode) is one of its tasks instead (the rows are the same; rows are sorted by grid
    key either way)."""
    verification = verification or cfg.verification
    sweep = sweep or Sweep(cfg, cost)
    points = [(b, m, s) for b in cfg.batch_sizes for m in cfg.quality_modes
              for s in cfg.serving_modes]
    rows = []
    shapes = draft_shapes(cfg)
    if executor is not None:
        n = len(shapes)
        done = (lambda i, v, k, total: progress(k * n, total * n)) if progress else None
        for out in executor.map(_points_job, [(cfg, cost, b, m, s, verification)
                                              for b, m, s in points], on_done=done):
            rows += out
    for i, (b, m, s) in enumerate(points if executor is None else ()):
        rows += sweep.grid_points(m, s, b, shapes, verification)
        if progress:
            progress(len(rows), len(points) * len(shapes))
    df = pd.DataFrame(rows)
    order = {k: list(v)
             for k, v in (("quality_mode", cfg.quality_modes), ("serving_mode", cfg.serving_modes))}
    for key, values in order.items():
        df[key] = pd.Categorical(df[key], categories=values, ordered=True)
    df = df.sort_values(list(GRID_KEYS + TREE_KEYS), kind="stable").reset_index(drop=True)
    for key in order:
        df[key] = df[key].astype(str)
    return df


def comparison_config(cfg: StudyConfig) -> StudyConfig:
    """The lockstep-vs-ragged companion sweep: the two smallest gammas >= 2 (or the smallest)."""
    gammas = [g for g in cfg.gammas if g >= 2][:2] or list(cfg.gammas[:1])
    return replace(cfg, gammas=tuple(gammas), trees=())


def draft_shapes(cfg: StudyConfig) -> tuple:
    """The grid's draft shapes: the chains of cfg.gammas (ints), then cfg.trees (a chain listed
    there as G:1:G+1 runs as the chain gamma G, once)."""
    chains = list(cfg.gammas)
    chains += sorted({t.steps for t in cfg.trees if t.is_chain} - set(chains))
    return tuple(chains) + tuple(t for t in cfg.trees if not t.is_chain)


def progress_printer(quiet: bool, label: str = "grid"):
    """A run_grid `progress` callback: about ten lines on stderr, each with what is left and an
    estimate of the time it takes (None when quiet)."""
    if quiet:
        return None
    start = time.perf_counter()

    def progress(done, total):
        if done == total or done % max(1, total // 10) < done - progress.last:
            progress.last = done
            elapsed = time.perf_counter() - start
            left = (f", about {elapsed / done * (total - done):.0f} s left" if done < total
                    else ", done")
            stderr_line(f"  {label}: {done}/{total} grid points in {elapsed:.1f} s{left}")

    progress.last = 0
    return progress
