"""The serving sweep's outputs: results/serving.csv, the serving section of summary.txt, plots.

Plots (plots/): serving_latency_vs_rate.png (p50 and p90 TPOT and TTFT against the request rate,
one line per policy, 95% intervals as bands), serving_throughput_latency.png (TPOT p50 against
output throughput, one point per rate), serving_goodput.png (requests per second meeting the SLO).
"""

from __future__ import annotations

import io
import os

import numpy as np
import pandas as pd

from src.outputs import join_summary
from src.reporting import pyplot

SECTION_BEGIN = "=== SERVING UNDER LOAD (python run.py serve) ==="
SECTION_END = "=== END SERVING UNDER LOAD ==="


def _fmt(v, digits=2):
    return "-" if not np.isfinite(v) else f"{v:.{digits}f}"


def _ci(row, key, digits=2, scale=1.0):
    v, lo, hi = row[key] * scale, row[f"{key}_ci_low"] * scale, row[f"{key}_ci_high"] * scale
    if not np.isfinite(lo):
        return _fmt(v, digits)
    return f"{v:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"


def _table(header, rows, indent="  "):
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    def line(r):
        return indent + "  ".join(str(x).ljust(w) for x, w in zip(r, widths))

    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])


def stops_paying(table: pd.DataFrame, policy: str, key: str = "tpot_p50_speedup") -> float | None:
    """Lowest rate from which the policy's speedup CI lies wholly below 1 at every higher rate."""
    t = table[table.policy == policy].sort_values("rate_per_s")
    below = (t[f"{key}_ci_high"] < 1.0).to_numpy()
    rates = t.rate_per_s.to_numpy()
    for i in range(len(rates)):
        if below[i:].all():
            return float(rates[i])
    return None


# a rate is a steady state when its arrival window is at least this many mean end-to-end
# latencies (design.md, section 15, "Steady state"): the engine fills up and drains within about
# one end-to-end latency, so transients touch about 2 / k of the requests (10% at k = 20); an
# overloaded rate, whose latencies grow with the window, fails the rule however long the window
STEADY_WINDOW_E2E = 20.0


def arrival_window_s(cfg, rate: float) -> float:
    """Seconds over which a replication's requests arrive at `rate` (about requests / rate)."""
    if cfg.duration_s is not None:
        return float(cfg.duration_s)
    if cfg.trace is not None:
        return (len(cfg.trace.arrival_s) - 1) / rate
    return cfg.requests_per_replication / rate


def steady_flags(table: pd.DataFrame, window_s: dict, k: float = STEADY_WINDOW_E2E) -> pd.Series:
    """Per row: True where the rate's arrival window is >= k x the row's mean E2E latency."""
    window = table.rate_per_s.map(window_s).astype(float)
    return window >= k * table.e2e_mean_s


# S5 interpolates a capacity only between two steady rates at most this factor apart: attainment
# falls from "met" to "missed" over a narrow band of rates (a queue's cliff), so across a wider
# bracket the interpolated figure says where the two measured attainments happen to sit, not
# where the cliff is, and a non-steady miss's attainment depends on how long it was overloaded
# (design.md section 15, "SLO capacity"); 1.25 admits the committed run's 32/40/48/56/64 steps
MAX_INTERPOLATION_RATIO = 1.25

MARK = " *"
MARK_LEGEND = (f"* = arrival window < {STEADY_WINDOW_E2E:g}x mean E2E: a burst, not a steady "
               "state")


def rate_label(rate: float) -> str:
    """A rate as printed: an integer or 3 significant figures (a trace's 3.78848 -> 3.79)."""
    if float(rate).is_integer():
        return f"{int(rate)}"
    return f"{rate:.3g}" if rate < 1000 else f"{rate:.0f}"


