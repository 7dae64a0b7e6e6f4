"""Gamma schedules from a hardware scenario's speedups: best gamma per batch size, crossover
batch sizes, vLLM `num_speculative_tokens_per_batch_size` ranges and what they gain, context rules.
"""
from __future__ import annotations

import json

import numpy as np
import pandas as pd


def crossover_batch(batches: np.ndarray, speedups: np.ndarray) -> int | None:
    """Smallest batch size of the grid at which speculation is slower than greedy (speedup < 1)."""
    below = np.nonzero(np.asarray(speedups) < 1.0)[0]
    return int(np.asarray(batches)[below[0]]) if below.size else None


def schedule_ranges(batches: list[int], gammas: list[int], upper: int) -> list[list[int]]:
    """vLLM `num_speculative_tokens_per_batch_size` entries from a gamma per grid batch size.

    Entries are `[low, high, K]` with inclusive batch ranges, the form vLLM's dynamic speculative
    decoding validates (vllm/v1/spec_decode/dynamic/utils.py: a non-empty list of 3-item entries,
    low >= 1, low <= high, K >= 0, sorted and non-overlapping, the first starting at 1). Every
    integer batch b in [1, upper] takes the gamma of the largest grid batch <= b (batches below the
    smallest grid batch take its gamma); equal neighbours merge; K = 0 turns speculation off.
    vLLM keeps the last entry's K for batches beyond `upper`.
    """
    ranges: list[list[int]] = []
    for i, (b, g) in enumerate(zip(batches, gammas)):
        lo = 1 if i == 0 else int(b)
        hi = int(batches[i + 1]) - 1 if i + 1 < len(batches) else int(upper)
        if ranges and ranges[-1][2] == g:
            ranges[-1][1] = hi
        else:
            ranges.append([lo, hi, int(g)])
    return ranges


def schedule_gain(sim: pd.DataFrame, schedule_gamma_by_batch: dict[int, int],
                  fixed_gamma: int) -> tuple[float, float]:
    """Throughput the schedule gains over a fixed gamma: (mean, max) over the grid's batch sizes of
    speedup(schedule) / speedup(fixed) - 1, where gamma 0 means greedy (speedup 1)."""
    batch, gamma = sim.batch_size.to_numpy(), sim.gamma.to_numpy()
    speedup = sim.speedup.to_numpy()
    ratios = []
    for b, g in schedule_gamma_by_batch.items():
        at_b = batch == b  # plain arrays: a pandas selection per batch size costs ~1 ms

        def at(k):
            [i] = np.flatnonzero(at_b & (gamma == k))  # KeyError's counterpart: exactly one row
            return speedup[i]

        sched = 1.0 if g == 0 else at(g)
        fixed = 1.0 if fixed_gamma == 0 else at(fixed_gamma)
        ratios.append(sched / fixed - 1.0)
    return float(np.mean(ratios)), float(np.max(ratios))


def context_rules(best_by_batch_context: pd.DataFrame) -> list[tuple[int, int, int, int, int]]:
    """(batch lo, batch hi, context lo, context hi, gamma) rules from a best-gamma grid.

    Input rows: batch_size, context_len_tokens, schedule_gamma (where the KV cache fits). Within a
    batch size, neighbouring contexts with the same gamma merge into a range; then neighbouring
    batch sizes whose ranges are identical merge. Batch and context bounds are grid values.
    """
    per_batch = []
    for b, sub in best_by_batch_context.sort_values(["batch_size",
                                                     "context_len_tokens"]).groupby("batch_size"):
        segments = []
        for c, g in zip(sub.context_len_tokens, sub.schedule_gamma):
            if segments and segments[-1][2] == g:
                segments[-1][1] = c
            else:
                segments.append([c, c, int(g)])
        per_batch.append((int(b), [tuple(s) for s in segments]))
    rules, i = [], 0
    while i < len(per_batch):
        j = i
        while j + 1 < len(per_batch) and per_batch[j + 1][1] == per_batch[i][1]:
            j += 1
        rules += [(per_batch[i][0], per_batch[j][0], lo, hi, g) for lo, hi, g in per_batch[i][1]]
        i = j + 1
    return rules


