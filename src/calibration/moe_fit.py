"""Fit the per-expert GEMM terms of MoE layers to `measure-moe` rows.

Model of one MoE block's pass of T tokens (the rows' `layers` blocks take `layers` times that),
on a GPU of peak bandwidth BW (B/s) and dense BF16 peak F (FLOP/s), with the d distinct experts the
row records and n = T k / d rows per touched expert (the mean; the row's max_expert_rows shows how
uneven the real split was):

    block = layer_fixed + d [ expert_fixed + sum_g pnorm(mem_g(n), comp_g(n), p) ] + S shared
    g over the expert's two GEMMs (K, N) = (h, 2I) [gate/up] and (I, h) [down];
    mem_g(n)  = 2 K N / (BW eff_bw(n)) + 2 n (K + N) / (BW eff_large)   weights + activations
    comp_g(n) = 2 n K N / (F eff_compute)
    eff_bw(n) = eff_gemv (n <= 1), eff_small (1 < n <= 16), eff_large (n > 16)
    shared experts: the same GEMMs with n = T rows, S of them

These are the GEMM-efficiency terms of the dense cost model (src/costmodel/roofline.py,
gemm_terms_s: weight bandwidth by GEMM rows, pnorm roofline), applied per touched expert with the
rows that expert receives, which is what moves a pass from expert-bandwidth-bound (few rows per
expert, every expert's weights read) to compute-bound as T grows. Fitted: eff_gemv, eff_small,
eff_large, eff_compute (fractions of peak), expert_fixed_us (the fixed GPU time of one touched
expert: its kernels' launch gaps, index_select / index_add), layer_fixed_us (norm, router GEMM,
softmax, gather, residual: treated as a constant per block). Held: p (the GPU preset's roofline
sharpness, or 3), the datasheet peaks, the shapes and d. A parameter is fitted only where at
least MIN_ROWS rows fall in its regime; otherwise it keeps its start value and is reported as
held. Least squares on log(predicted / measured), as the dense calibration (src/calibration/
fit.py) does.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

SMALL_MAX_ROWS = 16  # src/costmodel/roofline.py SMALL_GEMM_MAX_ROWS
MIN_ROWS = 3
DEFAULT_SHARPNESS_P = 3.0
BYTES = 2  # BF16

# (name, start, lower, upper, regime, meaning)
PARAMETERS = (
    ("expert_gemv_bandwidth_fraction", 0.6, 0.02, 1.0, "gemv",
     "weight streaming of an expert GEMM with 1 row, fraction of peak bandwidth"),
    ("expert_small_bandwidth_fraction", 0.6, 0.02, 1.0, "small",
     f"... with 2..{SMALL_MAX_ROWS} rows per expert"),
    ("expert_large_bandwidth_fraction", 0.7, 0.02, 1.0, "large",
     f"... with more than {SMALL_MAX_ROWS} rows per expert (and every activation)"),
    ("expert_compute_fraction", 0.5, 0.02, 1.0, "large",
     "tensor-core rate of compute-bound expert GEMMs, fraction of dense BF16 peak"),
    ("expert_fixed_us", 10.0, 0.0, 500.0, "any",
     "fixed GPU time per touched expert (its kernels' gaps, gather and scatter), us"),
    ("layer_fixed_us", 30.0, 0.0, 5000.0, "any",
     "fixed time per MoE block (norm, router, softmax, combine), us"),
)
NAMES = tuple(p[0] for p in PARAMETERS)


@dataclass(frozen=True)
class MoeGemmTerms:
    """The fitted (or given) per-expert GEMM terms of one GPU."""

    expert_gemv_bandwidth_fraction: float
    expert_small_bandwidth_fraction: float
    expert_large_bandwidth_fraction: float
    expert_compute_fraction: float
    expert_fixed_us: float
    layer_fixed_us: float

    def vector(self) -> np.ndarray:
        return np.array([getattr(self, n) for n in NAMES])


@dataclass(frozen=True)
class MoeFit:
    terms: MoeGemmTerms
    fitted: tuple[str, ...]  # the parameters the rows determined
    held: tuple[str, ...]  # kept at their start value (too few rows in their regime)
    rows: int
    rms_log_error: float


def rows_per_expert(rows: pd.DataFrame) -> np.ndarray:
    """n = T k / d: the mean rows one touched expert receives."""
    return (rows["tokens"].to_numpy(float) * rows["top_k"].to_numpy(float)
            / rows["distinct_experts"].to_numpy(float))


def _pnorm(a, b, p):
    return (a ** p + b ** p) ** (1.0 / p)


def _expert_gemms_s(n, hidden, ffn, bw_b_per_s, flops, terms: np.ndarray, p: float):
    """Time of one expert's gate/up and down GEMMs with n rows each, seconds (vectorised)."""
    gemv, small, large, compute = terms[:4]
    eff_bw = np.where(n <= 1, gemv, np.where(n <= SMALL_MAX_ROWS, small, large))
    total = 0.0
    for k, m in ((hidden, 2 * ffn), (ffn, hidden)):
        mem = BYTES * k * m / (bw_b_per_s * eff_bw) + BYTES * n * (k + m) / (bw_b_per_s * large)
        comp = 2.0 * n * k * m / (flops * compute)
        total = total + _pnorm(mem, comp, p)
    return total


