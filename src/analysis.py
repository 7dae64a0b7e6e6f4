"""The reference study's report: results table -> results.csv, summary.txt and the plots.

Everything here reads the results DataFrame (one row per grid point, columns as in design.md,
"Metrics"); nothing is simulated. `write_outputs` also writes a hardware scenario's part (its
summary and plots come from src/hardware/report.py and src/hardware/plots.py). All files are
rendered in memory first, then written atomically (src/reporting.py).
"""
from __future__ import annotations

import os

import numpy as np
import pandas as pd

from src.acceptance import expected_speedup_flat, expected_speedup_flat_per_position
from src.config import PerPositionAlpha, StudyConfig
from src.hardware import plots as hardware_plots
from src.hardware import report as hardware_report
from src.hardware import schedules
from src.metrics import best_gamma
from src.mode_comparison import comparison_lines
from src.outputs import join_summary, publish
from src.reporting import (
    FONT_PT,
    MARKERS,
    csv_bytes,
    describe_alpha,
    describe_length,
    legend_outside,
    log2_batch_axis,
    md_table,
    ordered,
    plot_progress,
    plot_speedup_grid,
    png_bytes,
    pyplot,
    reference_gamma,
    table,
)
from src.trees import outputs as tree_outputs
from src.trees import report as tree_report

# --- answers --------------------------------------------------------------------------------------

def crossover_gamma(gammas: np.ndarray, speedups: np.ndarray) -> float | None:
    """Smallest gamma at which speedup falls below 1, linearly interpolated between grid gammas.

    None when speedup stays >= 1 over the whole range; the smallest gamma itself when it is
    already < 1.
    """
    below = np.nonzero(speedups < 1.0)[0]
    if below.size == 0:
        return None
    i = below[0]
    if i == 0:
        return float(gammas[0])
    g0, g1, s0, s1 = gammas[i - 1], gammas[i], speedups[i - 1], speedups[i]
    return float(g0 + (s0 - 1.0) * (g1 - g0) / (s0 - s1))


def safe_gamma(df: pd.DataFrame) -> pd.DataFrame:
    """Per gamma: worst and mean speedup over every quality mode, serving mode and batch size."""
    worst = df.loc[df.groupby("gamma")["speedup"].idxmin()].set_index("gamma")
    out = pd.DataFrame({
        "worst_speedup": worst["speedup"],
        "worst_ci_low": worst["speedup_ci_low"],
        "worst_at": worst["quality_mode"] + ", " + worst["serving_mode"] + ", B="
        + worst["batch_size"].astype(str),
        "mean_speedup": df.groupby("gamma")["speedup"].mean(),
    })
    return out.sort_index()


def pick_safe_gamma(sg: pd.DataFrame) -> int:
    """Safe default: of the gammas never slower than greedy anywhere (worst speedup >= 1), the one
    with the highest mean speedup; if every gamma regresses somewhere, the maximin gamma."""
    never_slower = sg[sg.worst_speedup >= 1.0]
    if len(never_slower):
        return int(never_slower.mean_speedup.idxmax())
    return int(sg.worst_speedup.idxmax())


def x_ci(row) -> str:
    return f"{row.speedup:.2f}x [{row.speedup_ci_low:.2f}, {row.speedup_ci_high:.2f}]"


# --- summary --------------------------------------------------------------------------------------

