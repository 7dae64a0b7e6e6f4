"""Step times of a serving engine's mixed steps: decode/verification plus chunked prefill.

A continuous-batching engine (vLLM V1, SGLang) runs, in one forward pass, the decode or verification
positions of the running sequences and the prompt chunks of the sequences still in prefill. The
hardware cost model prices the decode/verification part (`HardwareCostModel.target_pass_parts`,
physics plus the engine profile's overheads); this module adds what the prefill chunks cost on top:

    step = target_pass(decode part) + [mixed_physics(decode + chunks) - mixed_physics(decode)]
           + CPU per scheduled prefill sequence (+ the step's fixed CPU when nothing decodes)

with mixed_physics the roofline of one forward pass given by its sums
(`src.costmodel.prefill.mixed_pass_physics_ms`). A draft model or EAGLE head runs the same chunks to
fill its own KV cache (`draft_prefill_ms`).
"""

from __future__ import annotations

from dataclasses import fields

import numpy as np

from src.costmodel import HardwareCostModel, PassCoefficients, memory_usable_bytes
from src.costmodel.hardware import PassLoad
from src.costmodel.prefill import mixed_pass_extra_ms, mixed_pass_physics_ms


class StepTimer:
    """Step times of one deployment (target, draft, GPU, engine profile) for the serving engine.

    `speculative` False is a deployment without a draft: no draft passes, no draft prefill.
    All methods take per-row arrays (one row per simulated replication) and return ms per row.
    """

    def __init__(self, cost: HardwareCostModel, speculative: bool):
        self.cost = cost
        self.speculative = speculative
        self.engine = cost.engine
        self.target_c: PassCoefficients = cost._target_c
        self.draft_c: PassCoefficients | None = cost._draft_c if speculative else None

    def decode_ms(self, decoding: np.ndarray, gamma: np.ndarray, context: np.ndarray):
        """Target pass over gamma + 1 positions of every decoding slot, plus gamma draft passes.

        gamma = 0 is a plain decode step with no draft pass: a draft network that skipped steps
        reads the tokens committed meanwhile in the first pass of its next speculative step (as
        vLLM V1's EAGLE proposer does with the target's hidden states), a wider pass that, being
        memory-bound, costs about what a one-position pass costs; the model charges nothing extra.

        decoding [R, B] bool, gamma [R] int, context [R, B] cached tokens. Returns (target_ms,
        draft_ms), each [R].
        """
        return self._step_ms(PassLoad.from_masks(decoding, context), gamma, True)

    def _step_ms(self, load: PassLoad, gamma, check_fits: bool):
        """(target_ms, draft_ms) of the step of `load` at gamma: the cost model's step_ms (every
        decode path of this timer goes through here; an attention-DP worker's timer prices its
        ranks here, src/online/dp_steptime.py)."""
        return self.cost.step_ms(load, gamma, self.speculative, check_fits)

    @property
    def needs_slot_contexts(self) -> bool:
        """Whether a step's time needs every sequence's context, not just their count and sum
        (a draft KV cache capped at a budget reads min(context, budget) per sequence)."""
        return self.cost.draft_kv_budget_tokens is not None

    def decode_ms_totals(self, n_decode, decode_context_sum, gamma, max_seqs: int,
                         decoding=None, context=None, check_fits: bool = True):
        """decode_ms from the per-row totals: n_decode decoding sequences (count of `decoding`)
        over decode_context_sum cached tokens (sum of context x decoding); the same numbers.
        max_seqs: the slot width of the rows; decoding / context: the [R, B] masks, needed only
        where needs_slot_contexts. check_fits False: the caller ran check_fits (for rows at gamma
        0 of another timer with the same target pass, see same_target_pass, that timer's)."""
        if self.needs_slot_contexts:
            load = PassLoad(n_decode, decode_context_sum, max_seqs, decoding, context)
        else:
            load = PassLoad(n_decode, decode_context_sum, max_seqs)
        return self._step_ms(load, gamma, check_fits)

    def check_fits(self, n_decode, decode_context_sum, gamma) -> None:
        """decode_ms's memory check: CostModelInputError where weights + KV cache do not fit."""
        self.cost.check_step_fits(PassLoad(n_decode, decode_context_sum, 0), gamma)

    def same_target_pass(self, other: "StepTimer") -> bool:
        """Whether `other` prices every step at gamma 0 exactly as this timer does: the same
        engine profile and target-pass coefficients (a deployment with and one without the
        draft). Such rows can share one decode_ms_totals call of the timer with the draft
        (their draft time is 0; only the memory check differs: check_fits per timer)."""
        a, b = self.cost, other.cost
        if a.engine != b.engine or a.time_unit != b.time_unit:
            return False
        for f in fields(PassCoefficients):
            x, y = getattr(a._target_c, f.name), getattr(b._target_c, f.name)
            if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
                same = (isinstance(x, np.ndarray) and isinstance(y, np.ndarray)
                        and x.dtype == y.dtype and np.array_equal(x, y))
            else:
                try:
                    same = bool(x == y)
                except (TypeError, ValueError):  # something holding arrays: do not share
                    same = False
            if not same:
                return False
        return True

    def decode_ms_each_gamma(self, decoding: np.ndarray, context: np.ndarray, gammas):
        """decode_ms of every row at every gamma of `gammas` ([G] ints): (target_ms, draft_ms),
        each [R G], row r's G values in order. The same numbers as decode_ms on the rows repeated
        G times (the per-row sums are taken once: a policy weighing every gamma calls this).
        No memory check: a policy may weigh a gamma whose lookahead slots the KV cache could not
        hold for every sequence; for the gamma it picks, the engine preempts until they fit
        (src/online/engine.py, step 2), as vLLM's scheduler does."""
        gammas = np.asarray(gammas)
        k = gammas.size
        load = PassLoad.from_masks(decoding, context)
        n_seqs, sum_ctx = np.repeat(load.n_seqs, k), np.repeat(load.sum_ctx, k)
        if not self.needs_slot_contexts:
            load = PassLoad(n_seqs, sum_ctx, load.max_seqs)
        else:  # a capped draft cache needs every sequence's context
            load = PassLoad(n_seqs, sum_ctx, load.max_seqs, np.repeat(decoding, k, axis=0),
                            np.repeat(context, k, axis=0))
        return self._step_ms(load, np.tile(gammas, decoding.shape[0]), False)

    def prefill_extra_ms(self, n_decode, gamma, decode_context_sum, chunk_seqs, chunk_tokens,
                         chunk_context_sum, chunk_logits) -> np.ndarray:
        """What the prefill chunks of a step add to its decode/verification pass (module docstring).

        Per row: n_decode sequences verifying gamma + 1 positions over decode_context_sum cached
        tokens; chunk_seqs prompt chunks of chunk_tokens new positions in all over
        chunk_context_sum cached tokens, chunk_logits of them finishing their prompt. Includes the
        draft network's prefill of the same chunks.
        """
        t = np.asarray(gamma) + 1
        c = self.target_c
        extra = mixed_pass_extra_ms(c, n_decode, t, decode_context_sum, chunk_seqs, chunk_tokens,
                                    chunk_context_sum, chunk_logits)
        e = self.engine
        extra = extra + np.where(chunk_seqs > 0, e.step_cpu_per_seq_ms * chunk_seqs
                                 + np.where(n_decode > 0, 0.0, e.step_cpu_fixed_ms), 0.0)
        if self.draft_c is not None:  # the draft network fills its KV cache with the same chunks
            zero = np.zeros(np.shape(chunk_seqs))  # no decode part (arrays: no broadcasting)
            extra = extra + mixed_pass_physics_ms(self.draft_c, zero, zero + 1, zero, chunk_seqs,
                                                  chunk_tokens, chunk_context_sum, chunk_logits)
        return extra

    def prefill_ms(self, batch: int, prompt_tokens: int) -> float:
        """A prefill-only step: `batch` prompts of `prompt_tokens` tokens each, empty cache, the LM
        head on each prompt's last position (what the H200 prefill measurements time)."""
        return float(self.prefill_extra_ms(0, 0, 0.0, batch, batch * prompt_tokens, 0.0, batch))


def kv_capacity_tokens(cost: HardwareCostModel, max_num_seqs: int) -> int:
    """Tokens of KV cache (target + draft) the GPU holds after the weights and the reserve, with
    `max_num_seqs` sequences' fixed per-sequence draft cache (a capped draft KV) set aside.

    From the cost model's own memory check: need(b, n) = weights + b (n per_token + per_seq).
    """
    usable = memory_usable_bytes(cost.gpu, cost.params) / 1e9
    base = cost.kv_fits(1, 0)[1]  # GB: weights + one sequence's fixed draft cache
    per_token = (cost.kv_fits(1, 1_000_000)[1] - base) / 1e6
    per_seq = base - cost.kv_fits(0, 0)[1]
    free = usable - cost.kv_fits(0, 0)[1] - per_seq * max_num_seqs
    return max(int(free / per_token), 0)
