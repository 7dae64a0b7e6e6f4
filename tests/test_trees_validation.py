"""The tree-vs-chain validation (src/trees/validation.py, design.md section 18): each source's
published inputs pinned with the source beside them, and properties the model must show whatever
the sources say. design.md holding the printed tables is checked in tests/test_trees_study.py."""
import pytest

from src.trees import validation as v
from src.treeshape.shape import TreeShape


def test_eagle1_inputs_are_the_papers():
    vicuna, llama70 = v.EAGLE_ROWS
    # EAGLE-1 (arXiv 2401.15077) Table 5, MT-bench, T = 0: Vicuna 7B tau 3.20 without tree
    # attention, 3.94 with (read via a summary of the tables, design.md [unsure])
    assert (vicuna.tau_chain, vicuna.tau_tree) == (3.20, 3.94)
    # Table 7, LLaMA2-Chat 70B at batch 1: 3.01x; SafeAILab/EAGLE#5: "4x A100 40G GPUs, achieving
    # a speedup of 3.01x"; section 4.4: "4 A100 (40G) GPUs totaling 160G"
    assert llama70.published_tree[0] == 3.01
    assert (llama70.setup.gpu, llama70.setup.layer_split_gpus) == ("a100-40gb-sxm", 4)
    # section 4.4: Vicuna 7B "operating under a memory constraint of a single RTX 3090 with 24G"
    assert (vicuna.setup.gpu, vicuna.setup.layer_split_gpus) == ("rtx-3090", 1)
    rtx = v.cost_model(vicuna.setup).gpu
    assert (rtx.memory_gb, rtx.memory_bandwidth_gb_per_s) == (24.0, 936.0)


def test_eagle1_tree_is_the_released_codes():
    # SafeAILab/EAGLE model/choices.py mc_sim_7b_63 (v1.1): 25 drafts, depth 5, at most 4 children
    assert len(v.EAGLE_TREE_CHOICES) == 25 == len(set(v.EAGLE_TREE_CHOICES))
    assert v.EAGLE_TREE == TreeShape(5, 4, 26)
    # every node's parent is in the tree (the paths are closed under prefixes)
    nodes = set(v.EAGLE_TREE_CHOICES)
    assert all(c[:-1] in nodes for c in nodes if len(c) > 1)


def test_eagle1_model_tree_beats_its_chain_at_batch_1_and_loses_ground_with_batch():
    # published: Figure 7's tree speedups (2.78-3.07x) all lie above its chain speedups
    # (2.27-2.66x); Table 7's batch-4 speedups lie below batch 1's
    assert v.EAGLE_FIG7_TREE_RANGE[0] > v.EAGLE_FIG7_CHAIN_RANGE[1]
    for r in v.eagle_rows():
        assert r["tree"][0] > r["chain_b1"] > 1.0
        assert r["tree"][-1] < r["tree"][0]
        assert r["published_tree"][-1] < r["published_tree"][0]


def test_layer_split_prices_one_gpu_running_every_layer():
    # device_map="auto": four GPUs in sequence cost one GPU's time for all layers (no TP gain)
    split = v.cost_model(v.Setup("a100-40gb-sxm", "llama-2-70b", "pytorch-eager",
                                 layer_split_gpus=4))
    tp4 = v.cost_model(v.Setup("a100-40gb-sxm", "llama-2-70b", "pytorch-eager", tp=4))
    assert v.greedy_ms(split, 1) > 2.0 * v.greedy_ms(tp4, 1)
    with pytest.raises(ValueError, match="tp"):
        v.cost_model(v.Setup("a100-40gb-sxm", "llama-2-70b", "pytorch-eager"))


def test_vllm_22752_inputs_are_the_prs():
    # vllm-project/vllm PR #22752, "chains vs tree draft structures using the same Tree
    # Attention backend", mt-bench, BS=1: mean acceptance length 2.05 chain, 2.37 tree; output
    # token throughput 114.27 and 128.63 tok/s
    assert v.VLLM_PUBLISHED[1] == (2.05, 2.37, 114.27, 128.63)
    assert sorted(v.VLLM_PUBLISHED) == [1, 8, 16]
    # the PR's tree [(0,), (1,), (0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]: 9 verified
    assert v.VLLM_TREE == TreeShape(2, 3, 9)


def test_vllm_22752_model_tree_wins_at_batch_1_and_its_edge_shrinks_with_batch():
    rows = v.vllm_rows()
    # published: the tree's throughput is above the chain's at BS=1 and its edge shrinks to 16
    assert rows[0]["published_ratio"] > 1.0
    assert rows[0]["published_ratio"] > rows[-1]["published_ratio"]
    # the model: same side of 1 at batch 1, and the same direction with batch (more B x N tokens)
    assert rows[0]["model_ratio"] > 1.0
    assert rows[0]["model_ratio"] > rows[1]["model_ratio"] > rows[-1]["model_ratio"]
    # a tree step costs more than the chain of its depth (more tokens, same passes) once the
    # batch is large enough (published: 1.03-1.11)...
    assert rows[-1]["model_step_cost_ratio"] > 1.0
    # ...but at batch 1 vLLM 0.24.0's measured H100 GEMMs run 9 rows faster than 3 (its
    # gate/up 4096 -> 28672 and down 14336 -> 4096 rows, gemm_perf.parquet), so the model's tree
    # step is cheaper than the chain's there: a finding from the tables, not physics
    k = v.cost_model(v.VLLM_SETUP).kernels.kernels
    assert k.gemm_ms(9, 28672, 4096) < k.gemm_ms(3, 28672, 4096)
    assert k.gemm_ms(9, 4096, 14336) < k.gemm_ms(3, 4096, 14336)
    assert rows[0]["model_step_cost_ratio"] < 1.0


