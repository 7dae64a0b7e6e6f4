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

import src.costmodel.shapes as shapes
from src.costmodel.allreduce import (
    AllReduceCost,
    CustomAllReduceParams,
    allreduce_coefficients,
    allreduce_cost,
)
from src.costmodel.attention import KERNEL_SHAPES, AttentionKernelModel
from src.costmodel.engines import EngineProfile
from src.costmodel.kernel_efficiency import engine_gpu
from src.costmodel.memory import (
    memory_needed_bytes,
    memory_usable_bytes,
    raise_does_not_fit,
)
from src.costmodel.presets import (
    BYTES_PER_VALUE,
    AllReduceFit,
    AttentionKernelFit,
    CostModelParams,
    GpuSpec,
    ModelSpec,
    check_int,
    check_tp,
)
from src.costmodel.variants import (
    MoeRouting,
    check_ep,
    expert_rows_and_multiplicity,
    pass_shape,
)

# Kernels in one decoder layer outside attention, as vidur profiles them: input RMSNorm, QKV
# projection, rotary embedding, output projection, post-attention RMSNorm, gate/up projection,
# SiLU-and-multiply, down projection, two residual adds.
KERNELS_PER_LAYER_NON_ATTENTION = 10
ATTENTION_KERNELS_PER_LAYER = 2  # KV-cache write (reshape_and_cache) + the attention kernel
LM_HEAD_KERNELS = 2  # final RMSNorm + LM-head GEMM
# GEMMs with 2..SMALL_GEMM_MAX_ROWS rows stream their weights at the GPU's small-GEMM bandwidth
# (where fitted): cuBLAS runs them as tiled small-M kernels, a 1-row GEMM as a matrix-vector kernel
SMALL_GEMM_MAX_ROWS = 16


@dataclass(frozen=True)
class PassCoefficients:
    """Time coefficients (seconds) of one pass of one network on one GPU at one TP degree.

    GEMM arrays have one entry per GEMM kind; row 0..n_layer_gemms-1 belong to the decoder layers
    (times n_layers), the rest to the LM head / extra projections (once per pass).
    """

    gemm_weight_s: np.ndarray  # [G] weight bytes / (bw x eff), x count (GEMMs of > 16 rows)
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
    # --- calibrated GPUs and engine implementations (defaults: the vidur-fitted model as it was)
    gemm_weight_small_s: np.ndarray | None = None  # [G] weight time of 2..16-row GEMMs
    gemm_weight_gemv_s: np.ndarray | None = None  # [G] weight time of 1-row GEMMs
    gemm_n: np.ndarray | None = None  # [G] output columns, for wave quantisation
    gemm_wave_tile: int = 0  # GEMM output-tile edge (0: no wave quantisation)
    sm_count: int = 0
    head_gemm_index: int = 0  # index of the LM-head GEMM (its rows are S in a prefill)
    verify_fixed_s: float = 0.0  # fixed time of the extra kernels of a pass with t > 1, all layers
    attn_kernels: tuple[AttentionKernelModel, ...] = ()  # fitted kernels (the fastest wins); ()
    #                                                      = roofline attention
    n_kernels: float = 0.0  # kernels of a one-position pass (eager launch cost)
    n_kernels_verify_extra: float = 0.0  # extra kernels of a pass with t > 1
    cuda_graphs: bool = True
    cuda_graph_max_seqs: int = 0  # with graphs: passes over more sequences run eagerly (0: none)
    cuda_graph_max_tokens: int = 0  # with graphs: passes over more S t tokens run eagerly (0: none)
    spec_step_eager_s: float = 0.0  # the engine's eager kernels between a drafted step's graphs
    cpu_launch_s: float = 0.0  # per kernel, without CUDA graphs
    launch_gap_s: float = 0.0  # per kernel, without CUDA graphs
    launch_overlap_p: float = 4.0
    # custom all-reduce (None = the NCCL terms above): all the pass's all-reduces take
    # comm_n_allreduce x comm_custom.time_s(tokens x comm_bytes_per_token)
    comm_custom: AllReduceCost | None = None
    comm_n_allreduce: int = 0  # all-reduces per pass
    comm_bytes_per_token: float = 0.0  # all-reduce message bytes per token (hidden x 2)
    # --- model variants (variants.py; defaults: a dense model)
    moe: MoeRouting | None = None  # routing of the MoE layers' routed experts
    gemm_expert_mask: np.ndarray | None = None  # [G] routed-expert GEMMs (priced per expert)
    attn_window_tokens: int = 0  # sliding window of the window layers (0 = none)
    attn_window_read_per_ctx_token_s: float = 0.0  # the window layers' KV read per cached token
    attn_window_compute_per_pair_s: float = 0.0  # the window layers' compute per pair


