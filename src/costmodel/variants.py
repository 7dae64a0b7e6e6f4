"""Pass coefficients of the model variants roofline.py's dense Llama formulas do not cover.

MoE layers, MLA, sliding windows, low-precision formats and EAGLE-3 heads (shapes.py gives the
shapes): the per-GEMM weight bytes and tensor-core peaks, the routed-expert GEMMs, the
elementwise traffic and the attention terms split into full-attention and sliding-window layers.
`pass_shape` returns them as plain arrays and numbers; roofline.pass_coefficients turns them into
times with the GPU's fitted efficiencies, exactly as it does for a dense model.

    pass time of a MoE layer's routed experts = M x pnorm(mem(rows), comp(rows)),
        rows = T k / D tokens per touched expert, D = expected distinct experts (moe.py),
        M = D (TP over the expert FFN) or the slowest GPU's touched experts (EP)
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import src.costmodel.shapes as shapes
from src.costmodel.formats import format_bytes, gemm_peak_flops_per_s, runnable_weight_formats
from src.costmodel.moe import (
    distinct_experts_of_draws,
    expected_distinct_experts,
    routing_locality,
)
from src.costmodel.presets import BYTES_PER_VALUE, CostModelInputError

# Kernels a MoE layer launches beyond a dense layer's: router GEMM, top-k softmax, the sort of
# tokens by expert (moe_align_block_size) and the weighted sum of the k outputs (moe_sum); the
# two expert GEMMs replace the dense gate/up and down (vLLM fused_moe/fused_moe.py).
MOE_EXTRA_KERNELS_PER_LAYER = 4
# Kernels an MLA layer launches beyond a GQA layer's: q_a and kv_a projections, their two
# RMSNorms, and the second absorbed batched GEMM (vLLM MLA attention backends); with a q_lora
# rank the engines run q_a and kv_a as one fused GEMM (shapes.attention_gemms), one kernel less
MLA_EXTRA_KERNELS_PER_LAYER = 5
MLA_FUSED_DOWN_PROJECTION_SAVES = 1


@dataclass(frozen=True)
class MoeRouting:
    """What pass_components_s needs to price the routed experts of a pass."""

    n_experts: int  # E
    top_k: int  # k
    locality: float  # rho of the routing model (0 = uniform)
    ep: int  # expert-parallel degree (1 = TP over the expert FFN)


@dataclass(frozen=True)
class PassShape:
    """Batch-independent shape terms of one pass of a non-plain model on one GPU."""

    K: np.ndarray  # [G] GEMM input widths
    N: np.ndarray  # [G] output widths
    count: np.ndarray  # [G] runs per pass
    weight_bytes_per_value: np.ndarray  # [G]
    peak_flops_per_s: np.ndarray  # [G] tensor-core peak of each GEMM's format on this GPU
    selector: np.ndarray  # [2, G] (layers, head)
    expert_mask: np.ndarray | None  # [G] True for routed-expert GEMMs (None: no MoE layer)
    head_index: int
    elementwise_values: float  # per token, all layers
    kv_bytes_per_value: float
    full_layers: int  # full-attention layers
    window_layers: int  # sliding-window layers
    window_tokens: int
    kv_values_per_token_layer: float  # cached values per token per layer on one GPU
    new_token_values_per_layer: float
    pair_flops_per_layer: float
    extra_kernels: float  # kernels per pass beyond the engine's dense-layer counts
    routing: MoeRouting | None


def check_formats(gpu, model, field_name: str = "model") -> None:
    """Every weight format of `model` must run on `gpu` (formats.py)."""
    allowed = runnable_weight_formats(gpu)
    for name in ("weight_format", "expert_weight_format"):
        fmt = getattr(model, name)
        if fmt and fmt not in allowed:
            raise CostModelInputError(
                field_name, f"{model.model_id} has {name} {fmt}, which {gpu.gpu_id} cannot run "
                f"(no tensor cores or weight-only kernel for it); allowed on {gpu.gpu_id}: "
                f"{', '.join(allowed)}")


def check_ep(model, ep: int, tp: int) -> int:
    """EP must divide the replica's GPU count (tp) and E: the experts are split over ep groups of
    moe_tp = tp / ep GPUs, each expert's FFN TP-split over its group (TensorRT-LLM's Mapping:
    moe_tp_size x moe_ep_size = tp_size, tensorrt_llm/mapping.py); ep 1 is TP over the expert
    FFN, ep = tp whole experts per GPU."""
    if ep == 1:
        return ep
    E = model.n_routed_experts
    if not E:
        raise CostModelInputError("ep", f"{model.model_id} has no routed experts; allowed: 1")
    if E % ep:
        allowed = [d for d in range(1, E + 1) if E % d == 0]
        raise CostModelInputError("ep", f"{ep} does not divide the {E} routed experts of "
                                  f"{model.model_id}; allowed: {', '.join(map(str, allowed))}")
    if tp % ep:
        allowed = [d for d in range(1, tp + 1) if tp % d == 0 and E % d == 0]
        hint = " (one GPU: raise --tp to spread the experts)" if tp == 1 else ""
        raise CostModelInputError("ep", f"{ep} does not divide the replica's tp={tp} GPUs (experts "
                                  f"are split over ep groups of tp / ep GPUs); allowed: "
                                  f"{', '.join(map(str, allowed))}{hint}")
    return ep


def moe_tp(tp: int, ep: int) -> int:
    """GPUs each routed expert's FFN is TP-split over: tp / ep (check_ep has checked ep | tp)."""
    return tp // ep