def test_eagle1_output_files_inputs_and_the_models_side_of_them():
    o = v.EAGLE70_OUTPUTS
    # SafeAILab/EAGLE outputs/llama-2-chat-70b-fp16-{ea,base}-in-temperature-0.0.jsonl (added
    # 2023-12-13): sums of new_tokens, idxs + 1 and wall_time over the 160 turns
    assert (o["tokens"], o["verifications"], o["wall_s"]) == (55668, 15377, 2554.77)
    assert (o["greedy_tokens"], o["greedy_wall_s"]) == (48165, 6425.61)
    r = v.eagle_outputs_row()
    assert r["tau"] == pytest.approx(3.620, abs=1e-3)
    # measured and modelled alike: a tree step costs more than a greedy pass but less than tau
    # of them (so the tree speeds decoding up)
    for tree_tps, greedy_tps in ((r["tree_tps"], r["greedy_tps"]),
                                 (r["model_tree_tps"], r["model_greedy_tps"])):
        assert greedy_tps < tree_tps < r["tau"] * greedy_tps


def test_specdecode_bench_inputs_are_the_sites():
    qwen, llama = v.SDB_ROWS
    # SpecDecode-Bench site (specdecode-bench.github.io index.md, "Tree vs. Chain Verification"):
    # Qwen3-8B / GSM8K at batch 1, chain k=3 -> tree k=21: 1.65x -> 1.85x, accepted length
    # 2.25 -> 2.92, accept rate 0.415 -> 0.095
    assert (qwen.taus[0], qwen.taus[2]) == (2.25, 2.92)
    assert (qwen.published[0][0], qwen.published[2][0]) == (1.65, 1.85)
    assert (qwen.setup.gpu, qwen.setup.engine, llama.setup.tp) == ("h100-sxm", "sglang", 4)
    # the shapes follow from SGLang's accept rate (tau - 1) / (N - 1) with N = k for the trees
    chain, _, k21 = v.SDB_SHAPES
    assert (qwen.taus[0] - 1) / chain.drafts == pytest.approx(0.415, abs=0.002)
    assert (qwen.taus[2] - 1) / k21.drafts == pytest.approx(0.095, abs=0.002)
    assert (qwen.taus[2] - 1) / (k21.drafts + 1) != pytest.approx(0.095, abs=0.002)


# The batch from which the chain beats the 21-token tree, as the model puts it. Published: 16 for
# both rows. Since vllm-v1/SGLang GEMMs are priced from the per-GPU refit to vLLM's measured
# tables (issue 23), Qwen3-8B's chain at batch 16 is modelled at 1.26x against 1.60x measured
# (its tree 1.31x against 1.34x), so the model's crossing moved to 64: a finding reported in
# design.md's tree-validation block, pinned here so that a change either way is seen.
MODEL_CHAIN_WINS_FROM = {"Qwen3-8B + EAGLE-3, GSM8K, 1x H100": 64,
                         "Llama3-70B + EAGLE, ShareGPT, 4x H100 TP 4": 16}


def test_specdecode_bench_big_tree_loses_to_the_chain_from_batch_16_measured_and_as_modelled():
    rows = v.sdb_rows()
    big = v.SDB_SHAPES[2]
    for r in v.SDB_ROWS:
        assert v.first_batch_chain_wins(rows, r.label, big, "published") == 16
        assert v.first_batch_chain_wins(rows, r.label, big, "model") == \
            MODEL_CHAIN_WINS_FROM[r.label]
        tree = next(x for x in rows if x["label"] == r.label and x["shape"] == big)
        # and it falls below greedy's throughput by batch 64, measured and modelled
        assert tree["published"][2] < 1.0 and tree["model"][2] < 1.0


def test_host_terms_diagnostic_only_removes_time():
    # the diagnostic sets the engine's host terms to 0: every speedup can only rise, and at
    # batch 1 by less than at 128 (the per-sequence terms grow with the batch)
    for r in v.sdb_rows():
        assert all(g >= m for g, m in zip(r["gpu_only"], r["model"]))
        if r["shape"].is_chain:
            assert r["gpu_only"][-1] / r["model"][-1] > r["gpu_only"][0] / r["model"][0]
    cost = v.cost_model(v.SDB_ROWS[0].setup)
    assert cost.engine.step_cpu_per_seq_ms > 0.0
    assert v.cost_model(v.Setup("h100-sxm", "qwen3-8b", "sglang", draft="qwen3-8b-eagle3",
                                host_work=False)).engine.step_cpu_per_seq_ms == 0.0


def test_eagle1_sensitivity_is_the_same_card_at_twice_the_tensor_peak():
    base, alt = (v.cost_model(v.Setup(g, "llama-2-7b", "pytorch-eager"))
                 for g in ("rtx-3090", "rtx-3090-fp16-accumulate"))
    assert alt.gpu.dense_bf16_tflops == 2 * base.gpu.dense_bf16_tflops
    assert alt.gpu.memory_bandwidth_gb_per_s == base.gpu.memory_bandwidth_gb_per_s
    row = v.eagle_rows()[0]
    # more compute can only help, and helps the more tokens a step verifies (batch 4 over 1)
    assert all(s >= m for s, m in zip(row["sensitivity"], row["tree"]))
    assert row["sensitivity"][-1] / row["tree"][-1] > row["sensitivity"][0] / row["tree"][0]
