"""An aggregated replica of attention_dp ranks (src/online/dp_steptime.py, src/attention_dp/):
attention_dp 1 is today's replica, the per-rank attention of identical ranks in closed form, the
scenario key's refusals, and the silicon rows with attention_dp_size > 1 mapped as
AIConfigurator counts them."""
import functools

import numpy as np
import pandas as pd
import pytest

from src.attention_dp.shape import PoolShape
from src.costmodel import HardwareCostModel, PassLoad
from src.costmodel.roofline import attention_terms_s
from src.hardware.scenario import scenario_from_dict
from src.online.dp_steptime import AttentionDpTimer
from src.online.steptime import StepTimer
from src.validation.silicon_rows import SiliconCase, load_rows, map_row, reason_kind
from tests.helpers import run_captured

SCENARIO = """
[scenario]
name = "t-aggdp"
description = "test"
gpu = "h200"
target = "deepseek-v3"
draft = "mtp"
tp = 8
ep = 8
engine_profiles = ["sglang"]
acceptance_source = "test"
{extra}
[study]
quality_modes = ["a"]

[study.alpha_modes.a]
kind = "point"
value = 0.7
"""


def _doc(extra: str = "") -> dict:
    import tomllib
    return tomllib.loads(SCENARIO.format(extra=extra))


@functools.lru_cache(maxsize=None)
def _cost(model="deepseek-v3", tp=8, ep=8, draft="ngram"):
    return HardwareCostModel.from_presets("h200", model, tp=tp, ep=ep, engine="sglang",
                                          draft=draft)


def test_attention_dp_1_is_todays_scenario_and_todays_step_prices():
    """The key at 1 builds the very Scenario the file without it builds (so serve runs the same
    code: StepTimer, the compiled loop), and an AttentionDpTimer of one rank prices every step,
    decode and prefill chunks, exactly as StepTimer does."""
    assert scenario_from_dict(_doc("attention_dp = 1")) == scenario_from_dict(_doc())
    cost = _cost()
    plain, dp1 = StepTimer(cost, False), AttentionDpTimer(cost, False, PoolShape(1, 8, 8, 1))
    n = np.array([1, 16, 64, 0])
    ctx = np.array([1000.0, 16 * 3000.0, 64 * 500.0, 0.0])
    g = np.array([0, 1, 3, 0])
    for a, b in zip(plain.decode_ms_totals(n, ctx, g, 64), dp1.decode_ms_totals(n, ctx, g, 64)):
        assert np.array_equal(a, b)
    chunk = (n, g, ctx, np.array([1, 2, 0, 3]), np.array([512, 4096, 0, 3000]),
             np.array([0.0, 100.0, 0.0, 0.0]), np.array([1, 1, 0, 2]))
    assert np.array_equal(plain.prefill_extra_ms(*chunk), dp1.prefill_extra_ms(*chunk))


