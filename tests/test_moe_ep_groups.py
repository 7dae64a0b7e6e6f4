"""Expert parallelism with ep groups of moe_tp = tp / ep GPUs (src/costmodel/variants.py
check_ep, shapes.py layer_gemms): the experts split over ep groups, each expert's FFN TP-split
over its group, TensorRT-LLM's moe_tp_size x moe_ep_size = tp_size."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from src import stepcalc
from src.costmodel import HardwareCostModel, engine_profile, load_presets
from src.costmodel.shapes import elementwise_values_per_token, layer_gemms
from src.costmodel.variants import slowest_gpu_experts
from src.validation.silicon_rows import load_rows, map_row


@pytest.fixture(scope="module")
def presets():
    return load_presets()


def _model(presets, target, tp, ep):
    return HardwareCostModel(gpu=presets.gpu("h200"), target=presets.model(target), tp=tp,
                             engine=engine_profile("ideal"), params=presets.params,
                             allreduce=presets.allreduce, attention_fits=presets.attention, ep=ep)


def _pass_ms(cost, batch, positions, context=1024):
    active = np.ones((1, batch), bool)
    return float(cost.target_pass_time(active, positions, np.full((1, batch), context))[0])


@pytest.mark.parametrize("tp, ep, moe_tp", [(8, 1, 8), (8, 8, 1), (8, 2, 4), (16, 4, 4),
                                            (64, 8, 8)])
def test_each_expert_gemm_is_split_over_tp_over_ep_gpus(presets, tp, ep, moe_tp):
    """gate/up h -> 2 I / moe_tp, down I / moe_tp -> h; ep 1 is today's TP path (moe_tp = tp),
    ep = tp today's EP path (whole experts)."""
    m = presets.model("deepseek-v3")
    experts = [g for g in layer_gemms(m, tp, ep=ep) if g.role == "expert"]
    im, h = m.moe_intermediate_size, m.hidden_size
    assert [(g.k, g.n) for g in experts] == [(h, 2 * im / moe_tp), (im / moe_tp, h)]
    # elementwise: each GPU runs SwiGLU over k I / moe_tp values of the 1/ep of the tokens its
    # group gets: k I / tp per token at any split
    assert elementwise_values_per_token(m, tp, ep=ep) == pytest.approx(
        elementwise_values_per_token(m, tp, ep=1))


def test_every_expert_touched_reads_the_same_bytes_at_any_split(presets):
    """All 256 experts touched: a GPU reads E / tp expert-equivalents whatever ep (32 whole
    experts at ep 8, 64 halves at ep 4, 128 quarters at ep 2, 1/8 of all at ep 1)."""
    times = [_pass_ms(_model(presets, "deepseek-v3", 8, ep), 256, 4) for ep in (1, 2, 4, 8)]
    assert max(times) == pytest.approx(min(times), rel=0.1)


def test_few_experts_touched_wait_longer_on_coarser_groups(presets):
    """Batch 1 decode: 8 touched experts. TP reads 1/8 of each (D / 8); ep groups wait for the
    group holding the most, read 1/moe_tp each: E[max over ep groups] / moe_tp, which grows with
    ep (a group of the ep = 2 split is 4 groups of the ep = 8 split, so its max is at most 4x)."""
    D = 8.0
    waited = [D / 8] + [float(slowest_gpu_experts(256, ep, D)) / (8 // ep) for ep in (2, 4, 8)]
    assert waited == sorted(waited) and waited[0] < waited[-1]
    times = [_pass_ms(_model(presets, "deepseek-v3", 8, ep), 1, 1) for ep in (1, 2, 4, 8)]
    assert times == sorted(times) and times[0] < times[-1]


def test_ep_must_divide_tp(capsys):
    assert stepcalc.main(["--gpu", "h200", "--model", "deepseek-v3", "--tp", "8",
                          "--ep", "16"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1
    assert err.startswith("error: --ep: 16 does not divide the replica's tp=8 GPUs")
    assert "allowed: 1, 2, 4, 8" in err


def test_block_fp8_experts_check_the_moe_tp_share(presets, capsys):
    """Qwen3-235B-A22B-FP8's 1536-wide experts: tp 8 ep 2 splits each over 4 GPUs (384 = 3
    blocks, loads); tp 16 ep 2 over 8 (192, refused as at tp 8 ep 1)."""
    from src.costmodel.variants import check_block_shards
    m = presets.model("qwen3-235b-a22b-fp8")
    check_block_shards(m, 8, 2)
    assert stepcalc.main(["--gpu", "h200", "--model", "qwen3-235b-a22b-fp8", "--tp", "16",
                          "--ep", "2"]) == 2
    _, err = capsys.readouterr()
    assert "at tp=16, ep=2 (moe_tp 8)" in err and "is 192, not a multiple of 128" in err


@pytest.mark.parametrize("row_id, tp, ep", [
    ("dsr1_b200_trtllm_fp4_agg_1024x1024_c64_cfg178", 64, 8),
    ("2026_04_06_gpt_oss_120b_h200_sxm_trtllm_fp4_agg_8192x1024_c16_tp4_ep4_926", 16, 4),
])
def test_silicon_rows_with_moe_tp_and_ep_build_a_cost_model(presets, row_id, tp, ep):
    """Rows labelled moe_tp x moe_ep = tp (the validation refused them before: 'allowed: 1 or
    tp') map to tp, ep and price."""
    rows = load_rows()
    row = rows[rows["id"] == row_id].iloc[0]
    assert row["moe_tp_size"] * row["moe_ep_size"] == row["tp_size"] == tp
    case = map_row(row, {"trtllm"}, presets)
    assert (case.tp, case.ep) == (tp, ep)
    target = replace(presets.model(case.model), weight_format=case.weight_format,
                     expert_weight_format=case.expert_weight_format)
    cost = HardwareCostModel(gpu=presets.gpu(case.gpu), target=target, tp=case.tp,
                             engine=engine_profile("ideal"), params=presets.params,
                             allreduce=presets.allreduce, attention_fits=presets.attention,
                             ep=case.ep)
    assert _pass_ms(cost, 4, 1) > 0
