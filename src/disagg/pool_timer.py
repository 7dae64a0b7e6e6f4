"""The decode pool's step times and KV capacity for the serving engine (`serve` on a [disagg]
deployment): a decode worker runs decode and speculation with no prefill in its batches.

DecodePoolTimer is the engine's StepTimer (src/online/steptime.py) of one decode worker of
shape tp x dp GPUs on the replica's cost model at tp = G = tp x dp (src/disagg/decode_step.py):

    decode/verification step = cost.step_ms (the TP-G path) + DecodeWorker.dp_correction_ms
                               (attention per DP rank, its own all-reduce, the MoE all-to-all;
                               0 at dp = 1, so dp = 1 is the aggregated replica bit for bit)
    prefill chunks           = 0 ms: the prompt's KV cache arrives from the prefill pool (its
                               time is the prefill pool's and the transfer's, src/disagg/
                               prefill_front.py); the request joins the batch at the next step

A preempted request's recompute is priced at 0 too (the engine cannot tell it from an arriving
prompt): a decode pool that preempts is optimistic here (serving.csv's preemptions say when).

KV capacity (decode_capacity_tokens): at dp = 1 the aggregated kv_capacity_tokens. At dp > 1
each DP rank holds its own requests' KV on its tp GPUs, after the weights of one GPU of the
worker (src/disagg/config.py weight_bytes_per_gpu: attention replicated per rank, the rest split
over G), per-token bytes scaled from the TP-G split to the rank's (shapes.kv_tp_divisor: the MLA
latent is whole on every GPU either way); the worker holds dp ranks' worth, requests spread
evenly (the engine's one block pool stands for the dp pools).
"""
from __future__ import annotations

import math

import numpy as np

from src.costmodel import PassLoad, memory_usable_bytes
from src.costmodel.shapes import kv_tp_divisor
from src.disagg.config import PoolShape, weight_bytes_per_gpu
from src.disagg.decode_step import DecodeWorker
from src.online.steptime import StepTimer, kv_capacity_tokens


class DecodePoolTimer(StepTimer):
    """Step times of one decode worker (module docstring). The compiled serving loop prices it
    too (src/online/step_prices.py): `prefill_free` (its chunks at 0 ms) and, at dp > 1,
    `dp_pricing` (the correction's rank coefficients and its context-free terms by batch and
    gamma; the loop adds the two attention terms per step)."""

    prefill_free = True

    def __init__(self, cost, speculative: bool, shape: PoolShape):
        super().__init__(cost, speculative)
        self.shape = shape
        self.worker = DecodeWorker(cost, shape)

    def dp_pricing(self, max_seqs: int, width: int):
        """None at dp = 1, else (dp, the DP rank's PassCoefficients, DecodeWorker.dp_static_ms
        [max_seqs + 1, width] at N = 0..max_seqs requests and gamma = 0..width - 1)."""
        if self.shape.dp == 1:
            return None
        static = self.worker.dp_static_ms(np.arange(max_seqs + 1)[:, None],
                                          np.arange(width)[None, :])
        return self.shape.dp, self.worker._rank_c, static

    def _dp(self, n_decode, context_sum, gamma, target):
        if self.shape.dp == 1:
            return target
        return target + self.worker.dp_correction_ms(n_decode, context_sum, gamma)

    def decode_ms(self, decoding, gamma, context):
        load = PassLoad.from_masks(decoding, context)
        target, draft = self.cost.step_ms(load, gamma, self.speculative,
                                          check_fits=self.shape.dp == 1)
        return self._dp(load.n_seqs, load.sum_ctx, gamma, target), draft

    def decode_ms_totals(self, n_decode, decode_context_sum, gamma, max_seqs: int,
                         decoding=None, context=None, check_fits: bool = True):
        # dp > 1: the memory bound is the DP-aware KV capacity the engine keeps to
        target, draft = super().decode_ms_totals(n_decode, decode_context_sum, gamma, max_seqs,
                                                 decoding, context,
                                                 check_fits and self.shape.dp == 1)
        return self._dp(n_decode, decode_context_sum, gamma, target), draft

    def check_fits(self, n_decode, decode_context_sum, gamma) -> None:
        if self.shape.dp == 1:
            super().check_fits(n_decode, decode_context_sum, gamma)

    def decode_ms_each_gamma(self, decoding, context, gammas):
        target, draft = super().decode_ms_each_gamma(decoding, context, gammas)
        if self.shape.dp == 1:
            return target, draft
        k = np.asarray(gammas).size
        load = PassLoad.from_masks(decoding, context)
        fix = self.worker.dp_correction_ms(np.repeat(load.n_seqs, k), np.repeat(load.sum_ctx, k),
                                           np.tile(np.asarray(gammas), decoding.shape[0]))
        return target + fix, draft

    def prefill_extra_ms(self, n_decode, gamma, decode_context_sum, chunk_seqs, chunk_tokens,
                         chunk_context_sum, chunk_logits) -> np.ndarray:
        return np.zeros(np.shape(chunk_seqs))


def decode_capacity_tokens(cost, shape: PoolShape, max_num_seqs: int) -> int:
    """KV tokens one decode worker holds (module docstring)."""
    if shape.dp == 1:
        return kv_capacity_tokens(cost, max_num_seqs)
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
