"""Greedy autoregressive decoding: one target pass per step, one token per active request.

The baseline sees the same requests, batch size, serving mode and cost model as the speculative
run it is compared with; only the decoder differs (src/step_engine.py, decoder GREEDY).
"""
from __future__ import annotations

from src.costmodel import CostModel
from src.serving import RunStats, serve
from src.workload import Requests


def simulate_greedy(requests: Requests, batch_size: int, serving_mode: str,
                    cost: CostModel) -> RunStats:
    return serve(requests, batch_size, serving_mode, cost, "greedy")
