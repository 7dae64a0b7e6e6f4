"""The host step CPU of an attention-DP worker (src/attention_dp/worker.py, "Host CPU"): each DP
rank's scheduler serves its own requests, so a step's CPU is the busiest rank's n = ceil(N / dp)
requests', under the profile's own overlap rule with the DP step's GPU time; dp = 1 is the TP
path bit for bit."""
import functools
from dataclasses import replace

import numpy as np
import pytest

from src.attention_dp.shape import PoolShape
from src.attention_dp.worker import DecodeWorker
from src.costmodel import HardwareCostModel, PassLoad
from src.costmodel.engines import engine_profile
from src.online.dp_steptime import AttentionDpTimer

DP8 = PoolShape(1, 1, 8, 8)  # workers, tp, ep, dp: one DP-8 EP-8 worker of 8 GPUs


@functools.lru_cache(maxsize=None)
def _cost(overlap: bool = True, per_seq: float | None = None):
    """DeepSeek-V3 + MTP on 8 H200 at TP-G 8, EP 8, TensorRT-LLM's profile (its CPU overlapped
    with the GPU step) or the same profile with the CPU exposed; per_seq: another
    step_cpu_per_seq_ms."""
    e = engine_profile("trtllm")
    if not overlap:
        e = replace(e, cpu_overlap_decode=False, cpu_overlap_draft_kinds=())
    if per_seq is not None:
        e = replace(e, step_cpu_per_seq_ms=per_seq)
    return HardwareCostModel.from_presets("h200", "deepseek-v3", tp=8, ep=8, engine=e,
                                          draft="mtp", target_formats={"kv_cache_format": "fp8"})


def _load(N):
    N = np.asarray(N)
    return PassLoad.from_totals(N, N * 1500.0)


def test_dp_1_prices_the_tp_path_bit_for_bit():
    cost = _cost()
    load, gamma = _load([1, 64, 512, 0]), np.array([0, 1, 3, 2])
    ref = cost.step_ms(load, gamma, True, check_fits=False)
    got = DecodeWorker(cost, PoolShape(1, 8, 8, 1)).rows_ms(load, gamma, True)
    same_host = cost.step_ms(replace(load, host_seqs=load.n_seqs), gamma, True, check_fits=False)
    for a, b, c in zip(ref, got, same_host):
        assert np.array_equal(a, b) and np.array_equal(a, c)


@pytest.mark.parametrize("overlap", [True, False])
def test_a_dp_step_pays_the_busiest_ranks_cpu_under_the_profiles_overlap(overlap):
    """A greedy step of N requests on a DP-8 worker: GPU_dp = the TP-G pass's GPU time (physics
    + launch overhead) + the DP correction; CPU(n) = step_cpu_fixed_ms + n step_cpu_per_seq_ms;
    step = GPU_dp + max(0, CPU(n) - GPU_dp) overlapped, GPU_dp + CPU(n) exposed."""
    cost = _cost(overlap)
    e, w = cost.engine, DecodeWorker(cost, DP8)
    N = np.array([1, 8, 9, 512, 4093])
    load, gamma = _load(N), np.zeros(N.size, int)
    physics, _, gpu = cost._target_parts(load, gamma + 1, False)
    gpu_dp = physics + gpu + w.dp_correction_ms(N, load.sum_ctx, gamma)
    n = np.ceil(N / 8)
    assert list(n) == [1, 1, 2, 64, 512]
    cpu_n = e.step_cpu_fixed_ms + e.step_cpu_per_seq_ms * n
    want = gpu_dp + (np.maximum(cpu_n - gpu_dp, 0.0) if overlap else cpu_n)
    target, draft = w.rows_ms(load, gamma, False)
    np.testing.assert_allclose(target, want, rtol=1e-12)
    assert np.all(draft == 0.0)
    if overlap:  # 4,093 requests: the worker-wide CPU (176 ms) would exceed the step's GPU time;
        cpu_N = e.step_cpu_fixed_ms + e.step_cpu_per_seq_ms * N[-1]  # one rank's (23 ms) does not
        assert cpu_N > gpu_dp[-1] > cpu_n[-1] and target[-1] == gpu_dp[-1]


def test_the_draft_passes_cpu_is_the_busiest_ranks_too():
    """Exposed CPU at gamma 3: the MTP passes' CPU over n, the target's CPU term over n (with the
    verification's rejection sampling and KV bookkeeping per sequence)."""
    cost = _cost(False)
    e, w = cost.engine, DecodeWorker(cost, DP8)
    N, g = np.array([512]), np.array([3])
    load = _load(N)
    target, draft = w.rows_ms(load, g, True)
    ref_t, ref_d = cost.step_ms(load, g, True, check_fits=False)
    fix = w.dp_correction_ms(N, load.sum_ctx, g)
    per_seq = e.step_cpu_per_seq_ms + e.rejection_sampling_per_position_ms * 4 \
        + e.kv_bookkeeping_per_seq_ms
    np.testing.assert_allclose(target - fix - ref_t, per_seq * (64 - 512), rtol=1e-9)
    draft_cpu = cost._draft_cpu_ms(np.array([64]), g) - cost._draft_cpu_ms(N, g)
    np.testing.assert_allclose(draft - ref_d, draft_cpu, rtol=1e-9, atol=1e-12)


def test_the_timer_prices_its_steps_as_the_worker():
    cost = _cost()
    timer = AttentionDpTimer(cost, True, DP8)
    N, g = np.array([0, 7, 300, 4093]), np.array([0, 1, 2, 0])
    ctx = N * 900.0
    got = timer.decode_ms_totals(N, ctx, g, int(N.max()))
    ref = timer.worker.rows_ms(PassLoad.from_totals(N, ctx), g, True)
    for a, b in zip(got, ref):
        np.testing.assert_array_equal(a, b)


def test_a_prefill_chunks_cpu_is_the_busiest_ranks():
    """Two profiles differing only in step_cpu_per_seq_ms: the DP chunk correction differs by
    that difference x (p - P), p = ceil(P / dp) chunks on the busiest rank."""
    a, b = DecodeWorker(_cost(), DP8), DecodeWorker(_cost(per_seq=0.1), DP8)
    P = np.array([0, 1, 8, 13])
    args = (np.array([64]), np.array([1]), P, P * 2048.0, P * 100.0)
    diff = b.dp_chunk_correction_ms(*args) - a.dp_chunk_correction_ms(*args)
    delta = 0.1 - _cost().engine.step_cpu_per_seq_ms
    np.testing.assert_allclose(diff, delta * (np.ceil(P / 8) - P), rtol=1e-9, atol=1e-12)