def summary_text(cfg: StudyConfig, df: pd.DataFrame, comparison: pd.DataFrame,
                 time_unit: str) -> str:
    modes, servings = ordered(df, "quality_mode"), ordered(df, "serving_mode")
    batches, gammas = sorted(df.batch_size.unique()), sorted(df.gamma.unique())
    b_lo, b_hi = batches[0], batches[-1]
    ends = sorted({b_lo, b_hi})  # the smallest and the largest batch size (one, if only one ran)
    max_half = ((df.speedup_ci_high - df.speedup_ci_low) / 2).max()
    out = []
    out.append("Batched speculative decoding: summary of the sweep")
    out.append("=" * 50)
    out.append("")
    out.append("Setup (all figures below come from this run; design.md defines every quantity)")
    out.append("  cost model        flat: a target pass costs 1 time unit at any batch size and "
               "any number of")
    out.append(f"                    verified positions; a draft pass costs c = {cfg.draft_cost:g} "
               "(Leviathan et al. 2023)")
    out.append(f"  verification      {cfg.verification}")
    out.append(f"  batch sizes       {', '.join(map(str, batches))}")
    out.append(f"  gammas            {', '.join(map(str, gammas))}")
    for m in modes:
        out.append(f"  {m:<17} {describe_alpha(cfg.alpha_modes[m])}")
        if getattr(cfg.alpha_modes[m], "source", ""):
            out.append(f"  {'':<17}   source: {cfg.alpha_modes[m].source}")
    out.append(f"  output lengths    {describe_length(cfg.output_len)}")
    out.append(f"  workload          {cfg.requests_per_slot} x batch size requests per "
               "replication, all queued at time 0")
    out.append(f"  statistics        {cfg.confidence:.0%} confidence intervals over independent "
               f"replications ({df.replications.min()}..{df.replications.max()} per grid point);")
    out.append(f"                    widest speedup half-width {max_half:.4f}; seed {cfg.seed}")
    out.append("")

    # 1. gains beyond batch 1
    best = best_gamma(df, ["quality_mode", "serving_mode", "batch_size"])
    out.append("1. Does speculative decoding keep its gains beyond batch size 1?")
    out.append("")
    out.append("   Speedup over greedy at each cell's best gamma (gamma in brackets), by batch "
               "size:")
    rows = []
    for m in modes:
        for s in servings:
            sub = best[(best.quality_mode == m) & (best.serving_mode == s)].set_index("batch_size")
            change = ([f"{sub.loc[b_hi, 'speedup'] / sub.loc[b_lo, 'speedup'] - 1:+.1%}"]
                      if b_hi != b_lo else [])
            rows.append([f"{m}, {s}"]
                        + [f"{sub.loc[b, 'speedup']:.2f} (g{sub.loc[b, 'gamma']})" for b in batches]
                        + change)
    change_header = [f"B{b_lo}->B{b_hi}"] if b_hi != b_lo else []
    out.append(table(["quality mode, serving mode"] + [f"B={b}" for b in batches] + change_header,
                     rows, "   "))
    out.append("")
    if b_hi == b_lo:
        out.append(f"   (one batch size in this run, B={b_lo}: run several to see how the gain "
                   "changes with it.)")
    for s in servings if b_hi != b_lo else ():
        sub = best[best.serving_mode == s]
        lo = sub.set_index(["quality_mode", "batch_size"])["speedup"]
        changes = {m: lo[(m, b_hi)] / lo[(m, b_lo)] - 1 for m in modes}
        worst_mode = min(changes, key=changes.get)
        loss = f"largest loss: {worst_mode}" if changes[worst_mode] < 0 else "no mode loses"
        out.append(f"   {s}: from B={b_lo} to B={b_hi} the best-gamma speedup changes by "
                   f"{min(changes.values()):+.1%} to {max(changes.values()):+.1%} ({loss}).")
    out.append("")

    # 2. best gamma
    out.append("2. Which gamma is optimal? Best gamma per quality mode and batch size, speedup "
               "[95% CI]:")
    for s in servings:
        out.append("")
        out.append(f"   {s}")
        rows = []
        for m in modes:
            sub = best[(best.quality_mode == m) & (best.serving_mode == s)].set_index("batch_size")
            rows.append([m] + [f"g={sub.loc[b, 'gamma']} {sub.loc[b, 'speedup']:.2f}x "
                               f"[{sub.loc[b, 'speedup_ci_low']:.2f},"
                               f"{sub.loc[b, 'speedup_ci_high']:.2f}]"
                               for b in batches])
        out.append(table(["quality mode"] + [f"B={b}" for b in batches], rows, "   "))
    out.append("")
    at = " and ".join(f"B={b}" for b in ends)
    out.append(f"   Speedup by gamma at {at} (all serving modes); the rows marked 'closed form' "
               "are")
    out.append("   Leviathan et al.'s formula at the mode's mean alpha (batch 1, long outputs):")
    if any(isinstance(cfg.alpha_modes[m], PerPositionAlpha) and len(cfg.alpha_modes[m].rates) > 1
           for m in modes):
        out.append("   (per-position modes: E[K+1] / (gamma c + 1) with E[K+1] = 1 + sum_i "
                   "prod_{j<=i} a_j at the mode's rates)")
    rows = []
    for m in modes:
        for s in servings:
            for b in ends:
                sub = df[(df.quality_mode == m) & (df.serving_mode == s)
                         & (df.batch_size == b)].set_index("gamma")
                rows.append([f"{m}, {s}, B={b}"] + [f"{sub.loc[g, 'speedup']:.2f}" for g in gammas])
        dist = cfg.alpha_modes[m]
        # at the median request's rates
        if isinstance(dist, PerPositionAlpha) and len(dist.rates) > 1:
            closed = [expected_speedup_flat_per_position(dist.rates, g, cfg.draft_cost)
                      for g in gammas]
            rows.append([f"{m}: closed form, per-position rates"] + [f"{x:.2f}" for x in closed])
            continue
        alpha = df[df.quality_mode == m].alpha_mean.iloc[0]
        rows.append([f"{m}: closed form, alpha={alpha:.3f}"]
                    + [f"{expected_speedup_flat(alpha, g, cfg.draft_cost):.2f}" for g in gammas])
    out.append(table(["quality mode, serving mode, batch"] + [f"g={g}" for g in gammas], rows,
                     "   "))
    out.append("")

    # 3. slower than greedy
    out.append("3. Where is speculative decoding slower than greedy?")
    out.append("")
    out.append(f"   Crossover gamma at {at}: the gamma beyond which speculation is slower than "
               "greedy")
    out.append("   (speedup falls below 1.0; interpolated between grid gammas; '-' = faster at "
               "every gamma")
    out.append(f"   up to {gammas[-1]}):")
    rows = []
    for m in modes:
        row = [m]
        for s in servings:
            for b in ends:
                sub = df[(df.quality_mode == m) & (df.serving_mode == s)
                         & (df.batch_size == b)].sort_values("gamma")
                g = crossover_gamma(sub.gamma.to_numpy(), sub.speedup.to_numpy())
                row.append("-" if g is None else f"{g:.1f}")
        rows.append(row)
    out.append(table(["quality mode"] + [f"{s} B={b}" for s in servings for b in ends], rows,
                     "   "))
    slower = df[df.speedup_ci_high < 1.0]
    out.append("")
    out.append(f"   {len(slower)} of {len(df)} grid points are significantly slower than greedy "
               "(CI entirely below 1.0).")
    out.append("   Worst regressions:" if len(slower)
               else "   Lowest speedups (none is below 1.0 beyond its CI):")
    rows = [[f"{r.quality_mode}, {r.serving_mode}", r.batch_size, r.gamma, x_ci(r),
             f"{r.divergence_penalty:.1%}"] for r in df.nsmallest(5, "speedup").itertuples()]
    out.append(table(["quality mode, serving mode", "B", "gamma", "speedup [CI]",
                      "rejected-draft time"], rows, "   "))
    out.append("")

    # 4. safe default
    sg = safe_gamma(df)
    safe = pick_safe_gamma(sg)
    maximin = int(sg.worst_speedup.idxmax())
    out.append("4. A safe default gamma for unknown draft quality: worst and mean speedup of each "
               "gamma over")
    out.append("   every quality mode, serving mode and batch size of this run:")
    rows = [[g, f"{r.worst_speedup:.2f}x", r.worst_at, f"{r.mean_speedup:.2f}x"]
            for g, r in sg.iterrows()]
    out.append(table(["gamma", "worst speedup", "where", "mean speedup"], rows, "   "))
    out.append(f"   -> gamma = {safe}: never below {sg.loc[safe, 'worst_speedup']:.2f}x "
               f"(CI low {sg.loc[safe, 'worst_ci_low']:.2f}) anywhere in this grid, mean "
               f"{sg.loc[safe, 'mean_speedup']:.2f}x")
    if (sg.worst_speedup >= 1.0).any():
        out.append("      (the highest mean among the gammas never slower than greedy).")
    else:
        out.append("      (every gamma is slower than greedy somewhere: the best worst case).")
    if maximin != safe:
        out.append(f"   The most conservative choice, gamma = {maximin}, has the best worst case "
                   f"({sg.loc[maximin, 'worst_speedup']:.2f}x) but a lower mean "
                   f"({sg.loc[maximin, 'mean_speedup']:.2f}x).")
    out.append("")

    # 5. verification policy
    out.append("5. Ragged vs lockstep verification (does the weakest-accepting request limit the "
               "batch?)")
    out.append("")
    pols = ordered(comparison, "verification")
    rows = []
    for m in modes:
        for g in sorted(comparison.gamma.unique()):
            for s in servings:
                sub = comparison[(comparison.quality_mode == m) & (comparison.gamma == g)
                                 & (comparison.serving_mode == s)]
                piv = sub.pivot_table(index="verification", columns="batch_size", values="speedup")
                rows.append([f"{m}, g={g}, {s}"]
                            + [" / ".join(f"{piv.loc[p, b]:.2f}" for p in pols) for b in batches])
    out.append(f"   speedup, {' / '.join(pols)}:")
    out.append(table(["quality mode, gamma, serving"] + [f"B={b}" for b in batches], rows, "   "))
    lock = comparison[comparison.verification == "lockstep"]
    rag = comparison[comparison.verification == "ragged"]
    key = ["quality_mode", "serving_mode", "batch_size", "gamma"]
    both = rag.merge(lock, on=key, suffixes=("_ragged", "_lockstep"))
    b1 = both[both.batch_size == b_lo]
    bh = both[both.batch_size == b_hi]
    out.append("")
    agree = (f"At B=1 the policies agree (largest difference "
             f"{(b1.speedup_ragged - b1.speedup_lockstep).abs().max():.3f}). " if b_lo == 1 else "")
    out.append(f"   {agree}At B={b_hi} lockstep loses "
               f"{(1 - bh.speedup_lockstep / bh.speedup_ragged).min():.0%} to "
               f"{(1 - bh.speedup_lockstep / bh.speedup_ragged).max():.0%} of the ragged speedup; "
               "lockstep tokens per")
    out.append(f"   step at B={b_hi}: "
               f"{bh.tokens_per_step_lockstep.min():.2f}..{bh.tokens_per_step_lockstep.max():.2f} "
               f"(ragged {bh.tokens_per_step_ragged.min():.2f}.."
               f"{bh.tokens_per_step_ragged.max():.2f}). "
               "The weakest request limits the batch only under lockstep.")
    out.append("")

    # 6. per-position vs i.i.d. acceptance (modes that name an i.i.d. counterpart)
    compared = comparison_lines(df, cfg.alpha_modes, modes)
    if compared:
        out.append("6. Per-position vs i.i.d. acceptance: how far would the i.i.d. assumption "
                   "misjudge the best gamma and speedup?")
        out.append("")
        out += compared
    return "\n".join(out) + "\n"