def kernel_fixed_s(gpu: GpuSpec, params: CostModelParams) -> float:
    """Fixed time of one kernel on this GPU, seconds: the GPU's own fitted kernel_fixed_us where
    it has one (GPUs with measurements), else the shared params.kernel_fixed_us."""
    us = gpu.kernel_fixed_us
    return (params.kernel_fixed_us if us is None else us) * 1e-6


def _gpu_value(gpu: GpuSpec, params: CostModelParams, name: str):
    """The GPU's own fitted value of a CostModelParams field where it has one, else the shared."""
    value = getattr(gpu, name)
    return getattr(params, name) if value is None else value


def attention_kernel_models(
    gpu: GpuSpec, model: ModelSpec, tp: int, params: CostModelParams, kernel: str,
    attention_fits: Sequence[AttentionKernelFit] = (), n_layers: int | None = None,
) -> tuple[AttentionKernelModel, ...]:
    """The fitted attention kernels an engine's `attention_kernel` names on this GPU: one for
    "flash" or "cudnn", every fitted one for "best", none for "roofline" or where the GPU has no
    fit for the kernel (or no sm_count): the pass then uses the roofline attention."""
    if kernel == "roofline" or not gpu.sm_count:
        return ()
    names = KERNEL_SHAPES if kernel == "best" else (kernel,)
    out = []
    for fit in attention_fits:
        if fit.gpu_id == gpu.gpu_id and fit.kernel in names:
            out.append(AttentionKernelModel(
                shape=KERNEL_SHAPES[fit.kernel],
                n_layers=model.n_layers if n_layers is None else n_layers,
                heads_kv=model.n_kv_heads / min(tp, model.n_kv_heads),
                group=model.n_heads / model.n_kv_heads,
                head_dim=model.head_dim, sm_count=gpu.sm_count,
                peak_flops_per_s=gpu.flops_per_s,
                peak_bytes_per_s=gpu.memory_bandwidth_bytes_per_s,
                compute_efficiency=fit.compute_efficiency_fraction,
                bandwidth_efficiency=fit.memory_bandwidth_efficiency_fraction,
                softmax_flops_per_pair=gpu.attention_softmax_flops_per_pair or 0.0))
    return tuple(sorted(out, key=lambda m: m.shape.name))


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
    engine: EngineProfile | None = None,
    attention_fits: Sequence[AttentionKernelFit] = (),
    allreduce_implementation: str | None = None,
    custom_allreduce: CustomAllReduceParams | None = None,
    ep: int = 1,
) -> PassCoefficients:
    """Precompute the batch-independent coefficients of one pass (see the module docstring).

    n_layers overrides the model's layer count (an EAGLE head runs 1 layer of the target's shape);
    extra_gemms are (K, N) projections run once per pass, unsplit by TP (EAGLE's 2h -> h fc).
    engine: the implementation (kernel counts, attention kernel, CUDA graphs or eager launches);
    None = sarathi-serve's kernels as vidur profiles them, with CUDA graphs and roofline attention.
    attention_fits: fitted attention kernels (Presets.attention) the engine's attention_kernel
    may name. allreduce_implementation "custom" times the all-reduces with vLLM's custom kernels
    where the system supports them (src/costmodel/allreduce.py); "nccl" keeps the linear NCCL
    terms; None = the engine's `allreduce` field ("nccl" without an engine).
    """
    e = engine if engine is not None else EngineProfile(
        name="roofline", description="", step_cpu_fixed_ms=0.0, step_cpu_per_seq_ms=0.0,
        draft_pass_cpu_fixed_ms=0.0, draft_pass_cpu_per_seq_ms=0.0, ngram_pass_cpu_ms=0.0,
        rejection_sampling_per_position_ms=0.0, kv_bookkeeping_per_seq_ms=0.0,
        draft_catchup_positions_per_seq=0, verification_attention_slowdown_factor=1.0)
    gpu = engine_gpu(gpu, e)  # the engine's table-fitted GEMM efficiencies, where it has them
    L = model.n_layers if n_layers is None else n_layers
    peak_bw = gpu.memory_bandwidth_bytes_per_s
    bw = peak_bw * _gpu_value(gpu, params, "memory_bandwidth_efficiency_fraction")
    bw_small = peak_bw * (gpu.small_gemm_bandwidth_efficiency_fraction
                          or _gpu_value(gpu, params, "memory_bandwidth_efficiency_fraction"))
    bw_gemv = peak_bw * (gpu.gemv_bandwidth_efficiency_fraction
                         or gpu.small_gemm_bandwidth_efficiency_fraction
                         or _gpu_value(gpu, params, "memory_bandwidth_efficiency_fraction"))
    fl = gpu.flops_per_s * _gpu_value(gpu, params, "compute_efficiency_fraction")
    kfix = kernel_fixed_s(gpu, params)
    if allreduce_implementation is None:
        allreduce_implementation = e.allreduce
    h, q, kv, inter = model.hidden_size, model.q_width, model.kv_width, model.intermediate_size
    B = BYTES_PER_VALUE
    variant = {}
    if model.is_plain and tp <= model.n_kv_heads:
        layer_gemms, head_gemms = plain_gemm_shapes(model, tp, extra_gemms)
        K = np.array([k for k, _ in layer_gemms + head_gemms], dtype=float)
        N = np.array([n for _, n in layer_gemms + head_gemms], dtype=float)
        count = np.array([L] * len(layer_gemms) + [1] * len(head_gemms), dtype=float)
        selector = np.zeros((2, len(K)))
        selector[0, : len(layer_gemms)] = 1.0
        selector[1, len(layer_gemms):] = 1.0
        # Elementwise bytes per token per layer: 2 RMSNorms (read + write h), 2 residual adds
        # (2 reads + 1 write of h) - replicated on every TP rank -, rotary on q and k (read +
        # write), SiLU-and-multiply (read gate and up, write one) - split by TP.
        elementwise_values = 4 * h + 6 * h + 2 * (q + kv) / tp + 3 * inter / tp
        layer_elementwise = L * elementwise_values * B / bw
        Bw, fl_g, head_index, extra_kernels = B, fl, len(layer_gemms), 0.0
        attn_read = L * 2 * kv / tp * B / bw
        attn_new = L * (2 * kv / tp + 2 * q / tp) * B / bw
        attn_pair = L * 4 * q / tp / fl
    else:  # MoE, MLA, sliding windows, other formats, EAGLE-3 heads (variants.py)
        sh = pass_shape(gpu, model, tp, n_layers, extra_gemms, ep)
        K, N, count, selector = sh.K, sh.N, sh.count, sh.selector
        Bw, head_index, extra_kernels = sh.weight_bytes_per_value, sh.head_index, sh.extra_kernels
        fl_g = sh.peak_flops_per_s * _gpu_value(gpu, params, "compute_efficiency_fraction")
        layer_elementwise = sh.elementwise_values * B / bw
        kv_read = sh.kv_values_per_token_layer * sh.kv_bytes_per_value / bw
        attn_read = sh.full_layers * kv_read
        attn_new = (sh.full_layers + sh.window_layers) * sh.new_token_values_per_layer * B / bw
        attn_pair = sh.full_layers * sh.pair_flops_per_layer / fl
        variant = dict(moe=sh.routing, gemm_expert_mask=sh.expert_mask,
                       attn_window_tokens=sh.window_tokens if sh.window_layers else 0,
                       attn_window_read_per_ctx_token_s=sh.window_layers * kv_read,
                       attn_window_compute_per_pair_s=sh.window_layers * sh.pair_flops_per_layer
                       / fl)
    n_allreduce = 2 * L if tp > 1 else 0
    ar_latency_s, ar_bus_bytes_per_s = allreduce_coefficients(gpu, tp, params, allreduce)
    comm_custom = None
    if tp > 1 and allreduce_implementation != "nccl":
        ar = allreduce_cost(gpu, tp, params, allreduce, allreduce_implementation, custom_allreduce)
        comm_custom = ar if ar.custom else None
    head_kernels = e.kernels_per_pass + len(extra_gemms)
    n_kernels = L * (e.kernels_per_layer + e.attention_kernels_per_layer) + head_kernels
    n_kernels += extra_kernels
    if tp > 1:
        n_kernels += n_allreduce
    # fitted attention kernels model BF16 GQA caches read in full; other caches: the roofline
    attn_kernels = attention_kernel_models(gpu, model, tp, params, e.attention_kernel,
                                           attention_fits, n_layers=L) if (
        model.attention == "gqa" and not variant.get("attn_window_tokens")
        and model.kv_cache_format == "bf16") else ()
    return PassCoefficients(
        gemm_weight_s=count * K * N * Bw / bw,
        gemm_mem_per_token_s=count * (K + N) * B / bw,
        gemm_compute_per_token_s=count * 2 * K * N / fl_g,
        gemm_selector=selector,
        layer_elementwise_per_token_s=layer_elementwise,
        layer_fixed_s=(L * e.kernels_per_layer + extra_kernels) * kfix,
        attn_read_per_ctx_token_s=attn_read,
        attn_per_new_token_s=attn_new,
        attn_compute_per_pair_s=attn_pair,
        attn_fixed_s=L * e.attention_kernels_per_layer * kfix,
        head_elementwise_per_token_s=2 * h * B / bw,
        head_fixed_s=head_kernels * kfix,
        comm_fixed_s=n_allreduce * ar_latency_s,
        comm_per_token_s=(n_allreduce * 2 * (tp - 1) / tp * h * B / ar_bus_bytes_per_s
                          if tp > 1 else 0.0),
        overhead_fixed_s=overhead_fixed_ms * 1e-3,
        overhead_per_seq_s=overhead_per_seq_ms * 1e-3,
        sharpness_p=_gpu_value(gpu, params, "roofline_sharpness_p"),
        gemm_weight_small_s=count * K * N * Bw / bw_small,
        gemm_weight_gemv_s=count * K * N * Bw / bw_gemv,
        gemm_n=N,
        gemm_wave_tile=(gpu.gemm_wave_tile or 0) if gpu.sm_count else 0,
        sm_count=gpu.sm_count or 0,
        head_gemm_index=head_index,
        verify_fixed_s=L * e.verification_extra_kernels_per_layer * kfix,
        attn_kernels=attn_kernels,
        n_kernels=float(n_kernels),
        n_kernels_verify_extra=L * e.verification_extra_kernels_per_layer,
        cuda_graphs=e.cuda_graphs,
        cuda_graph_max_seqs=e.cuda_graph_max_batch(gpu.memory_gb, tp),
        cuda_graph_max_tokens=e.cuda_graph_max_tokens,
        spec_step_eager_s=eager_kernels_s(e.spec_step_eager_kernels, kfix, e),
        cpu_launch_s=e.cpu_launch_us_per_kernel * 1e-6,
        launch_gap_s=e.launch_gap_us_per_kernel * 1e-6,
        launch_overlap_p=e.launch_overlap_p,
        comm_custom=comm_custom,
        comm_n_allreduce=n_allreduce,
        comm_bytes_per_token=h * B,
        **variant,
    )


