"""vLLM V1's CUDA-graph capture size (src/costmodel/cudagraph_sizes.py, EngineProfile.
cuda_graph_max_tokens): vLLM's rule as its source has it, the eager price of a pass above it (the
closed form of the launch term), and the compiled serve engine pricing it as the cost model."""
import dataclasses

import numpy as np
import pytest

from src.compiled_cache import python_callable
from src.costmodel import HardwareCostModel, engine_profile
from src.costmodel.cudagraph_sizes import (
    smallest_covering_size,
    vllm_capture_sizes,
    vllm_max_capture_size,
)
from src.costmodel.roofline import _pnorm
from src.online.step_prices import decode_ms as _decode_ms
from src.online.step_prices import pack_prices
from src.online.steptime import StepTimer

# the engine's callees have no Python wrappers (src/compiled_cache.py): call a twin
decode_ms = python_callable(_decode_ms)


def _vllm_rule(max_num_seqs, num_speculative_tokens, max_num_batched_tokens, max_size=None,
               sizes=None):
    """A copy of VllmConfig._set_cudagraph_sizes (vllm/config/vllm.py at vllm-project/vllm
    09f030eaf851400a83ad3d99f730868f76df0ca7), CUDA graphs on, no sequence parallelism: the final
    compilation_config.max_cudagraph_capture_size."""
    max_cudagraph_capture_size = max_size
    if max_cudagraph_capture_size is None:
        decode_query_len = 1
        if num_speculative_tokens:
            decode_query_len += num_speculative_tokens
        max_cudagraph_capture_size = min(max_num_seqs * decode_query_len * 2, 512)
    max_num_tokens = max_num_batched_tokens
    max_cudagraph_capture_size = min(max_num_tokens, max_cudagraph_capture_size)
    if sizes is not None:
        cudagraph_capture_sizes = sorted(i for i in set(sizes) if i <= max_num_tokens)
    else:
        cudagraph_capture_sizes = [i for i in [1, 2, 4] if i <= max_cudagraph_capture_size]
        if max_cudagraph_capture_size >= 8:
            cudagraph_capture_sizes += list(range(8, min(max_cudagraph_capture_size + 1, 256), 8))
        if max_cudagraph_capture_size >= 256:
            cudagraph_capture_sizes += list(range(256, max_cudagraph_capture_size + 1, 16))
    return cudagraph_capture_sizes[-1] if cudagraph_capture_sizes else 0


@pytest.mark.parametrize("seqs,k,tokens,user,expected", [
    (1024, 0, 8192, None, 512),  # vLLM V1's defaults on an H100/H200 (max_num_seqs 1024)
    (1024, 3, 8192, None, 512),
    (6, 6, 8192, None, 80),  # min(2 x 6 x 7, 512) = 84, on the grid 80
    (6, 6, 8192, 42, 40),  # vLLM issue #54933: an explicit 42 truncated to 40
    (32, 16, 8192, None, 512),  # PR #50488's lane: 544 tokens needed, 512 captured
    (128, 3, 8192, None, 512),
    (1, 0, 8192, None, 2),
    (1, 2, 8192, None, 4),  # 6 -> [1, 2, 4]
    (256, 0, 300, None, 288),  # max_num_batched_tokens caps it, then the grid
    (1024, 3, 8192, 1024, 1024),
])
def test_the_rule_is_vllms(seqs, k, tokens, user, expected):
    assert _vllm_rule(seqs, k, tokens, user) == expected
    assert vllm_max_capture_size(seqs, k, tokens, user) == expected


def test_an_explicit_size_list_gives_its_largest_size_within_the_token_budget():
    assert vllm_capture_sizes(64, 3, 8192, capture_sizes=[8, 4, 8, 1024]) == [4, 8, 1024]
    assert vllm_max_capture_size(64, 3, 512, capture_sizes=[8, 4, 1024]) == 8
    assert _vllm_rule(64, 3, 512, sizes=[8, 4, 1024]) == 8


def test_the_default_covers_every_step_or_is_512_tokens():
    """Why the vllm-v1 profile holds 512 (engines.toml): with max_num_batched_tokens >= 512, the
    default either covers batch x (1 + K) for every batch up to max_num_seqs, or is 512."""
    for seqs in range(1, 300):
        for k in range(0, 9):
            top = vllm_max_capture_size(seqs, k, 8192)
            assert top >= seqs * (1 + k) or top == 512, (seqs, k, top)
    assert engine_profile("vllm-v1").cuda_graph_max_tokens == 512


def test_the_smallest_covering_size_survives_vllms_truncation():
    for tokens in range(1, 2000):
        size = smallest_covering_size(tokens)
        assert size >= tokens
        assert vllm_max_capture_size(65536, 0, 10**6, size) == size
        assert size == tokens or vllm_max_capture_size(65536, 0, 10**6, size - 1) < tokens


