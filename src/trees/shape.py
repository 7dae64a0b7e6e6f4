"""A draft shape: SGLang's triple (num_steps S, eagle_topk K, num_draft_tokens N).

S draft passes (tree depth), each expanding the best K nodes by cumulative draft confidence (the
first pass over the root, the others over K nodes per sequence); then the best N - 1 of the
K + (S - 1) K^2 candidates plus the root are verified in one target pass of N tokens per sequence
(sgl-project/sglang python/sglang/srt/speculative/build_eagle_tree.py: score_list holds
1 + (S - 1) K rows of K scores, torch.topk takes N - 1 of them). A chain of gamma drafts is
(gamma, 1, gamma + 1): with topk 1 SGLang sets num_draft_tokens to num_steps + 1.
"""
from __future__ import annotations

from dataclasses import dataclass

MAX_TREE_STEPS = 64  # = config.MAX_GAMMA: the hazard profiles cover 64 positions
MAX_TREE_TOPK = 16
MAX_TREE_TOKENS = 256


class TreeShapeError(ValueError):
    """A shape that SGLang (or the model) cannot run; str() is what is allowed."""


@dataclass(frozen=True, order=True)
class TreeShape:
    steps: int  # S: draft passes = depth of the tree
    topk: int  # K: children kept per expanded node (the beam width)
    tokens: int  # N: tokens verified per sequence, root included

    @property
    def is_chain(self) -> bool:
        return self.topk == 1

    @property
    def drafts(self) -> int:
        """Draft tokens verified per sequence, N - 1 (gamma for a chain)."""
        return self.tokens - 1

    @property
    def candidate_pool(self) -> int:
        """Nodes the S draft passes propose: K + (S - 1) K^2 (SGLang's score_list)."""
        return self.topk + (self.steps - 1) * self.topk ** 2

    @property
    def label(self) -> str:
        return f"{self.steps}:{self.topk}:{self.tokens}"

    @property
    def sglang_flags(self) -> str:
        """SGLang's three flags for the shape (server_args.py needs all three or none; a chain of
        gamma is num_steps gamma, topk 1, num_draft_tokens gamma + 1)."""
        return (f"--speculative-num-steps {self.steps} --speculative-eagle-topk {self.topk} "
                f"--speculative-num-draft-tokens {self.tokens}")

    @classmethod
    def chain(cls, gamma: int) -> "TreeShape":
        return cls(gamma, 1, gamma + 1)


def check_shape(shape: TreeShape) -> TreeShape:
    """SGLang's rules for the triple (TreeShapeError naming the rule otherwise)."""
    s, k, n = shape.steps, shape.topk, shape.tokens
    if not 1 <= s <= MAX_TREE_STEPS:
        raise TreeShapeError(f"steps S must be in 1..{MAX_TREE_STEPS}, got {s}")
    if not 1 <= k <= MAX_TREE_TOPK:
        raise TreeShapeError(f"topk K must be in 1..{MAX_TREE_TOPK}, got {k}")
    if k == 1 and n != s + 1:
        raise TreeShapeError(f"{shape.label}: with topk 1 the tree is a chain and N must be "
                             f"S + 1 = {s + 1} (SGLang sets it so)")
    if not 2 <= n <= MAX_TREE_TOKENS:
        raise TreeShapeError(f"{shape.label}: N (tokens verified, root included) must be in "
                             f"2..{MAX_TREE_TOKENS}")
    if n - 1 > shape.candidate_pool:
        raise TreeShapeError(
            f"{shape.label}: N - 1 = {n - 1} exceeds the K + (S - 1) K^2 = {shape.candidate_pool} "
            "candidates the draft passes propose (SGLang's torch.topk over them fails); "
            f"N <= {shape.candidate_pool + 1}")
    return shape


def parse_shape(text) -> TreeShape:
    """'S:K:N' -> TreeShape (TreeShapeError on anything else)."""
    parts = str(text).strip().split(":")
    # ASCII digits only: '²' passes isdigit() and fails int(), int('٣') is 3
    if len(parts) != 3 or not all(p.strip().isascii() and p.strip().isdigit() for p in parts):
        raise TreeShapeError(f"expected S:K:N (three integers, e.g. 5:4:8; a chain of gamma is "
                             f"G:1:G+1), got {text!r}")
    return check_shape(TreeShape(*(int(p) for p in parts)))


def parse_shapes(items) -> tuple[TreeShape, ...]:
    """A list of 'S:K:N' items -> sorted shapes (TreeShapeError on a bad or repeated one)."""
    out = []
    for item in items:
        shape = parse_shape(item)
        if shape in out:
            raise TreeShapeError(f"{shape.label} is listed twice; give each shape once")
        out.append(shape)
    return tuple(sorted(out))
