"""Tests of deployment scenarios (src/hardware/scenario.py) and engine overhead profiles."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from src.config import ConfigError
from src.costmodel import (
    IDEAL_ENGINE,
    CostModelInputError,
    HardwareCostModel,
    engine_profile,
    load_engine_profiles,
)
from src.hardware.scenario import (
    SCENARIOS_DIR,
    default_hardware_scenario,
    load_scenario,
    scenario_files,
)

FILES = scenario_files()
DRAFTS = ("llama-3.2-1b", "eagle", "ngram", "self")


def _batch(R=3, B=16, seed=1, low=500, high=3000):
    rng = np.random.default_rng(seed)
    active = rng.random((R, B)) < 0.8
    active[1] = False  # an empty replication
    return active, rng.integers(low, high, (R, B))


def _cost(draft="llama-3.2-1b", engine="vllm-2024", **kw):
    kw.setdefault("draft_kv_budget_tokens", 512 if draft == "self" else None)
    return HardwareCostModel.from_presets("h100-sxm", "llama-3.1-8b", draft=draft, engine=engine,
                                          **kw)


# ---------------------------------------------------------------- scenario files
def test_the_expected_scenarios_exist():
    names = {f.stem for f in FILES}
    assert {"h100-llama8b-1b", "a100-llama8b-1b", "l40s-llama8b-1b", "h100-llama70b-8b-tp4",
            "h100-llama8b-eagle", "h100-llama8b-ngram", "h100-llama8b-1b-32k",
            "h100-llama8b-selfspec-32k", "check-magicdec-table1", "check-vllm-blog-70b-draft",
            "check-vllm-blog-70b-ngram"} <= names


@pytest.mark.parametrize("path", FILES, ids=[f.stem for f in FILES])
def test_every_scenario_loads_and_builds_its_cost_models(path):
    if "[disagg]" in path.read_text():  # serve's: its aggregated twin is checked here
        from src.disagg.scenario import load_disagg_scenario
        with pytest.raises(ConfigError, match="^disagg: a disaggregated deployment runs with"):
            load_scenario(path)
        s, _ = load_disagg_scenario(path)
    else:
        s = load_scenario(path)
    assert s.name == path.stem and s.description and s.acceptance_source
    assert path.read_text().startswith("#")  # comment header
    active, ctx = _batch(B=max(s.study.batch_sizes[:3]))
    for engine in s.engine_profiles:
        cost = s.cost_model(engine)
        assert cost.engine.name == engine
        t = cost.target_pass_time(active, 5, ctx)
        d = cost.draft_passes_time(active, 4, ctx)
        assert t[1] == 0 and d[1] == 0 and np.all(t[[0, 2]] > 0)
    assert set(s.study.quality_modes) <= set(s.study.alpha_modes)


def test_default_scenario_matches_its_file():
    from_file = load_scenario(SCENARIOS_DIR / "h100-llama8b-1b.toml")
    default = default_hardware_scenario()
    assert replace(from_file, source_path=None) == default
    assert (default.gpu_id, default.target_model_id, default.draft, default.tp) == (
        "h100-sxm", "llama-3.1-8b", "llama-3.2-1b", 1)
    assert default.study.batch_sizes == (1, 2, 4, 8, 16, 32, 64, 128)
    assert (default.study.prompt_len.low, default.study.prompt_len.high) == (1024, 2048)


# ---------------------------------------------------------------- bad scenario files
def _write(tmp_path, scenario_lines: str, study_lines: str = "") -> Path:
    p = tmp_path / "s.toml"
    p.write_text(f"[scenario]\n{scenario_lines}\n[study]\n{study_lines}\n")
    return p


GOOD = 'name = "x"\ngpu = "h100-sxm"\ntarget = "llama-3.1-8b"\ndraft = "llama-3.2-1b"\n'


def _raises(field, path, match=""):
    with pytest.raises(ConfigError) as info:
        load_scenario(path)
    assert info.value.field_name == field, str(info.value)
    assert str(info.value).startswith(f"{field}: ") and "\n" not in str(info.value)
    assert match in str(info.value)
    return str(info.value)


def test_good_minimal_file_loads(tmp_path):
    s = load_scenario(_write(tmp_path, GOOD))
    assert s.engine_profiles == ("ideal", "vllm-v1") and s.draft_tp == 1


def test_unknown_keys(tmp_path):
    _raises("scenario.gpuu", _write(tmp_path, GOOD + "gpuu = 1\n"), "unknown key; allowed: name")
    _raises("study.gamas", _write(tmp_path, GOOD, "gamas = [1]\n"), "unknown configuration key")
    p = tmp_path / "t.toml"
    p.write_text(f"[scenario]\n{GOOD}\n[extra]\nx = 1\n")
    _raises("extra", p, "allowed: scenario, study")


def test_a_draft_cost_the_scenario_would_ignore_is_refused(tmp_path):
    path = _write(tmp_path, GOOD, "draft_cost = 0.05\n")
    _raises("study.draft_cost", path, "not used by a scenario")


def test_unknown_gpu_and_models(tmp_path):
    msg = _raises("scenario.gpu", _write(tmp_path, GOOD.replace("h100-sxm", "h900")),
                  "unknown 'h900'; allowed: a100-80gb-sxm, ")
    assert "h100-sxm" in msg
    _raises("scenario.target", _write(tmp_path, GOOD.replace('"llama-3.1-8b"', '"gpt-5"')),
            "unknown 'gpt-5'; allowed: ")
    _raises("scenario.draft", _write(tmp_path, GOOD.replace("llama-3.2-1b", "tiny")),
            "allowed: eagle, eagle3, mtp, ngram, self, ")
    _raises("scenario.engine_profiles", _write(tmp_path, GOOD + 'engine_profiles = ["fast"]\n'),
            "allowed: ideal, pytorch-eager, pytorch-graphs, sglang, sglang-spec-v2, trtllm, "
            "vllm-2024, "
            "vllm-v1")
    _raises("scenario.name", _write(tmp_path, GOOD.replace('name = "x"', "name = 3")))
    _raises("scenario.gpu",
            _write(tmp_path, 'name = "x"\ntarget = "llama-3.1-8b"\ndraft = "ngram"'),
            "missing")


def test_bad_tp(tmp_path):
    _raises("scenario.tp", _write(tmp_path, GOOD + "tp = 3\n"), "allowed: 1, 2, 4, 8")
    _raises("scenario.tp", _write(tmp_path, GOOD + "tp = 0\n"), "integer >= 1")
    _raises("scenario.draft_tp", _write(tmp_path, GOOD.replace("llama-3.2-1b", "qwen2.5-0.5b")
                                        + "tokenizer_shared = true\ndraft_tp = 4\n"),
            "allowed: 1, 2")
    _raises("scenario.draft_tp", _write(tmp_path, GOOD.replace("llama-3.2-1b", "eagle")
                                        + "tp = 2\ndraft_tp = 1\n"), "allowed: 2")


def test_model_that_does_not_fit(tmp_path):
    _raises("scenario.tp", _write(tmp_path, GOOD.replace("llama-3.1-8b", "llama-3.1-70b")),
            "of weights per GPU")  # 141 GB of weights on one 80 GB GPU
    msg = _raises("study.batch_sizes", _write(tmp_path, GOOD, "batch_sizes = [1, 256]\n"),
                  "allowed: batch sizes up to 140")
    assert "GB" in msg
    _raises("study.batch_sizes", _write(tmp_path, GOOD.replace("h100-sxm", "l40s"),
                                        "batch_sizes = [128]\n"), "up to 64")


def test_draft_kv_budget_rules(tmp_path):
    _raises("scenario.draft_kv_budget_tokens",
            _write(tmp_path,
                   GOOD.replace("llama-3.2-1b", "ngram") + "draft_kv_budget_tokens = 64\n"),
            "n-gram")
    _raises("scenario.draft_kv_budget_tokens",
            _write(tmp_path, GOOD.replace("llama-3.2-1b", "self")),
            "required")
    _raises("scenario.draft_kv_budget_tokens",
            _write(tmp_path, GOOD + "draft_kv_budget_tokens = 0\n"))
    _raises("scenario.memory_reserve_fraction",
            _write(tmp_path, GOOD + "memory_reserve_fraction = 1.5\n"))


def test_bad_study_values_are_named(tmp_path):
    _raises("study.gammas", _write(tmp_path, GOOD, "gammas = [0]\n"))
    _raises("study.alpha_modes.m.kind",
            _write(tmp_path, GOOD, "alpha_modes = { m = { kind = 'x' } }\n"))


def test_missing_or_invalid_file(tmp_path):
    _raises("--scenario", tmp_path / "none.toml", "not found")
    bad = tmp_path / "bad.toml"
    bad.write_text("[scenario\n")
    _raises("--scenario", bad, "not valid TOML")


# ---------------------------------------------------------------- engine profiles
def test_engine_profiles_load_and_ideal_is_all_zero():
    profiles = load_engine_profiles()
    assert {"ideal", "vllm-2024"} <= set(profiles)
    assert profiles["ideal"] == IDEAL_ENGINE and IDEAL_ENGINE.is_ideal
    assert not profiles["vllm-2024"].is_ideal
    with pytest.raises(CostModelInputError, match="^engine: unknown engine profile 'x'; known: "):
        engine_profile("x")


@pytest.mark.parametrize("draft", DRAFTS)
def test_ideal_profile_has_zero_overhead(draft):
    cost = _cost(draft, "ideal")
    active, ctx = _batch()
    for t in (1, 5, np.array([1, 3, 9])):
        physics, overhead = cost.target_pass_parts(active, t, ctx)
        assert np.all(overhead == 0.0) and np.all(physics[[0, 2]] > 0)
    physics, overhead = cost.draft_passes_parts(active, np.array([1, 4, 8]), ctx)
    assert np.all(overhead == 0.0)
    if draft == "ngram":
        assert np.all(physics == 0.0)


@pytest.mark.parametrize("draft", DRAFTS)
def test_physics_does_not_depend_on_the_engine(draft):
    active, ctx = _batch()
    ideal, real = _cost(draft, "ideal"), _cost(draft, "vllm-2024")
    for t in (1, 6):
        np.testing.assert_allclose(ideal.target_pass_parts(active, t, ctx)[0],
                                   real.target_pass_parts(active, t, ctx)[0])
    np.testing.assert_allclose(ideal.draft_passes_parts(active, 4, ctx)[0],
                               real.draft_passes_parts(active, 4, ctx)[0])
    np.testing.assert_allclose(real.target_pass_time(active, 6, ctx),
                               sum(real.target_pass_parts(active, 6, ctx)))


def _attn(cost, S, t, C):
    return cost._attention_pnorm_ms(cost._target_c, np.array([S]), np.array([S * t]), t,
                                    np.array([C]))[0]


def test_target_overheads_add_as_documented():
    e = engine_profile("vllm-2024")
    cost = _cost("ngram", e)
    S, ctx_len = 8, 1500
    active, ctx = np.ones((1, S), bool), np.full((1, S), ctx_len)
    C = S * ctx_len
    decode = cost.target_pass_parts(active, 1, ctx)[1][0]
    assert decode == pytest.approx(e.step_cpu_fixed_ms + e.step_cpu_per_seq_ms * S)
    t = 5
    verify = cost.target_pass_parts(active, t, ctx)[1][0]
    cpu = e.step_cpu_fixed_ms + S * (e.step_cpu_per_seq_ms * t
                                     + e.rejection_sampling_per_position_ms * t
                                     + e.kv_bookkeeping_per_seq_ms)
    expanded = cost._attention_pnorm_ms(cost._target_c, np.array([S * t]), np.array([S * t]), 1,
                                        np.array([t * C + S * t * (t - 1) / 2]))[0]
    attn = e.verification_attention_slowdown_factor * expanded - _attn(cost, S, t, C)
    assert verify == pytest.approx(cpu + attn, rel=1e-9)
    assert expanded == pytest.approx(t * _attn(cost, S, 1, C), rel=0.05)  # KV read t times
    # without batch expansion: factor x plain attention, per-sequence CPU once
    plain = replace(e, scoring_batch_expansion=False, verification_attention_slowdown_factor=1.5)
    v2 = _cost("ngram", plain).target_pass_parts(active, t, ctx)[1][0]
    cpu2 = e.step_cpu_fixed_ms + S * (e.step_cpu_per_seq_ms + e.rejection_sampling_per_position_ms
                                      * t
                                      + e.kv_bookkeeping_per_seq_ms)
    assert v2 == pytest.approx(cpu2 + 0.5 * _attn(cost, S, t, C), rel=1e-9)


def test_draft_overheads_add_as_documented():
    e = engine_profile("vllm-2024")
    S, gamma = 16, 4
    active, ctx = np.ones((1, S), bool), np.full((1, S), 1000)
    model = _cost("llama-3.2-1b", e)
    physics, overhead = model.draft_passes_parts(active, gamma, ctx)
    no_catchup = _cost("llama-3.2-1b", replace(e, draft_catchup_positions_per_seq=0))
    cpu = gamma * (e.draft_pass_cpu_fixed_ms + e.draft_pass_cpu_per_seq_ms * S)
    assert no_catchup.draft_passes_parts(active, gamma, ctx)[1][0] == pytest.approx(cpu)
    # catch-up = one more 2-position draft pass minus a 1-position one, at the step's context
    table = model._table_ms("draft", S, 2)
    extra = (table[S, 2] - table[S, 1]
             + model._attention_pnorm_ms(model._draft_c, S, 2 * S, 2, S * 1000)
             - model._attention_pnorm_ms(model._draft_c, S, S, 1, S * 1000))
    assert overhead[0] == pytest.approx(cpu + extra, rel=1e-9)
    assert 0 < extra < physics[0] / gamma
    ngram = _cost("ngram", e)
    assert ngram.draft_passes_parts(active, gamma, ctx)[1][0] == pytest.approx(
        gamma * e.ngram_pass_cpu_ms)


def test_bad_engine_file(tmp_path):
    p = tmp_path / "e.toml"
    p.write_text("[engines.x]\nstep_cpu_fixed_ms = 1.0\n")
    with pytest.raises(CostModelInputError, match=r"^engines\.x: missing field\(s\) description"):
        load_engine_profiles(p)
    text = (Path(__file__).resolve().parents[1] / "src/presets/engines.toml").read_text()
    p.write_text(text.replace("step_cpu_fixed_ms = 0.0", "step_cpu_fixed_ms = -1.0", 1))
    with pytest.raises(CostModelInputError,
                       match=r"^engines\.ideal\.step_cpu_fixed_ms: must be >= 0"):
        load_engine_profiles(p)
    p.write_text(text.replace("verification_attention_slowdown_factor = 1.0",
                              "verification_attention_slowdown_factor = 0.5", 1))
    with pytest.raises(CostModelInputError, match="must be >= 1"):
        load_engine_profiles(p)
    p.write_text(text + "\n[engines.y]\nbogus = 1\n")
    with pytest.raises(CostModelInputError, match=r"^engines\.y: unknown field\(s\) bogus"):
        load_engine_profiles(p)


# ---------------------------------------------------------------- draft KV budget
def test_self_speculation_draft_is_the_target_with_capped_kv():
    cost = _cost("self", "ideal")
    S = 8
    active = np.ones((1, S), bool)
    short, long_ = np.full((1, S), 300), np.full((1, S), 30000)
    # within the budget a self-draft pass is exactly a target decode pass
    one = cost.draft_passes_parts(active, 1, short)[0][0]
    assert one == pytest.approx(cost.target_pass_parts(active, 1, short)[0][0], rel=1e-9)
    # beyond it the draft cost no longer grows with context; the target's does
    capped = cost.draft_passes_parts(active, 4, long_)[0][0]
    assert capped == pytest.approx(cost.draft_passes_parts(active, 4, np.full((1, S), 5000))[0][0])
    assert capped < 4 * cost.target_pass_parts(active, 1, long_)[0][0] / 2


def test_budget_caps_a_standalone_draft_and_its_memory():
    full = _cost("llama-3.2-1b", "ideal")
    capped = _cost("llama-3.2-1b", "ideal", draft_kv_budget_tokens=256)
    active, ctx = _batch(low=4000, high=8000)
    assert np.all(capped.draft_passes_time(active, 4, ctx)[[0, 2]]
                  < full.draft_passes_time(active, 4, ctx)[[0, 2]])
    assert capped.kv_fits(64, 8000)[1] < full.kv_fits(64, 8000)[1]


def test_scenario_name_must_be_a_plain_file_name(tmp_path):
    _raises("scenario.name", _write(tmp_path, GOOD.replace('name = "', 'name = "../')),
            "plain file name")


def test_largest_batch_that_fits_is_the_memory_boundary():
    cost = _cost("llama-3.2-1b", "ideal")
    b = cost.largest_batch_that_fits(4000)
    assert 1 < b < 8192
    assert cost.kv_fits(b, 4000)[0] and not cost.kv_fits(b + 1, 4000)[0]
    assert cost.largest_batch_that_fits(4000, limit=b - 5) == b - 5


def test_scenario_presets_reach_the_cost_model(tmp_path):
    # a preset file (e.g. `python run.py calibrate --out`) named relative to the scenario file
    (tmp_path / "mine.toml").write_text(
        '[gpus."h100-sxm"]\nkernel_fixed_us = 30.0\n\n'
        '[engines.ideal]\nkernels_per_layer = 20\n')
    plain = load_scenario(_write(tmp_path, GOOD))
    mine = load_scenario(_write(tmp_path, GOOD + 'presets = ["mine.toml"]\n'))
    assert mine.preset_paths == (str(tmp_path / "mine.toml"),)
    active, ctx = np.ones((1, 4), bool), np.full((1, 4), 1000)
    slow = mine.cost_model("ideal").target_pass_time(active, 1, ctx)[0]
    fast = plain.cost_model("ideal").target_pass_time(active, 1, ctx)[0]
    # 32 layers x (20 + 2) kernels + 2 at 30 us instead of 12 kernels at the fitted ~3.2 us
    assert slow > fast + 0.02 * 32 * 20
    _raises("scenario.presets", _write(tmp_path, GOOD + 'presets = ["nope.toml"]\n'),
            "file not found")
    _raises("scenario.presets", _write(tmp_path, GOOD + "presets = [1]\n"), "expected a list")
    (tmp_path / "bad.toml").write_text("[gpus.h100-sxm]\nkernel_fixed_us = -1\n")
    _raises("scenario.presets", _write(tmp_path, GOOD + 'presets = ["bad.toml"]\n'), ">= 0")