def plain_gemm_shapes(model: ModelSpec, tp: int, extra_gemms: Sequence[tuple[int, int]] = ()
                      ) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """(K, N) of a dense BF16 Llama-style decoder's GEMMs per TP rank: the layer's (QKV, O,
    gate/up, down) and the once-per-pass ones (LM head, then extra_gemms, unsplit by TP)."""
    h, q, kv, inter = model.hidden_size, model.q_width, model.kv_width, model.intermediate_size
    layer_gemms = [(h, (q + 2 * kv) / tp), (q / tp, h), (h, 2 * inter / tp), (inter / tp, h)]
    head_gemms = [(h, model.vocab_size / tp)] + [(k, n) for k, n in extra_gemms]
    return layer_gemms, head_gemms


def eager_kernels_s(n_kernels: int, kernel_fixed: float, e: EngineProfile) -> float:
    """Seconds of n kernels launched one by one from the host with e's launch costs:
    pnorm(n (kernel_fixed + gap), n cpu_launch, p), GPU time and host launches overlapping."""
    return float(_pnorm(n_kernels * (kernel_fixed + e.launch_gap_us_per_kernel * 1e-6),
                        n_kernels * e.cpu_launch_us_per_kernel * 1e-6, e.launch_overlap_p))


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
        positions_per_seq * sum_context_tokens + n_seqs
        * (positions_per_seq * (positions_per_seq + 1) / 2))
    if c.attn_window_tokens:  # window layers read at most W cached tokens per sequence
        window_ctx = window_context_tokens(c, n_seqs, sum_context_tokens)
        memory_s = memory_s + c.attn_window_read_per_ctx_token_s * (window_ctx + T)
        compute_s = compute_s + c.attn_window_compute_per_pair_s * (
            positions_per_seq * window_ctx + n_seqs
            * (positions_per_seq * (positions_per_seq + 1) / 2))
    return memory_s, compute_s