def slo_capacity(table: pd.DataFrame, policy: str, target: float,
                 steady: pd.Series | None = None,
                 max_ratio: float = MAX_INTERPOLATION_RATIO) -> tuple[str, float, float]:
    """(kind, rate, first miss): the highest rate at which at least `target` of the requests
    meet the SLO, interpolated in log rate between the last rate that meets it and the first
    that misses where both are steady states and at most `max_ratio` apart.

    With `steady` (a flag per table row), a rate that meets the SLO counts only where it is a
    steady state (a burst or an overloaded run's meet says nothing about sustained load); a miss
    counts wherever it is (transients only lower latencies, and an overload's grow with the
    window). kind: "between" (rate interpolated), "bracket" (the capacity lies between `rate`,
    the last meet, and the first miss, which is not steady or more than `max_ratio` higher),
    "above" (met at every counted rate below the first miss up to `rate`, the highest counted
    rate), "below" (missed at the lowest rate, `rate`), "none" (no rate counts: every rate
    before the first miss meets the SLO without being steady); first miss: the lowest rate that
    misses the SLO (nan where none does)."""
    t = table[table.policy == policy].sort_values("rate_per_s")
    rates, att = t.rate_per_s.to_numpy(), t.slo_attainment.to_numpy()
    ok = att >= target
    counted = np.ones(len(rates), bool) if steady is None else steady[t.index].to_numpy()
    miss = np.nonzero(~ok)[0]
    first_bad = int(miss[0]) if miss.size else len(rates)
    first_miss = float(rates[first_bad]) if miss.size else float("nan")
    met = np.nonzero(ok[:first_bad] & counted[:first_bad])[0]
    if first_bad == 0:
        return "below", float(rates[0]), first_miss
    if not met.size:
        return "none", float("nan"), first_miss
    last = int(met[-1])
    if first_bad == len(rates) or last != first_bad - 1:
        return "above", float(rates[last]), first_miss
    r0, r1, a0, a1 = rates[last], rates[first_bad], att[last], att[first_bad]
    if not counted[first_bad] or r1 / r0 > max_ratio:
        return "bracket", float(r0), first_miss
    f = (a0 - target) / (a0 - a1)
    return "between", float(np.exp(np.log(r0) + f * (np.log(r1) - np.log(r0)))), first_miss


def duration_to_steady_s(e2e_mean_s, k: float = STEADY_WINDOW_E2E) -> float:
    """The arrival window (s, rounded up to 10 s) that holds k of the largest measured mean E2E
    latencies: the --duration-s that would make those rates steady, if their latencies hold."""
    return float(np.ceil(k * np.max(e2e_mean_s) / 10.0) * 10.0)


def capacity_text(kind: str, rate: float, first_miss: float, top_rate: float,
                  duration_hint_s: float | None = None) -> str:
    """S5's capacity cell (`duration_hint_s`: the --duration-s that would make the rates that
    meet the SLO without being steady one, said where they leave the capacity open)."""
    if kind == "below":
        return f"< {rate_label(rate)}/s (missed at every rate)"
    upper = ("met at every rate" if np.isnan(first_miss)
             else f"first miss at {rate_label(first_miss)}/s")
    hint = ("" if duration_hint_s is None
            else f"; --duration-s {duration_hint_s:g} would make them steady")
    if kind == "none":
        return f"unknown: the rates that meet it are not steady states ({upper}{hint})"
    if kind == "above" and np.isnan(first_miss):
        return (f"> {rate_label(rate)}/s (met at every rate)" if rate >= top_rate
                else f">= {rate_label(rate)}/s (the highest steady rate that meets it; {upper}"
                f"{hint.replace('them', 'the rates above')})")
    if kind in ("above", "bracket"):  # above: a rate between met the SLO, but not steadily
        return f"{rate_label(rate)}-{rate_label(first_miss)}/s"
    return f"{rate:.1f}/s"


def fixed_policies_label(policies) -> str:
    """What the hindsight best fixed gamma is the best of: none and the fixed:G policies run."""
    fixed = [p for p in policies if p == "none" or p.startswith("fixed:")]
    return "best of the fixed policies run: " + ", ".join(fixed)


def schedule_gammas_not_run(prep, policies) -> list[int]:
    """The schedule's gammas with no fixed:G policy among those run (0 counts as none)."""
    run = {0 if p == "none" else int(p.split(":")[1]) for p in policies
           if p == "none" or p.startswith("fixed:")}
    return sorted({int(g) for _, _, g in prep.schedule.ranges} - run)


