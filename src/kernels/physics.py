"""Rows of the measured database that break physics: reported, and never priced from.

The database is measurement, not truth. A row is rejected (set to NaN in the grid, so a lookup
that needs it falls back to the roofline) when:

1. GEMM faster than its roofline at peak: latency < max(2 m n k / peak_flops(dtype),
   (n k b_w + m k b_a + m n 2) / peak_bandwidth), peak figures from the GPU preset
   (src/presets/gpus.toml: dense BF16 or FP8 TFLOP/s, HBM GB/s), b_w = b_a = 2 bytes for BF16,
   1 for FP8. (Seen: small H100 shapes whose weights stay in the 50 MB L2 across the timing
   loop; a serving pass streams every layer's weights from HBM.)
2. A lower-precision GEMM slower than LOW_PRECISION_MAX_SLOWDOWN x the BF16 GEMM of the same
   shape plus LOW_PRECISION_SLACK_MS: FP8 moves at most the bytes and has twice the peak, so
   beyond a small activation-quantisation kernel it cannot be slower (seen: vLLM 0.24.0's
   fp8_block rows on H100/H200, ~85 us whatever the shape, 8-10x BF16 for Qwen3-30B-A3B's
   attention projections at 64-256 rows).
3. Decode attention faster than reading its KV cache once at peak bandwidth:
   latency < batch kv_len 2 kv_heads head_dim b_kv / peak_bandwidth.
4. A fused MoE layer (routed experts; moe_tp splits the FFN width I, moe_ep the experts) faster
   than its work at peak: with moe_ep 1 every token's k experts are distinct and all on this
   GPU, so latency < max(2 T k 3 h I / moe_tp / peak_flops(dtype), k 3 h I / moe_tp b_w /
   peak_bandwidth); with moe_ep > 1 the table's routing decides what reaches this GPU and no
   bound is held. Rule 2 holds its low-precision rows to the BF16 row of the same key.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

LOW_PRECISION_MAX_SLOWDOWN = 2.0
LOW_PRECISION_SLACK_MS = 0.01  # 10 us: a per-token activation-quantisation kernel and its launch
BYTES_OF_GEMM_DTYPE = {"bfloat16": 2, "fp8": 1, "fp8_block": 1}
# bytes per weight value of the MoE table's dtypes (a lower bound: 4-bit formats' scales left out)
BYTES_OF_MOE_DTYPE = {**BYTES_OF_GEMM_DTYPE, "w4a16_mxfp4": 0.5, "w4a8_mxfp4_mxfp8": 0.5,
                      "nvfp4": 0.5, "int4_wo": 0.5}
# the tensor-core class a MoE dtype's GEMMs run on: w4a16 / int4 weight-only kernels upcast to
# BF16 (aiconfigurator_core/sdk/common.py 0.12.0 QuantMapping "bfloat16"), w4a8 runs FP8 MMAs,
# NVFP4 FP4 ones at twice the FP8 rate (NVIDIA B200 datasheet: 9 vs 4.5 dense PFLOPS)
MOE_FLOPS_CLASS = {"bfloat16": "bfloat16", "w4a16_mxfp4": "bfloat16", "int4_wo": "bfloat16",
                   "fp8": "fp8", "fp8_block": "fp8", "w4a8_mxfp4_mxfp8": "fp8", "nvfp4": "fp4"}
BYTES_OF_KV_DTYPE = {"bfloat16": 2, "fp8": 1}


@dataclass(frozen=True)
class Peaks:
    """The GPU's datasheet peaks the checks hold rows to."""

    bf16_flops_per_s: float
    fp8_flops_per_s: float  # = bf16 where the GPU has no FP8 tensor cores
    bandwidth_bytes_per_s: float

    def flops(self, dtype: str) -> float:
        if dtype == "fp4":  # FP4 tensor cores: twice the FP8 rate (MOE_FLOPS_CLASS)
            return 2.0 * self.fp8_flops_per_s
        return self.bf16_flops_per_s if dtype == "bfloat16" else self.fp8_flops_per_s


@dataclass(frozen=True)
class Rejection:
    """One rule's rejected rows of one table."""

    table: str  # e.g. "gemm fp8_block"
    rule: str  # one line, what the rows broke
    rows: int


