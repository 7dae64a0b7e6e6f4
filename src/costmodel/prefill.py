"""Mixed forward passes: prompt-prefill chunks beside decode/verification positions.

A continuous-batching engine runs, in one forward pass, the new positions of every scheduled
sequence: one (decode) or t = gamma + 1 (verification) per running sequence, and a chunk of its
prompt per sequence still in prefill. `mixed_pass_physics_ms` prices such a pass with the pieces of
roofline.py (so it follows whatever the GEMM, attention and all-reduce models are):

    GEMMs (gemm_terms_s)  over T = S t + sum of chunk tokens rows; the LM head over the rows whose
                          logits are computed (every decode/verification position and the last
                          position of each chunk that completes its prompt)
    attention (attention_s) of the decode part (S sequences, t positions, context sum C) plus that
                          of the chunks, priced as P chunks of their mean length over their context
                          sum (exact for equal chunks; causal within each chunk)
    elementwise, kernel fixed times, verification kernels (a verification or a chunk of more than
                          one position), all-reduces of T rows

For S sequences of t positions and no chunk it is the physics of
`HardwareCostModel.target_pass_parts`; for P equal prompts and no decode part it is that of
`HardwareCostModel.prefill_parts` (tests/test_costmodel_prefill.py pins both).
"""
from __future__ import annotations

import numpy as np

from src.costmodel.roofline import (
    PassCoefficients,
    _pnorm,
    attention_s,
    gemm_terms_s,
    routed_gemm_terms_s,
)
from src.costmodel.variants import mixed_expert_rows_and_multiplicity


def mixed_pass_physics_ms(c: PassCoefficients, dec_seqs, dec_positions, dec_context_sum,
                          chunk_seqs=0, chunk_tokens=0, chunk_context_sum=0,
                          chunk_logits=0) -> np.ndarray:
    """GPU time (ms) of one mixed pass (module docstring); 0 where the pass has no position.

    All arguments broadcast together: dec_seqs decoding sequences of dec_positions positions over
    dec_context_sum cached tokens; chunk_seqs prompt chunks of chunk_tokens positions in all over
    chunk_context_sum cached tokens, chunk_logits of them completing their prompt.
    """
    S, t, C, P, N, Cp, Lp = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (
        dec_seqs, dec_positions, dec_context_sum, chunk_seqs, chunk_tokens, chunk_context_sum,
        chunk_logits)))
    return _mixed_ms(c, S, t, C, P, N, Cp, Lp, decode_attention_s(c, S, t, C))


def mixed_pass_extra_ms(c: PassCoefficients, dec_seqs, dec_positions, dec_context_sum,
                        chunk_seqs, chunk_tokens, chunk_context_sum, chunk_logits) -> np.ndarray:
    """What the chunks add to the decode part's pass: mixed_pass_physics_ms with the chunks minus
    mixed_pass_physics_ms without them (the same numbers; the decode part's attention, which both
    passes share, is computed once). Arguments as mixed_pass_physics_ms's."""
    S, t, C, P, N, Cp, Lp = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (
        dec_seqs, dec_positions, dec_context_sum, chunk_seqs, chunk_tokens, chunk_context_sum,
        chunk_logits)))
    attention = decode_attention_s(c, S, t, C)
    zero = np.zeros(S.shape)
    return (_mixed_ms(c, S, t, C, P, N, Cp, Lp, attention)
            - _mixed_ms(c, S, t, C, zero, zero, zero, zero, attention))


def decode_attention_s(c: PassCoefficients, S, t, C):
    """Attention of a mixed pass's decode part, s ([R] float arrays; None: no decode part)."""
    if not np.any(S > 0):
        return None  # adds 0 to every row
    return np.where(S > 0, attention_s(c, S, np.maximum(t, 1), C), 0.0)


def _mixed_ms(c: PassCoefficients, S, t, C, P, N, Cp, Lp, dec_attention):
    """mixed_pass_physics_ms of float arrays of one shape, the decode part's attention given."""
    T = S * t + N
    L = S * t + Lp
    G = len(c.gemm_weight_s)
    rows = np.empty((G,) + T.shape)  # T rows for every GEMM, L for the LM head
    rows[:] = T
    rows[c.head_gemm_index] = L
    if c.moe is not None:  # routed experts as pass_components_s prices them, over the pass's runs
        runs = np.where(t > 0, S, 0.0) + P  # each decoding sequence and each chunk: one run
        expert_rows, waited, _ = mixed_expert_rows_and_multiplicity(c.moe, runs, T)
        mem_g, comp_g = routed_gemm_terms_s(c, rows, expert_rows, waited)
    else:
        mem_g, comp_g = gemm_terms_s(c, rows)
    pnorm = _pnorm(mem_g, comp_g, c.sharpness_p)
    # np.tensordot(c.gemm_selector, pnorm, axes=1), without its reshaping calls: the same dot
    gemm = np.dot(c.gemm_selector, pnorm.reshape(G, -1)).reshape((2,) + T.shape)
    total = gemm[0] + gemm[1]
    chunk_len = N / np.maximum(P, 1)
    # the extra kernels of a pass in which some sequence scores more than one position (a
    # verification, or a prompt chunk), as in prefill_parts
    multi = ((S > 0) & (t > 1)) | ((P > 0) & (chunk_len > 1))
    total += c.layer_elementwise_per_token_s * T + c.layer_fixed_s + c.verify_fixed_s * multi
    total += c.head_elementwise_per_token_s * L + c.head_fixed_s
    if dec_attention is not None:
        total += dec_attention
    if np.any(P > 0):  # else it adds 0 to every row
        total += np.where(P > 0, attention_s(c, np.maximum(P, 1), np.maximum(chunk_len, 1), Cp,
                                             prefill=True), 0.0)
    total += c.attn_fixed_s
    if c.comm_custom is None:
        total += c.comm_fixed_s + c.comm_per_token_s * T
    else:
        total += c.comm_n_allreduce * c.comm_custom.time_s(T * c.comm_bytes_per_token)
    return np.where(T > 0, total * 1e3, 0.0)