def window_context_tokens(c: PassCoefficients, n_seqs, sum_context_tokens):
    """Cached tokens the sliding-window layers read, summed over the sequences: sum_i min(ctx_i,
    W), taken as min(C, S W) from the sums (exact where every context is >= W or every one is
    <= W; design.md, "Attention variants")."""
    return np.minimum(np.asarray(sum_context_tokens, dtype=float),
                      np.asarray(n_seqs, dtype=float) * c.attn_window_tokens)


def routed_gemm_terms_s(c: PassCoefficients, rows, expert_rows, waited):
    """gemm_terms_s with the routed-expert GEMMs (c.gemm_expert_mask) at expert_rows each,
    run `waited` times a pass (grouped); the other GEMMs at `rows`, once. Returns (memory s,
    compute s) per GEMM, each expert GEMM's multiplied by its passes."""
    mask = c.gemm_expert_mask.reshape((-1,) + (1,) * (np.ndim(rows) - 1))
    rows = np.where(mask, expert_rows, rows)
    per_pass = np.where(mask, waited, 1.0)
    mem_g, comp_g = gemm_terms_s(c, rows, group=np.maximum(per_pass, 1.0), grouped=mask)
    return mem_g * per_pass, comp_g * per_pass


def gemm_terms_s(c: PassCoefficients, rows, group=None, grouped=None):
    """(memory_s [G, ...], compute_s [G, ...]) of every GEMM of a pass whose GEMMs have `rows`
    rows (an array [G, ...] or broadcastable), each with its M-dependent weight bandwidth and,
    where the GPU has a wave tile, its compute time scaled by the wave quantisation. group
    ([G, ...], optional): GEMMs run as one grouped kernel of that many problems (the routed
    experts of a MoE layer: fused_moe tiles all experts in one launch), so the waves count the
    tiles of the whole group; grouped ([G, ...] bool): those GEMMs are tiled kernels whatever
    their rows (fused_moe's BLOCK_SIZE_M >= 16), never the matrix-vector kernel of a 1-row GEMM,
    so up to 16 rows they stream at the small-GEMM bandwidth."""
    shape_g = (-1,) + (1,) * (np.ndim(rows) - 1)
    weight = c.gemm_weight_s.reshape(shape_g)
    if c.gemm_weight_small_s is not None:
        gemv = rows <= 1 if grouped is None else (rows <= 1) & ~grouped
        weight = np.where(gemv, c.gemm_weight_gemv_s.reshape(shape_g),
                          np.where(rows <= SMALL_GEMM_MAX_ROWS,
                                   c.gemm_weight_small_s.reshape(shape_g), weight))
    memory = weight + c.gemm_mem_per_token_s.reshape(shape_g) * rows
    compute = c.gemm_compute_per_token_s.reshape(shape_g) * rows
    if c.gemm_wave_tile:
        tile = c.gemm_wave_tile
        tiles = np.ceil(rows / tile) * np.ceil(c.gemm_n.reshape(shape_g) / tile)
        if group is not None:
            tiles = tiles * group
        compute = compute * np.where(
            tiles > 0, np.ceil(tiles / c.sm_count) * c.sm_count / np.maximum(tiles, 1), 1.0)
    return memory, compute


