"""Tests of the tensor-parallel all-reduce models (src/costmodel.py: AllReduceCost, allreduce_cost)
against published measurements and vLLM's kernel dispatch."""
from __future__ import annotations

import numpy as np
import pytest

from src.costmodel import (
    CUSTOM_ALLREDUCE_MAX_BYTES,
    CostModelInputError,
    HardwareCostModel,
    allreduce_cost,
    load_custom_allreduce,
    load_presets,
    pass_components_s,
)

MiB = 1024 * 1024
PRESETS = load_presets()


def _ar(gpu="h100-sxm", n=4, impl="custom"):
    return allreduce_cost(PRESETS.gpu(gpu), n, PRESETS.params, PRESETS.allreduce, impl)


# nccl-tests all_reduce_perf on one node of 8x A100-SXM4-80GB (NVSwitch), nccl-tests 2.19.4 /
# NCCL 2.19.3, float sum, out-of-place time in microseconds (a public run log; design.md,
# "Tensor-parallel all-reduce").
A100_NCCL_TESTS_US = {8: 34.84, 1048576: 67.31, 134217728: 1295.41}


def test_nccl_model_matches_published_nccl_tests_on_a100():
    """The latency floor and the large-message bus bandwidth of NCCL on an A100 NVSwitch node
    (35 us at 8 bytes, 181 GB/s at 128 MiB) within 25%; between them NCCL's protocols make the
    measured curve bend, which a latency + bandwidth line cannot follow (-45% at 1 MiB)."""
    ar = _ar("a100-80gb-sxm", 8, "nccl")
    for nbytes in (8, 134217728):
        predicted_us = float(ar.time_s(nbytes)) * 1e6
        assert predicted_us == pytest.approx(A100_NCCL_TESTS_US[nbytes], rel=0.25), nbytes
    busbw_gb_s = 2 * 7 / 8 * 134217728 / (float(ar.time_s(134217728)) - ar.nccl_latency_s) / 1e9
    assert 150 < busbw_gb_s < 300  # "hundreds of GB/s", against 181 GB/s measured at 128 MiB


def test_h100_nccl_fit_is_in_the_nvswitch_range():
    # vidur's H100 DGX rows: 327-389 GB/s bus bandwidth, 26-33 us latency per GPU count
    for n in (2, 4, 8):
        ar = _ar("h100-sxm", n, "nccl")
        assert 300e9 < ar.nccl_bus_bytes_per_s < 400e9 and 20e-6 < ar.nccl_latency_s < 40e-6


# vLLM PR #24111, H100, bf16 (32..256) x 8192 tensors, ms per all-reduce with the kernel forced
SIZES = np.array([0.5, 1.0, 1.5, 2.0, 3.0, 4.0]) * MiB
PR24111 = {  # (world size, kernel): ms
    (4, "one-shot"): [0.010, 0.015, 0.019, 0.022, 0.030, 0.038],
    (4, "two-shot"): [0.017, 0.018, 0.027, 0.027, 0.035, 0.043],
    (6, "one-shot"): [0.013, 0.021, 0.030, 0.038, 0.053, 0.070],
    (6, "two-shot"): [0.015, 0.017, 0.020, 0.026, 0.029, 0.037],
}


def _kernel_ms(ar, kernel, nbytes):
    n = ar.n_gpus
    if kernel == "one-shot":
        return (ar.one_shot_latency_s + (n - 1) * nbytes / ar.one_shot_bytes_per_s) * 1e3
    return (ar.two_shot_latency_s + 2 * (n - 1) / n * nbytes / ar.two_shot_bytes_per_s) * 1e3


@pytest.mark.parametrize("n, kernel, tolerance", [
    (4, "one-shot", 0.12), (4, "two-shot", 0.15),  # the fitted rows
    (6, "one-shot", 0.20), (6, "two-shot", 0.35),  # out of sample
])
def test_custom_allreduce_kernels_against_vllm_benchmark(n, kernel, tolerance):
    ar = _ar("h100-sxm", n)
    predicted = _kernel_ms(ar, kernel, SIZES)
    np.testing.assert_allclose(predicted, PR24111[(n, kernel)], rtol=tolerance)


