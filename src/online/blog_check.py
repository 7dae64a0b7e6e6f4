"""The vLLM blog check as a rate curve: speculation's TPOT speedup against the request rate.

    python -m src.online.blog_check [--out DIR]    # writes results/serving_vllm_blog_check.csv
                                                   # and plots/serving_vllm_blog_check.png

The vLLM team's blog "How Speculative Decoding Boosts vLLM Performance by up to 2.8x" (2024-10-17;
Llama-3-70B on 4x H100) reports speedups at QPS 1 (1.5x with a Qwama-0.5B draft on ShareGPT, 2.8x
with n-gram drafting on CNN/DailyMail) and slowdowns "at high QPS" (1.4x and 1.8x); the QPS grid
and the per-QPS values are only in its figures. Each check runs the serving simulator on the
scenario file's [serving] table (configs/scenarios/check-vllm-blog-70b-*.toml: the vllm-2024
engine profile, vLLM v0.6's max_num_seqs 256, gamma 5, the data set's lengths) for none and
fixed:5, and compares the TPOT p50 speedup with the blog's two points.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import replace

import pandas as pd

from src.hardware.scenario import SCENARIOS_DIR
from src.online.cli import config_from_args, make_parser
from src.outputs import (
    BLOG_BLOCK_BEGIN,
    BLOG_BLOCK_END,
    block_last,  # noqa: F401 (its users import it from here)
    existing_outputs,
)

CHECKS = {  # scenario file -> (label, blog speedup at QPS 1, blog speedup at high QPS)
    "check-vllm-blog-70b-draft.toml": ("draft model (Qwama-0.5B), ShareGPT", 1.5, 1 / 1.4),
    "check-vllm-blog-70b-ngram.toml": ("n-gram, CNN/DailyMail", 2.8, 1 / 1.8),
}


def config(name: str, **changes):
    """The check's ServeConfig from its scenario file's [serving] table (changes applied)."""
    cfg = config_from_args(make_parser().parse_args(["--scenario", str(SCENARIOS_DIR / name)]))
    return replace(cfg, **changes)


def run(workers=None, **changes) -> pd.DataFrame:
    """One row per (check, rate): the fixed:5 row of the serving table and the blog's points."""
    from src.online.study import run_serving
    rows = []
    for name, (label, low, high) in CHECKS.items():
        t = run_serving(config(name, **changes), workers=workers)["table"]
        t = t[t.policy != "none"].copy()
        t.insert(0, "check", label)
        t["blog_speedup_qps1"] = low
        t["blog_speedup_high_qps"] = high
        rows.append(t)
    return pd.concat(rows, ignore_index=True)


def plot(df: pd.DataFrame) -> bytes:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from src.online.serving_plots import _png
    checks = list(dict.fromkeys(df.check))
    fig, axes = plt.subplots(1, len(checks), figsize=(6.2 * len(checks), 4.8), squeeze=False)
    for ax, check in zip(axes[0], checks):
        g = df[df.check == check].sort_values("rate_per_s")
        rates = g.rate_per_s.to_numpy()
        ax.plot(rates, g.tpot_p50_speedup, "o-", color="tab:blue",
                label="simulated, vllm-2024 (TPOT p50)")
        ax.fill_between(rates, g.tpot_p50_speedup_ci_low, g.tpot_p50_speedup_ci_high,
                        color="tab:blue", alpha=0.2, lw=0)
        ax.plot([1.0], [g.blog_speedup_qps1.iloc[0]], "s", color="tab:red", ms=9,
                label="vLLM blog: QPS 1")
        high = g.blog_speedup_high_qps.iloc[0]
        ax.hlines(high, rates[len(rates) // 2], rates[-1], colors="tab:red", linestyles="--",
                  label="vLLM blog: 'high QPS' (rate not stated)")
        ax.axhline(1.0, color="grey", lw=1, ls=":")
        ax.set_xscale("log", base=2)
        ax.set_xticks(rates)
        ax.set_xticklabels([f"{r:g}" for r in rates])
        ax.set_xlabel("request rate (requests/s, Poisson)")
        ax.set_ylabel("TPOT speedup over no speculation (x)")
        ax.set_title(f"Llama-3-70B, 4x H100, gamma 5: {check}", fontsize=10)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=9, loc="upper right")
    fig.suptitle("vLLM blog (2024-10-17) against the serving simulator (bands: 95% CI)",
                 fontsize=11)
    fig.tight_layout()
    return _png(fig)