FP8_BLOCK = 128  # the block of "fp8-block" weights (quantization_config weight_block_size)


def _block_shares(model, tp: int, ep: int) -> list[tuple[str, int, int]]:
    """(what, width, split) of the FFN widths TP splits in 128x128-block FP8 (gate/up output and
    down input: the same width), split over `split` GPUs (the routed experts over moe_tp)."""
    out = []
    if model.expert_weight_format == "fp8-block" or (
            model.weight_format == "fp8-block" and not model.expert_weight_format):
        if model.n_routed_experts and moe_tp(tp, ep) > 1:
            out.append(("routed-expert FFN", model.moe_intermediate_size, moe_tp(tp, ep)))
    if model.weight_format == "fp8-block":
        if model.n_shared_experts:
            out.append(("shared-expert FFN", model.n_shared_experts * model.moe_intermediate_size,
                        tp))
        if not model.n_routed_experts or model.first_k_dense_replace:
            out.append(("dense FFN", model.intermediate_size, tp))
    return out


def check_block_shards(model, tp: int, ep: int = 1) -> None:
    """128x128-block FP8 weights: each GPU's share of a TP-split FFN width must be a multiple of
    the block, or vLLM and SGLang refuse to load them (vllm/model_executor/layers/quantization/
    fp8.py: "The output_size of gate's and up's weight = 192 is not divisible by weight
    quantization block_n = 128"; Qwen3-235B-A22B-FP8 at tp 8: 1536 / 8 = 192)."""
    for what, width, split in _block_shares(model, tp, ep):
        if width % split or (width // split) % FP8_BLOCK:
            ok = [t for t in (1, 2, 4, 8, 16, 32, 64) if not any(
                w % d or (w // d) % FP8_BLOCK for _, w, d in _block_shares(model, t, 1))]
            experts = " (or ep = tp: experts stay whole)" if what == "routed-expert FFN" else ""
            at = f"tp={tp}" if split == tp else f"tp={tp}, ep={ep} (moe_tp {split})"
            raise CostModelInputError(
                "tp", f"{model.model_id} has 128x128-block FP8 weights: at {at} a GPU's share "
                f"of the {width}-wide {what} is {width / split:g}, not a multiple of {FP8_BLOCK}, "
                "which vLLM and SGLang refuse to load; allowed: tp "
                f"{', '.join(map(str, ok))}{experts}")


def pass_shape(gpu, model, tp: int, n_layers: int | None = None, extra_gemms=(),
               ep: int = 1) -> PassShape:
    """Shape terms of one pass over n_layers (None = all) of `model` at TP tp, EP ep."""
    check_formats(gpu, model)
    check_block_shards(model, tp, ep)
    gemms = (shapes.layer_gemms(model, tp, n_layers, ep)
             + shapes.head_gemms(model, tp, extra_gemms))
    n_layer_gemms = sum(g.role != "head" for g in gemms)
    K = np.array([g.k for g in gemms], dtype=float)
    N = np.array([g.n for g in gemms], dtype=float)
    selector = np.zeros((2, len(gemms)))
    selector[0, :n_layer_gemms] = 1.0
    selector[1, n_layer_gemms:] = 1.0
    expert = np.array([g.role == "expert" for g in gemms])
    dense, moe = shapes.layer_counts(model, n_layers)
    L = dense + moe
    win = shapes.window_layers(model, n_layers)
    routing = None
    if moe:
        routing = MoeRouting(model.n_routed_experts, model.experts_per_token,
                             routing_locality(model.routing, model.routing_locality_fraction), ep)
    mla_extra = MLA_EXTRA_KERNELS_PER_LAYER - (MLA_FUSED_DOWN_PROJECTION_SAVES
                                               if model.q_lora_rank else 0)
    extra = moe * MOE_EXTRA_KERNELS_PER_LAYER + (L * mla_extra if model.attention == "mla" else 0)
    return PassShape(
        K=K, N=N, count=np.array([g.count for g in gemms], dtype=float),
        weight_bytes_per_value=np.array([format_bytes(g.fmt) for g in gemms]),
        peak_flops_per_s=np.array([gemm_peak_flops_per_s(gpu, g.fmt) for g in gemms]),
        selector=selector, expert_mask=expert if moe else None, head_index=n_layer_gemms,
        elementwise_values=shapes.elementwise_values_per_token(model, tp, n_layers, ep),
        kv_bytes_per_value=format_bytes(model.kv_cache_format),
        full_layers=L - win, window_layers=win, window_tokens=model.sliding_window_tokens,
        kv_values_per_token_layer=shapes.kv_values_per_token_layer(model, tp),
        new_token_values_per_layer=shapes.attention_new_token_values(model, tp),
        pair_flops_per_layer=shapes.attention_pair_flops(model, tp),
        extra_kernels=float(extra), routing=routing)


def expert_rows_and_multiplicity(routing: MoeRouting, n_seqs, positions_per_seq):
    """(rows per touched expert, touched experts the pass waits for, D) of a pass, arrays of the
    shape of n_seqs x positions: T k / D; D with TP over the expert FFN (every GPU reads 1/tp of
    each touched expert), and with EP the slowest GPU's count (slowest_gpu_experts); 0 where the
    pass has no token."""
    D = expected_distinct_experts(routing.n_experts, routing.top_k, n_seqs, positions_per_seq,
                                  routing.locality)
    T = np.asarray(n_seqs, dtype=float) * np.asarray(positions_per_seq, dtype=float)
    return _rows_and_wait(routing, T, D)


def mixed_expert_rows_and_multiplicity(routing: MoeRouting, runs, tokens):
    """expert_rows_and_multiplicity of a mixed pass of `tokens` tokens in `runs` runs (each
    decoding sequence's t positions and each prompt chunk is one run: moe.py
    distinct_experts_of_draws with first = runs, later = tokens - runs)."""
    runs = np.asarray(runs, dtype=float)
    T = np.asarray(tokens, dtype=float)
    D = distinct_experts_of_draws(routing.n_experts, routing.top_k, runs,
                                  np.maximum(T - runs, 0.0), routing.locality)
    D = np.where(T > 0, D, 0.0)
    return _rows_and_wait(routing, T, D)


def _rows_and_wait(routing: MoeRouting, T, D):
    rows = np.where(D > 0, T * routing.top_k / np.maximum(D, 1e-300), 0.0)
    if routing.ep == 1:
        return rows, D, D
    return rows, slowest_gpu_experts(routing.n_experts, routing.ep, D), D


def slowest_gpu_experts(n_experts: int, ep: int, distinct):
    """Expected most touched experts on any of ep GPUs holding n_experts / ep experts each, when
    `distinct` of the n_experts are touched: E[max_g X_g], X_g ~ Binomial(n, D / E) with
    n = E / ep, independent (the exact split is hypergeometric), = sum_j (1 - F(j)^ep). A MoE
    layer under expert parallelism waits for its slowest GPU."""
    from scipy.stats import binom  # only for EP: bad input is answered before scipy loads

    n = n_experts // ep
    p = np.clip(np.asarray(distinct, dtype=float) / n_experts, 0.0, 1.0)
    j = np.arange(n, dtype=float).reshape((-1,) + (1,) * p.ndim)
    return (1.0 - binom.cdf(j, n, p) ** ep).sum(axis=0)


ACTIVATION_BYTES = BYTES_PER_VALUE  # activations stay BF16 in every format
