"""The reference study's summary.txt sections (1-6) and the answers they rest on.

Everything here reads the results DataFrame (one row per grid point, columns as in design.md,
"Metrics"); nothing is simulated. src/analysis.py places the text in summary.txt.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from src.acceptance import expected_speedup_flat, expected_speedup_flat_per_position
from src.config import PerPositionAlpha, StudyConfig
from src.metrics import best_gamma
from src.mode_comparison import comparison_lines
from src.reporting import (
    describe_alpha,
    describe_length,
    ordered,
    table,
)

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


def wider_gammas(gammas) -> str:
    """A --gammas list that extends the grid above its largest gamma G (to 1.5 G and 2 G)."""
    top = max(int(g) for g in gammas)
    extra = sorted({int(np.ceil(1.5 * top)), 2 * top} - {top})
    return ",".join(str(g) for g in sorted({int(g) for g in gammas} | set(extra)))


def grid_edge_lines(best: pd.DataFrame, gammas, keys: list[str], indent: str = "   ") -> list[str]:
    """Lines flagging the cells (rows of `best`, one per group of `keys`) whose best gamma is the
    grid's largest: the optimum may lie above the grid. [] where none is."""
    top = max(int(g) for g in gammas)
    at_top = best[best.gamma == top]
    if at_top.empty:
        return []
    cells = ["/".join(str(getattr(r, k)) for k in keys) for r in at_top.itertuples()]
    shown = ", ".join(cells[:6]) + (f" and {len(cells) - 6} more" if len(cells) > 6 else "")
    return [f"{indent}The best gamma is the grid's largest, {top}, at {len(cells)} of {len(best)} "
            f"cells ({'/'.join(keys)}: {shown}):",
            f"{indent}the optimum may lie above the grid: try --gammas {wider_gammas(gammas)}."]


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
    edge = grid_edge_lines(best, gammas, ["quality_mode", "serving_mode", "batch_size"])
    if edge:
        out.append("")
        out += edge
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
