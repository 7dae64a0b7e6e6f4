"""Tests of the measuring plan (src/measure/plan.py): configurations, memory, repetitions."""
from __future__ import annotations

import pytest

from src.costmodel import load_presets
from src.measure.plan import (
    GIB,
    Config,
    RepPolicy,
    activation_bytes,
    build_configs,
    config_bytes,
    estimate_config_s,
    estimate_step_ms,
    kv_cache_bytes,
    split_by_memory,
    tiny_spec,
)

PRESETS = load_presets()
L8, L1 = PRESETS.models["llama-3.1-8b"], PRESETS.models["llama-3.2-1b"]
H200 = PRESETS.gpus["h200"]


def test_kv_cache_bytes_counts_k_and_v_of_every_layer_in_bf16():
    # Llama-3.1-8B: 2 (K, V) x 32 layers x 8 KV heads x 128 dims x 2 bytes = 128 KiB per token
    c = Config("llama-3.1-8b", "graph", "forward", "flash", 256, 9, 2048)
    assert kv_cache_bytes(L8, c) == 256 * (2048 + 9) * 2 * 32 * 8 * 128 * 2
    # Llama-3.2-1B: 2 x 16 x 8 x 64 x 2 = 32 KiB per token
    c1 = Config("llama-3.2-1b", "graph", "forward", "flash", 4, 1, 1023)
    assert kv_cache_bytes(L1, c1) == 4 * 1024 * 32 * 1024


def test_prefill_caches_only_the_prompt_and_keeps_logits_of_the_last_position():
    pre = Config("llama-3.1-8b", "graph", "prefill", "flash", 2, 1024, 0)
    fwd = Config("llama-3.1-8b", "graph", "forward", "flash", 2, 1024, 0)
    assert kv_cache_bytes(L8, pre) == 2 * 1024 * L8.kv_bytes_per_token
    # forward keeps 2048 rows of logits over 128256 tokens, prefill 2 rows, but also repeated K/V
    logits_saved = 1.5 * (2048 - 2) * L8.vocab_size * 2
    repeated_kv = 1.5 * 2 * 2048 * L8.q_width * 2
    assert activation_bytes(L8, fwd) - activation_bytes(L8, pre) == pytest.approx(
        logits_saved - repeated_kv, abs=2)


def test_memory_split_on_an_h200_follows_the_kv_arithmetic():
    grid = build_configs([("llama-3.1-8b", (1, 9))], ("forward",), ("graph",), ("flash",),
                         (64, 128, 256), (2048, 8192), (), ())
    keep, skipped = split_by_memory({"llama-3.1-8b": L8}, grid, H200.memory_bytes)
    kept = {(c.batch, c.context) for c in keep}
    # 64 x 8192 tokens x 128 KiB = 64 GiB fits beside 16 GB of weights; 128 x 8192 = 128 GiB not
    assert (64, 8192) in kept and (256, 2048) in kept
    assert {(c.batch, c.context) for c, _ in skipped} == {(128, 8192), (256, 8192)}
    assert all("GiB" in why for _, why in skipped)
    free = H200.memory_bytes - L8.weight_bytes
    assert all(config_bytes(L8, c) < free for c in keep)


@pytest.mark.parametrize("step_ms, reps", [(7.0, 15), (0.5, 100), (40.0, 5), (100.0, 5)])
def test_reps_aim_at_the_target_within_bounds(step_ms, reps):
    assert RepPolicy(target_ms=100, min_reps=5, max_reps=100).reps(step_ms) == reps


def test_configs_put_attention_innermost_and_prefill_on_its_own_grid():
    grid = build_configs([("m", (1, 5))], ("forward", "prefill"), ("graph",), ("flash", "cudnn"),
                         (1, 8), (512,), (128, 1024), (2,))
    forward = [c for c in grid if c.what == "forward"]
    prefill = [c for c in grid if c.what == "prefill"]
    assert len(forward) == 2 * 2 * 2 and len(prefill) == 2 * 2
    assert [c.attention for c in forward[:2]] == ["flash", "cudnn"]
    assert forward[0].batch == forward[1].batch and forward[0].positions == forward[1].positions
    assert {(c.batch, c.positions, c.context) for c in prefill} == {(2, 128, 0), (2, 1024, 0)}
    assert prefill[1].tokens == 2 * 128


@pytest.mark.parametrize("model", ["llama-3.1-8b", "llama-3.2-1b", "llama-3.1-70b"])
def test_tiny_model_keeps_the_head_layout(model):
    spec = PRESETS.models[model]
    tiny = tiny_spec(spec)
    assert tiny.model_id == f"tiny-{model}"
    assert tiny.n_heads // tiny.n_kv_heads == spec.n_heads // spec.n_kv_heads
    assert tiny.tied_embeddings == spec.tied_embeddings
    assert tiny.weight_bytes < 8 * 2 ** 20  # megabytes, not gigabytes


def test_estimate_counts_every_run_of_a_configuration():
    policy = RepPolicy(target_ms=40, min_reps=5, max_reps=100, warmup=2)
    graph = Config("llama-3.1-8b", "graph", "forward", "flash", 8, 1, 2048)
    eager = Config("llama-3.1-8b", "eager", "forward", "flash", 8, 1, 2048)
    step = estimate_step_ms(L8, graph, H200, PRESETS.params)
    assert step > L8.weight_bytes / H200.memory_bandwidth_bytes_per_s * 1e3  # above the floor
    # eager pays one Python launch per kernel: far above the graph step at batch 8
    assert estimate_step_ms(L8, eager, H200, PRESETS.params) > step
    # graph: 1 eager run + 2 warm-up + 5 timed runs of a 20 ms step, plus fixed costs
    assert estimate_config_s(L8, graph, policy, 20.0) > 8 * 0.020
    assert estimate_config_s(L8, graph, policy, 20.0) < 8 * 0.020 + 0.2


def test_big_configs_beyond_the_preset_memory_still_get_an_estimate():
    c = Config("llama-3.1-8b", "graph", "forward", "flash", 512, 1, 16384)
    assert estimate_step_ms(L8, c, H200, PRESETS.params) > 0
    assert kv_cache_bytes(L8, c) > 100 * GIB
