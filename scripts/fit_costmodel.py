"""Fit the hardware cost model's parameters to vidur's measurements and report the error.

Usage:  python scripts/fit_costmodel.py [--calibration-dir DIR] [--out FILE] [--no-write]

Reads (never copies) the calibration tables shipped beside the repository (--calibration-dir;
see their README.md):
  vidur_nonattention_forward_ms.csv -> memory_bandwidth_efficiency_fraction,
      compute_efficiency_fraction, roofline_sharpness_p: ONE shared set for every
      (gpu, model, tp, num_tokens) row, fitted jointly with one kernel_fixed_us PER GPU (written as
      [gpus."<id>"] kernel_fixed_us), least squares on log(predicted / measured); then the shared
      kernel_fixed_us for GPUs without data: the one value that fits all rows best with the three
      roofline parameters held.
  vidur_all_reduce_ms.csv -> latency + bus bandwidth per (system, GPU count); plus the generic
      latency / link-efficiency pair used for GPUs without measurements (fitted on H100 DGX).
  vidur_a100_cpu_overheads.csv -> per-step and per-draft-pass CPU defaults (linear in batch,
      Llama-2-7B TP1 rows).
Writes src/presets/costmodel_params.toml and prints a markdown report (paste into design.md).
Needs scipy (fit only; the runtime model does not import it).

vidur's profiling data are MIT-licensed (microsoft/vidur), but the calibration folder's README asks
that its tables stay out of this repository, so this is the one shipped fit a clone without
../shared cannot re-derive: tests/test_calibration.py re-fits it where the tables are present and
says why it skips where they are not.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import fields, replace
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from src.costmodel import (  # noqa: E402
    CostModelParams,
    load_presets,
    non_attention_forward_ms,
)

DEFAULT_CALIBRATION_DIR = REPO.parent / "shared" / "calibration"
DEFAULT_OUT = REPO / "src" / "presets" / "costmodel_params.toml"
GPU_IDS = {"a100": "a100-80gb-sxm", "h100": "h100-sxm"}  # vidur name -> preset id
SYSTEM_GPU_IDS = {"a100_dgx": "a100-80gb-sxm", "h100_dgx": "h100-sxm"}
# vidur's A100 all-reduce rows are not used: their 11-37 GB/s bus bandwidth and 56-118 us latency
# are 4-5x slower than public nccl-tests runs on 8x A100 SXM NVSwitch nodes (181 GB/s at 128 MiB,
# 35 us at 8 B; tests/test_allreduce.py), so A100 takes the generic model (H100-fitted latency and
# link efficiency), which matches those runs.
ALLREDUCE_SYSTEMS_NOT_FITTED = ("a100_dgx",)
MODEL_IDS = {"Llama-2-7b-hf": "llama-2-7b", "Meta-Llama-3-8B": "llama-3-8b"}
ROOFLINE_FIELDS = ("memory_bandwidth_efficiency_fraction", "compute_efficiency_fraction",
                   "roofline_sharpness_p")
FIT_FIELDS = ROOFLINE_FIELDS + ("kernel_fixed_us",)
X0 = (0.85, 0.72, 1.5)
LOWER = (0.2, 0.2, 1.0)
UPPER = (1.0, 1.0, 20.0)
KERNEL_X0, KERNEL_LOWER, KERNEL_UPPER = 3.5, 0.0, 50.0  # kernel_fixed_us, per GPU and shared


# ---------------------------------------------------------------- non-attention forward
def nonattention_groups(df: pd.DataFrame):
    """[(gpu, model, tp, tokens[], measured_ms[])] per (gpu, model, tp)."""
    return [(g, m, int(tp), s.num_tokens.to_numpy(float), s.forward_ms_non_attention.to_numpy())
            for (g, m, tp), s in df.groupby(["gpu", "model", "tp"], sort=True)]


def predict_groups(params: CostModelParams, groups, presets, kernel_us=None):
    """Predicted ms per group. kernel_us: {vidur gpu name: kernel_fixed_us}; a GPU not in it
    gets the shared params.kernel_fixed_us (as a GPU without measurements would)."""
    kernel_us = kernel_us or {}
    return [non_attention_forward_ms(
        replace(presets.gpu(GPU_IDS[g]), kernel_fixed_us=kernel_us.get(g)),
        presets.model(MODEL_IDS[m]), tp, T, params) for g, m, tp, T, _ in groups]


def _log_residuals(params, groups, presets, kernel_us=None):
    preds = predict_groups(params, groups, presets, kernel_us)
    return np.concatenate([np.log(p / y) for p, (*_, y) in zip(preds, groups)])


def fit_nonattention(groups, presets, base: CostModelParams):
    """(params, {gpu: kernel_fixed_us}): the roofline parameters and one kernel fixed time per GPU
    in `groups`, fitted jointly; params.kernel_fixed_us = the shared value for GPUs without data
    (best single value over all rows, roofline parameters held)."""
    gpus = sorted({g for g, *_ in groups})

    def unpack(x):
        return (replace(base, **dict(zip(ROOFLINE_FIELDS, map(float, x[:3])))),
                dict(zip(gpus, map(float, x[3:]))))

    def residuals(x):
        params, kernel_us = unpack(x)
        return _log_residuals(params, groups, presets, kernel_us)

    result = least_squares(residuals,
                           [*X0, *[KERNEL_X0] * len(gpus)],
                           bounds=([*LOWER, *[KERNEL_LOWER] * len(gpus)],
                                   [*UPPER, *[KERNEL_UPPER] * len(gpus)]))
    params, kernel_us = unpack(result.x)
    shared = least_squares(
        lambda k: _log_residuals(replace(params, kernel_fixed_us=float(k[0])), groups, presets),
        [np.mean(list(kernel_us.values()))], bounds=([KERNEL_LOWER], [KERNEL_UPPER])).x[0]
    return replace(params, kernel_fixed_us=float(shared)), kernel_us


def relative_errors(params, groups, presets, kernel_us=None):
    preds = predict_groups(params, groups, presets, kernel_us)
    return [np.abs(p / y - 1) for p, (*_, y) in zip(preds, groups)]


# ---------------------------------------------------------------- all-reduce
def fit_allreduce_system(size_bytes, ms, n):
    """latency_us, bus_bandwidth_gb_per_s of t = lat + 2(n-1)/n bytes / bw (log least squares)."""
    bus_bytes = 2 * (n - 1) / n * size_bytes

    def res(x):
        return np.log((x[0] * 1e-3 + bus_bytes / (x[1] * 1e9) * 1e3) / ms)

    x = least_squares(res, [30.0, 100.0], bounds=([0.0, 0.1], [1e4, 1e4])).x
    pred = x[0] * 1e-3 + bus_bytes / (x[1] * 1e9) * 1e3
    return float(x[0]), float(x[1]), np.abs(pred / ms - 1)


def fit_allreduce_generic(ar: pd.DataFrame, link_unidirectional_gb_per_s: float):
    """One latency and one link efficiency over all H100 DGX GPU counts."""
    size = ar.size_bytes.to_numpy(float)
    n = ar.num_workers.to_numpy(float)
    ms = ar.all_reduce_ms_median.to_numpy()
    bus_bytes = 2 * (n - 1) / n * size

    def res(x):
        return np.log((x[0] * 1e-3 + bus_bytes / (x[1] * link_unidirectional_gb_per_s * 1e9) * 1e3)
                      / ms)

    x = least_squares(res, [30.0, 0.7], bounds=([0.0, 0.01], [1e4, 1.0])).x
    err = np.abs(np.exp(res(x)) - 1)
    return float(x[0]), float(x[1]), err


# ---------------------------------------------------------------- CPU overheads
def fit_cpu(cpu: pd.DataFrame):
    """Linear fits in batch size of vidur's A100 CPU medians, Llama-2-7B TP1 rows."""
    rows = cpu[(cpu.model_name == "meta-llama/Llama-2-7b-hf") & (cpu.tensor_parallel_degree == 1)]
    b = rows.batch_size.to_numpy(float)
    step = (rows.schedule_median + rows.sampler_e2e_median + rows.prepare_inputs_e2e_median
            + rows.model_execution_launch_median + rows.process_model_outputs_median).to_numpy()
    draft = (rows.sampler_e2e_median + rows.model_execution_launch_median).to_numpy()
    step_slope, step_icpt = np.polyfit(b, step, 1)
    draft_slope, draft_icpt = np.polyfit(b, draft, 1)
    return dict(step_cpu_fixed_ms=float(step_icpt), step_cpu_per_seq_ms=float(step_slope),
                draft_pass_cpu_fixed_ms=float(draft_icpt),
                draft_pass_cpu_per_seq_ms=float(draft_slope)), (b.min(), b.max())


