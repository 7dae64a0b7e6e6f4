"""Closed-form step times and speedups of a hardware scenario, and a step's overhead by mechanism.

The steady-state closed form covers dense sweeps over batch size and context length, where
simulating every point (src/sweep.py) would be too slow. Under continuous refill with every slot
busy and ragged verification, a step advances every sequence, so (MagicDec, Chen et al. 2024,
eq. 2, with an effective tokens-per-step for a mixture of requests)

    speedup(B, g, ctx) = Omega_eff(g) T_AR(B, ctx) / (g T_D(B, ctx) + T_V(B, g, ctx)),  g = gamma

with Omega_eff = 1 / E[1 / E[K + 1](alpha)] over the mode's alphas: a request of L tokens needs
L / E[K + 1](alpha) steps, so a slot's tokens per step is the harmonic mean over requests (equal
mean lengths assumed). It ignores the drain at the end of a queue and treats every sequence as
being at the same context; summary.txt reports how far it is from the simulation where both exist.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from src.acceptance import expected_tokens_per_step_profile
from src.costmodel import CostModelInputError, EngineProfile


def effective_tokens_per_step(alphas: np.ndarray, gamma: int,
                              hazard_profile: np.ndarray | None = None) -> float:
    """Omega_eff = 1 / mean(1 / E[K + 1](alpha)): tokens per step of a slot serving these requests
    (per-position modes: E[K + 1] from the mode's hazard profile, src/acceptance.py)."""
    return float(1.0
                 / np.mean(1.0 / expected_tokens_per_step_profile(alphas, gamma, hazard_profile)))


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
        return pd.DataFrame(columns=["batch_size", "gamma", "context_len_tokens", "t_ar_ms",
                                     "t_draft_ms", "t_verify_ms"])
    batches = np.asarray(rows)
    active = np.arange(batches.max())[None, :] < batches[:, None]  # [R, Bmax]
    ctx = np.full(active.shape, int(context_len_tokens))
    t_ar = cost.target_pass_time(active, 1, ctx)
    out = []
    for g in gammas:
        t_draft = cost.draft_passes_time(active, int(g), ctx)
        t_verify = cost.target_pass_time(active, int(g) + 1, ctx)
        out.append(pd.DataFrame({"batch_size": batches, "gamma": int(g),
                                 "context_len_tokens": int(context_len_tokens),
                                 "t_ar_ms": t_ar, "t_draft_ms": t_draft, "t_verify_ms": t_verify}))
    return pd.concat(out, ignore_index=True)


def steady_state_speedups(times: pd.DataFrame, omega_by_gamma: dict[int, float]) -> pd.Series:
    """speedup = Omega_eff(gamma) T_AR / (gamma T_D + T_V), row by row of step_times_ms."""
    omega = times.gamma.map(omega_by_gamma)
    return omega * times.t_ar_ms / (times.t_draft_ms + times.t_verify_ms)


# Cumulative engine-profile variants: each adds one mechanism of the profile on top of the previous,
# so the overhead of a step splits into what each mechanism costs (H6 of the summary).
OVERHEAD_PARTS = ("cpu", "draft_catchup", "batch_expansion", "attention_factor")


def physics_only_variant(profile: EngineProfile) -> EngineProfile:
    """The profile without any overhead term: its implementation (kernel counts, attention kernel,
    CUDA graphs, all-reduce) with no CPU work, catch-up, batch expansion or attention factor."""
    zero = {f: 0.0 for f in ("step_cpu_fixed_ms", "step_cpu_per_seq_ms", "draft_pass_cpu_fixed_ms",
                             "draft_pass_cpu_per_seq_ms", "ngram_pass_cpu_ms",
                             "rejection_sampling_per_position_ms", "kv_bookkeeping_per_seq_ms")}
    return replace(profile, **zero, draft_catchup_positions_per_seq=0,
                   draft_first_pass_covers_verified=False, scoring_batch_expansion=False,
                   verification_attention_slowdown_factor=1.0)


def overhead_variants(profile: EngineProfile) -> list[tuple[str, EngineProfile]]:
    """(part, profile with that part and the ones before it) for OVERHEAD_PARTS, in order: CPU and
    per-sequence work alone (paid as far as the GPU does not hide it, where the engine overlaps
    the two); + the draft's catch-up (or first pass over the verified positions); + batch-expansion
    scoring; + the verification attention slowdown factor (= the full profile)."""
    cpu_only = replace(profile, draft_catchup_positions_per_seq=0, scoring_batch_expansion=False,
                       draft_first_pass_covers_verified=False,
                       verification_attention_slowdown_factor=1.0)
    with_catchup = replace(cpu_only,
                           draft_catchup_positions_per_seq=profile.draft_catchup_positions_per_seq,
                           draft_first_pass_covers_verified=profile.draft_first_pass_covers_verified)
    with_expansion = replace(with_catchup, scoring_batch_expansion=profile.scoring_batch_expansion)
    return [("cpu", cpu_only), ("draft_catchup", with_catchup), ("batch_expansion", with_expansion),
            ("attention_factor", profile)]


def overhead_variant_costs(scenario, profile: EngineProfile) -> list[tuple[str, object]]:
    """(part, the scenario's cost model under that cumulative variant) for overhead_variants."""
    return [(part, scenario.cost_model(variant)) for part, variant in overhead_variants(profile)]


def overhead_split_ms(variant_costs, batch: int, gamma: int, context: int) -> dict[str, float]:
    """Engine overhead of one speculative step (draft + verification), ms, split into
    OVERHEAD_PARTS; variant_costs from overhead_variant_costs."""
    split, previous = {}, 0.0
    for part, cost in variant_costs:
        bd = cost.step_breakdown(batch, gamma, context)
        total = bd.draft_overhead_ms + bd.verify_overhead_ms
        split[f"overhead_{part}_ms"] = total - previous
        previous = total
    return split
