"""Token trees in the study: the command line, the grid, the costs, the summary section."""
import os

import numpy as np
import pandas as pd
import pytest

from src.costmodel import HardwareCostModel
from src.treeshape.shape import TreeShape, parse_shape
from src.treeshape.siblings import SiblingVector
from src.treesim.costs import draft_ms, verify_ms
from tests.helpers import run_captured

SIBLINGS = SiblingVector()

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAST = os.path.join(ROOT, "tests", "fast_study.toml")  # a report's shape, not its numbers
TREE_SCENARIO = os.path.join(ROOT, "configs", "scenarios", "h100-llama8b-eagle-trees.toml")


def sglang_cost():
    return HardwareCostModel.from_presets("h100-sxm", "llama-3.1-8b", draft="eagle",
                                          engine="sglang")


@pytest.mark.parametrize("batch", [1, 16, 64])
def test_verification_cost_rises_with_tree_size(batch):
    cost = sglang_cost()
    n, ctx = np.array([batch]), np.array([batch * 2000])
    times = [float(verify_ms(cost, parse_shape(s), n, ctx)[0])
             for s in ("2:2:4", "3:2:6", "4:2:8", "4:4:16", "6:8:32", "8:8:64")]
    assert all(b > a for a, b in zip(times, times[1:])), times


def test_tree_extras_cost_more_than_the_chain_of_the_same_tokens(monkeypatch):
    """Cascade attention and the path copy (tree_engines.toml fields) on top of N positions; the
    sglang profile sets neither (flashinfer's one masked pass, page size 1: the slot table is
    re-pointed), so there a tree verifies at its chain's price of the same N."""
    import src.treesim.costs as costs
    cost = sglang_cost()
    n, ctx = np.array([8]), np.array([16000])
    chain = float(verify_ms(cost, TreeShape.chain(7), n, ctx)[0])
    assert float(verify_ms(cost, TreeShape(4, 2, 8), n, ctx)[0]) == chain
    monkeypatch.setattr(costs, "tree_engine", lambda name: costs.TreeEngine(
        verifies_trees=True, cascade_attention=True))
    cascade = float(verify_ms(cost, TreeShape(4, 2, 8), n, ctx)[0])
    monkeypatch.setattr(costs, "tree_engine", lambda name: costs.TreeEngine(
        verifies_trees=True, cascade_attention=True, accepted_path_copy=True))
    both = float(verify_ms(cost, TreeShape(4, 2, 8), n, ctx)[0])
    assert chain < cascade < both
    assert float(draft_ms(cost, TreeShape(4, 4, 16), n, ctx)[0]) > float(
        draft_ms(cost, TreeShape.chain(4), n, ctx)[0])


def test_tree_with_a_chains_only_engine_is_refused(tmp_path):
    done = run_captured(["--trees", "5:4:8", "--out", str(tmp_path / "o")])
    assert done.returncode == 2
    assert "--trees: 5:4:8 is a tree (topk 4 > 1) but engine profile vllm-v1 verifies chains " \
           "only" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not os.path.exists(tmp_path / "o" / "results")


@pytest.mark.parametrize("argv,fragment", [
    (["--trees", "2:2:8"], "--trees: 2:2:8: N - 1 = 7 exceeds the K + (S - 1) K^2 = 6"),
    (["--trees", "4:1:8"], "with topk 1 the tree is a chain and N must be S + 1 = 5"),
    (["--trees", "5:4:8,5:4:8"], "5:4:8 is listed twice")])
def test_bad_tree_options(tmp_path, argv, fragment):
    done = run_captured([*argv, "--scenario", "reference", "--out", str(tmp_path / "o")])
    assert done.returncode == 2 and fragment in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_a_tree_in_a_config_file_on_a_chains_only_profile_names_the_field(tmp_path):
    """The refusal names the file and its field, as every other config error does."""
    path = tmp_path / "c.toml"
    path.write_text('trees = ["5:4:8"]\n')
    done = run_captured(["--config", str(path), "--out", str(tmp_path / "o")])
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
    assert f"--config {path}: trees: 5:4:8 is a tree (topk 4 > 1)" in done.stderr, done.stderr
    assert not os.path.exists(tmp_path / "o")


