"""Tests of the timed step (src/measure/model.py) on the CPU with tiny shapes; skipped without
torch (CI does not install it)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from src.costmodel import load_presets  # noqa: E402
from src.measure.model import (  # noqa: E402
    KVCache,
    attention_only_step,
    fold_gqa,
    forward_step,
    prefill_step,
    random_weights,
    unfold_gqa,
)
from src.measure.plan import tiny_spec  # noqa: E402

CPU = torch.device("cpu")
SPEC = tiny_spec(load_presets().models["llama-3.1-8b"])  # 8 query heads over 2 KV heads


def cache_for(batch, seq, extra_values=64):
    n_bytes = 2 * (2 * SPEC.n_layers * batch * SPEC.n_kv_heads * seq * SPEC.head_dim + extra_values)
    return KVCache(SPEC, n_bytes, CPU, seed=3)


def test_folding_gqa_into_the_query_length_is_grouped_query_attention():
    """Attention of the folded queries equals attention with K/V repeated to every query head
    (Llama's repeat_kv: head h reads KV head h // G)."""
    gen = torch.Generator().manual_seed(0)
    b, p, s, d = 3, 4, 10, SPEC.head_dim
    q = torch.randn(b, p, SPEC.n_heads, d, generator=gen)
    k = torch.randn(b, SPEC.n_kv_heads, s, d, generator=gen)
    v = torch.randn(b, SPEC.n_kv_heads, s, d, generator=gen)
    group = SPEC.n_heads // SPEC.n_kv_heads
    ref = F.scaled_dot_product_attention(q.transpose(1, 2), k.repeat_interleave(group, dim=1),
                                         v.repeat_interleave(group, dim=1))
    ref = ref.transpose(1, 2).reshape(b * p, SPEC.q_width)
    folded = F.scaled_dot_product_attention(fold_gqa(q, SPEC), k, v)
    assert folded.shape == (b, SPEC.n_kv_heads, p * group, d)
    torch.testing.assert_close(unfold_gqa(folded, SPEC, b, p), ref)


def test_forward_step_writes_only_the_new_positions_of_the_cache():
    batch, positions, context = 2, 3, 5
    cache = cache_for(batch, context + positions)
    before = cache.buffer.clone()
    weights = random_weights(SPEC, CPU, seed=1)
    out = forward_step(weights, SPEC, cache, batch, positions, context, CPU, seed=2)()
    assert out.shape == (batch * positions,) and out.dtype == torch.int64
    assert int(out.min()) >= 0 and int(out.max()) < SPEC.vocab_size
    view = cache.view(batch, context + positions)
    old = before[:view.numel()].view_as(view)
    assert torch.equal(view[..., :context, :], old[..., :context, :])
    assert (view[..., context:, :] != old[..., context:, :]).float().mean() > 0.9
    assert torch.equal(cache.buffer[view.numel():], before[view.numel():])  # beyond: untouched


def test_prefill_fills_the_prompt_and_scores_one_position_per_prompt():
    batch, prompt = 3, 7
    cache = cache_for(batch, prompt, extra_values=0)
    before = cache.buffer.clone()
    out = prefill_step(random_weights(SPEC, CPU, seed=1), SPEC, cache, batch, prompt, CPU, 2)()
    assert out.shape == (batch,)
    assert (cache.buffer != before).float().mean() > 0.9


def test_attention_only_writes_the_cache_and_scores_every_position():
    batch, positions, context = 2, 2, 9
    cache = cache_for(batch, context + positions)
    before = cache.buffer.clone()
    w = random_weights(SPEC, CPU, seed=1)
    out = attention_only_step(w, SPEC, cache, batch, positions, context, CPU, seed=0)()
    assert out.shape == (batch * positions,)
    view = cache.view(batch, context + positions)
    old = before[:view.numel()].view_as(view)
    assert torch.equal(view[..., :context, :], old[..., :context, :])
    assert (view[..., context:, :] != old[..., context:, :]).float().mean() > 0.9


def test_tied_presets_share_the_embedding_as_lm_head():
    tied = tiny_spec(load_presets().models["llama-3.2-1b"])
    w = random_weights(tied, CPU, seed=0)
    assert w.lm_head is w.embed
    untied = random_weights(SPEC, CPU, seed=0)
    assert untied.lm_head is not untied.embed and untied.lm_head.shape == untied.embed.shape


def test_cache_view_larger_than_the_buffer_is_refused():
    cache = cache_for(1, 4, extra_values=0)
    with pytest.raises(ValueError, match="KV cache"):
        cache.view(2, 4)


def test_the_planning_kernel_count_is_the_counted_one():
    from src.measure import plan
    from src.measure.model import kernels_per_step

    counted = kernels_per_step(SPEC, "forward", CPU)
    assert counted == {"per_layer": plan.KERNELS_PER_LAYER, "fixed": 11}
    cfg = plan.Config(SPEC.model_id, "graph", "forward", "flash", 1, 1, 8)
    assert plan.kernels_per_step(SPEC, cfg) == SPEC.n_layers * 34 + 11
    assert kernels_per_step(SPEC, "attention_only", CPU) == {"per_layer": 3, "fixed": 11}
    assert kernels_per_step(SPEC, "prefill", CPU)["per_layer"] == plan.KERNELS_PER_LAYER