def gemm_roofline_ms(m, n, k, dtype: str, peaks: Peaks) -> np.ndarray:
    """Rule 1's bound: the time of the GEMM at peak FLOPs or peak bandwidth, ms."""
    b = BYTES_OF_GEMM_DTYPE[dtype]
    flops_s = 2.0 * m * n * k / peaks.flops(dtype)
    bytes_s = (n * k * b + m * k * b + m * n * 2.0) / peaks.bandwidth_bytes_per_s
    return np.maximum(flops_s, bytes_s) * 1e3


def gemm_broken(m: np.ndarray, n: np.ndarray, k: np.ndarray, latency_ms: np.ndarray,
                dtype: str, peaks: Peaks,
                bf16_latency_ms: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Boolean masks (the shape of latency_ms, a grid over m x n x k) of the rows each rule
    rejects; bf16_latency_ms: the BF16 grid of the same axes, for rule 2 (None: not checked)."""
    M, N, K = np.meshgrid(m.astype(float), n.astype(float), k.astype(float), indexing="ij")
    finite = np.isfinite(latency_ms)
    out = {"faster than its roofline at peak FLOP/s and bandwidth":
           finite & (latency_ms < gemm_roofline_ms(M, N, K, dtype, peaks))}
    if dtype != "bfloat16" and bf16_latency_ms is not None:
        with np.errstate(invalid="ignore"):
            slow = (finite & np.isfinite(bf16_latency_ms) & (
                latency_ms > LOW_PRECISION_MAX_SLOWDOWN * bf16_latency_ms
                + LOW_PRECISION_SLACK_MS))
        out[f"slower than {LOW_PRECISION_MAX_SLOWDOWN:g}x the BF16 row of the same shape + "
            f"{LOW_PRECISION_SLACK_MS * 1e3:g} us"] = slow
    return out


def attention_broken(batch, kv_len, kv_heads, head_dim, latency_ms, kv_dtype: str,
                     peaks: Peaks) -> np.ndarray:
    """Rule 3: decode attention rows faster than one read of their KV cache at peak bandwidth."""
    kv_bytes = (np.asarray(batch, float) * kv_len * 2 * kv_heads * head_dim
                * BYTES_OF_KV_DTYPE[kv_dtype])
    return np.asarray(latency_ms) < kv_bytes / peaks.bandwidth_bytes_per_s * 1e3


def moe_broken(tokens, hidden, inter, topk, moe_tp, moe_ep, latency_ms, dtype: str, peaks: Peaks,
               bf16_latency_ms=None) -> dict[str, np.ndarray]:
    """Masks (the shape of latency_ms) of the MoE rows rules 4 and 2 reject; bf16_latency_ms:
    the BF16 rows of the same keys (NaN where none; None: rule 2 not checked)."""
    lat = np.asarray(latency_ms, float)
    T, h, ffn, k = (np.asarray(a, float) for a in (tokens, hidden, inter, topk))
    width = ffn / np.asarray(moe_tp, float)
    flops_s = 2.0 * T * k * 3.0 * h * width / peaks.flops(MOE_FLOPS_CLASS.get(dtype, "fp4"))
    bytes_s = k * 3.0 * h * width * BYTES_OF_MOE_DTYPE.get(dtype, 0.5) / peaks.bandwidth_bytes_per_s
    bound_ms = np.where(np.asarray(moe_ep) == 1, np.maximum(flops_s, bytes_s) * 1e3, 0.0)
    out = {"faster than its experts' work at peak FLOP/s and bandwidth": lat < bound_ms}
    if dtype != "bfloat16" and bf16_latency_ms is not None:
        with np.errstate(invalid="ignore"):
            slow = np.isfinite(bf16_latency_ms) & (
                lat > LOW_PRECISION_MAX_SLOWDOWN * np.asarray(bf16_latency_ms)
                + LOW_PRECISION_SLACK_MS)
        out[f"slower than {LOW_PRECISION_MAX_SLOWDOWN:g}x the BF16 row of the same key + "
            f"{LOW_PRECISION_SLACK_MS * 1e3:g} us"] = slow
    return out