def test_custom_allreduce_two_gpus_out_of_sample():
    # PR #24111, TP = 2, 0.5 MiB: ca_1stage 0.007 ms
    assert _kernel_ms(_ar("h100-sxm", 2), "one-shot", 0.5 * MiB) == pytest.approx(0.007, rel=0.2)


def test_custom_allreduce_follows_vllm_dispatch():
    four, eight, two = _ar(n=4), _ar(n=8), _ar(n=2)
    below, at = 512 * 1024 - 16, 512 * 1024
    assert list(four.algorithm([below, at, CUSTOM_ALLREDUCE_MAX_BYTES - 16,
                                CUSTOM_ALLREDUCE_MAX_BYTES])) == [
        "one-shot", "two-shot", "two-shot", "nccl"]
    assert list(eight.algorithm([256 * 1024 - 16, 256 * 1024])) == ["one-shot", "two-shot"]
    assert list(two.algorithm([4 * MiB, 8 * MiB])) == ["one-shot", "nccl"]
    # at and above 8 MiB the custom model is NCCL exactly
    big = np.array([8, 64]) * MiB
    np.testing.assert_array_equal(four.time_s(big), four.nccl_s(big))
    # small decode messages: several times faster than NCCL's latency floor
    assert four.time_s(16 * 1024) < 0.5 * four.nccl_s(16 * 1024)


def test_custom_allreduce_needs_a_fully_connected_node():
    assert not _ar("l40s", 4).custom and not _ar("a40", 4).custom  # PCIe beyond 2 GPUs
    assert _ar("l40s", 2).custom and _ar("a100-80gb-sxm", 8).custom
    assert not _ar("h100-sxm", 3).custom  # vLLM supports 2, 4, 6, 8
    with pytest.raises(CostModelInputError, match="^allreduce: unknown implementation 'mpi'"):
        _ar(impl="mpi")


def test_engine_choice_sets_the_communication_of_a_pass():
    kw = {"tp": 4, "draft": "ngram"}
    nccl = HardwareCostModel.from_presets("h100-sxm", "llama-3.1-70b", engine="vllm-2024", **kw)
    custom = HardwareCostModel.from_presets("h100-sxm", "llama-3.1-70b", engine="vllm-v1", **kw)
    assert nccl._target_c.comm_custom is None and custom._target_c.comm_custom is not None
    h, L = 8192, 80
    for tokens in (1, 64, 256, 640):  # 640 tokens x 16 KiB = 10 MiB: NCCL in both
        comm = float(pass_components_s(custom._target_c, tokens, 1, 0.0)["communication"])
        expected = 2 * L * float(custom._target_c.comm_custom.time_s(tokens * h * 2))
        assert comm == pytest.approx(expected)
        plain = float(pass_components_s(nccl._target_c, tokens, 1, 0.0)["communication"])
        assert comm < plain if tokens < 512 else comm == pytest.approx(plain)
    # one GPU: no communication either way
    single = HardwareCostModel.from_presets("h100-sxm", "llama-3.1-8b", engine="vllm-v1",
                                            draft="ngram")
    assert single._target_c.comm_custom is None and single._target_c.comm_fixed_s == 0.0


def test_custom_allreduce_preset_file(tmp_path):
    c = load_custom_allreduce()
    assert c.one_shot_latency_us < c.two_shot_latency_us
    p = tmp_path / "a.toml"
    p.write_text("[custom]\none_shot_latency_us = 1.0\n")
    with pytest.raises(CostModelInputError, match=r"^allreduce\.custom: missing field\(s\)"):
        load_custom_allreduce(p)
    p.write_text("x = 1\n")
    with pytest.raises(CostModelInputError, match=r"needs a \[custom\] table"):
        load_custom_allreduce(p)
