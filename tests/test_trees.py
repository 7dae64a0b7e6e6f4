"""Token trees: shapes, selection, Sequoia's DP, the closed form against the simulator."""
import inspect

import numpy as np
import pytest

from src.costmodel import FlatCostModel
from src.serving import serve
from src.treeshape.select import sglang_tree
from src.treeshape.sequoia import sequoia_tree
from src.treeshape.shape import TreeShape, TreeShapeError, parse_shape
from src.treeshape.siblings import (
    SiblingError,
    SiblingVector,
    check_siblings,
    child_probabilities,
)
from src.treeshape.tree import chain_tree, expected_tokens
from src.treesim.serve import mode_tree, serve_tree
from src.workload import Requests

SIBLINGS = SiblingVector()


def requests(alpha, R=64, n=16, out=200):
    return Requests(alpha=np.full((R, n), alpha), output_len_tokens=np.full((R, n), out),
                    prompt_len_tokens=np.full((R, n), 100))


def q_iid(alpha, depth, topk, siblings=SIBLINGS):
    return child_probabilities(np.full(depth, alpha), siblings.shares, topk)


@pytest.mark.parametrize("shape,alpha", [("5:4:8", 0.7), ("3:2:6", 0.5), ("6:8:32", 0.8)])
def test_closed_form_matches_monte_carlo(shape, alpha):
    """accepted drafts per verification = 1 + sum of path products - 1, within 4 standard
    errors of the simulated mean (replications are independent)."""
    sh = parse_shape(shape)
    tree = mode_tree(sh, alpha, None, SIBLINGS)
    expected = expected_tokens(tree, q_iid(alpha, sh.steps, sh.topk)) - 1
    stats = serve_tree(requests(alpha), 4, "continuous_refill", FlatCostModel(0.0), "ragged",
                       sh, tree, SIBLINGS, np.random.default_rng(7))
    per_rep = stats.accepted_drafts / stats.active_slot_steps
    se = per_rep.std(ddof=1) / np.sqrt(per_rep.size)
    assert abs(per_rep.mean() - expected) < 4 * se


def test_chain_closed_form_is_the_chain_formula():
    alpha, gamma = 0.73, 6
    tree = sglang_tree(TreeShape.chain(gamma), q_iid(alpha, gamma, 1))
    assert tree.is_chain()
    assert expected_tokens(tree, q_iid(alpha, gamma, 1)) == pytest.approx(
        (1 - alpha ** (gamma + 1)) / (1 - alpha), rel=1e-12)


@pytest.mark.parametrize("decoder", ["ragged", "lockstep"])
def test_chain_shape_is_the_chain_bit_for_bit(decoder):
    req = requests(0.7, R=8, n=8)
    a = serve(req, 4, "static_batch", FlatCostModel(0.2), decoder, 4, np.random.default_rng(3))
    b = serve_tree(req, 4, "static_batch", FlatCostModel(0.2), decoder, TreeShape.chain(4), None,
                   SIBLINGS, np.random.default_rng(3))
    for field in a.__dataclass_fields__:
        assert np.array_equal(getattr(a, field), getattr(b, field)), field


def test_sequoia_with_no_siblings_is_the_chain():
    none = check_siblings([0.0, 0.0, 0.0], 0.8)
    for alpha in (0.4, 0.8):
        tree, value = sequoia_tree(9, q_iid(alpha, 8, 4, none))
        assert tree.is_chain()
        assert value == pytest.approx(expected_tokens(chain_tree(8), q_iid(alpha, 8, 1)))


@pytest.mark.parametrize("shape", ["5:4:8", "3:3:10", "6:8:32", "4:2:9", "8:8:64"])
@pytest.mark.parametrize("alpha", [0.5, 0.75, 0.9])
def test_sequoia_never_worse_than_sglang_selection(shape, alpha):
    sh = parse_shape(shape)
    q = q_iid(alpha, sh.tokens, 6)
    ours = expected_tokens(sglang_tree(sh, q), q)
    tree, best = sequoia_tree(sh.tokens, q)
    assert best >= ours - 1e-12
    assert expected_tokens(tree, q) == pytest.approx(best)


def test_sglang_selection_takes_best_n_minus_1_of_the_pool():
    """5:4:8 at alpha 0.8: the 7 best path probabilities of the 4 + 4 x 16 candidates."""
    sh = parse_shape("5:4:8")
    q = q_iid(0.8, 5, 4)
    tree = sglang_tree(sh, q)
    assert tree.size == 8 and tree.max_children <= 4 and tree.max_depth <= 5
    # the chain is in it: its values 0.8^d beat every sibling path here
    assert tree.depth.max() == 5


@pytest.mark.parametrize("text,fragment", [
    ("5:4", "expected S:K:N"), ("5:1:8", "N must be S + 1 = 6"),
    ("2:2:8", "exceeds the K + (S - 1) K^2 = 6"), ("0:1:1", "steps S"),
    ("5:40:8", "topk K")])
def test_bad_shapes(text, fragment):
    with pytest.raises(TreeShapeError, match=None) as e:
        parse_shape(text)
    assert fragment in str(e.value)


