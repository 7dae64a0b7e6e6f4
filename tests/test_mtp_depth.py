"""MTP drafts past the checkpoint's depth (num_nextn_predict_layers): the reuse rule's closed form,
what recommend prints about reused positions, and vLLM's divisibility refusal."""
import json
import re

import numpy as np
import pytest

from src.acceptance import (
    MTP_REUSE_DECAY,
    expected_tokens_per_step,
    expected_tokens_per_step_mtp,
    expected_tokens_per_step_profile,
    hazard_profile,
    mean_hazard,
    mtp_position_rates,
)
from tests.helpers import run_captured
from tests.test_hf_config import CONFIGS

DEEPSEEK = ["--gpu", "h200", "--target", "deepseek-v3", "--draft", "mtp", "--tp", "8",
            "--acceptance", "0.875"]


@pytest.mark.parametrize("alpha, gamma", [(0.875, 1), (0.875, 7), (0.6, 12), (0.95, 3)])
def test_one_layer_reuse_has_the_closed_form(alpha, gamma):
    """L = 1: prod_{j <= i} a_j = alpha^i d^(i (i - 1) / 2)."""
    d = MTP_REUSE_DECAY
    closed = 1 + sum(alpha ** i * d ** (i * (i - 1) / 2) for i in range(1, gamma + 1))
    assert expected_tokens_per_step_mtp(alpha, 1, gamma) == pytest.approx(closed, rel=1e-12)


def test_positions_within_the_depth_stay_iid():
    rates = mtp_position_rates(0.8, 3, 6)
    np.testing.assert_allclose(rates, [0.8, 0.8, 0.8, 0.8 * 0.83, 0.8 * 0.83 ** 2,
                                       0.8 * 0.83 ** 3])
    assert expected_tokens_per_step_mtp(0.8, 3, 3) == pytest.approx(
        float(expected_tokens_per_step(0.8, 3)))


def test_the_decay_reproduces_its_source():
    """DeepSeek-V3's 0.875 second-token acceptance with nebius's 'Original MTP' tau 3.20 at K = 7
    (design.md, 'MTP depth'); i.i.d. would say 5.25."""
    assert expected_tokens_per_step_mtp(0.875, 1, 7) == pytest.approx(3.20, abs=0.01)
    assert float(expected_tokens_per_step(0.875, 7)) == pytest.approx(5.25, abs=0.01)


def test_the_hazard_form_the_schedule_uses_equals_the_rates():
    """recommend passes (exp(-Cbar), D) to steady_state_gammas: 1 + sum alpha^(D_i) must be the
    rule's E[K + 1] at every gamma."""
    rates = mtp_position_rates(0.875, 1, 8)
    alpha, profile = np.exp(-mean_hazard(rates)), hazard_profile(rates, 8)
    for g in range(1, 9):
        assert float(expected_tokens_per_step_profile(np.array([alpha]), g, profile)[0]) \
            == pytest.approx(expected_tokens_per_step_mtp(0.875, 1, g), rel=1e-12)


def test_deepseek_v3_example_says_the_layer_is_reused():
    """The README example (all three engines): one line under vLLM's K and one under SGLang's,
    TensorRT-LLM's own MTP-Eagle note under its YAML."""
    p = run_captured(["recommend", *DEEPSEEK])
    assert p.returncode == 0, p.stderr
    cfg = json.loads(re.search(r"--speculative-config '(\{.*\})'", p.stdout).group(1))
    k = cfg["num_speculative_tokens"]
    assert k < 8 and "--max-gamma 16" not in p.stdout
    notes = [line for line in p.stdout.splitlines() if line.strip().startswith("MTP depth: K")]
    assert len(notes) == 2 and all(f"K {k}" in x and "reuse" in x for x in notes)
    trt = p.stdout.split("=== TensorRT-LLM", 1)[1]
    assert "MTP depth: K" not in trt and "that layer reused max_draft_len times" in trt
    tree = [line for line in p.stdout.splitlines() if "these shapes take the top-1 rate" in line]
    assert len(tree) == 1 and "upper bounds" in tree[0]
    assert "num_nextn_predict_layers 1" in notes[0]
    assert "vllm:spec_decode_num_accepted_tokens_per_pos" in notes[0]
    assert "independently" not in p.stdout.split("Assumptions:")[1].splitlines()[1]


