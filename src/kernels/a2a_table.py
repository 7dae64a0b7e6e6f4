"""Measured MoE all-to-all (dispatch + combine) per layer: AIConfigurator's comm tables.

aiconfigurator-core 0.12.0 ships, per system, the time of one MoE layer's expert-parallel
dispatch and combine, measured on the engines' own kernels on one 8-GPU node (EP 8):

    sglang   comm/sglang/0.5.12/wideep_deepep_ll_perf.parquet     DeepEP low-latency kernels
             (SGLang's decode path with --moe-a2a-backend deepep: dispatch_avg_t_us,
             combine_avg_t_us by hidden_size, num_token, num_topk, num_experts)
    trtllm   comm/trtllm/1.3.0rc11/moe_a2a_perf.parquet           comm_backend trtllm_deepep_ll
             (TensorRT-LLM's DeepEP low-latency path; `latency` us by phase, comm_dtype,
             hidden_size, topk, num_experts, num_tokens): FP8 dispatch, BF16 combine (DeepEP's
             DeepSeek-V3 setting; NVFP4 dispatch where the experts are NVFP4 and the table has it)
    vllm     comm/vllm/0.24.0/moe_a2a_perf.parquet                comm_backend deepep_ll

num_tokens is the tokens one rank sends. Between measured token counts: linear; above the
largest (256 or 1024 tokens): the line through the last two points (the bandwidth regime);
below 1 token: the 1-token figure. Where no table matches (another EP size, hidden size, top-k,
expert count, system or engine) `a2a_us_per_layer` answers None and the caller keeps its
roofline. The decode pool uses the low-latency kernels (decode batches; SGLang's deepep auto
mode picks them for decode, LMSYS's PD + large-scale EP deployment of DeepSeek, 2025).
"""
from __future__ import annotations

import re
from functools import lru_cache

import numpy as np

TABLE_EP = 8  # every table row is one node of 8 GPUs, EP 8 (node_num 1, ep_size 8)
_FILES = {
    "sglang": "wideep_deepep_ll_perf.parquet",
    "trtllm": "moe_a2a_perf.parquet",
    "vllm": "moe_a2a_perf.parquet",
}
_LL_BACKEND = {"trtllm": "trtllm_deepep_ll", "vllm": "deepep_ll"}


def _version_key(v: str) -> tuple:
    return tuple(int(x) if x.isdigit() else -1 for x in re.split(r"[.a-z]+", v) if x)


def table_path(system: str, backend: str):
    """The newest version folder's table of `backend` on `system`, or None."""
    from src.kernels.sources import data_root
    root = data_root()
    file = _FILES.get(backend)
    if root is None or file is None:
        return None
    folder = root / system / "comm" / backend
    if not folder.is_dir():
        return None
    held = sorted((p for p in folder.iterdir() if (p / file).is_file()),
                  key=lambda p: _version_key(p.name))
    return held[-1] / file if held else None


@lru_cache(maxsize=64)
def _curve(system: str, backend: str, hidden: int, topk: int, experts: int, nvfp4: bool):
    """(tokens, us) of dispatch + combine, ascending tokens, or None."""
    path = table_path(system, backend)
    if path is None:
        return None
    import pandas as pd
    d = pd.read_parquet(path)
    if backend == "sglang":
        d = d[(d.node_num == 1) & (d.hidden_size == hidden) & (d.num_topk == topk)
              & (d.num_experts == experts)]
        if d.empty:
            return None
        d = d.groupby("num_token")[["dispatch_avg_t_us", "combine_avg_t_us"]].mean()
        return d.index.to_numpy(float), (d.dispatch_avg_t_us + d.combine_avg_t_us).to_numpy()
    d = d[(d.comm_backend == _LL_BACKEND[backend]) & (d.ep_size == TABLE_EP)
          & (d.node_num == 1) & (d.hidden_size == hidden) & (d.topk == topk)
          & (d.num_experts == experts)]
    parts = []
    for phase, dtypes in (("dispatch", ("nvfp4", "fp8", "default") if nvfp4
                           else ("fp8", "default")), ("combine", ("bfloat16", "default"))):
        rows = d[d.phase == phase]
        for dt in dtypes:
            one = rows[rows.comm_dtype == dt]
            if not one.empty:
                parts.append(one.groupby("num_tokens").latency.mean())
                break
        else:
            return None
    both = (parts[0] + parts[1]).dropna()
    if both.empty:
        return None
    return both.index.to_numpy(float), both.to_numpy()


def a2a_us_per_layer(system: str, backend: str, model, ep: int, tokens_per_rank):
    """Dispatch + combine us of one MoE layer at tokens_per_rank (array), or None (module
    docstring)."""
    if ep != TABLE_EP or not system or not model.n_routed_experts:
        return None
    nvfp4 = (model.expert_weight_format or model.weight_format) == "nvfp4"
    curve = _curve(system, backend, int(model.hidden_size), int(model.experts_per_token),
                   int(model.n_routed_experts), nvfp4)
    if curve is None:
        return None
    x, y = curve
    t = np.maximum(np.asarray(tokens_per_rank, dtype=float), x[0])
    out = np.interp(t, x, y)
    if len(x) >= 2:
        slope = (y[-1] - y[-2]) / (x[-1] - x[-2])
        out = np.where(t > x[-1], y[-1] + slope * (t - x[-1]), out)
    return out
