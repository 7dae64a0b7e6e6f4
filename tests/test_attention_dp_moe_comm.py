"""The MoE communication of an attention-DP worker: which one each engine runs, the bytes of the
all-gather + reduce-scatter, the measured NCCL tables, and no change where the kind is the same
(src/attention_dp/moe_comm.py, src/kernels/nccl_table.py)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from src.attention_dp import moe_comm
from src.attention_dp.shape import PoolShape
from src.attention_dp.worker import DecodeWorker
from src.costmodel import HardwareCostModel
from src.costmodel.allreduce import allreduce_coefficients
from src.costmodel.presets import load_presets
from src.kernels import nccl_table
from src.kernels.sources import data_root

PRESETS = load_presets()
needs_tables = pytest.mark.skipif(data_root() is None, reason="aiconfigurator-core not installed")


def _worker(engine, gpu="h200", model="deepseek-v3", tp=1, dp=8, ep=8):
    cost = HardwareCostModel.from_presets(gpu, model, tp=tp * dp, ep=ep, engine=engine)
    return DecodeWorker(cost, PoolShape(1, tp, ep, dp))


@pytest.mark.parametrize("engine, gpu, ep, kind", [
    ("vllm-v1", "h200", 8, "allgather_reducescatter"),  # all2all_backend default
    ("sglang", "b200", 8, "allgather_reducescatter"),  # --moe-a2a-backend none
    ("sglang-spec-v2", "h200", 8, "allgather_reducescatter"),
    ("trtllm", "h200", 8, "alltoall"),  # CommunicationFactory: NVLinkOneSided first
    ("trtllm", "b200", 8, "alltoall"),
    ("trtllm", "h200", 1, "allgather_reducescatter"),  # MoE TP: AllGatherReduceScatter
    ("vllm-2024", "h200", 8, "alltoall"),  # profiles without the field keep the all-to-all
    ("ideal", "h200", 8, "alltoall"),
])
def test_the_engines_comm_per_system(engine, gpu, ep, kind):
    assert _worker(engine, gpu=gpu, ep=ep).moe_comm == kind


def test_tensorrt_llm_gathers_where_the_gpus_have_no_nvlink():
    """nvlink_alltoall: MnnvlMemory.supports_mnnvl needs every NVLink up; a PCIe GPU gathers."""
    trt = load_engine("trtllm")
    assert moe_comm.comm_kind(trt, PRESETS.gpu("l40s"), 8, 8) == "allgather_reducescatter"
    assert moe_comm.comm_kind(trt, PRESETS.gpu("h200"), 8, 8) == "alltoall"
    assert moe_comm.comm_kind(trt, PRESETS.gpu("h200"), 1, 8) == "allgather_reducescatter"


def load_engine(name):
    from src.costmodel.engines import load_engine_profiles
    return load_engine_profiles()[name]


def test_bad_comm_value_is_refused(tmp_path):
    from src.costmodel import CostModelInputError
    from src.costmodel.engines import load_engine_profiles
    f = tmp_path / "e.toml"
    required = ("step_cpu_fixed_ms", "step_cpu_per_seq_ms", "draft_pass_cpu_fixed_ms",
                "draft_pass_cpu_per_seq_ms", "ngram_pass_cpu_ms",
                "rejection_sampling_per_position_ms", "kv_bookkeeping_per_seq_ms")
    body = "".join(f"{k} = 0.0\n" for k in required)
    f.write_text('[engines.x]\ndescription = "x"\ndraft_catchup_positions_per_seq = 0\n'
                 'verification_attention_slowdown_factor = 1.0\n' + body
                 + 'attention_dp_moe_comm = "broadcast"\n')
    with pytest.raises(CostModelInputError, match="attention_dp_moe_comm"):
        load_engine_profiles(extra_paths=(str(f),))


def test_allgather_reducescatter_bytes_closed_form_on_the_roofline(monkeypatch):
    """A small shape, priced on the NCCL line (no table): 4 GPUs, 3 tokens each, hidden h.
    All-gather: the whole gathered buffer is 4 x 3 x h values at b_d bytes; reduce-scatter: the
    same 12 tokens' BF16 partial sums. t = latency + (G - 1) / G bytes / bus for each."""
    monkeypatch.setattr(moe_comm, "collective_ms", lambda *a, **k: None)
    cost = HardwareCostModel.from_presets("h200", "deepseek-v3", tp=8, ep=8, engine="sglang")
    h = cost.target.hidden_size
    lat, bus = allreduce_coefficients(cost.gpu, 4, cost.params, cost.allreduce)
    ag_bytes = 4 * 3 * h * 2.0  # SGLang gathers BF16
    rs_bytes = 4 * 3 * h * 2.0
    want = (2 * lat + 3 / 4 * (ag_bytes + rs_bytes) / bus) * 1e3
    got = moe_comm.allgather_reducescatter_ms(cost, 4, np.array([3.0]))
    assert float(got[0]) == pytest.approx(want, rel=1e-12)
    assert float(moe_comm.allgather_reducescatter_ms(cost, 4, np.array([0.0]))[0]) == 0.0