def _acceptance_label(cfg, prep) -> str:
    """The acceptance mode that ran, saying so where it is per-position (with its rates)."""
    if prep.hazard_profile is None:
        return cfg.alpha_mode
    rates = ", ".join(f"{a:.2f}" for a in cfg.alpha.rates)
    return (f"{cfg.alpha_mode} (per-position: conditional rates a1..a{len(cfg.alpha.rates)} = "
            f"{rates}, later positions reuse the last; the adaptive policy still estimates one "
            "i.i.d. alpha per request)")


def steady_line(t: pd.DataFrame, rates) -> str:
    """The summary's line on each rate's arrival window and which (policy, rate) are steady."""
    windows = ", ".join(
        f"{rate_label(x)}/s: {t[t.rate_per_s == x].arrival_window_s.iloc[0]:.0f} s"
        for x in rates)
    ratio = t.arrival_window_s / t.e2e_mean_s
    bad = t[~t.steady_state]
    if bad.empty:
        verdict = "every (policy, rate) here is one"
    else:
        by_rate = {}
        for _, row in bad.iterrows():
            by_rate.setdefault(row.rate_per_s, []).append(row.policy)
        verdict = "not steady (marked *): " + "; ".join(
            f"{rate_label(r)}/s "
            f"({'every policy' if len(ps) == t.policy.nunique() else ', '.join(ps)})"
            for r, ps in sorted(by_rate.items()))
        if (bad.arrival_window_s >= STEADY_WINDOW_E2E * bad.e2e_mean_s).any():  # too few requests
            verdict += (f" (fewer than {STEADY_WINDOW_E2E:g} requests a replication are not one at "
                        "any window)")
    return (
        f"Steady state: a (policy, rate) is one when its arrival window is at least "
        f"{STEADY_WINDOW_E2E:g}x its mean E2E latency (design.md section 15, 'Steady state'); "
        f"arrival windows {windows}; window / mean E2E from {ratio.min():.1f} to "
        f"{ratio.max():.0f}; {verdict}."
    )


def _mark(row) -> str:
    """MARK where the table row is not a steady state."""
    return "" if row.steady_state else MARK


def realised_line(t: pd.DataFrame, rates, replications: int) -> str:
    """The summary's line on the arrival rate each offered rate realised: requests / arrival
    window, mean over replications (random arrival counts can exceed the offered rate)."""
    none = t[t.policy == t.policy.iloc[0]].set_index("rate_per_s")
    cells = ", ".join(
        f"{rate_label(r)}/s: {none.requests[r] / replications / none.arrival_window_s[r]:.2f}/s"
        for r in rates)
    return f"Realised arrival rate (requests / arrival window, mean over replications): {cells}."


def with_steadiness(table: pd.DataFrame, cfg) -> pd.DataFrame:
    """The table with each row's arrival window and whether it is a steady state (columns
    arrival_window_s, steady_state; see STEADY_WINDOW_E2E)."""
    t = table.copy()
    windows = {r: arrival_window_s(cfg, r) for r in t.rate_per_s.unique()}
    t["arrival_window_s"] = t.rate_per_s.map(windows).astype(float)
    # and at least k requests a replication, so start and drain touch at most ~2 / k of them
    enough = t.requests >= STEADY_WINDOW_E2E * cfg.replications if "requests" in t else True
    t["steady_state"] = steady_flags(t, windows) & enough
    return t


