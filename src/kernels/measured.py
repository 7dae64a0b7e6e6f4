"""Measured kernel times of one engine version on one GPU: lookups on the physics-checked grids.

gemm_ms(m, n, k, dtype) and decode_attention_ms(batch, kv_len, heads, kv_heads, head_dim,
kv_dtype) return the measured time of one kernel (ms) at a grid point, the multilinear
interpolation inside the grid (grid.py), or None off the grid or where a needed row was rejected
(physics.py): the caller prices that kernel from the roofline.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from src.kernels.grid import interpolate
from src.kernels.physics import Peaks, Rejection, attention_broken, gemm_broken, moe_broken
from src.kernels.sources import TableSource
from src.kernels.tables import GemmGrid, raw_decode_attention, raw_gemm_grid, raw_moe_rows


@lru_cache(maxsize=32)
def checked_gemm_grid(src: TableSource, dtype: str, peaks: Peaks
                      ) -> tuple[GemmGrid | None, tuple[Rejection, ...]]:
    """raw_gemm_grid with the rows physics.py rejects set to NaN, and what was rejected (a
    low-precision dtype is compared with the checked BF16 grid)."""
    raw = raw_gemm_grid(src, dtype)
    if raw is None:
        return None, ()
    bf16 = checked_gemm_grid(src, "bfloat16", peaks)[0] if dtype != "bfloat16" else None
    masks = gemm_broken(raw.m, raw.n, raw.k, raw.latency_ms, dtype, peaks,
                        _on_axes(bf16, raw) if bf16 is not None else None)
    lat = raw.latency_ms.copy()
    rejections = []
    for rule, mask in masks.items():
        if mask.any():
            rejections.append(Rejection(f"gemm {dtype}", rule, int(mask.sum())))
            lat[mask] = np.nan
    return GemmGrid(raw.m, raw.n, raw.k, lat, raw.kernel_sources), tuple(rejections)


def _on_axes(bf16: GemmGrid, grid: GemmGrid) -> np.ndarray:
    """The (checked) BF16 rows at `grid`'s (m, n, k) points, NaN where BF16 has none: a
    low-precision row is held to a BF16 row only where that row passed the checks itself."""
    out = np.full(grid.latency_ms.shape, np.nan)
    where = [np.isin(getattr(grid, a), getattr(bf16, a)) for a in ("m", "n", "k")]
    at = [np.searchsorted(getattr(bf16, a), getattr(grid, a)[w])
          for a, w in zip(("m", "n", "k"), where)]
    out[np.ix_(*where)] = bf16.latency_ms[np.ix_(*at)]
    return out


@lru_cache(maxsize=256)
def _attention_grid(src: TableSource, kv_dtype: str, heads: int, kv_heads: int, head_dim: int,
                    peaks: Peaks):
    """(batch axis, kv_len axis, latency grid with NaN holes, kernel source, rejected rows) of
    the full-attention (window 0) rows of one head shape; None where the table has none."""
    rows = raw_decode_attention(src, kv_dtype)
    if rows is None:
        return None
    sel = ((rows.heads == heads) & (rows.kv_heads == kv_heads) & (rows.head_dim == head_dim)
           & (rows.window == 0))
    if not sel.any():
        return None
    b, s, lat = rows.batch[sel], rows.kv_len[sel], rows.latency_ms[sel].astype(float)
    broken = attention_broken(b, s, kv_heads, head_dim, lat, kv_dtype, peaks)
    lat = np.where(broken, np.nan, lat)
    bs, ss = np.unique(b), np.unique(s)
    grid = np.full((bs.size, ss.size), np.nan)
    grid[np.searchsorted(bs, b), np.searchsorted(ss, s)] = lat
    return bs, ss, grid, rows.kernel_source, int(broken.sum())


# TensorRT-LLM's low-latency NVFP4 MoE lane on Blackwell: AIConfigurator's collector times
# TRTLLMGenFusedMoE (moe_backend "trtllm", DeepSeek-V3 routing) under this label
# (ai-dynamo/aiconfigurator collector/trtllm/collect_moe.py: `source =
# "moe_torch_flow_min_latency"  # trtllm gen`), beside CUTLASS (`moe_torch_flow_cutlass`).
# aiconfigurator-core 0.12.0 prices a gated NVFP4 MoE layer of <= 128 tokens from this lane and
# every other from the default one (its engine's MoE operator: "for nvfp4 gated MoE at
# num_tokens <= 128, probe the moe_torch_flow_min_latency grid first"; sdk/operations/moe.py
# `_moe_low_latency_data`, "TRT-LLM low-latency NVFP4 kernel table"). Every MoE the presets
# hold is gated (SwiGLU).
LOW_LATENCY_LANE = "moe_torch_flow_min_latency"
LOW_LATENCY_DTYPES = ("nvfp4",)
LOW_LATENCY_MAX_TOKENS = 128


def _curve(rows, sel) -> tuple[np.ndarray, np.ndarray]:
    """(token counts, latency ms) of the selected rows, sorted; a count measured twice: its
    first row."""
    T, lat = rows.tokens[sel].astype(float), rows.latency_ms[sel]
    order = np.argsort(T, kind="stable")
    T, first = np.unique(T[order], return_index=True)
    return T, lat[order][first]


def _with_low_latency(T_low, lat_low, T, lat) -> tuple[np.ndarray, np.ndarray]:
    """The low-latency lane's rows up to LOW_LATENCY_MAX_TOKENS, the default lane's above,
    with the default lane's value at LOW_LATENCY_MAX_TOKENS + 1 (the first integer token count
    AIConfigurator prices from it, interpolated between its rows) so that an integer count
    between two measured ones is priced as AIConfigurator prices it."""
    lo = T_low <= LOW_LATENCY_MAX_TOKENS
    hi = T > LOW_LATENCY_MAX_TOKENS
    first = float(LOW_LATENCY_MAX_TOKENS + 1)
    join_T, join_lat = np.zeros(0), np.zeros(0)
    if hi.any() and first not in T and T[0] < first:
        join_T, join_lat = np.array([first]), np.interp([first], T, lat)
    return (np.concatenate([T_low[lo], join_T, T[hi]]),
            np.concatenate([lat_low[lo], join_lat, lat[hi]]))


@lru_cache(maxsize=64)
def moe_column(src: TableSource, distribution: str, dtype: str, hidden: int, inter: int,
               topk: int, experts: int, moe_tp: int, moe_ep: int, peaks: Peaks):
    """(tokens axis, latency_ms per token count with NaN where rejected, kernel source,
    rejections) of one MoE layer shape (exact on every key but the token count), or None where
    the table has no row of it. Several kernel sources with rows at this key: the one with the
    most rows of this shape and dtype in the table (the engine's main lane on the system, as
    decode attention takes it); for NVFP4 beside TensorRT-LLM's low-latency lane, that lane up
    to 128 tokens and the other above (LOW_LATENCY_LANE: AIConfigurator's own rule)."""
    rows = raw_moe_rows(src, distribution)
    if rows is None:
        return None
    shape = ((rows.hidden == hidden) & (rows.inter == inter) & (rows.topk == topk)
             & (rows.experts == experts))
    key = shape & (rows.moe_tp == moe_tp) & (rows.moe_ep == moe_ep)
    sel = key & (rows.dtype == dtype)
    if not sel.any():
        return None
    here = [str(ks) for ks in np.unique(rows.kernel_source[sel])]
    low = LOW_LATENCY_LANE if (dtype in LOW_LATENCY_DTYPES and LOW_LATENCY_LANE in here
                               and len(here) > 1) else None
    lanes = [ks for ks in here if ks != low]
    counts = [int((shape & (rows.dtype == dtype) & (rows.kernel_source == ks)).sum())
              for ks in lanes]
    best = lanes[int(np.argmax(counts))]
    T, lat = _curve(rows, sel & (rows.kernel_source == best))
    if low is not None:  # AIConfigurator's own rule: the low-latency lane up to 128 tokens
        T, lat = _with_low_latency(*_curve(rows, sel & (rows.kernel_source == low)), T, lat)
        best = f"{low}<={LOW_LATENCY_MAX_TOKENS}+{best}"
    bf16 = None
    if dtype != "bfloat16":  # rule 2: the BF16 row of the same key (any kernel source), else NaN
        ref = key & (rows.dtype == "bfloat16")
        bf16 = np.full(T.size, np.nan)
        if ref.any():
            rt, rl = rows.tokens[ref].astype(float), rows.latency_ms[ref]
            at = {float(t): float(v) for t, v in zip(rt, rl)}
            bf16 = np.array([at.get(float(t), np.nan) for t in T])
    masks = moe_broken(T, hidden, inter, topk, moe_tp, moe_ep, lat, dtype, peaks, bf16)
    rejections, lat = [], lat.copy()
    for rule, mask in masks.items():
        if mask.any():
            rejections.append(Rejection(f"moe {dtype}", rule, int(mask.sum())))
            lat[mask] = np.nan
    return T, lat, best, tuple(rejections)


class MeasuredKernels:
    """Lookups on one TableSource's tables, rows checked against the GPU's peaks."""

    def __init__(self, src: TableSource, peaks: Peaks):
        self.src, self.peaks = src, peaks

    def gemm_grid(self, dtype: str) -> tuple[GemmGrid | None, tuple[Rejection, ...]]:
        return checked_gemm_grid(self.src, dtype, self.peaks)

    def gemm_ms(self, m: float, n: float, k: float, dtype: str = "bfloat16") -> float | None:
        """One GEMM of m rows, n output columns, k inner dimension, ms; None off the grid."""
        grid, _ = self.gemm_grid(dtype)
        if grid is None:
            return None
        return interpolate((grid.m, grid.n, grid.k), grid.latency_ms, (m, n, k))

    def decode_attention(self, heads: int, kv_heads: int, head_dim: int,
                         kv_dtype: str = "bfloat16"):
        """_attention_grid of one head shape (None where the table has no row of it)."""
        return _attention_grid(self.src, kv_dtype, int(heads), int(kv_heads), int(head_dim),
                               self.peaks)

    def decode_attention_ms(self, batch: float, kv_len: float, heads: int, kv_heads: int,
                            head_dim: int, kv_dtype: str = "bfloat16") -> float | None:
        """One layer's decode attention kernel: `batch` sequences, one new position each,
        attending to kv_len keys (the cached tokens plus itself), ms; None off the grid."""
        g = self.decode_attention(heads, kv_heads, head_dim, kv_dtype)
        if g is None:
            return None
        bs, ss, grid = g[0], g[1], g[2]
        return interpolate((bs, ss), grid, (batch, kv_len))
