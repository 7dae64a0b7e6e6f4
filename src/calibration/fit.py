"""Fit a GPU's efficiencies and an implementation's launch costs to measured step times.

What is fitted (design.md, "Calibration", gives the meaning and the H200 values of each):

* GPU (written as [gpus.<id>] fields): weight-streaming bandwidth of 1-row GEMMs
  (matrix-vector), of 2..16-row GEMMs and of larger ones (also activations and elementwise
  kernels), the tensor-core rate of compute-bound GEMMs, the GEMM roofline sharpness p, the fixed
  GPU time per kernel, and the softmax cost per (query, key) pair of the attention kernels.
* Each attention kernel measured (flash, cudnn; [attention.<id>.<kernel>]): its tensor-core rate
  on padded tiles and its KV-read bandwidth (src/costmodel/attention.py).
* The measured implementation ([engines."pytorch-graphs"] / [engines."pytorch-eager"]): the extra
  kernels per layer of a pass scoring more than one position; without CUDA graphs the CPU launch
  cost per kernel, the GPU gap per kernel and the CPU/GPU overlap p.

Everything else is held: datasheet peaks, model shapes, the kernel counts of the engine profiles.
Graph rows (forward and attention_only, each with the kernel it ran) are fitted jointly by least
squares on log(predicted / measured); eager rows afterwards, with the GPU held, by a robust
(soft-L1) least squares, since CPU-bound timings have outliers. Prefill rows are never fitted:
they are predicted and reported as a check.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from src.calibration.measurements import BACKENDS, CalibrationInputError
from src.costmodel import (
    CostModelParams,
    EngineProfile,
    GpuSpec,
    ModelSpec,
    pass_coefficients,
    pass_components_s,
)
from src.costmodel.presets import AttentionKernelFit
from src.costmodel.roofline import SMALL_GEMM_MAX_ROWS, launch_overhead_s

GRAPH_ENGINE = "pytorch-graphs"  # the implementation the graph rows measure
EAGER_ENGINE = "pytorch-eager"  # ... and the eager rows
GEMM_WAVE_TILE = 64  # output tile of the GEMM wave quantisation (design.md, "Calibration")
MIN_ROWS = 3  # rows a parameter needs in its regime before it is fitted

# (field, start, lower, upper, regime the rows must cover, meaning)
GPU_PARAMETERS = (
    ("gemv_bandwidth_efficiency_fraction", 0.8, 0.05, 1.0, "gemv",
     "weight streaming of 1-row GEMMs (matrix-vector kernels), fraction of peak bandwidth"),
    ("small_gemm_bandwidth_efficiency_fraction", 0.75, 0.05, 1.0, "small",
     f"weight streaming of 2..{SMALL_GEMM_MAX_ROWS}-row GEMMs, fraction of peak bandwidth"),
    ("memory_bandwidth_efficiency_fraction", 0.75, 0.05, 1.0, "large",
     f"weights of GEMMs with > {SMALL_GEMM_MAX_ROWS} rows, activations, elementwise kernels"),
    ("compute_efficiency_fraction", 0.6, 0.05, 1.0, "large",
     "tensor-core rate of compute-bound GEMMs, fraction of dense BF16 peak"),
    ("roofline_sharpness_p", 3.0, 1.0, 20.0, "large",
     "p of the GEMM roofline pnorm(memory, compute)"),
    ("kernel_fixed_us", 4.0, 0.0, 50.0, "any",
     "fixed GPU time per kernel (launch gap, ramp-up, tail), us"),
    ("attention_softmax_flops_per_pair", 200.0, 0.0, 4000.0, "attention",
     "softmax cost per (query, key) pair in attention kernels, tensor-core FLOP-equivalents"),
)
KERNEL_PARAMETERS = (
    ("compute_efficiency_fraction", 0.5, 0.05, 1.0,
     "tensor-core rate on the kernel's padded tiles, fraction of dense peak"),
    ("memory_bandwidth_efficiency_fraction", 0.85, 0.05, 1.0,
     "KV-cache read bandwidth, fraction of peak"),
)
VERIFY_PARAMETER = ("verification_extra_kernels_per_layer", 1.0, 0.0, 10.0,
                    "extra kernels per layer when a pass scores > 1 position per sequence")
EAGER_PARAMETERS = (
    ("cpu_launch_us_per_kernel", 20.0, 0.0, 500.0, "CPU time to issue one kernel, us"),
    ("launch_gap_us_per_kernel", 1.0, 0.0, 100.0, "GPU idle time per singly launched kernel, us"),
    ("launch_overlap_p", 4.0, 1.0, 50.0, "p of pnorm(GPU time, CPU launch time)"),
)


@dataclass(frozen=True)
class Calibration:
    """A fitted GPU and implementation, ready to predict rows and to be written as presets."""

    gpu: GpuSpec  # with the fitted efficiency fields set
    attention: tuple[AttentionKernelFit, ...]
    graph_engine: EngineProfile  # pytorch-graphs with the fitted verification extra kernels
    eager_engine: EngineProfile | None  # pytorch-eager with fitted launch costs (None: no rows)
    attention_kernel: str  # "best", "flash" or "cudnn": what the graph rows were fitted on
    fitted: dict = field(default_factory=dict)  # field -> (value, meaning) as printed/written


def regime_counts(rows: pd.DataFrame) -> dict:
    """How many fitted rows inform each parameter's regime."""
    fw = rows[(rows["what"] != "prefill")]
    tokens = fw["batch"] * fw["positions"]
    graph = fw[fw["mode"] == "graph"]
    g_tokens = graph["batch"] * graph["positions"]
    return {
        "gemv": int((g_tokens == 1).sum()),
        "small": int(((g_tokens >= 2) & (g_tokens <= SMALL_GEMM_MAX_ROWS)).sum()),
        "large": int((g_tokens > SMALL_GEMM_MAX_ROWS).sum()),
        "any": len(graph),
        "attention": len(graph),
        "verify": int((graph["positions"] > 1).sum()),
        "eager": int(((fw["mode"] == "eager") & (tokens > 0)).sum()),
    }


