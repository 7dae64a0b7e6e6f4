"""Plots of a hardware scenario: speedup and optimal gamma vs batch size, speedup by context
length, what a speculative step costs. Input: the dict src/hardware/study.run_scenario returns.
"""
from __future__ import annotations

import numpy as np

from src.hardware.schedules import resolved_gammas
from src.metrics import best_gamma
from src.reporting import (
    FONT_PT,
    MARKERS,
    decorate_speedup_axis,
    legend_outside,
    ordered,
    plot_speedup_grid,
    png_bytes,
    pyplot,
)


def plot_speedup_vs_batch(hw: dict):
    serving = hw["scenario"].study.serving_modes[-1]
    sim = hw["results"]
    return plot_speedup_grid(sim[sim.serving_mode == serving], "engine_profile",
                             lambda e: f"engine: {e}",
                             f"{hw['scenario'].name}: speedup vs batch size ({serving}; dashed: "
                             "1.0 = no gain)")


def optimal_gamma_cells(hw: dict) -> dict:
    """{engine: (gamma grid [mode, batch], labels)} of plot_optimal_gamma: the gamma the H3
    schedule uses (schedules.resolved_gammas) and, where they differ, the best point estimate and
    the steady-state closed form's pick."""
    sim, steady = hw["results"], hw["steady"]
    sim = sim[sim.serving_mode == hw["scenario"].study.serving_modes[-1]]
    modes, batches = ordered(sim, "quality_mode"), sorted(set(sim.batch_size))
    out = {}
    for e in ordered(sim, "engine_profile"):
        grid = np.zeros((len(modes), len(batches)), dtype=int)
        labels = [["" for _ in batches] for _ in modes]
        for k, m in enumerate(modes):
            res = resolved_gammas(sim[(sim.engine_profile == e)
                                      & (sim.quality_mode == m)]).set_index("batch_size")
            st = steady[(steady.engine_profile == e) & (steady.quality_mode == m)
                        & steady.mean_context]
            closed = best_gamma(st, ["batch_size"]).set_index("batch_size").schedule_gamma
            for x, b in enumerate(batches):
                g, pick = int(res.loc[b, "gamma"]), int(res.loc[b, "best_gamma"])
                grid[k, x] = g
                notes = [f"best {pick}"] if pick != g else []
                if b in closed.index and int(closed[b]) != g:
                    notes.append(f"closed form {int(closed[b])}")
                labels[k][x] = "\n".join([str(g)] + notes)
        out[e] = (grid, labels)
    return out


def plot_optimal_gamma(hw: dict):
    """The gamma the H3 schedule uses per (quality mode, batch size) as a labelled grid per
    engine profile (schedules.resolved_gammas: a switch only where the CIs separate); under it,
    where they differ, the best point estimate of the simulation ("best") and the steady-state
    closed form's pick ("closed form")."""
    plt = pyplot()
    sim = hw["results"]
    serving = hw["scenario"].study.serving_modes[-1]
    sim = sim[sim.serving_mode == serving]
    modes, engine_names = ordered(sim, "quality_mode"), ordered(sim, "engine_profile")
    batches = sorted(set(sim.batch_size))
    cells = optimal_gamma_cells(hw)
    best = best_gamma(sim, ["engine_profile", "quality_mode", "batch_size"])
    top = int(max(best.schedule_gamma.max(), 1))
    cmap = plt.get_cmap("YlGnBu", top + 1)
    fig, axes = plt.subplots(1, len(engine_names),
                             figsize=(0.85 * len(batches) * len(engine_names) + 4.5,
                                                            0.7 * len(modes) + 2.1),
                             squeeze=False, layout="constrained")
    for i, e in enumerate(engine_names):
        ax = axes[0, i]
        grid, labels = cells[e]
        im = ax.imshow(grid, cmap=cmap, vmin=-0.5, vmax=top + 0.5, aspect="auto")
        for k in range(len(modes)):
            for x in range(len(batches)):
                ax.text(x, k, labels[k][x], ha="center", va="center",
                        fontsize=FONT_PT + 1 if "\n" not in labels[k][x] else FONT_PT - 1,
                        color="white" if grid[k, x] > top / 2 else "black",
                        in_layout=False)  # inside its cell: the layout need not measure it
        ax.set_xticks(range(len(batches)), [str(b) for b in batches])
        ax.set_yticks(range(len(modes)), modes if i == 0 else [""] * len(modes))
        ax.set_xlabel("batch size (concurrent sequences)")
        ax.set_title(f"engine: {e}", fontsize=FONT_PT + 1)
    fig.colorbar(im, ax=axes, ticks=range(top + 1), shrink=0.9,
                 label="gamma of the H3 schedule (0 = speculation off)")
    fig.suptitle(f"{hw['scenario'].name}: the gamma the H3 schedule uses by batch size ({serving}, "
                 "simulated; a switch only where the 95% CIs separate).\nUnder it, where they "
                 "differ: 'best' = the best point estimate (within the CI of the schedule's), "
                 "'closed form' = the steady-state pick", fontsize=FONT_PT + 2)
    return fig


