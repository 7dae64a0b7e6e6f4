"""The MoE section's engine settings, its place in summary.txt, and the acceptance_length mode."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from src.config import ConfigError, PointAlpha, parse_alpha_distribution
from src.hardware import moe_report
from src.hardware.schedules import schedule_ranges


def test_acceptance_length_mode_inverts_the_chain_formula():
    """tau = (1 - a^(g+1)) / (1 - a): SpecForge #339's 1.86 at gamma 3 is a = 0.4945."""
    mode = parse_alpha_distribution("m", {"kind": "acceptance_length", "tau": 1.86, "gamma": 3})
    assert isinstance(mode, PointAlpha)
    a = mode.value
    assert sum(a ** i for i in range(4)) == pytest.approx(1.86, abs=1e-9)
    assert a == pytest.approx(0.4945, abs=1e-4)
    # one draft token: tau = 1 + a exactly (SGLang PR #3582: ~1.9 -> 0.9)
    one = parse_alpha_distribution("m", {"kind": "acceptance_length", "tau": 1.9, "gamma": 1})
    assert one.value == pytest.approx(0.9, abs=1e-12)


@pytest.mark.parametrize("table, field", [
    ({"kind": "acceptance_length", "tau": 4.5, "gamma": 3}, "m.tau"),
    ({"kind": "acceptance_length", "tau": 1.0, "gamma": 3}, "m.tau"),
    ({"kind": "acceptance_length", "tau": 2.0, "gamma": 0}, "m.gamma"),
    ({"kind": "acceptance_length", "tau": 2.0}, "m"),
])
def test_acceptance_length_mode_refuses_bad_values(table, field):
    with pytest.raises(ConfigError) as exc:
        parse_alpha_distribution("m", table)
    assert str(exc.value).startswith(field)


def _best(gammas, speedups):
    batches = [1, 2, 4, 8, 16, 32]
    return pd.DataFrame({"batch_size": batches, "gamma": [max(g, 1) for g in gammas],
                         "schedule_gamma": gammas, "speedup": speedups})


def _cfg(kind, head, best):
    return moe_report.vllm_config(kind, head, best.batch_size.tolist(),
                                  best.schedule_gamma.tolist())


def test_vllm_config_names_and_schedule():
    best = _best([3, 3, 2, 1, 0, 0], [1.6, 1.5, 1.3, 1.1, 0.95, 0.9])
    cfg = _cfg("eagle3", "org/head", best)
    assert cfg["method"] == "eagle3" and cfg["model"] == "org/head"
    assert cfg["num_speculative_tokens"] == 3
    assert cfg["num_speculative_tokens_per_batch_size"] == [[1, 3, 3], [4, 7, 2], [8, 15, 1],
                                                            [16, 32, 0]]
    assert cfg["num_speculative_tokens_per_batch_size"] == schedule_ranges(
        best.batch_size.tolist(), best.schedule_gamma.tolist(), 32)
    mtp = _cfg("mtp", None, best)
    assert mtp["method"] == "mtp" and "model" not in mtp  # vLLM loads the target's MTP layers
    json.dumps(mtp)
    assert _cfg("eagle3", "x", _best([0] * 6, [0.9] * 6)) is None


def test_the_schedule_does_not_zig_zag_on_a_flat_objective():
    """The MoE study's vLLM list took the literal best gamma per batch: on gpt-oss-120b (B200)
    it read 2, 3, 1, 3, 2, 1, 5 over 1..256 where neighbouring gammas were within a few percent.
    By src/gamma_rule.py's rule every batch keeps a gamma within the tolerance of its best, and a
    2%-flat objective gives one range."""
    batches = [1, 2, 4, 8, 16]
    speedup = {1: [1.40, 1.36, 1.39, 1.47, 1.29], 2: [1.42, 1.35, 1.38, 1.45, 1.28],
               3: [1.41, 1.34, 1.39, 1.46, 1.27]}
    rows = pd.DataFrame([{"batch_size": b, "gamma": g, "speedup": s[i]}
                         for g, s in speedup.items() for i, b in enumerate(batches)])
    got_batches, gammas, used = moe_report.schedule_gammas(rows)
    assert got_batches == batches and used == pytest.approx(0.06)
    assert len(set(gammas)) == 1  # literal argmax: 2, 1, 1, 1, 1 ... one range here
    for i, g in enumerate(gammas):
        best = max(s[i] for s in speedup.values())
        assert speedup[g][i] * 1.06 >= best
    # a gain larger than the tolerance still switches: gamma 3 wins by 20% from batch 8 on
    rows.loc[(rows.gamma == 3) & (rows.batch_size >= 8), "speedup"] *= 1.2
    assert moe_report.schedule_gammas(rows)[1][-2:] == [3, 3]
    # never faster than greedy: gamma 0
    slow = rows.assign(speedup=0.9)
    assert moe_report.schedule_gammas(slow)[1] == [0] * 5


