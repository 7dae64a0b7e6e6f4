"""The tree's own per-step tensor ops in EAGLE's reference implementation (pytorch-* profiles):
counted as data in src/presets/tree_engines.toml, priced at pytorch-eager's eager launch cost."""
import os
import subprocess
import sys

import numpy as np
import pytest

import src.treesim.costs as costs
from src.costmodel import HardwareCostModel
from src.costmodel.engines import engine_profile
from src.costmodel.presets import CostModelInputError
from src.costmodel.roofline import kernel_fixed_s
from src.treeshape.shape import TreeShape
from src.treesim.costs import TREE_ENGINES_FILE, tree_eager_ms, tree_engines, verify_ms

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EAGLE1_TREE = TreeShape(5, 4, 23)  # EAGLE-1's 23-node tree of depth 5 (S 5, K 4)


def eagle1_cost(engine):
    return HardwareCostModel.from_presets("a100-80gb-sxm", "llama-2-7b", draft="eagle",
                                          engine=engine)


def test_counts_come_from_the_data_file():
    # SafeAILab/EAGLE cb7e084 (tree_engines.toml lists each op): fixed 66 = eagenerate 3 +
    # tree_decoding 8 + evaluate_posterior 9 + update_inference_inputs 10 + topK_genrate 36; per
    # draft pass after the first 20 (11 of them the draft forward's causal + tree mask); per tree
    # token 1 (the CPU mask loop). pytorch-graphs: less the in-forward mask ops (5, 11).
    table = tree_engines()
    eager, graphs = table["pytorch-eager"], table["pytorch-graphs"]
    assert (eager.tree_eager_kernels_fixed, eager.tree_eager_kernels_per_draft_pass,
            eager.tree_eager_kernels_per_token) == (66, 20, 1)
    assert (graphs.tree_eager_kernels_fixed, graphs.tree_eager_kernels_per_draft_pass,
            graphs.tree_eager_kernels_per_token) == (61, 9, 1)
    assert eager.eager_kernels(EAGLE1_TREE) == 66 + 4 * 20 + 22 == 168
    assert graphs.eager_kernels(EAGLE1_TREE) == 61 + 4 * 9 + 22 == 119
    assert eager.eager_kernels(TreeShape.chain(5)) == 0  # chains unchanged
    for name in ("sglang", "ideal"):  # sglang's eager ops are spec_step_eager_kernels
        assert table[name].eager_kernels(EAGLE1_TREE) == 0


@pytest.mark.parametrize("engine", ["pytorch-eager", "pytorch-graphs"])
@pytest.mark.parametrize("batch", [1, 4])
def test_tree_costs_its_chain_of_the_same_n_plus_exactly_the_eager_work(monkeypatch, engine,
                                                                        batch):
    cost = eagle1_cost(engine)
    e = costs.tree_engine(engine)
    k = e.eager_kernels(EAGLE1_TREE)
    p = engine_profile("pytorch-eager")
    kfix = kernel_fixed_s(cost.gpu, cost.params)
    a = k * (kfix + p.launch_gap_us_per_kernel * 1e-6)
    b = k * p.cpu_launch_us_per_kernel * 1e-6
    expected_ms = (a ** p.launch_overlap_p + b ** p.launch_overlap_p) ** (
        1 / p.launch_overlap_p) * 1e3
    assert tree_eager_ms(cost, e, EAGLE1_TREE) == pytest.approx(expected_ms, rel=1e-12)
    # the path copy off, so the tree's only extra over the chain of the same N is the eager work
    monkeypatch.setattr(costs, "tree_engine", lambda name: costs.TreeEngine(
        verifies_trees=True, tree_eager_kernels_fixed=e.tree_eager_kernels_fixed,
        tree_eager_kernels_per_draft_pass=e.tree_eager_kernels_per_draft_pass,
        tree_eager_kernels_per_token=e.tree_eager_kernels_per_token))
    n, ctx = np.array([batch]), np.array([batch * 512])
    tree = float(verify_ms(cost, EAGLE1_TREE, n, ctx)[0])
    chain = float(verify_ms(cost, TreeShape.chain(EAGLE1_TREE.tokens - 1), n, ctx)[0])
    assert tree - chain == pytest.approx(expected_ms, rel=1e-9)
    assert expected_ms > 1.0  # 168 ops at ~26 us each: milliseconds, not noise


@pytest.mark.parametrize("engine", ["sglang", "ideal"])
def test_sglang_and_ideal_trees_verify_at_the_plain_pass_price(engine):
    cost = eagle1_cost(engine)
    n, ctx = np.array([1, 4]), np.array([512, 2048])
    plain = cost.target_pass_time_totals(n, ctx, EAGLE1_TREE.tokens)
    np.testing.assert_array_equal(verify_ms(cost, EAGLE1_TREE, n, ctx), plain)


def _with_value(tmp_path, value):
    text = TREE_ENGINES_FILE.read_text(encoding="utf-8")
    old = "tree_eager_kernels_fixed = 66"
    assert old in text
    path = tmp_path / "tree_engines.toml"
    path.write_text(text.replace(old, f"tree_eager_kernels_fixed = {value}"), encoding="utf-8")
    return path


@pytest.mark.parametrize("value", ["-1", "2.5", "true", '"66"'])
def test_a_bad_kernel_count_is_refused_naming_the_field(tmp_path, value):
    path = _with_value(tmp_path, value)
    with pytest.raises(CostModelInputError, match="engines.pytorch-eager.tree_eager_kernels_fixed"):
        tree_engines(path)
    code = ("import sys; from pathlib import Path; import src.treesim.costs as c; "
            "c.TREE_ENGINES_FILE = Path(sys.argv[1]); import run; "
            "sys.exit(run.main(sys.argv[2:]))")
    done = subprocess.run([sys.executable, "-c", code, str(path), "--trees", "5:4:8", "--out",
                           str(tmp_path / "o")], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "tree_eager_kernels_fixed" in done.stderr and "integer >= 0" in done.stderr