def summary_section(result: dict, cfg) -> str:
    """The serving section of summary.txt (between SECTION_BEGIN and SECTION_END)."""
    t = result["table"]
    if "steady_state" not in t:
        t = with_steadiness(t, cfg)
    prep = result["prepared"]
    policies = list(dict.fromkeys(t.policy))
    rates = sorted(t.rate_per_s.unique())
    sc = cfg.scenario
    per_rate = t[t.policy == "none"].sort_values("rate_per_s").requests / cfg.replications
    if per_rate.nunique() == 1:
        sent = f"{int(per_rate.iloc[0])} requests"
    else:
        sent = (f"the arrivals of {cfg.duration_s:g} s ({per_rate.iloc[0]:.0f} to "
                f"{per_rate.iloc[-1]:.0f} requests on average)")

    lines = [
        SECTION_BEGIN,
        f"Deployment: {sc.name} ({sc.target_model_id} + draft {sc.draft} on {sc.gpu_id}, tp "
        f"{sc.tp}), engine profile {cfg.engine_profile}.",
        f"Workload: {cfg.workload} ("
        + (cfg.workload_source.rstrip(".") if cfg.trace is not None  # a file name has dots
           else cfg.workload_source.split(".")[0])
        + "); arrivals "
        + ("from the trace" if cfg.trace is not None else cfg.arrival.label())
        + ("; acceptance from the trace's alpha column." if cfg.alpha_label == "trace"
           else f"; acceptance mode {_acceptance_label(cfg, prep)}."),
        f"Engine: max_num_seqs {cfg.limits.max_num_seqs}, max_num_batched_tokens "
        f"{cfg.limits.max_num_batched_tokens}, KV cache "
            f"{prep.deployments[0].kv_capacity_blocks * 16} "
        f"tokens without the draft, {prep.deployments[1].kv_capacity_blocks * 16} with it.",
        f"{cfg.replications} replications x {sent} per (policy, rate); values are means over "
        f"replications with {cfg.confidence:.0%} intervals [low, high].",
        f"SLO: TTFT <= {cfg.slo_ttft_s:g} s and TPOT <= {cfg.slo_tpot_s * 1e3:g} ms; a rate "
        f"meets it when {cfg.slo_attainment_target:.0%} of requests do.",
        steady_line(t, rates),
        realised_line(t, rates, cfg.replications),
        "Throughputs and goodput divide by the makespan, the drain after the last arrival "
        "included, so below capacity they sit near the realised arrival rate, usually under it "
        "(they can exceed the offered rate where the arrivals did).",
        f"Default gamma: {prep.default_gamma}, the steady-state closed form's best at batch 1 "
        "and this workload's mean context (design.md section 11, 'Steady-state closed form'; "
        "the simulated fixed-batch study, with contexts that grow, can pick a neighbouring gamma "
        f"within its CI); schedule: {prep.schedule.vllm_json()}",
        "",
    ]
    lines.append("S1. TPOT p50 (ms) by policy and rate; speedup over none in parentheses; "
                 + MARK_LEGEND)
    rows = []
    for p in policies:
        r = [p]
        for rate in rates:
            row = t[(t.policy == p) & (t.rate_per_s == rate)].iloc[0]
            mark = "" if row.steady_state else MARK
            r.append(f"{row.tpot_p50_s * 1e3:.1f} ({row.tpot_p50_speedup:.2f}x){mark}")
        rows.append(r)
    lines += [_table(["policy"] + [f"{rate_label(x)}/s" for x in rates], rows), ""]
    lines.append(
        "S2. Where speculation stops paying (TPOT p50 speedup below 1 with its whole "
        "interval, from this rate on; " + MARK_LEGEND + " for the policy or none)"
    )
    rows = []
    for p in policies:
        if p == "none":
            continue
        s = stops_paying(t, p)
        s_e2e = stops_paying(t, p, "e2e_p50_speedup")

        def cell(rate):
            if rate is None:
                return "never in the grid"
            at = t.rate_per_s == rate
            steady = t[at & t.policy.isin([p, "none"])].steady_state.all()
            return f"{rate_label(rate)}/s" + ("" if steady else MARK)

        rows.append([p, cell(s), cell(s_e2e)])
    lines += [_table(["policy", "TPOT p50", "E2E p50"], rows), ""]
    best_of = fixed_policies_label(policies)
    lines.append(
        "S3. Best policy per rate (lowest TPOT p50; highest goodput), and the hindsight "
        f"best fixed gamma ({best_of}); " + MARK_LEGEND + " for the policy named"
    )
    rows = []
    for rate in rates:
        g = t[t.rate_per_s == rate]
        by_tpot = g.loc[g.tpot_p50_s.idxmin()]
        by_good = g.loc[g.goodput_req_s.idxmax()]
        best_fixed = g.hindsight_best_fixed.iloc[0] or "-"
        fixed_row = g[g.policy == best_fixed]
        fixed_steady = fixed_row.steady_state.all()
        rows.append(
            [
                f"{rate_label(rate)}/s",
                f"{by_tpot.policy} ({by_tpot.tpot_p50_s * 1e3:.1f} ms){_mark(by_tpot)}",
                f"{by_good.policy} ({by_good.goodput_req_s:.2f} req/s){_mark(by_good)}",
                best_fixed + ("" if fixed_steady else MARK),
            ]
        )
    lines += [_table(["rate", "best TPOT p50", "best goodput", "best fixed (hindsight)"], rows), ""]
    lines.append(
        "S4. Gain over the hindsight best fixed gamma (its TPOT p50 / the policy's; > 1 = better; "
        f"{best_of}); " + MARK_LEGEND + " for the policy or the best fixed"
    )
    missing = schedule_gammas_not_run(prep, policies)
    if missing:
        lines.append(
            "    the schedule runs gamma " + ", ".join(map(str, missing)) + " with no fixed "
            "policy at it: a gain above 1 may only be that gamma's (add fixed:G to --policies)"
        )
    rows = []
    for p in policies:
        if p.startswith("fixed:"):
            continue
        g = t[t.policy == p].sort_values("rate_per_s")
        cells = []
        for _, row in g.iterrows():
            at = t[t.rate_per_s == row.rate_per_s]
            best = at[at.policy == (row.hindsight_best_fixed or "-")]
            steady = row.steady_state and best.steady_state.all()
            cells.append(_fmt(row.gain_over_best_fixed) + ("" if steady else MARK))
        rows.append([p] + cells)
    lines += [_table(["policy"] + [f"{rate_label(x)}/s" for x in rates], rows), ""]
    lines.append("S5. SLO capacity: the highest rate that meets the SLO, interpolated in log "
                 "rate between the last steady rate that meets it and the first miss where that "
                 f"miss is steady and at most {MAX_INTERPOLATION_RATIO:g}x higher, else the "
                 "bracket 'last meet-first miss' (design.md section 15, 'SLO capacity'); a meet "
                 "counts only where it is a steady state, a miss counts anywhere")
    target = cfg.slo_attainment_target
    steady = t.steady_state
    kind_none, cap_none, _ = slo_capacity(t, "none", target, steady)
    top_rate = max(rates)
    rows = []
    for p in policies:
        kind, c, miss = slo_capacity(t, p, target, steady)
        # a bound or bracket rather than an interpolated value on either side: no ratio
        known = kind == "between" and kind_none == "between"
        gain = f"{c / cap_none:.2f}x" if p != "none" and known else "-"
        hint = None
        open_ended = kind == "none" or (kind == "above" and np.isnan(miss))
        if open_ended:  # meets that are not steady leave the capacity open: how long a run?
            tp = t[t.policy == p]
            meets = tp[(tp.slo_attainment >= target) & ~tp.steady_state]
            hint = duration_to_steady_s(meets.e2e_mean_s) if len(meets) else None
        rows.append([p, capacity_text(kind, c, miss, top_rate, hint), gain])
    lines += [_table(["policy", "capacity", "vs none"], rows), ""]
    lines.append(
        "S6. Detail per (policy, rate): TTFT p50/p99 ms, TPOT p99 ms, E2E p50 s, output "
        "tok/s, goodput req/s, mean batch, KV use, accepted/proposed, mean gamma; "
        + MARK_LEGEND
    )
    lines.append(
        "    accepted/proposed = draft tokens the target accepted / draft tokens proposed; "
        "'-' where no draft runs (none)"
    )
    rows = []
    for _, row in t.iterrows():
        rows.append(
            [
                row.policy,
                rate_label(row.rate_per_s) + ("" if row.steady_state else MARK),
                f"{row.ttft_p50_s * 1e3:.0f}",
                f"{row.ttft_p99_s * 1e3:.0f}",
                f"{row.tpot_p99_s * 1e3:.1f}",
                f"{row.e2e_p50_s:.2f}",
                _ci(row, "output_throughput_tok_s", 0),
                _fmt(row.goodput_req_s),
                _fmt(row.mean_batch, 1),
                _fmt(row.kv_use),
                "-" if row.policy == "none" else _fmt(row.acceptance_rate),
                "-" if row.policy == "none" else _fmt(row.mean_gamma),
            ]
        )
    lines += [
        _table(
            [
                "policy",
                "rate",
                "TTFT50",
                "TTFT99",
                "TPOT99",
                "E2E50",
                "out tok/s",
                "goodput",
                "batch",
                "KV",
                "accepted/proposed",
                "gamma",
            ],
            rows,
        )
    ]
    lines.append(SECTION_END)
    return "\n".join(lines)


