"""Checks of the hardware cost model + engine profiles against published measurements (issue 5).

Run with `python -m pytest tests/test_published_checks.py -s` to see the predicted-vs-measured
tables. Sources (scenario files configs/scenarios/check-*.toml give the setups and assumptions):

* MagicDec Table 1: Chen et al. 2024, "MagicDec: Breaking the Latency-Throughput Tradeoff for Long
  Context Generation with Speculative Decoding" (arXiv 2408.11049). Llama-2-7B-32K on 4x H100,
  context 8000, batch 64, gamma 4, self-speculation with a StreamingLLM draft KV cache:
  gamma x T_D = 23.63 ms, T_V = 27.90 ms, T_AR = 26.17 ms, Omega = 3.37, speedup 1.68x.
* vLLM blog, "How Speculative Decoding Boosts vLLM Performance by up to 2.8x" (2024-10-17):
  Llama-3-70B on 4x H100; draft model Qwama-0.5B on ShareGPT 1.5x faster at QPS 1, 1.4x slower
  at high QPS; n-gram on CNN/DailyMail 2.8x faster at QPS 1, 1.8x slower at high QPS.

Tolerances: MagicDec times 15% each (the calibration's worst non-attention rows are 20-23% off and
attention is uncalibrated), speedup 10%. vLLM low load (batch 1): 10% (alpha is calibrated there,
so this is a consistency check). vLLM high load: "high QPS" is not a batch size, so the measured
figure must lie inside the predicted range over batch 64-256, widened by 15%.
"""
from __future__ import annotations

import pytest

from run import run_grid
from src.scenario import SCENARIOS_DIR, load_scenario

MAGICDEC = {"gamma_T_D_ms": 23.63, "T_V_ms": 27.90, "T_AR_ms": 26.17, "omega": 3.37,
            "speedup": 1.68}
VLLM_BLOG = {  # scenario file -> (low-load speedup, high-load speedup)
    "check-vllm-blog-70b-draft.toml": (1.5, 1 / 1.4),
    "check-vllm-blog-70b-ngram.toml": (2.8, 1 / 1.8),
}
LOW_LOAD = (1, 2, 4)
HIGH_LOAD = (64, 128, 256)
TIME_TOL, SPEEDUP_TOL, LOW_TOL, HIGH_WIDEN = 0.15, 0.10, 0.10, 0.15


def _table(title, header, rows):
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    lines = [title, "  ".join(str(h).rjust(w) for h, w in zip(header, widths))]
    lines += ["  ".join(str(x).rjust(w) for x, w in zip(r, widths)) for r in rows]
    print("\n" + "\n".join(lines))


# ------------------------------------------------------------------------------ MagicDec Table 1
@pytest.fixture(scope="module")
def magicdec():
    scenario = load_scenario(SCENARIOS_DIR / "check-magicdec-table1.toml")
    out = {}
    for engine in scenario.engine_profiles:
        cost = scenario.cost_model(engine)
        bd = cost.step_breakdown(batch=64, gamma=4, context_len_tokens=8000)
        df = run_grid(scenario.study, cost)
        out[engine] = (bd, df.iloc[0])
    return out


def test_magicdec_table1_times(magicdec):
    bd, row = magicdec["ideal"]
    predicted = {"gamma_T_D_ms": bd.draft_ms, "T_V_ms": bd.verify_ms, "T_AR_ms": bd.decode_ms,
                 "omega": row.tokens_per_step, "speedup": bd.speedup(MAGICDEC["omega"])}
    rows = [(k, f"{MAGICDEC[k]:.2f}", f"{predicted[k]:.2f}",
             f"{100 * (predicted[k] / MAGICDEC[k] - 1):+.1f}%") for k in MAGICDEC]
    rows.append(("speedup (simulated, run_grid)", f"{MAGICDEC['speedup']:.2f}",
                 f"{row.speedup:.2f}", f"{100 * (row.speedup / MAGICDEC['speedup'] - 1):+.1f}%"))
    _table("MagicDec Table 1 (Llama-2-7B-32K, 4xH100, ctx 8000, B 64, gamma 4), engine ideal",
           ("quantity", "measured", "predicted", "error"), rows)
    for key in ("gamma_T_D_ms", "T_V_ms", "T_AR_ms"):
        assert predicted[key] == pytest.approx(MAGICDEC[key], rel=TIME_TOL), key
    assert predicted["speedup"] == pytest.approx(MAGICDEC["speedup"], rel=SPEEDUP_TOL)
    assert row.speedup == pytest.approx(MAGICDEC["speedup"], rel=SPEEDUP_TOL)
    assert row.tokens_per_step == pytest.approx(MAGICDEC["omega"], rel=0.05)