def test_pool_bound_is_inclusive():
    assert parse_shape("2:2:7").tokens == 7  # N - 1 = 6 = K + (S - 1) K^2


def test_rising_sibling_vector_refused():
    with pytest.raises(SiblingError, match="must not rise"):
        check_siblings([0.1, 0.2], 0.6)
    with pytest.raises(SiblingError, match="exceeds 1"):
        check_siblings([0.3, 0.2], 0.6)


def test_tree_speedup_free_draft_at_least_its_chain():
    """Flat cost, free draft: a step costs 1 whatever the shape, so the speedup is the tokens per
    step, and a tree containing its chain commits at least as many."""
    for alpha in (0.5, 0.7, 0.9):
        for shape in ("5:4:8", "4:2:8", "6:8:32"):
            sh = parse_shape(shape)
            q = q_iid(alpha, sh.steps, sh.topk)
            chain = expected_tokens(chain_tree(sh.steps), q_iid(alpha, sh.steps, 1))
            assert expected_tokens(sglang_tree(sh, q), q) >= chain - 1e-12


def test_simulated_tree_speedup_free_draft_at_least_its_chain():
    """The same requests under the flat cost model with a free draft: every step costs one
    target pass, so the tree 5:4:8 (which contains the chain of 5 here) takes fewer steps."""
    req = requests(0.7, R=32, n=8, out=300)
    cost = FlatCostModel(0.0)
    sh = parse_shape("5:4:8")
    tree = serve_tree(req, 4, "continuous_refill", cost, "ragged", sh,
                      mode_tree(sh, 0.7, None, SIBLINGS), SIBLINGS, np.random.default_rng(1))
    chain = serve(req, 4, "continuous_refill", cost, "ragged", 5, np.random.default_rng(2))
    assert tree.makespan.mean() < chain.makespan.mean()
    assert (tree.draft_time == 0).all() and (tree.makespan == tree.steps).all()


def test_depth_survival_is_the_closed_form_and_one_uniform_draws_it():
    from src.treeshape.depth import accepted_from_uniform, survival
    for shape, alpha in (("5:4:8", 0.7), ("6:8:32", 0.55)):
        sh = parse_shape(shape)
        tree = mode_tree(sh, alpha, None, SIBLINGS)
        surv = survival(tree, SIBLINGS, [alpha])
        assert np.all(np.diff(surv[0]) <= 1e-15)  # a survival function
        expected = expected_tokens(tree, q_iid(alpha, sh.steps, sh.topk)) - 1
        assert surv.sum() == pytest.approx(expected, rel=1e-12)
        u = np.random.default_rng(0).random(200_000)
        k = accepted_from_uniform(u, np.repeat(surv, u.size, axis=0))
        assert abs(k.mean() - expected) < 4 * k.std() / np.sqrt(u.size)


def test_lockstep_tree_keeps_the_batch_minimum():
    """Lockstep verification with a tree: every step commits min over the batch of K + 1, so it
    takes at least as many steps as ragged on the same requests (and accepts no more)."""
    req = requests(0.7, R=16, n=8, out=120)
    sh = parse_shape("4:2:8")
    tree = mode_tree(sh, 0.7, None, SIBLINGS)
    runs = {d: serve_tree(req, 4, "static_batch", FlatCostModel(0.2), d, sh, tree, SIBLINGS,
                          np.random.default_rng(5)) for d in ("ragged", "lockstep")}
    assert runs["lockstep"].steps.mean() > runs["ragged"].steps.mean()
    assert (runs["lockstep"].committed_tokens == runs["ragged"].committed_tokens).all()


def test_chain_and_tree_study_run_the_one_compiled_loop(monkeypatch):
    """Both studies call step_engine.run_steps (src/treesim/loop.py has no loop of its own), the
    tree study with its tree's child table, the chain study without one."""
    from src import step_engine
    from src.treesim import loop
    assert not any(hasattr(v, "py_func") for v in vars(loop).values())  # no compiled function
    draws = []
    compiled = step_engine.run_steps

    def recording(*args):
        given = inspect.signature(compiled.py_func).bind(*args).arguments
        draws.append("chain" if given.get("tree_child") is None else "tree")
        return compiled(*args)

    monkeypatch.setattr(step_engine, "run_steps", recording)
    req = requests(0.7, R=4, n=8, out=50)
    sh = parse_shape("4:2:8")
    serve(req, 4, "continuous_refill", FlatCostModel(0.2), "ragged", 4, np.random.default_rng(1))
    serve_tree(req, 4, "continuous_refill", FlatCostModel(0.2), "ragged", sh,
               mode_tree(sh, 0.7, None, SIBLINGS), SIBLINGS, np.random.default_rng(1))
    assert draws == ["chain", "tree"]


