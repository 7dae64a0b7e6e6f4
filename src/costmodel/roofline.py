"""GPU physics of one forward pass: a smooth roofline per GEMM and attention kernel.

A Llama-style dense decoder on one GPU type at a tensor-parallel (TP) degree, vectorised over
replications; design.md ("Hardware cost model") gives every formula, parameter and origin. One pass
over S sequences x t positions (T = S t tokens), per GPU, times in seconds:

    pass = layers_non_attention + attention + lm_head + communication + overhead

    layers_non_attention = L [ sum_g pnorm(mem_g, comp_g) + elementwise_bytes(T) / bw_eff
                               + KERNELS_PER_LAYER_NON_ATTENTION kernel_fixed(gpu) ]
        g over the layer's GEMMs (QKV, O, gate/up, down), each split by TP;
        mem_g = 2 (K N + T K + T N) / bw_eff, comp_g = 2 T K N / flops_eff,
        pnorm(a, b) = (a^p + b^p)^(1/p)  (smooth roofline: p -> inf gives max(a, b));
        the quantity vidur's `forward_ms_non_attention` measures
    attention = L [ pnorm((KV bytes read + written + q/o bytes) / bw_eff,
                          4 (H/TP) d sum_s sum_{i=1..t} (ctx_s + i) / flops_eff)
                    + ATTENTION_KERNELS_PER_LAYER kernel_fixed(gpu) ]
    lm_head = pnorm over the (vocab/TP x hidden) GEMM + final RMSNorm + its kernels
    communication = 2 L all-reduces of T x hidden x 2 bytes (0 at TP 1), NCCL or the custom
                    kernels the engine uses (src/costmodel/allreduce.py)
    overhead = CPU time per pass (the engine profile's, added by HardwareCostModel)

kernel_fixed(gpu) is GpuSpec.kernel_fixed_us where fitted (A100, H100), else the shared
CostModelParams.kernel_fixed_us.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from src.costmodel.allreduce import (
    AllReduceCost, CustomAllReduceParams, allreduce_coefficients, allreduce_cost,
)
from src.costmodel.memory import memory_needed_bytes, memory_usable_bytes, raise_does_not_fit
from src.costmodel.presets import (
    BYTES_PER_VALUE, AllReduceFit, CostModelParams, GpuSpec, ModelSpec, check_int, check_tp,
)

# Kernels in one decoder layer outside attention, as vidur profiles them: input RMSNorm, QKV
# projection, rotary embedding, output projection, post-attention RMSNorm, gate/up projection,
# SiLU-and-multiply, down projection, two residual adds.
KERNELS_PER_LAYER_NON_ATTENTION = 10
ATTENTION_KERNELS_PER_LAYER = 2  # KV-cache write (reshape_and_cache) + the attention kernel
LM_HEAD_KERNELS = 2  # final RMSNorm + LM-head GEMM


@dataclass(frozen=True)
class PassCoefficients:
    """Time coefficients (seconds) of one pass of one network on one GPU at one TP degree.

    GEMM arrays have one entry per GEMM kind; row 0..n_layer_gemms-1 belong to the decoder layers
    (times n_layers), the rest to the LM head / extra projections (once per pass).
    """

    gemm_weight_s: np.ndarray  # [G] weight bytes / (bw x eff), x count
    gemm_mem_per_token_s: np.ndarray  # [G] activation in+out bytes per token / (bw x eff), x count
    gemm_compute_per_token_s: np.ndarray  # [G] 2 K N / (flops x eff), x count
    gemm_selector: np.ndarray  # [2, G] 1 where a GEMM belongs to (layers, lm_head)
    layer_elementwise_per_token_s: float  # norms, residuals, rotary, activation, all layers
    layer_fixed_s: float  # kernel fixed time of all non-attention layer kernels
    attn_read_per_ctx_token_s: float  # KV bytes read per cached token, all layers
    attn_per_new_token_s: float  # KV write + Q read + O write per new token, all layers
    attn_compute_per_pair_s: float  # 4 (H/TP) d per (query, key) pair, all layers
    attn_fixed_s: float  # attention kernels' fixed time, all layers
    head_elementwise_per_token_s: float  # final RMSNorm
    head_fixed_s: float  # LM-head kernels' fixed time
    comm_fixed_s: float  # all-reduce latency x all-reduces per pass
    comm_per_token_s: float  # all-reduce bandwidth term per token
    overhead_fixed_s: float  # CPU time per pass
    overhead_per_seq_s: float  # CPU time per pass per sequence
    sharpness_p: float  # roofline p
    # custom all-reduce (None = the NCCL terms above): all the pass's all-reduces take
    # comm_n_allreduce x comm_custom.time_s(tokens x comm_bytes_per_token)
    comm_custom: AllReduceCost | None = None
    comm_n_allreduce: int = 0  # all-reduces per pass
    comm_bytes_per_token: float = 0.0  # all-reduce message bytes per token (hidden x 2)


def kernel_fixed_s(gpu: GpuSpec, params: CostModelParams) -> float:
    """Fixed time of one kernel on this GPU, seconds: the GPU's own fitted kernel_fixed_us where
    it has one (GPUs with measurements), else the shared params.kernel_fixed_us."""
    us = gpu.kernel_fixed_us
    return (params.kernel_fixed_us if us is None else us) * 1e-6


def pass_coefficients(
    gpu: GpuSpec,
    model: ModelSpec,
    tp: int,
    params: CostModelParams,
    allreduce: Sequence[AllReduceFit] = (),
    *,
    n_layers: int | None = None,
    extra_gemms: Sequence[tuple[int, int]] = (),
    overhead_fixed_ms: float = 0.0,
    overhead_per_seq_ms: float = 0.0,
    allreduce_implementation: str = "nccl",
    custom_allreduce: CustomAllReduceParams | None = None,
) -> PassCoefficients:
    """Precompute the batch-independent coefficients of one pass (see the module docstring).

    n_layers overrides the model's layer count (an EAGLE head runs 1 layer of the target's shape);
    extra_gemms are (K, N) projections run once per pass, unsplit by TP (EAGLE's 2h -> h fc).
    allreduce_implementation "custom" times the all-reduces with vLLM's custom kernels where the
    system supports them (src/costmodel/allreduce.py); "nccl" keeps the linear NCCL terms.
    """
    L = model.n_layers if n_layers is None else n_layers
    bw = gpu.memory_bandwidth_bytes_per_s * params.memory_bandwidth_efficiency_fraction
    fl = gpu.flops_per_s * params.compute_efficiency_fraction
    kfix = kernel_fixed_s(gpu, params)
    h, q, kv, inter = model.hidden_size, model.q_width, model.kv_width, model.intermediate_size
    B = BYTES_PER_VALUE
    layer_gemms = [(h, (q + 2 * kv) / tp), (q / tp, h), (h, 2 * inter / tp), (inter / tp, h)]
    head_gemms = [(h, model.vocab_size / tp)] + [(k, n) for k, n in extra_gemms]
    K = np.array([k for k, _ in layer_gemms + head_gemms], dtype=float)
    N = np.array([n for _, n in layer_gemms + head_gemms], dtype=float)
    count = np.array([L] * len(layer_gemms) + [1] * len(head_gemms), dtype=float)
    selector = np.zeros((2, len(K)))
    selector[0, : len(layer_gemms)] = 1.0
    selector[1, len(layer_gemms):] = 1.0
    # Elementwise bytes per token per layer: 2 RMSNorms (read + write h), 2 residual adds
    # (2 reads + 1 write of h) - replicated on every TP rank -, rotary on q and k (read + write),
    # SiLU-and-multiply (read gate and up, write one) - split by TP.
    elementwise_values = 4 * h + 6 * h + 2 * (q + kv) / tp + 3 * inter / tp
    n_allreduce = 2 * L if tp > 1 else 0
    ar_latency_s, ar_bus_bytes_per_s = allreduce_coefficients(gpu, tp, params, allreduce)
    comm_custom = None
    if tp > 1 and allreduce_implementation != "nccl":
        ar = allreduce_cost(gpu, tp, params, allreduce, allreduce_implementation, custom_allreduce)
        comm_custom = ar if ar.custom else None
    return PassCoefficients(
        gemm_weight_s=count * K * N * B / bw,
        gemm_mem_per_token_s=count * (K + N) * B / bw,
        gemm_compute_per_token_s=count * 2 * K * N / fl,
        gemm_selector=selector,
        layer_elementwise_per_token_s=L * elementwise_values * B / bw,
        layer_fixed_s=L * KERNELS_PER_LAYER_NON_ATTENTION * kfix,
        attn_read_per_ctx_token_s=L * 2 * kv / tp * B / bw,
        attn_per_new_token_s=L * (2 * kv / tp + 2 * q / tp) * B / bw,
        attn_compute_per_pair_s=L * 4 * q / tp / fl,
        attn_fixed_s=L * ATTENTION_KERNELS_PER_LAYER * kfix,
        head_elementwise_per_token_s=2 * h * B / bw,
        head_fixed_s=(LM_HEAD_KERNELS + len(extra_gemms)) * kfix,
        comm_fixed_s=n_allreduce * ar_latency_s,
        comm_per_token_s=(n_allreduce * 2 * (tp - 1) / tp * h * B / ar_bus_bytes_per_s
                          if tp > 1 else 0.0),
        overhead_fixed_s=overhead_fixed_ms * 1e-3,
        overhead_per_seq_s=overhead_per_seq_ms * 1e-3,
        sharpness_p=params.roofline_sharpness_p,
        comm_custom=comm_custom,
        comm_n_allreduce=n_allreduce,
        comm_bytes_per_token=h * B,
    )


def _pnorm(a, b, p):
    """Smooth roofline (a^p + b^p)^(1/p) of a memory time a > 0 and a compute time b >= 0."""
    return (a**p + b**p) ** (1.0 / p)


def attention_terms_s(c: PassCoefficients, n_seqs, positions_per_seq, sum_context_tokens):
    """(memory_s, compute_s) of the attention kernels of one pass.

    Sequence i's new position j (1-based) attends to ctx_i + j keys, so the FLOPs go with
    sum_i sum_j (ctx_i + j) = t C + S t (t + 1) / 2 and the KV bytes read with C + S t
    (C = sum of contexts before the pass, S = sequences, t = positions per sequence).
    """
    T = n_seqs * positions_per_seq
    memory_s = c.attn_read_per_ctx_token_s * (sum_context_tokens + T) + c.attn_per_new_token_s * T
    compute_s = c.attn_compute_per_pair_s * (
        positions_per_seq * sum_context_tokens + n_seqs * (positions_per_seq * (positions_per_seq + 1) / 2))
    return memory_s, compute_s


def pass_components_s(c: PassCoefficients, n_seqs, positions_per_seq, sum_context_tokens):
    """Time components (seconds) of one pass over n_seqs sequences x positions_per_seq positions.

    n_seqs, positions_per_seq and sum_context_tokens (sum over the sequences of the context before
    the pass) broadcast together (any shape); returns a dict of arrays of that shape:
    layers_non_attention, attention, lm_head, communication, overhead, compute, memory (the last
    two: summed roofline terms, for telling which bound dominates).
    """
    S, t, C = np.broadcast_arrays(np.asarray(n_seqs, dtype=float),
                                  np.asarray(positions_per_seq, dtype=float),
                                  np.asarray(sum_context_tokens, dtype=float))
    T = S * t
    p = c.sharpness_p
    shape_g = (-1,) + (1,) * T.ndim
    mem_g = c.gemm_weight_s.reshape(shape_g) + c.gemm_mem_per_token_s.reshape(shape_g) * T
    comp_g = c.gemm_compute_per_token_s.reshape(shape_g) * T
    gemm = np.tensordot(c.gemm_selector, _pnorm(mem_g, comp_g, p), axes=1)  # [2, ...]
    attn_mem, attn_comp = attention_terms_s(c, S, t, C)
    return {
        "layers_non_attention": gemm[0] + c.layer_elementwise_per_token_s * T + c.layer_fixed_s,
        "attention": _pnorm(attn_mem, attn_comp, p) + c.attn_fixed_s,
        "lm_head": gemm[1] + c.head_elementwise_per_token_s * T + c.head_fixed_s,
        "communication": (
            c.comm_fixed_s + c.comm_per_token_s * T if c.comm_custom is None
            else c.comm_n_allreduce * c.comm_custom.time_s(T * c.comm_bytes_per_token)),
        "overhead": c.overhead_fixed_s + c.overhead_per_seq_s * S,
        "compute": (c.gemm_selector @ comp_g.reshape(len(c.gemm_weight_s), -1)).sum(axis=0)
        .reshape(T.shape) + attn_comp,
        "memory": (c.gemm_selector @ mem_g.reshape(len(c.gemm_weight_s), -1)).sum(axis=0)
        .reshape(T.shape) + attn_mem,
    }


def pass_time_table_ms(c: PassCoefficients, max_seqs: int, max_positions: int) -> np.ndarray:
    """[max_seqs + 1, max_positions + 1] table of the attention-free part of a pass, ms.

    Entry [S, t] = layers_non_attention + lm_head + communication + overhead for S sequences x t
    positions: all of a pass but attention depends only on (S, t), so the engine path looks it up
    instead of recomputing it every step.
    """
    S, t = np.meshgrid(np.arange(max_seqs + 1), np.arange(max_positions + 1), indexing="ij")
    comp = pass_components_s(c, S, t, np.zeros(S.shape))
    return (comp["layers_non_attention"] + comp["lm_head"] + comp["communication"]
            + comp["overhead"]) * 1e3


def non_attention_forward_ms(gpu: GpuSpec, model: ModelSpec, tp: int, num_tokens,
                             params: CostModelParams) -> np.ndarray:
    """The quantity vidur's `forward_ms_non_attention` measures, in ms, for each num_tokens:
    all decoder layers without the attention kernel, LM head, communication or CPU work."""
    c = pass_coefficients(gpu, model, tp, params)
    tokens = np.asarray(num_tokens, dtype=float)
    return pass_components_s(c, tokens, 1, np.zeros_like(tokens))["layers_non_attention"] * 1e3


@dataclass(frozen=True)
class PassBreakdown:
    """Per-component time of one pass, ms."""

    tokens: int  # tokens in the pass (batch x positions)
    layers_non_attention_ms: float  # = vidur's forward_ms_non_attention
    attention_ms: float  # attention kernels incl. KV-cache write
    lm_head_ms: float  # final norm + LM head
    communication_ms: float  # TP all-reduces
    overhead_ms: float  # per-step CPU
    total_ms: float
    bound: str  # "memory" or "compute": the larger of the summed roofline terms


def forward_pass_breakdown(
    gpu: GpuSpec,
    model: ModelSpec,
    tp: int,
    batch: int,
    positions_per_seq: int,
    context_len_tokens: int,
    params: CostModelParams,
    allreduce: Sequence[AllReduceFit] = (),
    include_step_overhead: bool = True,
) -> PassBreakdown:
    """One target pass of `batch` sequences x `positions_per_seq` positions, each with
    `context_len_tokens` tokens already cached. Raises CostModelInputError when the inputs are bad
    or the weights plus the KV cache (batch x (context + positions)) do not fit in memory."""
    tp = check_tp(model, tp)
    batch = check_int("batch", batch, 1)
    positions_per_seq = check_int("positions", positions_per_seq, 1)
    context_len_tokens = check_int("context", context_len_tokens, 0)
    kv_tokens = batch * (context_len_tokens + positions_per_seq)
    weight_bytes = model.weight_bytes / tp
    need = float(memory_needed_bytes(weight_bytes, model.kv_bytes_per_token / tp, kv_tokens))
    if need > memory_usable_bytes(gpu, params):
        raise_does_not_fit(gpu, params, f"{model.model_id} at tp={tp}", need, weight_bytes,
                           kv_tokens)
    c = pass_coefficients(
        gpu, model, tp, params, allreduce,
        overhead_fixed_ms=params.step_cpu_fixed_ms if include_step_overhead else 0.0,
        overhead_per_seq_ms=params.step_cpu_per_seq_ms if include_step_overhead else 0.0,
    )
    comp = pass_components_s(c, np.array([batch]), positions_per_seq,
                             np.array([batch * context_len_tokens]))
    ms = {k: float(v[0]) * 1e3 for k, v in comp.items()}
    parts = ("layers_non_attention", "attention", "lm_head", "communication", "overhead")
    return PassBreakdown(
        tokens=batch * positions_per_seq,
        layers_non_attention_ms=ms["layers_non_attention"],
        attention_ms=ms["attention"],
        lm_head_ms=ms["lm_head"],
        communication_ms=ms["communication"],
        overhead_ms=ms["overhead"],
        total_ms=sum(ms[k] for k in parts),
        bound="compute" if ms["compute"] > ms["memory"] else "memory",
    )
