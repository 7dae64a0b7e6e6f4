"""A target pass's GEMMs and decode attention priced from measured kernels, over the roofline.

For one pass of S sequences x t positions with ctx tokens cached each (T = S t rows), the
roofline's pass (src/costmodel/roofline.py) is kept and each of these terms is replaced where
the table covers it (design.md, "Measured kernels"):

- each GEMM g of the pass (QKV, O, gate/up, down per layer or MLA's projections, a MoE layer's
  router and shared experts, the LM head once; each at its weight format's table:
  pass_gemms.py): roofline pnorm_g + one kernel's fixed time -> measured gemm_ms(T, N_g, K_g);
- a MoE target's routed experts, per MoE layer: the roofline's expert GEMMs + the fused
  kernels' fixed time -> the engine's measured fused-MoE layer at T tokens (pass_moe.py);
  where the engine runs the shared experts on a second stream (EngineProfile
  shared_experts_overlap: TensorRT-LLM's DeepSeek-V3 MoE) the layers cost max(routed, shared,
  the roofline of both) instead of the sum (pass_gemms.py shared_hidden_ms);
- decode attention: roofline attention_s + one kernel's fixed time per layer -> the measured
  kernel by src/kernels/pass_attention.py's rule (linear in batch and KV length inside the
  table, the edge's row plus the roofline's increment beyond it, the roofline's t-position
  premium for a verification of t <= MAX_DECODE_POSITIONS; a wider pass is a prompt chunk,
  whose kernel is context attention, a later table): the same PassAttention the cost model and
  the compiled serving engine price from. attention_source says "<label>+roofline" where the
  KV length is beyond the table's edge for that batch.

Anything the table does not cover (a GEMM off the grid, a rejected row, a model other than a
MoE key the table lacks, sliding-window attention) keeps its roofline price and says so.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from src.costmodel.presets import GpuSpec, ModelSpec
from src.costmodel.roofline import (
    PassCoefficients,
    attention_s,
    kernel_fixed_s,
)
from src.kernels.measured import MeasuredKernels
from src.kernels.pass_attention import MAX_DECODE_POSITIONS, PassAttention
from src.kernels.pass_gemms import PassGemms
from src.kernels.pass_moe import PassMoe
from src.kernels.physics import Peaks
from src.kernels.sources import TableSource

ROOFLINE = "roofline"
__all__ = ["MAX_DECODE_POSITIONS", "MeasuredPass", "gpu_peaks", "price_pass"]


def gpu_peaks(gpu: GpuSpec) -> Peaks:
    """The preset's datasheet peaks (physics.py's bounds)."""
    bf16 = gpu.dense_bf16_tflops * 1e12
    fp8 = (gpu.dense_fp8_tflops or gpu.dense_bf16_tflops) * 1e12
    return Peaks(bf16, fp8, gpu.memory_bandwidth_bytes_per_s)


@dataclass(frozen=True)
class MeasuredPass:
    """What measured kernels change in one pass: ms to add to each roofline component, the ms
    priced from measured rows, and the source of each term."""

    layers_delta_ms: float
    lm_head_delta_ms: float
    attention_delta_ms: float
    measured_ms: float
    gemm_source: str  # the layer GEMMs': a table label, ROOFLINE, or "<label>+roofline"
    lm_head_source: str
    attention_source: str
    notes: tuple[str, ...]  # why a term kept the roofline
    attention_kernel: str = ""  # the table's kernel source that priced the attention, if any
    moe_source: str = ""  # the routed experts': a table label or ROOFLINE ("" for a dense model)
    moe_kernel: str = ""  # the MoE table's kernel source that priced them, if any


def _label(src: TableSource) -> str:
    return f"{src.backend}-{src.version}"


def _mix(src: TableSource, measured: list[bool]) -> str:
    if all(measured):
        return _label(src)
    return f"{_label(src)}+{ROOFLINE}" if any(measured) else ROOFLINE


def price_pass(kernels: MeasuredKernels, c: PassCoefficients, gpu: GpuSpec, params,
               model: ModelSpec, tp: int, n_seqs: int, positions: int, context: int,
               ep: int = 1, shared_overlap: bool = False) -> MeasuredPass:
    """MeasuredPass of one target pass (module docstring); c: the roofline coefficients the
    pass was priced with (pass_coefficients of the same gpu, model, tp and engine);
    shared_overlap: the engine's EngineProfile.shared_experts_overlap."""
    src, notes = kernels.src, []
    kfix = kernel_fixed_s(gpu, params)
    S, t = float(n_seqs), float(positions)
    T, L = S * t, model.n_layers
    layer_delta = head_delta = attn_delta = measured = 0.0
    gemm_source = head_source = ROOFLINE
    moe = PassMoe(kernels, c, model, tp, ep, gpu, params)
    gemms = PassGemms(kernels, c, model, tp, gpu, params, ep=ep, moe=moe,
                      shared_overlap=shared_overlap)
    if gemms.applies:
        layer_d, head_d, meas, ok = gemms.parts_ms(np.array([T]))
        layer_delta, head_delta, measured = float(layer_d[0]), float(head_d[0]), float(meas[0])
        got = ok[:, 0].tolist()
        for (k, n), dtype, hit in zip(gemms.shapes, gemms.dtypes, got):
            if not hit:
                notes.append(f"GEMM m={T:g} n={n:g} k={k:g} {dtype or 'format without a table'}"
                             ": off the table's grid or rejected")
        gemm_source = _mix(src, got[:gemms.n_layer])
        head_source = _mix(src, got[gemms.n_layer:])
    else:
        notes.append(f"{model.model_id}: GEMMs from the roofline (measured GEMMs price dense BF16 "
                     "and MoE decoders so far)")
    moe_source = moe_kernel = ""
    if model.n_routed_experts:
        moe_source = ROOFLINE
        if moe.applies:
            d, meas, ok = moe.parts_ms(np.array([S]), np.array([t]))
            if ok[0]:
                layer_delta += float(d[0])
                measured += float(meas[0])
                moe_source, moe_kernel = _label(src), moe.kernel_source
                if T > moe.tokens[-1]:
                    moe_source += f"+{ROOFLINE}"
                    notes.append(f"MoE layer at {T:g} tokens: beyond the table's edge "
                                 f"{moe.tokens[-1]:g}: the roofline anchored to the edge's row")
            else:
                notes.append(f"MoE layer at {T:g} tokens: no measured row of this token count "
                             "(or it was rejected); priced from the roofline")
        else:
            notes.append(moe.why)
        if gemms.applies and gemms.shared_overlap:  # beside the routed experts: max, not sum
            hidden = float(gemms.shared_hidden_ms(np.array([S]), np.array([t]))[0])
            layer_delta -= hidden
            notes.append(f"shared experts on a second stream beside the routed experts: "
                         f"{hidden:.3f} ms hidden")
    attention_source = ROOFLINE
    attn = PassAttention(kernels, c, model, tp, gpu, params)
    if positions > MAX_DECODE_POSITIONS:
        notes.append(f"attention of {positions} positions per sequence: a prompt chunk (the "
                     f"decode-attention table prices up to {MAX_DECODE_POSITIONS})")
    elif not attn.applies:
        notes.append(attn.why)
    else:
        heads, kv_heads, head_dim = attn.heads
        kv_len = context + positions
        ms, edge, from_rows = attn.pass_ms(S, S * context, t)
        if not np.isfinite(ms[0]):
            notes.append(f"decode attention batch={n_seqs} kv={kv_len} heads={heads}/{kv_heads} "
                         f"d={head_dim}: no measured row at this batch")
        else:
            roof_t = float(np.asarray(attention_s(c, S, t, S * context)).ravel()[0])
            attn_delta = float(ms[0]) - (roof_t + L * kfix) * 1e3
            measured += float(from_rows[0])  # beyond the edge: the roofline's increment is not
            attention_source = _label(src)
            if edge[0] != kv_len:  # off the grid: the edge's row plus the roofline's increment
                attention_source += f"+{ROOFLINE}"
                notes.append(f"decode attention batch={n_seqs} kv={kv_len}: beyond the table's "
                             f"edge kv={edge[0]:g} for this batch: the edge's measured row plus "
                             "the roofline's increment")
    return MeasuredPass(layer_delta, head_delta, attn_delta, measured, gemm_source, head_source,
                        attention_source, tuple(notes),
                        attn.kernel_source if attention_source != ROOFLINE else "",
                        moe_source, moe_kernel)