# --- plots ----------------------------------------------------------------------------------------

def plot_speedup_vs_batch(df: pd.DataFrame):
    return plot_speedup_grid(df, "serving_mode", str,
                             "Speculative speedup vs batch size (greedy makespan / "
                             "speculative makespan; dashed: 1.0 = no gain)")


def plot_utilization_vs_batch(df: pd.DataFrame, gamma: int):
    plt = pyplot()
    modes, servings = ordered(df, "quality_mode"), ordered(df, "serving_mode")
    batches = sorted(df.batch_size.unique())
    fig, axes = plt.subplots(1, len(modes), figsize=(3.9 * len(modes) + 2.6, 4.8), sharey=True,
                             squeeze=False,
                             layout="constrained")
    styles = {"static_batch": "-", "continuous_refill": "--"}
    shown = []
    for j, m in enumerate(modes):
        ax = axes[0, j]
        for s in servings:
            sub = df[(df.quality_mode == m) & (df.serving_mode == s)
                     & (df.gamma == gamma)].sort_values("batch_size")
            ls = styles.get(s, ":")
            ax.plot(sub.batch_size, 100 * sub.slot_utilization, ls, marker="o", ms=4, color="C0",
                    label=f"speculative (gamma {gamma}), {s}")
            ax.plot(sub.batch_size, 100 * sub.greedy_slot_utilization, ls, marker="s", ms=4,
                    color="C1",
                    label=f"greedy, {s}")
            shown += [100 * sub.slot_utilization, 100 * sub.greedy_slot_utilization]
        ax.set_title(m, fontsize=FONT_PT + 1)
        log2_batch_axis(ax, batches)
        ax.grid(alpha=0.3)
    low = float(pd.concat(shown).min())
    # fitted to the data, 100% in view
    axes[0, 0].set_ylim(max(0.0, 5 * np.floor(low / 5) - 5), 101)
    axes[0, 0].set_ylabel("slot utilization (% of slot-steps active)")
    legend_outside(fig, axes)
    fig.suptitle("Slot utilization vs batch size: a static batch idles finished slots until its "
                 "last request ends;\n"
                 "continuous refill refills them while requests are queued (both idle slots in the "
                 "final drain)")
    return fig


