"""plots/moe_speedup_vs_batch.png: per MoE scenario, the best-gamma speedup against batch size for
the MoE target and its dense twin, with the fraction of routed experts one MoE layer reads (decode
pass and 4-token verification pass) on a second axis."""
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
    fig, axes = plt.subplots(nrows, cols, figsize=(6.4 * cols, 3.6 * nrows), squeeze=False)
    for ax, study in zip(axes.flat, studies):
        sc = study.scenario
        mode = sc.study.quality_modes[0]
        best = study.best[study.best.quality_mode == mode]
        for target, style, colour in (("moe", "-", "tab:red"), ("dense twin", "--", "tab:blue")):
            b = best[best.target == target].sort_values("batch_size")
            ax.plot(b.batch_size, b.speedup, style, color=colour, marker="o", ms=3,
                    label=f"{'MoE target' if target == 'moe' else 'dense twin'} (best gamma)")
        ax.axhline(1.0, color="black", lw=0.8)
        ax.set_xscale("log", base=2)
        ticks = sorted(best.batch_size.unique())
        ax.set_xticks(ticks, [str(int(t)) for t in ticks])
        ax.set_ylim(bottom=min(0.9, float(best.speedup.min()) - 0.1))
        ax.set_xlabel("batch size (sequences)")
        ax.set_ylabel("speedup over greedy (x)")
        ax.set_title(f"{sc.name}\n{mode}, engine profile {study.engine}, "
                     f"{study.context_tokens} tokens of context", fontsize=FONT_PT)
        ax2 = ax.twinx()
        rows = study.rows[(study.rows.quality_mode == mode) & (study.rows.target == "moe")]
        g = PREMIUM_GAMMA if PREMIUM_GAMMA in set(rows.gamma) else int(rows.gamma.min())
        r = rows[rows.gamma == g].sort_values("batch_size")
        ax2.plot(r.batch_size, 100 * r.experts_decode_fraction, ":", color="grey",
                 label="experts read: decode")
        ax2.plot(r.batch_size, 100 * r.experts_verify_fraction, "-.", color="grey",
                 label=f"experts read: verify {g + 1} tokens")
        ax2.set_ylim(0, 105)
        ax2.set_ylabel("routed experts read per layer (%)", color="grey")
        handles = [a + b for a, b in zip(ax.get_legend_handles_labels(),
                                           ax2.get_legend_handles_labels())]
    for ax in list(axes.flat)[n:]:
        ax.set_visible(False)
    fig.suptitle("MoE targets against a dense twin of the same active size: steady-state speedup "
                 "of the best gamma\n(grey, right axis: routed experts one MoE layer reads)",
                 fontsize=10)
    fig.legend(*handles, loc="lower center", ncol=4, fontsize=FONT_PT, frameon=False)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return png_bytes(fig)