def plot_speedup_by_context(hw: dict):
    plt = pyplot()
    steady = hw["steady"]
    steady = steady[~steady.mean_context]
    modes, engine_names = ordered(steady, "quality_mode"), ordered(steady, "engine_profile")
    contexts = sorted(steady.context_len_tokens.unique())
    colors = plt.cm.plasma(np.linspace(0, 0.85, len(contexts)))
    fig, axes = plt.subplots(len(engine_names), len(modes),
                             figsize=(3.9 * len(modes) + 1.4, 3.6 * len(engine_names)),
                             sharey=True, squeeze=False, layout="constrained")
    for i, e in enumerate(engine_names):
        for j, m in enumerate(modes):
            ax = axes[i, j]
            sub = steady[(steady.engine_profile == e) & (steady.quality_mode == m)]
            bst = best_gamma(sub, ["batch_size", "context_len_tokens"])
            for k, (c, color) in enumerate(zip(contexts, colors)):
                line = bst[bst.context_len_tokens == c].sort_values("batch_size")
                ax.plot(line.batch_size, line.speedup, marker=MARKERS[k % len(MARKERS)], ms=4,
                        color=color,
                        label=f"{c} tokens")
            decorate_speedup_axis(ax, sorted(sub.batch_size.unique()), f"{m}\nengine: {e}",
                                  "best-gamma speedup (x), steady state" if j == 0 else None)
    legend_outside(fig, axes, "context\n(cached tokens\nper sequence)")
    fig.suptitle(f"{hw['scenario'].name}: speedup vs batch size per context length "
                 "(lines end where the KV cache stops fitting)")
    return fig


def plot_step_breakdown(hw: dict):
    """Stacked bars of one speculative step's time per batch size, one panel per engine,
    the greedy step beside it, and the tokens a speculative step commits per sequence (simulated
    at the same gamma): speculation pays where spec step / greedy step is below that number."""
    plt = pyplot()
    bd, sim = hw["breakdown"], hw["results"]
    engine_names = ordered(bd, "engine_profile")
    serving = hw["scenario"].study.serving_modes[-1]
    fig, axes = plt.subplots(1, len(engine_names), figsize=(6.2 * len(engine_names) + 2.6, 4.6),
                             squeeze=False,
                             layout="constrained")
    parts = [("draft_physics_ms", "draft (GPU)"), ("draft_overhead_ms", "draft (engine overhead)"),
             ("verify_physics_ms", "verify (GPU)"),
             ("verify_overhead_ms", "verify (engine overhead)")]
    colors = ["#3182bd", "#9ecae1", "#e6550d", "#fdae6b"]
    for i, e in enumerate(engine_names):
        ax = axes[0, i]
        sub = bd[bd.engine_profile == e].sort_values("batch_size")
        gamma = int(sub.gamma.iloc[0])
        x = np.arange(len(sub))
        bottom = np.zeros(len(sub))
        for (col, label), color in zip(parts, colors):
            ax.bar(x, sub[col], bottom=bottom, color=color, label=label, width=0.7)
            bottom += sub[col].to_numpy()
        greedy = (sub.decode_physics_ms + sub.decode_overhead_ms).to_numpy()
        ax.plot(x, greedy, "k_", ms=22, mew=2.5, label="greedy step")
        for xi, total, g in zip(x, bottom, greedy):
            # a cost ratio, not a speedup: this step takes ratio x the greedy step's time
            ax.annotate(f"{total / g:.1f}x\ngreedy\nstep", (xi, total), xytext=(0, 2),
                        textcoords="offset points", ha="center", va="bottom", fontsize=FONT_PT,
                        linespacing=0.95)
        ax.set_ylim(0, bottom.max() * 1.3)
        ax.set_xticks(x, [str(b) for b in sub.batch_size])
        ax.set_xlabel("batch size (concurrent sequences)")
        ax.set_ylabel("time per step (ms)")
        ax.set_title(f"engine: {e}, gamma {gamma}, context {int(sub.context_len_tokens.iloc[0])} "
                     "tokens",
                     fontsize=FONT_PT + 1)
        ax.grid(alpha=0.3, axis="y")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    gamma = int(bd.gamma.iloc[0])
    tokens = sim[(sim.gamma == gamma) & (sim.serving_mode == serving)]
    if not tokens.empty:  # acceptance does not depend on the engine: one line per quality mode
        per_mode = tokens.groupby("quality_mode", sort=False).tokens_per_step.mean()
        from matplotlib.lines import Line2D
        blank = Line2D([], [], linestyle="none")
        handles += [blank, blank] + [blank] * len(per_mode)
        labels += ["", f"tokens a gamma-{gamma} step\ncommits per sequence\n(greedy: 1; mean "
                       "over\nbatch sizes):"]
        labels += [f"{m}: {t:.2f}" for m, t in per_mode.items()]
    fig.legend(handles, labels, loc="outside right center", fontsize=FONT_PT,
               title="above each bar: spec step time\n"
               "/ greedy step time (a cost,\nnot a speedup)", title_fontsize=FONT_PT,
               handlelength=1.5)
    fig.suptitle(f"{hw['scenario'].name}: what a speculative step costs; speculation pays where "
                 "spec step time / greedy step time < tokens per step")
    return fig


PLOTS = {
    "hardware_speedup_vs_batch.png": plot_speedup_vs_batch,
    "hardware_optimal_gamma.png": plot_optimal_gamma,
    "hardware_speedup_by_context.png": plot_speedup_by_context,
    "hardware_step_breakdown.png": plot_step_breakdown,
}


def render_plots(hw: dict, progress=None) -> dict[str, bytes]:
    """Every plot of PLOTS as PNG bytes, by file name; progress(name) after each, if given."""
    out = {}
    for name, plot in PLOTS.items():
        out[name] = png_bytes(plot(hw))
        if progress:
            progress(name)
    return out