def plot_divergence_penalty(df: pd.DataFrame):
    plt = pyplot()
    modes, servings = ordered(df, "quality_mode"), ordered(df, "serving_mode")
    batches, gammas = sorted(df.batch_size.unique()), sorted(df.gamma.unique())
    shown_batches = sorted({batches[0], batches[-1]})
    fig, axes = plt.subplots(1, len(servings), figsize=(5.2 * len(servings) + 2.4, 4.4),
                             sharey=True, squeeze=False,
                             layout="constrained")
    for j, s in enumerate(servings):
        ax = axes[0, j]
        for k, m in enumerate(modes):
            for b, ls in zip(shown_batches, (":", "-") if len(shown_batches) == 2 else ("-",)):
                sub = df[(df.quality_mode == m) & (df.serving_mode == s)
                         & (df.batch_size == b)].sort_values("gamma")
                ax.plot(sub.gamma, 100 * sub.divergence_penalty, ls,
                        marker=MARKERS[k % len(MARKERS)], ms=4,
                        color=f"C{k}", label=f"{m}, B={b}")
                ax.fill_between(sub.gamma, 100 * sub.divergence_penalty_ci_low,
                                100 * sub.divergence_penalty_ci_high,
                                color=f"C{k}", alpha=0.25)
        ax.set_title(s, fontsize=FONT_PT + 1)
        ax.set_xlabel("gamma (draft tokens proposed per step)")
        ax.set_xticks(gammas)
        ax.grid(alpha=0.3)
    axes[0, 0].set_ylabel("divergence penalty (% of wall time on rejected drafts)")
    legend_outside(fig, axes, "quality mode, batch size")
    fig.suptitle("Time spent drafting tokens that are then rejected, vs gamma (95% CI bands)")
    return fig