def attention_s(c: PassCoefficients, n_seqs, positions_per_seq, sum_context_tokens,
                prefill: bool = False):
    """Attention kernels' time of one pass without their fixed part, seconds: the fastest fitted
    kernel (attention.py) where the pass has any, else the roofline pnorm(attention_terms_s).
    Fitted kernels see every sequence at the mean context C / S."""
    if c.attn_kernels:
        S = np.asarray(n_seqs, dtype=float)
        ctx = np.asarray(sum_context_tokens, dtype=float) / np.maximum(S, 1)
        return np.min([k.pass_s(S, positions_per_seq, ctx, prefill) for k in c.attn_kernels],
                      axis=0)
    return _pnorm(*attention_terms_s(c, n_seqs, positions_per_seq, sum_context_tokens),
                  c.sharpness_p)


def launch_overhead_s(c: PassCoefficients, gpu_s, positions_per_seq, n_seqs=None):
    """CPU launch cost beyond the GPU time of a pass run without CUDA graphs, seconds:
    pnorm(g + N gap, N cpu_launch, p) - g for a pass of N kernels and GPU time g; 0 with graphs
    or where g = 0 (no pass). With graphs up to c.cuda_graph_max_seqs sequences (SGLang's
    cuda_graph_max_bs) or c.cuda_graph_max_tokens tokens n_seqs x positions_per_seq (vLLM's
    max_cudagraph_capture_size), a larger pass runs eagerly and pays the same launch cost."""
    gpu_s = np.asarray(gpu_s, dtype=float)
    limited = c.cuda_graph_max_seqs or c.cuda_graph_max_tokens
    if c.cuda_graphs and (not limited or n_seqs is None):
        return np.zeros_like(gpu_s)
    t = np.asarray(positions_per_seq)
    n = c.n_kernels + c.n_kernels_verify_extra * (t > 1)
    total = _pnorm(gpu_s + n * c.launch_gap_s, n * c.cpu_launch_s, c.launch_overlap_p)
    eager = gpu_s > 0
    if c.cuda_graphs:
        S = np.asarray(n_seqs)
        eager = eager & (((S > c.cuda_graph_max_seqs) if c.cuda_graph_max_seqs else False)
                         | ((S * t > c.cuda_graph_max_tokens) if c.cuda_graph_max_tokens
                            else False))
    return np.where(eager, total - gpu_s, 0.0)


