"""Token-tree policies (`tree:S:K:N`) in the serving engine: the compiled loop against the numpy
engine step by step, the compiled tree step prices against TreeStepTimer, and the accepted depth
against the tree's closed form."""

from dataclasses import replace

import numpy as np
import pytest

from src.acceptance import hazard_profile
from src.compiled_cache import python_callable
from src.costmodel import CostModelInputError, memory_usable_bytes
from src.online import step_prices
from src.online.engine import CompiledEngine, Engine, EngineLimits, RowGroup
from src.online.engine_compiled import compiled_supported
from src.online.policies import Adaptive, FixedGamma, FixedTree, NoSpeculation
from src.online.step_prices import pack_prices
from src.treeshape.shape import parse_shape
from src.treeshape.siblings import SiblingVector, child_probabilities
from src.treeshape.tree import expected_tokens
from src.treesim.serve import mode_tree
from src.treesim.serving import tree_thresholds, tree_timer
from tests.test_online_engine import _assert_same, _deployments, _run, _with_profile

tree_decode_ms = python_callable(step_prices.tree_decode_ms)
tree_step_fits = python_callable(step_prices.tree_step_fits)

TREE = parse_shape("4:2:8")


def _tree_args(policies, engine="sglang", kv_blocks=None, gpu="h100-sxm", scheduling="chunked",
               reps=2, **kw):
    """_run's arguments with a deployment of its own (the tree's timer) for every tree policy,
    as src/online/study.simulate_rate builds them."""
    deps = _deployments(engine, kv_blocks, gpu, scheduling)
    rq, groups, deps, row_dep, limits = _run(policies, reps=reps, deps=deps, **kw)
    row_dep = row_dep.copy()
    for i, p in enumerate(policies):
        if isinstance(p, FixedTree):
            deps.append(replace(deps[1], timer=tree_timer(deps[1].timer, p.shape)))
            row_dep[i * reps:(i + 1) * reps] = len(deps) - 1
    return rq, groups, deps, row_dep, limits


TREE_CASES = {
    # trees beside chains, adaptive and no speculation, prefill chunks competing for the budget
    "mixed": dict(policies=[NoSpeculation(), FixedGamma(3), Adaptive(4), FixedTree(TREE),
                            FixedTree(parse_shape("3:4:10"))], n=40, rate=12.0),
    # a KV cache that forces preemption and recomputation
    "preemption": dict(policies=[NoSpeculation(), FixedTree(TREE)], n=40, rate=40.0,
                       kv_blocks=150),
    # attention kernels fitted on the H200 (the vllm-v1 profile's, on the tree's engine rules)
    "fitted-kernels": dict(policies=[NoSpeculation(), FixedTree(TREE)], n=30, rate=10.0,
                           engine="vllm-v1", gpu="h200"),
    # an engine with the path copy but no cascade attention, eager launches
    "pytorch-eager": dict(policies=[FixedGamma(4), FixedTree(TREE)], n=30, rate=6.0,
                          engine="pytorch-eager"),
    # the per-position acceptance law (EAGLE's falling rates)
    "per-position": dict(policies=[FixedGamma(4), FixedTree(TREE)], n=30, rate=3.0,
                         profile=(0.79, 0.74, 0.72, 0.73, 0.67)),
    # a token budget that holds N positions of at most 8 sequences: beyond, steps of no tree
    "small-budget": dict(policies=[FixedGamma(3), FixedTree(TREE)], n=40, rate=60.0,
                         limits=EngineLimits(16, 64), prompt=(2, 6), output=(60, 200)),
    # prefill-only steps of whole prompts (vLLM v0's scheduler), with preemption
    "prefill-first-preemption": dict(policies=[NoSpeculation(), FixedTree(TREE)], n=40,
                                     rate=40.0, kv_blocks=150, scheduling="prefill_first"),
}


