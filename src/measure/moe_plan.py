"""What `measure-moe` times: MoE layer shapes, the configurations, the output columns.

Pure Python (no torch), so a plan can be checked and tested anywhere.

A configuration is one output row: a stack of `layers` MoE blocks of one shape, a pass of
batch x positions tokens (positions 1 = a decode step, gamma + 1 = a verification pass), the
routing skew of src/measure/moe_routing.py and the mode (graph | eager). The columns are the MoE
rows of the project's measurement format (src/calibration/measurements.py, MOE_COLUMNS).

The shapes are the config.json values of the models (hidden_size, num_experts /
n_routed_experts / num_local_experts, num_experts_per_tok / experts_per_token,
moe_intermediate_size / intermediate_size, n_shared_experts), as
/work/shared/reference/moe-and-trees.md lists them; all in BF16 here (gpt-oss ships MXFP4
experts and DeepSeek-V3 FP8: their bytes per parameter differ from these layers').
"""
from __future__ import annotations

from dataclasses import dataclass

GIB = 1024 ** 3
BYTES_PER_VALUE = 2  # BF16 weights and activations
WHAT = "moe_layer"
MODES = ("graph", "eager")
DEFAULT_SKEWS = (0.0, 1.0)  # uniform, and one skewed routing (an assumption, moe_routing.py)
COLUMNS = ("model", "mode", "what", "batch", "positions", "tokens", "layers", "hidden", "experts",
           "top_k", "expert_ffn", "shared_experts", "routing_skew", "distinct_experts",
           "max_expert_rows", "median_ms", "p10_ms", "p90_ms", "min_ms", "reps")


@dataclass(frozen=True)
class MoeShape:
    """One MoE layer's shape."""

    name: str
    hidden: int
    experts: int
    top_k: int
    expert_ffn: int
    shared_experts: int = 0

    def __post_init__(self):
        for field_name in ("hidden", "experts", "top_k", "expert_ffn"):
            if getattr(self, field_name) < 1:
                raise ValueError(f"{field_name} {getattr(self, field_name)}: must be >= 1")
        if not 1 <= self.top_k <= self.experts:
            raise ValueError(f"top_k {self.top_k}: must be between 1 and experts "
                             f"({self.experts})")
        if self.shared_experts < 0:
            raise ValueError(f"shared_experts {self.shared_experts}: must be >= 0")

    def weight_bytes(self, layers: int) -> int:
        """BF16 bytes of `layers` blocks: norm, router, E routed and S shared experts
        (gate, up, down: 3 h I each)."""
        h, e, i, s = self.hidden, self.experts, self.expert_ffn, self.shared_experts
        return BYTES_PER_VALUE * layers * (h + e * h + 3 * (e + s) * h * i)


# config.json values (Hugging Face model repositories; /work/shared/reference/moe-and-trees.md)
SHAPES = {
    "qwen3-30b-a3b": MoeShape("qwen3-30b-a3b", hidden=2048, experts=128, top_k=8, expert_ffn=768),
    "qwen3-235b-a22b": MoeShape("qwen3-235b-a22b", hidden=4096, experts=128, top_k=8,
                                expert_ffn=1536),
    "mixtral-8x7b": MoeShape("mixtral-8x7b", hidden=4096, experts=8, top_k=2, expert_ffn=14336),
    "gpt-oss-120b": MoeShape("gpt-oss-120b", hidden=2880, experts=128, top_k=4, expert_ffn=2880),
    "gpt-oss-20b": MoeShape("gpt-oss-20b", hidden=2880, experts=32, top_k=4, expert_ffn=2880),
    "deepseek-v3": MoeShape("deepseek-v3", hidden=7168, experts=256, top_k=8, expert_ffn=2048,
                            shared_experts=1),
}


@dataclass(frozen=True)
class MoeConfig:
    """One configuration: one output row."""

    shape: str
    mode: str
    batch: int
    positions: int
    skew: float

    @property
    def tokens(self) -> int:
        return self.batch * self.positions

    def label(self) -> str:
        return (f"{self.shape} {self.mode} B={self.batch} pos={self.positions} "
                f"skew={self.skew:g}")


def build_moe_configs(shapes: tuple[str, ...], modes: tuple[str, ...], batches: tuple[int, ...],
                      positions: tuple[int, ...], skews: tuple[float, ...]) -> list[MoeConfig]:
    """Every configuration, shape outermost, then mode, skew, batch, positions."""
    return [MoeConfig(s, m, b, p, k) for s in shapes for m in modes for k in skews
            for b in batches for p in positions]


def activation_bytes(shape: MoeShape, tokens: int) -> int:
    """An upper bound on one layer's live activations: x, its norm, the output, the router
    logits (FP32) and one expert's [n, 2I] + [n, I] intermediates at n = tokens x top_k."""
    rows = tokens * shape.top_k
    return (BYTES_PER_VALUE * (3 * tokens * shape.hidden + 3 * rows * shape.expert_ffn
                               + rows * shape.hidden) + 8 * tokens * shape.experts)