def replace_section(text: str, section: str) -> str:
    """`text` with its serving section replaced by `section` (appended when it has none)."""
    if SECTION_BEGIN in text and SECTION_END in text:
        head, rest = text.split(SECTION_BEGIN, 1)
        tail = rest.split(SECTION_END, 1)[1]
        return join_summary([head, section, tail])
    return join_summary([text, section])


# -- plots -------------------------------------------------------------------------------------
def _colors(policies):
    plt = pyplot()
    cmap = plt.get_cmap("tab10")
    return {p: ("black" if p == "none" else cmap(i % 10)) for i, p in enumerate(policies)}


_LINESTYLES = ["-", "-.", (0, (5, 1.5)), ":", (0, (3, 1, 1, 1, 1, 1))]
_MARKERS = ["o", "s", "^", "D", "v", "P", "X"]


def _policy_style(policies) -> dict:
    """Colour, line style and marker per policy, each policy its own, so that policies with equal
    numbers (one line exactly under another) still show both."""
    colors = _colors(policies)
    styles = {}
    for i, p in enumerate(policies):
        if p == "none":
            styles[p] = dict(color="black", lw=2.2, ls="--", marker="o", ms=4)
        else:
            styles[p] = dict(color=colors[p], lw=1.5, ls=_LINESTYLES[i % len(_LINESTYLES)],
                             marker=_MARKERS[i % len(_MARKERS)], ms=5 if i % 2 else 4,
                             mfc="none" if i % 2 else colors[p])
    return styles