@dataclass(frozen=True)
class RowGroup:
    """Rows of one model, mode and attention backend that share a cost-model call (forward and
    attention_only rows together; prefill rows apart), as arrays taken out of the frame once:
    a fit predicts the same rows hundreds of times, and each cost-model call has a fixed cost."""

    model: str
    mode: str
    backend: str
    prefill: bool
    index: np.ndarray  # positions of these rows in the frame
    batch: np.ndarray  # S, float
    positions: np.ndarray  # t, float
    sum_context: np.ndarray  # S x context, float
    attention_only: np.ndarray  # bool per row: an attention_only row (else forward / prefill)


def row_groups(rows: pd.DataFrame) -> tuple[tuple[RowGroup, ...], int]:
    """The groups of `rows` (in order of first appearance) and the number of rows."""
    S_all = rows["batch"].to_numpy(float)
    t_all = rows["positions"].to_numpy(float)
    ctx_all = rows["context"].to_numpy(float)
    what = rows["what"].to_numpy()
    groups = []
    for (model_id, mode, backend, prefill), idx in rows.groupby(
            [rows["model"], rows["mode"], rows["attention_backend"], what == "prefill"],
            sort=False).indices.items():
        S = S_all[idx]
        groups.append(RowGroup(model_id, mode, backend, bool(prefill), idx, S, t_all[idx],
                               S * ctx_all[idx], what[idx] == "attention_only"))
    return tuple(groups), len(rows)


def predict(rows: pd.DataFrame, gpu: GpuSpec, models: dict, params: CostModelParams,
            attention: tuple, graph_engine: EngineProfile, eager_engine: EngineProfile | None,
            kernel: str | None = None) -> np.ndarray:
    """Predicted ms of every row: its model, mode (graph: graph_engine, eager: eager_engine),
    what (forward / attention_only / prefill) and attention kernel (the row's backend, or
    `kernel`: "best" takes the faster fitted kernel per row)."""
    return predict_groups(row_groups(rows), gpu, models, params, attention, graph_engine,
                          eager_engine, kernel)


