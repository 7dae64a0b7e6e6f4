"""TensorRT-LLM's NVFP4 MoE on Blackwell (src/kernels/measured.py LOW_LATENCY_LANE): the table holds
two lanes at one key, TRTLLM-gen's low-latency kernel (`moe_torch_flow_min_latency`) and CUTLASS
(`moe_torch_flow_cutlass`), with the same number of rows. A layer of <= 128 tokens is priced from
the low-latency lane and every other from CUTLASS, as aiconfigurator-core 0.12.0 prices it: the
per-layer price equals AIConfigurator's own MoE estimate at every token count 1-256, both
lifted to their running maximum over tokens (pass_moe.monotone_in_tokens)."""
import numpy as np
import pytest

from src.costmodel import HardwareCostModel
from src.kernels.costmodel import AUTO, with_kernels
from src.kernels.measured import LOW_LATENCY_LANE, LOW_LATENCY_MAX_TOKENS
from src.kernels.pass_moe import monotone_in_tokens
from src.kernels.sources import data_root
from src.kernels.tables import raw_moe_rows

pytestmark = pytest.mark.skipif(data_root() is None, reason="aiconfigurator-core not installed")

MODEL = "nvidia/DeepSeek-V3.1-NVFP4"


def _moe(tp=4, ep=1):
    cost = HardwareCostModel.from_presets("b200", MODEL, engine="trtllm", tp=tp, ep=ep,
                                          draft="ngram")
    moe = with_kernels(cost, AUTO).kernels.moe
    assert moe is not None and moe.applies and moe.dtype == "nvfp4"
    return moe


def _per_layer_ms(moe, T):
    T = np.asarray(T, float)
    _, measured, ok = moe.parts_ms(T, np.ones_like(T))
    assert ok.all()
    return measured / moe.moe_layers


def _rows(moe, lane):
    h, inter, k, E, mtp, mep = moe.key
    r = raw_moe_rows(moe.kernels.src, moe.distribution)
    sel = ((r.hidden == h) & (r.inter == inter) & (r.topk == k) & (r.experts == E)
           & (r.moe_tp == mtp) & (r.moe_ep == mep) & (r.dtype == "nvfp4")
           & (r.kernel_source == lane))
    return dict(zip(r.tokens[sel].astype(float), r.latency_ms[sel]))


@pytest.mark.parametrize("tp,ep", [(4, 1), (4, 4), (8, 1)])
def test_up_to_128_tokens_the_low_latency_rows_above_them_cutlass(tp, ep):
    moe = _moe(tp, ep)
    assert moe.kernel_source == f"{LOW_LATENCY_LANE}<=128+moe_torch_flow_cutlass"
    low, cutlass = _rows(moe, LOW_LATENCY_LANE), _rows(moe, "moe_torch_flow_cutlass")
    counts = sorted(low)
    got = _per_layer_ms(moe, counts)
    want = [low[T] if T <= LOW_LATENCY_MAX_TOKENS else cutlass[T] for T in counts]
    # lifted to the running maximum over tokens (pass_moe.monotone_in_tokens)
    np.testing.assert_allclose(got, monotone_in_tokens(np.array(want)), rtol=1e-12)
    # the low-latency kernel is the faster one at every count it prices (3-4x at 8-128 tokens)
    assert all(low[T] < cutlass[T] for T in counts if T <= LOW_LATENCY_MAX_TOKENS)


def test_the_price_is_aiconfigurator_s_own_moe_estimate():
    from aiconfigurator_core.sdk import common, engine
    from aiconfigurator_core.sdk.operations.moe import MoE
    from aiconfigurator_core.sdk.perf_database import get_database

    moe = _moe(4, 1)
    h, inter, k, E, mtp, mep = moe.key
    db = get_database("b200_sxm", "trtllm", moe.kernels.src.version)
    op = MoE(name="moe", scale_factor=1.0, hidden_size=h, inter_size=inter, topk=k,
             num_experts=E, moe_tp_size=mtp, moe_ep_size=mep,
             quant_mode=common.MoEQuantMode.nvfp4, workload_distribution=moe.distribution,
             attention_dp_size=1)
    T = [1, 3, 8, 100, 128, 129, 150, 160, 200, 256]
    aic = [float(engine._evaluate_single_op(db, op, is_context=False, batch_size=t, s=1, x=t))
           for t in T]
    # AIConfigurator's estimate, lifted to its running maximum over these increasing counts as
    # the project lifts the rows (more tokens never cost less)
    np.testing.assert_allclose(_per_layer_ms(moe, T), monotone_in_tokens(np.array(aic)),
                               rtol=1e-6)