def test_sglang_flags_per_draft_kind():
    assert moe_report.sglang_flags("eagle3", "org/head", 2) == (
        "--speculative-algorithm EAGLE3 --speculative-draft-model-path org/head "
        "--speculative-num-steps 2 --speculative-eagle-topk 1 --speculative-num-draft-tokens 3")
    # DeepSeek MTP: SGLang's EAGLE worker (NEXTN is rewritten to EAGLE), draft path defaulted to
    # the model path for DeepseekV3ForCausalLM, so none is given
    assert moe_report.sglang_flags("mtp", None, 1) == (
        "--speculative-algorithm EAGLE --speculative-num-steps 1 --speculative-eagle-topk 1 "
        "--speculative-num-draft-tokens 2")


def test_section_is_replaced_in_place_and_kept(tmp_path):
    section = f"{moe_report.SECTION_BEGIN}\nbody one\n{moe_report.SECTION_END}"
    text = moe_report.replace_section("study part\n", section)
    assert text == f"study part\n\n{section}\n"
    again = moe_report.replace_section(text + "\nlater part\n", section.replace("one", "two"))
    assert "body two" in again and "body one" not in again and again.endswith("later part\n")
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "summary.txt").write_text(again)
    assert moe_report.kept_section(str(tmp_path)) == section.replace("one", "two")
    assert moe_report.kept_section(str(tmp_path / "nothing")) is None


def test_recommend_prints_eagle3_and_mtp_settings_the_engines_accept():
    from tests.helpers import run_captured
    base = ["recommend", "--gpu", "h100-sxm", "--target", "qwen3-30b-a3b-fp8", "--draft",
            "qwen3-30b-a3b-eagle3", "--acceptance", "0.5", "--batch", "1,8",
            "--engine", "vllm-v1"]  # vLLM and SGLang lines under one schedule (sglang's is off)
    rc, out, err = run_captured(base)  # the preset's public weights are the default path
    assert rc == 0 and "--speculative-draft-model-path zhuyksir/EAGLE3-Qwen3-30B-A3B" in out, err
    rc, out, err = run_captured(base + ["--draft-model-path", "org/head"])
    assert rc == 0, err
    vllm = json.loads(out.split("--speculative-config '", 1)[1].split("'", 1)[0])
    assert vllm["method"] == "eagle3" and vllm["model"] == "org/head"
    assert "--speculative-algorithm EAGLE3 --speculative-draft-model-path org/head" in out
    rc, out, err = run_captured(["recommend", "--gpu", "h200", "--target", "deepseek-v3",
                                 "--draft", "mtp", "--tp", "8", "--acceptance", "0.875",
                                 "--batch", "1,8"])
    assert rc == 0, err
    vllm = json.loads(out.split("--speculative-config '", 1)[1].split("'", 1)[0])
    assert vllm["method"] == "mtp" and "model" not in vllm
    assert "--speculative-algorithm EAGLE --speculative-num-steps" in out
    assert "--speculative-draft-model-path" not in out


def test_a_study_run_keeps_the_moe_section_and_files(tmp_path):
    """The default run rewrites summary.txt: the moe-study section and outputs stay."""
    import os

    import run
    section = f"{moe_report.SECTION_BEGIN}\nthe MoE answers\n{moe_report.SECTION_END}"
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "summary.txt").write_text(f"old study\n\n{section}\n")
    (tmp_path / "results" / "moe_study.csv").write_text("a\n1\n")
    fast = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fast_study.toml")
    code = run.main(["--batch-sizes", "1,8", "--gammas", "1,2", "--serving-modes",
                     "continuous_refill", "--quiet", "--no-plots", "--scenario", "reference",
                     "--config", fast, "--out", str(tmp_path)])
    assert code == 0
    summary = (tmp_path / "results" / "summary.txt").read_text()
    assert "old study" not in summary and summary.rstrip().endswith(section)
    assert (tmp_path / "results" / "moe_study.csv").read_text() == "a\n1\n"


def test_recommend_warns_that_sglang_needs_an_eagle_class_head_config():
    """SGLang builds a draft from its config.json architecture: an EAGLE head must name
    LlamaForCausalLMEagle(3) (yuhuili/EAGLE-* name LlamaForCausalLM; sgl-project/sglang PR
    #33966). Said under the SGLang line for EAGLE heads, not for a stand-alone draft model."""
    from tests.helpers import run_captured
    rc, out, err = run_captured(["recommend", "--gpu", "h100-sxm", "--tp", "2", "--target",
                                 "mixtral-8x7b", "--draft", "eagle", "--draft-model-path",
                                 "yuhuili/EAGLE-mixtral-instruct-8x7B", "--acceptance", "0.78",
                                 "--batch", "1,8"])
    assert rc == 0, err
    sglang = out.split("SGLang (", 1)[1]
    assert "must name LlamaForCausalLMEagle" in sglang
    rc, out, err = run_captured(["recommend", "--gpu", "h100-sxm", "--target", "llama-3.1-8b",
                                 "--draft", "llama-3.2-1b", "--acceptance", "0.7", "--batch", "1"])
    assert rc == 0, err
    assert "LlamaForCausalLMEagle" not in out
