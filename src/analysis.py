"""The study's outputs: results table -> results.csv, summary.txt and the plots, written as a set.

Everything here reads the results DataFrame (one row per grid point, columns as in design.md,
"Metrics"); nothing is simulated. The reference study's summary sections come from
src/reference_summary.py and its plots from src/reference_plots.py; `write_outputs` also writes a
hardware scenario's part (its summary and plots come from src/hardware/report.py and
src/hardware/plots.py). All files are rendered in memory first, then written atomically
(src/outputs.py). README/design.md blocks: src/doc_blocks.py.
"""
from __future__ import annotations

import os

import pandas as pd

from src.config import StudyConfig
from src.hardware import plots as hardware_plots
from src.hardware import report as hardware_report
from src.metrics import best_gamma
from src.outputs import join_summary, publish
from src.reference_plots import (
    plot_divergence_penalty,
    plot_gamma_batch_heatmap,
    plot_speedup_vs_batch,
    plot_utilization_vs_batch,
)
from src.reference_summary import summary_text
from src.reporting import (
    csv_bytes,
    plot_progress,
    png_bytes,
    reference_gamma,
    table,
)
from src.trees import outputs as tree_outputs
from src.trees import report as tree_report

# --- writing --------------------------------------------------------------------------------------

def at_a_glance(reference: pd.DataFrame, hardware: pd.DataFrame) -> str:
    """The opening block of summary.txt: best-gamma speedup by batch size under each cost model,
    continuous refill, and the smallest batch at which even the best gamma is slower than greedy."""
    serving = "continuous_refill"
    ref = reference[reference.serving_mode == serving].assign(engine_profile="flat (reference)")
    hw = hardware[hardware.serving_mode == serving]
    both = pd.concat([ref, hw.assign(engine_profile=hw.scenario + ", " + hw.engine_profile)],
                     ignore_index=True)
    if both.empty:
        return ""
    best = best_gamma(both, ["engine_profile", "quality_mode", "batch_size"])
    batches = sorted(both.batch_size.unique())
    shown = [b for b in batches if b in (1, 8, 64) or b == batches[-1]]
    rows = []
    for (cost, mode), sub in best.groupby(["engine_profile", "quality_mode"], sort=False):
        sub = sub.set_index("batch_size").sort_index()
        below = [b for b in sub.index if sub.loc[b, "speedup"] < 1.0]
        rows.append([f"{cost}: {mode}"]
                    + [f"{sub.loc[b, 'speedup']:.2f} (g{sub.loc[b, 'gamma']})" if b in sub.index
                       else "-"
                                    for b in shown]
                    + [f"B={below[0]}" if below else f"- (faster to B={sub.index.max()})"])
    # where it loses: not at the best gamma (the table), but at gammas too long for the draft
    slower = both[both.speedup_ci_high < 1.0]
    if slower.empty:
        losses = "No simulated grid point is significantly slower than greedy (CI below 1.0)."
    else:
        first = slower.sort_values(["gamma", "batch_size"]).iloc[0]
        losses = (f"Speculation loses where gamma is too long for the draft: {len(slower)} of the "
                  f"{len(both)} grid points behind this table\n(every gamma) are significantly "
                  f"slower than greedy (CI below 1.0), the shortest such gamma {first.gamma} "
                  f"({first.engine_profile}, {first.quality_mode}, B={first.batch_size});\n"
                  "section 3 and H2 give the crossovers.")
    return ("At a glance: best-gamma speedup over greedy, continuous refill (sections below give "
            "CIs and details);\n"
            "last column: the smallest batch size at which even the best gamma is slower than "
            "greedy\n\n"
            + table(["cost model: quality mode"] + [f"B={b}" for b in shown]
                    + ["slower than greedy from"], rows)
            + "\n\n" + losses + "\n")


REFERENCE_OUTPUTS = ("results/verification_comparison.csv", "plots/speedup_vs_batch.png",
                     "plots/utilization_vs_batch.png", "plots/divergence_penalty.png",
                     "plots/gamma_batch_heatmap.png")
HARDWARE_OUTPUTS = ("results/hardware_steady_state.csv", "results/hardware_step_breakdown.csv",
                    *(f"plots/{name}" for name in hardware_plots.PLOTS))


def study_owns(rel: str) -> bool:
    """Whether OUT/rel is a file the study writes in some run (the rest of OUT/results and
    OUT/plots, such as the serve command's outputs, is kept when a study run replaces its own)."""
    return rel in ("results/results.csv", "results/summary.txt", *REFERENCE_OUTPUTS,
                   *HARDWARE_OUTPUTS, *tree_outputs.OUTPUTS)