@pytest.mark.parametrize("case", TREE_CASES, ids=str)
def test_compiled_tree_engine_equals_the_numpy_engine_step_by_step(case):
    """A run with tree policies takes the compiled loop and gives the numpy engine's single-step
    numbers: the same steps, accepted depths, preemptions and histograms, times to 1e-9."""
    kw = dict(TREE_CASES[case])
    profile = kw.pop("profile", None)
    args = _tree_args(kw.pop("policies"), **kw)
    if profile is not None:
        args = _with_profile(args, hazard_profile(profile, 4))
    compiled = Engine(*args, max_gamma=4)
    assert isinstance(compiled, CompiledEngine)
    a = compiled.run()
    b = Engine(*args, max_gamma=4, compiled=False).run()
    if "preemption" in case:
        assert a.preemptions.sum() > 0
    tree_rows = np.concatenate([g.rows for g in args[1] if isinstance(g.policy, FixedTree)])
    assert a.accepted_drafts[tree_rows].min() > 0
    if case == "small-budget":  # steps over 8 decoding sequences verify no tree
        assert a.decode_steps_by_gamma[tree_rows, 0].min() > 0
        assert a.decode_steps_by_gamma[tree_rows, TREE.steps].min() > 0
    _assert_same(a, b)


def test_a_tree_step_holds_n_positions_of_kv_and_proposes_n_minus_1_drafts():
    """Each decoding sequence of a tree step takes N KV slots (the verification writes the N
    tokens' KV), so a cache that holds the longest request plus S + 1 but not N positions is
    refused for a tree and not for its chain; every verification proposes N - 1 drafts."""
    args = _tree_args([FixedTree(TREE)], n=20, rate=2.0)
    res = Engine(*args, max_gamma=4).run()
    steps = res.decode_steps_by_gamma[:, TREE.steps]
    assert steps.sum() > 0 and np.all(res.proposed_drafts % TREE.drafts == 0)
    assert np.all(res.proposed_drafts >= TREE.drafts * steps)
    rq, groups, deps, row_dep, limits = args
    bs = limits.block_size_tokens
    longest = int(np.max(rq.prompt_tokens + rq.output_tokens))
    shift = -(longest + TREE.steps + 1) % bs  # longest + S + 1 now ends a block, + N does not
    rq = replace(rq, prompt_tokens=rq.prompt_tokens + shift)
    blocks = (longest + shift + TREE.steps + 1) // bs + 1
    tight = [replace(d, kv_capacity_blocks=blocks) for d in deps]
    chain = [RowGroup(FixedGamma(TREE.steps), groups[0].rows)]
    assert isinstance(Engine(rq, chain, tight, row_dep, limits, max_gamma=4), CompiledEngine)
    for compiled in (True, False):
        with pytest.raises(ValueError, match="cannot hold the longest request"):
            Engine(rq, groups, tight, row_dep, limits, max_gamma=4, compiled=compiled)


def test_a_tree_steps_prefill_chunks_share_a_pass_of_n_positions_per_sequence():
    timer = _deployments("sglang")[1].timer
    tree = tree_timer(timer, TREE)
    args = (np.array([3, 5]), np.array([TREE.steps, 0]), np.array([900.0, 2000.0]),
            np.array([2, 1]), np.array([300, 90]), np.array([100.0, 0.0]), np.array([1, 1]))
    got = tree.prefill_extra_ms(*args)
    want = timer.prefill_extra_ms(args[0], np.array([TREE.tokens - 1, 0]), *args[2:])
    np.testing.assert_array_equal(got, want)
    assert got[0] != timer.prefill_extra_ms(*args)[0]


def test_a_run_mixing_trees_and_chains_takes_the_compiled_engine():
    args = _tree_args([NoSpeculation(), FixedGamma(2), FixedTree(TREE)], n=5, rate=1.0)
    assert compiled_supported(args[1], args[2])
    assert isinstance(Engine(*args, max_gamma=4), CompiledEngine)
    # a tree's timer with a draft KV budget: its pricing needs the capped sums (numpy's path)
    budget = args[2][2].timer.cost
    capped = replace(budget, draft=replace(budget.draft, kv_budget_tokens=256))
    deps = list(args[2])
    deps[2] = replace(deps[2], timer=tree_timer(deps[1].timer.__class__(capped, True), TREE))
    assert not compiled_supported(args[1], deps)


@pytest.mark.parametrize("engine,gpu,extras", [
    ("sglang", "h100-sxm", False), ("sglang", "h100-sxm", True), ("ideal", "h100-sxm", False),
    ("pytorch-eager", "h100-sxm", False), ("vllm-v1", "h200", False)])
