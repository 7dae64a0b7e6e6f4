"""Re-fit the roofline's GEMM efficiencies per GPU to an engine's measured BF16 GEMM rows.

The roofline (src/costmodel/roofline.py) prices one GEMM of m rows, n output columns and inner
dimension k at

    t(m, n, k) = pnorm(2 (n k + m k + m n) / (BW e_bw), 2 m n k / (F e_c), p) + kernel_fixed

(BW, F: the preset's peak bandwidth and dense BF16 FLOP/s; kernel_fixed: the GPU's fixed time per
kernel, held at the value the cost model uses for it, not fitted). This module fits e_bw, e_c and p
to the measured rows of one engine version's BF16 GEMM table on one system, the GPUs of one
silicon jointly (SAME_SILICON; design.md, "Kernel efficiencies re-fitted to measured GEMMs"):
least squares on log(t / measured) with
scipy.optimize.least_squares, bounded, over the rows that pass physics.py's checks and have
serving shapes (FIT_M_MAX >= m >= 1, n, k >= FIT_NK_MIN). Every HOLDOUT_EVERY-th of those rows
(in (m, n, k) order) is held out of the fit and reported separately.

Needs scipy (fit only; the runtime reads the written src/presets/kernel_efficiency.toml through
src/costmodel/kernel_efficiency.py and imports neither scipy nor this module).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from src.costmodel.presets import CostModelParams, GpuSpec
from src.costmodel.roofline import _pnorm, kernel_fixed_s
from src.kernels.measured import checked_gemm_grid
from src.kernels.pricing import gpu_peaks
from src.kernels.sources import TableSource, data_root

# GPU preset -> (database system, backend, version, printed engine): vLLM's newest table on each
# system the presets map to (aiconfigurator-core 0.12.0, aiconfigurator_core/systems/data/; A100
# has only vLLM 0.14.0)
FIT_TABLES = {
    "a100-80gb-sxm": ("a100_sxm", "vllm", "0.14.0", "vLLM"),
    "h100-sxm": ("h100_sxm", "vllm", "0.24.0", "vLLM"),
    "h200": ("h200_sxm", "vllm", "0.24.0", "vLLM"),
    "b200": ("b200_sxm", "vllm", "0.24.0", "vLLM"),
    "l40s": ("l40s", "vllm", "0.24.0", "vLLM"),
}
FIT_M_MAX = 4096  # rows of a serving pass: batch x positions up to a 4096-token prompt chunk
FIT_NK_MIN = 1024  # a decoder's projections per TP rank (hidden >= 1024 in every model preset)
HOLDOUT_EVERY = 5  # every 5th row (in (m, n, k) order) is held out of the fit
BOUNDS = ((0.3, 0.3, 1.0), (1.0, 1.0, 12.0))  # (e_bw, e_c, p): lower, upper
START = (0.85, 0.75, 2.0)
# presets of one silicon (GH100: the same 132 SMs, clocks and 989.4 TFLOP/s dense BF16 peak, H200
# differing in HBM only; gpus.toml) share the fitted compute efficiency and p, each keeps its own
# bandwidth efficiency: a compute-bound GEMM then costs the same on both, and H200's faster HBM
# can only make a pass faster (fitted apart: e_c 0.814 / 0.806 and p 2.66 / 2.89, held-out
# median error within 0.1 point of the joint fit's)
SAME_SILICON = (("h100-sxm", "h200"),)
M_BANDS = ((1, 16), (17, 128), (129, 512), (513, 4096))  # bands of m the report splits errors by


@dataclass(frozen=True)
class GemmRows:
    """Physics-passing BF16 rows of serving shapes, as columns."""

    m: np.ndarray
    n: np.ndarray
    k: np.ndarray
    latency_ms: np.ndarray


@dataclass(frozen=True)
class EfficiencyFit:
    """The fitted efficiencies of one GPU and their errors (relative, predicted / measured - 1)."""

    gpu_id: str
    table: str  # e.g. "vllm 0.24.0 h200_sxm gemm_perf.parquet bfloat16"
    memory_bandwidth_efficiency_fraction: float
    compute_efficiency_fraction: float
    roofline_sharpness_p: float
    kernel_fixed_us: float  # held, not fitted
    rows_fit: int
    rows_held_out: int
    rows_rejected: int  # BF16 rows physics.py rejected (whole table)
    fit_median_abs_error: float
    held_out_median_abs_error: float
    held_out_p90_abs_error: float
    held_out_worst_abs_error: float
    baseline_median_abs_error: float  # the efficiencies the GPU had, on the held-out rows
    baseline_p90_abs_error: float


def table_source(gpu_id: str) -> TableSource | None:
    root = data_root()
    if root is None or gpu_id not in FIT_TABLES:
        return None
    system, backend, version, printed = FIT_TABLES[gpu_id]
    return TableSource(system, backend, version, printed, root)


def serving_rows(src: TableSource, gpu: GpuSpec) -> tuple[GemmRows, int]:
    """(the physics-passing BF16 rows of serving shapes, rows rejected in the whole table)."""
    grid, rejections = checked_gemm_grid(src, "bfloat16", gpu_peaks(gpu))
    if grid is None:
        raise ValueError(f"{src.label}: no BF16 GEMM rows")
    M, N, K = np.meshgrid(grid.m, grid.n, grid.k, indexing="ij")
    keep = (np.isfinite(grid.latency_ms) & (M >= 1) & (M <= FIT_M_MAX) & (N >= FIT_NK_MIN)
            & (K >= FIT_NK_MIN))
    rows = GemmRows(M[keep].astype(float), N[keep].astype(float), K[keep].astype(float),
                    grid.latency_ms[keep].astype(float))
    return rows, sum(r.rows for r in rejections)


def roofline_gemm_ms(rows: GemmRows, gpu: GpuSpec, e_bw: float, e_c: float, p: float,
                     kernel_fixed: float) -> np.ndarray:
    """The roofline's price of each row (module docstring), ms; kernel_fixed in seconds."""
    mem = 2.0 * (rows.n * rows.k + rows.m * rows.k + rows.m * rows.n) / (
        gpu.memory_bandwidth_bytes_per_s * e_bw)
    comp = 2.0 * rows.m * rows.n * rows.k / (gpu.flops_per_s * e_c)
    return (_pnorm(mem, comp, p) + kernel_fixed) * 1e3


