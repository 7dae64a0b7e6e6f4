"""The blocks of README.md and design.md generated from the committed results
(scripts/update_docs.py writes them between <!-- NAME:start --> and <!-- NAME:end --> markers).
"""
from __future__ import annotations

import pandas as pd

from src.hardware import schedules
from src.metrics import best_gamma
from src.reference_summary import crossover_gamma, pick_safe_gamma, safe_gamma
from src.reporting import (
    md_table,
    ordered,
)

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
    b_lo, b_hi = batches[0], batches[-1]
    for (engine, mode), sub in best.groupby(["engine_profile", "quality_mode"], sort=False):
        if mode != best.quality_mode.iloc[best.speedup.argmax()]:
            continue  # the mode with the largest gain: where batching costs most
        sub = sub.set_index("batch_size")
        text.append(f"- {mode}, {engine}: best-gamma speedup {sub.loc[b_lo, 'speedup']:.2f}x "
                    f"(gamma {sub.loc[b_lo, 'gamma']}) at B={b_lo}, "
                    f"{sub.loc[b_hi, 'speedup']:.2f}x (gamma {sub.loc[b_hi, 'gamma']}) at "
                    f"B={b_hi} ({sub.loc[b_hi, 'speedup'] / sub.loc[b_lo, 'speedup'] - 1:+.0%}).")
    at_1 = hw[hw.batch_size == b_lo].groupby("engine_profile").greedy_throughput_tokens_per_s.mean()
    if "ideal" in at_1 and (at_1.drop("ideal") > at_1["ideal"]).any():
        faster = at_1.drop("ideal").idxmax()
        text.append(f"- `ideal` is not a lower bound: at B={b_lo} `{faster}`'s greedy decoding "
                    f"runs {at_1[faster]:.0f} tokens/s against `ideal`'s {at_1['ideal']:.0f} "
                    "(its fused kernels; `ideal` is zero CPU cost on plain unfused kernels).")
    for s in schedules.schedules(hw):
        if s["quality_mode"] == "homogeneous_mid":
            text.append(f"- vLLM schedule for this study's fixed batch (summary H3), "
                        f"homogeneous_mid, {s['engine_profile']}: "
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
