"""The re-fitted GEMM efficiencies as a data file and as design.md's block.

`python scripts/fit_kernel_efficiency.py` fits (refit.py) and writes src/presets/
kernel_efficiency.toml with to_toml; the runtime reads that file (src/costmodel/
kernel_efficiency.py). markdown() renders design.md's `kernel-efficiency` block from the written
file and the cost model (scripts/update_docs.py), so the block shows what the file holds.
"""
from __future__ import annotations

from src.costmodel.engines import load_engine_profiles
from src.costmodel.kernel_efficiency import FITTED_FIELDS, KERNEL_EFFICIENCY_FILE
from src.costmodel.presets import load_presets
from src.costmodel.roofline import forward_pass_breakdown
from src.input_files import read_toml
from src.kernels.refit import FIT_M_MAX, FIT_NK_MIN, HOLDOUT_EVERY, EfficiencyFit
from src.reporting import md_table

HEADER = """\
# GEMM efficiencies of the roofline re-fitted to measured BF16 GEMM rows (issue 23): WRITTEN BY
# `python scripts/fit_kernel_efficiency.py`; rerun it instead of editing by hand. Source: NVIDIA
# AIConfigurator's database (PyPI aiconfigurator-core {version}, Apache-2.0),
# aiconfigurator_core/systems/data/<system>/gemm/<backend>/<version>/gemm_perf.parquet.
# Rows: BF16, passing src/kernels/physics.py, m 1..{m_max}, n, k >= {nk_min}; every
# {every}th row (in (m, n, k) order) held out. Objective: least squares on log(predicted /
# measured) of pnorm(2 (nk + mk + mn) / (BW e_bw), 2 m n k / (F e_c), p) + kernel_fixed
# (kernel_fixed held at the GPU's value). GPUs of one silicon (H100 SXM, H200) share e_c and p.
# Used by engine profiles with gemm_efficiency_source = "tables" (design.md, "Kernel efficiencies
# re-fitted to measured GEMMs"); errors are |predicted / measured - 1|.
"""
REPORT_FIELDS = ("table", "kernel_fixed_us", "rows_fit", "rows_held_out", "rows_rejected",
                 "fit_median_abs_error", "held_out_median_abs_error", "held_out_p90_abs_error",
                 "held_out_worst_abs_error", "baseline_median_abs_error",
                 "baseline_p90_abs_error")


def to_toml(fits: list[EfficiencyFit], package_version: str) -> str:
    out = [HEADER.format(version=package_version, m_max=FIT_M_MAX, nk_min=FIT_NK_MIN,
                         every=HOLDOUT_EVERY)]
    for f in fits:
        out.append(f'[kernel_efficiency."{f.gpu_id}"]')
        for name in FITTED_FIELDS + REPORT_FIELDS:
            v = getattr(f, name)
            out.append(f'{name} = "{v}"' if isinstance(v, str) else
                       f"{name} = {round(v, 6) if isinstance(v, float) else v}")
        out.append("")
    return "\n".join(out)


def step_ms(gpu_id: str, model_id: str, tp: int, batch: int, positions: int, context: int,
            engine_name: str, source: str | None = None) -> float:
    """One target pass's total_ms under an engine profile (source: override its
    gemm_efficiency_source, e.g. "preset" for the model before the refit)."""
    from dataclasses import replace

    pr = load_presets()
    engine = load_engine_profiles()[engine_name]
    if source is not None:
        engine = replace(engine, gemm_efficiency_source=source)
    return forward_pass_breakdown(pr.gpus[gpu_id], pr.models[model_id], tp, batch, positions,
                                  context, pr.params, pr.allreduce, engine=engine,
                                  attention_fits=pr.attention).total_ms


def markdown(path=KERNEL_EFFICIENCY_FILE) -> str:
    """design.md's block: the file's fitted values and errors, and H200 against H100 under
    vllm-v1 at batch 256 x 4 positions (Llama-3.1-8B, context 1024) before and after."""
    data = read_toml(path, "kernel_efficiency").get("kernel_efficiency", {})
    rows = [[g, v["table"], f"{v['memory_bandwidth_efficiency_fraction']:.3f}",
             f"{v['compute_efficiency_fraction']:.3f}", f"{v['roofline_sharpness_p']:.2f}",
             f"{v['kernel_fixed_us']:.2f}", f"{v['rows_fit']} / {v['rows_held_out']}",
             f"{v['rows_rejected']}", f"{v['fit_median_abs_error']:.1%}",
             f"{v['held_out_median_abs_error']:.1%} / {v['held_out_p90_abs_error']:.1%} / "
             f"{v['held_out_worst_abs_error']:.1%}",
             f"{v['baseline_median_abs_error']:.1%} / {v['baseline_p90_abs_error']:.1%}"]
            for g, v in data.items()]
    text = [md_table(["GPU", "table", "e_bw", "e_c", "p", "kernel us (held)", "rows fit / held out",
                      "rows rejected", "fit median", "held-out median / p90 / worst",
                      "preset's efficiencies, held-out median / p90"], rows), ""]
    pairs = []
    for source, label in (("preset", "before (GPU presets' efficiencies)"),
                          ("tables", "after (re-fitted)")):
        h100 = step_ms("h100-sxm", "llama-3.1-8b", 1, 256, 4, 1024, "vllm-v1", source)
        h200 = step_ms("h200", "llama-3.1-8b", 1, 256, 4, 1024, "vllm-v1", source)
        pairs.append([label, f"{h100:.2f}", f"{h200:.2f}", f"{h200 / h100:.3f}"])
    text.append("vllm-v1, Llama-3.1-8B TP 1, batch 256 x 4 positions, context 1024, one target "
                "pass (`forward_pass_breakdown`, roofline prices):")
    text.append("")
    text.append(md_table(["efficiencies", "H100 SXM ms", "H200 ms", "H200 / H100"], pairs))
    return "\n".join(text)