def _policy_lines(ax, t, key, scale, colors, label=True):
    styles = _policy_style(list(colors))
    for p, g in t.groupby("policy", sort=False):
        g = g.sort_values("rate_per_s")
        style = styles[p]
        ax.plot(g.rate_per_s, g[key] * scale, label=p if label else None, **style)
        lo, hi = g[f"{key}_ci_low"] * scale, g[f"{key}_ci_high"] * scale
        if np.isfinite(lo).all():
            ax.fill_between(g.rate_per_s, lo, hi, color=colors[p], alpha=0.15, lw=0)


def _plain_log_axis(ax, axis: str = "y") -> None:
    """Tick labels of a log axis as plain numbers (12, 20, 50), not powers of ten."""
    from matplotlib.ticker import FuncFormatter, LogLocator
    target = ax.yaxis if axis == "y" else ax.xaxis
    target.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    target.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    lo, hi = (ax.get_ylim() if axis == "y" else ax.get_xlim())
    # a range of about one decade has few major ticks (1, 2, 5): label minor ticks 3, 4, 6, 8 too
    few = hi / max(lo, 1e-300) < 20

    def minor(v, _):
        mantissa = round(v / 10 ** np.floor(np.log10(v)), 6)
        return f"{v:g}" if few and mantissa in (3, 4, 6, 8) else ""

    target.set_minor_formatter(FuncFormatter(minor))


def _png(fig) -> bytes:
    plt = pyplot()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def _title(cfg) -> str:
    sc = cfg.scenario
    return (
        f"{sc.target_model_id} + {sc.draft} on {sc.gpu_id} (tp {sc.tp}), "
        f"{cfg.engine_profile}, {cfg.workload}, {cfg.arrival_label} arrivals, "
        + ("trace alphas" if cfg.alpha_label == "trace" else f"acceptance {cfg.alpha_mode}")
    )


def _unsteady_note(t: pd.DataFrame) -> str:
    """A title line naming the rates that are not a steady state for some policy ('' if none)."""
    if "steady_state" not in t or t.steady_state.all():
        return ""
    rates = sorted(t[~t.steady_state].rate_per_s.unique())
    return ("\nnot a steady state (window < "
            f"{STEADY_WINDOW_E2E:g}x mean E2E) for some policy at: "
            + ", ".join(f"{rate_label(r)}/s" for r in rates))


