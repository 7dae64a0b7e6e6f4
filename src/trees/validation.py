"""Trees against published tree-vs-chain measurements, fitted to nothing (design.md, section 18).

Each check takes the accept lengths a source reports (tokens per verification, tau) as given and
asks the hardware cost model for the step times, at the source's batch sizes and on its GPU:
speedup over greedy = tau x t_greedy / (t_verify(N) + t_draft(S)), and a tree's throughput over
its chain's = (tau_tree / tau_chain) x (t_chain step / t_tree step); steady state at a fixed
context (closed form, no simulation). Nothing here is tuned; a mismatch is reported as it is.
The sources, their figures and where each was read are in SOURCES below and in design.md.

python -m src.trees.validation prints the tables design.md shows (tests/test_trees_study.py checks
that design.md holds exactly this output).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from src.costmodel import HardwareCostModel
from src.costmodel.drafts import DraftSpec
from src.costmodel.engines import engine_profile
from src.costmodel.presets import load_presets
from src.kernels.costmodel import AUTO, with_kernels
from src.treeshape.shape import TreeShape
from src.treesim.costs import steady_greedy_ms, steady_step_ms

VALIDATION_PRESETS_FILE = (Path(__file__).resolve().parents[1] / "presets"
                           / "validation_presets.toml")
CONTEXT_TOKENS = 512  # MT-bench: short prompts and answers of a few hundred tokens [assumption]


@dataclass(frozen=True)
class Setup:
    """Where a source measured: GPU preset, target preset, TP degree, GPUs the layers are split
    over one after the other (Hugging Face device_map="auto": a pass takes one GPU's time for all
    layers; modelled as one GPU holding the memory of all of them), engine profile."""

    gpu: str
    target: str
    engine: str
    tp: int = 1
    layer_split_gpus: int = 1
    draft: str = "eagle"  # "eagle", "eagle3" (a head derived from the target) or a head's preset
    host_work: bool = True  # False: the engine's host terms (HOST_TERMS) set to 0, a diagnostic


# The engine profile's host (CPU) terms of a step and of a draft pass (src/presets/engines.toml)
HOST_TERMS = ("step_cpu_fixed_ms", "step_cpu_per_seq_ms", "draft_pass_cpu_fixed_ms",
              "draft_pass_cpu_per_seq_ms", "kv_bookkeeping_per_seq_ms",
              "rejection_sampling_per_position_ms")


def cost_model(setup: Setup) -> HardwareCostModel:
    presets = load_presets([VALIDATION_PRESETS_FILE])
    engine = engine_profile(setup.engine)
    if not setup.host_work:
        engine = replace(engine, **{term: 0.0 for term in HOST_TERMS})
    gpu = presets.gpu(setup.gpu)
    if setup.layer_split_gpus > 1:
        gpu = replace(gpu, memory_gb=gpu.memory_gb * setup.layer_split_gpus)
    if setup.draft in ("eagle", "eagle3"):
        draft = DraftSpec(kind=setup.draft, tp=setup.tp)
    else:  # an EAGLE-3 head's preset
        draft = DraftSpec(kind="eagle3", model=presets.model(setup.draft, "draft"), tp=setup.tp)
    cost = HardwareCostModel(
        gpu=gpu, target=presets.model(setup.target, "target"), tp=setup.tp,
        draft=draft, params=presets.params,
        allreduce=presets.allreduce, engine=engine,
        attention_fits=presets.attention)
    return with_kernels(cost, AUTO, strict=False)  # as a scenario prices it


def step_ms(cost, shape: TreeShape, batch: int, context: int = CONTEXT_TOKENS) -> float:
    """One speculative step of `batch` sequences: verification of N tokens + S draft passes."""
    return steady_step_ms(cost, shape, batch, context)


def greedy_ms(cost, batch: int, context: int = CONTEXT_TOKENS) -> float:
    return steady_greedy_ms(cost, batch, context)


def shape_of(choices) -> TreeShape:
    """A static tree given as its nodes' paths (EAGLE's and vLLM's notation: (0, 1) is the second
    child of the root's first child) as SGLang's (S, K, N): S = its depth (one draft pass per
    level), K = the most children of any node (the top-k a draft pass takes), N = its nodes + the
    root. The costs are S passes of at most K tokens per sequence and N verified."""
    paths = [tuple(c) for c in choices]
    children: dict[tuple, int] = {}
    for c in paths:
        children[c[:-1]] = children.get(c[:-1], 0) + 1
    return TreeShape(max(len(c) for c in paths), max(children.values()), len(paths) + 1)


def speedup(cost, shape: TreeShape, tau: float, batch: int, context: int = CONTEXT_TOKENS):
    """tau x t_greedy / t_step: tokens per second over greedy decoding's, same batch."""
    return tau * greedy_ms(cost, batch, context) / step_ms(cost, shape, batch, context)


