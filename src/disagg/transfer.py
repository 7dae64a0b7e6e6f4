"""The KV transfer between pools: a finished prompt's KV cache moved to a decode worker.

    transfer_ms(P) = latency_ms + bytes_per_link(P) / bandwidth
    bytes_per_link(P) = KV bytes of P prompt tokens / min(KV split of the prefill rank,
                                                          KV split of the decode rank)

The KV bytes per token are the model's own layout (ModelSpec.kv_bytes_per_token: GQA heads,
MLA latent, FP8 caches; sliding-window layers hold at most their window per sequence,
shapes.window_kv_bytes_per_seq). A rank of tp GPUs holds the cache split over its GPUs
(shapes.kv_tp_divisor: tp for GQA up to the KV heads, 1 for MLA, whose latent every GPU keeps
whole); each GPU sends or receives its share over its own link at the same time, so the slower
side's share sets the time. The draft's KV (an MTP layer, an EAGLE head) is not transferred here:
engines rebuild it on the decode worker, or it is one layer of 62 (DeepSeek-V3), left out.

Links (per GPU, one direction):
    nvlink   the GPU preset's NVLink figure / 2 (interconnect_bidirectional_gb_per_s: H200 and
             H100 900 GB/s, datasheets), both pools in one NVSwitch domain
    network  one ConnectX-7 NIC per GPU at 400 Gb/s = 50 GB/s (NVIDIA ConnectX-7 datasheet;
             DGX H200 and DGX B200 have eight single-port ConnectX-7 400 Gb/s, one per GPU;
             DeepEP's README measures ~50 GB/s RDMA on a CX7 400 Gb/s card), of which a KV
             transfer achieves NETWORK_BANDWIDTH_FRACTION
    none     no transfer (the test of issue 25 section 4: zero transfer cost)

The network's per-transfer latency and achieved fraction are Mooncake's measured KV transfers
(kvcache-ai.github.io/Mooncake/performance/vllm-v1-support-benchmark.html: vLLM v1's Mooncake
connector, 1P1D Qwen3-8B across two nodes over 8 x 200 Gb/s RoCE = 200 GB/s line rate, GPU
Direct RDMA): 20 MB (128 tokens) in 0.54 ms, 146 MB in 1.50 ms, 1.13 GB in 8.84 ms, 4.50 GB
(32,768 tokens) in 31.65 ms. The line through the smallest and largest transfer has slope
(4.50 - 0.02) GB / (31.65 - 0.54) ms = 144 GB/s = 0.72 of the line rate and intercept
0.54 - 0.02 GB / 144 GB/s = 0.40 ms; the middle points lie within 0.6 ms of it (1.50 vs 1.41
and 8.84 vs 8.25 ms). NIXL over UCX (Dynamo's and TensorRT-LLM's default) and InfiniBand are
taken to behave alike (a doubt: no NIXL per-transfer figure of a KV handoff was found). The
NVLink latency stays ASSUMED (0.05 ms; no published intranode KV-handoff latency was found, and
no validation row runs both pools in one node).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import src.costmodel.shapes as shapes
from src.config import ConfigError

CONNECTX7_GB_PER_S = 400 / 8  # 400 Gb/s per NIC (NVIDIA ConnectX-7 datasheet)
# Mooncake's vLLM v1 KV-transfer benchmark (module docstring): the line's intercept and slope
NETWORK_LATENCY_MS = 0.40
NETWORK_BANDWIDTH_FRACTION = 0.72  # 144 GB/s of 200 GB/s line rate
NVLINK_LATENCY_MS = 0.05  # ASSUMED (module docstring)


@dataclass(frozen=True)
class KvLink:
    """One KV path: per-GPU one-direction bandwidth and a fixed latency per transfer."""

    name: str
    gb_per_s: float
    latency_ms: float


def kv_link(name: str, gpu) -> KvLink:
    """The link `name` ("nvlink", "network", "none") between GPUs of preset `gpu`."""
    if name == "none":
        return KvLink("none", np.inf, 0.0)
    if name == "network":
        return KvLink("network", CONNECTX7_GB_PER_S * NETWORK_BANDWIDTH_FRACTION,
                      NETWORK_LATENCY_MS)
    if name == "nvlink":
        bw = getattr(gpu, "interconnect_bidirectional_gb_per_s", None)
        if not bw:
            raise ConfigError("disagg.kv_link", f"{gpu.gpu_id} has no NVLink figure "
                                                "(interconnect_bidirectional_gb_per_s); allowed: "
                                                "network, none")
        return KvLink("nvlink", bw / 2.0, NVLINK_LATENCY_MS)
    raise ConfigError("disagg.kv_link", f"unknown {name!r}; allowed: nvlink, network, none")


def kv_bytes(model, prompt_tokens) -> np.ndarray:
    """KV-cache bytes of a prompt of prompt_tokens tokens (all layers, before any split)."""
    p = np.asarray(prompt_tokens, dtype=float)
    out = p * float(model.kv_bytes_per_token)
    window = getattr(model, "sliding_window_tokens", 0) or 0
    if window and shapes.window_layers(model):
        out = out + shapes.window_kv_bytes_per_seq(model) * np.minimum(p, window) / window
    return out


def transfer_ms(model, prompt_tokens, link: KvLink, prefill_tp: int, decode_tp: int):
    """ms to move the KV cache of prompt_tokens (int or array) from a prefill rank of prefill_tp
    GPUs to a decode rank of decode_tp GPUs over `link` (0 for link "none")."""
    if link.name == "none":
        return np.zeros(np.shape(prompt_tokens)) if np.ndim(prompt_tokens) else 0.0
    split = min(shapes.kv_tp_divisor(model, prefill_tp), shapes.kv_tp_divisor(model, decode_tp))
    ms = link.latency_ms + kv_bytes(model, prompt_tokens) / split / (link.gb_per_s * 1e9) * 1e3
    return ms if np.ndim(prompt_tokens) else float(ms)