def markdown(df: pd.DataFrame) -> str:
    """design.md's table of the committed check: TPOT p50 speedup with its interval per rate."""
    rates = sorted(df.rate_per_s.unique())
    head = " | ".join(f"{r:g}/s" for r in rates)
    lines = [f"| setup | blog QPS 1 | blog high QPS | {head} |",
             "|---|---|---|" + "---|" * len(rates)]
    for check, g in df.groupby("check", sort=False):
        g = g.set_index("rate_per_s")
        cells = [f"{g.loc[r, 'tpot_p50_speedup']:.2f} [{g.loc[r, 'tpot_p50_speedup_ci_low']:.2f}, "
                 f"{g.loc[r, 'tpot_p50_speedup_ci_high']:.2f}]" for r in rates]
        lines.append(f"| {check} | {g.blog_speedup_qps1.iloc[0]:.2f} | "
                     f"{g.blog_speedup_high_qps.iloc[0]:.2f} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# the block's marks and its place (last) in summary.txt are src/outputs.py's, below every writer
BLOCK_BEGIN, BLOCK_END = BLOG_BLOCK_BEGIN, BLOG_BLOCK_END
# the reproduction rule: the blog's figure inside the simulated 95% CI widened by 15% of the
# figure (the tolerance of the fixed-batch check, design.md 'Published checks')
TOLERANCE = 0.15


def summary_block(df: pd.DataFrame) -> str:
    """summary.txt's block on the committed check: per setup, the blog's QPS-1 and high-QPS
    speedups against the simulated ones (1/s; the highest rate), whether each is reproduced, and
    whether the highest rate is a steady state (arrival window >= 20 mean E2E latencies)."""
    from src.online.serving_rules import STEADY_WINDOW_E2E
    lines = [BLOCK_BEGIN,
             "TPOT p50 speedup of fixed:5 over none (vllm-2024 profile, Llama-3-70B on 4x H100; "
             f"'reproduced' = the blog's figure inside the 95% CI widened by {TOLERANCE:.0%}):"]
    misses = []
    for check, g in df.groupby("check", sort=False):
        g = g.sort_values("rate_per_s")
        for label, row, blog in (("QPS 1", g.iloc[0], g.blog_speedup_qps1.iloc[0]),
                                 ("high QPS", g.iloc[-1], g.blog_speedup_high_qps.iloc[0])):
            lo, hi = row.tpot_p50_speedup_ci_low, row.tpot_p50_speedup_ci_high
            ok = lo * (1 - TOLERANCE) <= blog <= hi * (1 + TOLERANCE)
            window = row.requests / row.replications / row.rate_per_s
            steady = window >= STEADY_WINDOW_E2E * row.e2e_mean_s
            lines.append(f"  {check}, {label}: blog {blog:.2f}x, model {row.tpot_p50_speedup:.2f}x "
                         f"[{lo:.2f}, {hi:.2f}] at {row.rate_per_s:g}/s"
                         + ("" if steady else f" (a burst of {window:.0f} s, not a steady state)")
                         + (": reproduced" if ok else ": NOT reproduced"))
            if not ok and blog < 1.0 < hi * (1 + TOLERANCE):
                misses.append(f"{check} at {label} ({row.tpot_p50_speedup:.2f}x where the blog "
                              f"measured {1 / blog:.1f}x slower)")
    lines.append("  NOT reproduced: the model is known to miss there; do not read its figure as "
                 "what the engine does (design.md, 'The vLLM blog as a rate curve', says why).")
    for miss in misses:
        lines.append(f"  In particular {miss}: not evidence that speculation is harmless at peak.")
    lines.append(BLOCK_END)
    return "\n".join(lines)


def with_summary_block(summary: str, df: pd.DataFrame | None) -> str:
    """`summary` with its blog-check block replaced by summary_block(df) (appended where it has
    none; removed where df is None)."""
    from src.outputs import join_summary
    if BLOCK_BEGIN in summary and BLOCK_END in summary:
        head, rest = summary.split(BLOCK_BEGIN, 1)
        summary = join_summary([head, rest.split(BLOCK_END, 1)[1]])
    return summary if df is None else join_summary([summary, summary_block(df)])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m src.online.blog_check",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=".", help="output folder (default .)")
    args = ap.parse_args(argv)
    from src.outputs import locked, prepare, publish
    from src.reporting import csv_bytes
    prepare(args.out)
    df = run()
    with locked(args.out, print):  # what other commands wrote, read at swap time
        files = existing_outputs(args.out)
        files["results/serving_vllm_blog_check.csv"] = csv_bytes(df)
        summary = files.get("results/summary.txt", b"").decode("utf-8", "replace")
        files["results/summary.txt"] = with_summary_block(summary, df).encode()
        files["plots/serving_vllm_blog_check.png"] = plot(df)
        publish(args.out, files)
    cols = ["check", "rate_per_s", "tpot_p50_speedup", "tpot_p50_speedup_ci_low",
            "tpot_p50_speedup_ci_high", "mean_batch"]
    print(df[cols].to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