def predict_groups(groups: tuple[tuple[RowGroup, ...], int], gpu: GpuSpec, models: dict,
                   params: CostModelParams, attention: tuple, graph_engine: EngineProfile,
                   eager_engine: EngineProfile | None, kernel: str | None = None) -> np.ndarray:
    """predict() of rows already split by row_groups()."""
    parts, n_rows = groups
    out = np.full(n_rows, np.nan)
    for g in parts:
        engine = graph_engine if g.mode == "graph" else eager_engine
        if engine is None:
            continue
        engine = replace(engine, attention_kernel=kernel or g.backend)
        S, t = g.batch, g.positions
        c = pass_coefficients(gpu, models[g.model], 1, params, engine=engine,
                              attention_fits=attention)
        comp = pass_components_s(c, S, t, g.sum_context, prefill=g.prefill)
        ms = (comp["layers_non_attention"] + comp["attention"] + comp["lm_head"]
              + comp["communication"] + comp["launch"]) * 1e3
        if g.attention_only.any():  # KV write + attention + the layout copies they need,
            a, t_a = g.attention_only, t[g.attention_only]
            gpu_s = (comp["attention"][a] + comp["lm_head"][a]  # embedding, final norm, LM head
                     + c.verify_fixed_s * (t_a > 1))
            ms[a] = (gpu_s + launch_overhead_s(c, gpu_s, t_a)) * 1e3
        out[g.index] = ms
    return out


def best_of_kernels(rows: pd.DataFrame, predicted: np.ndarray) -> pd.DataFrame:
    """Per configuration (model, mode, what, batch, positions, context) the faster measured
    kernel's row, with the prediction of the faster predicted kernel beside it."""
    df = rows.assign(predicted_ms=predicted)
    key = ["model", "mode", "what", "batch", "positions", "context"]
    measured = df.loc[df.groupby(key)["median_ms"].idxmin()].set_index(key)
    measured["predicted_ms"] = df.groupby(key)["predicted_ms"].min()
    return measured.reset_index()


def _check_rows(counts: dict, kernels: list, kernel_rows: dict) -> None:
    for name, _x0, _lo, _hi, regime, meaning in GPU_PARAMETERS:
        if counts[regime] < MIN_ROWS:
            what = {"gemv": "graph rows of batch x positions = 1",
                    "small": f"graph rows of 2..{SMALL_GEMM_MAX_ROWS} tokens",
                    "large": f"graph rows of more than {SMALL_GEMM_MAX_ROWS} tokens",
                    "any": "graph rows", "attention": "graph rows"}[regime]
            raise CalibrationInputError(
                "--measurements", f"too few rows to fit {name} ({meaning}): need at least "
                                  f"{MIN_ROWS} {what}, got {counts[regime]}")
    for kernel in kernels:
        if kernel_rows[kernel] < MIN_ROWS:
            raise CalibrationInputError(
                "--measurements", f"too few rows to fit the {kernel} attention kernel: need at "
                                  f"least {MIN_ROWS} graph rows with attention_backend "
                                  f"{kernel}, got {kernel_rows[kernel]}")
    if 0 < counts["eager"] < MIN_ROWS:
        raise CalibrationInputError(
            "--measurements", f"too few rows to fit the eager launch cost: need at least "
                              f"{MIN_ROWS} eager forward rows (or none), got {counts['eager']}")


