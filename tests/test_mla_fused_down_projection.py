"""MLA's q_a and kv_a down-projections priced as one fused GEMM (src/costmodel/shapes.py
attention_gemms): h -> q_lora + kv_lora + rope, replicated over TP, as vLLM (`fused_qkv_a_proj`),
SGLang (`fused_qkv_a_proj_with_mqa`) and TensorRT-LLM (`kv_a_proj_with_mqa` of that width) run
it; the measured price is the table's one kernel at n = 2112, AIConfigurator's own
`generation_downscale_gemm` for DeepSeek-R1 on B200 TensorRT-LLM."""
from dataclasses import replace

import numpy as np
import pytest

from src.costmodel import HardwareCostModel
from src.costmodel.presets import load_presets
from src.costmodel.shapes import attention_gemms, layer_gemms
from src.kernels.costmodel import AUTO, with_kernels
from src.kernels.grid import along_axis
from src.kernels.sources import data_root

PRESETS = load_presets()


@pytest.mark.parametrize("tp", [1, 8])
def test_deepseek_attention_gemms_are_one_fused_down_projection_then_q_b_kv_b_o(tp):
    m = PRESETS.model("deepseek-v3")
    h, H = m.hidden_size, m.n_heads
    got = [(g.k, g.n) for g in attention_gemms(m, tp, m.n_layers)]
    assert got == [(h, m.q_lora_rank + m.kv_lora_rank + m.qk_rope_head_dim),  # 7168 -> 2112
                   (m.q_lora_rank, H * (m.qk_nope_head_dim + m.qk_rope_head_dim) / tp),
                   (m.kv_lora_rank, H * (m.qk_nope_head_dim + m.v_head_dim) / tp),
                   (H * m.v_head_dim / tp, h)]
    assert got[0] == (7168, 2112)  # replicated: the same on every TP rank
    # the first GEMMs of the layer list, as decode_step.attention_gemms_ms reads them
    assert [(g.k, g.n) for g in layer_gemms(m, tp)[:4]] == got


def test_fusing_keeps_the_weights_and_flops():
    """The fused GEMM holds q_a's and kv_a's weights side by side: the same parameters."""
    m = PRESETS.model("deepseek-v3")
    fused = attention_gemms(m, 1, 1)[0]
    assert fused.k * fused.n == (m.hidden_size * m.q_lora_rank
                                 + m.hidden_size * (m.kv_lora_rank + m.qk_rope_head_dim))


def test_without_q_lora_the_query_and_kv_a_stay_two_gemms():
    m = replace(PRESETS.model("deepseek-v3"), q_lora_rank=0)
    got = [(g.k, g.n) for g in attention_gemms(m, 1, 1)]
    assert got[:2] == [(m.hidden_size, m.n_heads * (m.qk_nope_head_dim + m.qk_rope_head_dim)),
                       (m.hidden_size, m.kv_lora_rank + m.qk_rope_head_dim)]


@pytest.mark.skipif(data_root() is None, reason="aiconfigurator-core not installed")
def test_the_fused_gemm_is_priced_as_aiconfigurator_s_downscale_gemm():
    from aiconfigurator_core.sdk import common, engine
    from aiconfigurator_core.sdk.operations.gemm import GEMM
    from aiconfigurator_core.sdk.perf_database import get_database

    cost = with_kernels(HardwareCostModel.from_presets(
        "b200", "deepseek-ai/DeepSeek-R1", engine="trtllm", tp=8, draft="ngram"), AUTO)
    g = cost.kernels
    m = cost.target
    i = g.shapes.index((m.hidden_size, 2112))
    assert g.dtypes[i] == "fp8_block" and g.counts[i] == m.n_layers
    db = get_database("b200_sxm", "trtllm", g.kernels.src.version)
    op = GEMM("generation_downscale_gemm", 1.0, 2112, m.hidden_size,
              common.GEMMQuantMode.fp8_block)
    grid, _ = g.kernels.gemm_grid("fp8_block")
    lo, hi = 2048, 2560  # n = 2112 lies between these grid lines (k = 7168 is one)
    assert lo in grid.n and hi in grid.n and 2112 not in grid.n and m.hidden_size in grid.k
    for T in (4, 16, 64):
        one = float(along_axis(g.m_axes[i], g.columns[i], np.array([float(T)]))[0])
        w = (2112 - lo) / (hi - lo)  # the project's rule: linear in n between grid lines
        want = ((1 - w) * g.kernels.gemm_ms(T, lo, m.hidden_size, "fp8_block")
                + w * g.kernels.gemm_ms(T, hi, m.hidden_size, "fp8_block"))
        assert one == pytest.approx(want, rel=1e-9)
        _, _, _, ok = g.parts_ms(np.array([float(T)]))
        assert ok[i, 0]  # priced from the table, not the roofline
        # AIConfigurator interpolates off-grid n its own way: within 3% of its price
        aic = float(engine._evaluate_single_op(db, op, is_context=False, batch_size=T, s=1,
                                               x=T))
        assert one == pytest.approx(aic, rel=0.03)
        # one kernel, not two: below the two unfused GEMMs' measured sum
        two = (g.kernels.gemm_ms(T, m.q_lora_rank, m.hidden_size, "fp8_block")
               + g.kernels.gemm_ms(T, 576, m.hidden_size, "fp8_block"))
        assert one < 0.6 * two


def test_the_fused_down_projection_launches_one_kernel_not_two():
    """The pass's fixed kernel count follows its GEMM list: one kernel less per MLA layer with a
    q_lora rank (the fused GEMM) than without one."""
    from src.costmodel.variants import MLA_EXTRA_KERNELS_PER_LAYER, pass_shape
    gpu = PRESETS.gpu("h200")
    m = PRESETS.model("deepseek-v3")
    fused = pass_shape(gpu, m, 8)
    lite = pass_shape(gpu, replace(m, q_lora_rank=0), 8)
    assert lite.extra_kernels - fused.extra_kernels == m.n_layers
    moe_layers = m.n_layers - m.first_k_dense_replace
    assert lite.extra_kernels == m.n_layers * MLA_EXTRA_KERNELS_PER_LAYER + 4 * moe_layers
    # as many GEMM kinds either way (fused down + q_b; q + kv_a), the fused one 2112 wide
    assert len(fused.K) == len(lite.K) and 2112 in fused.N and 2112 not in lite.N
