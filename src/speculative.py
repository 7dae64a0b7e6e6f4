"""Speculative decoding at batch size B: gamma draft passes, then one target verification.

Per step, for every active sequence (Leviathan et al. 2023; Chen et al. 2023):
1. the draft proposes gamma tokens in gamma sequential one-position passes over the batch;
2. the target verifies gamma + 1 positions per sequence in one pass;
3. the verifier accepts K drafts (src.acceptance: geometric, capped at gamma) and adds one token of
   its own: the correction token at the first rejection, or the bonus token if all gamma passed;
4. the sequence commits K + 1 tokens, capped at the tokens it still needs.

Verification policy decides what "the sequence commits" means in a batch:
* ragged: each sequence keeps its own K + 1 (engines with per-sequence KV-cache lengths:
  vLLM, SGLang, TensorRT-LLM).
* lockstep: every active sequence advances by min over the batch of K, plus one (implementations
  that keep the batch's KV cache rectangular); the weakest-accepting request limits the batch.

The step loop itself is src/step_engine.py (compiled); src/serving.py prices its steps.
"""
from __future__ import annotations

import numpy as np

from src.costmodel import CostModel
from src.serving import RunStats, serve
from src.workload import Requests


def simulate_speculative(
    requests: Requests, batch_size: int, serving_mode: str, cost: CostModel,
    gammas: list[int], verification: str, rngs: list[np.random.Generator],
) -> list[RunStats]:
    """One RunStats per gamma, each from `requests` with its own random stream rngs[i]."""
    return [serve(requests, batch_size, serving_mode, cost, verification, int(g), rng)
            for g, rng in zip(gammas, rngs)]
