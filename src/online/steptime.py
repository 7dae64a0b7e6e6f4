"""Step times of a serving engine's mixed steps: decode/verification plus chunked prefill.

A continuous-batching engine (vLLM V1, SGLang) runs, in one forward pass, the decode or verification
positions of the running sequences and the prompt chunks of the sequences still in prefill. The
hardware cost model prices the decode/verification part (`HardwareCostModel.target_pass_parts`,
physics plus the engine profile's overheads); this module adds what the prefill chunks cost on top:

    step = target_pass(decode part) + [mixed_physics(decode + chunks) - mixed_physics(decode)]
           + CPU per scheduled prefill sequence (+ the step's fixed CPU when nothing decodes)

with mixed_physics the roofline of one forward pass over a set of sequences given by sums:

    tokens T = sum of new positions; logits rows = positions whose next token is sampled
    (every decode/verification position, one per prefill chunk that completes its prompt);
    cached tokens read C = sum of the contexts before the pass;
    attention pairs P = sum over sequences of n_i c_i + n_i (n_i + 1) / 2
    (n_i new positions over c_i cached tokens, causal within the chunk).

GEMMs see T rows (the LM head only the logits rows), attention reads C + T cached/new keys and does
4 (H/TP) d FLOPs per pair, all with the cost model's own roofline coefficients
(`src.costmodel.pass_coefficients`). A draft model or EAGLE head runs the same chunk to fill its
own KV cache (`draft_prefill_ms`).
"""
from __future__ import annotations

import numpy as np

from src.costmodel import HardwareCostModel, PassCoefficients, memory_usable_bytes


def _pnorm(a, b, p):
    return (a**p + b**p) ** (1.0 / p)


def mixed_pass_physics_ms(c: PassCoefficients, tokens, logits_rows, cached_tokens,
                          attention_pairs) -> np.ndarray:
    """GPU time (ms) of one forward pass given by its sums (module docstring); 0 where tokens = 0.

    For S sequences of t positions each, every one sampled (logits_rows = T), this equals the cost
    model's attention-free table plus its attention term, i.e. the physics of
    `HardwareCostModel.target_pass_parts`.
    """
    T, L, C, P = np.broadcast_arrays(*(np.asarray(x, dtype=float)
                                       for x in (tokens, logits_rows, cached_tokens,
                                                 attention_pairs)))
    p = c.sharpness_p
    layer = c.gemm_selector[0] > 0
    total = np.zeros(T.shape)
    for g in range(c.gemm_weight_s.size):  # one roofline per GEMM kind
        rows = T if layer[g] else L
        total += _pnorm(c.gemm_weight_s[g] + c.gemm_mem_per_token_s[g] * rows,
                        c.gemm_compute_per_token_s[g] * rows, p)
    total += c.layer_elementwise_per_token_s * T + c.layer_fixed_s
    total += c.head_elementwise_per_token_s * L + c.head_fixed_s
    attn_mem = c.attn_read_per_ctx_token_s * (C + T) + c.attn_per_new_token_s * T
    total += _pnorm(attn_mem, c.attn_compute_per_pair_s * P, p) + c.attn_fixed_s
    total += c.comm_fixed_s + c.comm_per_token_s * T
    return np.where(T > 0, total * 1e3, 0.0)


def causal_pairs(new_tokens, cached_tokens):
    """Attention (query, key) pairs of n new positions over c cached ones: n c + n (n + 1) / 2."""
    n = np.asarray(new_tokens, dtype=float)
    return n * np.asarray(cached_tokens, dtype=float) + n * (n + 1) * 0.5


class StepTimer:
    """Step times of one deployment (target, draft, GPU, engine profile) for the serving engine.

    `speculative` False is a deployment without a draft: no draft passes, no draft prefill.
    All methods take per-row arrays (one row per simulated replication) and return ms per row.
    """

    def __init__(self, cost: HardwareCostModel, speculative: bool):
        self.cost = cost
        self.speculative = speculative
        self.engine = cost.engine_profile
        self.target_c: PassCoefficients = cost._target_c
        self.draft_c: PassCoefficients | None = cost._draft_c if speculative else None

    def decode_ms(self, decoding: np.ndarray, gamma: np.ndarray, context: np.ndarray):
        """Target pass over gamma + 1 positions of every decoding slot, plus the draft work:
        gamma draft passes where gamma > 0; where gamma = 0 in a deployment with a draft network,
        one one-position draft pass that feeds it the committed token (its KV cache stays whole).

        decoding [R, B] bool, gamma [R] int, context [R, B] cached tokens. Returns (target_ms,
        draft_ms), each [R].
        """
        gamma = np.asarray(gamma)
        physics, overhead = self.cost.target_pass_parts(decoding, gamma + 1, context)
        target = physics + overhead
        if not self.speculative:
            return target, np.zeros_like(target)
        if self.draft_c is None:  # n-gram proposer: no network to keep in sync
            draft = self.cost.draft_passes_time(decoding, gamma, context)
        else:
            draft = self.cost.draft_passes_time(decoding, np.maximum(gamma, 1), context)
        return target, draft

    def prefill_extra_ms(self, n_decode, gamma, decode_context_sum, chunk_tokens, chunk_logits,
                         chunk_cached, chunk_pairs, n_chunks) -> np.ndarray:
        """What the prefill chunks of a step add to its decode/verification pass (module docstring).

        Per row: n_decode sequences verifying gamma + 1 positions over decode_context_sum cached
        tokens; n_chunks prompt chunks with chunk_tokens new positions, chunk_logits of which are
        sampled (chunks that finish their prompt), over chunk_cached cached tokens with chunk_pairs
        attention pairs (`causal_pairs`). Includes the draft network's prefill of the same chunks.
        """
        t = np.asarray(gamma) + 1
        dec_tokens = n_decode * t
        dec_pairs = t * decode_context_sum + n_decode * t * (t + 1) * 0.5
        c = self.target_c
        extra = (mixed_pass_physics_ms(c, dec_tokens + chunk_tokens, dec_tokens + chunk_logits,
                                       decode_context_sum + chunk_cached, dec_pairs + chunk_pairs)
                 - mixed_pass_physics_ms(c, dec_tokens, dec_tokens, decode_context_sum, dec_pairs))
        e = self.engine
        extra = extra + np.where(n_chunks > 0, e.step_cpu_per_seq_ms * n_chunks
                                 + np.where(n_decode > 0, 0.0, e.step_cpu_fixed_ms), 0.0)
        return extra + self.draft_prefill_ms(chunk_tokens, chunk_logits, chunk_cached, chunk_pairs)

    def draft_prefill_ms(self, chunk_tokens, chunk_logits, chunk_cached, chunk_pairs):
        """The draft network's forward pass over the step's prompt chunks (0 without one)."""
        if self.draft_c is None:
            return np.zeros(np.shape(chunk_tokens))
        return mixed_pass_physics_ms(self.draft_c, chunk_tokens, chunk_logits, chunk_cached,
                                     chunk_pairs)

    def prefill_ms(self, batch: int, prompt_tokens: int) -> float:
        """A prefill-only step: `batch` prompts of `prompt_tokens` tokens each, empty cache, the LM
        head on each prompt's last position (what the H200 prefill measurements time)."""
        extra = self.prefill_extra_ms(0, 0, 0.0, batch * prompt_tokens, batch, 0.0,
                                      batch * causal_pairs(prompt_tokens, 0), batch)
        return float(extra)


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
