"""measure-moe (routing, plan, command line) and calibrate-moe (the per-expert GEMM fit)."""
from __future__ import annotations

import importlib.util

import numpy as np
import pandas as pd
import pytest

from src.calibration.measurements import CalibrationInputError, read_moe_measurements
from src.calibration.moe_fit import (
    NAMES,
    MoeGemmTerms,
    fit_moe_terms,
    predict_ms,
    regime_counts,
)
from src.measure.moe_plan import COLUMNS, SHAPES, MoeShape, build_moe_configs
from src.measure.moe_routing import (
    distinct_experts,
    expected_distinct_uniform,
    route,
    tokens_per_expert,
)
from tests.helpers import run_captured

HAS_TORCH = importlib.util.find_spec("torch") is not None
H200_BW, H200_TFLOPS = 4800.0, 989.4  # datasheet peaks (src/presets/gpus.toml)


@pytest.mark.parametrize("tokens", [1, 4, 16, 64])
def test_uniform_routing_matches_the_closed_form(tokens):
    """Monte Carlo of the routing model against E [1 - (1 - k/E)^T], within 4 standard errors."""
    rng = np.random.default_rng(7)
    draws = np.array([distinct_experts(route(tokens, 128, 8, 0.0, rng)) for _ in range(2000)])
    expected = expected_distinct_uniform(tokens, 128, 8)
    se = draws.std(ddof=1) / np.sqrt(draws.size) if tokens > 1 else 0.0
    assert abs(draws.mean() - expected) <= 4 * se + 1e-9
    # the reference notes' percentages for (128, 8): 6%, 23%, 64%, 98% of the experts
    assert round(100 * expected / 128) == {1: 6, 4: 23, 16: 64, 64: 98}[tokens]


def test_skewed_routing_touches_fewer_experts_and_each_token_gets_k_distinct():
    rng = np.random.default_rng(1)
    a = route(32, 128, 8, 1.0, rng)
    assert a.shape == (32, 8)
    assert all(len(set(row)) == 8 for row in a) and a.min() >= 0 and a.max() < 128
    assert tokens_per_expert(a, 128).sum() == 32 * 8
    uniform = np.mean([distinct_experts(route(32, 128, 8, 0.0, rng)) for _ in range(200)])
    skewed = np.mean([distinct_experts(route(32, 128, 8, 1.0, rng)) for _ in range(200)])
    assert skewed < 0.8 * uniform


def test_routing_refuses_bad_values():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="top_k 9"):
        route(4, 8, 9, 0.0, rng)
    with pytest.raises(ValueError, match="skew"):
        route(4, 8, 2, -1.0, rng)
    with pytest.raises(ValueError, match="top_k 3"):
        MoeShape("x", hidden=8, experts=2, top_k=3, expert_ffn=4)


def test_plan_counts_and_weight_bytes():
    q = SHAPES["qwen3-30b-a3b"]
    # 48 layers x 128 experts x 3 x 2048 x 768 x 2 bytes: the routed experts of Qwen3-30B-A3B
    # are 29.0e9 parameters of its 30.5e9 (model card), so one block's experts ~ 1.2 GB
    assert q.weight_bytes(1) == 2 * (2048 + 128 * 2048 + 3 * 128 * 2048 * 768)
    assert 48 * 128 * 3 * 2048 * 768 == pytest.approx(29.0e9, rel=0.01)
    configs = build_moe_configs(("qwen3-30b-a3b",), ("graph",), (1, 8), (1, 4), (0.0, 1.0))
    assert len(configs) == 8 and configs[0].tokens == 1 and configs[-1].tokens == 32


def test_measure_moe_dry_run_and_bad_input(tmp_path):
    rc, out, err = run_captured(["measure-moe", "--dry-run", "--shape", "mixtral-8x7b"])
    assert rc == 0 and "mixtral-8x7b: h 4096, 8 experts, top-2" in out
    target = tmp_path / "moe.csv"
    for args, message in ((["--shape", "nope"], "--shape: unknown 'nope'"),
                          (["--skew", "-1"], "--skew: '-1' is not a number >= 0"),
                          (["--device", "cpu"], "--mode: graph needs a CUDA device"),
                          (["--batch", "0"], "--batch: 0 is too small")):
        rc, out, err = run_captured(["measure-moe", *args, "--out", str(target)])
        assert rc == 2 and message in err and len(err.strip().splitlines()) == 1
    assert not target.exists()


@pytest.mark.skipif(HAS_TORCH, reason="checks the message given when PyTorch is missing")
def test_measure_moe_without_torch_says_how_to_install(tmp_path):
    rc, out, err = run_captured(["measure-moe", "--out", str(tmp_path / "m.csv")])
    assert rc == 2 and "needs PyTorch" in err and not (tmp_path / "m.csv").exists()


@pytest.mark.skipif(not HAS_TORCH, reason="needs PyTorch")
def test_measure_moe_cpu_smoke_run_records_distinct_experts(tmp_path):
    target = tmp_path / "moe.csv"
    rc, out, err = run_captured(["measure-moe", "--device", "cpu", "--mode", "eager", "--tiny",
                                 "--shape", "qwen3-30b-a3b", "--layers", "2", "--batch", "1,4",
                                 "--positions", "1,4", "--out", str(target)])
    assert rc == 0, err
    rows = read_moe_measurements(str(target))
    assert list(pd.read_csv(target).columns) == list(COLUMNS) and len(rows) == 8
    assert (rows.loc[rows.tokens == 1, "distinct_experts"] == 8).all()
    assert (rows["distinct_experts"] <= np.minimum(128, rows.tokens * 8)).all()


