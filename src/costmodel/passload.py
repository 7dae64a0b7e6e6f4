"""Value types of the hardware cost model's per-step calls: PassLoad (what a pass's time depends
on) and StepBreakdown (one speculative step split into physics and engine overhead)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class StepBreakdown:
    """Times of one speculative step at a uniform batch (every sequence at the same context), ms,
    split into GPU physics and engine overhead (`HardwareCostModel.step_breakdown`)."""

    batch: int  # active sequences S
    gamma: int  # drafts per step
    context_len_tokens: int  # cached tokens per sequence before the step
    decode_physics_ms: float  # T_AR physics: one greedy target pass (1 position)
    decode_overhead_ms: float  # T_AR engine overhead
    verify_physics_ms: float  # T_V physics: one target pass over gamma + 1 positions
    verify_overhead_ms: float  # T_V engine overhead
    draft_physics_ms: float  # gamma x T_D physics: all gamma draft passes of the step
    draft_overhead_ms: float  # engine overhead of the gamma draft passes (CPU + catch-up)

    @property
    def decode_ms(self) -> float:
        return self.decode_physics_ms + self.decode_overhead_ms

    @property
    def verify_ms(self) -> float:
        return self.verify_physics_ms + self.verify_overhead_ms

    @property
    def draft_ms(self) -> float:
        return self.draft_physics_ms + self.draft_overhead_ms

    def speedup(self, tokens_per_step: float) -> float:
        """MagicDec's batched form: Omega T_AR / (gamma T_D + T_V), tokens_per_step = Omega."""
        return tokens_per_step * self.decode_ms / (self.draft_ms + self.verify_ms)


@dataclass(frozen=True)
class PassLoad:
    """What a pass's time depends on, per replication (mask calls) or per simulated step (totals).

    A pass costs the same for any sequences with the same count and summed context (every term
    of the model is linear in the per-sequence contexts), except the reads of a draft KV cache
    capped at b tokens, which need sum_i min(ctx_i + shift, b). From masks those are computed; in
    totals form the caller supplies them for the one gamma it prices.
    """

    n_seqs: np.ndarray  # active sequences
    sum_ctx: np.ndarray  # their summed context (tokens cached before the pass)
    max_seqs: int  # largest n_seqs the lookup tables must cover
    active: np.ndarray | None = None  # [R, B] mask and contexts, when known per sequence
    context: np.ndarray | None = None
    capped_mid_ctx: np.ndarray | None = None  # totals form: sum_i min(ctx_i + (gamma - 1) / 2, b)
    capped_start_ctx: np.ndarray | None = None  # totals form: sum_i min(ctx_i, b)
    # sequences whose host CPU the step waits on: the busiest scheduler's (an attention-DP
    # worker's rank, src/attention_dp/worker.py); None: all n_seqs (one scheduler)
    host_seqs: np.ndarray | None = None

    @property
    def cpu_seqs(self) -> np.ndarray:
        """Sequences the step's host CPU terms are priced over (host_seqs, else n_seqs)."""
        return self.n_seqs if self.host_seqs is None else self.host_seqs

    @classmethod
    def from_masks(cls, active, context_len_tokens) -> "PassLoad":
        return cls(np.count_nonzero(active, axis=1), (context_len_tokens * active).sum(axis=1),
                   active.shape[1], active, context_len_tokens)

    @classmethod
    def from_totals(cls, n_seqs, sum_ctx, capped_mid_ctx=None, capped_start_ctx=None) -> "PassLoad":
        n_seqs = np.asarray(n_seqs)
        return cls(n_seqs, np.asarray(sum_ctx), int(n_seqs.max(initial=0)),
                   capped_mid_ctx=capped_mid_ctx, capped_start_ctx=capped_start_ctx)

    def capped_ctx(self, budget: int, shift) -> np.ndarray:
        """sum over active sequences of min(ctx + shift, budget) (shift: scalar or [R])."""
        if self.active is not None:
            grown = self.context + (np.asarray(shift, dtype=float)).reshape(-1, 1)
            return (np.minimum(grown, budget) * self.active).sum(axis=1)
        given = self.capped_start_ctx if np.all(np.asarray(shift) == 0) else self.capped_mid_ctx
        if given is None:
            raise ValueError("a draft KV budget needs the capped context sums (src/serving.py "
                             "records them per step)")
        return given
