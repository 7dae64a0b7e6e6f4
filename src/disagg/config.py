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

import src.costmodel.shapes as shapes
from src.config import ConfigError
from src.costmodel import CostModelInputError, check_tp, memory_usable_bytes

POOLS = ("prefill", "decode")
SHAPE_FIELDS = ("workers", "tp", "ep", "dp")
DISAGG_KEYS = tuple(f"{p}_{f}" for p in POOLS for f in SHAPE_FIELDS) + ("kv_link",)
# where the finished prompt's KV cache travels (src/disagg/transfer.py LINKS); "auto": NVLink
# when both pools fit in one node, else the network
KV_LINKS = ("auto", "nvlink", "network", "none")
GPUS_PER_NODE = 8  # an HGX/DGX H200 or B200 baseboard: 8 GPUs on one NVSwitch domain
MAX_GPUS_PER_WORKER = 64


@dataclass(frozen=True)
class PoolShape:
    """One pool: `workers` identical workers of tp x dp GPUs each."""

    workers: int
    tp: int  # attention TP inside a DP rank
    ep: int  # 1 or tp x dp
    dp: int  # attention DP ranks per worker

    @property
    def gpus_per_worker(self) -> int:
        return self.tp * self.dp

    @property
    def gpus(self) -> int:
        return self.workers * self.gpus_per_worker

    def label(self) -> str:
        return f"{self.workers} x (tp {self.tp}, dp {self.dp}, ep {self.ep})"


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


def weight_bytes_per_gpu(model, tp: int, dp: int) -> float:
    """Weight bytes on one GPU of a worker (module docstring): attention-side components / tp,
    the rest / (tp dp)."""
    comp = shapes.component_params(model)
    rank_side = ("attention", "embedding", "lm_head", "final_norm", "fc")
    per_rank = shapes.params_bytes(model, {k: v for k, v in comp.items() if k in rank_side})
    shared = shapes.params_bytes(model, {k: v for k, v in comp.items() if k not in rank_side})
    return per_rank / tp + shared / (tp * dp)


def _tp_allowed(model, tp: int) -> bool:
    try:
        check_tp(model, tp)
    except CostModelInputError:
        return False
    return True


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
            if _tp_allowed(model, tp) and weight_bytes_per_gpu(model, tp, dp) <= usable:
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
    if not _tp_allowed(model, tp):
        allowed = [d for d in range(1, model.n_heads + 1) if _tp_allowed(model, d)]
        raise ConfigError(f"disagg.{pool}_tp",
                          f"{tp} does not divide the {model.n_heads} query heads (and "
                          f"{model.n_kv_heads} KV heads) of {model.model_id}; allowed: "
                          f"{', '.join(map(str, allowed))}")
    E = model.n_routed_experts
    if ep != 1:
        if not E:
            raise ConfigError(f"disagg.{pool}_ep", f"{model.model_id} has no routed experts; "
                                                   "allowed: 1")
        if ep != g:
            raise ConfigError(f"disagg.{pool}_ep",
                              f"{ep}: one EP rank per GPU of the worker ({pool}_tp x {pool}_dp = "
                              f"{g}) or the experts TP-split; allowed: 1 or {g}")
        if E % ep:
            ok = [d for d in range(1, E + 1) if E % d == 0]
            raise ConfigError(f"disagg.{pool}_ep", f"{ep} does not divide the {E} routed experts "
                                                   f"of {model.model_id}; allowed: "
                                                   f"{', '.join(map(str, ok))}")
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
