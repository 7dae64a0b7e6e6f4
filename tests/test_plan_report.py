"""src/plan/report.py on made-up searches: the cost formula, the replicas at a target rate, the
cheapest deployment, the best policy per deployment and where speculation raises capacity."""
import math

import pytest

from src.plan.config import build_plan
from src.plan.report import plan_table, summary_section
from src.plan.search import Deployment


def result(policy, lo, hi, tok_s):
    at = {"rate_per_s": lo, "window_s": 30.0, "sustained_output_tok_s": tok_s,
          "sustained_output_tok_s_ci_low": tok_s * 0.9,
          "sustained_output_tok_s_ci_high": tok_s * 1.1}
    return {"policy": policy, "bound": "found", "capacity_per_s": lo, "first_miss_per_s": hi,
            "at_capacity": at, "probes": [at]}


@pytest.fixture
def made_up():
    plan = build_plan({"gpus": "l40s,h100-sxm", "pairs": "llama-3.1-8b+llama-3.2-1b",
                       "policies": "fixed:3", "target_rate": "250",
                       "prices": "l40s=1.0,h100-sxm=3.0"}, None)
    l40s = Deployment("l40s", 1, "llama-3.1-8b", "llama-3.2-1b", "vllm-v1", "sharegpt")
    h100 = Deployment("h100-sxm", 1, "llama-3.1-8b", "llama-3.2-1b", "vllm-v1", "sharegpt")
    searches = [(l40s, "none", result("none", 100.0, 110.0, 36000.0)),
                (l40s, "fixed:3", result("fixed:3", 130.0, 140.0, 46800.0)),
                (h100, "none", result("none", 300.0, 330.0, 108000.0)),
                (h100, "fixed:3", result("fixed:3", 280.0, 300.0, 100800.0))]
    return plan, plan_table(plan, searches)


def test_cost_per_million_tokens_and_replicas(made_up):
    _, t = made_up
    row = t.iloc[0]  # l40s none: $1/h over 36,000 tok/s
    assert row.cost_per_mtok == pytest.approx(1.0 / (3600 * 36000) * 1e6)
    assert row.cost_per_mtok_ci_low == pytest.approx(1.0 / (3600 * 39600) * 1e6)
    assert list(t.replicas_for_target) == [3, 2, 1, 1]  # ceil(250 / capacity)
    assert list(t.cost_per_hour_at_target) == [3.0, 2.0, 3.0, 3.0]
    assert t.capacity_gain_vs_none.iloc[1] == pytest.approx(1.3)
    assert t.capacity_gain_low.iloc[1] == pytest.approx(130 / 110)
    assert math.isclose(t.capacity_gain_vs_none.iloc[3], 280 / 300)


def test_summary_names_the_cheapest_and_where_speculation_helps(made_up):
    plan, t = made_up
    text = summary_section(plan, t, [])
    assert "Cheapest: llama-3.1-8b+llama-3.2-1b tp1 l40s vllm-v1 sharegpt with fixed:3, 2 " \
           "replicas." in text
    p2 = text.split("P2.")[1].split("P3.")[0]
    assert "fixed:3  130/s" in p2  # the l40s's best policy: 1.3x is outside the 10% tolerance
    assert "h100-sxm vllm-v1 sharegpt  300/s [300-330)  none" in p2  # 0.93x: a tie, so none
    p3 = text.split("P3.")[1]
    assert "l40s vllm-v1 sharegpt      fixed:3  raises" in p3
    assert "h100-sxm vllm-v1 sharegpt  fixed:3  same" in p3


def test_an_unknown_capacity_is_said_and_not_ranked(made_up):
    """A search whose bracket ends on a meet that is not steady at the longest window: the
    summary says "unknown: needs a longer window" and the --duration-s that would resolve it,
    P1 ranks it nowhere (its capacity is only a lower bound), and no gain is claimed."""
    plan, _ = made_up
    l40s = Deployment("l40s", 1, "llama-3.1-8b", "llama-3.2-1b", "vllm-v1", "sharegpt")
    h100 = Deployment("h100-sxm", 1, "llama-3.1-8b", "llama-3.2-1b", "vllm-v1", "sharegpt")
    unknown = {**result("none", 0.386, math.nan, 100.0), "bound": "unknown",
               "unknown_per_s": 0.42, "window_to_steady_s": 900.0}
    searches = [(l40s, "none", unknown), (l40s, "fixed:3", result("fixed:3", 9.5, 10.4, 3000.0)),
                (h100, "none", result("none", 40.0, 44.0, 13000.0)),
                (h100, "fixed:3", result("fixed:3", 40.0, 44.0, 13000.0))]
    t = plan_table(plan, searches)
    assert t.capacity_bound.iloc[0] == "unknown" and math.isnan(t.replicas_for_target.iloc[0])
    assert math.isnan(t.capacity_gain_vs_none.iloc[1])
    text = summary_section(plan, t, [])
    assert "unknown: needs a longer window (>= 0.386/s; 0.42/s met, not steady)" in text
    assert "--duration-s 50 or more would resolve it" in text  # 900 s / 20, up to 10 s
    p1 = text.split("P1.")[1].split("P2.")[0]
    assert "Not ranked (capacity unknown: needs a longer window): llama-3.1-8b+llama-3.2-1b " \
           "tp1 l40s vllm-v1 sharegpt none" in p1
    assert "  none     0.386" not in p1
    p3 = text.split("P3.")[1]
    assert "l40s vllm-v1 sharegpt      fixed:3  unknown" in p3


def test_the_plot_labels_a_tick_on_each_side_of_every_point(made_up, monkeypatch):
    """Costs 0.067-2.2 USD (the README example's spread): the log axes end on labelled ticks, so
    every point lies between two labels (the x axis had none below 0.1, where the cheapest
    point was)."""
    import src.reporting
    from src.plan.report import plot_capacity

    plan, t = made_up
    t = t.copy()
    t["cost_per_mtok"] = [2.218, 0.1093, 0.06658, 0.06651]  # the example's first plan.csv
    t["cost_per_mtok_ci_low"] = [0.9179, 0.09656, 0.06426, 0.06441]
    t["cost_per_mtok_ci_high"] = [3.0, 0.1258, 0.06906, 0.06874]
    figs = []
    monkeypatch.setattr(src.reporting, "png_bytes", lambda fig: figs.append(fig) or b"")
    plot_capacity(plan, t)
    ax = figs[0].axes[0]
    figs[0].canvas.draw()
    for axis, lim, values in ((ax.xaxis, ax.get_xlim(), t.cost_per_mtok),
                              (ax.yaxis, ax.get_ylim(), t.capacity_per_s)):
        labelled = [tick.get_loc() for tick in axis.get_major_ticks() + axis.get_minor_ticks()
                    if tick.label1.get_text() and lim[0] <= tick.get_loc() <= lim[1]]
        assert min(labelled) <= values.min() and max(labelled) >= values.max(), labelled
