"""Fitted attention kernels (src/costmodel/attention.py) for the compiled step prices: the
kernel's tiles and waves (`kernel_attention_layer_s`, FlashAttention-2's `fa2_num_splits`) for
one pass, as scalar numba code, on parameters `pack_kernels` reads from the cost model's
`AttentionKernelModel`s. src/online/step_prices.py takes the fastest kernel of a pass, as
`HardwareCostModel._attention_pnorm_ms` and `roofline.attention_s` do."""

from __future__ import annotations

import numpy as np

from src.compiled_cache import compiled_callee  # (before the first njit: the cache's stamp)
from src.costmodel.attention import ATTENTION_SHARPNESS_P, MAX_SPLITS

(K_BLOCK_M, K_SPLIT_BLOCK_M, K_CTAS, K_LAYERS, K_HEADS_KV, K_GROUP, K_HEAD_DIM, K_SMS, K_FLOPS,
 K_BYTES, K_COMPUTE_EFF, K_BANDWIDTH_EFF, K_SOFTMAX, K_P) = range(14)
N_KERNEL = 14


def pack_kernels(kernels) -> np.ndarray:
    """[K, N_KERNEL] parameters of a network's fitted kernels (AttentionKernelModel tuple)."""
    out = np.zeros((len(kernels), N_KERNEL))
    for i, k in enumerate(kernels):
        s = k.shape
        out[i] = (s.block_m, s.split_block_m, s.ctas_per_sm, k.n_layers, k.heads_kv, k.group,
                  k.head_dim, k.sm_count, k.peak_flops_per_s, k.peak_bytes_per_s,
                  k.compute_efficiency, k.bandwidth_efficiency, k.softmax_flops_per_pair,
                  ATTENTION_SHARPNESS_P)
    return out


@compiled_callee
def _block_n(head_dim):
    """attention.fa2_block_n."""
    return 256.0 if head_dim <= 64 else (128.0 if head_dim <= 128 else 64.0)


@compiled_callee
def fa2_splits(units, n_blocks, sm_count):
    """attention.fa2_num_splits for one unit count."""
    slots = 2.0 * sm_count
    if units >= 0.8 * slots:
        return 1.0
    cap = min(min(float(MAX_SPLITS), slots), n_blocks)
    best = 0.0
    for i in range(1, MAX_SPLITS + 1):
        s = float(i)
        if s > cap:
            break
        if i == 1 or np.ceil(n_blocks / s) != np.ceil(n_blocks / max(s - 1.0, 1.0)):
            w = units * s / slots
            best = max(best, w / np.ceil(max(w, 1e-12)))
    for i in range(1, MAX_SPLITS + 1):
        s = float(i)
        if s > cap:
            break
        if i == 1 or np.ceil(n_blocks / s) != np.ceil(n_blocks / max(s - 1.0, 1.0)):
            w = units * s / slots
            if w / np.ceil(max(w, 1e-12)) >= 0.85 * best:
                return s
    return 1.0


@compiled_callee
def kernel_pass_s(k, S, t, c, prefill):
    """AttentionKernelModel.pass_s: all layers' time of one kernel (parameters k) for S
    sequences of c cached tokens each scoring t positions, s (0 where S = 0)."""
    if S <= 0:
        return 0.0
    d = k[K_HEAD_DIM]
    hkv, group = k[K_HEADS_KV], k[K_GROUP]
    keys = c + t
    nbytes = S * (keys * hkv * d * 2 * 2 + t * hkv * group * d * 2 * 2)
    slots = k[K_SMS] * k[K_CTAS]
    if prefill:
        bm = k[K_BLOCK_M]
        n_m = np.ceil(t / bm)
        units = S * (hkv * group) * n_m
        pairs_per_head = bm * (n_m * c + bm * n_m * (n_m - 1) / 2 + t)
        mean_pairs = pairs_per_head / max(n_m, 1.0)
        max_pairs = bm * keys
    else:
        rows = group * t
        bn = _block_n(d)
        splits = 1.0
        if k[K_SPLIT_BLOCK_M] != 0:
            n_blocks = np.ceil(keys / bn)
            m_split = np.ceil(rows / k[K_SPLIT_BLOCK_M])
            splits = fa2_splits(S * hkv * m_split, n_blocks, k[K_SMS])
        split = splits > 1
        bm = k[K_SPLIT_BLOCK_M] if split else k[K_BLOCK_M]
        n_m = np.ceil(rows / bm)
        units = S * hkv * n_m * splits
        unit_keys = np.ceil(np.ceil(keys / bn) / splits) * bn if split else keys
        mean_pairs = max_pairs = bm * unit_keys
    pair_s = (4 * d + k[K_SOFTMAX]) / (k[K_COMPUTE_EFF] * k[K_FLOPS] / slots)
    waves = np.ceil(units / slots)
    t_comp = max(waves * mean_pairs, max_pairs) * pair_s
    t_mem = nbytes / (k[K_BANDWIDTH_EFF] * k[K_BYTES])
    p = k[K_P]
    top = max(max(t_mem, t_comp), 1e-300)
    return k[K_LAYERS] * (top * ((t_mem / top) ** p + (t_comp / top) ** p) ** (1.0 / p))


@compiled_callee
def fastest_pass_s(kernels, n_kernels, S, t, sum_ctx, prefill):
    """The fastest kernel's pass time, every sequence at the mean context sum_ctx / S, s."""
    ctx = sum_ctx / max(S, 1.0)
    best = np.inf
    for i in range(n_kernels):
        best = min(best, kernel_pass_s(kernels[i], S, t, ctx, prefill))
    return best
