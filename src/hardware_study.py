"""Answers the hardware scenarios add: crossover batch sizes, gamma schedules, context effects.

Two sources feed them:

* the simulation (run.run_grid under a scenario's HardwareCostModel): speedups with confidence
  intervals on the scenario's grid of batch sizes and gammas;
* a steady-state closed form for dense sweeps over batch size and context length, where simulating
  every point would be too slow. Under continuous refill with every slot busy and ragged
  verification, a step advances every sequence, so (MagicDec, Chen et al. 2024, eq. 2, with an
  effective tokens-per-step for a mixture of requests)

      speedup(B, gamma, ctx) = Omega_eff(gamma) x T_AR(B, ctx) / (gamma T_D(B, ctx) + T_V(B, gamma, ctx))

  with Omega_eff = 1 / E[1 / E[K + 1](alpha)] over the mode's alphas: a request of L tokens needs
  L / E[K + 1](alpha) steps, so a slot's tokens per step is the harmonic mean over requests (equal
  mean lengths assumed). It ignores the drain at the end of a queue and treats every sequence as
  being at the same context; summary.txt reports how far it is from the simulation where both exist.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from src.acceptance import expected_tokens_per_step
from dataclasses import replace

from src.costmodel import CostModelInputError, EngineProfile


def effective_tokens_per_step(alphas: np.ndarray, gamma: int) -> float:
    """Omega_eff = 1 / mean(1 / E[K + 1](alpha)): tokens per step of a slot serving these requests."""
    return float(1.0 / np.mean(1.0 / expected_tokens_per_step(alphas, gamma)))


def step_times_ms(cost, batch_sizes, gammas, context_len_tokens: int) -> pd.DataFrame:
    """T_AR, gamma T_D and T_V (ms, physics + engine overhead) with every sequence at one context.

    One row per (batch, gamma); batch sizes whose KV cache does not fit are left out. Vectorised:
    every batch size is a row of one [R, max batch] activity mask.
    """
    rows = []
    for b in batch_sizes:
        try:
            cost.step_breakdown(int(b), int(max(gammas)), int(context_len_tokens))
        except CostModelInputError:
            continue  # does not fit at this batch and context
        rows.append(int(b))
    if not rows:
        return pd.DataFrame(columns=["batch_size", "gamma", "context_len_tokens", "t_ar_ms", "t_draft_ms", "t_verify_ms"])
    batches = np.asarray(rows)
    active = np.arange(batches.max())[None, :] < batches[:, None]  # [R, Bmax]
    ctx = np.full(active.shape, int(context_len_tokens))
    t_ar = cost.target_pass_time(active, 1, ctx)
    out = []
    for g in gammas:
        t_draft = cost.draft_passes_time(active, int(g), ctx)
        t_verify = cost.target_pass_time(active, int(g) + 1, ctx)
        out.append(pd.DataFrame({"batch_size": batches, "gamma": int(g), "context_len_tokens": int(context_len_tokens),
                                 "t_ar_ms": t_ar, "t_draft_ms": t_draft, "t_verify_ms": t_verify}))
    return pd.concat(out, ignore_index=True)


def steady_state_speedups(times: pd.DataFrame, omega_by_gamma: dict[int, float]) -> pd.Series:
    """speedup = Omega_eff(gamma) T_AR / (gamma T_D + T_V), row by row of step_times_ms."""
    omega = times.gamma.map(omega_by_gamma)
    return omega * times.t_ar_ms / (times.t_draft_ms + times.t_verify_ms)


def best_gamma(df: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Per group: the gamma with the highest speedup, or 0 (speculation off) if none beats 1.0."""
    best = df.loc[df.groupby(by, sort=True)["speedup"].idxmax()].copy()
    best["schedule_gamma"] = np.where(best.speedup > 1.0, best.gamma, 0)
    return best


def crossover_batch(batches: np.ndarray, speedups: np.ndarray) -> int | None:
    """Smallest batch size of the grid at which speculation is slower than greedy (speedup < 1)."""
    below = np.nonzero(np.asarray(speedups) < 1.0)[0]
    return int(np.asarray(batches)[below[0]]) if below.size else None


