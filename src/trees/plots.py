"""The tree plot: per engine profile, the best tree's size N vs batch size (a line per quality
mode) and the speedup of the best tree and the best chain vs batch size, side by side."""
from __future__ import annotations

import pandas as pd

from src.reporting import FONT_PT, MARKERS, decorate_speedup_axis, log2_batch_axis, pyplot
from src.trees.report import best_rows, shape_label

PLOT_NAME = "tree_shapes_vs_batch.png"


def plot_trees(rows: pd.DataFrame, title: str):
    """rows: chain and tree rows (engine_profile column optional); one serving mode is drawn,
    continuous_refill where it ran."""
    plt = pyplot()
    serving = ("continuous_refill" if "continuous_refill" in set(rows.serving_mode)
               else rows.serving_mode.iloc[0])
    rows = rows[rows.serving_mode == serving]
    if "engine_profile" not in rows:
        rows = rows.assign(engine_profile="flat")
    engines = list(dict.fromkeys(rows.engine_profile))
    modes = list(dict.fromkeys(rows.quality_mode))
    batches = sorted(rows.batch_size.unique())
    fig, axes = plt.subplots(len(engines), 2, figsize=(11, 3.6 * len(engines) + 0.6),
                             squeeze=False, layout="constrained")
    colors = {m: plt.cm.tab10(i) for i, m in enumerate(modes)}
    for e_i, engine in enumerate(engines):
        best = best_rows(rows[rows.engine_profile == engine])
        ax_n, ax_s = axes[e_i]
        # the best shape on a categorical axis, one row per shape of the grid (sorted by N): each
        # label is written once, as a tick; modes at the same point are dodged sideways
        shapes = sorted({(int(t.tree_tokens), int(t.tree_steps), int(t.tree_topk))
                         for t in rows[rows.tree_topk > 1].itertuples()})
        row_of = {f"{s_}:{k}:{n_}": i for i, (n_, s_, k) in enumerate(shapes)}
        for m_i, mode in enumerate(modes):
            b = best[best.quality_mode == mode].sort_values("batch_size")
            if b.empty:
                continue
            dodge = 2.0 ** (0.08 * (m_i - (len(modes) - 1) / 2))
            x = [v * dodge for v in b.batch_size]
            y = [row_of[shape_label(t)] for t in b.tree]
            ax_n.plot(x, y, marker=MARKERS[m_i], color=colors[mode], label=mode)
            for xi, yi, v in zip(x, y, b.verdict):
                if v != "tree":  # the tree does not win here: hollow marker
                    ax_n.plot([xi], [yi], marker=MARKERS[m_i], ms=9, mfc="white",
                              color=colors[mode])
            ax_s.plot(b.batch_size, [t.speedup for t in b.tree], marker=MARKERS[m_i],
                      color=colors[mode], label=f"{mode}: best tree")
            ax_s.plot(b.batch_size, [c.speedup for c in b.chain], marker=MARKERS[m_i],
                      color=colors[mode], ls="--", mfc="white", label=f"{mode}: best chain")
        ax_n.set_yticks(range(len(shapes)), [f"{s_}:{k}:{n_}" for n_, s_, k in shapes])
        ax_n.set_ylim(-0.5, len(shapes) - 0.5)
        ax_n.set_ylabel("best tree S:K:N (rows by N)")
        log2_batch_axis(ax_n, batches)
        ax_n.grid(alpha=0.3)
        ax_n.set_title(f"{engine}: best SGLang tree (S:K:N) by batch size\n"
                       "(hollow: the tree does not beat the best chain)", fontsize=FONT_PT + 1)
        decorate_speedup_axis(ax_s, batches, f"{engine}: best tree (solid) vs best chain (dashed)",
                              "speedup over greedy decoding")
    handles, labels = axes[0, 1].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=min(4, len(labels)),
               fontsize=FONT_PT)
    fig.suptitle(f"{title}: token trees vs chains ({serving})", fontsize=FONT_PT + 2)
    return fig
