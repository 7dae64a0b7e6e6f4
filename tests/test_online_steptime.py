"""Step times of the serving engine (src/online/steptime.py): the per-step entry points the engine
calls (from per-row totals, every gamma at once, the draft passes priced once) give exactly the
numbers of the cost model's own target_pass_time and draft_passes_time."""
import numpy as np
import pytest

from src.costmodel import HardwareCostModel
from src.costmodel.prefill import mixed_pass_extra_ms, mixed_pass_physics_ms
from src.online.steptime import StepTimer

# (gpu, target, draft, engine, draft KV budget): stand-alone draft, EAGLE, n-gram and
# self-speculation with a capped draft cache; engines with and without CPU/GPU overlap (a 1B
# target's steps are CPU-bound: there the target pass needs the draft's GPU time), batch
# expansion, eager launches; roofline (h100) and fitted (h200) attention
CASES = [
    ("h100-sxm", "llama-3.1-8b", "llama-3.2-1b", "vllm-v1", None),
    ("h100-sxm", "llama-3.2-1b", "qwen2.5-0.5b", "vllm-v1", None),
    ("h100-sxm", "llama-3.1-8b", "llama-3.2-1b", "vllm-2024", None),
    ("h200", "llama-3.2-1b", "eagle", "sglang-spec-v2", None),
    ("h200", "llama-3.1-8b", "llama-3.2-1b", "pytorch-eager", None),
    ("h100-sxm", "llama-3.1-8b", "ngram", "sglang", None),
    ("h100-sxm", "llama-3.1-8b", "self", "vllm-v1", 512),
    ("h100-sxm", "llama-3.2-1b", "llama-3.2-1b", "ideal", 256),
]


def _timer(gpu, target, draft, engine, budget, speculative=True):
    cost = HardwareCostModel.from_presets(gpu, target, draft=draft, engine=engine,
                                          draft_kv_budget_tokens=budget)
    return StepTimer(cost, speculative)


def _batch(seed, rows=12, width=32):
    rng = np.random.default_rng(seed)
    # from one sequence (CPU-bound steps, where an overlapping engine needs the draft's GPU
    # time in the target pass) to full rows; short and long contexts
    decoding = rng.random((rows, width)) < rng.random((rows, 1)) ** 3
    decoding[:, 0] = True
    decoding[0] = False  # a row with nothing to decode
    context = rng.integers(0, 6000, (rows, width)) // rng.integers(1, 100, (rows, 1))
    gamma = rng.integers(0, 9, rows)
    decoding[1:3, 2:] = False  # one or two short sequences verifying: CPU-bound steps
    context[1:3] = 10
    gamma[1:3] = (3, 8)
    return decoding, context, gamma


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(str(x) for x in c))
def test_decode_ms_is_the_cost_models_target_and_draft_pass_times(case):
    timer = _timer(*case)
    cost = timer.cost
    for seed in range(3):
        decoding, context, gamma = _batch(seed)
        target, draft = timer.decode_ms(decoding, gamma, context)
        np.testing.assert_array_equal(target,
                                      cost.target_pass_time(decoding, gamma + 1, context))
        np.testing.assert_array_equal(draft, cost.draft_passes_time(decoding, gamma, context))
        # from the per-row totals (the engine's call)
        totals = timer.decode_ms_totals(np.count_nonzero(decoding, axis=1),
                                        (context * decoding).sum(axis=1), gamma,
                                        decoding.shape[1], decoding, context)
        np.testing.assert_array_equal(totals[0], target)
        np.testing.assert_array_equal(totals[1], draft)
    plain = _timer(*case[:4], None, speculative=False)
    target, draft = plain.decode_ms(decoding, np.zeros_like(gamma), context)
    np.testing.assert_array_equal(target, plain.cost.target_pass_time(decoding, 1, context))
    assert not draft.any()


@pytest.mark.parametrize("case", CASES[:1] + CASES[-2:], ids=lambda c: "-".join(str(x) for x in c))
def test_every_gamma_at_once_equals_the_rows_repeated(case):
    timer = _timer(*case)
    decoding, context, _ = _batch(7, rows=5)
    gammas = np.arange(9)
    target, draft = timer.decode_ms_each_gamma(decoding, context, gammas)
    k = gammas.size
    ref = timer.decode_ms(np.repeat(decoding, k, axis=0), np.tile(gammas, 5),
                          np.repeat(context, k, axis=0))
    np.testing.assert_array_equal(target, ref[0])
    np.testing.assert_array_equal(draft, ref[1])


@pytest.mark.parametrize("gpu", ["h100-sxm", "h200"])
def test_chunk_extra_is_the_difference_of_the_two_mixed_passes(gpu):
    c = HardwareCostModel.from_presets(gpu, "llama-3.1-8b", draft="ngram",
                                       engine="vllm-v1")._target_c
    rng = np.random.default_rng(3)
    r = 40
    n_dec = rng.integers(0, 64, r)
    t = rng.integers(1, 9, r)
    dec_ctx = n_dec * rng.integers(0, 4000, r)
    chunks = rng.integers(0, 4, r) * (rng.random(r) < 0.7)
    tokens = chunks * rng.integers(1, 2048, r)
    extra = mixed_pass_extra_ms(c, n_dec, t, dec_ctx, chunks, tokens, chunks * 300, chunks // 2)
    ref = (mixed_pass_physics_ms(c, n_dec, t, dec_ctx, chunks, tokens, chunks * 300, chunks // 2)
           - mixed_pass_physics_ms(c, n_dec, t, dec_ctx))
    np.testing.assert_array_equal(extra, ref)
    assert np.all(extra[chunks == 0] == 0) and np.all(extra[chunks > 0] > 0)


def test_same_target_pass_only_for_the_same_target_and_engine():
    spec = _timer("h100-sxm", "llama-3.1-8b", "llama-3.2-1b", "vllm-v1", None)
    plain = _timer("h100-sxm", "llama-3.1-8b", "ngram", "vllm-v1", None, speculative=False)
    assert spec.same_target_pass(plain) and plain.same_target_pass(spec)
    for other in (_timer("h100-sxm", "llama-3.1-8b", "ngram", "sglang", None),
                  _timer("h100-sxm", "llama-3.2-1b", "ngram", "vllm-v1", None),
                  _timer("h200", "llama-3.1-8b", "ngram", "vllm-v1", None)):
        assert not spec.same_target_pass(other)
    # at gamma 0 the draft deployment's timer gives the plain one's target time, draft 0
    decoding, context, _ = _batch(11)
    zero = np.zeros(decoding.shape[0], np.int64)
    target, draft = spec.decode_ms(decoding, zero, context)
    np.testing.assert_array_equal(target, plain.decode_ms(decoding, zero, context)[0])
    assert not draft.any()
