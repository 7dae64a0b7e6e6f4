"""The decode pool's step times and KV capacity for the serving engine (`serve` on a [disagg]
deployment): a decode worker runs decode and speculation with no prefill in its batches.

DecodePoolTimer is the attention-DP worker's StepTimer (src/online/dp_steptime.py, the one the
aggregated replica of attention_dp > 1 runs) with its prefill chunks free: one decode worker of
shape tp x dp GPUs on the replica's cost model at tp = G = tp x dp (src/attention_dp/worker.py):

    decode/verification step = cost.step_ms (the TP-G path) + DecodeWorker.dp_correction_ms
                               (attention per DP rank, its own all-reduce, the MoE all-to-all;
                               0 at dp = 1, so dp = 1 is the aggregated replica bit for bit)
    prefill chunks           = 0 ms: the prompt's KV cache arrives from the prefill pool (its
                               time is the prefill pool's and the transfer's, src/disagg/
                               prefill_front.py); the request joins the batch at the next step

A preempted request's recompute is priced at 0 too (the engine cannot tell it from an arriving
prompt): a decode pool that preempts is optimistic here (serving.csv's preemptions say when).

KV capacity (decode_capacity_tokens): at dp = 1 the aggregated kv_capacity_tokens; at dp > 1
the attention-DP worker's (src/online/dp_steptime.py dp_kv_capacity_tokens, shared with the
aggregated replica of attention_dp > 1).
"""
from __future__ import annotations

import numpy as np

from src.attention_dp.shape import PoolShape
from src.online.dp_steptime import AttentionDpTimer, dp_kv_capacity_tokens
from src.online.steptime import kv_capacity_tokens


class DecodePoolTimer(AttentionDpTimer):
    """Step times of one decode worker (module docstring): the attention-DP worker's
    (src/online/dp_steptime.py), its prefill chunks free. The compiled serving loop prices it
    too (src/online/step_prices.py): `prefill_free` (its chunks at 0 ms) and, at dp > 1,
    `dp_pricing` (the correction's rank coefficients and its context-free terms by batch and
    gamma; the loop adds the two attention terms per step)."""

    prefill_free = True
    compiled_pricing = True  # prefill free, and dp_pricing tables the DP terms of decode

    def dp_pricing(self, max_seqs: int, width: int):
        """None at dp = 1, else (dp, the DP rank's PassCoefficients, DecodeWorker.dp_static_ms
        [max_seqs + 1, width] at N = 0..max_seqs requests and gamma = 0..width - 1)."""
        if self.shape.dp == 1:
            return None
        static = self.worker.dp_static_ms(np.arange(max_seqs + 1)[:, None],
                                          np.arange(width)[None, :])
        return self.shape.dp, self.worker._rank_c, static

    def prefill_extra_ms(self, n_decode, gamma, decode_context_sum, chunk_seqs, chunk_tokens,
                         chunk_context_sum, chunk_logits) -> np.ndarray:
        return np.zeros(np.shape(chunk_seqs))


def decode_capacity_tokens(cost, shape: PoolShape, max_num_seqs: int) -> int:
    """KV tokens one decode worker holds (module docstring)."""
    if shape.dp == 1:
        return kv_capacity_tokens(cost, max_num_seqs)
    return dp_kv_capacity_tokens(cost, shape, max_num_seqs)