def predict_ms(rows: pd.DataFrame, terms: MoeGemmTerms | np.ndarray, bandwidth_gb_per_s: float,
               dense_bf16_tflops: float, sharpness_p: float = DEFAULT_SHARPNESS_P) -> np.ndarray:
    """Predicted median_ms of each row (the formula of the module docstring)."""
    v = terms.vector() if isinstance(terms, MoeGemmTerms) else np.asarray(terms, float)
    bw, flops = bandwidth_gb_per_s * 1e9, dense_bf16_tflops * 1e12
    hidden = rows["hidden"].to_numpy(float)
    ffn = rows["expert_ffn"].to_numpy(float)
    d = rows["distinct_experts"].to_numpy(float)
    tokens = rows["tokens"].to_numpy(float)
    shared = rows["shared_experts"].to_numpy(float)
    routed = d * (v[4] * 1e-6 + _expert_gemms_s(rows_per_expert(rows), hidden, ffn, bw, flops,
                                                  v, sharpness_p))
    shared_s = shared * _expert_gemms_s(tokens, hidden, ffn, bw, flops, v, sharpness_p)
    block = v[5] * 1e-6 + routed + shared_s
    return rows["layers"].to_numpy(float) * block * 1e3


def regime_counts(rows: pd.DataFrame) -> dict:
    n = rows_per_expert(rows)
    return {"gemv": int((n <= 1).sum()), "small": int(((n > 1) & (n <= SMALL_MAX_ROWS)).sum()),
            "large": int((n > SMALL_MAX_ROWS).sum()), "any": len(rows)}


def fit_moe_terms(rows: pd.DataFrame, bandwidth_gb_per_s: float, dense_bf16_tflops: float,
                  sharpness_p: float = DEFAULT_SHARPNESS_P) -> MoeFit:
    """Least squares on log(predicted / measured) over every row (see the module docstring)."""
    counts = regime_counts(rows)
    start = np.array([p[1] for p in PARAMETERS])
    free = [i for i, p in enumerate(PARAMETERS) if counts[p[4]] >= MIN_ROWS]
    measured = rows["median_ms"].to_numpy(float)

    def full(x):
        v = start.copy()
        v[free] = x
        return v

    def residuals(x):
        return np.log(predict_ms(rows, full(x), bandwidth_gb_per_s, dense_bf16_tflops,
                                 sharpness_p) / measured)

    lower = np.array([PARAMETERS[i][2] for i in free])
    upper = np.array([PARAMETERS[i][3] for i in free])
    if free:
        sol = least_squares(residuals, start[free], bounds=(lower, upper), x_scale="jac",
                            xtol=1e-12, ftol=1e-12, gtol=1e-12, max_nfev=2000)
        x = sol.x
    else:
        x = np.array([])
    v = full(x)
    err = residuals(x)
    return MoeFit(terms=MoeGemmTerms(*map(float, v)),
                  fitted=tuple(NAMES[i] for i in free),
                  held=tuple(n for i, n in enumerate(NAMES) if i not in free),
                  rows=len(rows), rms_log_error=float(np.sqrt(np.mean(err ** 2))))
