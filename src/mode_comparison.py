"""Per-position acceptance against its i.i.d. stand-in: how far the i.i.d. mode misjudges the best
gamma and the speedup.

A per_position mode may name an i.i.d. mode in `compare_with` (the EAGLE scenario's table-based mode
and its i.i.d. mode, a trace and its i.i.d. fit, vLLM metrics and the i.i.d. inversion of their mean
acceptance length). For every (serving mode, batch size) of a results table this module reads:

    g_pp, S_pp(g_pp)     best gamma and speedup under per-position acceptance (taken as the truth)
    g_iid, S_iid(g_iid)  what the i.i.d. mode says is best, and the speedup it promises there
    S_pp(g_iid)          the speedup one gets when running the i.i.d. mode's gamma for real

and reports the i.i.d. promise's error S_iid(g_iid) / S_pp(g_pp) - 1 and the cost of its gamma
S_pp(g_iid) / S_pp(g_pp) - 1. Nothing is simulated here.
"""
from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from src.config import PerPositionAlpha
from src.reporting import table


def comparison_pairs(alpha_modes: Mapping, quality_modes) -> list[tuple[str, str]]:
    """(per-position mode, i.i.d. mode) pairs whose both modes ran."""
    return [(m, alpha_modes[m].compare_with) for m in quality_modes
            if isinstance(alpha_modes[m], PerPositionAlpha) and alpha_modes[m].compare_with
            and alpha_modes[m].compare_with in quality_modes]


def compare(df: pd.DataFrame, per_position: str, iid: str) -> pd.DataFrame:
    """One row per (serving mode, batch size): the quantities of the module docstring."""
    rows = []
    for (serving, batch), sub in df[df.quality_mode.isin([per_position, iid])].groupby(
            ["serving_mode", "batch_size"], sort=True):
        pp = sub[sub.quality_mode == per_position].set_index("gamma")
        ii = sub[sub.quality_mode == iid].set_index("gamma")
        g_pp, g_iid = int(pp.speedup.idxmax()), int(ii.speedup.idxmax())
        best = pp.loc[g_pp]
        rows.append({"serving_mode": serving, "batch_size": batch, "gamma_per_position": g_pp,
                     "speedup_per_position": best.speedup, "ci_low": best.speedup_ci_low,
                     "ci_high": best.speedup_ci_high, "gamma_iid": g_iid,
                     "speedup_iid_promised": ii.loc[g_iid, "speedup"],
                     "speedup_per_position_at_gamma_iid": pp.loc[g_iid, "speedup"]})
    out = pd.DataFrame(rows)
    out["promise_error"] = out.speedup_iid_promised / out.speedup_per_position - 1
    out["wrong_gamma_cost"] = out.speedup_per_position_at_gamma_iid / out.speedup_per_position - 1
    return out


def comparison_lines(df: pd.DataFrame, alpha_modes: Mapping, quality_modes,
                     indent: str = "   ") -> list[str]:
    """summary.txt lines for every compared pair (empty when there is none)."""
    out = []
    for pp_mode, iid_mode in comparison_pairs(alpha_modes, quality_modes):
        cmp = compare(df, pp_mode, iid_mode)
        out.append(f"{indent}{pp_mode} (per-position) vs {iid_mode} (i.i.d.): best gamma and "
                   "speedup [95% CI]; 'i.i.d. promises' is")
        out.append(f"{indent}the i.i.d. mode's speedup at its own best gamma, 'at i.i.d. gamma' "
                   "what that gamma really gives under per-position acceptance:")
        rows = [[f"{r.serving_mode}, B={r.batch_size}",
                 f"g={r.gamma_per_position} {r.speedup_per_position:.2f}x "
                 f"[{r.ci_low:.2f},{r.ci_high:.2f}]",
                 f"g={r.gamma_iid} {r.speedup_iid_promised:.2f}x", f"{r.promise_error:+.1%}",
                 f"{r.speedup_per_position_at_gamma_iid:.2f}x ({r.wrong_gamma_cost:+.1%})"]
                for r in cmp.itertuples()]
        out.append(table(["serving, batch", "per-position best", "i.i.d. best", "i.i.d. promises",
                          "at i.i.d. gamma"], rows, indent))
        differ = cmp[cmp.gamma_iid != cmp.gamma_per_position]
        worst = cmp.loc[cmp.promise_error.abs().idxmax()]
        out.append(f"{indent}-> the i.i.d. mode picks a different gamma at {len(differ)} of "
                   f"{len(cmp)} batch sizes (i.i.d. g={_span(cmp.gamma_iid)}, per-position "
                   f"g={_span(cmp.gamma_per_position)}); its promised speedup is off by "
                   f"{cmp.promise_error.min():+.1%}..{cmp.promise_error.max():+.1%} (worst at "
                   f"{worst.serving_mode} B={worst.batch_size}),")
        cost = max(0.0, -float(cmp.wrong_gamma_cost.min()))  # 0 when its gamma is always the best
        out.append(f"{indent}   and running its gamma costs {cost:.1%} of the best per-position "
                   "speedup at worst.")
        out.append("")
    return out


def _span(values) -> str:
    lo, hi = int(min(values)), int(max(values))
    return f"{lo}" if lo == hi else f"{lo}..{hi}"
