"""Tests of the timed step (src/measure/model.py) on the CPU with tiny shapes; skipped without
torch (CI does not install it). torch is imported when the first test here runs, not when pytest
collects the file, so a test worker that runs none of these never pays its ~2 s import."""
from __future__ import annotations

import importlib.util

import pytest

from src.costmodel import load_presets
from src.measure.plan import tiny_spec

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch")
SPEC = tiny_spec(load_presets().models["llama-3.1-8b"])  # 8 query heads over 2 KV heads


@pytest.fixture(scope="module")
def torch():
    import torch

    return torch


@pytest.fixture(scope="module")
def m(torch):
    """src.measure.model (it imports torch)."""
    from src.measure import model

    return model


@pytest.fixture(scope="module")
def cpu(torch):
    return torch.device("cpu")


def cache_for(m, cpu, batch, seq, extra_values=64):
    n_bytes = 2 * (2 * SPEC.n_layers * batch * SPEC.n_kv_heads * seq * SPEC.head_dim + extra_values)
    return m.KVCache(SPEC, n_bytes, cpu, seed=3)


def test_folding_gqa_into_the_query_length_is_grouped_query_attention(torch, m):
    """Attention of the folded queries equals attention with K/V repeated to every query head
    (Llama's repeat_kv: head h reads KV head h // G)."""
    gen = torch.Generator().manual_seed(0)
    b, p, s, d = 3, 4, 10, SPEC.head_dim
    q = torch.randn(b, p, SPEC.n_heads, d, generator=gen)
    k = torch.randn(b, SPEC.n_kv_heads, s, d, generator=gen)
    v = torch.randn(b, SPEC.n_kv_heads, s, d, generator=gen)
    group = SPEC.n_heads // SPEC.n_kv_heads
    sdpa = torch.nn.functional.scaled_dot_product_attention
    ref = sdpa(q.transpose(1, 2), k.repeat_interleave(group, dim=1),
               v.repeat_interleave(group, dim=1))
    ref = ref.transpose(1, 2).reshape(b * p, SPEC.q_width)
    folded = sdpa(m.fold_gqa(q, SPEC), k, v)
    assert folded.shape == (b, SPEC.n_kv_heads, p * group, d)
    torch.testing.assert_close(m.unfold_gqa(folded, SPEC, b, p), ref)


def test_forward_step_writes_only_the_new_positions_of_the_cache(torch, m, cpu):
    batch, positions, context = 2, 3, 5
    cache = cache_for(m, cpu, batch, context + positions)
    before = cache.buffer.clone()
    weights = m.random_weights(SPEC, cpu, seed=1)
    out = m.forward_step(weights, SPEC, cache, batch, positions, context, cpu, seed=2)()
    assert out.shape == (batch * positions,) and out.dtype == torch.int64
    assert int(out.min()) >= 0 and int(out.max()) < SPEC.vocab_size
    view = cache.view(batch, context + positions)
    old = before[:view.numel()].view_as(view)
    assert torch.equal(view[..., :context, :], old[..., :context, :])
    assert (view[..., context:, :] != old[..., context:, :]).float().mean() > 0.9
    assert torch.equal(cache.buffer[view.numel():], before[view.numel():])  # beyond: untouched


def test_prefill_fills_the_prompt_and_scores_one_position_per_prompt(m, cpu):
    batch, prompt = 3, 7
    cache = cache_for(m, cpu, batch, prompt, extra_values=0)
    before = cache.buffer.clone()
    out = m.prefill_step(m.random_weights(SPEC, cpu, seed=1), SPEC, cache, batch, prompt, cpu, 2)()
    assert out.shape == (batch,)
    assert (cache.buffer != before).float().mean() > 0.9


def test_attention_only_writes_the_cache_and_scores_every_position(torch, m, cpu):
    batch, positions, context = 2, 2, 9
    cache = cache_for(m, cpu, batch, context + positions)
    before = cache.buffer.clone()
    w = m.random_weights(SPEC, cpu, seed=1)
    out = m.attention_only_step(w, SPEC, cache, batch, positions, context, cpu, seed=0)()
    assert out.shape == (batch * positions,)
    view = cache.view(batch, context + positions)
    old = before[:view.numel()].view_as(view)
    assert torch.equal(view[..., :context, :], old[..., :context, :])
    assert (view[..., context:, :] != old[..., context:, :]).float().mean() > 0.9


def test_tied_presets_share_the_embedding_as_lm_head(m, cpu):
    tied = tiny_spec(load_presets().models["llama-3.2-1b"])
    w = m.random_weights(tied, cpu, seed=0)
    assert w.lm_head is w.embed
    untied = m.random_weights(SPEC, cpu, seed=0)
    assert untied.lm_head is not untied.embed and untied.lm_head.shape == untied.embed.shape


def test_cache_view_larger_than_the_buffer_is_refused(m, cpu):
    cache = cache_for(m, cpu, 1, 4, extra_values=0)
    with pytest.raises(ValueError, match="KV cache"):
        cache.view(2, 4)


def test_the_planning_kernel_count_is_the_counted_one(m, cpu):
    from src.measure import plan

    counted = m.kernels_per_step(SPEC, "forward", cpu)
    assert counted == {"per_layer": plan.KERNELS_PER_LAYER, "fixed": 11}
    cfg = plan.Config(SPEC.model_id, "graph", "forward", "flash", 1, 1, 8)
    assert plan.kernels_per_step(SPEC, cfg) == SPEC.n_layers * 34 + 11
    assert m.kernels_per_step(SPEC, "attention_only", cpu) == {"per_layer": 3, "fixed": 11}
    assert m.kernels_per_step(SPEC, "prefill", cpu)["per_layer"] == plan.KERNELS_PER_LAYER
