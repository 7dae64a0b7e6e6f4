"""`sglang-adaptive` (src/online/sglang_adaptive.py): SGLang's routing of a batch size to its
candidate steps, the EMA rule's resting steps in closed form, throughput_aware's argmax, parsing,
and the compiled loop against the numpy engine."""

import numpy as np
import pytest

from src.config import ConfigError
from src.online.engine import CompiledEngine, Engine
from src.online.policies import BatchSchedule, NoSpeculation, parse_policies
from src.online.sglang_adaptive import (
    EMA_DEFAULT_SLOTS,
    SGLangAdaptive,
    ema_resting_steps,
    initial_steps,
    resolve,
    slot_index,
)
from tests.test_online_engine import _assert_same, _run


def _accepted(a):
    """Mean accepted drafts at S steps, i.i.d. acceptance a: a (1 - a^S) / (1 - a)."""
    return lambda s: a * (1 - a**s) / (1 - a)


def test_batch_size_routes_to_the_largest_key_below_it():
    """adaptive_step_router.batch_size_key_for_batch (no CUDA-graph padding): keys 1, 8, 32, 64
    of SGLang's DEFAULT_ADAPTIVE_CONFIG."""
    keys = [k for k, *_ in EMA_DEFAULT_SLOTS]
    expect = {0: 0, 1: 0, 7: 0, 8: 1, 31: 1, 32: 2, 63: 2, 64: 3, 1000: 3}
    assert {b: slot_index(keys, b) for b in expect} == expect


def test_initial_steps_follow_server_args():
    """num_steps defaults to the middle of the union [0, 1, 3, 5, 7] = 3; a slot without 3 starts
    at its own middle ([0, 1] -> 1, [0] -> 0)."""
    assert initial_steps(EMA_DEFAULT_SLOTS) == [3, 3, 1, 0]
    assert initial_steps(EMA_DEFAULT_SLOTS, num_steps=1) == [1, 1, 1, 0]


@pytest.mark.parametrize("a, cands, down, expect", [
    # e(3) = 0.9 + 0.81 + 0.729 = 2.439: not <= 1 - 0.5 - 0.25, not > 3 - 0.5: stays at 3
    (0.9, (1, 3, 5, 7), -0.25, 3),
    # e(3) = 2.710 > 2.5: up to 5; e(5) = 4.298: not > 4.5, not <= 2.25: rests at 5
    (0.95, (1, 3, 5, 7), -0.25, 5),
    # e(3) = 0.417 <= 0.5: down to 1, and (same EMA) <= 0.5 to 0; probing 1 gives e(1) = 0.3
    # <= 0.5: back to 0, the 0 <-> 1 cycle rests at 0
    (0.3, (0, 1, 3), 0.0, 0),
    # e(3) = 1.176: above 0.5, below 2.5: stays at 3 (the drop to 1 needs e <= 0.5)
    (0.6, (0, 1, 3), 0.0, 3),
])
def test_ema_rule_rests_where_the_closed_form_says(a, cands, down, expect):
    assert ema_resting_steps(cands, 3, _accepted(a), down, 0.0) == expect


def test_default_config_turns_speculation_off_from_64():
    by_gamma = np.ones((9, 101))
    p = resolve(SGLangAdaptive(), np.full(100, 0.9), None, by_gamma, 8)
    t = np.asarray(p.table)
    # slot 8 [0, 1, 3] from 3: e(3) = 2.439 > 2.5? no; rests 3. Slot 32 [0, 1] from 1: e(1) = 0.9
    # > 0.5 stays 1. Slot 64 [0]: 0.
    assert t[1] == t[7] == 3 and t[8] == t[31] == 3 and t[32] == t[63] == 1
    assert (t[64:] == 0).all()


def test_throughput_aware_takes_the_best_candidate_of_the_slot():
    """score = E/cost; with one alpha the steady-state speedup orders gammas as the score does.
    Gamma 2 is the best overall but no slot lists it."""
    by_gamma = np.ones((9, 201))
    by_gamma[2] = 3.0
    by_gamma[3, :40] = 2.0  # 3 beats 1 below batch 40
    by_gamma[1, 40:] = 1.5
    p = resolve(SGLangAdaptive("throughput_aware", ((1, (1, 3), 0.0, 0.0), (128, (1,), 0.0,
                                                                            0.0))),
                np.full(50, 0.7), None, by_gamma, 8)
    t = np.asarray(p.table)
    assert (t[1:40] == 3).all() and (t[40:] == 1).all()


def test_parsing():
    sched = BatchSchedule(((1, 1, 1),), 1)
    a, b = parse_policies("sglang-adaptive,sglang-adaptive:throughput_aware", 1, 8, sched)
    assert (a.name, a.strategy, b.name) == ("sglang-adaptive", "ema",
                                            "sglang-adaptive:throughput_aware")
    with pytest.raises(ConfigError, match="strategy 'fast' is not one of ema, throughput_aware"):
        parse_policies("sglang-adaptive:fast", 1, 8, sched)
    with pytest.raises(ConfigError, match="listed twice"):
        parse_policies("sglang-adaptive,sglang-adaptive:ema", 1, 8, sched)