def resolved_gammas(grid: pd.DataFrame) -> pd.DataFrame:
    """The schedule's gamma per batch size of one (engine, quality mode, serving mode) grid, with
    a switch only where the difference is resolved.

    At each batch size (ascending) the candidates are the gammas whose speedup CI overlaps the
    best gamma's (ci_high >= the best's ci_low; greedy, gamma 0, counts with speedup 1 and no
    width). The previous batch size's gamma is kept while it is a candidate; otherwise (and at the
    first batch size) the smallest candidate is taken. The best is the highest point estimate, or
    gamma 0 where none beats greedy (speedup <= 1), as in metrics.best_gamma. Grid points have
    independent random streams, so two non-overlapping 95% CIs mean a resolved difference.

    One row per batch size: batch_size, gamma (the schedule's), best_gamma, and the speedup with
    CI of both (speedup, speedup_ci_low, speedup_ci_high; best_speedup, best_ci_low, best_ci_high).
    """
    rows, previous = [], None
    cols = ("speedup", "speedup_ci_low", "speedup_ci_high")
    batch, gamma = grid.batch_size.to_numpy(), grid.gamma.to_numpy()
    values = {c: grid[c].to_numpy(dtype=float) for c in cols}
    for b in np.unique(batch):  # plain arrays (pandas per batch size cost ~1 ms a selection)
        at_b = np.flatnonzero(batch == b)
        order = at_b[np.argsort(gamma[at_b], kind="stable")]
        # greedy (gamma 0, speedup 1, no width) and the grid's gammas, ascending
        g = np.concatenate([[0], gamma[order]])
        cand = {c: np.concatenate([[1.0], values[c][order]]) for c in cols}
        top = int(np.argmax(cand["speedup"]))  # the first of equal maxima, as idxmax
        best = top if cand["speedup"][top] > 1.0 else 0  # a position in g (0: greedy)
        within = g[cand["speedup_ci_high"] >= cand["speedup_ci_low"][best]]
        kept = previous if previous in within else int(within.min())
        k = int(np.flatnonzero(g == kept)[0])
        rows.append({"batch_size": int(b), "gamma": kept, "best_gamma": int(g[best]),
                     **{c: cand[c][k] for c in cols},
                     "best_speedup": cand["speedup"][best],
                     "best_ci_low": cand["speedup_ci_low"][best],
                     "best_ci_high": cand["speedup_ci_high"][best]})
        previous = kept
    return pd.DataFrame(rows)


SCHEDULE_COLUMNS = ("engine_profile", "quality_mode", "serving_mode", "batch_size", "gamma",
                    "speedup", "speedup_ci_low", "speedup_ci_high")


def schedules(sim: pd.DataFrame) -> list[dict]:
    """One vLLM schedule per (engine, quality mode, serving mode) from resolved_gammas, with its
    gains and the batch sizes where it keeps a gamma within the CI of the best."""
    # only the columns read below: a study's table has ~100 more, which every row selection of
    # the loops would copy (the same numbers, several times faster)
    sim = sim[[c for c in SCHEDULE_COLUMNS if c in sim.columns]]
    out = []
    for (engine, mode,
         serving), grid in sim.groupby(["engine_profile", "quality_mode", "serving_mode"],
                                       sort=False):
        resolved = resolved_gammas(grid)
        batches, gammas = resolved.batch_size.tolist(), resolved.gamma.tolist()
        by_batch = dict(zip(batches, gammas))
        mean_speedup = grid.groupby("gamma").speedup.mean()
        best_fixed = int(mean_speedup.idxmax())
        gain_best = schedule_gain(grid, by_batch, best_fixed)
        gain_two = schedule_gain(grid, by_batch, 2) if 2 in set(grid.gamma) else None
        out.append({"engine_profile": engine, "quality_mode": mode, "serving_mode": serving,
                    "ranges": schedule_ranges(batches, gammas, batches[-1]),
                    "max_gamma": max(gammas), "best_fixed_gamma": best_fixed,
                    "gain_vs_best_fixed": gain_best,
                    "gain_vs_gamma_2": gain_two,
                    "within_ci": resolved[resolved.gamma != resolved.best_gamma]})
    return out


def vllm_speculative_config(schedule: dict) -> dict | None:
    """The schedule as the two keys of vLLM's `--speculative-config` JSON that set the speculation
    depth (the draft itself is named by the config's "model"/"method" keys, which the user adds).

    `num_speculative_tokens` is the largest K (vLLM requires it > 0 and caps every entry at it);
    None when no gamma beats greedy at any batch size: then speculation should stay off.
    """
    if schedule["max_gamma"] <= 0:
        return None
    return {"num_speculative_tokens": int(schedule["max_gamma"]),
            "num_speculative_tokens_per_batch_size": schedule["ranges"]}


def vllm_config_json(schedule: dict) -> str:
    """vllm_speculative_config as one line of JSON, or a sentence when speculation never pays."""
    cfg = vllm_speculative_config(schedule)
    if cfg is None:
        return ("speculation slower than greedy at every batch size: leave --speculative-config "
                "unset")
    return json.dumps(cfg)
