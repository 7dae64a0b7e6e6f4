"""plots/moe_speedup_vs_batch.png: per MoE scenario, two panels sharing the batch axis: above, the
best-gamma speedup against batch size for the MoE target and its dense twin (1.0x = greedy);
below, the fraction of routed experts one MoE layer reads (decode pass and a 4-token verification
pass). Separate panels, not a second y axis, so no experts curve can seem to cross the 1.0x line."""
from __future__ import annotations

import math

from src.hardware.moe_report import PREMIUM_GAMMA
from src.reporting import FONT_PT, png_bytes, pyplot

PLOT_NAME = "moe_speedup_vs_batch.png"


def plot_moe_speedup(studies) -> bytes:
    plt = pyplot()
    n = len(studies)
    cols = 2 if n > 1 else 1
    nrows = math.ceil(n / cols)
    fig, axes = plt.subplots(2 * nrows, cols, figsize=(6.4 * cols, 4.6 * nrows), squeeze=False,
                             gridspec_kw={"height_ratios": [2.2, 1] * nrows},
                             layout="constrained")
    handles: list = [[], []]
    for i, study in enumerate(studies):
        ax, ax_e = axes[2 * (i // cols), i % cols], axes[2 * (i // cols) + 1, i % cols]
        sc = study.scenario
        mode = sc.study.quality_modes[0]
        best = study.best[study.best.quality_mode == mode]
        for target, style, colour in (("moe", "-", "tab:red"), ("dense twin", "--", "tab:blue")):
            b = best[best.target == target].sort_values("batch_size")
            ax.plot(b.batch_size, b.speedup, style, color=colour, marker="o", ms=3,
                    label=f"{'MoE target' if target == 'moe' else 'dense twin'} (best gamma)")
        ax.axhline(1.0, color="black", lw=0.8, label="1.0x = greedy")
        ticks = sorted(best.batch_size.unique())
        ax.set_ylim(bottom=min(0.9, float(best.speedup.min()) - 0.1))
        ax.set_ylabel("speedup over\ngreedy (x)")
        ax.set_title(f"{sc.name}\n{mode}, engine profile {study.engine}, "
                     f"{study.context_tokens} tokens of context", fontsize=FONT_PT)
        rows = study.rows[(study.rows.quality_mode == mode) & (study.rows.target == "moe")]
        g = PREMIUM_GAMMA if PREMIUM_GAMMA in set(rows.gamma) else int(rows.gamma.min())
        r = rows[rows.gamma == g].sort_values("batch_size")
        ax_e.plot(r.batch_size, 100 * r.experts_decode_fraction, ":", color="dimgrey",
                  marker=".", label="MoE experts read: decode")
        ax_e.plot(r.batch_size, 100 * r.experts_verify_fraction, "-.", color="dimgrey",
                  marker=".", label=f"MoE experts read: verify {g + 1} tokens")
        ax_e.set_ylim(0, 105)
        ax_e.set_ylabel("experts read\nper layer (%)")
        ax_e.set_xlabel("batch size (sequences)")
        for a in (ax, ax_e):
            a.set_xscale("log", base=2)
            a.set_xticks(ticks, [str(int(t)) for t in ticks])
            a.grid(alpha=0.3)
        ax.tick_params(labelbottom=False)
        handles = [a + b for a, b in zip(ax.get_legend_handles_labels(),
                                           ax_e.get_legend_handles_labels())]
    for j in range(n, nrows * cols):
        axes[2 * (j // cols), j % cols].set_visible(False)
        axes[2 * (j // cols) + 1, j % cols].set_visible(False)
    fig.suptitle("MoE targets against a dense twin of the same active size: steady-state speedup "
                 "of the best gamma\n(lower panel of each: routed experts one MoE layer reads)",
                 fontsize=10)
    fig.legend(*handles, loc="outside lower center", ncol=5, fontsize=FONT_PT, frameon=False)
    return png_bytes(fig)
