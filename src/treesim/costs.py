"""What a tree step costs: S draft passes and one verification of N tokens per sequence.

Hardware cost model (src/costmodel/hardware.py), per step with n active sequences:
* verification: the target pass of N positions per sequence, priced by the same function as a
  chain's gamma + 1 (target_pass_time_totals: GEMMs over n N tokens, the KV writes of N tokens,
  attention of N queries over the prefix, per-position sampler CPU; for MoE targets the experts
  the n N tokens touch). The tree mask changes no pair count of the prefix part; the tokens'
  attention among themselves is a causal chain's upper bound (N (N + 1) / 2 pairs at most).
  Engines with cascade attention (tree_engines.toml) run a second attention kernel over the tree's
  own N keys per sequence and merge it: + the attention kernels' fixed time + the attention of
  n N queries over N keys each.
* accepted-path copy (engines that move it): 2 x (accepted drafts, at most S) x KV bytes per
  token, per sequence, at the achieved memory bandwidth (charged at the depth S: an upper bound).
* drafts: pass 1 is the chain's first draft pass (B tokens, with the engine's catch-up); passes
  2..S draft K tokens per sequence: the chain's S one-token passes plus (S - 1) x (the pass of
  K positions - the pass of 1 position), physics from the same tables.
* host work per tree: tree_cpu_per_seq_ms x n (0 for SGLang: the tree is built on the GPU).
* the tree's own tensor ops (engines that launch them one by one from Python, as EAGLE's reference
  implementation does): k = tree_eager_kernels_fixed + (S - 1) tree_eager_kernels_per_draft_pass
  + (N - 1) tree_eager_kernels_per_token ops per step, priced as SGLang's spec_step_eager_kernels
  are (roofline.py): pnorm(k (kernel_fixed + gap), k cpu_launch, p) with pytorch-eager's fitted
  launch costs (engines.toml, h200_calibration.toml), once per step, serial with the passes (the
  ops sit behind host syncs: .tolist(), .item(); tree_engines.toml lists them).
The flat cost model has no notion of tokens: a tree step costs 1 + S c, as a chain of S.
Which passes replay CUDA graphs, up to which batch, and what SGLang runs eagerly between them is
the engine profile's (engines.toml: cuda_graph_max_batch_by_gpu_memory, draft_passes_one_graph,
spec_step_eager_kernels; design.md, "SGLang's EAGLE step"): the base passes above carry it.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from src.input_files import read_toml
from src.treeshape.shape import TreeShape

TREE_ENGINES_FILE = Path(__file__).resolve().parents[1] / "presets" / "tree_engines.toml"


@dataclass(frozen=True)
class TreeEngine:
    verifies_trees: bool = False
    cascade_attention: bool = False
    accepted_path_copy: bool = False
    tree_cpu_per_seq_ms: float = 0.0
    tree_eager_kernels_fixed: int = 0
    tree_eager_kernels_per_draft_pass: int = 0
    tree_eager_kernels_per_token: int = 0

    def eager_kernels(self, shape: TreeShape) -> int:
        """Tensor ops a step of this tree launches eagerly for the tree itself (0 for chains)."""
        if shape.is_chain:
            return 0
        return (self.tree_eager_kernels_fixed
                + (shape.steps - 1) * self.tree_eager_kernels_per_draft_pass
                + (shape.tokens - 1) * self.tree_eager_kernels_per_token)


EAGER_COUNT_FIELDS = ("tree_eager_kernels_fixed", "tree_eager_kernels_per_draft_pass",
                      "tree_eager_kernels_per_token")


def tree_engines(path: Path | None = None) -> dict[str, TreeEngine]:
    """The [engines] table of src/presets/tree_engines.toml, read by the project's one TOML
    reader (src/input_files.py; its parse is cached, and tree_engine asks once per profile).
    CostModelInputError naming the field where an eager kernel count is not an integer >= 0."""
    from src.costmodel.presets import CostModelInputError
    table = read_toml(TREE_ENGINES_FILE if path is None else path, "tree engines")["engines"]
    for name, values in table.items():
        for field in EAGER_COUNT_FIELDS:
            v = values.get(field, 0)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise CostModelInputError(f"tree_engines.toml engines.{name}.{field}",
                                          f"{v!r} is not a kernel count (an integer >= 0)")
    return {name: TreeEngine(**values) for name, values in table.items()}


def chains_only_reason(name: str, path: Path | None = None) -> str:
    """Why a profile verifies chains only: its [chains_only] line in tree_engines.toml."""
    reasons = read_toml(TREE_ENGINES_FILE if path is None else path,
                        "tree engines").get("chains_only", {})
    return reasons.get(name, "src/presets/tree_engines.toml lists no tree verification for it")


def tree_engine(name: str) -> TreeEngine:
    """The tree capabilities of an engine profile (a profile not listed verifies chains only)."""
    return tree_engines().get(name, TreeEngine())


def check_engines_verify(trees, engine_profiles, field: str) -> None:
    """ConfigError(field, ...) where a tree shape (topk > 1) meets an engine profile that verifies
    chains only; the message gives that profile's reason (tree_engines.toml [chains_only])."""
    from src.config import ConfigError
    tree = next((t for t in trees if not t.is_chain), None)
    if tree is None:
        return
    capable = tree_engines()
    chains_only = [e for e in engine_profiles if not capable.get(e, TreeEngine()).verifies_trees]
    if chains_only:
        able = ", ".join(n for n, e in capable.items() if e.verifies_trees)
        raise ConfigError(field, f"{tree.label} is a tree (topk {tree.topk} > 1) but engine "
                                 f"profile {chains_only[0]} verifies chains only "
                                 f"({chains_only_reason(chains_only[0])}); profiles that verify "
                                 f"trees: {able}; or give trees as chains G:1:G+1")