def _text_color(rgba) -> str:
    """Black or white, whichever contrasts more with a cell of colour rgba (relative luminance)."""
    r, g, b = (c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in rgba[:3])
    return "black" if 0.2126 * r + 0.7152 * g + 0.0722 * b > 0.18 else "white"


def plot_gamma_batch_heatmap(df: pd.DataFrame):
    plt = pyplot()
    modes, servings = ordered(df, "quality_mode"), ordered(df, "serving_mode")
    batches, gammas = sorted(df.batch_size.unique()), sorted(df.gamma.unique())
    lo, hi = min(df.speedup.min(), 0.99), max(df.speedup.max(), 1.01)
    from matplotlib.colors import TwoSlopeNorm
    norm = TwoSlopeNorm(vcenter=1.0, vmin=lo, vmax=hi)
    cmap = plt.get_cmap("RdBu")
    fig, axes = plt.subplots(len(servings), len(modes),
                             figsize=(0.62 * len(batches) * len(modes) + 2.5,
                                      0.5 * len(gammas) * len(servings) + 1.6),
                             squeeze=False, layout="constrained")
    for i, s in enumerate(servings):
        for j, m in enumerate(modes):
            ax = axes[i, j]
            grid = (df[(df.quality_mode == m) & (df.serving_mode == s)]
                    .pivot_table(index="gamma", columns="batch_size", values="speedup")
                    .reindex(index=gammas, columns=batches))
            im = ax.imshow(grid.to_numpy(), cmap=cmap, norm=norm, origin="lower", aspect="auto")
            best = grid.to_numpy().argmax(axis=0)
            for y, g in enumerate(gammas):
                for x, b in enumerate(batches):
                    value = grid.loc[g, b]
                    ax.text(x, y, f"{value:.2f}", ha="center", va="center", fontsize=FONT_PT,
                            color=_text_color(cmap(norm(value))),
                            fontweight="bold" if best[x] == y else None,
                            in_layout=False)  # inside its cell: the layout need not measure it
            for x, y in enumerate(best):  # best gamma per batch size: a black box with a white rim
                for ec, lw in (("white", 3.6), ("black", 1.8)):
                    ax.add_patch(plt.Rectangle((x - 0.44, y - 0.42), 0.88, 0.84, fill=False, lw=lw,
                                               ec=ec))
            ax.set_xticks(range(len(batches)), [str(b) for b in batches])
            ax.set_yticks(range(len(gammas)), [str(g) for g in gammas])
            ax.set_xlabel("batch size (concurrent sequences)" if i == len(servings) - 1 else "")
            ax.set_ylabel("gamma (draft tokens per step)" if j == 0 else "")
            ax.set_title(f"{m}\n{s}", fontsize=FONT_PT + 1)
    fig.colorbar(im, ax=axes, shrink=0.8,
                 label="speedup over greedy (x); white = 1.0, red = slower than greedy")
    fig.suptitle("Speedup over gamma x batch size (boxed, bold: best gamma per batch size)")
    return fig


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
    # so is the validation plot (drawn by scripts/update_docs.py from the calibration data)
    from src.calibration.validation import PLOT_PATH
    validation_plot = os.path.join(out_dir, PLOT_PATH)
    if os.path.isfile(validation_plot):
        with open(validation_plot, "rb") as f:
            files[validation_plot] = f.read()
    files[os.path.join(out_dir, "results", "summary.txt")] = join_summary(summary).encode()
    files = {os.path.relpath(path, out_dir).replace(os.sep, "/"): data
             for path, data in files.items()}
    return publish(out_dir, files, owns=study_owns, after_commit=after_commit)


