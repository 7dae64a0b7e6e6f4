"""Tests of the tiled attention-kernel model (src/costmodel/attention.py)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from src.costmodel.attention import (
    KERNEL_SHAPES,
    fa2_block_n,
    fa2_num_splits,
    kernel_attention_layer_s,
)

H200 = {"sm_count": 132, "peak_flops_per_s": 989.4e12, "peak_bytes_per_s": 4800e9}
LLAMA8B = {"heads_kv": 8.0, "group": 4.0, "head_dim": 128}


def _loop_splits(units, n_blocks, sm_count, max_splits=128):
    """FlashAttention-2's num_splits_heuristic written as its source does, with loops."""
    slots = 2 * sm_count
    if units >= 0.8 * slots:
        return 1
    max_splits = min(max_splits, slots, n_blocks)
    eff = []
    for s in range(1, max_splits + 1):
        eligible = s == 1 or math.ceil(n_blocks / s) != math.ceil(n_blocks / (s - 1))
        w = units * s / slots
        eff.append(w / math.ceil(w) if eligible else 0.0)
    for s in range(1, max_splits + 1):
        if eff[s - 1] > 0 and eff[s - 1] >= 0.85 * max(eff):
            return s
    return 1


@pytest.mark.parametrize("units", [1, 8, 16, 40, 64, 128, 200, 211, 212, 256, 2048])
@pytest.mark.parametrize("n_blocks", [1, 3, 4, 16, 17, 64, 65, 256])
def test_fa2_split_heuristic_matches_the_loop_form(units, n_blocks):
    assert fa2_num_splits(units, n_blocks, 132) == _loop_splits(units, n_blocks, 132)


def test_fa2_splits_a_batch1_decode_and_not_a_full_gpu():
    # batch 1, 8 KV heads, 8192 keys in 128-key blocks: 32 splits fill 256 of 264 slots
    assert fa2_num_splits(8, 64, 132) == 32
    assert fa2_num_splits(256, 64, 132) == 1  # 256 units >= 0.8 x 264 slots: no split
    assert fa2_block_n(64) == 256 and fa2_block_n(128) == 128 and fa2_block_n(256) == 64


def _layer_s(kernel, batch, positions, context, **over):
    args = dict(n_seqs=batch, positions_per_seq=positions, context_tokens=context, **LLAMA8B,
                **H200, compute_efficiency=0.5, bandwidth_efficiency=0.9,
                softmax_flops_per_pair=256.0, sharpness_p=6.0)
    args.update(over)
    return float(kernel_attention_layer_s(KERNEL_SHAPES[kernel], **args))


def test_padded_tiles_make_verification_positions_nearly_free():
    # 4 x 5 = 20 query rows fit the same 128-row tile as 4 x 1: compute-bound time is unchanged
    one = _layer_s("cudnn", 1, 1, 8192)
    five = _layer_s("cudnn", 1, 5, 8192)
    assert five == pytest.approx(one, rel=0.01)
    # ... until the rows overflow the tile: 4 x 33 = 132 rows need two tiles, which at batch 16
    # (256 units on 132 SMs) run in two waves
    compute_bound = {"bandwidth_efficiency": 100.0}
    assert _layer_s("cudnn", 16, 33, 8192, **compute_bound) == pytest.approx(
        2 * _layer_s("cudnn", 16, 1, 8192, **compute_bound), rel=0.01)


def test_cudnn_small_batch_is_bound_by_one_cta_per_kv_head():
    # 8 KV heads x batch <= 132 SMs: one wave, the same time for batch 1 and batch 16
    assert _layer_s("cudnn", 16, 1, 8192) == pytest.approx(_layer_s("cudnn", 1, 1, 8192),
                                                           rel=0.05)
    # 17 x 8 = 136 units: a second wave doubles the compute-bound time
    assert _layer_s("cudnn", 17, 1, 8192, bandwidth_efficiency=100.0) == pytest.approx(
        2 * _layer_s("cudnn", 16, 1, 8192, bandwidth_efficiency=100.0), rel=0.01)


def test_memory_bound_attention_reads_the_kv_cache_at_the_kernel_bandwidth():
    # flash at batch 16, 8192 keys: split-KV fills the GPU, the KV read dominates
    kv_bytes = 16 * 8193 * 8 * 128 * 2 * 2
    q_o_bytes = 16 * 1 * 32 * 128 * 2 * 2
    bound = (kv_bytes + q_o_bytes) / (0.9 * 4800e9)
    assert bound <= _layer_s("flash", 16, 1, 8192) <= 1.1 * bound


def test_prefill_is_causal_and_quadratic():
    small = _layer_s("cudnn", 1, 4096, 0, prefill=True)
    big = _layer_s("cudnn", 1, 8192, 0, prefill=True)
    assert big / small == pytest.approx(4.0, rel=0.1)
    # causal tiles do about half the work of a full square of the same length
    rows = 8192
    full = 32 * rows * rows * (4 * 128 + 256) / (0.5 * 989.4e12)
    assert big == pytest.approx(full / 2, rel=0.05)


def test_no_sequences_no_time():
    out = kernel_attention_layer_s(
        KERNEL_SHAPES["flash"], n_seqs=np.array([0, 2]), positions_per_seq=1,
        context_tokens=512, **LLAMA8B, **H200, compute_efficiency=0.5,
        bandwidth_efficiency=0.9, softmax_flops_per_pair=0.0, sharpness_p=6.0)
    assert out[0] == 0.0 and out[1] > 0.0
