"""Which MoE communication an attention-DP worker runs, and the all-gather + reduce-scatter price.

Under attention DP each rank holds its own tokens; every MoE layer needs all ranks' tokens on
the GPUs holding the experts. The engines do it one of two ways (design.md, "MoE communication
under attention DP", with the source lines):

    alltoall                  dispatch each token to its top-k experts' GPUs, combine back
                              (priced in worker.py: measured DeepEP low-latency tables, roofline)
    allgather_reducescatter   all-gather every rank's tokens onto every GPU before the MoE,
                              reduce-scatter the partial expert sums back to their rank after

The engine profile's `attention_dp_moe_comm` names the engine's default for expert parallelism
(ep = G): "alltoall", "nvlink_alltoall" (an all-to-all only where the GPUs are NVLink-connected,
TensorRT-LLM's MnnvlMemory.supports_mnnvl: every NVLink up; `nvlink_connected`), or
"allgather_reducescatter". With the experts
TP-split (ep = 1, MoE TP = G) every engine all-gathers and reduce-scatters (TensorRT-LLM's
CommunicationFactory returns AllGatherReduceScatter for moe_tp_size != 1; an all-to-all cannot
split an expert).

The all-gather + reduce-scatter of one MoE layer, N = tokens per GPU x G tokens gathered (each
GPU contributes its rank's tokens / tp; the busiest rank's count stands for every rank, as
padded collectives do: SGLang's MAX_LEN padding, TensorRT-LLM's use_dp_padding):

    all-gather      N h b_d bytes (whole buffer), b_d = dispatch bytes per value
    reduce-scatter  N h 2 bytes (BF16 partial sums of the N tokens)
    b_d = 2 (BF16) unless the profile's `attention_dp_dispatch_quantized`: then the routed
          experts' activation format, NVFP4 9/16 (4 bits + one FP8 scale per 16 values),
          per-tensor FP8 1; others stay BF16 (TensorRT-LLM quantizes before its post-quant
          all-gather; DeepSeek's FP8 block experts quantize inside the fused MoE op)

each priced from AIConfigurator's measured NCCL tables (src/kernels/nccl_table.py) where the
GPU's system and G have one, else NCCL's bus-bandwidth line (the cost model's fitted NCCL
latency and bus bandwidth, src/costmodel/allreduce.py): t = latency + (G - 1) / G bytes / bus.
The routing metadata the engines gather beside the hidden states (TensorRT-LLM: k int32 expert
ids and k FP32 weights per token, ~1% of DeepSeek's 7168 BF16 values) is left out.
"""
from __future__ import annotations

import numpy as np

from src.costmodel.allreduce import allreduce_coefficients
from src.costmodel.engines import ATTENTION_DP_MOE_COMM_CHOICES
from src.kernels.nccl_table import collective_ms

MOE_COMM_KINDS = ATTENTION_DP_MOE_COMM_CHOICES
COMBINE_BYTES_PER_VALUE = 2.0  # BF16 partial sums
_QUANTIZED_DISPATCH_BYTES = {"nvfp4": 0.5 + 1.0 / 16.0, "fp8": 1.0}


def comm_kind(engine, gpu, ep: int, gpus: int) -> str:
    """'alltoall' or 'allgather_reducescatter': what an attention-DP worker of `gpus` GPUs at
    expert parallelism `ep` runs per MoE layer under `engine` (module docstring)."""
    if ep != gpus:
        return "allgather_reducescatter"
    kind = getattr(engine, "attention_dp_moe_comm", "alltoall") or "alltoall"
    if kind == "nvlink_alltoall":
        return "alltoall" if nvlink_connected(gpu, gpus) else "allgather_reducescatter"
    return kind


def nvlink_connected(gpu, gpus: int) -> bool:
    """Every GPU pair on NVLink, as the GPU preset's `interconnect` says: an NVSwitch node, or
    a bridged pair of 2 (the PCIe presets say "no NVLink")."""
    link = gpu.interconnect.lower()
    if "nvlink" not in link or "no nvlink" in link:
        return False
    return "nvswitch" in link or gpus == 2


def dispatch_bytes_per_value(engine, model) -> float:
    """Bytes per hidden value the all-gather moves (module docstring)."""
    if not getattr(engine, "attention_dp_dispatch_quantized", False):
        return 2.0
    fmt = model.expert_weight_format or model.weight_format
    return _QUANTIZED_DISPATCH_BYTES.get(fmt, 2.0)


def collective_s(gpu, params, allreduce_fits, op: str, gpus: int, nbytes) -> np.ndarray:
    """Seconds of one NCCL all-gather or reduce-scatter of `nbytes` (whole buffer, array) over
    `gpus` GPUs: the measured table, else the NCCL line (module docstring)."""
    measured = collective_ms(gpu.kernel_system or "", op, gpus, nbytes)
    if measured is not None:
        return np.asarray(measured) * 1e-3
    latency_s, bus = allreduce_coefficients(gpu, gpus, params, allreduce_fits)
    return latency_s + (gpus - 1) / gpus * np.asarray(nbytes, dtype=float) / bus


def allgather_reducescatter_ms(cost, gpus: int, tokens_per_gpu) -> np.ndarray:
    """ms of one MoE layer's all-gather + reduce-scatter on `cost` (the worker's cost model)
    with tokens_per_gpu tokens on each of `gpus` GPUs (array); 0 where there are none."""
    m = cost.target
    T = np.asarray(tokens_per_gpu, dtype=float)
    values = T * gpus * m.hidden_size
    ag = collective_s(cost.gpu, cost.params, cost.allreduce, "all_gather", gpus,
                      values * dispatch_bytes_per_value(cost.engine, m))
    rs = collective_s(cost.gpu, cost.params, cost.allreduce, "reduce_scatter", gpus,
                      values * COMBINE_BYTES_PER_VALUE)
    return np.where(T > 0, (ag + rs) * 1e3, 0.0)