def _engine_name(cost) -> str:
    engine = getattr(cost, "engine", None)
    return getattr(engine, "name", "") if engine is not None else ""


EAGER_LAUNCH_COSTS_FROM = "pytorch-eager"  # the profile whose eager launch costs were fitted


def tree_eager_ms(cost, e: TreeEngine, shape: TreeShape) -> float:
    """Time of a tree step's own eager tensor ops (see the module docstring), ms per step."""
    k = e.eager_kernels(shape)
    if k == 0:
        return 0.0
    from src.costmodel.engines import engine_profile
    from src.costmodel.roofline import eager_kernels_s, kernel_fixed_s
    p = cost.engine  # its own launch costs where it has them (pytorch-eager), else pytorch-eager's
    if not p.cpu_launch_us_per_kernel:
        p = engine_profile(EAGER_LAUNCH_COSTS_FROM)
    return eager_kernels_s(k, kernel_fixed_s(cost.gpu, cost.params), p) * 1e3


def verify_ms(cost, shape: TreeShape, n_seqs, sum_ctx, mid=None, start=None) -> np.ndarray:
    """Time of one tree verification (see the module docstring), per step."""
    base = np.asarray(cost.target_pass_time_totals(n_seqs, sum_ctx, shape.tokens, mid, start),
                      dtype=float)
    target_c = getattr(cost, "_target_c", None)
    if shape.is_chain or target_c is None:
        return base
    e = tree_engine(_engine_name(cost))
    n = np.asarray(n_seqs, dtype=float)
    N = shape.tokens
    extra = e.tree_cpu_per_seq_ms * n + np.where(n > 0, tree_eager_ms(cost, e, shape), 0.0)
    if e.cascade_attention:
        second = cost._attention_pnorm_ms(target_c, n, n * N, N, n * N)
        extra = extra + np.where(n > 0, target_c.attn_fixed_s * 1e3, 0.0) + second
    if e.accepted_path_copy:
        bandwidth = (cost.gpu.memory_bandwidth_bytes_per_s
                     * cost.params.memory_bandwidth_efficiency_fraction)
        extra = extra + 2 * shape.steps * cost._kv_bytes_per_token_gpu0 * n / bandwidth * 1e3
    return base + extra


def draft_ms(cost, shape: TreeShape, n_seqs, sum_ctx, mid=None, start=None) -> np.ndarray:
    """Time of the S draft passes of a tree (see the module docstring), per step."""
    base = np.asarray(cost.draft_passes_time_totals(n_seqs, sum_ctx, shape.steps, mid, start),
                      dtype=float)
    draft_c = getattr(cost, "_draft_c", None)
    if shape.is_chain or draft_c is None or shape.steps == 1:
        return base
    n = np.asarray(n_seqs)
    K = shape.topk
    table = cost._table_ms("draft", int(n.max(initial=0)), K)
    ctx = np.asarray(sum_ctx, dtype=float) + n * ((shape.steps - 1) * 0.5)
    wide = (table[:, K].take(n) - table[:, 1].take(n)
            + cost._attention_pnorm_ms(draft_c, n, n * K, K, ctx)
            - cost._attention_pnorm_ms(draft_c, n, n, 1, ctx))
    return base + (shape.steps - 1) * np.where(n > 0, wide, 0.0)


def steady_step_ms(cost, shape: TreeShape, batch: int, context: int) -> float:
    """One speculative step of `batch` sequences, each at `context` tokens: the tree's
    verification of N tokens + its S draft passes."""
    n, ctx = np.array([batch]), np.array([batch * context])
    return float(verify_ms(cost, shape, n, ctx)[0] + draft_ms(cost, shape, n, ctx)[0])


def steady_greedy_ms(cost, batch: int, context: int) -> float:
    """One greedy pass of `batch` sequences, each at `context` tokens."""
    n, ctx = np.array([batch]), np.array([batch * context])
    return float(cost.target_pass_time_totals(n, ctx, 1)[0])


@dataclass(frozen=True)
class TreeCost:
    """A cost model seen through one tree shape, in the interface src/serving.price_steps uses
    with gamma = S: a 'gamma + 1'-position target pass is the tree's verification, 'gamma' draft
    passes are its S draft passes."""

    cost: object
    shape: TreeShape

    @property
    def fixed_pass_times(self):
        fixed = getattr(self.cost, "fixed_pass_times", None)
        return None if fixed is None else (lambda gamma: fixed(self.shape.steps))

    @property
    def draft_kv_budget_tokens(self):
        return getattr(self.cost, "draft_kv_budget_tokens", None)

    def target_pass_time_totals(self, n_seqs, sum_ctx, positions_per_seq, mid=None, start=None):
        if np.all(np.asarray(positions_per_seq) == 1):  # a greedy pass
            return self.cost.target_pass_time_totals(n_seqs, sum_ctx, 1, mid, start)
        return verify_ms(self.cost, self.shape, n_seqs, sum_ctx, mid, start)

    def draft_passes_time_totals(self, n_seqs, sum_ctx, gamma, mid=None, start=None):
        return draft_ms(self.cost, self.shape, n_seqs, sum_ctx, mid, start)