def test_a_max_gamma_hint_past_the_depth_says_so():
    """At acceptance 0.99 the best gamma still tops out at --max-gamma 2: the hint gets its line."""
    p = run_captured(["recommend", *DEEPSEEK[:-1], "0.99", "--max-gamma", "2", "--batch", "1",
                      "--engine", "vllm-v1"])  # one engine's hint
    assert p.returncode == 0, p.stderr
    assert "try --max-gamma 4" in p.stdout
    hint = [line for line in p.stdout.splitlines() if "a --max-gamma above 1" in line]
    assert len(hint) == 1 and "reused" in hint[0] and "per-position" in hint[0]


def deepseek_config(tmp_path, layers: int) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**CONFIGS["deepseek-v3"], "num_nextn_predict_layers": layers}))
    return str(path)


def test_a_depth_vllm_cannot_run_is_refused_naming_the_flag(tmp_path):
    """vllm/config/speculative.py: num_speculative_tokens > n_predict must be a multiple of it."""
    target = deepseek_config(tmp_path, 3)
    args = ["recommend", "--gpu", "h200", "--target", target, "--draft", "mtp", "--tp", "8",
            "--acceptance", "0.875", "--batch", "1", "--engine", "vllm-v1"]  # vLLM's refusal
    p = run_captured([*args, "--max-gamma", "4"])
    assert p.returncode == 2 and p.stdout == ""
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --max-gamma: "), p.stderr
    assert "3 MTP layers" in lines[0] and "allowed: 1..3 or a multiple of 3" in lines[0]
    ok = run_captured([*args, "--max-gamma", "6"])
    assert ok.returncode == 0, ok.stderr
    k = json.loads(re.search(r"--speculative-config '(\{.*\})'", ok.stdout).group(1))
    assert k["num_speculative_tokens"] in (1, 2, 3, 6)


def test_reuse_of_a_one_layer_checkpoint_is_allowed_at_any_depth_and_warned():
    one = ["--engine", "vllm-v1"]  # one engine's warning
    p = run_captured(["recommend", *DEEPSEEK, "--max-gamma", "5", "--batch", "1", *one])
    assert p.returncode == 0, p.stderr
    warned = [line for line in p.stdout.splitlines() if "--max-gamma 5 asks past" in line]
    assert len(warned) == 1 and "1 MTP layer" in warned[0] and "reuse" in warned[0]
    quiet = run_captured(["recommend", *DEEPSEEK, "--batch", "1", *one])  # default 8: no warning
    assert "asks past" not in quiet.stdout


def test_the_rate_simulation_serves_the_reuse_rule():
    """recommend --rate hands serve's simulator the rule's rates as a per-position mode."""
    from dataclasses import replace

    from src.online import mtp_depth
    from src.online.recommend import build, make_parser
    from src.online.study import serving_hazard_profile
    cfg = build(make_parser().parse_args([*DEEPSEEK, "--rate", "1"]))[0]
    sim = replace(cfg, alpha=mtp_depth.serving_alpha(cfg))
    np.testing.assert_allclose(sim.alpha.rates, mtp_position_rates(0.875, 1, cfg.max_gamma))
    assert serving_hazard_profile(sim) is not None
    plain = build(make_parser().parse_args(["--gpu", "h100-sxm", "--target", "llama-3.1-8b",
                                            "--draft", "llama-3.2-1b", "--acceptance", "0.7",
                                            "--rate", "1"]))
    assert mtp_depth.serving_alpha(plain[0]) is plain[0].alpha


def test_the_deepseek_scenario_carries_the_reuse_rule():
    """The MoE study's mtp_report mode is the rule's rates at the report's 0.875, not an i.i.d.
    extrapolation of the one trained position."""
    from src.config import PerPositionAlpha
    from src.hardware.scenario import load_scenario
    sc = load_scenario("configs/scenarios/moe-deepseek-v3-mtp-8xh200.toml")
    mode = sc.study.alpha_modes["mtp_report"]
    assert isinstance(mode, PerPositionAlpha)
    np.testing.assert_allclose(mode.rates, mtp_position_rates(0.875, 1, len(mode.rates)),
                               atol=1e-6)
    assert len(mode.rates) >= max(sc.study.gammas)