# --- blocks of README.md and design.md generated from the committed results -----------------------

# The seed README's published speedups (its "reference study" section): the
# figures our flat-cost run is compared with in design.md. Batch size and serving mode unstated
# there.
SEED_PUBLISHED = {
    "homogeneous_good": {2: 1.80, 4: 2.03, 6: 2.09, 8: 1.92, 12: 1.69, 16: 1.45},
    "homogeneous_mid": {2: 1.47, 4: 1.40, 6: 1.24, 8: 1.08, 12: 0.85, 16: 0.69},
}
SEED_PEAKS = {"homogeneous_good": 2.09, "homogeneous_mid": 1.50, "heterogeneous": 1.47,
              "bimodal": 1.49}


def readme_headline(df: pd.DataFrame, comparison: pd.DataFrame) -> str:
    """The README's headline results, from the default run's tables."""
    best = best_gamma(df, ["quality_mode", "serving_mode", "batch_size"])
    batches = sorted(df.batch_size.unique())
    b_lo, b_hi = batches[0], batches[-1]
    rows = []
    for m in ordered(df, "quality_mode"):
        for s in ordered(df, "serving_mode"):
            sub = best[(best.quality_mode == m) & (best.serving_mode == s)].set_index("batch_size")
            rows.append([m, s]
                        + [f"{sub.loc[b, 'speedup']:.2f}x (gamma {sub.loc[b, 'gamma']})"
                           for b in (b_lo, b_hi)])
    sg = safe_gamma(df)
    safe = pick_safe_gamma(sg)
    cross = {}  # (serving mode, batch size) -> homogeneous_mid's crossover gamma
    for (s, b), mid in df[df.quality_mode == "homogeneous_mid"].groupby(["serving_mode",
                                                                         "batch_size"]):
        if b in (b_lo, b_hi):
            mid = mid.sort_values("gamma")
            cross[(s, b)] = crossover_gamma(mid.gamma.to_numpy(), mid.speedup.to_numpy())
    lock = comparison[(comparison.batch_size == b_hi) & (comparison.verification == "lockstep")]
    text = [md_table(["quality mode", "serving mode", f"best speedup, batch {b_lo}",
                      f"best speedup, batch {b_hi}"], rows), ""]
    text.append(f"- Safe default for unknown draft quality: gamma {safe}, never below "
                f"{sg.loc[safe, 'worst_speedup']:.2f}x in the grid (worst case: "
                f"{sg.loc[safe, 'worst_at']}), mean {sg.loc[safe, 'mean_speedup']:.2f}x.")
    if cross and all(c is not None for c in cross.values()):
        def at(b):
            values = {s: c for (s, bb), c in cross.items() if bb == b}
            if len({f"{c:.1f}" for c in values.values()}) == 1:
                return f"{next(iter(values.values())):.1f} at batch {b}"
            return " and ".join(f"{c:.1f} ({s.replace('_', ' ')})"
                                for s, c in values.items()) + f" at batch {b}"
        text.append(f"- homogeneous_mid (alpha about 0.65) becomes slower than greedy beyond gamma "
                    f"{'; '.join(at(b) for b in sorted({b_lo, b_hi}))}.")
    text.append(f"- {int((df.speedup_ci_high < 1).sum())} of {len(df)} grid points are "
                "significantly slower than greedy.")
    if len(lock):
        text.append(f"- Lockstep verification at batch {b_hi}: speedup {lock.speedup.min():.2f}x "
                    f"to {lock.speedup.max():.2f}x "
                    f"(tokens per step {lock.tokens_per_step.min():.2f} to "
                    f"{lock.tokens_per_step.max():.2f}): "
                    "the weakest request limits the batch only under lockstep.")
    return "\n".join(text)


