"""The compiled step prices (src/online/step_prices.py) against the cost model they compile:
StepTimer.decode_ms_totals / decode_ms (HardwareCostModel.step_ms) and prefill_extra_ms, on the
engines, drafts and draft KV budgets of tests/test_online_steptime.py, with roofline and fitted
attention kernels, to 1e-9 relative."""
import numpy as np
import pytest

from src.compiled_cache import python_callable
from src.costmodel import HardwareCostModel
from src.online import step_prices
from src.online.step_prices import compiled_pricing_supported, pack_prices
from src.online.steptime import StepTimer

decode_ms, prefill_extra_ms, step_fits = (python_callable(f) for f in (
    step_prices.decode_ms, step_prices.prefill_extra_ms, step_prices.step_fits))

CASES = [
    ("h100-sxm", "llama-3.1-8b", "llama-3.2-1b", "vllm-v1", None),
    ("h100-sxm", "llama-3.2-1b", "qwen2.5-0.5b", "vllm-v1", None),
    ("h100-sxm", "llama-3.1-8b", "llama-3.2-1b", "vllm-2024", None),
    ("h100-sxm", "llama-3.1-8b", "ngram", "sglang", None),
    ("h100-sxm", "llama-3.1-8b", "self", "vllm-v1", 512),
    ("h100-sxm", "llama-3.2-1b", "llama-3.2-1b", "ideal", 256),
    ("h100-sxm", "llama-3.1-8b", "llama-3.2-1b", "pytorch-eager", None),
    ("h100-sxm", "llama-3.1-70b", "llama-3.2-1b", "vllm-v1", None, 4),  # TP 4: all-reduces
    # attention kernels fitted on the H200 (src/online/kernel_attention.py)
    ("h200", "llama-3.2-1b", "eagle", "sglang-spec-v2", None),
    ("h200", "llama-3.1-8b", "llama-3.2-1b", "pytorch-eager", None),
    ("h200", "llama-3.1-8b", "llama-3.2-1b", "vllm-v1", None),
    # MoE targets (routed experts in the decode table), EAGLE-3 heads, sliding-window layers
    ("h100-sxm", "qwen3-30b-a3b-fp8", "qwen3-30b-a3b-eagle3", "vllm-v1", None),
    ("h200", "gpt-oss-20b", "gpt-oss-20b-eagle3", "sglang-spec-v2", None),
    # routed experts of the prefill chunks, TP over the experts and EP (the slowest GPU's share)
    ("h200", "gpt-oss-120b", "ngram", "vllm-v1", None, 4, 4),
    ("h200", "deepseek-v3", "ngram", "sglang", None, 8),
]


def _timer(gpu, target, draft, engine, budget, tp=1, ep=1, speculative=True):
    cost = HardwareCostModel.from_presets(gpu, target, draft=draft, engine=engine,
                                          draft_kv_budget_tokens=budget, tp=tp, ep=ep)
    return StepTimer(cost, speculative)


