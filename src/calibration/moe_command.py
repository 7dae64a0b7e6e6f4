"""`python run.py calibrate-moe`: fit the per-expert GEMM terms to `measure-moe` rows.

    python run.py calibrate-moe --measurements moe.csv --gpu h200 [--mode graph] [--out F.toml]

Prints the fitted terms (src/calibration/moe_fit.py), which were fitted and which held, and the
error of every shape and routing skew; --out writes them as a TOML table [moe_gemm.<gpu>].
Bad input: one line naming the flag or column and what is allowed, exit status 2, nothing written.
"""
from __future__ import annotations

import sys

import numpy as np

from src.calibration.measurements import CalibrationInputError, read_moe_measurements
from src.calibration.moe_fit import DEFAULT_SHARPNESS_P, PARAMETERS, fit_moe_terms, predict_ms
from src.config import OneLineArgumentParser
from src.costmodel import CostModelInputError, load_presets


def build_parser():
    p = OneLineArgumentParser(prog="run.py calibrate-moe", description=__doc__.split("\n\n")[0])
    p.add_argument("--measurements", required=True, help="CSV written by `run.py measure-moe`")
    p.add_argument("--gpu", default="h200", help="GPU preset whose peaks the fit divides by")
    p.add_argument("--mode", default="graph", choices=("graph", "eager"),
                   help="which rows to fit (default: graph)")
    p.add_argument("--out", default=None, help="write the fitted terms as TOML here")
    return p


def report(fit, rows, predicted) -> str:
    lines = [f"calibrate-moe: {fit.rows} rows, rms log error {fit.rms_log_error:.3f}"]
    meaning = {p[0]: p[5] for p in PARAMETERS}
    for name in (p[0] for p in PARAMETERS):
        state = "fitted" if name in fit.fitted else "held (too few rows in its regime)"
        lines.append(f"  {name} = {getattr(fit.terms, name):.4g}  [{state}] {meaning[name]}")
    rel = predicted / rows["median_ms"].to_numpy(float) - 1.0
    for (model, skew), idx in rows.groupby(["model", "routing_skew"]).groups.items():
        e = rel[np.asarray([rows.index.get_loc(i) for i in idx])]
        lines.append(f"  {model} skew {skew:g}: {len(e)} rows, median error "
                     f"{np.median(e):+.1%}, worst {e[np.argmax(np.abs(e))]:+.1%}")
    return "\n".join(lines)


def toml_text(fit, gpu_id: str, source: str) -> str:
    lines = [f"# fitted by `python run.py calibrate-moe` to {source}", f"[moe_gemm.{gpu_id}]"]
    lines += [f"{name} = {getattr(fit.terms, name):.6g}" for name in (p[0] for p in PARAMETERS)]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        gpu = load_presets().gpu(args.gpu, "--gpu")
        rows = read_moe_measurements(args.measurements)
    except (CalibrationInputError, CostModelInputError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    rows = rows[rows["mode"] == args.mode].reset_index(drop=True)
    if rows.empty:
        print(f"error: --mode: {args.measurements} has no {args.mode} rows", file=sys.stderr)
        return 2
    p = gpu.roofline_sharpness_p or DEFAULT_SHARPNESS_P
    fit = fit_moe_terms(rows, gpu.memory_bandwidth_gb_per_s, gpu.dense_bf16_tflops, p)
    predicted = predict_ms(rows, fit.terms, gpu.memory_bandwidth_gb_per_s, gpu.dense_bf16_tflops,
                           p)
    print(report(fit, rows, predicted))
    if args.out:
        from pathlib import Path

        from src.measure.cli import write_atomic
        write_atomic(Path(args.out), toml_text(fit, gpu.gpu_id, args.measurements))
        print(f"calibrate-moe: wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