@pytest.mark.parametrize("decoder", ["greedy", "ragged", "lockstep"])
@pytest.mark.parametrize("serving_mode", ["static_batch", "continuous_refill"])
def test_a_chain_through_either_draw_gives_the_same_steps(decoder, serving_mode):
    """A chain of 4 given as a chain and as the chain tree through the one loop's two draws:
    with each request's acceptance sure (alpha 1 - 1e-12) or impossible (1e-300) both draws are
    deterministic (K = 4 or 0), so every per-step and per-request output agrees exactly, whatever
    the random streams; the mix of requests exercises admission, refills and the lockstep min."""
    from src.serving import simulate_steps
    from src.treesim.serve import simulate_tree_steps
    rng = np.random.default_rng(11)
    alpha = np.where(rng.random((6, 10)) < 0.5, 1 - 1e-12, 1e-300)
    req = Requests(alpha=alpha, output_len_tokens=rng.integers(5, 60, (6, 10)),
                   prompt_len_tokens=rng.integers(10, 400, (6, 10)))
    chain = simulate_steps(req, 3, serving_mode, decoder, 4, np.random.default_rng(1),
                           draft_budget_tokens=128)
    tree = simulate_tree_steps(req, 3, serving_mode, decoder, chain_tree(4), SIBLINGS,
                               np.random.default_rng(2), draft_budget_tokens=128)
    assert chain.accepted_drafts.sum() > 0 or decoder == "greedy"
    for field in chain.__dataclass_fields__:
        assert np.array_equal(getattr(chain, field), getattr(tree, field)), field


@pytest.mark.parametrize("profile", [None, np.cumsum(np.linspace(0.6, 1.6, 64))])
def test_the_tree_loop_on_a_chain_tree_has_the_chain_loops_law(profile):
    """A chain shape never reaches the tree loop (serve_tree hands it to the chain path), so the
    chain study's bytes cannot tell whether the tree code itself gets chains right. Fed the chain
    tree, the tree loop (one uniform per level) and the chain loop (one exponential per slot)
    must accept the same mean drafts per verification: the chain's closed form
    sum_{d=1..G} prod_{i<=d} a_i, within 4 standard errors each (replications independent)."""
    from dataclasses import replace

    from src.serving import simulate_steps
    from src.treesim.serve import representative_rates, simulate_tree_steps
    alpha, gamma = 0.72, 4
    req = replace(requests(alpha, R=96, n=16, out=150), hazard_profile=profile)
    rates = representative_rates(alpha, profile, gamma)
    closed = float(np.cumprod(rates).sum())
    for record in (simulate_tree_steps(req, 4, "continuous_refill", "ragged", chain_tree(gamma),
                                       SIBLINGS, np.random.default_rng(11)),
                   simulate_steps(req, 4, "continuous_refill", "ragged", gamma,
                                  np.random.default_rng(12))):
        per_rep = record.accepted_drafts / record.rep_slot_steps
        se = per_rep.std(ddof=1) / np.sqrt(per_rep.size)
        assert abs(per_rep.mean() - closed) < 4 * se, (per_rep.mean(), closed, se)


def test_sglang_selection_is_the_best_n_minus_1_of_an_independently_built_pool():
    """The pool rebuilt here from rank paths: pass 1 proposes the root's K children, each later
    pass the K children of each of the previous pass's best K proposals (by path product). The
    chosen tree's node values must be the N - 1 largest of the pool's (plus the root's 1)."""
    import itertools

    from src.treeshape.tree import node_values
    for shape, alpha in (("3:2:6", 0.6), ("4:3:12", 0.75), ("5:4:8", 0.8), ("3:4:20", 0.5)):
        sh = parse_shape(shape)
        q = q_iid(alpha, sh.steps, sh.topk)

        def value(path):
            return float(np.prod([q[d, j] for d, j in enumerate(path)]))
        level = [(j,) for j in range(sh.topk)]
        pool = list(level)
        for _ in range(sh.steps - 1):
            kept = sorted(level, key=lambda p: -value(p))[:sh.topk]
            level = [p + (j,) for p, j in itertools.product(kept, range(sh.topk))]
            pool += level
        assert len(pool) == sh.candidate_pool
        best = sorted((value(p) for p in pool), reverse=True)[:sh.tokens - 1]
        chosen = sorted(node_values(sglang_tree(sh, q), q)[1:], reverse=True)
        assert np.allclose(chosen, best, rtol=1e-12), shape


def test_the_study_loop_s_numba_cache_is_stamped_with_its_draws_files():
    """The study loop compiles the draws of src/acceptance.py and src/treeshape/accept.py into
    itself; numba would key its cache by step_engine.py alone and keep a stale draw after an edit
    there. src/compiled_cache.py stamps all three with one hash of the three files."""
    from src import compiled_cache, step_engine
    stamp = compiled_cache.sources_stamp(compiled_cache.STUDY_LOOP_SOURCES)
    assert stamp != compiled_cache.sources_stamp()
    for f in (step_engine.run_steps, step_engine.accepted_drafts_from_exponential,
              step_engine.accepted_tree_drafts):
        locator = f._cache._impl._locator
        assert isinstance(locator, compiled_cache.EngineSourcesLocator), f
        assert locator.get_source_stamp() == stamp