def _steps(seed, rows=300, width=64, max_gamma=8):
    rng = np.random.default_rng(seed)
    decoding = rng.random((rows, width)) < rng.random((rows, 1)) ** 3
    decoding[: rows // 3, 1:] = False  # one sequence: CPU-bound steps
    decoding[0] = False
    context = rng.integers(0, 6000, (rows, width)) // rng.integers(1, 100, (rows, 1))
    gamma = rng.integers(0, max_gamma + 1, rows)
    return decoding, context, gamma


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(str(x) for x in c))
@pytest.mark.parametrize("speculative", [True, False])
def test_compiled_step_prices_agree_with_the_cost_model(case, speculative):
    timer = _timer(*case, speculative=speculative)
    assert compiled_pricing_supported(timer)
    decoding, context, gamma = _steps(7)
    rows, width = decoding.shape
    pt = pack_prices([timer], width, 8, 4096)
    target, draft = timer.decode_ms(decoding, gamma, context)
    budget = timer.cost.draft_kv_budget_tokens
    rng = np.random.default_rng(1)
    P = rng.integers(0, 5, rows)
    N = np.where(P > 0, P * rng.integers(1, 400, rows), 0)
    Cp = np.where(P > 0, rng.integers(0, 3000, rows), 0)
    Lp = np.minimum(P, rng.integers(0, 3, rows))
    n = decoding.sum(axis=1)
    C = (context * decoding).sum(axis=1)
    extra = timer.prefill_extra_ms(n, gamma, C, P, N, Cp, Lp)
    for r in range(rows):
        b = budget if budget is not None else 0
        mid = float((np.minimum(context[r] + (gamma[r] - 1) * 0.5, b) * decoding[r]).sum())
        start = float((np.minimum(context[r], b) * decoding[r]).sum())
        t, d = decode_ms(pt, 0, int(n[r]), int(C[r]), int(gamma[r]), mid, start)
        np.testing.assert_allclose([t, d], [target[r], draft[r]], rtol=1e-9, atol=1e-12)
        x = prefill_extra_ms(pt, 0, int(n[r]), int(gamma[r]), int(C[r]), int(P[r]), int(N[r]),
                             int(Cp[r]), int(Lp[r]))
        np.testing.assert_allclose(x, extra[r], rtol=1e-9, atol=1e-12)
        assert step_fits(pt, 0, int(n[r]), int(C[r]), int(gamma[r]))


def test_the_memory_check_is_the_cost_models():
    timer = _timer(*CASES[0])
    pt = pack_prices([timer], 4, 8, 64)
    fits = timer.cost.largest_batch_that_fits(100_000)
    assert step_fits(pt, 0, 1, fits * 100_000 - 10, 0)
    assert not step_fits(pt, 0, 1, (fits + 1) * 100_000, 0)


def test_the_cases_cover_fitted_kernels_moe_and_sliding_windows():
    """(else the cases above would test the dense roofline path only)"""
    for case in CASES[-7:-4]:
        assert _timer(*case).cost._target_c.attn_kernels
    assert _timer(*CASES[-4]).cost._target_c.moe is not None
    assert _timer(*CASES[-3]).cost._target_c.attn_window_tokens > 0
    assert _timer(*CASES[-2]).cost._target_c.moe.ep == 4
    assert _timer(*CASES[-1]).cost._target_c.moe is not None


def test_the_engine_s_numba_cache_is_stamped_with_all_its_sources():
    """numba keys a cached function by its own file only; the compiled engine's functions call
    across four files, so their cache entries carry one stamp of all four
    (src/compiled_cache.py): a change to a callee's file recompiles its callers too."""
    from src import compiled_cache
    from src.online import counter_rng, engine_loop, kernel_attention, step_prices

    stamp = compiled_cache.sources_stamp()
    for f in (engine_loop.run_rows, step_prices.decode_ms, kernel_attention.kernel_pass_s,
              counter_rng.uniform_one):
        locator = f._cache._impl._locator
        assert isinstance(locator, compiled_cache.EngineSourcesLocator), f
        assert locator.get_source_stamp() == stamp


@pytest.mark.parametrize("speculative", [True, False])
def test_a_prefill_only_step_is_priced_as_the_cost_model_s_prefill(speculative):
    """A prefill-first scheduler's prefill-only step (no decoding sequence, gamma 0, whole prompts
    from an empty cache): the compiled price is StepTimer.prefill_ms, src/costmodel/prefill.py."""
    timer = _timer(*CASES[2], speculative=speculative)  # vllm-2024
    pt = pack_prices([timer], 64, 8, 8192)
    for batch, tokens in ((1, 1), (1, 900), (7, 1024), (8, 1000)):
        t, d = decode_ms(pt, 0, 0, 0, 0, 0.0, 0.0)
        x = prefill_extra_ms(pt, 0, 0, 0, 0, batch, batch * tokens, 0, batch)
        np.testing.assert_allclose(t + d + x, timer.prefill_ms(batch, tokens), rtol=1e-9)
        assert x > 0 and t + d == 0.0
