"""The MoE layers `measure-moe` times: random BF16 weights, routing fixed per configuration.

A stack of `layers` MoE feed-forward blocks (no attention: `measure` already times that), shapes
from src/measure/moe_plan.py (hidden h, routed experts E, experts per token k, expert FFN size I,
shared experts S). One pass of T = batch x positions tokens (positions 1: a decode step; gamma + 1:
a verification pass), per layer:

    a = RMSNorm(x)                                     FP32 statistics
    g = softmax(a @ W_router^T)                        [T, E], the router GEMM (computed, see below)
    w = g[token, chosen experts], renormalised         norm_topk_prob (Qwen3, Mixtral, DeepSeek)
    for each expert e the pass touches (its rows R_e):
        [u, v] = a[R_e] @ W_gate_up[e]^T               [n_e, 2I]
        y_e = (SiLU(u) * v) @ W_down[e]^T              [n_e, h]
        out[R_e] += w[R_e, e] y_e                      index_add
    shared experts: one more gate/up/down of size S x I over all T rows
    x = x + out

The chosen experts are the routing draw of src/measure/moe_routing.py (uniform or Zipf-skewed),
not the argmax of g: random weights would route arbitrarily, and a fixed draw gives a pass of
known distinct experts whose shapes are static, so it can be captured in a CUDA graph. Each
touched expert is its own pair of cuBLAS GEMMs (the plain implementation; engines use grouped
fused-MoE kernels, which change the fixed cost per expert, not the bytes each expert reads).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

from src.measure.moe_plan import MoeShape
from src.measure.moe_routing import distinct_experts, route

DTYPE = torch.bfloat16
INIT_STD = 0.02
RMS_EPS = 1e-6  # Qwen3 / DeepSeek-V3 rms_norm_eps (config.json); irrelevant to timing


@dataclass(frozen=True)
class MoeWeights:
    ln: torch.Tensor  # [L, h]
    router: torch.Tensor  # [L, E, h]
    gate_up: torch.Tensor  # [L, E, 2I, h]
    down: torch.Tensor  # [L, E, h, I]
    shared_gate_up: torch.Tensor | None  # [L, 2 S I, h]
    shared_down: torch.Tensor | None  # [L, h, S I]


def random_moe_weights(shape: MoeShape, layers: int, device: torch.device,
                       seed: int) -> MoeWeights:
    gen = torch.Generator(device=device).manual_seed(seed)

    def rand(*dims):
        return torch.empty(dims, dtype=DTYPE, device=device).normal_(0.0, INIT_STD, generator=gen)

    h, e, i, s = shape.hidden, shape.experts, shape.expert_ffn, shape.shared_experts
    return MoeWeights(
        ln=torch.ones(layers, h, dtype=DTYPE, device=device),
        router=rand(layers, e, h),
        gate_up=rand(layers, e, 2 * i, h),
        down=rand(layers, e, h, i),
        shared_gate_up=rand(layers, 2 * s * i, h) if s else None,
        shared_down=rand(layers, h, s * i) if s else None,
    )


@dataclass(frozen=True)
class RoutedPass:
    """One configuration's routing, drawn once: per layer the touched experts, their rows and the
    slot (which of the token's k choices) each row came from."""

    tokens: int
    assignment: tuple[np.ndarray, ...]  # per layer [T, k] expert ids
    distinct_per_layer: tuple[int, ...]
    max_rows_per_layer: tuple[int, ...]  # the most rows any one expert receives, per layer

    @property
    def distinct_mean(self) -> float:
        return float(np.mean(self.distinct_per_layer))

    @property
    def max_rows_mean(self) -> float:
        return float(np.mean(self.max_rows_per_layer))


def draw_routing(shape: MoeShape, layers: int, tokens: int, skew: float,
                 seed: int) -> RoutedPass:
    """The routing of every layer of one pass (numpy; each layer its own popularity order)."""
    rng = np.random.default_rng(seed)
    assignment = tuple(route(tokens, shape.experts, shape.top_k, skew, rng) for _ in range(layers))
    return RoutedPass(
        tokens=tokens, assignment=assignment,
        distinct_per_layer=tuple(distinct_experts(a) for a in assignment),
        max_rows_per_layer=tuple(int(np.bincount(a.ravel()).max()) for a in assignment))


def _rms_norm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + RMS_EPS)).to(x.dtype) * weight


def make_moe_step(weights: MoeWeights, routed: RoutedPass, device: torch.device
                  ) -> Callable[[], torch.Tensor]:
    """The pass as a closure over preallocated inputs (see the module docstring)."""
    hidden = weights.router.shape[-1]
    x0 = torch.empty(routed.tokens, hidden, dtype=DTYPE, device=device).normal_(0.0, 1.0)
    plans = []  # per layer: the chosen-expert tensor and (expert, rows, slots) per touched expert
    for a in routed.assignment:
        per_expert = []
        for e in np.unique(a):
            rows, slots = np.nonzero(a == e)
            per_expert.append((int(e), torch.as_tensor(rows, device=device),
                               torch.as_tensor(slots, device=device)))
        plans.append((torch.as_tensor(a, device=device), per_expert))

    def step() -> torch.Tensor:
        x = x0
        for layer, (chosen, per_expert) in enumerate(plans):
            act = _rms_norm(x, weights.ln[layer])
            gates = torch.softmax((act @ weights.router[layer].T).float(), dim=-1)
            w = gates.gather(1, chosen)
            w = (w / w.sum(dim=1, keepdim=True)).to(DTYPE)
            out = torch.zeros_like(x)
            for e, rows, slots in per_expert:
                u, v = (act.index_select(0, rows) @ weights.gate_up[layer, e].T).chunk(2, dim=-1)
                y = (F.silu(u) * v) @ weights.down[layer, e].T
                out.index_add_(0, rows, y * w[rows, slots].unsqueeze(1))
            if weights.shared_gate_up is not None:
                u, v = (act @ weights.shared_gate_up[layer].T).chunk(2, dim=-1)
                out = out + (F.silu(u) * v) @ weights.shared_down[layer].T
            x = x + out
        return x

    return step
