"""Attention kernels as tiles of work on the GPU's streaming multiprocessors.

The roofline attention of roofline.py (bytes at a bandwidth, real FLOPs at a FLOP rate) is what a
perfect kernel reaches. Real kernels fall short of it in two ways that depend on batch and
context, and this module models both from the kernel's own tiling:

* Padded tiles. A kernel computes query rows in tiles of `block_m` rows. A decode or
  verification step has few query rows per KV head (the GQA group times the positions: 4 to 36
  for Llama 3), so most of each tile's tensor-core and softmax work is padding: a decode step of
  FlashAttention-2's regular kernel does 128 rows of work for 4 real ones.
* Waves. The work is cut into units (one CTA each: a KV head of one sequence, a query tile, a
  slice of the context), which run `ctas_per_sm` at a time on each SM. A batch with fewer units
  than slots leaves SMs idle; one with slightly more runs a second, nearly empty wave.
  FlashAttention-2 splits the context of each unit ("split-KV", flash-decoding) when there are
  too few units to fill the GPU; cuDNN's fused kernel does not.

Per layer, for S sequences of c cached tokens each scoring t new positions:

    units            = S x heads x ceil(rows / block_m) x splits
    pair_time        = (4 d + softmax_flops_per_pair) / (compute_efficiency x peak / slots)
    t_compute        = max(ceil(units / slots) x mean_unit_pairs, max_unit_pairs) x pair_time
    t_memory         = (KV read + KV write + Q and O bytes) / (bandwidth_efficiency x peak)
    attention        = pnorm(t_memory, t_compute, sharpness_p)

with slots = sm_count x ctas_per_sm and d the head dimension. Decode and verification fold the
GQA group into the query rows (rows = group x t per KV head, every row reading all c + t keys);
prefill tiles t query rows per query head with a causal mask (tile i reads c + (i + 1) block_m
keys). The tile shapes and FlashAttention-2's split heuristic are read off the kernels' source;
the efficiencies are fitted per GPU (`python run.py calibrate`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAX_SPLITS = 128  # FlashAttention-2's cap on KV splits
# p of pnorm(memory, compute) inside one attention kernel. Chosen, not fitted: a kernel pipelines
# its loads under its math, so the knee is sharp; the H200 fit changes by < 0.1 point of median
# error for p between 4 and 10, and fitting p as well drives the bandwidth efficiencies to 100%.
ATTENTION_SHARPNESS_P = 6.0


@dataclass(frozen=True)
class AttentionKernelShape:
    """How one attention kernel tiles its work (structural: read off the kernel's source)."""

    name: str
    block_m: int  # query rows per tile of the regular kernel
    split_block_m: int  # query rows per tile of the split-KV kernel; 0 = never splits the KV
    ctas_per_sm: int  # CTAs resident per SM
    source: str  # where the tile shape comes from


KERNEL_SHAPES = {
    "flash": AttentionKernelShape(
        name="flash", block_m=128, split_block_m=64, ctas_per_sm=2,
        source="FlashAttention-2 (as in PyTorch's scaled_dot_product_attention): regular forward "
               "kernel 128 x 64 tiles for head dim 128 on sm90; split-KV kernel kBlockM = 64, "
               "kBlockN = 256/128/64 by head dim; num_splits_heuristic targets 2 CTAs per SM"),
    "cudnn": AttentionKernelShape(
        name="cudnn", block_m=128, split_block_m=0, ctas_per_sm=1,
        source="cuDNN fused attention (SDPA backend): 128-row query tiles, one CTA per SM, no "
               "KV split (its batch-1 time grows with the context at a constant rate per CTA)"),
}


def fa2_block_n(head_dim: int) -> int:
    """KV tile of FlashAttention-2's split-KV kernel: 256 keys for d <= 64, 128 for d <= 128."""
    return 256 if head_dim <= 64 else (128 if head_dim <= 128 else 64)


def fa2_num_splits(units: np.ndarray, n_blocks: np.ndarray, sm_count: int) -> np.ndarray:
    """FlashAttention-2's num_splits_heuristic, vectorised.

    units: batch x heads x query tiles of 64 rows; n_blocks: KV tiles per unit. With
    slots = 2 sm_count: 1 split when units >= 0.8 slots; otherwise the smallest eligible split
    count whose wave efficiency w / ceil(w) (w = units x splits / slots) is within 85% of the
    best, over 1..min(128, slots, n_blocks) splits, where a split count is eligible if it changes
    ceil(n_blocks / splits).
    """
    units = np.asarray(units, dtype=float)
    n_blocks = np.asarray(n_blocks, dtype=float)
    units, n_blocks = np.broadcast_arrays(units, n_blocks)
    slots = 2 * sm_count
    s = np.arange(1, MAX_SPLITS + 1, dtype=float)
    nb = n_blocks[..., None]
    cap = np.minimum(np.minimum(MAX_SPLITS, slots), nb)
    eligible = (s == 1) | (np.ceil(nb / s) != np.ceil(nb / np.maximum(s - 1, 1)))
    eligible &= s <= cap
    w = units[..., None] * s / slots
    eff = np.where(eligible, w / np.ceil(np.maximum(w, 1e-12)), 0.0)
    best = eff.max(axis=-1, keepdims=True)
    ok = eligible & (eff >= 0.85 * best)
    first = np.argmax(ok, axis=-1) + 1
    return np.where(units >= 0.8 * slots, 1, first).astype(float)


def kernel_attention_layer_s(
    shape: AttentionKernelShape,
    *,
    n_seqs, positions_per_seq, context_tokens,
    heads_kv: float, group: float, head_dim: int,
    sm_count: int, peak_flops_per_s: float, peak_bytes_per_s: float,
    compute_efficiency: float, bandwidth_efficiency: float,
    softmax_flops_per_pair: float, sharpness_p: float,
    prefill: bool = False,
):
    """Time of one layer's attention kernel, seconds (see the module docstring).

    n_seqs, positions_per_seq (t) and context_tokens (c, per sequence) broadcast together.
    heads_kv: KV heads on this GPU; group: query heads per KV head. 0 where n_seqs is 0.
    """
    S, t, c = np.broadcast_arrays(np.asarray(n_seqs, float), np.asarray(positions_per_seq, float),
                                  np.asarray(context_tokens, float))
    d = float(head_dim)
    keys = c + t
    bytes_ = S * (keys * heads_kv * d * 2 * 2 + t * heads_kv * group * d * 2 * 2)
    slots = sm_count * shape.ctas_per_sm
    if prefill:  # causal; query tiles over t rows of each query head
        bm = shape.block_m
        heads = heads_kv * group
        n_m = np.ceil(t / bm)
        units = S * heads * n_m
        pairs_per_head = bm * (n_m * c + bm * n_m * (n_m - 1) / 2 + t)
        mean_pairs = pairs_per_head / np.maximum(n_m, 1)
        max_pairs = bm * keys
    else:  # GQA group folded into the query rows: group x t rows per KV head, all keys each
        rows = group * t
        if shape.split_block_m:
            bn = fa2_block_n(head_dim)
            n_blocks = np.ceil(keys / bn)
            m_split = np.ceil(rows / shape.split_block_m)
            splits = fa2_num_splits(S * heads_kv * m_split, n_blocks, sm_count)
        else:
            splits = np.ones_like(S)
        split = splits > 1
        bm = np.where(split, shape.split_block_m, shape.block_m)
        n_m = np.ceil(rows / bm)
        units = S * heads_kv * n_m * splits
        unit_keys = np.where(split, np.ceil(np.ceil(keys / fa2_block_n(head_dim)) / splits)
                             * fa2_block_n(head_dim), keys)
        mean_pairs = max_pairs = bm * unit_keys
    pair_s = (4 * d + softmax_flops_per_pair) / (compute_efficiency * peak_flops_per_s / slots)
    waves = np.ceil(units / slots)
    t_comp = np.maximum(waves * mean_pairs, max_pairs) * pair_s
    t_mem = bytes_ / (bandwidth_efficiency * peak_bytes_per_s)
    p = sharpness_p
    top = np.maximum(np.maximum(t_mem, t_comp), 1e-300)
    out = top * ((t_mem / top) ** p + (t_comp / top) ** p) ** (1.0 / p)
    return np.where(S > 0, out, 0.0)


@dataclass(frozen=True)
class AttentionKernelModel:
    """One fitted attention kernel of one network on one GPU at one TP degree: everything
    kernel_attention_layer_s needs but the batch, positions and context."""

    shape: AttentionKernelShape
    n_layers: int
    heads_kv: float  # KV heads per GPU
    group: float  # query heads per KV head
    head_dim: int
    sm_count: int
    peak_flops_per_s: float
    peak_bytes_per_s: float
    compute_efficiency: float
    bandwidth_efficiency: float
    softmax_flops_per_pair: float

    def pass_s(self, n_seqs, positions_per_seq, context_tokens, prefill: bool = False):
        """All layers' attention-kernel time of one pass, seconds (no fixed per-kernel part).
        context_tokens: cached tokens per sequence (a batch with mixed contexts is taken at its
        mean: every unit of a wave then has the same length)."""
        return self.n_layers * kernel_attention_layer_s(
            self.shape, n_seqs=n_seqs, positions_per_seq=positions_per_seq,
            context_tokens=context_tokens, heads_kv=self.heads_kv, group=self.group,
            head_dim=self.head_dim, sm_count=self.sm_count,
            peak_flops_per_s=self.peak_flops_per_s, peak_bytes_per_s=self.peak_bytes_per_s,
            compute_efficiency=self.compute_efficiency,
            bandwidth_efficiency=self.bandwidth_efficiency,
            softmax_flops_per_pair=self.softmax_flops_per_pair,
            sharpness_p=ATTENTION_SHARPNESS_P, prefill=prefill)