def schedule_ranges(batches: list[int], gammas: list[int], upper: int) -> dict[str, int]:
    """vLLM `num_speculative_tokens_per_batch_size` ranges from a gamma per grid batch size.

    Every integer batch b in [batches[0], upper] takes the gamma of the largest grid batch <= b;
    equal neighbours merge. Ranges are inclusive "lo-hi" strings; gamma 0 turns speculation off.
    """
    ranges: list[list[int]] = []
    for i, (b, g) in enumerate(zip(batches, gammas)):
        hi = batches[i + 1] - 1 if i + 1 < len(batches) else upper
        if ranges and ranges[-1][2] == g:
            ranges[-1][1] = hi
        else:
            ranges.append([b, hi, g])
    return {f"{lo}-{hi}": int(g) for lo, hi, g in ranges}


def schedule_gain(sim: pd.DataFrame, schedule_gamma_by_batch: dict[int, int], fixed_gamma: int) -> tuple[float, float]:
    """Throughput the schedule gains over a fixed gamma: (mean, max) over the grid's batch sizes of
    speedup(schedule) / speedup(fixed) - 1, where gamma 0 means greedy (speedup 1)."""
    ratios = []
    for b, g in schedule_gamma_by_batch.items():
        at_b = sim[sim.batch_size == b].set_index("gamma").speedup
        sched = 1.0 if g == 0 else at_b[g]
        fixed = 1.0 if fixed_gamma == 0 else at_b[fixed_gamma]
        ratios.append(sched / fixed - 1.0)
    return float(np.mean(ratios)), float(np.max(ratios))


def context_rules(best_by_batch_context: pd.DataFrame) -> list[tuple[int, int, int, int, int]]:
    """(batch lo, batch hi, context lo, context hi, gamma) rules from a best-gamma grid.

    Input rows: batch_size, context_len_tokens, schedule_gamma (where the KV cache fits). Within a
    batch size, neighbouring contexts with the same gamma merge into a range; then neighbouring
    batch sizes whose ranges are identical merge. Batch and context bounds are grid values.
    """
    per_batch = []
    for b, sub in best_by_batch_context.sort_values(["batch_size", "context_len_tokens"]).groupby("batch_size"):
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


# Cumulative engine-profile variants: each adds one mechanism of the profile on top of the previous,
# so the overhead of a step splits into what each mechanism costs (H6 of the summary).
OVERHEAD_PARTS = ("cpu", "draft_catchup", "batch_expansion", "attention_factor")


def overhead_variants(profile: EngineProfile) -> list[tuple[str, EngineProfile]]:
    """(part, profile with that part and the ones before it) for OVERHEAD_PARTS, in order: CPU and
    per-sequence work alone; + the draft's catch-up pass; + batch-expansion scoring; + the
    verification attention slowdown factor (= the full profile)."""
    cpu_only = replace(profile, draft_catchup_positions_per_seq=0, scoring_batch_expansion=False,
                       verification_attention_slowdown_factor=1.0)
    with_catchup = replace(cpu_only, draft_catchup_positions_per_seq=profile.draft_catchup_positions_per_seq)
    with_expansion = replace(with_catchup, scoring_batch_expansion=profile.scoring_batch_expansion)
    return [("cpu", cpu_only), ("draft_catchup", with_catchup), ("batch_expansion", with_expansion),
            ("attention_factor", profile)]


def overhead_variant_costs(scenario, profile: EngineProfile) -> list[tuple[str, object]]:
    """(part, the scenario's cost model under that cumulative variant) for overhead_variants."""
    return [(part, scenario.cost_model(variant)) for part, variant in overhead_variants(profile)]


def overhead_split_ms(variant_costs, batch: int, gamma: int, context: int) -> dict[str, float]:
    """Engine overhead of one speculative step (draft + verification), ms, split into OVERHEAD_PARTS;
    variant_costs from overhead_variant_costs."""
    split, previous = {}, 0.0
    for part, cost in variant_costs:
        bd = cost.step_breakdown(batch, gamma, context)
        total = bd.draft_overhead_ms + bd.verify_overhead_ms
        split[f"overhead_{part}_ms"] = total - previous
        previous = total
    return split
