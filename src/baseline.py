"""Greedy autoregressive decoding: one target pass per step, one token per active request.

The baseline sees the same requests, batch size, serving mode and cost model as the speculative
run it is compared with; only the decoder differs.
"""
from __future__ import annotations

import numpy as np

from src.costmodel import CostModel
from src.serving import RunStats, StepOutcome, serve
from src.workload import Requests


def greedy_decoder(cost: CostModel):
    """Decoder for src.serving.serve: every active slot commits exactly one token per step."""

    def step(rows, active, n_active, alpha, remaining, context):
        zeros = np.zeros(active.shape[0])
        return StepOutcome(
            committed_tokens=active.astype(np.int64),
            accepted_drafts=zeros,
            proposed_drafts=zeros,
            draft_time=zeros,
            verify_time=cost.target_pass_time(active, 1, context),
            rejected_draft_time=zeros,
        )

    return step


def simulate_greedy(requests: Requests, batch_size: int, serving_mode: str, cost: CostModel) -> RunStats:
    return serve(requests, batch_size, serving_mode, greedy_decoder(cost))