def test_magicdec_under_the_vllm_2024_profile_is_reported(magicdec):
    bd, row = magicdec["vllm-2024"]
    _table("MagicDec setup under vllm-2024 (not what MagicDec ran; for contrast)",
           ("gamma_T_D_ms", "T_V_ms", "T_AR_ms", "speedup"),
           [(f"{bd.draft_ms:.2f}", f"{bd.verify_ms:.2f}", f"{bd.decode_ms:.2f}",
             f"{row.speedup:.2f}")])
    # batch-expansion scoring re-reads 8k-token KV caches 5 times: speculation loses here
    assert row.speedup < 1.0


# ------------------------------------------------------------------------------ vLLM blog
@pytest.fixture(scope="module")
def vllm_blog():
    out = {}
    for name in VLLM_BLOG:
        scenario = load_scenario(SCENARIOS_DIR / name)
        for engine in ("vllm-2024", "ideal"):
            df = run_grid(scenario.study, scenario.cost_model(engine))
            out[(name, engine)] = dict(zip(df.batch_size, df.speedup))
    rows = []
    for (name, engine), sp in out.items():
        low, high = VLLM_BLOG[name]
        rows.append((name.removeprefix("check-vllm-blog-").removesuffix(".toml"), engine,
                     f"{low:.2f}", " / ".join(f"{sp[b]:.2f}" for b in LOW_LOAD),
                     f"{high:.3f}", " / ".join(f"{sp[b]:.2f}" for b in HIGH_LOAD)))
    _table("vLLM blog (Llama-3-70B, 4xH100, gamma 5): speedup measured vs predicted",
           ("check", "engine", "low meas.", "pred. B=1/2/4", "high meas.", "pred. B=64/128/256"),
           rows)
    return out


@pytest.mark.parametrize("name", list(VLLM_BLOG))
def test_vllm_blog_low_load(vllm_blog, name):
    measured = VLLM_BLOG[name][0]
    assert vllm_blog[(name, "vllm-2024")][1] == pytest.approx(measured, rel=LOW_TOL)


@pytest.mark.parametrize("name", list(VLLM_BLOG))
def test_vllm_blog_high_load_inside_predicted_range(vllm_blog, name):
    measured = VLLM_BLOG[name][1]
    high = [vllm_blog[(name, "vllm-2024")][b] for b in HIGH_LOAD]
    assert min(high) / (1 + HIGH_WIDEN) <= measured <= max(high) * (1 + HIGH_WIDEN)
    assert max(high) < 1.0 or min(high) < 1.0  # the profile predicts a slowdown at high load


def test_ngram_fit_reproduces_its_target(vllm_blog):
    # verification_attention_slowdown_factor was fitted to this point (src/presets/engines.toml)
    name = "check-vllm-blog-70b-ngram.toml"
    assert vllm_blog[(name, "vllm-2024")][256] == pytest.approx(VLLM_BLOG[name][1], rel=0.05)


def test_physics_alone_cannot_reproduce_the_ngram_slowdown(vllm_blog):
    """Finding: with no engine overhead, n-gram speculation (no draft cost) at gamma 5 stays at or
    above break-even up to batch 256; the blog's 1.8x slowdown needs engine costs."""
    name = "check-vllm-blog-70b-ngram.toml"
    ideal = [vllm_blog[(name, "ideal")][b] for b in HIGH_LOAD]
    assert min(ideal) > 1.5 * VLLM_BLOG[name][1]