def _split(rows: GemmRows) -> tuple[GemmRows, GemmRows]:
    held = np.zeros(rows.m.size, bool)
    held[HOLDOUT_EVERY - 1::HOLDOUT_EVERY] = True
    pick = [GemmRows(*(getattr(rows, f)[mask] for f in ("m", "n", "k", "latency_ms")))
            for mask in (~held, held)]
    return pick[0], pick[1]


def _abs_errors(pred_ms: np.ndarray, rows: GemmRows) -> np.ndarray:
    return np.abs(pred_ms / rows.latency_ms - 1.0)


def fit_group(gpus: list[GpuSpec], params: CostModelParams) -> list[EfficiencyFit]:
    """Fit one compute efficiency and one p shared by `gpus` (one silicon: SAME_SILICON) and one
    bandwidth efficiency per GPU to their FIT_TABLES tables, jointly (needs scipy)."""
    from scipy.optimize import least_squares  # fit only

    data = []
    for gpu in gpus:
        src = table_source(gpu.gpu_id)
        if src is None:
            raise ValueError(f"gpu '{gpu.gpu_id}': no table to fit (those with: "
                             f"{', '.join(sorted(FIT_TABLES))}) or aiconfigurator-core missing")
        rows, rejected = serving_rows(src, gpu)
        data.append((gpu, src, *_split(rows), rejected, kernel_fixed_s(gpu, params)))

    def residual(x):
        return np.concatenate([
            np.log(roofline_gemm_ms(train, gpu, x[2 + i], x[0], x[1], kfix) / train.latency_ms)
            for i, (gpu, _, train, _, _, kfix) in enumerate(data)])

    lower = (BOUNDS[0][1], BOUNDS[0][2]) + (BOUNDS[0][0],) * len(gpus)
    upper = (BOUNDS[1][1], BOUNDS[1][2]) + (BOUNDS[1][0],) * len(gpus)
    start = (START[1], START[2]) + (START[0],) * len(gpus)
    sol = least_squares(residual, start, bounds=(lower, upper), method="trf", x_scale="jac")
    e_c, p = float(sol.x[0]), float(sol.x[1])
    out = []
    for i, (gpu, src, train, held, rejected, kfix) in enumerate(data):
        e_bw = float(sol.x[2 + i])
        err_fit = _abs_errors(roofline_gemm_ms(train, gpu, e_bw, e_c, p, kfix), train)
        err_held = _abs_errors(roofline_gemm_ms(held, gpu, e_bw, e_c, p, kfix), held)
        base = _abs_errors(roofline_gemm_ms(
            held, gpu, gpu.memory_bandwidth_efficiency_fraction
            or params.memory_bandwidth_efficiency_fraction,
            gpu.compute_efficiency_fraction or params.compute_efficiency_fraction,
            gpu.roofline_sharpness_p or params.roofline_sharpness_p, kfix), held)
        out.append(EfficiencyFit(
            gpu_id=gpu.gpu_id,
            table=f"{src.backend} {src.version} {src.system} gemm_perf.parquet bfloat16",
            memory_bandwidth_efficiency_fraction=round(e_bw, 6),
            compute_efficiency_fraction=round(e_c, 6),
            roofline_sharpness_p=round(p, 6),
            kernel_fixed_us=round(kfix * 1e6, 6),
            rows_fit=int(train.m.size), rows_held_out=int(held.m.size), rows_rejected=rejected,
            fit_median_abs_error=float(np.median(err_fit)),
            held_out_median_abs_error=float(np.median(err_held)),
            held_out_p90_abs_error=float(np.quantile(err_held, 0.9)),
            held_out_worst_abs_error=float(err_held.max()),
            baseline_median_abs_error=float(np.median(base)),
            baseline_p90_abs_error=float(np.quantile(base, 0.9)),
        ))
    return out


def fit_all(gpus: dict[str, GpuSpec], params: CostModelParams) -> list[EfficiencyFit]:
    """fit_group over every GPU preset of FIT_TABLES, one group per silicon (SAME_SILICON)."""
    done: set[str] = set()
    out = []
    for gpu_id in FIT_TABLES:
        if gpu_id in done:
            continue
        group = next((g for g in SAME_SILICON if gpu_id in g), (gpu_id,))
        out += fit_group([gpus[g] for g in group], params)
        done |= set(group)
    return out


def held_out_errors_by_rows(fit: EfficiencyFit, gpu: GpuSpec, params: CostModelParams,
                            bands=M_BANDS) -> list[tuple[int, int, float, float]]:
    """(m low, m high, median, 90th percentile |error|) of the held-out rows per band of m."""
    rows, _ = serving_rows(table_source(gpu.gpu_id), gpu)
    held = _split(rows)[1]
    err = _abs_errors(roofline_gemm_ms(
        held, gpu, fit.memory_bandwidth_efficiency_fraction, fit.compute_efficiency_fraction,
        fit.roofline_sharpness_p, kernel_fixed_s(gpu, params)), held)
    out = []
    for lo, hi in bands:
        e = err[(held.m >= lo) & (held.m <= hi)]
        out.append((lo, hi, float(np.median(e)), float(np.quantile(e, 0.9))))
    return out