def calibrate(rows: pd.DataFrame, gpu: GpuSpec, models: dict[str, ModelSpec],
              params: CostModelParams, graph_engine: EngineProfile,
              eager_engine: EngineProfile, attention_kernel: str = "best") -> Calibration:
    """Fit the GPU, its attention kernels and the implementation to `rows` (read_measurements).

    attention_kernel "best" fits every kernel the rows measured and predicts a configuration
    with the faster one; "flash" or "cudnn" fits (and keeps) only that kernel's rows.
    Raises CalibrationInputError when the rows cannot determine a parameter.
    """
    from scipy.optimize import least_squares  # the fit's one use of scipy

    if not gpu.sm_count:
        raise CalibrationInputError(
            "--gpu", f"{gpu.gpu_id} has no sm_count (streaming multiprocessors); add it to the "
                     "GPU's preset (a --presets file) from the datasheet")
    if attention_kernel != "best":
        rows = rows[rows["attention_backend"] == attention_kernel]
    fit_rows = rows[(rows["what"] != "prefill") & ~((rows["mode"] == "eager")
                                                     & (rows["what"] != "forward"))]
    graph = fit_rows[fit_rows["mode"] == "graph"].reset_index(drop=True)
    eager = fit_rows[fit_rows["mode"] == "eager"].reset_index(drop=True)
    kernels = [k for k in BACKENDS if (graph["attention_backend"] == k).any()]
    counts = regime_counts(fit_rows)
    _check_rows(counts, kernels,
                {k: int((graph["attention_backend"] == k).sum()) for k in kernels})
    fit_verify = counts["verify"] >= MIN_ROWS

    names = [p[0] for p in GPU_PARAMETERS]
    x0 = [p[1] for p in GPU_PARAMETERS]
    lo = [p[2] for p in GPU_PARAMETERS]
    hi = [p[3] for p in GPU_PARAMETERS]
    for kernel in kernels:
        for name, start, lower, upper, _ in KERNEL_PARAMETERS:
            names.append(f"{kernel}.{name}")
            x0.append(start)
            lo.append(lower)
            hi.append(upper)
    if fit_verify:
        names.append(VERIFY_PARAMETER[0])
        x0.append(VERIFY_PARAMETER[1])
        lo.append(VERIFY_PARAMETER[2])
        hi.append(VERIFY_PARAMETER[3])
    base_gpu = replace(gpu, gemm_wave_tile=GEMM_WAVE_TILE)
    measured = graph["median_ms"].to_numpy()
    graph_groups = row_groups(graph)  # the rows are the same at every step of the fit

    def unpack(x):
        values = dict(zip(names, map(float, x)))
        g = replace(base_gpu, **{n: values[n] for n in names if n in GPU_FIELDS})
        fits = tuple(AttentionKernelFit(gpu.gpu_id, k,
                                        values[f"{k}.compute_efficiency_fraction"],
                                        values[f"{k}.memory_bandwidth_efficiency_fraction"])
                     for k in kernels)
        engine = graph_engine
        if fit_verify:
            engine = replace(engine, verification_extra_kernels_per_layer=values[names[-1]])
        return g, fits, engine

    def residuals(x):
        g, fits, engine = unpack(x)
        return np.log(predict_groups(graph_groups, g, models, params, fits, engine, None)
                      / measured)

    result = least_squares(residuals, x0, bounds=(lo, hi), x_scale="jac")
    fitted_gpu, fits, fitted_graph = unpack(result.x)
    fitted = {n: (float(v), _meaning(n)) for n, v in zip(names, result.x)}

    fitted_eager = None
    if len(eager):
        verify = fitted_graph.verification_extra_kernels_per_layer
        start = replace(eager_engine, verification_extra_kernels_per_layer=verify)
        eager_measured = eager["median_ms"].to_numpy()
        eager_groups = row_groups(eager)

        def eager_engine_of(x):
            return replace(start, **dict(zip([p[0] for p in EAGER_PARAMETERS], map(float, x))))

        def eager_residuals(x):
            pred = predict_groups(eager_groups, fitted_gpu, models, params, fits,
                                  fitted_graph, eager_engine_of(x))
            return np.log(pred / eager_measured)

        eager_result = least_squares(
            eager_residuals, [p[1] for p in EAGER_PARAMETERS],
            bounds=([p[2] for p in EAGER_PARAMETERS], [p[3] for p in EAGER_PARAMETERS]),
            x_scale="jac", loss="soft_l1", f_scale=0.05)
        fitted_eager = eager_engine_of(eager_result.x)
        for (name, *_rest, meaning), value in zip(EAGER_PARAMETERS, eager_result.x):
            fitted[f"eager.{name}"] = (float(value), meaning)
    return Calibration(gpu=fitted_gpu, attention=fits, graph_engine=fitted_graph,
                       eager_engine=fitted_eager, attention_kernel=attention_kernel,
                       fitted=fitted)


GPU_FIELDS = {p[0] for p in GPU_PARAMETERS}


def _meaning(name: str) -> str:
    for p in GPU_PARAMETERS:
        if p[0] == name:
            return p[5]
    for p in KERNEL_PARAMETERS:
        if name.endswith("." + p[0]):
            return f"{name.split('.')[0]} attention: {p[4]}"
    return VERIFY_PARAMETER[4]


def predict_with(cal: Calibration, rows: pd.DataFrame, models: dict,
                 params: CostModelParams, kernel: str | None = None) -> np.ndarray:
    """Predicted ms of `rows` under a calibration (graph rows: its pytorch-graphs, eager rows:
    its pytorch-eager; kernel None = each row's own backend)."""
    return predict(rows, cal.gpu, models, params, cal.attention, cal.graph_engine,
                   cal.eager_engine, kernel)
