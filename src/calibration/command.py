"""`python run.py calibrate`: fit the hardware cost model to measured step times of one GPU.

    python run.py calibrate --measurements FILE.csv [--measurements MORE.csv ...] [--gpu h200]
        [--out FILE.toml] [--attention-kernel best|flash|cudnn] [--presets MY.toml]

Reads FILE.csv (and MORE.csv, read together) in the project's measurement format
(src/calibration/measurements.py; README, "Measurement format"), fits the GPU's efficiencies, its
attention kernels and the measured implementation's launch costs (src/calibration/fit.py), prints
the fitted parameters and the fit (median and worst relative error per model and per mode, the
worst rows) and, with --out, writes a preset file, its header recording the error per kind of
pass (PASS_KINDS), that `step-time --presets FILE.toml` and scenario files (`presets = [...]`)
take.
Bad input: one line `error: <field>: <what is allowed>` on stderr, exit status 2, nothing written.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

from src.calibration.fit import (
    EAGER_ENGINE,
    GRAPH_ENGINE,
    Calibration,
    best_of_kernels,
    calibrate,
    predict_with,
)
from src.calibration.measurements import CalibrationInputError, read_measurements
from src.config import ConfigError, OneLineArgumentParser
from src.costmodel import load_engine_profiles, load_presets

WORST_ROWS = 8


def build_parser():
    ap = OneLineArgumentParser(
        prog="python run.py calibrate",
        description="Fit the hardware cost model's GPU parameters to measured step times "
                    "(the project's measurement format) and write them as a preset file.")
    ap.add_argument("--measurements", required=True, action="append", metavar="FILE.csv",
                    help="measured step times: columns model, mode, what, attention_backend, "
                         "batch, positions, context, median_ms (README, 'Measurement format'); "
                         "repeatable, the files are read together; prefill rows are checked, "
                         "never fitted")
    ap.add_argument("--gpu", default="h200",
                    help="GPU preset the measurements come from (default h200; your own with "
                         "--presets)")
    ap.add_argument("--out", metavar="FILE.toml",
                    help="write the fitted parameters as a preset file (default: print only)")
    ap.add_argument("--attention-kernel", default="best", choices=("best", "flash", "cudnn"),
                    help="fit both measured attention kernels and predict with the faster per "
                         "configuration (best, default), or fit and keep one")
    ap.add_argument("--presets", action="append", default=[], metavar="FILE.toml",
                    help="extra preset file merged over the built-ins (your GPU's datasheet "
                         "figures; repeatable)")
    return ap


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def error_table(frame: pd.DataFrame, by: list[str]) -> list[str]:
    """Lines: rows, median and worst |relative error| per group of `by` and over all."""
    err = (frame["predicted_ms"] / frame["median_ms"] - 1).abs()
    lines = [f"  {'  '.join(f'{b:<14}' for b in by)}  rows  median   worst"]
    for key, e in err.groupby([frame[b] for b in by], sort=True):
        key = key if isinstance(key, tuple) else (key,)
        lines.append(f"  {'  '.join(f'{k!s:<14}' for k in key)}  {len(e):>4}  "
                     f"{_pct(np.median(e)):>6}  {_pct(e.max()):>6}")
    lines.append(f"  {'  '.join(f'{x:<14}' for x in ['all'] + [''] * (len(by) - 1))}  "
                 f"{len(err):>4}  {_pct(np.median(err)):>6}  {_pct(err.max()):>6}")
    return lines


def evaluation(cal: Calibration, rows: pd.DataFrame, presets) -> dict[str, pd.DataFrame]:
    """Predicted vs measured for every row kind: graph forward (best-of kernels, or the fitted
    kernel), graph attention_only (per kernel), eager forward, prefill (best-of; a check)."""
    kernel = "best" if cal.attention_kernel == "best" else None

    def subset(mode, what):
        return rows[(rows["mode"] == mode) & (rows["what"] == what)]

    out = {}
    for name, mode, what, best in (("graph forward", "graph", "forward", True),
                                   ("graph attention_only", "graph", "attention_only", False),
                                   ("eager forward", "eager", "forward", False),
                                   ("prefill (not fitted)", "graph", "prefill", True)):
        sub = subset(mode, what)
        if cal.attention_kernel != "best":
            sub = sub[sub["attention_backend"] == cal.attention_kernel]
        if sub.empty or (mode == "eager" and cal.eager_engine is None):
            continue
        if best and kernel == "best":
            pred = predict_with(cal, sub, presets.models, presets.params, kernel="best")
            out[name] = best_of_kernels(sub, pred)
        else:
            pred = predict_with(cal, sub, presets.models, presets.params)
            out[name] = sub.assign(predicted_ms=pred)
    return out


def report(cal: Calibration, rows: pd.DataFrame, presets, source: str) -> str:
    gpu = cal.gpu
    lines = [f"Calibration of {gpu.gpu_id} ({gpu.name}) from {source}: {len(rows)} rows",
             "", "Fitted parameters:"]
    for name, (value, meaning) in cal.fitted.items():
        lines.append(f"  {name:<48} {value:>9.4g}  {meaning}")
    lines += ["", (f"Held: {gpu.dense_bf16_tflops:g} dense BF16 TFLOP/s, "
                   f"{gpu.memory_bandwidth_gb_per_s:g} GB/s, {gpu.sm_count} SMs (datasheet); "
                   f"kernel counts of {GRAPH_ENGINE} ({cal.graph_engine.kernels_per_layer} + "
                   f"{cal.graph_engine.attention_kernels_per_layer} per layer, "
                   f"{cal.graph_engine.kernels_per_pass} per pass).")]
    parts = evaluation(cal, rows, presets)
    worst = []
    for name, frame in parts.items():
        engine = EAGER_ENGINE if name.startswith("eager") else GRAPH_ENGINE
        own = "attention_only" in name or name.startswith("eager")
        how = (f"{cal.attention_kernel} only" if cal.attention_kernel != "best"
               else "the row's own kernel" if own
               else "the faster of the two kernels per configuration")
        lines += ["", f"{name} with {engine} ({how}): |predicted / measured - 1|"]
        lines += error_table(frame, ["model"])
        if name == "graph forward":
            lines += ["  by positions per sequence:"] + error_table(frame, ["positions"])[1:]
        worst.append(frame.assign(kind=name))
    allrows = pd.concat(worst, ignore_index=True)
    allrows["error"] = allrows["predicted_ms"] / allrows["median_ms"] - 1
    top = allrows.reindex(allrows["error"].abs().sort_values(ascending=False).index)
    lines += ["", f"Worst rows (of {len(allrows)}):",
              (f"  {'kind':<22} {'model':<14} {'kernel':<6} {'batch':>5} {'pos':>4} "
               f"{'context':>7} {'measured':>9} {'predicted':>9} {'error':>7}")]
    for r in top.head(WORST_ROWS).itertuples():
        lines.append(f"  {r.kind:<22} {r.model:<14} {r.attention_backend:<6} {r.batch:>5} "
                     f"{r.positions:>4} {r.context:>7} {r.median_ms:>9.3f} "
                     f"{r.predicted_ms:>9.3f} {100 * r.error:>+6.1f}%")
    return "\n".join(lines) + "\n"


def _toml_number(value: float) -> str:
    return repr(round(float(value), 6))


def preset_toml(cal: Calibration, source: str, summary: list[str]) -> str:
    """The preset file: [gpus.<id>] fitted fields, [attention.<id>.<kernel>], and the fitted
    fields of the pytorch-graphs / pytorch-eager engine profiles."""
    gpu = cal.gpu
    lines = [f"# Calibration of {gpu.gpu_id} ({gpu.name}): WRITTEN BY `python run.py calibrate`",
             f"# from {source};",
             "# rerun it instead of editing by hand. Meaning of each field: design.md, "
             "\"Calibration\".",
             "# Error per kind of pass, predicted / measured - 1 (summary.txt quotes these):",
             *[f"# {s}" for s in summary], "",
             f'[gpus."{gpu.gpu_id}"]', f"sm_count = {gpu.sm_count}",
             f"gemm_wave_tile = {gpu.gemm_wave_tile}"]
    for name, (value, meaning) in cal.fitted.items():
        if "." not in name and name != "verification_extra_kernels_per_layer":
            lines.append(f"{name} = {_toml_number(value)}  # fit: {meaning}")
    for fit in cal.attention:
        lines += ["", f'[attention."{gpu.gpu_id}".{fit.kernel}]',
                  f"compute_efficiency_fraction = {_toml_number(fit.compute_efficiency_fraction)}",
                  ("memory_bandwidth_efficiency_fraction = "
                   f"{_toml_number(fit.memory_bandwidth_efficiency_fraction)}")]
    verify = cal.graph_engine.verification_extra_kernels_per_layer
    lines += ["", f'[engines."{GRAPH_ENGINE}"]',
              f"verification_extra_kernels_per_layer = {_toml_number(verify)}  # fit",
              f'attention_kernel = "{cal.attention_kernel}"']
    if cal.eager_engine is not None:
        e = cal.eager_engine
        lines += ["", f'[engines."{EAGER_ENGINE}"]',
                  f"verification_extra_kernels_per_layer = {_toml_number(verify)}  # fit (graph)",
                  f"cpu_launch_us_per_kernel = {_toml_number(e.cpu_launch_us_per_kernel)}  # fit",
                  f"launch_gap_us_per_kernel = {_toml_number(e.launch_gap_us_per_kernel)}  # fit",
                  f"launch_overlap_p = {_toml_number(e.launch_overlap_p)}  # fit"]
    return "\n".join(lines) + "\n"


# kinds of pass in the preset header and summary.txt: (kind, evaluation() part, positions test)
PASS_KINDS = (("decode (CUDA graphs)", "graph forward", "decode"),
              ("verification (CUDA graphs)", "graph forward", "verify"),
              ("attention kernels alone (CUDA graphs)", "graph attention_only", None),
              ("decode (eager)", "eager forward", "decode"),
              ("verification (eager)", "eager forward", "verify"),
              ("prefill (not fitted)", "prefill (not fitted)", None))


def pass_errors(cal: Calibration, rows: pd.DataFrame, presets) -> list[tuple[str, int, float,
                                                                              float]]:
    """Per kind of pass present (PASS_KINDS): (kind, rows, median |error|, worst signed error),
    error = predicted / measured - 1; decode = 1 position per sequence, verification 2+."""
    parts = evaluation(cal, rows, presets)
    out = []
    for kind, part, positions in PASS_KINDS:
        frame = parts.get(part)
        if frame is None:
            continue
        if positions is not None:
            frame = frame[(frame["positions"] == 1) == (positions == "decode")]
        if frame.empty:
            continue
        err = (frame["predicted_ms"] / frame["median_ms"] - 1).to_numpy()
        out.append((kind, len(err), float(np.median(np.abs(err))),
                    float(err[np.argmax(np.abs(err))])))
    return out


def fit_summary(cal: Calibration, rows: pd.DataFrame, presets) -> list[str]:
    """One line per kind of pass (pass_errors): rows, median |error|, worst signed error (the
    preset file's header; summary.txt quotes it, src/calibration/recorded.py)."""
    return [f"{kind}: {n} rows, median |error| {_pct(median)}, worst {100 * worst:+.1f}%"
            for kind, n, median, worst in pass_errors(cal, rows, presets)]


def run(measurements, gpu_id: str = "h200", attention_kernel: str = "best",
        preset_paths=()) -> tuple[Calibration, pd.DataFrame, object]:
    """Read (one path or several, read together), check and fit; raises ConfigError
    (CalibrationInputError, CostModelInputError)."""
    presets = load_presets(preset_paths)
    gpu = presets.gpu(gpu_id, "--gpu")
    paths = [measurements] if isinstance(measurements, str | Path) else list(measurements)
    rows = pd.concat([read_measurements(str(p), presets.models) for p in paths],
                     ignore_index=True)
    profiles = load_engine_profiles(extra_paths=preset_paths)
    cal = calibrate(rows, gpu, presets.models, presets.params, profiles[GRAPH_ENGINE],
                    profiles[EAGER_ENGINE], attention_kernel)
    return cal, rows, presets


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.out is not None:
        out = Path(args.out)
        if out.is_dir() or not (out.parent if str(out.parent) else Path(".")).is_dir():
            print(f"error: --out: cannot write {args.out}; allowed: a file path in an existing "
                  "folder", file=sys.stderr)
            return 2
    try:
        cal, rows, presets = run(args.measurements, args.gpu, args.attention_kernel,
                                 args.presets)
    except (ConfigError, CalibrationInputError) as exc:
        field = "--presets" if exc.field_name == "presets" else exc.field_name  # the file itself
        print(f"error: {field}: {exc.allowed}", file=sys.stderr)
        return 2
    sys.stdout.write(report(cal, rows, presets,
                            " + ".join(Path(m).name for m in args.measurements)))
    if args.out is not None:
        from src.reporting import write_atomic  # imports matplotlib: only when writing

        text = preset_toml(cal, " + ".join(args.measurements), fit_summary(cal, rows, presets))
        try:
            write_atomic(args.out, text.encode())
        except OSError as exc:
            print(f"error: --out: cannot write {args.out} ({exc.strerror})", file=sys.stderr)
            return 2
        print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
