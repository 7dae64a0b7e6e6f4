"""A scenario's `[disagg]` table: the prefill and decode pools of a disaggregated deployment.

Shapes follow AIConfigurator's convention (aiconfigurator-core 0.12.0 silicon_sample.csv columns
prefill_tp_size, prefill_attention_dp_size, prefill_moe_ep_size, ...):

    GPUs per worker = tp x dp          tp: attention TP inside one DP rank
                                       dp: attention data-parallel ranks (each its own requests
                                           and their KV cache)
    ep in {1, tp x dp}                 1: the experts TP-split over the worker's GPUs;
                                       tp x dp: one EP rank per GPU (expert parallelism)

Per GPU of a worker (the assumption of `weight_bytes_per_gpu`): the attention weights (and
norms, embedding, LM head) are split by the rank's tp and replicated across its dp ranks; every
other weight (dense FFN, shared and routed experts, routers) is split over all tp x dp GPUs.
At dp = 1 that is weight_bytes / tp, the aggregated replica's figure.

`disagg_from_table` validates once, at the edge: ConfigError naming `disagg.FIELD`; a pool
whose weights do not fit names the smallest shape (fewest GPUs per worker) whose do.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from src.attention_dp.shape import (
    GPUS_PER_NODE,
    PoolShape,
    shape_refusal,
    tp_allowed,
    weight_bytes_per_gpu,
)
from src.config import ConfigError
from src.costmodel import memory_usable_bytes

POOLS = ("prefill", "decode")
SHAPE_FIELDS = ("workers", "tp", "ep", "dp")
DISAGG_KEYS = tuple(f"{p}_{f}" for p in POOLS for f in SHAPE_FIELDS) + ("kv_link",)
# where the finished prompt's KV cache travels (src/disagg/transfer.py LINKS); "auto": NVLink
# when both pools fit in one node, else the network
KV_LINKS = ("auto", "nvlink", "network", "none")
MAX_GPUS_PER_WORKER = 64


@dataclass(frozen=True)
class DisaggConfig:
    """The `[disagg]` table, validated (build with disagg_from_table)."""

    prefill: PoolShape
    decode: PoolShape
    kv_link: str = "auto"

    @property
    def gpus(self) -> int:
        return self.prefill.gpus + self.decode.gpus

    def link(self) -> str:
        """The KV link in use: kv_link, or for "auto" NVLink when one prefill and one decode
        worker fit in one node together, else the network."""
        if self.kv_link != "auto":
            return self.kv_link
        both = self.prefill.gpus_per_worker + self.decode.gpus_per_worker
        return "nvlink" if both <= GPUS_PER_NODE else "network"


def smallest_fitting_shape(model, gpu, params) -> tuple[int, int] | None:
    """(tp, dp) of fewest GPUs (then the larger dp: DeepSeek-style attention DP) whose weights
    fit on each GPU, a MoE's GPU count dividing its experts (ep = tp dp); None if none up to
    MAX_GPUS_PER_WORKER does."""
    usable = memory_usable_bytes(gpu, params)
    best = None
    for g in range(1, MAX_GPUS_PER_WORKER + 1):
        if model.n_routed_experts and model.n_routed_experts % g:
            continue
        for dp in sorted((d for d in range(1, g + 1) if g % d == 0), reverse=True):
            tp = g // dp
            if tp_allowed(model, tp) and weight_bytes_per_gpu(model, tp, dp) <= usable:
                best = (tp, dp)
                break
        if best:
            return best
    return None


def _positive(key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"disagg.{key}", f"expected an integer >= 1, got {value!r}")
    return value


def _pool(table: Mapping, pool: str, model, gpu, params) -> PoolShape:
    workers = _positive(f"{pool}_workers", table.get(f"{pool}_workers", 1))
    tp = _positive(f"{pool}_tp", table.get(f"{pool}_tp", 1))
    dp = _positive(f"{pool}_dp", table.get(f"{pool}_dp", 1))
    ep = _positive(f"{pool}_ep", table.get(f"{pool}_ep", 1))
    g = tp * dp
    if g > MAX_GPUS_PER_WORKER:
        raise ConfigError(f"disagg.{pool}_dp", f"{pool}_tp x {pool}_dp = {g} GPUs per worker; "
                                               f"allowed: at most {MAX_GPUS_PER_WORKER}")
    names = {f: f"{pool}_{f}" for f in ("tp", "dp", "ep")}
    refused = shape_refusal(model, tp, dp, ep, names, one_node=False)
    if refused:  # the rules the aggregated attention_dp key shares (src/attention_dp/shape.py)
        raise ConfigError(f"disagg.{refused[0]}", refused[1])
    E = model.n_routed_experts
    usable = memory_usable_bytes(gpu, params)
    need = weight_bytes_per_gpu(model, tp, dp)
    if need > usable:
        best = smallest_fitting_shape(model, gpu, params)
        if best is None:
            hint = f"no worker of up to {MAX_GPUS_PER_WORKER} GPUs holds the weights"
        else:
            t, d = best
            e = f", {pool}_ep {t * d}" if E else ""
            hint = (f"{pool}_tp {t}, {pool}_dp {d}{e} (the smallest shape that fits, "
                    f"{weight_bytes_per_gpu(model, t, d) / 1e9:.1f} GB per GPU)")
        raise ConfigError(f"disagg.{pool}_tp",
                          f"{model.model_id} at {pool}_tp {tp}, {pool}_dp {dp} holds "
                          f"{need / 1e9:.1f} GB of weights per GPU but {gpu.gpu_id} has "
                          f"{usable / 1e9:.1f} GB usable; allowed: {hint}")
    return PoolShape(workers=workers, tp=tp, ep=ep, dp=dp)


def disagg_from_table(table: Any, model, gpu, params) -> DisaggConfig:
    """The validated `[disagg]` table of a deployment of `model` (ModelSpec) on `gpu` (GpuSpec)
    with `params` (CostModelParams: the memory reserve). Absent keys default to 1 (and
    kv_link to "auto")."""
    if not isinstance(table, Mapping):
        raise ConfigError("disagg", "expected a table")
    for key in table:
        if key not in DISAGG_KEYS:
            raise ConfigError(f"disagg.{key}", f"unknown key; allowed: {', '.join(DISAGG_KEYS)}")
    link = table.get("kv_link", "auto")
    if link not in KV_LINKS:
        raise ConfigError("disagg.kv_link", f"unknown {link!r}; allowed: {', '.join(KV_LINKS)}")
    return DisaggConfig(prefill=_pool(table, "prefill", model, gpu, params),
                        decode=_pool(table, "decode", model, gpu, params), kv_link=link)