def readme_hardware_headline(hw: pd.DataFrame) -> str:
    """The README's hardware table: best-gamma speedup by batch size per engine profile."""
    serving = ("continuous_refill" if "continuous_refill" in set(hw.serving_mode)
               else hw.serving_mode.iloc[0])
    hw = hw[hw.serving_mode == serving]
    best = best_gamma(hw, ["engine_profile", "quality_mode", "batch_size"])
    batches = sorted(hw.batch_size.unique())
    rows = []
    for (engine, mode), sub in best.groupby(["engine_profile", "quality_mode"], sort=False):
        sub = sub.set_index("batch_size")
        rows.append([mode, engine]
                    + [f"{sub.loc[b, 'speedup']:.2f}x (g{sub.loc[b, 'gamma']})" for b in batches])
    text = [md_table(["quality mode", "engine"] + [f"B={b}" for b in batches], rows), ""]
    for s in schedules.schedules(hw):
        if s["quality_mode"] == "homogeneous_mid":
            text.append(f"- vLLM schedule, homogeneous_mid, {s['engine_profile']}: "
                        f"`{schedules.vllm_config_json(s)}`")
    return "\n".join(text)


def seed_comparison(df: pd.DataFrame) -> str:
    """design.md's table: the seed README's published speedups next to this run's."""
    batches = sorted(df.batch_size.unique())
    rows = []
    for m, published in SEED_PUBLISHED.items():
        for g, value in published.items():
            sub = df[(df.quality_mode == m)
                     & (df.gamma == g)].set_index(["serving_mode", "batch_size"])
            rows.append([m, g, f"{value:.2f}"]
                        + [f"{sub.loc[(s, b), 'speedup']:.2f}"
                           for s in ("static_batch", "continuous_refill")
                                                  for b in (batches[0], batches[-1])])
    header = ["quality mode", "gamma",
              "seed"] + [f"{s} B={b}" for s in ("static_batch", "continuous_refill")
                                                  for b in (batches[0], batches[-1])]
    peaks = []
    best = best_gamma(df, ["quality_mode", "serving_mode", "batch_size"])
    for m, value in SEED_PEAKS.items():
        sub = best[best.quality_mode == m]
        peaks.append([m, f"{value:.2f}", f"{sub.speedup.min():.2f}..{sub.speedup.max():.2f}",
                      ", ".join(str(g) for g in sorted(sub.gamma.unique()))])
    return (md_table(header, rows) + "\n\nPeak speedup over every batch size and serving mode:\n\n"
            + md_table(["quality mode", "seed peak", "this run, best-gamma speedup range",
                        "best gammas"], peaks))


def replace_block(text: str, name: str, body: str) -> str:
    """Replace what stands between <!-- NAME:start --> and <!-- NAME:end --> in text."""
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    i, j = text.index(start) + len(start), text.index(end)
    return text[:i] + "\n" + body + "\n" + text[j:]
