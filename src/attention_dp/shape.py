"""The shape of an attention-data-parallel deployment: one rule for the disaggregated decode pool
(src/disagg/config.py, `[disagg]` decode_dp) and the aggregated replica (`attention_dp`).

AIConfigurator's convention (aiconfigurator-core 0.12.0 silicon_sample.csv columns tp_size,
attention_dp_size, moe_tp_size, moe_ep_size; sdk/config.py ModelConfig):

    GPUs per worker (replica) G = tp x dp     tp: attention TP inside one DP rank
                                              dp: attention data-parallel ranks (each its own
                                                  requests and their KV cache)
    ep in {1, G}                              1: the experts TP-split over the G GPUs;
                                              G: one EP rank per GPU (expert parallelism)

Per GPU (the assumption of `weight_bytes_per_gpu`): the attention weights (and norms, embedding,
LM head) are split by the rank's tp and replicated across its dp ranks; every other weight
(dense FFN, shared and routed experts, routers) is split over all G GPUs. At dp = 1 that is
weight_bytes / tp, the tensor-parallel replica's figure.

`shape_refusal` holds the rules both edges check (each names its own keys): tp divides the
query and KV heads; ep is 1 or G and divides the routed experts; with dp > 1, G fits one node
(GPUS_PER_NODE: the all-to-all of a worker spanning nodes would run over the network, not
modelled).
"""
from __future__ import annotations

from dataclasses import dataclass

import src.costmodel.shapes as shapes
from src.costmodel import CostModelInputError, check_tp

GPUS_PER_NODE = 8  # an HGX/DGX H200 or B200 baseboard: 8 GPUs on one NVSwitch domain


@dataclass(frozen=True)
class PoolShape:
    """`workers` identical workers of tp x dp GPUs each (an aggregated replica: workers = 1)."""

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


def weight_bytes_per_gpu(model, tp: int, dp: int) -> float:
    """Weight bytes on one GPU of a worker (module docstring): attention-side components / tp,
    the rest / (tp dp)."""
    comp = shapes.component_params(model)
    rank_side = ("attention", "embedding", "lm_head", "final_norm", "fc")
    per_rank = shapes.params_bytes(model, {k: v for k, v in comp.items() if k in rank_side})
    shared = shapes.params_bytes(model, {k: v for k, v in comp.items() if k not in rank_side})
    return per_rank / tp + shared / (tp * dp)


def tp_allowed(model, tp: int) -> bool:
    try:
        check_tp(model, tp)
    except CostModelInputError:
        return False
    return True


def shape_refusal(model, tp: int, dp: int, ep: int, names: dict[str, str],
                  one_node: bool = True) -> tuple[str, str] | None:
    """(key, reason) of the first rule (module docstring) a worker of tp x dp GPUs and `ep`
    breaks, or None. `names` maps "tp", "dp", "ep" to the caller's key names (the reason says
    them); key is the name of the key to blame."""
    g = tp * dp
    if not tp_allowed(model, tp):
        ok = [d for d in range(1, model.n_heads + 1) if tp_allowed(model, d)]
        return names["tp"], (f"{tp} does not divide the {model.n_heads} query heads (and "
                             f"{model.n_kv_heads} KV heads) of {model.model_id}; allowed: "
                             f"{', '.join(map(str, ok))}")
    E = model.n_routed_experts
    if ep != 1:
        if not E:
            return names["ep"], f"{model.model_id} has no routed experts; allowed: 1"
        if ep != g:
            return names["ep"], (f"{ep}: one EP rank per GPU ({names['tp']} x {names['dp']} = "
                                 f"{g}) or the experts TP-split; allowed: 1 or {g}")
        if E % ep:
            ok = [d for d in range(1, E + 1) if E % d == 0]
            return names["ep"], (f"{ep} does not divide the {E} routed experts of "
                                 f"{model.model_id}; allowed: {', '.join(map(str, ok))}")
    if one_node and dp > 1 and g > GPUS_PER_NODE:
        return names["dp"], (f"a worker of {g} GPUs spans nodes: its all-to-all over the "
                             f"network is not modelled; allowed: {names['tp']} x {names['dp']} "
                             f"<= {GPUS_PER_NODE}")
    return None
