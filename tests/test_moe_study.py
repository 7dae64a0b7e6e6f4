"""The MoE study: dense twins, experts read, the verification premium, the command, validation."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from src.costmodel import load_presets
from src.hardware import moe_validation
from src.hardware.moe_study import (
    dense_twin,
    experts_touched_fraction,
    moe_scenario_paths,
    run_moe_scenario,
)
from src.hardware.scenario import load_scenario
from tests.helpers import run_captured

QWEN3 = "configs/scenarios/moe-qwen3-30b-a3b-eagle3-h100.toml"


@pytest.mark.parametrize("model", ["qwen3-30b-a3b", "deepseek-v3", "mixtral-8x7b",
                                   "gpt-oss-120b", "qwen3-235b-a22b"])
def test_dense_twin_has_the_same_active_parameters_and_reads_k_experts(model):
    spec = load_presets().models[model]
    twin = dense_twin(spec)
    assert twin.n_routed_experts == twin.experts_per_token == spec.experts_per_token
    # all but the routers, which shrink from E x h to k x h per MoE layer
    moe_layers = spec.n_layers - spec.first_k_dense_replace
    router = moe_layers * (spec.n_routed_experts - spec.experts_per_token) * spec.hidden_size
    assert twin.active_params == spec.active_params - router
    assert (twin.hidden_size, twin.n_layers, twin.vocab_size, twin.mtp_layers) == (
        spec.hidden_size, spec.n_layers, spec.vocab_size, spec.mtp_layers)
    frac = experts_touched_fraction(twin, np.array([1, 64]), 4)
    assert frac == pytest.approx([1.0, 1.0])  # every pass reads its k experts, no growth


def test_committed_moe_scenarios_load_and_cover_the_issue():
    names = {load_scenario(p).name for p in moe_scenario_paths()}
    assert names == {"moe-deepseek-v3-mtp-8xh200", "moe-qwen3-30b-a3b-eagle3-h100",
                     "moe-qwen3-235b-a22b-eagle3-8xh100", "moe-gpt-oss-120b-eagle3-h200",
                     "moe-gpt-oss-120b-eagle3-b200", "moe-mixtral-8x7b-eagle-2xh100"}


def test_one_token_reads_exactly_k_experts():
    for model in ("qwen3-30b-a3b", "mixtral-8x7b", "deepseek-v3"):
        spec = load_presets().models[model]
        frac = experts_touched_fraction(spec, np.array([1]), 1)
        assert frac[0] == pytest.approx(spec.experts_per_token / spec.n_routed_experts)


@pytest.fixture(scope="module")
def qwen3_study():
    return run_moe_scenario(load_scenario(QWEN3))


def test_verification_premium_moe_against_dense_twin(qwen3_study):
    """At batch 1 a 4-token verification of Qwen3-30B-A3B reads ~3x the experts of a decode
    step and costs clearly more than one; its dense twin's costs about one. Once a decode step
    reads nearly every expert (batch 64) the extra tokens ride along: the MoE premium falls below
    the dense twin's, which is turning compute-bound (MoESD's medium-batch argument)."""
    r = qwen3_study.rows
    g3 = r[(r.gamma == 3) & (r.quality_mode == r.quality_mode.iloc[0])].set_index(
        ["target", "batch_size"])
    assert g3.loc[("moe", 1), "premium"] > 1.25
    assert g3.loc[("dense twin", 1), "premium"] < 1.05
    assert g3.loc[("moe", 1), "experts_verify_fraction"] > 3 * g3.loc[
        ("moe", 1), "experts_decode_fraction"]
    assert g3.loc[("moe", 64), "experts_decode_fraction"] > 0.95
    assert g3.loc[("moe", 64), "premium"] < g3.loc[("moe", 1), "premium"] - 0.1


def test_best_gamma_rows_are_the_maxima(qwen3_study):
    r, best = qwen3_study.rows, qwen3_study.best
    for row in best.itertuples():
        sub = r[(r.target == row.target) & (r.quality_mode == row.quality_mode)
                & (r.batch_size == row.batch_size)]
        assert row.speedup == sub.speedup.max()


def test_moe_study_command_writes_and_reruns_byte_identical(tmp_path):
    out = tmp_path / "o"
    args = ["moe-study", "--scenario", QWEN3, "--no-plots", "--out", str(out)]
    rc, _, err = run_captured(args)
    assert rc == 0, err
    summary = (out / "results" / "summary.txt").read_text()
    assert "=== MIXTURE-OF-EXPERTS TARGETS" in summary
    assert "moe-qwen3-30b-a3b-eagle3-h100" in summary
    assert "--speculative-algorithm EAGLE3" in summary and '"method": "eagle3"' in summary
    first = {p.name: p.read_bytes() for p in (out / "results").iterdir()}
    rc, _, err = run_captured(args)
    assert rc == 0 and first == {p.name: p.read_bytes() for p in (out / "results").iterdir()}
    rows = pd.read_csv(out / "results" / "moe_study.csv")
    assert set(rows.target) == {"moe", "dense twin"}


def test_moe_study_keeps_the_blog_block_last_and_is_quiet_when_asked(tmp_path):
    """summary.txt is the same bytes whichever command ran last: every writer leaves the vLLM
    blog block at the end (src/online/blog_check.py block_last); the committed summary once
    moved with the order the commands were run in."""
    from src.online.blog_check import BLOCK_BEGIN, BLOCK_END
    out = tmp_path / "o"
    (out / "results").mkdir(parents=True)
    blog = f"{BLOCK_BEGIN}\nblog lines\n{BLOCK_END}\n"
    (out / "results" / "summary.txt").write_text("study part\n\n" + blog)
    rc, _, err = run_captured(["moe-study", "--scenario", QWEN3, "--no-plots", "--quiet",
                               "--out", str(out)])
    assert rc == 0 and err == "", err
    summary = (out / "results" / "summary.txt").read_text()
    assert summary.index("=== MIXTURE-OF-EXPERTS TARGETS") < summary.index(BLOCK_BEGIN)
    assert summary.rstrip().endswith(BLOCK_END)


def test_moe_study_bad_scenario_is_one_line(tmp_path):
    rc, _, err = run_captured(["moe-study", "--scenario", str(tmp_path / "nope.toml"),
                               "--out", str(tmp_path)])
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "nope.toml" in err
    assert not (tmp_path / "results").exists()


def test_published_validation_rows():
    """At least two sources with several batch sizes each; speedups are the sources' own
    throughput ratios (SpecForge #339, batch 1: 159.78 / 222.47)."""
    by_source = {}
    for p in moe_validation.PUBLISHED:
        by_source.setdefault(p.source, set()).add(p.batch)
    assert sum(len(b) >= 2 for b in by_source.values()) >= 2
    first = moe_validation.PUBLISHED[0]
    assert first.measured_speedup == pytest.approx(159.78 / 222.47)
    t = moe_validation.validation_table()
    assert np.isfinite(t.predicted_speedup).all() and (t.predicted_speedup > 0).all()
    assert "| SpecForge issue #339 |" in moe_validation.markdown(t)


def test_committed_moe_outputs_are_up_to_date(qwen3_study):
    """results/moe_validation.csv and one scenario's rows of results/moe_study.csv are what the
    code gives now (else: python run.py moe-study, then python scripts/update_docs.py)."""
    import io
    import os

    from src.reporting import csv_bytes
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    fresh = csv_bytes(moe_validation.validation_table()).decode()
    with open(os.path.join(root, "results", "moe_validation.csv")) as f:
        assert f.read() == fresh, "results/moe_validation.csv is stale: run python run.py moe-study"
    committed = pd.read_csv(os.path.join(root, "results", "moe_study.csv"), dtype=str)
    mine = pd.read_csv(io.StringIO(csv_bytes(qwen3_study.rows).decode()), dtype=str)
    subset = committed[committed.scenario == qwen3_study.scenario.name].reset_index(drop=True)
    pd.testing.assert_frame_equal(subset, mine)


def test_mixtral_eagle1_head_gets_no_sglang_flags_and_a_vllm_caveat(tmp_path):
    """yuhuili/EAGLE-mixtral-instruct-8x7B's config.json names LlamaForCausalLM: SGLang would
    build a plain Llama from it (no LlamaForCausalLMEagle weight mapping), so no SGLang flags are
    printed, one line says why; vLLM 0.9.2 refused the head (32 KV heads against 8): said under
    the vLLM line (src/hardware/moe_cli.py ENGINE_NOTES)."""
    out = tmp_path / "o"
    rc, _, err = run_captured(["moe-study", "--scenario",
                               "configs/scenarios/moe-mixtral-8x7b-eagle-2xh100.toml",
                               "--no-plots", "--out", str(out)])
    assert rc == 0, err
    summary = (out / "results" / "summary.txt").read_text()
    block = summary.split("--- moe-mixtral-8x7b-eagle-2xh100")[1].split("\n\n")[0]
    assert "sglang.launch_server" not in block
    sglang = [line for line in block.splitlines() if line.startswith("SGLang")]
    assert len(sglang) == 1 and "no flags printed" in sglang[0]
    assert "LlamaForCausalLMEagle" in sglang[0]
    lines = block.splitlines()
    vllm = next(i for i, line in enumerate(lines) if line.startswith("vLLM: vllm serve"))
    assert '"method": "eagle"' in lines[vllm] and "vLLM 0.9.2 refused" in lines[vllm + 1]


def test_validation_reports_every_error_of_the_table():
    """The speedup, the greedy and the speculative throughput each get a median |error|, a
    median and a largest signed error; the speculative error is the other two composed
    (pred spec = pred greedy x pred speedup), and AngelSlim's batch 64 greedy row (1,237.84 tok/s
    measured) is the largest greedy error, said as a finding."""
    t = moe_validation.validation_table()
    assert np.allclose(1 + t.speculative_error, (1 + t.greedy_error) * (1 + t.speedup_error))
    row = next(p for p in moe_validation.PUBLISHED
               if p.source == "AngelSlim issue #163" and p.batch == 64)
    greedy = moe_validation.predict(row)["predicted_greedy_tokens_per_s"] / 1237.84 - 1
    stats = {s["what"]: s for s in moe_validation.error_stats(t)}
    assert set(stats) == {"speedup", "greedy tokens/s", "speculative tokens/s"}
    assert stats["greedy tokens/s"]["max"] == pytest.approx(greedy)
    assert stats["greedy tokens/s"]["max_at"] == "AngelSlim issue #163, batch 64"
    assert stats["speedup"]["median_abs"] == pytest.approx(np.median(np.abs(t.speedup_error)))
    lines = moe_validation.summary_lines(t)
    greedy_row = next(line for line in lines if line.strip().startswith("greedy tokens/s"))
    assert f"{100 * greedy:+.0f}%" in greedy_row
    assert any(line.strip().startswith("speculative tokens/s") for line in lines)
    assert any("finding, not tuned away" in line and f"{1 + greedy:.1f}x" in line
               for line in lines)


def test_moe_study_summary_has_the_throughput_errors(tmp_path):
    rc, _, err = run_captured(["moe-study", "--scenario",
                               "configs/scenarios/moe-mixtral-8x7b-eagle-2xh100.toml",
                               "--no-plots", "--out", str(tmp_path)])
    assert rc == 0, err
    summary = (tmp_path / "results" / "summary.txt").read_text()
    section = summary.split("Validation against published MoE")[1]
    for what in ("speedup", "greedy tokens/s", "speculative tokens/s"):
        assert any(line.strip().startswith(what) for line in section.splitlines()), what
    assert "spec. tok/s meas." in section


def test_moe_plot_draws_the_experts_read_apart_from_the_speedup(qwen3_study, monkeypatch):
    """The experts-read curves have a panel of their own, not a second y axis over the speedup
    (where the right axis' curves crossed the left axis' 1.0x line, issue 26): no two visible axes
    overlap, and the axes with the 1.0x line hold no experts curve."""
    from src.hardware import moe_plots
    monkeypatch.setattr(moe_plots, "png_bytes", lambda fig: fig)
    fig = moe_plots.plot_moe_speedup([qwen3_study, qwen3_study])
    try:
        fig.canvas.draw()
        shown = [ax for ax in fig.axes if ax.get_visible()]
        boxes = [ax.get_position() for ax in shown]
        for i, a in enumerate(boxes):
            for b in boxes[i + 1:]:
                assert not (a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1)
        for ax in shown:
            labels = [line.get_label() for line in ax.get_lines()]
            if "1.0x = greedy" in labels:
                assert not any("experts" in label for label in labels)
        assert sum(any("experts" in line.get_label() for line in ax.get_lines())
                   for ax in shown) == 2
    finally:
        import matplotlib.pyplot as plt
        plt.close(fig)