# --- EAGLE-1 (Li et al., ICML 2024, arXiv 2401.15077), MT-bench, T = 0 --------------------------
# tau: Table 5 (tau with and without tree attention; read via a summary of the paper's tables
# [unsure]: the paper's own table was not reachable here). Figure 7: speedups with / without tree
# attention, a bar chart; only the range over its six models is used (with 2.78-3.07x, without
# 2.27-2.66x; from the same summary [unsure]). Table 7: tree speedup at batch 1-4 and, section 4.4,
# the GPUs: "a single RTX 3090 with 24G" for Vicuna 7B, "4 A100 (40G) GPUs totaling 160G" for
# LLaMA2-Chat 70B (the paper's sentences as quoted on ri.k117.org's page for the ICML paper; the
# maintainer's SafeAILab/EAGLE#5: LLaMA2-Chat 70B "on 4x A100 40G GPUs, achieving a speedup of
# 3.01x", Table 7's batch-1 figure). EAGLE's code places the 70B with device_map="auto" (README,
# "Inference"): its layers split over the four GPUs, not tensor parallel.
# Tree: mc_sim_7b_63 of the released code (SafeAILab/EAGLE model/choices.py at v1.1, 2024-02-06,
# the same in the batch > 1 branch bsne1): 25 drafts in 5 levels (4, 8, 8, 3, 2), each level
# drafted by one pass over at most 4 nodes, plus the root = 26 tokens verified: (5, 4, 26).
# Chain: 5 drafts (5, 1, 6).
EAGLE_TREE_CHOICES = (
    (0,), (1,), (2,), (3,), (0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (2, 0), (2, 1), (3, 0),
    (0, 0, 0), (0, 0, 1), (0, 0, 2), (0, 1, 0), (0, 1, 1), (0, 2, 0), (0, 2, 1), (1, 0, 0),
    (0, 0, 0, 0), (0, 0, 0, 1), (0, 0, 0, 2), (0, 0, 0, 0, 0), (0, 0, 0, 0, 1))
EAGLE_CHAIN = TreeShape.chain(5)
EAGLE_TREE = shape_of(EAGLE_TREE_CHOICES)
EAGLE_BATCHES = (1, 2, 3, 4)


@dataclass(frozen=True)
class EagleRow:
    label: str
    setup: Setup
    tau_chain: float  # Table 5, without tree attention (chain of 5 drafts)
    tau_tree: float  # Table 5, with tree attention
    published_tree: tuple[float, ...]  # Table 7, speedup at batch 1, 2, 3, 4
    sensitivity: Setup | None = None  # the same run on an alternative reading of the GPU


EAGLE_ROWS = (
    EagleRow("Vicuna-7B (llama-2-7b shape), 1x RTX 3090",
             Setup("rtx-3090", "llama-2-7b", "pytorch-eager"),
             3.20, 3.94, (2.90, 2.87, 2.65, 2.76),
             Setup("rtx-3090-fp16-accumulate", "llama-2-7b", "pytorch-eager")),
    EagleRow("LLaMA2-Chat-70B, 4x A100 40GB, layers split",
             Setup("a100-40gb-sxm", "llama-2-70b", "pytorch-eager", layer_split_gpus=4),
             3.12, 3.81, (3.01, 2.81, 2.50, 2.40)),
)
EAGLE_FIG7_CHAIN_RANGE = (2.27, 2.66)
EAGLE_FIG7_TREE_RANGE = (2.78, 3.07)


def eagle_rows() -> list[dict]:
    out = []
    for r in EAGLE_ROWS:
        cost = cost_model(r.setup)
        out.append({"label": r.label, "tau_chain": r.tau_chain, "tau_tree": r.tau_tree,
                    "chain_b1": speedup(cost, EAGLE_CHAIN, r.tau_chain, 1),
                    "tree": [speedup(cost, EAGLE_TREE, r.tau_tree, b) for b in EAGLE_BATCHES],
                    "published_tree": r.published_tree,
                    "sensitivity": None if r.sensitivity is None else [
                        speedup(cost_model(r.sensitivity), EAGLE_TREE, r.tau_tree, b)
                        for b in EAGLE_BATCHES]})
    return out


def eagle_table() -> str:
    lines = ["| target, GPU | tau chain / tree (input, Table 5) | model: chain, tree at batch 1 | "
             "published (Fig. 7 range) chain, tree | model: tree at batch 1, 2, 3, 4 | "
             "published (Table 7) | model: tree at batch 1-4, GPU at its FP16-accumulate peak "
             "(diagnostic) |",
             "|---|---|---|---|---|---|---|"]
    for r in eagle_rows():
        lines.append(
            f"| {r['label']} | {r['tau_chain']:.2f} / {r['tau_tree']:.2f} | "
            f"{r['chain_b1']:.2f}x, {r['tree'][0]:.2f}x | "
            f"{EAGLE_FIG7_CHAIN_RANGE[0]:.2f}-{EAGLE_FIG7_CHAIN_RANGE[1]:.2f}x, "
            f"{EAGLE_FIG7_TREE_RANGE[0]:.2f}-{EAGLE_FIG7_TREE_RANGE[1]:.2f}x | "
            + ", ".join(f"{s:.2f}" for s in r["tree"]) + " | "
            + ", ".join(f"{s:.2f}" for s in r["published_tree"]) + " | "
            + ("-" if r["sensitivity"] is None else ", ".join(f"{s:.2f}" for s in r["sensitivity"]))
            + " |")
    return "\n".join(lines)


# EAGLE's own output files of the LLaMA2-Chat 70B run (SafeAILab/EAGLE outputs/*.jsonl, added
# 2023-12-13, deleted 2024-04-11; the maintainer's SafeAILab/EAGLE#5 of 2023-12-12 names the run:
# "4x A100 40G GPUs ... 3.01x ... We have uploaded the two output files"): MT-bench, T = 0, batch
# 1, the tree mc_sim_7b_63 (model/choices.py at that commit). Per turn the files record wall_time
# and idxs (the last step's 0-based index: idx + 1 verifications, or greedy passes); the EAGLE file
# also new_tokens (tokens accepted, the bonus token included). Sums over the 80 questions x 2
# turns: EAGLE 55,668 tokens in 15,377 verifications and 2,554.77 s; greedy 48,165 tokens (one per
# pass) in 6,425.61 s. The prompt's prefill is inside the wall times (not modelled).
EAGLE70_OUTPUTS = {"tokens": 55668, "verifications": 15377, "wall_s": 2554.77,
                   "greedy_tokens": 48165, "greedy_wall_s": 6425.61}


def eagle_outputs_row() -> dict:
    o = EAGLE70_OUTPUTS
    cost = cost_model(EAGLE_ROWS[1].setup)
    tau = o["tokens"] / o["verifications"]
    greedy_tps, tree_tps = o["greedy_tokens"] / o["greedy_wall_s"], o["tokens"] / o["wall_s"]
    model_greedy_tps = 1e3 / greedy_ms(cost, 1)
    model_tree_tps = tau * 1e3 / step_ms(cost, EAGLE_TREE, 1)
    return {"tau": tau, "greedy_tps": greedy_tps, "tree_tps": tree_tps,
            "model_greedy_tps": model_greedy_tps, "model_tree_tps": model_tree_tps,
            "speedup": tree_tps / greedy_tps, "model_speedup": model_tree_tps / model_greedy_tps}


def eagle_outputs_table() -> str:
    r = eagle_outputs_row()
    return "\n".join([
        "| run | tau (input: tokens / verifications) | greedy tok/s: measured, model | "
        "EAGLE tok/s: measured, model | speedup: measured, model |",
        "|---|---|---|---|---|",
        f"| {EAGLE_ROWS[1].label}, batch 1 | {r['tau']:.2f} | "
        f"{r['greedy_tps']:.2f}, {r['model_greedy_tps']:.2f} | "
        f"{r['tree_tps']:.2f}, {r['model_tree_tps']:.2f} | "
        f"{r['speedup']:.2f}x, {r['model_speedup']:.2f}x |"])


# --- vLLM V1 tree attention, vllm-project/vllm PR #22752 (not merged), mt-bench ------------------
# The PR's description, its table "chains vs tree draft structures using the same Tree Attention
# backend" (TREE_ATTN: Triton unified attention with a query-on-query bias): mean acceptance
# length and output token throughput at BS = 1, 8, 16. The PR's test setup (same description):
# meta-llama/Llama-3.1-8B-Instruct + yuhuili/EAGLE-LLaMA3.1-Instruct-8B (an EAGLE-1 head), TP 1,
# tree [(0,), (1,), (0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]: 2 root children with 3
# children each, 8 drafts, depth 2, verified as 9 tokens. That the benchmark table used this tree,
# and the chain's length, are not stated [assumption: the same tree; a chain of its depth, 2
# drafts]; the GPU is not named [assumption: H100 SXM, the GPU of the vLLM V1 EAGLE benchmarks of
# the period, PR #16937]. Temperature not stated. Engine profile vllm-v1 (verification = a target
# pass over N tokens per sequence, no cascade pass, no path copy: tree_engines.toml lists vllm-v1
# as chain-only because today's vLLM is; here it prices the PR's branch).
# The tree modelled as (S, K, N) = (2, 3, 9): two draft passes, the second over K tokens per
# sequence (3, where vLLM's second level drafts from 2 nodes: one position per sequence
# overcharged), 9 tokens verified.
VLLM_SETUP = Setup("h100-sxm", "llama-3.1-8b", "vllm-v1")
VLLM_CHAIN = TreeShape.chain(2)
VLLM_TREE_CHOICES = ((0,), (1,), (0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2))
VLLM_TREE = shape_of(VLLM_TREE_CHOICES)
VLLM_OTHER_CHAINS = (TreeShape.chain(3), TreeShape.chain(4))  # the chain's length unknown: shown
# batch: (tau chain, tau tree, throughput chain tok/s, throughput tree tok/s), PR #22752's table
VLLM_PUBLISHED = {
    1: (2.05, 2.37, 114.27, 128.63),
    8: (2.06, 2.37, 847.38, 902.72),
    16: (2.05, 2.38, 1567.5, 1640.95),
}


def vllm_rows() -> list[dict]:
    cost = cost_model(VLLM_SETUP)
    out = []
    for batch, (tau_c, tau_t, thr_c, thr_t) in VLLM_PUBLISHED.items():
        chain = speedup(cost, VLLM_CHAIN, tau_c, batch)
        tree = speedup(cost, VLLM_TREE, tau_t, batch)
        out.append({"batch": batch, "tau_chain": tau_c, "tau_tree": tau_t,
                    "published_chain_tps": thr_c, "published_tree_tps": thr_t,
                    "published_ratio": thr_t / thr_c,
                    "published_step_cost_ratio": (tau_t / tau_c) / (thr_t / thr_c),
                    "model_ratio": tree / chain,
                    "model_step_cost_ratio": (step_ms(cost, VLLM_TREE, batch)
                                              / step_ms(cost, VLLM_CHAIN, batch)),
                    "other_chain_step_cost_ratios": [
                        step_ms(cost, VLLM_TREE, batch) / step_ms(cost, c, batch)
                        for c in VLLM_OTHER_CHAINS],
                    "chain": chain, "tree": tree})
    return out


def vllm_table() -> str:
    lines = ["| batch | tau chain / tree (input) | published throughput chain, tree (tok/s) | "
             "published tree / chain | model tree / chain | step cost tree / chain: published "
             "(implied), model | model step cost tree / chain of "
             + ", ".join(str(c.drafts) for c in VLLM_OTHER_CHAINS)
             + " (the chain's length unknown) | model speedup over greedy: chain, tree |",
             "|---|---|---|---|---|---|---|---|"]
    for r in vllm_rows():
        lines.append(
            f"| {r['batch']} | {r['tau_chain']:.2f} / {r['tau_tree']:.2f} | "
            f"{r['published_chain_tps']:.2f}, {r['published_tree_tps']:.2f} | "
            f"{r['published_ratio']:.3f} | {r['model_ratio']:.3f} | "
            f"{r['published_step_cost_ratio']:.3f}, {r['model_step_cost_ratio']:.3f} | "
            + ", ".join(f"{x:.3f}" for x in r["other_chain_step_cost_ratios"]) + " | "
            f"{r['chain']:.2f}x, {r['tree']:.2f}x |")
    return "\n".join(lines)


# --- SpecDecode-Bench (arXiv 2601.11580 v2, "Tree-Style Verification"; SGLang v0.5.9) ----------
# First-hand: the authors' site, SpecDecode-Bench/specdecode-bench.github.io index.md (2026-04-02),
# "Tree vs. Chain Verification" and its Figure 2 (assets/img/fig2.png): SGLang v0.5.9, H100 80GB
# (8B on one GPU, 70B at TP 4: the site's setup paragraph), depth 3, chain k = 3, trees k = 6
# (branching 2) and k = 21 (branching 4), FlashAttention-3 for the chain, FlashInfer for the trees,
# throughput with SD over without at batch 1, 16, 64, 128. The site's text gives Qwen3-8B / GSM8K
# at batch 1: speedup 1.65x chain, 1.85x k = 21; accepted length 2.25 and 2.92; accept rate 0.415
# and 0.095. The other batch-1 figures (k = 6 on Qwen3-8B: 2.51, 1.68x; Llama3-70B / ShareGPT:
# accepted length 2.29, 2.55, 2.93, speedup 1.81x, 1.90x, 2.03x) are the paper's as transcribed in
# a survey of its v2 [unsure: the paper itself not reachable here]; Figure 2 agrees with every one
# of those speedups. Batch 16, 64, 128: read off Figure 2 (pixel positions of the markers against
# the gridlines; about +-0.03). The figure's legend puts EAGLE-3 on the Qwen3-8B panels and EAGLE on
# the Llama3-70B ones (the site's text calls the Qwen3-8B run "EAGLE").
# Shapes: SGLang's accept rate is (accepted length - 1) / (N - 1), and the published pairs fit
# N = k for the trees (k = 21: 1.92 / 20 = 0.096, not 1.92 / 21 = 0.091), N = 4 for the chain:
# (3, 1, 4), (3, 2, 6), (3, 4, 21). Accepted lengths are given at batch 1 only [assumption: the same
# at every batch; the drafts do not depend on it]. Engine profile sglang: it prices the FA3 cascade
# pass for trees, where these trees ran on FlashInfer's one masked pass (a small overcharge).
SDB_BATCHES = (1, 16, 64, 128)
SDB_SHAPES = (TreeShape.chain(3), TreeShape(3, 2, 6), TreeShape(3, 4, 21))


@dataclass(frozen=True)
class SdbRow:
    label: str
    setup: Setup
    taus: tuple[float, ...]  # accepted length per shape of SDB_SHAPES, batch 1
    published: tuple[tuple[float, ...], ...]  # speedup per shape, at SDB_BATCHES


SDB_ROWS = (
    SdbRow("Qwen3-8B + EAGLE-3, GSM8K, 1x H100",
           Setup("h100-sxm", "qwen3-8b", "sglang", draft="qwen3-8b-eagle3"), (2.25, 2.51, 2.92),
           ((1.65, 1.60, 1.31, 1.22), (1.68, 1.50, 1.09, 1.04), (1.85, 1.34, 0.59, 0.56))),
    SdbRow("Llama3-70B + EAGLE, ShareGPT, 4x H100 TP 4",
           Setup("h100-sxm", "llama-3.1-70b", "sglang", tp=4), (2.29, 2.55, 2.93),
           ((1.81, 1.67, 1.39, 1.24), (1.90, 1.59, 1.14, 1.00), (2.03, 1.32, 0.54, 0.49))),
)


def sdb_rows() -> list[dict]:
    out = []
    for r in SDB_ROWS:
        cost = cost_model(r.setup)
        gpu_only = cost_model(replace(r.setup, host_work=False))
        for shape, tau, published in zip(SDB_SHAPES, r.taus, r.published):
            out.append({"label": r.label, "shape": shape, "tau": tau, "published": published,
                        "model": [speedup(cost, shape, tau, b) for b in SDB_BATCHES],
                        "gpu_only": [speedup(gpu_only, shape, tau, b) for b in SDB_BATCHES]})
    return out


def first_batch_chain_wins(rows: list[dict], label: str, shape: TreeShape, key: str):
    """The first batch of SDB_BATCHES at which the source's chain is at least as fast as `shape`
    (None: never within the batches)."""
    chain = next(r for r in rows if r["label"] == label and r["shape"].is_chain)[key]
    tree = next(r for r in rows if r["label"] == label and r["shape"] == shape)[key]
    return next((b for b, c, t in zip(SDB_BATCHES, chain, tree) if c >= t), None)


def sdb_table() -> str:
    rows = sdb_rows()
    lines = ["| target, data, GPU | shape | tau (input) | published speedup at batch "
             + ", ".join(map(str, SDB_BATCHES)) + " | model | model without the engine's host "
             "terms (diagnostic) | chain wins from batch: published, model, model without host "
             "terms |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        wins = "-"
        if not r["shape"].is_chain:
            wins = ", ".join(str(first_batch_chain_wins(rows, r["label"], r["shape"], k) or "never")
                             for k in ("published", "model", "gpu_only"))
        lines.append(f"| {r['label']} | {r['shape'].label} | {r['tau']:.2f} | "
                     + ", ".join(f"{x:.2f}" for x in r["published"]) + " | "
                     + ", ".join(f"{x:.2f}" for x in r["model"]) + " | "
                     + ", ".join(f"{x:.2f}" for x in r["gpu_only"]) + f" | {wins} |")
    return "\n".join(lines)


def table() -> str:
    """Every validation table, as design.md shows them."""
    return (f"EAGLE-1 (arXiv 2401.15077), profile pytorch-eager, chain {EAGLE_CHAIN.label}, tree "
            f"{EAGLE_TREE.label}:\n\n" + eagle_table()
            + "\n\nEAGLE's own output files of the 70B run (tree, batch 1):\n\n"
            + eagle_outputs_table()
            + "\n\nvLLM PR #22752 (TREE_ATTN for both; profile vllm-v1, H100 [assumption]), "
            f"chain {VLLM_CHAIN.label}, tree {VLLM_TREE.label}:\n\n" + vllm_table()
            + "\n\nSpecDecode-Bench (arXiv 2601.11580 v2), SGLang v0.5.9 (profile sglang), "
            "speedup over no speculation:\n\n" + sdb_table())


if __name__ == "__main__":
    print(table())
