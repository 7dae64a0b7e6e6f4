"""src/mode_comparison.py: per-position vs i.i.d. best gamma and speedup, from a results table."""
import pandas as pd
import pytest

from src.config import PerPositionAlpha, PointAlpha
from src.mode_comparison import compare, comparison_lines, comparison_pairs


def results(speedups: dict) -> pd.DataFrame:
    rows = []
    for mode, by_gamma in speedups.items():
        for g, s in by_gamma.items():
            rows.append({"quality_mode": mode, "serving_mode": "continuous_refill", "batch_size": 1,
                         "gamma": g,
                         "speedup": s, "speedup_ci_low": s - 0.01, "speedup_ci_high": s + 0.01})
    return pd.DataFrame(rows)


def test_promise_error_and_wrong_gamma_cost():
    df = results({"pp": {2: 1.9, 4: 2.0, 6: 1.8}, "iid": {2: 1.95, 4: 2.1, 6: 2.2}})
    (row,) = compare(df, "pp", "iid").itertuples()
    assert (row.gamma_per_position, row.gamma_iid) == (4, 6)
    # the i.i.d. mode promises 10% too much
    assert row.promise_error == pytest.approx(2.2 / 2.0 - 1)
    assert row.wrong_gamma_cost == pytest.approx(1.8 / 2.0 - 1)  # and its gamma loses 10%
    modes = {"pp": PerPositionAlpha((0.8, 0.6), compare_with="iid"), "iid": PointAlpha(0.7)}
    text = "\n".join(comparison_lines(df, modes, ["pp", "iid"]))
    assert "g=4 2.00x [1.99,2.01]" in text and "+10.0%" in text and "1.80x (-10.0%)" in text
    assert "costs 10.0% of the best per-position speedup" in text


def test_pairs_need_both_modes_in_the_run():
    modes = {"pp": PerPositionAlpha((0.8, 0.6), compare_with="iid"), "iid": PointAlpha(0.7),
             "other": PerPositionAlpha((0.8, 0.6))}
    assert comparison_pairs(modes, ["pp", "iid", "other"]) == [("pp", "iid")]
    assert comparison_pairs(modes, ["pp"]) == []
