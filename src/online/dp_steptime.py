"""Step times and KV capacity of an attention-DP worker for the serving engine: an aggregated
replica with `attention_dp` > 1 (src/online/study.py deployments) and, without its prefill
chunks, the disaggregated decode worker (src/disagg/pool_timer.py DecodePoolTimer).

AttentionDpTimer is the engine's StepTimer (src/online/steptime.py) of one worker of shape
tp x dp GPUs on the replica's cost model at tp = G = tp x dp (src/attention_dp/worker.py):

    decode/verification step = cost.step_ms (the TP-G path) + DecodeWorker.dp_correction_ms
                               (attention per DP rank, its own all-reduce, the MoE all-to-all),
                               the host CPU of the busiest rank's scheduler only
                               (DecodeWorker.rows_ms)
    prefill chunks           = StepTimer.prefill_extra_ms (the TP-G path's mixed pass) +
                               DecodeWorker.dp_chunk_correction_ms (each rank prefills its own
                               prompts: the busiest rank's chunks set the step)

One engine row holds every request of the worker: the ranks are symmetric, requests spread
round-robin, so the busiest rank holds ceil(N / dp) of the N running requests and ceil(P / dp)
of the P prompt chunks of a step (the DP ranks synchronise at every MoE layer, so the busiest
sets every rank's step). The compiled serving loop does not price these terms: a DP timer runs
on the numpy engine (compiled_pricing = False; step_prices.compiled_pricing_supported), except
the disaggregated decode pool's, whose prefill is free and whose decode terms the loop tables
(src/disagg/pool_timer.py dp_pricing).

KV capacity (dp_kv_capacity_tokens, dp > 1): each DP rank holds its own requests' KV on its tp
GPUs, after the weights of one GPU of the worker (src/attention_dp/shape.py weight_bytes_per_gpu:
attention replicated per rank, the rest split over G), per-token bytes scaled from the TP-G split
to the rank's (shapes.kv_tp_divisor: the MLA latent is whole on every GPU either way); the worker
holds dp ranks' worth, requests spread evenly (the engine's one block pool stands for the dp
pools). The memory check of a step (check_fits) is this capacity: the TP-G path's own check
would replicate the KV over G.
"""
from __future__ import annotations

import math

import numpy as np

from src.attention_dp.shape import PoolShape, weight_bytes_per_gpu
from src.attention_dp.worker import DecodeWorker
from src.costmodel import memory_usable_bytes
from src.costmodel.shapes import kv_tp_divisor
from src.online.steptime import StepTimer


class AttentionDpTimer(StepTimer):
    """Step times of one attention-DP worker (module docstring)."""

    compiled_pricing = False  # the DP terms are not in the compiled loop's price tables

    def __init__(self, cost, speculative: bool, shape: PoolShape):
        super().__init__(cost, speculative)
        self.shape = shape
        self.worker = DecodeWorker(cost, shape)

    def _step_ms(self, load, gamma, check_fits: bool):
        if self.shape.dp == 1:
            return super()._step_ms(load, gamma, check_fits)
        # dp > 1: the memory bound is the DP-aware KV capacity the engine keeps to (check_fits)
        return self.worker.rows_ms(load, gamma, self.speculative)

    def check_fits(self, n_decode, decode_context_sum, gamma) -> None:
        if self.shape.dp == 1:
            super().check_fits(n_decode, decode_context_sum, gamma)

    def prefill_extra_ms(self, n_decode, gamma, decode_context_sum, chunk_seqs, chunk_tokens,
                         chunk_context_sum, chunk_logits) -> np.ndarray:
        extra = super().prefill_extra_ms(n_decode, gamma, decode_context_sum, chunk_seqs,
                                         chunk_tokens, chunk_context_sum, chunk_logits)
        if self.shape.dp == 1:
            return extra
        return extra + self.worker.dp_chunk_correction_ms(n_decode, gamma, chunk_seqs,
                                                          chunk_tokens, chunk_context_sum)


def dp_kv_capacity_tokens(cost, shape: PoolShape, max_num_seqs: int) -> int:
    """KV tokens one worker of dp > 1 ranks holds (module docstring); max_num_seqs is the
    worker's (each rank's ceil(max_num_seqs / dp) sequences' fixed cache set aside)."""
    m, G = cost.target, shape.gpus_per_worker
    usable = memory_usable_bytes(cost.gpu, cost.params) / 1e9
    base = cost.kv_fits(0, 0)[1] - m.weight_bytes / G / 1e9 \
        + weight_bytes_per_gpu(m, shape.tp, shape.dp) / 1e9
    one = cost.kv_fits(1, 0)[1]
    per_token = (cost.kv_fits(1, 1_000_000)[1] - one) / 1e6 * kv_tp_divisor(m, G) \
        / kv_tp_divisor(m, shape.tp)
    per_seq = one - cost.kv_fits(0, 0)[1]
    free = usable - base - per_seq * math.ceil(max_num_seqs / shape.dp)
    return max(int(free / per_token), 0) * shape.dp