def _shade_unsteady(ax, t: pd.DataFrame) -> list:
    """Grey bands (log-2 rate axis) over the rates that are not a steady state for some policy;
    returns the legend handle ([] if every rate is steady)."""
    if "steady_state" not in t or t.steady_state.all():
        return []
    lim = ax.get_xlim()
    band = None
    rates = sorted(t.rate_per_s.unique())
    # each band reaches halfway (in log rate) to the neighbouring rates, so that it never covers
    # a steady neighbour (half an octave beyond the ends)
    edges = ([rates[0] * 2 ** -0.5] + [np.sqrt(a * b) for a, b in zip(rates, rates[1:])]
             + [rates[-1] * 2 ** 0.5])
    for i, r in enumerate(rates):
        if t[t.rate_per_s == r].steady_state.all():
            continue
        span = ax.axvspan(edges[i], edges[i + 1], color="0.85", alpha=0.5, lw=0, zorder=0,
                          label="not a steady state" if band is None else "_nolegend_")
        band = band or span
    ax.set_xlim(lim)
    return [band]


def _rate_ticks(ax, rates) -> None:
    """One labelled tick per rate on a log-2 axis; rates closer than 1.5x apart (32, 40, 48)
    would run into each other, so their labels are smaller and turned."""
    ax.set_xticks(rates)
    close = len(rates) > 1 and min(b / a for a, b in zip(rates, rates[1:])) < 1.5
    ax.set_xticklabels([rate_label(r) for r in rates], fontsize=8 if close else None,
                       rotation=45 if close else 0)


def plot_latency_vs_rate(t: pd.DataFrame, cfg) -> bytes:
    plt = pyplot()
    policies = list(dict.fromkeys(t.policy))
    colors = _colors(policies)
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5), sharex=True)
    panels = [
        ("tpot_p50_s", "TPOT p50 (ms)"),
        ("tpot_p90_s", "TPOT p90 (ms)"),
        ("ttft_p50_s", "TTFT p50 (ms)"),
        ("ttft_p90_s", "TTFT p90 (ms)"),
    ]
    for ax, (key, label) in zip(axes.ravel(), panels):
        _policy_lines(ax, t, key, 1e3, colors)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        _plain_log_axis(ax)
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
        rates = sorted(t.rate_per_s.unique())
        _rate_ticks(ax, rates)
    for ax in axes[1]:
        ax.set_xlabel("request rate (requests/s)")
    for ax, slo_ms in ((axes[0, 1], cfg.slo_tpot_s * 1e3), (axes[1, 1], cfg.slo_ttft_s * 1e3)):
        handles = [ax.axhline(slo_ms, color="grey", lw=1, ls=":", label="SLO")]
        handles += _shade_unsteady(ax, t)
        ax.legend(handles=handles, fontsize=8, loc="upper left")
    axes[0, 0].legend(fontsize=9, title="policy", title_fontsize=9)
    for ax in axes[:, 0]:
        _shade_unsteady(ax, t)  # after the policy legend, which would list every band
    fig.suptitle(
        f"Latency against request rate (bands: {cfg.confidence:.0%} CI; dotted: SLO, on the p90 "
        f"panels: a rate meets the SLO when {cfg.slo_attainment_target:.0%} of requests meet "
        f"both){_unsteady_note(t)}\n{_title(cfg)}", fontsize=10
    )
    fig.tight_layout()
    return _png(fig)


def plot_throughput_latency(t: pd.DataFrame, cfg) -> bytes:
    plt = pyplot()
    policies = list(dict.fromkeys(t.policy))
    styles = _policy_style(policies)
    fig, ax = plt.subplots(figsize=(7.5, 5.5))
    for p, g in t.groupby("policy", sort=False):
        g = g.sort_values("rate_per_s")
        ax.plot(g.output_throughput_tok_s, g.tpot_p50_s * 1e3, label=p,
                **styles[p])
    last = t[t.policy == "none"].sort_values("rate_per_s")
    for _, row in last.iterrows():
        ax.annotate(
            f"{rate_label(row.rate_per_s)}/s",
            (row.output_throughput_tok_s, row.tpot_p50_s * 1e3),
            textcoords="offset points",
            xytext=(4, -10),
            fontsize=8,
            color="black",
        )
    ax.set_xlabel("output throughput (tokens/s)")
    ax.set_ylabel("TPOT p50 (ms)")
    ax.set_yscale("log")
    _plain_log_axis(ax)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=9, title="policy (points: rates)", title_fontsize=9)
    ax.set_title(f"Latency-throughput trade-off{_unsteady_note(t)}\n{_title(cfg)}", fontsize=10)
    return _png(fig)