# ---------------------------------------------------------------- output
def toml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(round(v, 6))
    return repr(v)


def write_params_toml(path: Path, params: CostModelParams, kernel_us, allreduce_fits,
                      header_lines):
    lines = ["# Fitted parameters of the hardware cost model (src/costmodel/presets.py, "
             "CostModelParams).",
             "# WRITTEN BY scripts/fit_costmodel.py - rerun it instead of editing by hand.",
             *[f"# {line}" for line in header_lines], "", "[params]"]
    comments = {
        "memory_bandwidth_efficiency_fraction": "fit: vidur non-attention forward times",
        "compute_efficiency_fraction": "fit: vidur non-attention forward times",
        "roofline_sharpness_p": "fit: vidur non-attention forward times",
        "kernel_fixed_us": "fit: vidur non-attention forward times, shared value over all "
                           "rows (GPUs without their own [gpus] kernel_fixed_us)",
        "allreduce_latency_us": "fit: vidur all-reduce, H100 DGX (generic, for GPUs without data)",
        "allreduce_link_efficiency_fraction": "fit: vidur all-reduce, H100 DGX (generic)",
        "step_cpu_fixed_ms": "fit: vidur A100 CPU overheads, Llama-2-7B TP1, intercept",
        "step_cpu_per_seq_ms": "fit: vidur A100 CPU overheads, Llama-2-7B TP1, slope",
        "draft_pass_cpu_fixed_ms": "fit: vidur A100 sampler_e2e + launch, intercept",
        "draft_pass_cpu_per_seq_ms": "fit: vidur A100 sampler_e2e + launch, slope",
        "ngram_pass_cpu_ms": "prior, not fitted",
        "memory_reserve_fraction": "prior: vLLM gpu_memory_utilization 0.9",
    }
    for f in fields(CostModelParams):
        lines.append(f"{f.name} = {toml_value(getattr(params, f.name))}  # {comments[f.name]}")
    for g, us in sorted(kernel_us.items()):
        lines += ["", f'[gpus."{GPU_IDS[g]}"]',
                  f"kernel_fixed_us = {toml_value(us)}  # fit: vidur non-attention forward times, "
                  f"{g} rows (joint with the [params] roofline fit)"]
    by_gpu: dict[str, list] = {}
    for fit in allreduce_fits:
        by_gpu.setdefault(fit[0], []).append(fit)
    for gpu_id, fits in by_gpu.items():
        lines += ["", f'[allreduce."{gpu_id}"]',
                  "# GPU count = { latency_us, bus_bandwidth_gb_per_s }; fit: vidur all-reduce"]
        for _, n, lat, bw, *_ in sorted(fits, key=lambda f: f[1]):
            lines.append(f"{n} = {{ latency_us = {lat:.2f}, bus_bandwidth_gb_per_s = {bw:.2f} }}")
    path.write_text("\n".join(lines) + "\n")