@pytest.mark.parametrize("model, dp, ratio", [
    ("deepseek-v3", 8, 8.0),  # MLA: TP replicates the latent, each rank reads only its own
    ("llama-3.1-70b", 8, 1.0),  # GQA, 8 KV heads over 8 GPUs: the same KV bytes per GPU
])
def test_identical_ranks_read_the_kv_of_batch_over_dp(model, dp, ratio):
    """N = dp n requests spread evenly: each rank's attention is that of n requests at the
    rank's tp (tp = G / dp), so its KV read is N's under TP-G divided by how much TP-G
    replicates: dp for MLA (the latent is whole on every GPU), 1 for GQA whose KV heads G
    splits. The compute (query heads x pairs) is the same either way."""
    G, n, t, ctx = 8, 16, 1.0, 4000.0
    ep = G if model == "deepseek-v3" else 1
    timer = AttentionDpTimer(_cost(model, G, ep), False, PoolShape(1, G // dp, ep, dp))
    tc, rc = timer.cost._target_c, timer.worker._rank_c
    # the cached-KV read: the memory term's part that grows with the context
    mem_g, comp_g = (np.subtract(a, b) for a, b in zip(
        attention_terms_s(tc, dp * n, t, dp * n * ctx), attention_terms_s(tc, dp * n, t, 0.0)))
    mem_r, comp_r = (np.subtract(a, b) for a, b in zip(
        attention_terms_s(rc, n, t, n * ctx), attention_terms_s(rc, n, t, 0.0)))
    assert float(mem_g) == pytest.approx(ratio * float(mem_r), rel=1e-9)
    assert float(comp_g) == pytest.approx(float(comp_r), rel=1e-9)
    # the step prices the busiest rank: dp n + 1 requests run n + 1 on one rank, as
    # dp (n + 1) do on every rank (those add only MoE tokens), more than dp n do
    N = np.array([dp * n, dp * n + 1, dp * (n + 1)])
    step = timer.decode_ms_totals(N, N * ctx, np.zeros(3, int), int(N.max()))[0]
    assert step[0] < step[1] <= step[2]


def test_each_rank_prefills_its_own_prompt():
    """dp prompts, one per rank, in a step with no decode: on MLA each rank's attention runs one
    prompt, so DP's chunk terms replace TP-G's attention of all dp prompts by one prompt's; the
    step is cheaper than TP-G's, and one prompt alone costs what one of dp costs on its rank."""
    dp = 8
    cost = _cost()
    tp_path = StepTimer(cost, False)
    dp_path = AttentionDpTimer(cost, False, PoolShape(1, 1, 8, dp))
    z = np.zeros(1)
    args = (z, z.astype(int), z, np.array([dp]), np.array([dp * 4096]), z, np.array([dp]))
    assert dp_path.prefill_extra_ms(*args)[0] < tp_path.prefill_extra_ms(*args)[0]
    fix_all = dp_path.worker.dp_chunk_correction_ms(z, z, np.array([dp]), np.array([dp * 4096]),
                                                    z)
    assert fix_all[0] < 0  # attention of 1 prompt per rank replaces 8 prompts on every GPU
    load = PassLoad.from_totals(np.array([0]), np.array([0.0]))
    assert load.n_seqs[0] == 0


@pytest.mark.parametrize("extra, field, needle", [
    ("attention_dp = 3", "scenario.attention_dp", "does not divide tp 8"),
    ("attention_dp = 0", "scenario.attention_dp", "expected an integer >= 1"),
    ("attention_dp = 16\ntp = 16", "scenario.attention_dp", "spans nodes"),
    ("attention_dp = 2", "scenario.ep", "allowed: 1 or 8"),
])
def test_a_bad_attention_dp_is_one_line_and_exit_2(tmp_path, extra, field, needle):
    text = SCENARIO.format(extra=extra)
    if "tp = 16" in extra:
        text = text.replace("tp = 8\nep = 8\n", "ep = 16\n")
    if extra == "attention_dp = 2":
        text = text.replace("ep = 8\n", "ep = 4\n")
    path = tmp_path / "s.toml"
    path.write_text(text)
    out = tmp_path / "out"
    done = run_captured(["serve", "--scenario", str(path), "--concurrency", "2", "--workload",
                         "fixed:64:8", "--quiet", "--no-plots", "--out", str(out)])
    assert done.returncode == 2, done.stderr
    err = done.stderr  # "error: --scenario PATH: scenario.KEY: ..." (the file, then the key)
    assert err.count("\n") == 1 and err.startswith(f"error: --scenario {path}: {field}: "), err
    assert needle in err and not out.exists()


def _real(row_id: str) -> pd.Series:
    rows = load_rows()
    return rows[rows.id == row_id].iloc[0]


def test_a_real_attention_dp_row_maps_to_global_concurrency():
    """TensorRT-LLM DeepSeek-R1 NVFP4 on B200, tp_size 1, attention_dp_size 8, moe_ep 8,
    batch_size 8: 8 GPUs, 8 ranks, concurrency 64 (global_bs = batch_size x attention_dp_size,
    as the row's own silicon_concurrency=64 says)."""
    row = _real("2026_03_25_deepseek_r1_b200_sxm_trtllm_fp4_agg_1024x1024_c64_tp8_0_ep8_0_976")
    assert (row.tp_size, row.attention_dp_size, row.batch_size) == (1, 8, 8)
    assert "silicon_concurrency=64" in row.silicon_data_source
    case = map_row(row, {"trtllm", "sglang", "vllm-v1"})
    assert isinstance(case, SiliconCase)
    assert (case.tp, case.attention_dp, case.ep, case.concurrency) == (8, 8, 8, 64)


def test_attention_dp_rows_the_step_cannot_price_are_refused_with_their_own_reason():
    """moe_tp 8 x moe_ep 8 under attention_dp_size 64: experts split both ways over 64 GPUs."""
    row = _real("2026_04_06_deepseek_r1_h200_sxm_trtllm_fp8_agg_8192x1024_c64_tp8_ep8_941")
    out = map_row(row, {"trtllm", "sglang", "vllm-v1"})
    assert isinstance(out, str) and reason_kind(out) == "attention DP with MoE TP x EP"


def test_commands_that_price_the_tp_path_refuse_an_attention_dp_replica(tmp_path):
    """The study (and step-time, recommend) price the TP path: attention_dp 8 there is one line
    naming the key and exit 2, not a silent TP answer."""
    path = tmp_path / "s.toml"
    path.write_text(SCENARIO.format(extra="attention_dp = 8"))
    out = tmp_path / "out"
    done = run_captured(["--scenario", str(path), "--out", str(out)])
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert "scenario.attention_dp: 8: attention DP is priced by `python run.py serve` only" \
        in done.stderr and not out.exists()


def test_the_validation_table_shows_the_dp_rows_layout_and_global_concurrency():
    from src.validation.silicon import table_row
    row = _real("2026_03_25_deepseek_r1_b200_sxm_trtllm_fp4_agg_1024x1024_c64_tp8_0_ep8_0_976")
    case = map_row(row, {"trtllm", "sglang", "vllm-v1"})
    out = table_row(row, case, {"tpot_ms": 10.0, "ttft_ms": 100.0})
    assert (out["tp"], out["attention_dp"], out["ep"], out["concurrency"]) == (8, 8, 8, 64)
    assert out["runnable"] and out["tpot_error"] == pytest.approx(10.0 / row.silicon_tpot_ms - 1)
