"""One step of an attention-DP worker: a disaggregated decode-pool worker (no prefill in its
batches) or an aggregated replica of `attention_dp` ranks (prefill chunks beside the decodes).

A worker has G = tp x dp GPUs and `ep` in {1, G}. Its cost model is the aggregated replica's
(HardwareCostModel at tp = G, ep: the same GEMMs, expert reads, slowest-EP-rank imbalance and
draft passes), so at dp = 1 a step is exactly `cost.step_ms` of that replica, bit for bit. At
dp > 1 three terms of the target pass change (n = requests on the busiest DP rank, N = n dp
the worker's requests, t = gamma + 1 positions each, c = mean cached context):

    step(dp) = step_G(N, t, c)
               - attention_G(N sequences)          the TP path's attention kernel over all N
               + attention_tp(n sequences)         each rank attends only its own n (its KV)
               - attn_gemms_G(N t tokens)          the attention projections split over G
               + attn_gemms_tp(n t tokens)         each rank reads its own copy, split by tp
               - communication_G(N t tokens)       the TP path's all-reduces over G GPUs
               + all_reduce_tp(n t tokens) / 2     attention's all-reduce inside a rank of tp
               + moe_comm(n t tokens)              MoE dispatch + combine per MoE layer:
                                                   the engine's all-to-all or all-gather +
                                                   reduce-scatter (src/attention_dp/moe_comm.py)

    all_to_all = L_moe x the engine's measured low-latency dispatch + combine of one layer
        (src/kernels/a2a_table.py: AIConfigurator's DeepEP tables, EP 8 on one node) where a
        table matches; otherwise the roofline
    all_to_all = L_moe (dispatch_bytes + combine_bytes) / link, per GPU and direction:
        tokens per GPU x k experts x h x (G - 1) / G x (1 byte FP8 dispatch, 2 bytes BF16
        combine: DeepEP's README, DeepSeek-V3/R1 setting), link = NVLink one direction
        (GPU preset / 2); no fixed latency (an underestimate at small batches; DeepEP's README
        measures 153-158 GB/s intranode on H800's ~160 GB/s: the bandwidth term is near peak)

The attention projections (MLA: q_a, q_b, kv_a, kv_b, o_proj; GQA: QKV, O) are replicated across
the DP ranks and split by the rank's tp only (src/attention_dp/shape.py weight_bytes_per_gpu
holds them so; SGLang's DP attention builds them at attn_tp_size = tp / dp, TensorRT-LLM's
enable_attention_dp at tp 1): each GPU streams 1/tp of their weights per step, not 1/G. Their
FLOPs per GPU are the same either way (n t rows x the rank's full width vs N t rows x 1/G of
it), so the change is the weight read: DeepSeek-V3 FP8 at dp 8, tp 1 reads ~10.5 GB per step of
q_b, kv_b, o_proj instead of ~1.3 GB (the un-split q_a, kv_a were already whole). Priced on the
roofline on both sides (the measured-GEMM tables cover dense BF16 decoders only,
src/kernels/pass_gemms.py).

The ranks synchronise at every MoE layer, so the busiest rank's attention sets the step:
requests spread evenly, n = ceil(N / dp). Routing imbalance across EP ranks is the cost
model's own (variants.slowest_gpu_experts: the slowest GPU's touched experts, routing
independent per token under the model's locality); the tokens each EP rank receives are taken
as even (their imbalance is not modelled). The draft passes (MTP module, EAGLE head) are priced
as the TP-G path prices them: their attention is not split by DP (one layer of 62 for
DeepSeek's MTP). A worker spanning nodes (G > 8) would run the all-to-all over the network:
refused here (src/attention_dp/shape.py GPUS_PER_NODE).

Host CPU (rows_ms). Each DP rank runs its own scheduler over its own requests: SGLang's
data_parallel_controller.py (launch_dp_attention_schedulers) starts one scheduler process per
GPU, each serving its DP rank's requests as the controller dispatches them; TensorRT-LLM's
PyExecutor runs per rank with its own active requests (py_executor.py _balance_adp_requests
all-gathers each rank's scheduled counts). The ranks' host work runs in parallel, so a step's
CPU is one rank's: the engine profile's per-step CPU terms (step_cpu_fixed_ms +
step_cpu_per_seq_ms x sequences, the verification's rejection sampling and KV bookkeeping per
sequence, the draft passes' CPU) are priced over the busiest rank's n requests, not the
worker's N (PassLoad.host_seqs), under the profile's own overlap rule with the DP step's GPU
time (dp_correction_ms included: HardwareCostModel.step_ms gpu_extra_ms):

    overlapped:  step = GPU_dp + max(0, CPU(n) - GPU_dp)      (cpu_overlap_decode / _draft_kinds)
    exposed:     step = GPU_dp + CPU(n)

A prefill chunk's CPU (an aggregated replica) likewise: step_cpu_per_seq_ms x p, not x P.

Prefill chunks (an aggregated replica only; dp_chunk_correction_ms). The TP-G path prices a
mixed step as the decode part plus what the P chunks (T tokens, context sum Cp) add to the pass
(src/online/steptime.py, src/costmodel/prefill.py). Each rank prefills its own prompts; the
busiest holds p = ceil(P / dp) chunks of the mean length, Tr = T p / P tokens over Cp p / P
cached ones, beside its n decodes. The same three terms change, on the chunks' share:

    - attention_G(P chunks, prefill) + attention_tp(p chunks, prefill)
    - [attn_gemms_G(N t + T) - attn_gemms_G(N t)] + [attn_gemms_tp(n t + Tr) - attn_gemms_tp(n t)]
    - [comm_G(N t + T) - comm_G(N t)] + [all_reduce_tp(n t + Tr) - all_reduce_tp(n t)] / 2
    + [moe_comm(n t + Tr) - moe_comm(n t)]
    + step_cpu_per_seq_ms (p - P)                          the busiest rank's chunks' CPU

each term 0 at 0 tokens (a step with no decode pays the chunks' terms whole). The all-to-all
tables hold DeepEP's low-latency kernels up to 256-1024 tokens per rank; a prefill chunk of
thousands of tokens is priced on the line through their last two points (a2a_table.py), the
bandwidth regime, not the normal-mode kernels engines run for prefill: a stated approximation.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

import src.costmodel.shapes as shapes
from src.attention_dp.moe_comm import allgather_reducescatter_ms, comm_kind
from src.attention_dp.shape import GPUS_PER_NODE, PoolShape
from src.config import ConfigError
from src.costmodel import PassLoad
from src.costmodel.roofline import (
    _pnorm,
    attention_s,
    gemm_terms_s,
    pass_coefficients,
    pass_components_s,
)
from src.kernels.a2a_table import a2a_us_per_layer

DISPATCH_BYTES_PER_VALUE = 1.0  # FP8 dispatch (DeepEP README, DeepSeek-V3/R1 inference setting)
COMBINE_BYTES_PER_VALUE = 2.0  # BF16 combine (same source)


@dataclass(frozen=True)
class DecodeWorker:
    """A decode worker of shape `shape` priced on `cost` (the HardwareCostModel at tp = G, ep)."""

    cost: object
    shape: PoolShape
    _rank_c: object = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        s = self.shape
        if self.cost.tp != s.gpus_per_worker or self.cost.ep != s.ep:
            raise ValueError(f"cost model at tp={self.cost.tp}, ep={self.cost.ep} is not the "
                             f"worker's tp={s.gpus_per_worker}, ep={s.ep}")
        if s.dp > 1 and s.gpus_per_worker > GPUS_PER_NODE:
            raise ConfigError("disagg.decode_dp", f"a worker of {s.gpus_per_worker} GPUs spans "
                                                  "nodes: its all-to-all over the network is not "
                                                  f"modelled; allowed: decode_tp x decode_dp <= "
                                                  f"{GPUS_PER_NODE}")
        rank = None
        if s.dp > 1:
            c = self.cost
            rank = pass_coefficients(c.gpu, c.target, s.tp, c.params, c.allreduce,
                                     engine=c.engine, attention_fits=c.attention_fits)
        object.__setattr__(self, "_rank_c", rank)

    def requests_per_rank(self, worker_requests: int) -> int:
        """Requests on the busiest DP rank when the worker holds worker_requests."""
        return math.ceil(worker_requests / self.shape.dp)

    def all_to_all_ms(self, tokens_per_rank) -> np.ndarray:
        """MoE dispatch + combine of one pass, ms (module docstring); 0 for a dense model."""
        c, s = self.cost, self.shape
        m, moe_layers = c.target, self._moe_layers
        if not moe_layers:
            return np.zeros(np.shape(tokens_per_rank))
        G = s.gpus_per_worker
        per_gpu = np.asarray(tokens_per_rank, dtype=float) / s.tp
        tables = getattr(c.engine, "kernel_tables", "") or ""
        measured = a2a_us_per_layer(c.gpu.kernel_system or "", tables.split("/")[0], m, s.ep,
                                    per_gpu) if tables and s.ep == G else None
        if measured is not None:
            return moe_layers * measured * 1e-3
        values = per_gpu * m.experts_per_token * m.hidden_size * (G - 1) / G
        link = c.gpu.interconnect_bidirectional_gb_per_s / 2.0 * 1e9
        return moe_layers * values * (DISPATCH_BYTES_PER_VALUE + COMBINE_BYTES_PER_VALUE) / link \
            * 1e3

    @property
    def _moe_layers(self) -> int:
        """The target's MoE layers (its dense first layers left out); 0 for a dense model."""
        m = self.cost.target
        return m.n_layers - (m.first_k_dense_replace or 0) if m.n_routed_experts else 0

    @property
    def moe_comm(self) -> str:
        """'alltoall' or 'allgather_reducescatter': the MoE communication the engine runs on
        this worker (src/attention_dp/moe_comm.py)."""
        c, s = self.cost, self.shape
        return comm_kind(c.engine, c.gpu, s.ep, s.gpus_per_worker)

    def moe_comm_ms(self, tokens_per_rank) -> np.ndarray:
        """MoE communication of one pass, ms: the all-to-all (all_to_all_ms) or, where the
        engine gathers instead, L_moe x the all-gather + reduce-scatter of one layer
        (src/attention_dp/moe_comm.py); 0 for a dense model."""
        if self.moe_comm == "alltoall":
            return self.all_to_all_ms(tokens_per_rank)
        s, moe_layers = self.shape, self._moe_layers
        T = np.asarray(tokens_per_rank, dtype=float)
        if not moe_layers:
            return np.zeros(T.shape)
        return moe_layers * allgather_reducescatter_ms(self.cost, s.gpus_per_worker, T / s.tp)

    def attention_gemms_ms(self, coeffs, tp: int, tokens) -> np.ndarray:
        """ms of the attention projections of one pass of `tokens` rows (array) on a GPU of
        coefficients `coeffs` (the pass at TP tp): the first GEMMs of the pass's list
        (shapes.layer_gemms puts attention_gemms first; the plain path's QKV and O likewise)."""
        m = self.cost.target
        k = len(shapes.attention_gemms(m, tp, m.n_layers))
        T = np.asarray(tokens, dtype=float)
        rows = np.broadcast_to(T, (len(coeffs.gemm_weight_s),) + T.shape)
        mem, comp = gemm_terms_s(coeffs, rows)
        return _pnorm(mem[:k], comp[:k], coeffs.sharpness_p).sum(axis=0) * 1e3

    def step_ms(self, worker_requests: int, context_tokens: float, gamma: int) -> float:
        """ms of one decode step (target pass + gamma draft passes) of the worker holding
        worker_requests requests, each at context_tokens cached tokens."""
        N = int(worker_requests)
        if N <= 0:
            return 0.0
        load = PassLoad.from_totals(np.array([N]), np.array([N * context_tokens]))
        target, draft = self.rows_ms(load, np.array([gamma]), gamma > 0)
        return float(target[0] + draft[0])

    def rows_ms(self, load: PassLoad, gamma, with_draft: bool):
        """(target_ms, draft_ms) [R] of the steps of `load` (the worker's N requests per row):
        the TP-G path's step_ms with, at dp > 1, dp_correction_ms added to the target pass's GPU
        time and the host CPU terms over the busiest rank's n = ceil(N / dp) requests, under the
        profile's own overlap rule (module docstring, "Host CPU"). No memory check: the pool
        checks its own DP-aware fit (the TP-G path would replicate the MLA KV)."""
        c, s = self.cost, self.shape
        if s.dp == 1:
            return c.step_ms(load, gamma, with_draft, check_fits=False)
        fix = self.dp_correction_ms(load.n_seqs, load.sum_ctx, gamma)
        rank = replace(load, host_seqs=np.ceil(np.asarray(load.n_seqs) / s.dp).astype(int))
        return c.step_ms(rank, gamma, with_draft, check_fits=False, gpu_extra_ms=fix)

    def dp_correction_ms(self, worker_requests, context_sum_tokens, gamma) -> np.ndarray:
        """What attention DP changes in the TP-G target pass (module docstring), ms per row:
        - attention_G(N) + attention_tp(n) - attn_gemms_G(N t) + attn_gemms_tp(n t)
        - communication_G(N) + all_reduce_tp(n) / 2 + moe_comm(n t), with N = worker_requests
        over context_sum_tokens cached tokens ([R] each, a request at the mean context),
        n = ceil(N / dp); 0 at dp = 1 and where N = 0."""
        s = self.shape
        N = np.asarray(worker_requests, dtype=float)
        if s.dp == 1:
            return np.zeros(N.shape)
        t = np.asarray(gamma) + 1.0
        C = np.asarray(context_sum_tokens, dtype=float)
        n = np.ceil(N / s.dp)
        c_rank = n * C / np.maximum(N, 1.0)
        tc = self.cost._target_c
        att = self.cost._attention_pnorm_ms
        attn_g = att(tc, N, N * t, t, C)
        attn_r = att(self._rank_c, n, n * t, t, c_rank)
        proj, comm_g, comm_r, moe = self._context_free_terms(N, t, n)
        out = -attn_g + attn_r + proj - comm_g + comm_r + moe
        return np.where(N > 0, out, 0.0)

    def _context_free_terms(self, N, t, n):
        """(proj, comm_g, comm_r, moe_comm) ms of dp_correction_ms for N worker requests at t
        positions, n = ceil(N / dp) on the busiest rank; the all-reduces' time depends on the
        tokens only (roofline.pass_components_s), so the context is 0 here. One computation for
        dp_correction_ms and dp_static_ms, the numpy and the compiled loop's tables."""
        s, tc = self.shape, self.cost._target_c
        zero = np.zeros(np.broadcast_shapes(np.shape(N), np.shape(t)))
        comm_g = pass_components_s(tc, N, t, zero)["communication"] * 1e3
        comm_r = 0.0
        if s.tp > 1:
            comm_r = pass_components_s(self._rank_c, n, t, zero)["communication"] * 1e3 / 2.0
        proj = (self.attention_gemms_ms(self._rank_c, s.tp, n * t)
                - self.attention_gemms_ms(tc, s.gpus_per_worker, N * t))
        return proj, comm_g, comm_r, self.moe_comm_ms(n * t)

    def _comm_ms(self, coeffs, tokens) -> np.ndarray:
        """All-reduce ms of a pass of `tokens` rows (array) on coefficients `coeffs`; 0 at 0."""
        T = np.asarray(tokens, dtype=float)
        comm = pass_components_s(coeffs, T, 1.0, 0.0)["communication"] * 1e3
        return np.where(T > 0, comm, 0.0)

    def _gemms_ms(self, coeffs, tp: int, tokens) -> np.ndarray:
        T = np.asarray(tokens, dtype=float)
        return np.where(T > 0, self.attention_gemms_ms(coeffs, tp, T), 0.0)

    def _moe_comm_or_zero_ms(self, tokens) -> np.ndarray:
        T = np.asarray(tokens, dtype=float)
        return np.where(T > 0, self.moe_comm_ms(T), 0.0)

    def dp_chunk_correction_ms(self, worker_requests, gamma, chunk_seqs, chunk_tokens,
                               chunk_context_sum) -> np.ndarray:
        """What attention DP changes in the TP-G path's price of a step's prefill chunks
        (module docstring, "Prefill chunks"), ms per row ([R] arrays: N decoding requests at
        gamma + 1 positions, P chunks of T tokens over Cp cached tokens), the chunks' host CPU
        at the busiest rank's p included; 0 at dp = 1 and where P = 0."""
        s = self.shape
        P = np.asarray(chunk_seqs, dtype=float)
        if s.dp == 1:
            return np.zeros(P.shape)
        N = np.asarray(worker_requests, dtype=float) + np.zeros(P.shape)
        t = np.asarray(gamma) + 1.0
        T = np.asarray(chunk_tokens, dtype=float)
        Cp = np.asarray(chunk_context_sum, dtype=float)
        n, p = np.ceil(N / s.dp), np.ceil(P / s.dp)
        share = p / np.maximum(P, 1.0)
        Tr = T * share
        length = np.maximum(T / np.maximum(P, 1.0), 1.0)
        tc, rc, G = self.cost._target_c, self._rank_c, s.gpus_per_worker
        attn = (attention_s(rc, np.maximum(p, 1.0), length, Cp * share, prefill=True)
                - attention_s(tc, np.maximum(P, 1.0), length, Cp, prefill=True)) * 1e3
        dec_g, dec_r = N * t, n * t
        proj = (self._gemms_ms(rc, s.tp, dec_r + Tr) - self._gemms_ms(rc, s.tp, dec_r)
                - self._gemms_ms(tc, G, dec_g + T) + self._gemms_ms(tc, G, dec_g))
        comm = self._comm_ms(tc, dec_g) - self._comm_ms(tc, dec_g + T)
        if s.tp > 1:
            comm = comm + (self._comm_ms(rc, dec_r + Tr) - self._comm_ms(rc, dec_r)) / 2.0
        a2a = self._moe_comm_or_zero_ms(dec_r + Tr) - self._moe_comm_or_zero_ms(dec_r)
        host = self.cost.engine.step_cpu_per_seq_ms * (p - P)  # the busiest rank's chunks' CPU
        return np.where(P > 0, attn + proj + comm + a2a + host, 0.0)

    def dp_static_ms(self, worker_requests, gamma) -> np.ndarray:
        """The terms of dp_correction_ms that do not depend on the context, ms (broadcast
        arrays): - attn_gemms_G(N t) + attn_gemms_tp(n t) - communication_G(N t) +
        all_reduce_tp(n t) / 2 + moe_comm(n t); 0 at dp = 1 and where N = 0. The compiled
        serving loop tables them by (N, gamma) and adds the two attention terms per step
        (src/online/step_prices.py dp_correction_ms)."""
        s = self.shape
        N, g = np.broadcast_arrays(np.asarray(worker_requests, dtype=float),
                                   np.asarray(gamma, dtype=float))
        if s.dp == 1:
            return np.zeros(N.shape)
        proj, comm_g, comm_r, moe = self._context_free_terms(N, g + 1.0, np.ceil(N / s.dp))
        out = proj - comm_g + comm_r + moe
        return np.where(N > 0, out, 0.0)