def pct(x):
    return f"{100 * x:.1f}%"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calibration-dir", type=Path, default=DEFAULT_CALIBRATION_DIR)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--no-write", action="store_true", help="report only")
    args = ap.parse_args(argv)
    cal = args.calibration_dir
    if not (cal / "vidur_nonattention_forward_ms.csv").is_file():
        print(f"error: --calibration-dir: no vidur_nonattention_forward_ms.csv in {cal} (vidur's "
              "tables are not in the repository: the calibration data beside it hold them)",
              file=sys.stderr)
        return 2
    presets = load_presets()
    base = CostModelParams()
    na = pd.read_csv(cal / "vidur_nonattention_forward_ms.csv")
    ar = pd.read_csv(cal / "vidur_all_reduce_ms.csv")
    cpu = pd.read_csv(cal / "vidur_a100_cpu_overheads.csv")

    # 1. CPU defaults
    cpu_params, (bmin, bmax) = fit_cpu(cpu)
    # 2. all-reduce
    ar_fits = []
    for (system, n), s in ar.groupby(["system", "num_workers"], sort=True):
        if system in ALLREDUCE_SYSTEMS_NOT_FITTED:
            continue
        lat, bw, err = fit_allreduce_system(s.size_bytes.to_numpy(float),
                                            s.all_reduce_ms_median.to_numpy(), int(n))
        ar_fits.append((SYSTEM_GPU_IDS[system], int(n), lat, bw, err,
                        s.size_bytes.to_numpy() <= 1 << 20))
    h100 = presets.gpu("h100-sxm")
    gen_lat, gen_eff, gen_err = fit_allreduce_generic(
        ar[ar.system == "h100_dgx"], h100.interconnect_bidirectional_gb_per_s / 2)
    # 3. non-attention forward: joint fit + leave-one-GPU-out check
    groups = nonattention_groups(na)
    params, kernel_us = fit_nonattention(groups, presets, base)
    params = replace(params, allreduce_latency_us=gen_lat,
                     allreduce_link_efficiency_fraction=gen_eff, **cpu_params)
    errs = relative_errors(params, groups, presets, kernel_us)
    all_err = np.concatenate(errs)
    # what a GPU without data would get: the same fit, but the shared kernel fixed time
    errs_shared = relative_errors(params, groups, presets)
    cross = []
    for held_out in sorted({g for g, *_ in groups}):
        train = [q for q in groups if q[0] != held_out]
        test = [q for q in groups if q[0] == held_out]
        p_cv, _ = fit_nonattention(train, presets, base)  # held-out GPU: the shared kernel value
        e = np.concatenate(relative_errors(p_cv, test, presets))
        cross.append((held_out, p_cv, float(np.median(e)), float(e.max())))

    # ---------------- report
    out = []
    out.append("### Fit of the non-attention forward time (vidur profiling data, microsoft/vidur)")
    out.append("")
    out.append(f"{len(all_err)} rows: {len(groups)} (gpu, model, tp) curves x num_tokens 1..4096. "
               "One shared set of roofline parameters and one kernel fixed time per GPU, least "
               "squares on log(predicted / measured).")
    out.append("")
    out.append("| parameter | fitted value |")
    out.append("| --- | --- |")
    for name in ROOFLINE_FIELDS:
        out.append(f"| {name} | {getattr(params, name):.4g} |")
    for g, us in sorted(kernel_us.items()):
        out.append(f"| kernel_fixed_us, {GPU_IDS[g]} | {us:.4g} |")
    out.append(f"| kernel_fixed_us, shared (GPUs without data) | {params.kernel_fixed_us:.4g} |")
    out.append("")
    out.append(f"**Overall: median |relative error| {pct(np.median(all_err))}, "
               f"90th percentile {pct(np.quantile(all_err, 0.9))}, "
               f"worst {pct(all_err.max())}; rows above 20%: {int((all_err > 0.2).sum())} of "
               f"{len(all_err)}.**")
    out.append("")
    out.append("| gpu | model | tp | median error | worst error | worst at tokens | "
               "measured ms @1 / @512 / @4096 | model ms @1 / @512 / @4096 |")
    out.append("| --- | --- | --- | --- | --- | --- | --- | --- |")
    preds = predict_groups(params, groups, presets, kernel_us)
    for (g, m, tp, T, y), e, pr in zip(groups, errs, preds):
        i = int(np.argmax(e))
        at = [int(np.flatnonzero(T == k)[0]) for k in (1, 512, 4096)]
        out.append(f"| {g} | {m} | {tp} | {pct(np.median(e))} | {pct(e[i])} | {int(T[i])} | "
                   + " / ".join(f"{y[j]:.2f}" for j in at) + " | "
                   + " / ".join(f"{pr[j]:.2f}" for j in at) + " |")
    out.append("")
    out.append("With the shared kernel fixed time instead of each GPU's own (what a GPU without "
               "data gets, same roofline parameters): "
               + "; ".join(f"{g} median {pct(np.median(e))}, worst {pct(e.max())}"
                           for g, e in ((g, np.concatenate([x for q, x in zip(groups, errs_shared)
                                                            if q[0] == g]))
                                        for g in sorted(kernel_us)))
               + ".")
    out.append("")
    out.append("Transfer to a GPU without data (fit on one GPU, test on the other; the held-out "
               "GPU gets the shared kernel fixed time, here the training GPU's):")
    out.append("")
    out.append("| held-out GPU | bw eff | compute eff | p | kernel us | median error | worst |")
    out.append("| --- | --- | --- | --- | --- | --- | --- |")
    for held_out, p_cv, med, worst in cross:
        out.append(f"| {held_out} | " + " | ".join(f"{getattr(p_cv, n):.3g}" for n in FIT_FIELDS)
                   + f" | {pct(med)} | {pct(worst)} |")
    out.append("")
    out.append("### All-reduce fits (time = latency + 2(n-1)/n x bytes / bus bandwidth)")
    out.append("")
    out.append("| preset | GPUs | latency us | bus bandwidth GB/s | median error | worst error | "
               "median error, messages <= 1 MiB |")
    out.append("| --- | --- | --- | --- | --- | --- | --- |")
    for gpu_id, n, lat, bw, err, small in ar_fits:
        out.append(f"| {gpu_id} | {n} | {lat:.1f} | {bw:.1f} | {pct(np.median(err))} | "
                   f"{pct(err.max())} | {pct(np.median(err[small]))} |")
    out.append("")
    out.append(f"Generic (GPUs without data; fitted on all H100 DGX rows): latency "
               f"{gen_lat:.1f} us, {gen_eff:.3f} x one-direction link bandwidth; median error "
               f"{pct(np.median(gen_err))}, worst {pct(gen_err.max())}.")
    out.append("")
    out.append("### CPU overheads (vidur A100 profiles, Llama-2-7B TP1, batch "
               f"{bmin:.0f}-{bmax:.0f})")
    out.append("")
    for k, v in cpu_params.items():
        out.append(f"- {k} = {v:.4g}")
    report = "\n".join(out)
    print(report)

    if not args.no_write:
        header = ["Source: vidur's profiling data (microsoft/vidur, MIT) as tabulated in the "
                  "calibration data beside the",
                  "project (../shared/calibration; not in the repository, whose tests re-fit "
                  "this file where they are present).",
                  f"Non-attention fit over {len(all_err)} rows: median |rel. error| "
                  f"{pct(np.median(all_err))}, worst {pct(all_err.max())}."]
        write_params_toml(args.out, params, kernel_us, ar_fits, header)
        print(f"\nwrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