def test_compiled_tree_step_prices_are_the_tree_timers(engine, gpu, extras, monkeypatch):
    """step_prices.tree_decode_ms = TreeStepTimer.decode_ms_totals (src/treesim/costs.py's
    verify_ms and draft_ms) to 1e-9 at many (sequences, context); extras: cascade attention and
    the path copy patched in (no profile sets both), fitted kernels on the H200."""
    if extras:
        import src.treesim.costs as costs
        monkeypatch.setattr(costs, "tree_engine", lambda name: costs.TreeEngine(
            verifies_trees=True, cascade_attention=True, accepted_path_copy=True,
            tree_cpu_per_seq_ms=0.01))
    timer = _deployments(engine, gpu=gpu)[1].timer
    for shape in (TREE, parse_shape("5:4:8"), parse_shape("2:8:16"), parse_shape("1:4:4")):
        tree = tree_timer(timer, shape)
        pt = pack_prices([timer, tree], 320, 8, 4096)  # past sglang's CUDA graphs (256)
        rng = np.random.default_rng(shape.tokens)
        n = rng.integers(0, 321, 200)
        C = n * rng.integers(1, 1000, 200)
        gamma = np.full(n.size, shape.steps)
        want_t, want_d = tree.decode_ms_totals(n, C, gamma, 320)
        got = np.array([tree_decode_ms(pt, 1, int(a), int(b)) for a, b in zip(n, C)])
        np.testing.assert_allclose(got[:, 0], want_t, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(got[:, 1], want_d, rtol=1e-9, atol=1e-12)
        assert all(tree_step_fits(pt, 1, int(a), int(b), shape.steps) == -1 for a, b in zip(n, C))


def test_a_tree_step_over_the_gpu_memory_is_refused_with_the_cost_models_error():
    """The compiled tree step checks N positions per sequence, as TreeStepTimer does: a context
    that leaves room for S + 1 positions of 64 sequences but not N is refused (gamma N - 1), and
    the cost model's own error is what the engine raises for it."""
    timer = tree_timer(_deployments("sglang")[1].timer, TREE)
    pt = pack_prices([timer], 64, 8, 4096)
    cost, n = timer.cost, 64
    room = (memory_usable_bytes(cost.gpu, cost.params) - cost._weight_bytes_gpu0
            - cost._kv_bytes_per_seq_gpu0 * n) / cost._kv_bytes_per_token_gpu0
    C = int(room) - n * TREE.tokens + 1
    assert tree_step_fits(pt, 0, n, C - 2, TREE.steps) == -1
    assert tree_step_fits(pt, 0, n, C, TREE.steps) == TREE.tokens - 1
    with pytest.raises(CostModelInputError):
        timer.check_fits(np.array([n]), np.array([C]), np.array([TREE.tokens - 1]))
    with pytest.raises(CostModelInputError):
        timer.decode_ms_totals(np.array([n]), np.array([C]), np.array([TREE.steps]), n)


def test_tree_accepted_tokens_per_step_at_low_load_match_the_closed_form():
    """At a low rate (about one request at a time) the mean tokens a tree verification commits
    before the output cap, 1 + accepted drafts per verification, is the tree's closed form
    1 + sum over nodes of the path probabilities (Sequoia's F(T)) within its 99.9% interval."""
    alpha = 0.7
    args = _tree_args([FixedTree(TREE)], reps=4, n=40, rate=0.5, output=(150, 400), alpha=alpha)
    res = Engine(*args, max_gamma=4).run()
    assert res.preemptions.sum() == 0
    verifications = res.proposed_drafts.sum() / TREE.drafts  # N - 1 proposed per verification
    mean_k = res.accepted_drafts.sum() / verifications
    q = child_probabilities(np.full(TREE.steps, alpha), SiblingVector().shares, TREE.topk)
    expected_k = expected_tokens(mode_tree(TREE, alpha, None, SiblingVector()), q) - 1
    surv = tree_thresholds(TREE, np.full((1, 1), alpha), None)[0, 0]  # P(K >= d)
    d = np.arange(1, surv.size + 1)
    var = ((2 * d - 1) * surv).sum() - surv.sum() ** 2
    assert verifications > 5000
    assert abs(mean_k - expected_k) < 3.3 * np.sqrt(var / verifications)
