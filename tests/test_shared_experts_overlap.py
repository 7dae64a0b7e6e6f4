"""TensorRT-LLM runs DeepSeek-V3's shared experts on a second stream beside the routed experts
(EngineProfile shared_experts_overlap, src/kernels/pass_gemms.py shared_hidden_ms): the
overlapped layers take max(routed, shared, roofline of both), the same in the cost model's table
and in step-time's price_pass, and an engine without the flag prices their sum."""
import numpy as np
import pytest

from src.costmodel import HardwareCostModel, engine_profile
from src.costmodel.presets import load_presets
from src.costmodel.roofline import pass_coefficients
from src.kernels.costmodel import AUTO, with_kernels
from src.kernels.pricing import price_pass
from src.kernels.sources import data_root

pytestmark = pytest.mark.skipif(data_root() is None, reason="aiconfigurator-core not installed")
MODEL = "deepseek-ai/DeepSeek-R1"


def _cost(engine):
    return with_kernels(HardwareCostModel.from_presets("b200", MODEL, engine=engine, tp=8,
                                                       draft="ngram"), AUTO)


def test_trtllm_overlaps_the_shared_experts_and_sglang_does_not():
    assert engine_profile("trtllm").shared_experts_overlap
    assert not engine_profile("sglang").shared_experts_overlap
    assert not engine_profile("vllm-v1").shared_experts_overlap
    g = _cost("trtllm").kernels
    assert g.shared_overlap and g.shared.sum() == 2  # gate/up and down of the shared expert


@pytest.mark.parametrize("S", [1, 4, 64, 256])
def test_the_hidden_time_is_the_smaller_of_shared_and_routed(S):
    g = _cost("trtllm").kernels
    hidden = float(g.shared_hidden_ms(np.array([float(S)]), np.array([1.0]))[0])
    roof, measured = g._priced_ms(np.array([float(S)]))
    shared = float(np.where(np.isfinite(measured), measured, roof)[g.shared].sum())
    _, routed, ok = g.moe.parts_ms(np.array([float(S)]), np.array([1.0]))
    assert ok[0]
    floor = (float(g._routed.roofline_ms(np.array([float(S)]), np.array([1.0]))[0])
             + float(roof[g.shared].sum()))
    together = max(float(routed[0]), shared, floor)
    assert hidden == pytest.approx(max(0.0, float(routed[0]) + shared - together), rel=1e-12)
    assert 0 <= hidden <= min(shared, float(routed[0]))
    if S <= 64:  # DeepGEMM's FP8 layer at 3x its roofline: the shared experts hide whole
        assert hidden == pytest.approx(shared, rel=1e-12)


def test_no_time_is_hidden_behind_a_layer_at_its_roofline_rate():
    """NVFP4's low-latency TRTLLM-gen layer runs at the roofline's rate: the two streams share
    the HBM, so nothing is hidden."""
    cost = with_kernels(HardwareCostModel.from_presets(
        "b200", "nvidia/DeepSeek-V3.1-NVFP4", engine="trtllm", tp=8, draft="ngram"), AUTO)
    g = cost.kernels
    assert g.shared_overlap and g.moe is not None and g.moe.dtype == "nvfp4"
    S = np.array([16.0])
    _, routed, ok = g.moe.parts_ms(S, np.array([1.0]))
    assert ok[0] and routed[0] <= g._routed.roofline_ms(S, np.array([1.0]))[0]
    assert float(g.shared_hidden_ms(S, np.array([1.0]))[0]) == 0.0


def test_the_cost_model_and_step_time_take_off_the_same_ms():
    on = _cost("trtllm")
    g = on.kernels
    S, t, ctx = 16, 1, 2000
    with_overlap = float(g.pass_delta_ms(np.array([S]), np.array([t]))[0])
    g.shared_overlap = False
    try:
        without = float(g.pass_delta_ms(np.array([S]), np.array([t]))[0])
    finally:
        g.shared_overlap = True
    hidden = float(g.shared_hidden_ms(np.array([S]), np.array([t]))[0])
    assert without - with_overlap == pytest.approx(hidden, rel=1e-9)
    pr = load_presets()
    prof = engine_profile("trtllm")
    c = pass_coefficients(on.gpu, on.target, 8, pr.params, pr.allreduce, engine=prof,
                          attention_fits=pr.attention)
    a = price_pass(g.kernels, c, on.gpu, pr.params, on.target, 8, S, t, ctx,
                   shared_overlap=True)
    b = price_pass(g.kernels, c, on.gpu, pr.params, on.target, 8, S, t, ctx)
    assert b.layers_delta_ms - a.layers_delta_ms == pytest.approx(hidden, rel=1e-9)
    assert any("second stream" in n for n in a.notes)
