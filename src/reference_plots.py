"""The reference study's plots: speedup and slot utilization against batch size, the divergence
penalty against gamma, and the gamma x batch size heatmap (matplotlib figures; src/analysis.py
renders them to PNG).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from src.reporting import (
    FONT_PT,
    MARKERS,
    legend_outside,
    log2_batch_axis,
    ordered,
    plot_speedup_grid,
    pyplot,
)

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