def test_tensorrt_llm_gathers_the_quantized_activations():
    """Post-quant all-gather: NVFP4 experts move 9/16 byte a value (4 bits + an FP8 scale per
    16), per-tensor FP8 one byte; FP8 block experts (quantized inside the fused op) and the
    other engines BF16."""
    trt, sgl = load_engine("trtllm"), load_engine("sglang")
    r1 = PRESETS.model("deepseek-v3")
    nvfp4 = dataclasses.replace(r1, expert_weight_format="nvfp4")
    fp8 = dataclasses.replace(r1, weight_format="fp8", expert_weight_format="fp8")
    assert moe_comm.dispatch_bytes_per_value(trt, nvfp4) == 0.5625
    assert moe_comm.dispatch_bytes_per_value(trt, fp8) == 1.0
    assert moe_comm.dispatch_bytes_per_value(sgl, nvfp4) == 2.0
    block = dataclasses.replace(r1, expert_weight_format="fp8-block")
    assert moe_comm.dispatch_bytes_per_value(trt, block) == 2.0


@needs_tables
def test_a_measured_nccl_row_is_returned_at_its_size():
    """aiconfigurator-core 0.12.0 systems/data/h200_sxm/comm/nccl/2.26.2/nccl_perf.parquet
    (the version systems/h200_sxm.yaml names): all_gather, half, 8 GPUs, 1048576 elements
    (2 MiB): 0.023340 ms; reduce_scatter at 2097152 elements: 0.030360 ms."""
    assert nccl_table.nccl_version("h200_sxm") == "2.26.2"
    assert nccl_table.nccl_version("b200_sxm") == "2.27.3"
    ag = nccl_table.collective_ms("h200_sxm", "all_gather", 8, np.array([2 * 1048576.0]))
    rs = nccl_table.collective_ms("h200_sxm", "reduce_scatter", 8, np.array([2 * 2097152.0]))
    assert float(ag[0]) == pytest.approx(0.023340, rel=1e-9)
    assert float(rs[0]) == pytest.approx(0.030360, rel=1e-9)
    assert nccl_table.collective_ms("h200_sxm", "all_gather", 3, np.array([1e6])) is None
    assert nccl_table.collective_ms("", "all_gather", 8, np.array([1e6])) is None


@needs_tables
def test_nccl_lookup_is_monotone_and_floored():
    sizes = np.geomspace(10.0, 2e9, 400)
    for system in ("h200_sxm", "b200_sxm"):
        for op in ("all_gather", "reduce_scatter"):
            t = nccl_table.collective_ms(system, op, 8, sizes)
            assert np.all(np.diff(t) >= 0)
            assert t[0] == pytest.approx(t[1])  # below the grid: the smallest size's latency


@needs_tables
def test_worker_uses_the_tables_and_scales_by_moe_layers():
    w = _worker("sglang")
    m = w.cost.target
    moe_layers = m.n_layers - m.first_k_dense_replace
    n = 32.0  # tokens on each GPU (tp 1)
    values = n * 8 * m.hidden_size
    per_layer = (nccl_table.collective_ms("h200_sxm", "all_gather", 8, values * 2.0)
                 + nccl_table.collective_ms("h200_sxm", "reduce_scatter", 8, values * 2.0))
    assert float(w.moe_comm_ms(np.array([n]))[0]) == pytest.approx(
        moe_layers * float(per_layer), rel=1e-12)


def test_same_kind_is_byte_identical():
    """Where the comm stays the all-to-all (TensorRT-LLM on NVLink, profiles without the
    field), the pass's communication is exactly the all-to-all's, and a step is bit for bit
    the step of the same engine with the field at its default."""
    for engine in ("trtllm", "vllm-2024"):
        w = _worker(engine)
        t = np.array([1.0, 7.0, 64.0, 300.0])
        assert np.array_equal(w.moe_comm_ms(t), w.all_to_all_ms(t))
    w = _worker("trtllm")
    plain = dataclasses.replace(w.cost.engine, attention_dp_moe_comm="alltoall",
                                attention_dp_dispatch_quantized=False)
    other = DecodeWorker(dataclasses.replace(w.cost, engine=plain), w.shape)
    for n, ctx, gamma in ((64, 2000.0, 0), (8, 500.0, 3)):
        assert other.step_ms(n, ctx, gamma) == w.step_ms(n, ctx, gamma)


def test_dense_model_has_no_moe_comm():
    cost = HardwareCostModel.from_presets("h200", "llama-3.1-8b", tp=8, ep=1, engine="sglang")
    w = DecodeWorker(cost, PoolShape(1, 1, 1, 8))
    assert np.array_equal(w.moe_comm_ms(np.array([5.0])), np.zeros(1))