def _quiet(engine="vllm-v1"):
    """The vllm-v1 profile with no CPU term and no CPU/GPU overlap: a pass's overhead is its
    launch term alone."""
    return dataclasses.replace(engine_profile(engine), step_cpu_fixed_ms=0.0,
                               step_cpu_per_seq_ms=0.0, kv_bookkeeping_per_seq_ms=0.0,
                               cpu_overlap_decode=False, cpu_overlap_draft_kinds=())


@pytest.mark.parametrize("t,below", [(4, 128), (1, 512), (6, 85)])
def test_a_pass_just_above_the_capture_size_pays_the_eager_launch_term(t, below):
    base = HardwareCostModel.from_presets("h200", "llama-3.1-8b", engine="vllm-v1")
    cost = HardwareCostModel(gpu=base.gpu, target=base.target, engine=_quiet())
    c = cost._target_c
    rows = {}
    for n in (below, below + 1):
        active = np.ones((1, n), bool)
        ctx = np.full((1, n), 1024)
        rows[n] = [float(x[0]) for x in cost.target_pass_parts(active, t, ctx)]
    assert below * t <= 512 < (below + 1) * t
    assert rows[below][1] == 0.0  # in the graphs: no launch cost
    g_s = rows[below + 1][0] * 1e-3
    kernels = c.n_kernels + c.n_kernels_verify_extra * (t > 1)
    launch_ms = (_pnorm(g_s + kernels * c.launch_gap_s, kernels * c.cpu_launch_s,
                        c.launch_overlap_p) - g_s) * 1e3
    assert c.cpu_launch_s == pytest.approx(26.477698e-6)  # pytorch-eager's fitted launch cost
    assert rows[below + 1][1] == pytest.approx(launch_ms, rel=1e-12)
    assert launch_ms > 0.1
    step = {n: sum(v) for n, v in rows.items()}
    assert step[below + 1] - step[below] == pytest.approx(
        rows[below + 1][0] - rows[below][0] + launch_ms, rel=1e-12)


def test_without_the_limit_nothing_changes():
    base = HardwareCostModel.from_presets("h200", "llama-3.1-8b", engine="vllm-v1")
    e = dataclasses.replace(_quiet(), cuda_graph_max_tokens=0)
    cost = HardwareCostModel(gpu=base.gpu, target=base.target, engine=e)
    active, ctx = np.ones((1, 200), bool), np.full((1, 200), 1024)
    assert float(cost.target_pass_parts(active, 4, ctx)[1][0]) == 0.0


def test_the_drafters_first_pass_over_batch_x_k_plus_1_tokens_runs_eagerly_above_it():
    """vLLM's drafter runs its first pass over the step's S (1 + K) tokens: at 129 x 4 tokens it
    leaves the graphs while its one-token passes (129 tokens) stay in them."""
    cost = HardwareCostModel.from_presets("h200", "llama-3.1-8b", draft="llama-3.2-1b",
                                          engine="vllm-v1")
    over = {}
    for n in (128, 129):
        active, ctx = np.ones((1, n), bool), np.full((1, n), 1024)
        over[n] = float(cost.draft_passes_parts(active, 3, ctx)[1][0])
    assert over[129] - over[128] > 0.1  # ms: one pass's launch term, not a per-sequence change


@pytest.mark.parametrize("draft", ["llama-3.2-1b", "eagle", "ngram"])
def test_the_compiled_engine_prices_the_capture_size_as_the_cost_model(draft):
    """step_prices (serve's compiled loop) against HardwareCostModel.step_ms across the 512-token
    boundary: batches up to 200 at gamma 0..8."""
    cost = HardwareCostModel.from_presets("h200", "llama-3.1-8b", draft=draft, engine="vllm-v1")
    timer = StepTimer(cost, True)
    rng = np.random.default_rng(3)
    rows, width = 200, 200
    n = np.arange(1, rows + 1)
    decoding = np.arange(width)[None, :] < n[:, None]
    context = rng.integers(100, 3000, (rows, width))
    gamma = rng.integers(0, 9, rows)
    gamma[100:140] = 3  # 4 positions: 512 tokens at batch 128
    pt = pack_prices([timer], width, 8, 4096)
    target, dr = timer.decode_ms(decoding, gamma, context)
    crossed = 0
    for r in range(rows):
        C = int((context[r] * decoding[r]).sum())
        t, d = decode_ms(pt, 0, int(n[r]), C, int(gamma[r]), 0.0, 0.0)
        np.testing.assert_allclose([t, d], [target[r], dr[r]], rtol=1e-9, atol=1e-12)
        crossed += int(n[r]) * (int(gamma[r]) + 1) > 512
    assert crossed > 20
