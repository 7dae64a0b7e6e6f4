"""Mixed forward passes: prompt-prefill chunks beside decode/verification positions.

A continuous-batching engine runs, in one forward pass, the new positions of every scheduled
sequence: one (decode) or gamma + 1 (verification) per running sequence, and a chunk of its prompt
per sequence still in prefill. `mixed_pass_physics_ms` prices such a pass from its sums, with the
roofline coefficients of `pass_coefficients` (roofline.py):

    T = new positions in the pass; L = positions whose logits are computed (every decode and
    verification position, the last position of a chunk that completes its prompt);
    C = cached tokens read (sum of the sequences' contexts before the pass);
    P = attention (query, key) pairs, n c + n (n + 1) / 2 per sequence (`causal_pairs`).

    time = sum over layer GEMMs of pnorm(weights + act(T), flops(T)) + elementwise(T) + kernels
         + LM head over L rows + attention pnorm(KV bytes of C + T, 4 (H/TP) d P FLOPs)
         + all-reduces of T rows

For S sequences of t positions each, all sampled, it is exactly the GPU physics of
`HardwareCostModel.target_pass_parts`. A batch of B prompts of n tokens with an empty cache
(T = B n, L = B, C = 0, P = B n (n + 1) / 2) is a prefill-only step, what the H200 prefill
measurements shipped with the calibration data time.
"""

from __future__ import annotations

import numpy as np

from src.costmodel.roofline import PassCoefficients


def _pnorm(a, b, p):
    return (a**p + b**p) ** (1.0 / p)


def causal_pairs(new_tokens, cached_tokens):
    """Attention pairs of n new positions over c cached ones (causal within the chunk):
    n c + n (n + 1) / 2."""
    n = np.asarray(new_tokens, dtype=float)
    return n * np.asarray(cached_tokens, dtype=float) + n * (n + 1) * 0.5


def mixed_pass_physics_ms(
    c: PassCoefficients, tokens, logits_rows, cached_tokens, attention_pairs
) -> np.ndarray:
    """GPU time (ms) of one forward pass given by its sums (module docstring); 0 where T = 0."""
    T, L, C, P = np.broadcast_arrays(
        *(np.asarray(x, dtype=float) for x in (tokens, logits_rows, cached_tokens, attention_pairs))
    )
    p = c.sharpness_p
    layer = c.gemm_selector[0] > 0
    total = np.zeros(T.shape)
    for g in range(c.gemm_weight_s.size):  # one roofline per GEMM kind
        rows = T if layer[g] else L
        total += _pnorm(
            c.gemm_weight_s[g] + c.gemm_mem_per_token_s[g] * rows,
            c.gemm_compute_per_token_s[g] * rows,
            p,
        )
    total += c.layer_elementwise_per_token_s * T + c.layer_fixed_s
    total += c.head_elementwise_per_token_s * L + c.head_fixed_s
    attn_mem = c.attn_read_per_ctx_token_s * (C + T) + c.attn_per_new_token_s * T
    total += _pnorm(attn_mem, c.attn_compute_per_pair_s * P, p) + c.attn_fixed_s
    total += c.comm_fixed_s + c.comm_per_token_s * T
    return np.where(T > 0, total * 1e3, 0.0)
