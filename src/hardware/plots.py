"""Plots of a hardware scenario: speedup and optimal gamma vs batch size, speedup by context
length, what a speculative step costs. Input: the dict src/hardware/study.run_scenario returns.
"""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from src.hardware.schedules import best_gamma, best_rows
from src.reporting import (
    decorate_speedup_axis, log2_batch_axis, ordered, plot_speedup_grid, png_bytes,
)


def plot_speedup_vs_batch(hw: dict):
    serving = hw["scenario"].study.serving_modes[-1]
    sim = hw["results"]
    return plot_speedup_grid(sim[sim.serving_mode == serving], "engine_profile", lambda e: f"engine: {e}",
                             f"{hw['scenario'].name}: speedup vs batch size ({serving}; dashed: 1.0 = no gain)")


def plot_optimal_gamma(hw: dict):
    sim, steady = hw["results"], hw["steady"]
    serving = hw["scenario"].study.serving_modes[-1]
    best = best_rows(sim[sim.serving_mode == serving])
    modes, engine_names = ordered(sim, "quality_mode"), ordered(sim, "engine_profile")
    fig, axes = plt.subplots(1, len(engine_names), figsize=(5.5 * len(engine_names), 3.8), sharey=True, squeeze=False)
    for i, e in enumerate(engine_names):
        ax = axes[0, i]
        for k, m in enumerate(modes):
            sub = best[(best.engine_profile == e) & (best.quality_mode == m)].sort_values("batch_size")
            ax.plot(sub.batch_size, sub.schedule_gamma + 0.06 * (k - len(modes) / 2), "o-", ms=4, color=f"C{k}",
                    label=f"{m} (simulated)")
            st = steady[(steady.engine_profile == e) & (steady.quality_mode == m) & steady.mean_context
                        & (steady.batch_size <= best.batch_size.max())]
            bst = best_gamma(st, ["batch_size"]).sort_values("batch_size")
            ax.plot(bst.batch_size, bst.schedule_gamma, ":", color=f"C{k}", alpha=0.7)
        log2_batch_axis(ax, sorted(set(best.batch_size)))
        ax.set_ylabel("optimal gamma (0 = speculation off)")
        ax.set_title(f"engine: {e} (dotted: steady-state closed form)", fontsize=9)
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=7)
    fig.suptitle(f"{hw['scenario'].name}: optimal gamma vs batch size")
    fig.tight_layout()
    return fig


def plot_speedup_by_context(hw: dict):
    steady = hw["steady"]
    steady = steady[~steady.mean_context]
    modes, engine_names = ordered(steady, "quality_mode"), ordered(steady, "engine_profile")
    contexts = sorted(steady.context_len_tokens.unique())
    colors = plt.cm.plasma(np.linspace(0, 0.85, len(contexts)))
    fig, axes = plt.subplots(len(engine_names), len(modes), figsize=(4.2 * len(modes), 3.6 * len(engine_names)),
                             sharey=True, squeeze=False)
    for i, e in enumerate(engine_names):
        for j, m in enumerate(modes):
            ax = axes[i, j]
            sub = steady[(steady.engine_profile == e) & (steady.quality_mode == m)]
            bst = best_gamma(sub, ["batch_size", "context_len_tokens"])
            for c, color in zip(contexts, colors):
                line = bst[bst.context_len_tokens == c].sort_values("batch_size")
                ax.plot(line.batch_size, line.speedup, "o-", ms=3, color=color, label=f"{c} tokens")
            decorate_speedup_axis(ax, sorted(sub.batch_size.unique()), f"{m}\nengine: {e}",
                                  "best-gamma speedup (x), steady state" if j == 0 else None)
    axes[0, -1].legend(fontsize=7, title="context", title_fontsize=7)
    fig.suptitle(f"{hw['scenario'].name}: speedup vs batch size per context length (lines end where the KV cache stops fitting)")
    fig.tight_layout()
    return fig


def plot_step_breakdown(hw: dict):
    bd = hw["breakdown"]
    engine_names = ordered(bd, "engine_profile")
    fig, axes = plt.subplots(1, len(engine_names), figsize=(5.5 * len(engine_names), 3.8), sharey=True, squeeze=False)
    parts = [("draft_physics_ms", "draft (GPU)"), ("draft_overhead_ms", "draft (engine overhead)"),
             ("verify_physics_ms", "verify (GPU)"), ("verify_overhead_ms", "verify (engine overhead)")]
    colors = ["#6baed6", "#c6dbef", "#fd8d3c", "#fdd0a2"]
    for i, e in enumerate(engine_names):
        ax = axes[0, i]
        sub = bd[bd.engine_profile == e].sort_values("batch_size")
        x = np.arange(len(sub))
        bottom = np.zeros(len(sub))
        for (col, label), color in zip(parts, colors):
            ax.bar(x, sub[col], bottom=bottom, color=color, label=label)
            bottom += sub[col].to_numpy()
        greedy = sub.decode_physics_ms + sub.decode_overhead_ms
        ax.plot(x, greedy, "k_", ms=18, mew=2, label="greedy step")
        ax.set_xticks(x, [str(b) for b in sub.batch_size])
        ax.set_xlabel("batch size (concurrent sequences)")
        ax.set_ylabel("time per step (ms)")
        ax.set_title(f"engine: {e}, gamma {int(sub.gamma.iloc[0])}, context {int(sub.context_len_tokens.iloc[0])}",
                     fontsize=9)
        ax.grid(alpha=0.3, axis="y")
    axes[0, 0].legend(fontsize=7)
    fig.suptitle(f"{hw['scenario'].name}: what a speculative step costs")
    fig.tight_layout()
    return fig


PLOTS = {
    "hardware_speedup_vs_batch.png": plot_speedup_vs_batch,
    "hardware_optimal_gamma.png": plot_optimal_gamma,
    "hardware_speedup_by_context.png": plot_speedup_by_context,
    "hardware_step_breakdown.png": plot_step_breakdown,
}


def render_plots(hw: dict) -> dict[str, bytes]:
    """Every plot of PLOTS as PNG bytes, by file name."""
    return {name: png_bytes(plot(hw)) for name, plot in PLOTS.items()}