def test_compiled_engine_equals_numpy_for_sglang_adaptive():
    """The policy is a batch-size table: the compiled loop runs it and agrees with the numpy
    engine step by step. Alpha 0.3: slot 1 stays at 3 (e(3) = 0.417 is above its drop threshold
    0.25), slots 8 and 32 rest at 0 (closed form above)."""
    by_gamma = np.ones((5, 65))
    policy = resolve(SGLangAdaptive(), np.full(10, 0.3), None, by_gamma, 4)
    assert policy.table[1] == policy.table[7] == 3 and policy.table[8] == policy.table[64] == 0
    args = _run([NoSpeculation(), policy], reps=2, n=50, rate=12.0)
    compiled = Engine(*args, max_gamma=4)
    assert isinstance(compiled, CompiledEngine)
    a = compiled.run()
    b = Engine(*args, max_gamma=4, allow_segments=False).run()
    assert a.proposed_drafts[2:].sum() > 0
    _assert_same(a, b)


# What SGLang reads from --speculative-adaptive-config (sgl-project/sglang
# python/sglang/srt/speculative/adaptive_spec_params.py @ 015c872628e328b530880bcf95ae91222604b225):
# resolve_adaptive_strategy reads "strategy" (ema | throughput_aware); _load_adaptive_config keeps
# the keys for which key.isdigit(), each needing "candidate_steps", a non-empty list of ints >= 0;
# AdaptiveStepSlot reads, from the entry merged over the top level, these knobs.
SGLANG_TOP_KEYS = {"strategy"}
SGLANG_SLOT_KEYS = {"candidate_steps", "ema_alpha", "update_interval", "warmup_batches",
                    "down_hysteresis", "up_hysteresis", "ceiling_coeff"}


def _sglang_accepts(cfg: dict) -> bool:
    """The checks of _load_adaptive_config and resolve_adaptive_strategy, as read."""
    slots = {k: v for k, v in cfg.items() if k.isdigit()}
    return (cfg.get("strategy", "ema") in ("ema", "throughput_aware") and bool(slots)
            and all(isinstance(v.get("candidate_steps"), list) and v["candidate_steps"]
                    and all(isinstance(s, int) and s >= 0 for s in v["candidate_steps"])
                    for v in slots.values()))


def test_printed_config_loads_and_carries_the_schedule():
    import json

    from src.online.sglang_adaptive_config import CONFIG_FILE, adaptive_lines

    ranges = ((1, 12, 4), (13, 80, 2), (81, 224, 1), (225, 1024, 0))
    lines = adaptive_lines("eagle3", ranges, "python -m sglang.launch_server --model-path M")
    cfg = json.loads(lines[2])
    assert _sglang_accepts(cfg)
    slots = {k: v for k, v in cfg.items() if k.isdigit()}
    assert set(cfg) - set(slots) == SGLANG_TOP_KEYS
    assert all(set(v) == {"candidate_steps"} <= SGLANG_SLOT_KEYS for v in slots.values())
    # SGLang's routing over these keys gives vLLM's lookup of the same ranges at every batch size
    keys = sorted(int(k) for k in slots)
    dense = BatchSchedule(ranges, 4).lookup(1100)
    for b in range(1, 1101):
        assert slots[str(keys[slot_index(keys, b)])]["candidate_steps"] == [dense[b]]
    assert f"--speculative-adaptive-config {CONFIG_FILE}" in lines[4]
    assert "--speculative-eagle-topk 1" in lines[4]
    assert any("candidate 0 from batch 225" in x for x in lines)
    assert any("attention DP" in x and "--speculative-eagle-topk other than 1" in x
               for x in lines)


@pytest.mark.parametrize("kind, algorithm", [("model", "STANDALONE"), ("ngram", "NGRAM")])
def test_algorithms_sglang_declines_get_one_line(kind, algorithm):
    from src.online.sglang_adaptive_config import adaptive_lines

    lines = adaptive_lines(kind, ((1, 8, 3),), None)
    assert len(lines) == 1 and "not printed" in lines[0] and algorithm in lines[0]


def test_recommend_prints_the_adaptive_config():
    from tests.helpers import run_captured

    done = run_captured(["recommend", "--gpu", "h200", "--target", "llama-3.1-8b", "--draft",
                         "eagle3", "--draft-model-path", "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
                         "--acceptance", "0.7", "--engine", "sglang", "--batch", "1,8,64"])
    assert done.returncode == 0, done.stderr
    out = done.stdout.splitlines()
    i = next(n for n, x in enumerate(out) if x.startswith("SGLang adaptive speculation"))
    assert "015c8726" in out[i] and _sglang_accepts(__import__("json").loads(out[i + 2]))
    assert "--speculative-adaptive --speculative-adaptive-config" in out[i + 4]


def test_serve_resolves_the_policy_at_the_workload_acceptance(tmp_path):
    """serve's prepare gives the policy its table (an unresolved one raises in gammas): both
    strategies run beside the schedule and propose drafts."""
    import pandas as pd

    from tests.helpers import run_captured

    done = run_captured(["serve", "--scenario", "configs/scenarios/h100-llama8b-1b.toml",
                         "--rates", "2", "--requests", "20", "--replications", "2", "--policies",
                         "schedule,sglang-adaptive,sglang-adaptive:throughput_aware",
                         "--no-plots", "--quiet", "--out", str(tmp_path)])
    assert done.returncode == 0, done.stderr
    df = pd.read_csv(tmp_path / "results" / "serving.csv")
    assert {"sglang-adaptive", "sglang-adaptive:throughput_aware"} <= set(df.policy)
    assert (df[df.policy.str.startswith("sglang")].mean_gamma > 0).all()