# ------------------------------------------------------------------------------------------------
# the fit
# ------------------------------------------------------------------------------------------------
TRUE = MoeGemmTerms(expert_gemv_bandwidth_fraction=0.55, expert_small_bandwidth_fraction=0.42,
                    expert_large_bandwidth_fraction=0.71, expert_compute_fraction=0.38,
                    expert_fixed_us=14.0, layer_fixed_us=61.0)


def synthetic_rows(terms=TRUE, noise=0.0, seed=3) -> pd.DataFrame:
    """Rows as measure-moe writes them, distinct experts from the routing model, times from the
    fit's own formula with `terms` (times lognormal noise of sd `noise`)."""
    rng = np.random.default_rng(seed)
    rows = []
    for name in ("qwen3-30b-a3b", "mixtral-8x7b"):
        s = SHAPES[name]
        for skew in (0.0, 1.0):
            for batch in (1, 2, 4, 8, 16, 32, 64, 128, 256):
                for positions in (1, 2, 4, 5):
                    t = batch * positions
                    d = np.mean([distinct_experts(route(t, s.experts, s.top_k, skew, rng))
                                 for _ in range(4)])
                    rows.append({"model": name, "mode": "graph", "what": "moe_layer",
                                 "batch": batch, "positions": positions, "tokens": t,
                                 "layers": 4, "hidden": s.hidden, "experts": s.experts,
                                 "top_k": s.top_k, "expert_ffn": s.expert_ffn,
                                 "shared_experts": s.shared_experts, "routing_skew": skew,
                                 "distinct_experts": d, "max_expert_rows": 1.0})
    df = pd.DataFrame(rows)
    df["median_ms"] = predict_ms(df, terms, H200_BW, H200_TFLOPS) * np.exp(
        noise * rng.standard_normal(len(df)))
    return df


def test_fit_recovers_the_parameters_that_generated_the_rows():
    fit = fit_moe_terms(synthetic_rows(), H200_BW, H200_TFLOPS)
    assert fit.fitted == NAMES and fit.held == ()
    np.testing.assert_allclose(fit.terms.vector(), TRUE.vector(), rtol=1e-5)
    assert fit.rms_log_error < 1e-8


def test_fit_with_noise_stays_close_and_holds_unseen_regimes():
    fit = fit_moe_terms(synthetic_rows(noise=0.01), H200_BW, H200_TFLOPS)
    np.testing.assert_allclose(fit.terms.vector(), TRUE.vector(), rtol=0.15)
    few = synthetic_rows()
    few = few[few.tokens >= 64]  # no row with <= 16 rows per expert for Qwen3's 128 experts?
    counts = regime_counts(few)
    partial = fit_moe_terms(few, H200_BW, H200_TFLOPS)
    if counts["gemv"] < 3:
        assert "expert_gemv_bandwidth_fraction" in partial.held


def test_verification_premium_of_the_formula_is_larger_for_a_fine_grained_moe():
    """With the fitted terms a 4-token pass of Qwen3-30B-A3B-shaped blocks costs several decode
    passes (about 4x the distinct experts), Mixtral-shaped ones (8 experts, top-2) less."""
    rows = synthetic_rows()
    sel = rows[(rows.batch == 1) & (rows.positions.isin([1, 4])) & (rows.routing_skew == 0)]
    t = sel.set_index(["model", "positions"])["median_ms"]
    assert t["qwen3-30b-a3b", 4] / t["qwen3-30b-a3b", 1] > 2.5
    assert t["mixtral-8x7b", 4] / t["mixtral-8x7b", 1] < t["qwen3-30b-a3b", 4] / t[
        "qwen3-30b-a3b", 1]


def _write(df: pd.DataFrame, path) -> str:
    df.to_csv(path, index=False)
    return str(path)


def test_read_moe_measurements_refuses_bad_rows(tmp_path):
    good = synthetic_rows().head(6)
    assert len(read_moe_measurements(_write(good, tmp_path / "g.csv"))) == 6
    for column, value, message in (("top_k", 200, "top_k (line 2)"),
                                   ("distinct_experts", 500, "distinct_experts (line 2)"),
                                   ("median_ms", -1, "median_ms (line 2)"),
                                   ("layers", 0, "layers (line 2)")):
        bad = good.copy()
        bad.loc[bad.index[0], column] = value
        with pytest.raises(CalibrationInputError, match=message.replace("(", r"\(").replace(
                ")", r"\)")):
            read_moe_measurements(_write(bad, tmp_path / "b.csv"))
    with pytest.raises(CalibrationInputError, match="lacks column"):
        read_moe_measurements(_write(good.drop(columns=["distinct_experts"]), tmp_path / "c.csv"))


def test_calibrate_moe_command(tmp_path):
    """The command divides by the preset's peaks and uses its roofline sharpness."""
    from src.costmodel import load_presets
    gpu = load_presets().gpu("h200")
    rows = synthetic_rows()
    rows["median_ms"] = predict_ms(rows, TRUE, gpu.memory_bandwidth_gb_per_s,
                                   gpu.dense_bf16_tflops, gpu.roofline_sharpness_p or 3.0)
    path = _write(rows, tmp_path / "rows.csv")
    out = tmp_path / "fit.toml"
    rc, text, err = run_captured(["calibrate-moe", "--measurements", path, "--gpu", "h200",
                                  "--out", str(out)])
    assert rc == 0, err
    assert "expert_fixed_us = 14  [fitted]" in text
    assert "[moe_gemm.h200]" in out.read_text()
    rc, text, err = run_captured(["calibrate-moe", "--measurements", path, "--gpu", "nope"])
    assert rc == 2 and "--gpu" in err and len(err.strip().splitlines()) == 1