def plot_goodput(t: pd.DataFrame, cfg) -> bytes:
    plt = pyplot()
    policies = list(dict.fromkeys(t.policy))
    colors = _colors(policies)
    fig, ax = plt.subplots(figsize=(7.5, 5.5))
    _policy_lines(ax, t, "goodput_req_s", 1.0, colors)
    rates = sorted(t.rate_per_s.unique())
    ax.plot(rates, rates, color="grey", lw=1, ls=":", label="offered rate")
    ax.set_xscale("log", base=2)
    _shade_unsteady(ax, t)
    ax.set_yscale("log")
    _plain_log_axis(ax)
    _rate_ticks(ax, rates)
    ax.set_xlabel("request rate (requests/s)")
    ax.set_ylabel("goodput (requests/s meeting the SLO)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=9, title="policy", title_fontsize=9)
    ax.set_title(
        f"Goodput, SLO TTFT <= {cfg.slo_ttft_s:g} s and TPOT <= {cfg.slo_tpot_s * 1e3:g} ms"
        f" (over the makespan, drain included){_unsteady_note(t)}\n{_title(cfg)}",
        fontsize=10,
    )
    return _png(fig)


SWEEP_PLOTS = {
    "plots/serving_latency_vs_rate.png": plot_latency_vs_rate,
    "plots/serving_throughput_latency.png": plot_throughput_latency,
    "plots/serving_goodput.png": plot_goodput,
}


def render(result: dict, cfg, existing_summary: str, plots: bool = True) -> dict[str, bytes]:
    """Every output file of the sweep: path relative to OUT -> bytes (the plots only if `plots`).
    summary.txt is the existing one (the study's) with its serving section replaced."""
    t = with_steadiness(result["table"], cfg)
    section = summary_section({**result, "table": t}, cfg)
    files = {
        "results/serving.csv": t.to_csv(index=False, float_format="%.6g",
                                        lineterminator="\n").encode(),
        "results/summary.txt": replace_section(existing_summary, section).encode(),
    }
    if plots:
        files.update({name: plot(t, cfg) for name, plot in SWEEP_PLOTS.items()})
    return files


SERVING_FILES = ("results/serving.csv", "plots/serving_latency_vs_rate.png",
                 "plots/serving_throughput_latency.png", "plots/serving_goodput.png",
                 "plots/serving_vllm_blog_check.png", "results/serving_vllm_blog_check.csv")


def existing_outputs(out_dir: str) -> dict[str, bytes]:
    """Every file now in OUT/results and OUT/plots (path relative to OUT -> bytes)."""
    files = {}
    for folder in ("results", "plots"):
        path = os.path.join(out_dir, folder)
        if os.path.isdir(path):
            for name in sorted(os.listdir(path)):
                full = os.path.join(path, name)
                if os.path.isfile(full) and not name.startswith("."):
                    with open(full, "rb") as fh:
                        files[f"{folder}/{name}"] = fh.read()
    return files


def serving_outputs(out_dir: str) -> tuple[dict[str, bytes], str | None]:
    """The serve command's files in OUT and the serving section of OUT/results/summary.txt, for a
    study run that replaces OUT's outputs as a set to keep (they come from another command)."""
    old = existing_outputs(out_dir)
    files = {k: v for k, v in old.items() if k in SERVING_FILES}
    summary = old.get("results/summary.txt", b"").decode("utf-8", "replace")
    section = None
    if SECTION_BEGIN in summary and SECTION_END in summary:
        body = summary.split(SECTION_BEGIN, 1)[1].split(SECTION_END, 1)[0]
        section = SECTION_BEGIN + body + SECTION_END
    return files, section