def pass_components_s(c: PassCoefficients, n_seqs, positions_per_seq, sum_context_tokens,
                      prefill: bool = False):
    """Time components (seconds) of one pass over n_seqs sequences x positions_per_seq positions.

    n_seqs, positions_per_seq and sum_context_tokens (sum over the sequences of the context before
    the pass) broadcast together (any shape); returns a dict of arrays of that shape:
    layers_non_attention, attention, lm_head, communication, overhead, launch (eager launch cost
    beyond the GPU time), compute, memory (the last two: summed roofline terms, for telling which
    bound dominates). prefill: the positions are a prompt (causal attention tiled per query head)
    and the LM head runs on the last position of each sequence only.
    """
    S, t, C = np.broadcast_arrays(np.asarray(n_seqs, dtype=float),
                                  np.asarray(positions_per_seq, dtype=float),
                                  np.asarray(sum_context_tokens, dtype=float))
    T = S * t
    p = c.sharpness_p
    G = len(c.gemm_weight_s)
    rows = np.broadcast_to(T, (G,) + T.shape).copy()
    if prefill:
        rows[c.head_gemm_index] = S
    distinct = None
    if c.moe is not None:  # routed experts: D touched experts per layer, T k / D rows each
        expert_rows, waited, distinct = expert_rows_and_multiplicity(c.moe, S, t)
        mem_g, comp_g = routed_gemm_terms_s(c, rows, expert_rows, waited)
    else:
        mem_g, comp_g = gemm_terms_s(c, rows)
    gemm = np.tensordot(c.gemm_selector, _pnorm(mem_g, comp_g, p), axes=1)  # [2, ...]
    attn_mem, attn_comp = attention_terms_s(c, S, t, C)
    head_tokens = S if prefill else T
    out = {
        "layers_non_attention": gemm[0] + c.layer_elementwise_per_token_s * T + c.layer_fixed_s
        + c.verify_fixed_s * (t > 1),
        "attention": attention_s(c, S, t, C, prefill) + c.attn_fixed_s,
        "lm_head": gemm[1] + c.head_elementwise_per_token_s * head_tokens + c.head_fixed_s,
        "communication": (
            c.comm_fixed_s + c.comm_per_token_s * T if c.comm_custom is None
            else c.comm_n_allreduce * c.comm_custom.time_s(T * c.comm_bytes_per_token)),
        "overhead": c.overhead_fixed_s + c.overhead_per_seq_s * S,
        "compute": (c.gemm_selector @ comp_g.reshape(G, -1)).sum(axis=0).reshape(T.shape)
        + attn_comp,
        "memory": (c.gemm_selector @ mem_g.reshape(G, -1)).sum(axis=0).reshape(T.shape)
        + attn_mem,
    }
    gpu = out["layers_non_attention"] + out["attention"] + out["lm_head"] + out["communication"]
    out["launch"] = launch_overhead_s(c, gpu, t)
    if distinct is not None:  # per MoE layer, all GPUs together
        out["distinct_experts"] = distinct
    return out


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
    launch_ms: float = 0.0  # CPU launch cost beyond the GPU time (engines without CUDA graphs)
    distinct_experts: float = 0.0  # expected distinct routed experts per MoE layer (0: dense)


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
    engine: EngineProfile | None = None,
    attention_fits: Sequence[AttentionKernelFit] = (),
    prefill: bool = False,
    ep: int = 1,
) -> PassBreakdown:
    """One target pass of `batch` sequences x `positions_per_seq` positions, each with
    `context_len_tokens` tokens already cached. Raises CostModelInputError when the inputs are bad
    or the weights plus the KV cache (batch x (context + positions)) do not fit in memory.
    engine / attention_fits: the implementation (pass_coefficients); prefill: the positions are a
    prompt (causal attention, LM head on the last position only). The overhead is
    CostModelParams' step CPU (include_step_overhead), not the engine's."""
    tp = check_tp(model, tp)
    batch = check_int("batch", batch, 1)
    positions_per_seq = check_int("positions", positions_per_seq, 1)
    context_len_tokens = check_int("context", context_len_tokens, 0)
    check_ep(model, check_int("ep", ep, 1), tp)
    kv_tokens = batch * (context_len_tokens + positions_per_seq)
    weight_bytes = model.weight_bytes / tp
    if model.is_plain and tp <= model.n_kv_heads:
        need = float(memory_needed_bytes(weight_bytes, model.kv_bytes_per_token / tp, kv_tokens))
    else:  # MLA caches are replicated over TP; sliding-window layers hold W tokens per sequence
        div = shapes.kv_tp_divisor(model, tp)
        need = float(memory_needed_bytes(weight_bytes, model.kv_bytes_per_token / div, kv_tokens)
                     + batch * shapes.window_kv_bytes_per_seq(model) / div)
    if need > memory_usable_bytes(gpu, params):
        raise_does_not_fit(gpu, params, f"{model.model_id} at tp={tp}", need, weight_bytes,
                           kv_tokens, model)
    c = pass_coefficients(
        gpu, model, tp, params, allreduce,
        overhead_fixed_ms=params.step_cpu_fixed_ms if include_step_overhead else 0.0,
        overhead_per_seq_ms=params.step_cpu_per_seq_ms if include_step_overhead else 0.0,
        engine=engine, attention_fits=attention_fits, ep=ep,
    )
    comp = pass_components_s(c, np.array([batch]), positions_per_seq,
                             np.array([batch * context_len_tokens]), prefill=prefill)
    ms = {k: float(v[0]) * 1e3 for k, v in comp.items() if k != "distinct_experts"}
    parts = ("layers_non_attention", "attention", "lm_head", "communication", "overhead",
             "launch")
    return PassBreakdown(
        tokens=batch * positions_per_seq,
        layers_non_attention_ms=ms["layers_non_attention"],
        attention_ms=ms["attention"],
        lm_head_ms=ms["lm_head"],
        communication_ms=ms["communication"],
        overhead_ms=ms["overhead"],
        total_ms=sum(ms[k] for k in parts),
        bound="compute" if ms["compute"] > ms["memory"] else "memory",
        launch_ms=ms["launch"],
        distinct_experts=float(comp["distinct_experts"][0]) if "distinct_experts" in comp else 0.0,
    )
