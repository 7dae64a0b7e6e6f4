"""The plan's outputs: results/plan.csv, its section of summary.txt, plots/plan_capacity.png.

Per deployment and policy (one CSV row each): the SLO capacity per replica and its bracket, the
throughput and TTFT/TPOT percentiles measured at that rate (mean over replications and the
Student-t interval), the capacity's gain over `none`, and the cost per million output tokens at
capacity:

    cost_per_mtok = price_usd_per_gpu_hour x GPUs per replica / (3600 x sustained tok/s) x 1e6

where sustained tok/s = the output tokens of the requests that arrived / the arrival window (at a
steady rate meeting the SLO the engine emits what arrives; serve's output_throughput_tok_s
divides by the makespan, which adds the drain of the last long requests), its interval from that
throughput's. Without prices the cost is in GPU-hours per million output
tokens (a price of 1). For a target rate T, a deployment needs ceil(T / capacity) replicas; the
cheapest is the one with the lowest replicas x GPUs x price per hour.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from src import outputs
from src.plan.search import MAX_WINDOW_FACTOR

SECTION_BEGIN = "=== CAPACITY PLAN (python run.py plan) ==="
SECTION_END = "=== END CAPACITY PLAN ==="
CSV_PATH, PLOT_PATH = "results/plan.csv", "plots/plan_capacity.png"
AT_CAPACITY = ("slo_attainment", "sustained_output_tok_s", "output_throughput_tok_s",
               "request_throughput_req_s",
               "ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s", "e2e_mean_s",
               "mean_batch", "acceptance_rate", "mean_gamma")


def plan_table(plan, searches: list[tuple]) -> pd.DataFrame:
    """One row per (deployment, policy) from [(deployment, policy, result)], in plan order."""
    from src.plan.search import capacity_gain

    rows = []
    none = {(d, p): r for d, p, r in searches if p == "none"}
    for d, policy, r in searches:
        base = none[(d, "none")]
        gain, gain_lo, gain_hi = capacity_gain(r, base)
        price = plan.price(d.gpu)
        unit_price = price if price is not None else 1.0
        at = r["at_capacity"] or {}
        row = {"gpu": d.gpu, "tp": d.tp, "gpus_per_replica": d.tp, "target": d.target,
               "draft": d.draft, "engine_profile": d.engine, "workload": d.workload,
               "policy": r["policy"], "capacity_per_s": r["capacity_per_s"],
               "first_miss_per_s": r["first_miss_per_s"], "capacity_bound": r["bound"],
               "unknown_per_s": r.get("unknown_per_s", math.nan),
               "window_to_steady_s": r.get("window_to_steady_s", math.nan),
               "probes": len(r["probes"]), "window_s": at.get("window_s", math.nan),
               "capacity_gain_vs_none": gain, "capacity_gain_low": gain_lo,
               "capacity_gain_high": gain_hi}
        for key in AT_CAPACITY:
            for suffix in ("", "_ci_low", "_ci_high"):
                row[key + suffix] = at.get(key + suffix, math.nan)
        tput = [at.get(f"sustained_output_tok_s{s}", math.nan) for s in ("", "_ci_high",
                                                                           "_ci_low")]
        hourly = unit_price * d.tp
        with np.errstate(all="ignore"):
            cost = [hourly / (3600.0 * t) * 1e6 if t and t > 0 else math.nan for t in tput]
        row["price_usd_per_gpu_hour"] = price if price is not None else math.nan
        row["cost_unit"] = "usd" if price is not None else "gpu_hours"
        row["cost_per_mtok"], row["cost_per_mtok_ci_low"], row["cost_per_mtok_ci_high"] = cost
        if plan.target_rate_per_s is not None and r["capacity_per_s"] > 0 \
                and r["bound"] != "unknown":
            n = math.ceil(plan.target_rate_per_s / r["capacity_per_s"] - 1e-9)
            row["replicas_for_target"] = n
            row["cost_per_hour_at_target"] = n * hourly
        else:
            row["replicas_for_target"] = math.nan
            row["cost_per_hour_at_target"] = math.nan
        rows.append(row)
    return pd.DataFrame(rows)


def csv_bytes(table: pd.DataFrame) -> bytes:
    return table.to_csv(index=False, float_format="%.6g", lineterminator="\n").encode()


def _dep(row) -> str:
    return f"{row.target}+{row.draft} tp{row.tp} {row.gpu} {row.engine_profile} {row.workload}"


def _rate(v: float) -> str:
    return "-" if not np.isfinite(v) else (f"{v:.3g}" if v < 1000 else f"{v:.0f}")


def _capacity(row) -> str:
    if row.capacity_bound == "unknown":
        at_least = f">= {_rate(row.capacity_per_s)}/s; " if row.capacity_per_s > 0 else ""
        return (f"unknown: needs a longer window ({at_least}{_rate(row.unknown_per_s)}/s met, "
                "not steady)")
    if row.capacity_bound == "below":
        return f"< {_rate(row.first_miss_per_s)}/s"
    if row.capacity_bound == "above":
        return f">= {_rate(row.capacity_per_s)}/s"
    return f"{_rate(row.capacity_per_s)}/s [{_rate(row.capacity_per_s)}-" \
           f"{_rate(row.first_miss_per_s)})"


def _table(header, rows, indent="  ") -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    fmt = lambda r: indent + "  ".join(str(x).ljust(w) for x, w in zip(r, widths)).rstrip()  # noqa
    return "\n".join([fmt(header)] + [fmt(r) for r in rows])


def summary_section(plan, table: pd.DataFrame, skipped: list[tuple],
                    extra: list[str] = ()) -> str:
    """The plan's section of summary.txt (P1 cheapest at the target rate, P2 best policy per
    deployment, P3 where speculation raises or lowers capacity)."""
    usd = bool(plan.prices_usd_per_gpu_hour)
    unit = "USD" if usd else "GPU-hours"
    tol = plan.tolerance
    deployments = table.drop_duplicates(["gpu", "tp", "target", "draft", "engine_profile",
                                         "workload"])
    n_all = len(deployments) + len(skipped)
    lines = [SECTION_BEGIN,
             f"Plan {plan.source}: {n_all} deployments ({len(plan.gpus)} GPUs x "
             f"{len(plan.tp_sizes)} tp sizes x {len(plan.pairs)} pairs x {len(plan.engines)} "
             f"engines x {len(plan.workloads)} workloads), {len(deployments)} fit in memory; "
             f"policies {', '.join(plan.policies)}.",
             f"SLO: TTFT <= {plan.slo_ttft_s:g} s and TPOT <= {plan.slo_tpot_s * 1e3:g} ms for "
             f"{plan.slo_attainment_target:.0%} of requests. Capacity = the highest steady rate "
             f"meeting it per replica, by doubling from {plan.start_rate_per_s:g}/s then "
             f"bisecting in log rate until first miss / last meet <= {1 + tol:g} (design.md, "
             "'Capacity search'); [last meet-first miss) is the bracket.",
             f"Each probe: Poisson arrivals over {plan.duration_s:g} s (longer where a meet was "
             f"not steady, up to {MAX_WINDOW_FACTOR * plan.duration_s:g} s), "
             f"{plan.replications} replications; figures at capacity are means with 95% CIs in "
             "results/plan.csv (throughputs' and latencies' on the log scale, never below 0).",
             ("Prices (USD per GPU-hour): " + ", ".join(f"{g} {p:g}" for g, p in
                                                         plan.prices_usd_per_gpu_hour)
              + f"; {plan.price_source}") if usd else
             "No prices given: costs are GPU-hours per million output tokens."]
    unknown = table[table.capacity_bound == "unknown"]
    if len(unknown):
        longest = MAX_WINDOW_FACTOR * plan.duration_s
        need = math.ceil(unknown.window_to_steady_s.max() / MAX_WINDOW_FACTOR / 10) * 10
        lines.append(f"Unknown capacity: {len(unknown)} of {len(table)} searches reached a rate "
                     f"that meets the SLO but is not steady even over {longest:g} s (the "
                     f"longest window, {MAX_WINDOW_FACTOR} x duration_s); it is neither a meet "
                     f"nor a miss, so the capacity is only bounded below: --duration-s {need:g} "
                     "or more would resolve it.")
    for d, why in skipped:
        lines.append(f"Skipped: {d.label}: {why}")
    lines.append("")
    met = table[(table.capacity_per_s > 0) & (table.capacity_bound != "unknown")]
    if plan.target_rate_per_s is not None:
        t = plan.target_rate_per_s
        lines.append(f"P1. Cheapest deployment meeting the SLO at {_rate(t)} requests/s "
                     f"(replicas = ceil({_rate(t)} / capacity), cost per hour in {unit}):")
        if len(met):
            best = met.sort_values(["cost_per_hour_at_target", "capacity_per_s"],
                                   ascending=[True, False], kind="stable").head(5)
            rows = [[_dep(r), r.policy, _capacity(r), int(r.replicas_for_target),
                     int(r.replicas_for_target * r.gpus_per_replica),
                     f"{r.cost_per_hour_at_target:.3g}"] for r in best.itertuples()]
            lines.append(_table(["deployment", "policy", "capacity/replica", "replicas", "GPUs",
                                 f"{unit}/h"], rows))
            top = best.iloc[0]
            n = int(top.replicas_for_target)
            lines.append(f"  Cheapest: {_dep(top)} with {top.policy}, {n} "
                         f"replica{'s' if n > 1 else ''}.")
        else:
            lines.append("  none: no deployment meets the SLO at any rate searched"
                         + (" with a known capacity." if len(unknown) else "."))
        if len(unknown):
            lines.append("  Not ranked (capacity unknown: needs a longer window): "
                         + "; ".join(f"{_dep(r)} {r.policy}" for r in unknown.itertuples()))
        lines.append("")
    lines.append(f"P2. Best policy per deployment (highest capacity; gains within the search "
                 f"tolerance {tol:.0%} are ties, and ties go to none) and cost per million "
                 f"output tokens at capacity ({unit}):")
    rows = []
    for _, grp in table.groupby(["gpu", "tp", "target", "draft", "engine_profile", "workload"],
                                sort=False):
        base = grp[grp.policy == "none"].iloc[0]
        pick = grp.sort_values("capacity_per_s", ascending=False, kind="stable").iloc[0]
        if not pick.capacity_per_s > base.capacity_per_s * (1 + tol):
            pick = base
        rows.append([_dep(base), _capacity(base), pick.policy, _capacity(pick),
                     "-" if pick.policy == "none" else (
                         f"{pick.capacity_gain_vs_none:.2f}x"
                         if np.isfinite(pick.capacity_gain_vs_none) else "unknown"),
                     _rate(pick.cost_per_mtok)])
    lines.append(_table(["deployment", "none", "best", "its capacity", "gain", "cost/Mtok"],
                        rows))
    lines.append("")
    lines.append(f"P3. Where speculation raises or lowers capacity (gain over none outside "
                 f"1 +- {tol:.0%}; [low-high] from both brackets):")
    rows = []
    for r in table[table.policy != "none"].itertuples():
        g = r.capacity_gain_vs_none
        verdict = ("unknown" if not np.isfinite(g) else "raises" if g > 1 + tol
                   else "lowers" if g < 1 / (1 + tol) else "same")
        rows.append([_dep(r), r.policy, verdict, "-" if not np.isfinite(g) else f"{g:.2f}x",
                     f"[{_rate(r.capacity_gain_low)}-{_rate(r.capacity_gain_high)}]"])
    lines.append(_table(["deployment", "policy", "capacity", "gain", "range"], rows)
                 if rows else "  (no speculation policy in the plan)")
    if extra:  # the disaggregated rows, src/plan/disagg_report.py
        lines += ["", *extra]
    lines.append(SECTION_END)
    return "\n".join(lines)


def replace_section(text: str, section: str) -> str:
    """`text` with its plan section replaced by `section` (appended where it has none)."""
    return outputs.replace_section(text, section, SECTION_BEGIN, SECTION_END)


def kept_section(out_dir: str) -> str | None:
    """The plan section of OUT/results/summary.txt, for a study run that rewrites the file to
    keep (plan.csv and the plot are not the study's files, so publish() keeps them)."""
    from src.outputs import kept_summary_section
    return kept_summary_section(out_dir, SECTION_BEGIN, SECTION_END)


def pareto_front(cost: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """Indices of the points no other point beats on both (lower cost, higher capacity), by
    increasing cost."""
    order = np.lexsort((-capacity, cost))
    front, best = [], -np.inf
    for i in order:
        if capacity[i] > best:
            front.append(i)
            best = capacity[i]
    return np.array(front, dtype=int)


def labelled_tick(v: float, digits: str, direction: int) -> float:
    """The nearest tick d x 10^k (d one of `digits`) at or below v (direction -1) or at or
    above it (+1): an axis limit that carries a label."""
    k = math.floor(math.log10(v))
    ticks = sorted(int(d) * 10.0 ** e for e in (k - 1, k, k + 1) for d in digits)
    ticks = [float(f"{x:.12g}") for x in ticks]
    return (max(x for x in ticks if x <= v * (1 + 1e-12)) if direction < 0
            else min(x for x in ticks if x >= v * (1 - 1e-12)))


def plot_capacity(plan, table: pd.DataFrame) -> bytes:
    """Capacity per replica vs cost per million output tokens: a marker per deployment, a colour
    per policy, the Pareto front (cheapest for its capacity) as a dashed line."""
    from src.reporting import FONT_PT, png_bytes, pyplot

    plt = pyplot()
    usd = bool(plan.prices_usd_per_gpu_hour)
    # an unknown capacity (only a lower bound) is not drawn as if it were one
    t = table[(table.capacity_per_s > 0) & np.isfinite(table.cost_per_mtok)
              & (table.capacity_bound != "unknown")].reset_index(drop=True)
    fig, ax = plt.subplots(figsize=(8.6, 5.4))
    policies = list(dict.fromkeys(table.policy))
    cmap = plt.get_cmap("tab10")
    colors = {p: ("black" if p == "none" else cmap(i % 10)) for i, p in enumerate(policies)}
    deps = list(dict.fromkeys(_dep(r) for r in table.itertuples()))
    markers = "osD^vP*Xh<>p"
    for r in t.itertuples():
        ax.errorbar(r.cost_per_mtok, r.capacity_per_s,
                    xerr=[[r.cost_per_mtok - r.cost_per_mtok_ci_low],
                          [r.cost_per_mtok_ci_high - r.cost_per_mtok]],
                    yerr=[[0], [max(r.first_miss_per_s - r.capacity_per_s, 0)]
                          if np.isfinite(r.first_miss_per_s) else [0]],
                    fmt=markers[deps.index(_dep(r)) % len(markers)], color=colors[r.policy],
                    ms=8, capsize=2, lw=0.8)
    if len(t):
        front = pareto_front(t.cost_per_mtok.to_numpy(), t.capacity_per_s.to_numpy())
        ax.plot(t.cost_per_mtok[front], t.capacity_per_s[front], "--", color="grey", lw=1,
                label="Pareto front", zorder=0)
        ax.scatter(t.cost_per_mtok[front], t.capacity_per_s[front], s=260, facecolors="none",
                   edgecolors="grey", lw=1.2, zorder=3)
    handles = [plt.Line2D([], [], color=colors[p], marker="o", ls="", label=p) for p in policies]
    handles += [plt.Line2D([], [], color="grey", marker=markers[i % len(markers)], ls="",
                           label=d) for i, d in enumerate(deps)]
    handles += [plt.Line2D([], [], color="grey", ls="--", marker="o", mfc="none", ms=12,
                           label="Pareto front (none cheaper\nand higher)")]
    ax.legend(handles=handles, fontsize=FONT_PT, loc="upper left", bbox_to_anchor=(1.01, 1.0),
              title="policy (colour), deployment (marker)", title_fontsize=FONT_PT, frameon=False)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("cost per million output tokens at capacity, "
                  + ("USD" if usd else "GPU-hours (no prices given)"))
    ax.set_ylabel("SLO capacity per replica, requests/s")
    ax.set_title(f"Capacity vs cost (SLO TTFT <= {plan.slo_ttft_s:g} s, TPOT <= "
                 f"{plan.slo_tpot_s * 1e3:g} ms for {plan.slo_attainment_target:.0%});\n"
                 "bars: cost CI, capacity bracket up to the first miss", fontsize=FONT_PT)
    from matplotlib.ticker import FuncFormatter

    def plain(digits):  # 0.05, 2, 300: the ticks whose leading digit is one of `digits`
        return FuncFormatter(lambda v, _: f"{v:g}" if f"{v:.0e}"[0] in digits else "")

    spans = ((ax.xaxis, ax.set_xlim, [t.cost_per_mtok, t.cost_per_mtok_ci_low,
                                      t.cost_per_mtok_ci_high]),
             (ax.yaxis, ax.set_ylim, [t.capacity_per_s, t.first_miss_per_s]))
    for axis, set_lim, columns in spans:
        values = np.concatenate([np.asarray(c, float) for c in columns])
        values = values[np.isfinite(values) & (values > 0)]
        narrow = len(values) and values.max() / values.min() < 4  # few decade ticks: label more
        digits = "12345678" if narrow else "1235"  # 0.09 would crowd 0.1
        axis.set_major_formatter(plain("123456789"))
        axis.set_minor_formatter(plain(digits))
        if len(values):  # the axis ends on labelled ticks, so every point lies between two
            set_lim(labelled_tick(values.min() / 1.1, digits, -1),
                    labelled_tick(values.max() * 1.1, digits, +1))
    ax.grid(True, which="both", alpha=0.3)
    return png_bytes(fig)
