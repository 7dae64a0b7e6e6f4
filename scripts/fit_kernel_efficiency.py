"""Re-fit the roofline's GEMM efficiencies per GPU to measured BF16 GEMM rows (issue 23).

Usage:  python scripts/fit_kernel_efficiency.py [--no-write]

Reads NVIDIA AIConfigurator's measured GEMM tables (the installed aiconfigurator-core; see
src/kernels/refit.py for the rows, the objective and the held-out split), writes
src/presets/kernel_efficiency.toml, refreshes design.md's `kernel-efficiency` block (and no
other) from it, and prints the block. Needs scipy (fit only). --no-write: print only.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from src.costmodel.kernel_efficiency import KERNEL_EFFICIENCY_FILE, table_efficiencies  # noqa: E402
from src.costmodel.presets import load_presets, memo_presets  # noqa: E402
from src.doc_blocks import replace_block  # noqa: E402
from src.kernels.refit import fit_all, held_out_errors_by_rows  # noqa: E402
from src.kernels.refit_file import markdown, to_toml  # noqa: E402
from src.kernels.sources import package_version  # noqa: E402
from src.reporting import write_atomic  # noqa: E402

BLOCK = "kernel-efficiency"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-write", action="store_true", help="print the fit, write nothing")
    args = ap.parse_args(argv)
    pr = load_presets()
    fits = fit_all(pr.gpus, pr.params)
    for f in fits:
        bands = held_out_errors_by_rows(f, pr.gpus[f.gpu_id], pr.params)
        print(f"{f.gpu_id}: e_bw {f.memory_bandwidth_efficiency_fraction:.4f} e_c "
              f"{f.compute_efficiency_fraction:.4f} p {f.roofline_sharpness_p:.3f}; held-out "
              "median / p90 |error| by m: " + ", ".join(
                  f"{lo}-{hi} {med:.1%} / {p90:.1%}" for lo, hi, med, p90 in bands))
    if args.no_write:
        print(to_toml(fits, package_version()))
        return 0
    write_atomic(str(KERNEL_EFFICIENCY_FILE), to_toml(fits, package_version()).encode())
    table_efficiencies.cache_clear()
    with memo_presets():
        block = markdown()
    design = REPO / "design.md"
    write_atomic(str(design), replace_block(design.read_text(), BLOCK, block).encode())
    print(block)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