def reference_part(cfg: StudyConfig, reference: pd.DataFrame, comparison: pd.DataFrame, cost,
                   quiet: bool = True, plots: bool = True) -> dict:
    """The reference study's share of the outputs, rendered: {"summary": its summary.txt sections,
    "files": {path relative to OUT: bytes} (its plots, unless `plots` is False, and
    verification_comparison.csv)}. run.py renders it while the hardware scenario still runs in the
    other process."""
    drawings = {
        "speedup_vs_batch.png": lambda: plot_speedup_vs_batch(reference),
        "utilization_vs_batch.png": lambda: plot_utilization_vs_batch(
            reference, reference_gamma(reference.gamma.unique())),
        "divergence_penalty.png": lambda: plot_divergence_penalty(reference),
        "gamma_batch_heatmap.png": lambda: plot_gamma_batch_heatmap(reference)}
    files = {"results/verification_comparison.csv": csv_bytes(comparison)}
    if not plots:
        drawings = {}
    progress = plot_progress(quiet, "reference", len(drawings))
    for name, plot in drawings.items():
        files[f"plots/{name}"] = png_bytes(plot())
        if progress:
            progress(name)
    return {"summary": summary_text(cfg, reference, comparison, cost.time_unit), "files": files}


def write_outputs(out_dir: str, cfg: StudyConfig, reference: pd.DataFrame | None,
                  comparison: pd.DataFrame | None, cost, hardware: dict | None = None,
                  after_commit=None, quiet: bool = True, rendered: dict | None = None,
                  plots: bool = True, trees: pd.DataFrame | None = None) -> list[str]:
    """Render everything in memory, then write it: results/results.csv (reference and hardware rows,
    told apart by `scenario`), results/verification_comparison.csv, results/summary.txt and the
    plots of each part that ran, replacing OUT/results and OUT/plots as one set (src/outputs.py).
    `rendered`: the reference part already rendered (reference_part), else it is rendered here.
    `plots` False: no plots, and the study's plots of an earlier run go (they would show other
    numbers). `trees`: the reference study's tree rows (src/trees/report.py split_trees); a
    hardware scenario's come in hardware["tree_results"]. Returns the paths written."""
    results, summary, files = [], [], {}
    ref_rows = None if reference is None else tree_report.with_trees(reference, trees)
    hw_rows = None if hardware is None else tree_report.with_trees(
        hardware["results"], hardware.get("tree_results"))
    plot_dir = os.path.join(out_dir, "plots")
    if reference is not None:
        results.append(ref_rows.assign(scenario="reference", engine_profile="flat",
                                       time_unit=cost.time_unit))
        part = rendered or reference_part(cfg, reference, comparison, cost, quiet, plots)
        summary.append(part["summary"])
        files.update({os.path.join(out_dir, rel): data for rel, data in part["files"].items()})
    if hardware is not None:
        results.append(hw_rows.assign(time_unit="ms"))
        files[os.path.join(out_dir, "results",
                           "hardware_steady_state.csv")] = csv_bytes(hardware["steady"])
        files[os.path.join(out_dir, "results",
                           "hardware_step_breakdown.csv")] = csv_bytes(hardware["breakdown"])
        summary.append(hardware_report.summary_text(hardware, reference))
        drawn = hardware.get("plots")
        if drawn is None and plots:
            drawn = hardware_plots.render_plots(hardware)
        for name, png in (drawn or {}).items():
            files[os.path.join(plot_dir, name)] = png
    part = tree_outputs.tree_part(cfg, ref_rows, hardware, hw_rows, plots)
    summary.append(part["summary"] or "")
    files.update({os.path.join(out_dir, rel): data for rel, data in part["files"].items()})
    if reference is not None and hardware is not None:  # after the title, before the setup
        title, _, rest = summary[0].partition("\n\n")
        summary[0:1] = [title, at_a_glance(reference, hardware["results"]), rest]
    table = pd.concat(results, ignore_index=True)
    first = ["scenario", "engine_profile", "time_unit"]  # same column order whichever parts ran
    table = table[first + [c for c in table.columns if c not in first]]
    files[os.path.join(out_dir, "results", "results.csv")] = csv_bytes(table)
    # the serve command's outputs and summary section are kept: this run replaces OUT as a set
    from src.online.report import serving_outputs
    kept, section = serving_outputs(out_dir)
    files.update({os.path.join(out_dir, rel): data for rel, data in kept.items()})
    if section is not None:
        summary.append(section)
    from src.hardware.moe_report import kept_section  # and the moe-study command's section
    if (moe_section := kept_section(out_dir)) is not None:
        summary.append(moe_section)
    from src.plan.report import kept_section as plan_section  # and the plan command's section
    summary.append(plan_section(out_dir) or "")
    from src.validation.silicon_cli import kept_section as silicon_section  # silicon-validate's
    summary.append(silicon_section(out_dir) or "")
    # so is the validation plot (drawn by scripts/update_docs.py from the calibration data)
    from src.hardware.validation import PLOT_PATH
    validation_plot = os.path.join(out_dir, PLOT_PATH)
    if os.path.isfile(validation_plot):
        with open(validation_plot, "rb") as f:
            files[validation_plot] = f.read()
    from src.online.blog_check import with_summary_block
    from src.online.schedule_note import with_schedule_note
    text = with_schedule_note(join_summary(summary))
    blog = kept.get("results/serving_vllm_blog_check.csv")  # kept: say what it found
    if blog is not None:
        import io
        text = with_summary_block(text, pd.read_csv(io.BytesIO(blog)))
    files[os.path.join(out_dir, "results", "summary.txt")] = text.encode()
    files = {os.path.relpath(path, out_dir).replace(os.sep, "/"): data
             for path, data in files.items()}
    return publish(out_dir, files, owns=study_owns, after_commit=after_commit)