def test_rising_sibling_vector_in_a_config_file_is_refused(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('trees = ["3:2:6"]\nsibling_vector = [0.7, 0.05, 0.1]\n')
    done = run_captured(["--config", str(path), "--scenario", "reference", "--out",
                         str(tmp_path / "o")])
    assert done.returncode == 2
    assert "sibling_vector: sibling rates must not rise with rank" in done.stderr
    assert "p_3 = 0.1 > p_2 = 0.05" in done.stderr


def test_reference_study_with_trees_writes_rows_section_and_plot(tmp_path):
    out = tmp_path / "o"
    done = run_captured(["--scenario", "reference", "--trees", "3:2:6,4:1:5", "--gammas", "2,4",
                         "--batch-sizes", "1,8", "--quality-modes", "homogeneous_good",
                         "--serving-modes", "continuous_refill", "--out", str(out), "--quiet",
                         "--config", FAST])  # fewer, shorter replications: shapes and sections
    assert done.returncode == 0, done.stderr
    df = pd.read_csv(out / "results" / "results.csv")
    shapes = set(df[["tree_steps", "tree_topk", "tree_tokens"]].itertuples(index=False, name=None))
    assert shapes == {(2, 1, 3), (4, 1, 5), (3, 2, 6)}  # 4:1:5 is the chain gamma 4, once
    assert (df.gamma == df.tree_tokens - 1).all()
    summary = (out / "results" / "summary.txt").read_text()
    assert "Token trees at batch > 1" in summary
    assert "SGLang's selection vs Sequoia's optimal tree" in summary
    assert (out / "plots" / "tree_shapes_vs_batch.png").stat().st_size > 10_000
    # flat cost, draft 0.2 per pass: the tree 3:2:6 costs what the chain 3 costs, commits more
    tree = df[df.tree_topk == 2].set_index("batch_size")
    assert (tree.tokens_per_step > 3.0).all()


def test_tree_section_gives_the_shape_to_run_per_batch_as_sglang_flags():
    """A tree that wins at batch 1, ties at 8 and loses at 64: the section's flag lines run the
    tree at 1 and the best chain (a tie goes to the chain) at 8 and 64, all three flags each."""
    import re

    from src.trees.report import summary_text
    from src.treeshape.shape import check_shape

    def row(batch, s, k, n, speedup, tokens):
        return {"quality_mode": "m", "serving_mode": "continuous_refill", "batch_size": batch,
                "tree_steps": s, "tree_topk": k, "tree_tokens": n, "gamma": n - 1,
                "speedup": speedup, "speedup_ci_low": speedup - 0.01,
                "speedup_ci_high": speedup + 0.01, "tokens_per_step": tokens}
    rows = pd.DataFrame([row(1, 5, 4, 8, 2.0, 4.0), row(1, 4, 1, 5, 1.6, 3.3),
                         row(8, 5, 4, 8, 1.505, 4.0), row(8, 4, 1, 5, 1.5, 3.3),
                         row(64, 5, 4, 8, 1.1, 4.0), row(64, 4, 1, 5, 1.3, 3.3)])
    text = summary_text([("t", rows, None)])
    flags = re.findall(r"^\s+batch ([\d, ]+?)\s+--speculative-num-steps (\d+) "
                       r"--speculative-eagle-topk (\d+) --speculative-num-draft-tokens (\d+)$",
                       text, re.M)
    assert [(b, (int(s), int(k), int(n))) for b, s, k, n in flags] == [
        ("1", (5, 4, 8)), ("8, 64", (4, 1, 5))], text
    for _, s, k, n in flags:
        check_shape(TreeShape(int(s), int(k), int(n)))
    assert "the share of" not in text  # 'speed' is a ratio of speedups, not a share


def test_tree_section_names_the_shapes_within_the_best_ones_interval():
    """Two trees within each other's interval at batch 8, apart at batch 1: the section says the
    order at 8 is noise (a best shape that changes between batch sizes may be just that)."""
    from src.trees.report import summary_text

    def row(batch, s, k, n, speedup):
        return {"quality_mode": "m", "serving_mode": "continuous_refill", "batch_size": batch,
                "tree_steps": s, "tree_topk": k, "tree_tokens": n, "gamma": n - 1,
                "speedup": speedup, "speedup_ci_low": speedup - 0.01,
                "speedup_ci_high": speedup + 0.01, "tokens_per_step": 3.0}
    rows = pd.DataFrame([row(1, 5, 4, 8, 2.0), row(1, 3, 2, 6, 1.8), row(1, 4, 1, 5, 1.6),
                         row(8, 5, 4, 8, 1.5), row(8, 3, 2, 6, 1.495), row(8, 4, 1, 5, 1.3)])
    text = summary_text([("t", rows, None)])
    assert "within the best's 95% CI (which of these is best is noise):" in text
    assert "      batch 8: 5:4:8 ~ 3:2:6" in text and "batch 1: 5:4:8" not in text, text


def test_readme_tree_findings_are_generated_from_the_tree_study():
    """README's tree findings are the block update_docs writes from the committed tree study,
    not figures typed in (they went stale silently before)."""
    from src.trees.report import readme_headline
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    start, end = "<!-- tree-headline:start -->", "<!-- tree-headline:end -->"
    block = text[text.index(start) + len(start):text.index(end)].strip()
    rows = pd.read_csv(os.path.join(ROOT, "studies", "trees", "results", "results.csv"))
    assert block == readme_headline(rows).strip()
    assert block.count("- ") >= 2 and "sglang / continuous_refill" in block


def test_tree_plot_names_each_shape_once_as_a_tick():
    """The best shape sits on a categorical axis, one tick label per shape of the grid (sorted by
    N), and no text is drawn beside the points: annotations beside them overlapped each other,
    the lines and the panel's edge (issue 26)."""
    from src.trees.plots import plot_trees
    rows = pd.read_csv(os.path.join(ROOT, "studies", "trees", "results", "results.csv"))
    trees = rows[rows.tree_topk > 1]
    shapes = sorted({(n, s, k) for s, k, n in zip(trees.tree_steps, trees.tree_topk,
                                                   trees.tree_tokens)})
    fig = plot_trees(rows, "t")
    try:
        for ax in fig.axes[::2][:2]:  # the two best-shape panels
            assert not ax.texts
            ticks = [t.get_text() for t in ax.get_yticklabels()]
            assert ticks == [f"{s}:{k}:{n}" for n, s, k in shapes]
    finally:
        import matplotlib.pyplot as plt
        plt.close(fig)


def test_tree_scenario_loads_and_names_its_shapes():
    from src.hardware.scenario import load_scenario
    sc = load_scenario(TREE_SCENARIO)
    assert len([t for t in sc.study.trees if not t.is_chain]) == 8
    assert TreeShape(5, 4, 8) in sc.study.trees  # SGLang's Llama default
    assert sc.max_tokens_per_seq() >= 64 + 1


def test_design_md_holds_the_validation_table_the_code_computes():
    from src.trees.validation import table
    with open(os.path.join(ROOT, "design.md"), encoding="utf-8") as f:
        assert table() in f.read()


@pytest.mark.parametrize("shape,alpha", [("5:4:8", 0.7), ("3:2:6", 0.85), ("6:8:32", 0.6)])
def test_tree_length_fit_recovers_the_rate(shape, alpha):
    from src.treeshape.fit import alpha_from_tree_length, tree_tokens
    sh = parse_shape(shape)
    assert alpha_from_tree_length(tree_tokens(alpha, sh, SIBLINGS), sh) == pytest.approx(
        alpha, abs=1e-6)


def test_acceptance_length_with_a_tree_shape(tmp_path):
    done = run_captured(["--acceptance-length", "3.9", "--shape-measured", "5:4:8", "--scenario",
                         "reference", "--batch-sizes", "1", "--gammas", "2", "--quiet",
                         "--no-plots", "--out", str(tmp_path / "o")])
    assert done.returncode == 0, done.stderr
    assert "with the tree 5:4:8" in done.stdout and "alpha = 0.8058" in done.stdout
    # the default run verifies no trees (vllm-v1): the output says where the shapes are compared
    assert "add --scenario configs/scenarios/h100-llama8b-eagle-trees.toml" in done.stdout
    # read as a chain of 5 drafts the same length means a higher top-1 rate (in the tree the
    # siblings accept part of it)
    chain = run_captured(["--acceptance-length", "3.9", "--gamma-measured", "5", "--scenario",
                          "reference", "--batch-sizes", "1", "--gammas", "2", "--quiet",
                          "--no-plots", "--out", str(tmp_path / "p")])
    assert float(chain.stdout.split("alpha = ")[1][:6]) > 0.8058


def test_a_tree_length_is_fitted_under_the_runs_own_sibling_vector(tmp_path):
    """With sibling_vector set in the config file, the rate fitted to a tree's accepted length is
    the one whose tree gives that length under that vector (it used the default vector, so the
    run's own 5:4:8 did not reproduce the 3.9 it was fitted to)."""
    from src.cli import parse
    from src.treeshape.fit import tree_tokens
    from src.treeshape.siblings import vector_siblings
    path = tmp_path / "c.toml"
    path.write_text("sibling_vector = [0.8, 0.15, 0.05]\n")
    plan = parse(["--config", str(path), "--acceptance-length", "3.9", "--shape-measured",
                  "5:4:8", "--scenario", "reference", "--out", str(tmp_path / "o")])
    alpha = plan.cfg.alpha_modes["tau3.9_s5k4n8"].rates[0]
    assert tree_tokens(alpha, parse_shape("5:4:8"), vector_siblings((0.8, 0.15, 0.05))) == \
        pytest.approx(3.9, abs=1e-6)
    assert any("sibling vector [0.8, 0.15, 0.05]" in line for line in plan.measured_acceptance)


def test_acceptance_length_shape_errors(tmp_path):
    out = ["--out", str(tmp_path / "o"), "--scenario", "reference"]
    done = run_captured(["--acceptance-length", "0.9", "--shape-measured", "5:4:8", *out])
    assert done.returncode == 2 and "needs lengths in" in done.stderr
    done = run_captured(["--acceptance-length", "3", "--shape-measured", "3:1:4",
                         "--gamma-measured", "3", *out])
    assert done.returncode == 2 and "not both" in done.stderr
    done = run_captured(["--shape-measured", "3:1:4", *out])
    assert done.returncode == 2 and "only applies with --acceptance-length" in done.stderr


def test_recommend_prints_the_best_tree_as_all_three_sglang_flags():
    import re

    from src.treeshape.shape import check_shape
    done = run_captured(["recommend", "--gpu", "h100-sxm", "--target", "llama-3.1-8b", "--draft",
                         "eagle", "--draft-model-path", "yuhuili/EAGLE-LLaMA3.1-Instruct-8B",
                         "--acceptance", "0.8", "--batch", "1,64"])
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "SGLang token trees (engine profile sglang" in out
    assert "vLLM V1 verifies chains only" in out
    flags = re.findall(r"--speculative-num-steps (\d+) --speculative-eagle-topk (\d+) "
                       r"--speculative-num-draft-tokens (\d+)", out)
    assert len(flags) >= 2  # the chain line of the existing SGLang advice, and the tree's
    for s, k, n in flags:
        check_shape(TreeShape(int(s), int(k), int(n)))  # SGLang's rules hold for every one
    assert any(int(k) > 1 for _, k, _ in flags)  # at batch 1 and alpha 0.8 a tree is best


def test_recommend_names_only_the_batch_sizes_it_evaluated_for_the_chain():
    """Batch 1, 8, 64 at alpha 0.8: a tree at 8, a chain at 64; the advice names 64, the batch
    evaluated, instead of claiming every batch above 8."""
    import re
    done = run_captured(["recommend", "--gpu", "h100-sxm", "--target", "llama-3.1-8b", "--draft",
                         "eagle", "--draft-model-path", "yuhuili/EAGLE-LLaMA3.1-Instruct-8B",
                         "--acceptance", "0.8", "--batch", "1,8,64"])
    assert done.returncode == 0, done.stderr
    best = dict(re.findall(r"^\s+(\d+)\s+(\d+:\d+:\d+)\s+[\d.]+x", done.stdout, re.M))
    assert set(best) == {"1", "8", "64"}
    assert not parse_shape(best["8"]).is_chain and parse_shape(best["64"]).is_chain
    assert "a chain is best at batch 64 (the table's batch sizes above 8)" in done.stdout
    assert "above batch 8 a chain is best" not in done.stdout
    # the conditions of SGLang v0.5.10's parser, the sglang profile's version: at page size > 1
    # it takes fa3 as well as flashinfer (server_args.py: not in ["flashinfer", "fa3"])
    assert "SGLang v0.5.10, server_args.py: topk > 1 is refused with the trtllm_mha backend, " \
        "with SGLANG_ENABLE_SPEC_V2=1, and at --page-size > 1 unless --attention-backend is " \
        "flashinfer or fa3" in done.stdout
    assert "needs page size 1 unless --attention-backend flashinfer" not in done.stdout


def test_recommend_by_rate_gives_the_best_shape_at_each_rates_running_batch():
    """recommend --rate: each rate gets the best shape at the batch it runs at (the mean running
    batch of its simulation), not only the batch table."""
    from src.hardware.scenario import load_scenario
    from src.trees.recommend import best_shapes, recommend_lines
    sc = load_scenario(os.path.join(ROOT, "configs", "scenarios", "h100-llama8b-eagle.toml"))
    rates = [(2.0, 1.8), (16.0, 12.6)]
    lines = recommend_lines(sc, 0.8, [1, 2, 4, 8, 16, 32, 64], 329, "launch", rates=rates)
    expected = {b: r for b, r in ((r["batch"], r) for r in best_shapes(
        sc.cost_model("sglang"), 0.8, [2, 13], 329))}
    for rate, batch in (("2/s", 2), ("16/s", 13)):
        line = next(x for x in lines if x.strip().startswith(f"{rate}: batch {batch}: "))
        assert expected[batch]["shape"].label in line, line


def test_trees_with_an_ngram_draft_are_refused():
    from src.config import ConfigError
    from src.hardware.scenario import scenario_from_dict
    table = {"scenario": {"name": "t", "gpu": "h100-sxm", "target": "llama-3.1-8b",
                          "draft": "ngram", "engine_profiles": ["ideal"]},
             "study": {"trees": ["3:2:6"], "batch_sizes": [1]}}
    with pytest.raises(ConfigError, match="an n-gram draft has none"):
        scenario_from_dict(table)
    table["study"]["trees"] = ["3:1:4"]  # a chain is fine
    assert scenario_from_dict(table).study.trees == (TreeShape.chain(3),)


def test_serve_runs_a_tree_policy_and_refuses_it_on_vllm(tmp_path):
    eagle = os.path.join(ROOT, "configs", "scenarios", "h100-llama8b-eagle.toml")
    # 30 requests a replication, no plots: the point is the policy runs (and beats no
    # speculation, by ~45% TPOT) and the refusal
    base = ["serve", "--scenario", eagle, "--rates", "4", "--requests", "30",
            "--replications", "2", "--quality-mode", "eagle_mtbench", "--no-plots"]
    done = run_captured([*base, "--engine", "vllm-v1", "--policies", "none,tree:4:2:8",
                         "--out", str(tmp_path / "v")])
    assert done.returncode == 2 and "engine profile vllm-v1 verifies chains only" in done.stderr
    done = run_captured([*base, "--engine", "sglang", "--policies", "none,fixed:4,tree:4:2:8",
                         "--out", str(tmp_path / "s")])
    assert done.returncode == 0, done.stderr
    df = pd.read_csv(tmp_path / "s" / "results" / "serving.csv").set_index("policy")
    assert set(df.index) == {"none", "fixed:4", "tree:4:2:8"}
    assert df.loc["tree:4:2:8", "tpot_p50_s"] < df.loc["none", "tpot_p50_s"]


def test_serve_refuses_a_tree_on_a_chains_only_profile_before_any_costing(monkeypatch):
    """The refusal comes before the deployments and the steady-state closed form are computed
    (they take seconds): a bad input answers at once."""
    from src.config import ConfigError
    from src.online import study
    from src.online.cli import config_from_args, make_parser
    eagle = os.path.join(ROOT, "configs", "scenarios", "h100-llama8b-eagle.toml")
    cfg = config_from_args(make_parser().parse_args(
        ["--scenario", eagle, "--policies", "none,tree:5:4:8", "--rates", "1"]))

    def costed(*a, **k):
        raise AssertionError("the deployments were built before the policies were checked")
    monkeypatch.setattr(study, "deployments", costed)
    with pytest.raises(ConfigError, match="engine profile vllm-v1 verifies chains only"):
        study.prepare(cfg)


def test_serving_tree_draw_matches_the_closed_form():
    from src.online.counter_rng import uniform_open_closed
    from src.treeshape.siblings import child_probabilities
    from src.treeshape.tree import expected_tokens
    from src.treesim.serve import mode_tree
    from src.treesim.serving import accepted_depth, tree_thresholds
    sh = parse_shape("5:4:8")
    alpha = np.full((1, 200_000), 0.75)
    thr = tree_thresholds(sh, alpha, None)[0]
    u = uniform_open_closed(np.arange(alpha.size, dtype=np.uint64) * np.uint64(7919),
                            np.zeros(alpha.size, np.int64))
    k = accepted_depth(u, thr)
    tree = mode_tree(sh, 0.75, None, SIBLINGS)
    q = child_probabilities(np.full(sh.steps, 0.75), SIBLINGS.shares, sh.topk)
    expected = expected_tokens(tree, q) - 1
    assert abs(k.mean() - expected) < 4 * k.std() / np.sqrt(k.size)


def test_a_chain_written_as_a_tree_policy_is_the_fixed_gamma():
    from src.online.policies import BatchSchedule, FixedGamma, FixedTree, parse_policies
    sched = BatchSchedule(((1, 1, 1),), 1)
    chain, tree = parse_policies("tree:3:1:4,tree:5:4:8", 1, 8, sched)
    assert chain == FixedGamma(3) and isinstance(tree, FixedTree) and tree.name == "tree:5:4:8"
    from src.config import ConfigError
    with pytest.raises(ConfigError, match="exceeds the K"):
        parse_policies("tree:2:2:9", 1, 8, sched)


def test_moe_tree_verification_is_the_target_pass_of_its_tokens():
    """An MoE target's tree verification is its target pass over the B x N tokens (the experts
    they touch included), plus only the engine's tree extras (none for the ideal engine)."""
    ideal = HardwareCostModel.from_presets("h100-sxm", "qwen3-30b-a3b-fp8",
                                           draft="qwen3-30b-a3b-eagle3", engine="ideal")
    n, ctx = np.array([1, 8, 32]), np.array([2000, 16000, 64000])
    for s in ("3:2:6", "4:4:16", "6:8:32"):
        shape = parse_shape(s)
        assert np.array_equal(verify_ms(ideal, shape, n, ctx),
                              ideal.target_pass_time_totals(n, ctx, shape.tokens))
    # more tokens touch more experts: at batch 1 the 32-token tree costs more than 4 tokens
    # by more than a dense 8B's does (weights of the touched experts are read once per pass)
    dense = HardwareCostModel.from_presets("h100-sxm", "llama-3.1-8b", draft="eagle",
                                           engine="ideal")
    one, c = np.array([1]), np.array([2000])

    def growth(cost):
        return float(verify_ms(cost, parse_shape("6:8:32"), one, c)[0]
                     / verify_ms(cost, parse_shape("2:2:4"), one, c)[0])
    assert growth(ideal) > growth(dense)


def test_tree_grid_through_an_executor_gives_the_same_rows():
    """run_grid's executor path (one task per batch, mode, serving mode) sweeps the tree shapes
    too, with the same numbers as the local sweep (every block has its own stream)."""
    from dataclasses import replace

    from src.config import StudyConfig
    from src.costmodel import FlatCostModel
    from src.executor import LocalExecutor
    from src.reporting import csv_bytes
    from src.sweep import run_grid
    cfg = replace(StudyConfig(), batch_sizes=(1, 8), gammas=(2,), trees=(TreeShape(3, 2, 6),),
                  quality_modes=("homogeneous_good",), serving_modes=("continuous_refill",))
    cost = FlatCostModel(0.2)
    local = run_grid(cfg, cost)
    assert set(local.tree_topk) == {1, 2}
    assert csv_bytes(run_grid(cfg, cost, executor=LocalExecutor(2))) == csv_bytes(local)


@pytest.mark.parametrize("profile, reason", [
    ("vllm-v1", "PR #42121 removed tree attention"),
    ("vllm-2024", "vLLM v0.6 scores one proposal per sequence"),
    ("sglang-spec-v2", "Spec v2 currently only supports topk = 1"),
])
def test_a_chains_only_refusal_gives_that_profiles_reason(profile, reason):
    """Each chains-only profile's refusal cites its own engine's source, not vLLM V1's for all."""
    from src.config import ConfigError
    from src.treesim.costs import check_engines_verify
    with pytest.raises(ConfigError) as err:
        check_engines_verify([parse_shape("3:2:6")], [profile], "--trees")
    assert reason in str(err.value) and f"engine profile {profile} verifies chains only" in str(
        err.value)


def test_every_engine_profile_says_whether_it_verifies_trees():
    """tree_engines.toml lists each profile of engines.toml as tree-verifying or chains-only."""
    from src.costmodel.engines import ENGINE_PROFILES_FILE as ENGINES_FILE
    from src.input_files import read_toml
    from src.treesim.costs import TREE_ENGINES_FILE
    profiles = set(read_toml(ENGINES_FILE, "engines")["engines"])
    trees = read_toml(TREE_ENGINES_FILE, "tree engines")
    assert profiles == set(trees["engines"]) | set(trees["chains_only"])


def test_a_best_tree_at_the_edge_of_the_tree_grid_is_flagged():
    """As a best gamma at the top of the gamma grid is: the committed tree study's best at batch 1
    is its largest tree, 8:8:64; from batch 16 on its best trees lie inside the grid."""
    from src.trees.report import best_rows, edge_lines
    rows = pd.read_csv(os.path.join(ROOT, "studies", "trees", "results", "results.csv"))
    rows = rows[(rows.engine_profile == "sglang") & (rows.quality_mode == "eagle_mtbench")]
    lines = edge_lines(best_rows(rows), rows)
    assert len(lines) == 1 and "8:8:64 at batch 1" in lines[0] and "largest N 64" in lines[0]
    large = rows[rows.batch_size >= 16]
    assert edge_lines(best_rows(large), large) == []
