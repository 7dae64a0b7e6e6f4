"""Step prices inside the compiled serving loop: the cost model's step_ms and prefill_extra_ms of
one row's step as scalar numba code (src/online/engine_loop.py calls them).

`pack_prices` reads a deployment's cost model once into arrays: its lookup tables (the
attention-free part of a decode pass, `HardwareCostModel._table_ms`; each GEMM's roofline time and
the all-reduce time per token count, for the mixed decode + prefill pass of
src/costmodel/prefill.py: a step's token count is at most the token budget, so every count it can
meet is tabled) and the scalars of the formulas computed per step (roofline attention, eager
launch cost, the engine profile's CPU and overlap rules, the draft passes, the memory check).
Every table entry is computed by the cost model's own numpy functions; the per-step formulas are
those of src/costmodel/hardware.py (`_target_parts`, `_draft_parts`, `step_ms`) and
src/costmodel/prefill.py (`_mixed_ms`) written for one row. They agree with the cost model to
rounding (tests/test_online_step_prices.py: 1e-9 relative); numba's exp, log and pow may round in
the last bit differently from numpy's vector loops.

Attention kernels fitted on a GPU (`PassCoefficients.attn_kernels`) are priced by
src/online/kernel_attention.py. A token tree's deployment (src/treesim/serving.py's TreeStepTimer,
`tree_shape` set) prices its speculative steps as src/treesim/costs.py does (tree_decode_ms); the
verification's extras over the target pass of N positions depend on the sequence count only and
are tabled by it from the timer (`tree_verify_extra_ms`).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from src.compiled_cache import compiled_callee  # (before the first njit: the cache's stamp)
from src.costmodel.drafts import STATEFUL_DRAFT_KINDS, kind_listed
from src.costmodel.memory import memory_usable_bytes
from src.costmodel.roofline import _pnorm, gemm_terms_s
from src.online.kernel_attention import N_KERNEL, fastest_pass_s, pack_kernels
from src.online.moe_prices import (
    G_EXPERT,
    M_PRESENT,
    N_MOE,
    N_MOE_GEMM,
    pack_moe,
    routed_gemm_s,
    routed_rows_wait,
)

# per-network scalars (row of PriceTables.net)
(N_READ, N_NEW, N_PAIR, N_P, N_GRAPHS, N_KERNELS, N_KERNELS_VERIFY, N_CPU_LAUNCH, N_GAP,
 N_LAUNCH_P, N_LAYER_ELEM, N_LAYER_FIXED, N_VERIFY_FIXED, N_HEAD_ELEM, N_HEAD_FIXED, N_ATTN_FIXED,
 N_PRESENT, N_HEAD_INDEX, N_KERNELS_FITTED, N_WINDOW, N_WINDOW_READ, N_WINDOW_PAIR,
 N_GRAPH_MAX, N_GRAPH_MAX_TOKENS) = range(24)
N_NET = 24
# per-deployment scalars (row of PriceTables.eng)
(E_CPU_FIXED, E_CPU_PER_SEQ, E_REJECTION, E_KV_BOOK, E_EXPANSION, E_SLOWDOWN, E_OVERLAP_DECODE,
 E_OVERLAP_SPEC, E_NGRAM_ONE_CALL, E_NGRAM_CPU, E_DRAFT_CPU_FIXED, E_DRAFT_CPU_PER_SEQ, E_COVERS,
 E_CATCHUP, E_BUDGET, E_WITH_DRAFT, E_WEIGHT_B, E_KV_PER_TOKEN_B, E_KV_PER_SEQ_B, E_USABLE_B,
 E_ONE_GRAPH, E_SPEC_EAGER, E_TREE_TOKENS, E_TREE_STEPS, E_TREE_TOPK, E_PREFILL_FREE,
 E_DP) = range(27)
N_ENG = 27
# The network index and the constant arguments the compiled functions pass one another are numpy
# scalars: numba types a Python int or bool constant (0, 1, True) as Literal[int] / Literal[bool]
# and compiles a callee once more for each literal value it is passed (numba's typing of constants
# and frozen globals); a numpy scalar types as int64 / bool, so each callee compiles once.
TARGET, DRAFT, RANK = np.int64(0), np.int64(1), np.int64(2)  # RANK: a DP rank's (dp_pricing)
ZERO, ONE = np.int64(0), np.int64(1)
PREFILL, DECODE = np.True_, np.False_  # attention_pow_s's `prefill`


class PriceTables(NamedTuple):
    """Every deployment's pricing data, stacked (deployment d at index d)."""

    net: np.ndarray  # [D, 3, N_NET] target / draft / attention-DP rank scalars
    eng: np.ndarray  # [D, N_ENG]
    table: np.ndarray  # [D, 2, S + 1, W] attention-free decode pass ms (+ attention fixed)
    gemm: np.ndarray  # [D, 2, G, T + 1] each GEMM's pnorm(memory, compute) s at a row count
    select: np.ndarray  # [D, 2, 2, G] GEMM g in the layers (0) / the LM head (1)
    comm: np.ndarray  # [D, 2, T + 1] all-reduce s of a pass of that many tokens
    kernels: np.ndarray  # [D, 3, K, N_KERNEL] fitted attention kernels (N_KERNELS_FITTED each)
    tree_extra: np.ndarray  # [D, S + 1] a token tree's verification extras by sequences (ms)
    # measured decode attention of the target (src/kernels/pass_attention.py PassAttention.rows)
    mattn: np.ndarray  # [D, S + 1, J] all layers' ms of the one-position kernel on the KV grid
    mattn_kv: np.ndarray  # [D, J] the KV grid
    mattn_edge: np.ndarray  # [D, S + 1, 2] (lo, hi) run of grid lines each S prices inside
    mattn_par: np.ndarray  # [D, 3] (tabled?, widest pass priced, one kernel's fixed ms x layers)
    # a decode pool's attention-DP correction's context-free terms by sequences and gamma (ms)
    dp_static: np.ndarray  # [D, S + 1, W]
    # the routed experts of a mixed pass (src/online/moe_prices.py pack_moe), per network
    moe: np.ndarray  # [D, 2, N_MOE]
    moe_gemm: np.ndarray  # [D, 2, G, N_MOE_GEMM]


def compiled_pricing_supported(timer) -> bool:
    """Whether step_prices prices this StepTimer's steps: every cost model it builds; a token
    tree's timer (src/treesim/serving.py) without a draft KV budget (whose capped sums the tree's
    pricing does not take: the numpy engine refuses it too)."""
    if timer.cost is None or not getattr(timer, "compiled_pricing", True):
        return False  # compiled_pricing False: terms the tables lack (src/online/dp_steptime.py)
    return getattr(timer, "tree_shape", None) is None or timer.cost.draft_kv_budget_tokens is None


def _net_row(c) -> np.ndarray:
    v = np.zeros(N_NET)
    if c is None:
        return v
    v[[N_READ, N_NEW, N_PAIR, N_P]] = (c.attn_read_per_ctx_token_s, c.attn_per_new_token_s,
                                       c.attn_compute_per_pair_s, c.sharpness_p)
    v[[N_GRAPHS, N_KERNELS, N_KERNELS_VERIFY, N_CPU_LAUNCH, N_GAP, N_LAUNCH_P]] = (
        float(c.cuda_graphs), c.n_kernels, c.n_kernels_verify_extra, c.cpu_launch_s,
        c.launch_gap_s, c.launch_overlap_p)
    v[[N_LAYER_ELEM, N_LAYER_FIXED, N_VERIFY_FIXED, N_HEAD_ELEM, N_HEAD_FIXED, N_ATTN_FIXED]] = (
        c.layer_elementwise_per_token_s, c.layer_fixed_s, c.verify_fixed_s,
        c.head_elementwise_per_token_s, c.head_fixed_s, c.attn_fixed_s)
    v[N_PRESENT] = 1.0
    v[N_GRAPH_MAX] = c.cuda_graph_max_seqs
    v[N_GRAPH_MAX_TOKENS] = c.cuda_graph_max_tokens
    v[N_HEAD_INDEX] = c.head_gemm_index
    v[N_KERNELS_FITTED] = len(c.attn_kernels)
    v[[N_WINDOW, N_WINDOW_READ, N_WINDOW_PAIR]] = (
        c.attn_window_tokens, c.attn_window_read_per_ctx_token_s, c.attn_window_compute_per_pair_s)
    return v


def _token_tables(c, max_tokens: int):
    """(gemm [G, T + 1], select [2, G], comm [T + 1]) of one network: the cost model's own
    functions at every token count 0..max_tokens (as _mixed_ms evaluates them per step)."""
    rows = np.broadcast_to(np.arange(max_tokens + 1, dtype=float), (len(c.gemm_weight_s),
                                                                    max_tokens + 1))
    mem_g, comp_g = gemm_terms_s(c, rows)
    gemm = _pnorm(mem_g, comp_g, c.sharpness_p)
    T = np.arange(max_tokens + 1, dtype=float)
    if c.comm_custom is None:
        comm = c.comm_fixed_s + c.comm_per_token_s * T
    else:
        comm = c.comm_n_allreduce * c.comm_custom.time_s(T * c.comm_bytes_per_token)
    return gemm, np.asarray(c.gemm_selector, float), np.asarray(comm, float)


def pack_prices(timers, max_seqs: int, max_gamma: int, max_tokens: int) -> PriceTables:
    """PriceTables of every StepTimer in `timers`, for steps of at most max_seqs decoding
    sequences, gamma <= max_gamma and max_tokens positions (decode + prefill). A timer whose
    prefill chunks cost nothing (`prefill_free`: a disaggregated decode pool's worker, src/disagg/
    pool_timer.py, whose prompts' KV arrives from the prefill pool) has E_PREFILL_FREE set, and
    the loop adds no prefill_extra_ms to its steps; where every timer is such, the token-count
    tables (read by prefill_extra_ms only) hold count 0 alone instead of every count of the
    decode pool's budget (max_num_seqs x the longest request: ~10^6 counts). A timer with
    `dp_pricing` (a decode worker at attention DP > 1) gets E_DP, its DP rank's network (RANK)
    and its correction's context-free table (dp_static_ms); its memory check is its own (the
    KV capacity the engine keeps to), so step_fits passes (E_USABLE_B = inf), as its
    check_fits does."""
    D = len(timers)
    if all(getattr(t, "prefill_free", False) for t in timers):
        max_tokens = 0
    nets, engs, tabs, gemms, sels, comms, kerns = [], [], [], [], [], [], []
    tree_extra = np.zeros((D, max_seqs + 1))
    dps = []
    for d, timer in enumerate(timers):
        cost, e = timer.cost, timer.engine
        draft_c = cost._draft_c  # the cost model's (step_ms uses it for the overlap rule too)
        catchup = int(e.draft_catchup_positions_per_seq)
        width = max(max_gamma + 2, catchup + 2)
        shape = getattr(timer, "tree_shape", None)
        if shape is not None:  # the verification of N positions, the draft's K-wide passes
            width = max(width, shape.tokens + 1, shape.topk + 1)
            tree_extra[d] = timer.tree_verify_extra_ms(max_seqs)
        per_net = []
        for which, c in (("target", timer.target_c), ("draft", draft_c)):
            if c is None:
                per_net.append((np.zeros((max_seqs + 1, width)), None))
                continue
            table = cost._table_ms(which, max_seqs, width - 1)[: max_seqs + 1, :width]
            per_net.append((np.array(table), _token_tables(c, max_tokens)))
        dp = timer.dp_pricing(max_seqs, width) if hasattr(timer, "dp_pricing") else None
        dps.append(dp)
        rank_c = None if dp is None else dp[1]
        nets.append([_net_row(timer.target_c), _net_row(draft_c), _net_row(rank_c)])
        kerns.append([pack_kernels(c.attn_kernels if c is not None else ())
                      for c in (timer.target_c, draft_c, rank_c)])
        tabs.append([t for t, _ in per_net])
        gemms.append([x[0] if x else None for _, x in per_net])
        sels.append([x[1] if x else None for _, x in per_net])
        comms.append([x[2] if x else np.zeros(max_tokens + 1) for _, x in per_net])
        v = np.zeros(N_ENG)
        v[[E_CPU_FIXED, E_CPU_PER_SEQ, E_REJECTION, E_KV_BOOK]] = (
            e.step_cpu_fixed_ms, e.step_cpu_per_seq_ms, e.rejection_sampling_per_position_ms,
            e.kv_bookkeeping_per_seq_ms)
        v[[E_EXPANSION, E_SLOWDOWN, E_OVERLAP_DECODE]] = (
            float(e.scoring_batch_expansion), e.verification_attention_slowdown_factor,
            float(e.cpu_overlap_decode))
        v[E_OVERLAP_SPEC] = float(kind_listed(cost.draft.kind, e.cpu_overlap_draft_kinds))
        v[[E_NGRAM_ONE_CALL, E_NGRAM_CPU, E_DRAFT_CPU_FIXED, E_DRAFT_CPU_PER_SEQ]] = (
            float(e.ngram_one_call_per_step), e.ngram_pass_cpu_ms, e.draft_pass_cpu_fixed_ms,
            e.draft_pass_cpu_per_seq_ms)
        v[E_COVERS] = float(e.draft_first_pass_covers_verified
                            and cost.draft.kind in STATEFUL_DRAFT_KINDS)
        v[E_CATCHUP] = catchup
        budget = cost.draft_kv_budget_tokens
        v[E_BUDGET] = -1.0 if budget is None else budget
        v[E_WITH_DRAFT] = float(timer.speculative)
        v[E_PREFILL_FREE] = float(getattr(timer, "prefill_free", False))
        v[[E_WEIGHT_B, E_KV_PER_TOKEN_B, E_KV_PER_SEQ_B]] = (
            cost._weight_bytes_gpu0, cost._kv_bytes_per_token_gpu0, cost._kv_bytes_per_seq_gpu0)
        v[E_USABLE_B] = memory_usable_bytes(cost.gpu, cost.params) if dp is None else np.inf
        v[E_DP] = 1.0 if dp is None else dp[0]
        stateful = cost.draft.kind in STATEFUL_DRAFT_KINDS
        v[E_ONE_GRAPH] = float(e.draft_passes_one_graph and stateful)
        v[E_SPEC_EAGER] = timer.target_c.spec_step_eager_s * 1e3 if stateful else 0.0
        if shape is not None:
            v[[E_TREE_TOKENS, E_TREE_STEPS, E_TREE_TOPK]] = (shape.tokens, shape.steps,
                                                             shape.topk)
        engs.append(v)
    W = max(t.shape[1] for pair in tabs for t in pair)
    G = max(g.shape[0] for pair in gemms for g in pair if g is not None)
    table = np.zeros((D, 2, max_seqs + 1, W))
    gemm = np.zeros((D, 2, G, max_tokens + 1))
    select = np.zeros((D, 2, 2, G))
    for d in range(D):
        for n in range(2):
            t = tabs[d][n]
            table[d, n, :, : t.shape[1]] = t
            if gemms[d][n] is not None:
                gemm[d, n, : gemms[d][n].shape[0]] = gemms[d][n]
                select[d, n, :, : sels[d][n].shape[1]] = sels[d][n]
    K = max([k.shape[0] for pair in kerns for k in pair] + [1])
    kernels = np.zeros((D, 3, K, N_KERNEL))
    for d in range(D):
        for n in range(3):
            kernels[d, n, : kerns[d][n].shape[0]] = kerns[d][n]
    dp_static = np.zeros((D, max_seqs + 1, W))
    for d, dp in enumerate(dps):
        if dp is not None:
            dp_static[d, :, : dp[2].shape[1]] = dp[2]
    moe = np.zeros((D, 2, N_MOE))
    moe_gemm = np.zeros((D, 2, G, N_MOE_GEMM))
    for d, timer in enumerate(timers):
        for n, c in enumerate((timer.target_c, timer.cost._draft_c)):
            moe[d, n], moe_gemm[d, n] = pack_moe(c, G)
    return PriceTables(np.array(nets), np.array(engs), table, gemm, select, np.array(comms),
                       kernels, tree_extra, *_pack_measured_attention(timers, max_seqs),
                       dp_static, moe, moe_gemm)


def _pack_measured_attention(timers, max_seqs: int):
    """(mattn, mattn_kv, mattn_edge, mattn_par) of PriceTables: each deployment's
    PassAttention.rows (HardwareCostModel.attention_kernels), zeros where it has none."""
    got = []
    for timer in timers:
        a = getattr(timer.cost, "attention_kernels", None)
        got.append(None if a is None else (a, *a.rows(max_seqs)))
    J = max([x[0].kv_axis.size for x in got if x is not None] + [1])
    D = len(timers)
    rows, kv = np.zeros((D, max_seqs + 1, J)), np.ones((D, J))
    edge, par = np.full((D, max_seqs + 1, 2), -1.0), np.zeros((D, 3))
    for d, x in enumerate(got):
        if x is None:
            continue
        a, r, lo, hi = x
        j = a.kv_axis.size
        rows[d, :, :j] = r[: max_seqs + 1]
        kv[d, :j] = a.kv_axis
        edge[d, :, 0], edge[d, :, 1] = lo[: max_seqs + 1], hi[: max_seqs + 1]
        par[d] = (1.0, a.max_positions, a.fixed_ms)
    return rows, kv, edge, par


@compiled_callee
def _pnorm2(a, b, p):
    return (a**p + b**p) ** (1.0 / p)


@compiled_callee
def attention_exp_ms(pt, d, net, n, tokens, t, sum_ctx):
    """HardwareCostModel._attention_pnorm_ms of one pass, ms: the fastest fitted kernel, else
    the roofline."""
    c = pt.net[d, net]
    if c[N_KERNELS_FITTED] > 0:
        if n <= 0:
            return 0.0
        return fastest_pass_s(pt.kernels[d, net], int(c[N_KERNELS_FITTED]), float(n), float(t),
                              float(sum_ctx), DECODE) * 1e3
    p = c[N_P]
    memory = (c[N_READ] * 1e3) * sum_ctx + ((c[N_READ] + c[N_NEW]) * 1e3) * tokens
    compute = (c[N_PAIR] * 1e3) * (t * sum_ctx + tokens * ((t + 1) * 0.5))
    if c[N_WINDOW] > 0:  # sliding-window layers: min(C, S W) cached tokens read
        window_ctx = min(float(sum_ctx), float(n) * c[N_WINDOW])
        memory = memory + (c[N_WINDOW_READ] * 1e3) * (window_ctx + tokens)
        compute = compute + (c[N_WINDOW_PAIR] * 1e3) * (t * window_ctx + tokens * ((t + 1) * 0.5))
    ratio = compute / max(memory, 1e-300) + 1e-300
    return memory * np.exp(np.log1p(np.exp(p * np.log(ratio))) * (1.0 / p))


@compiled_callee
def attention_pow_s(pt, d, net, S, t, C, prefill):
    """roofline.attention_s of one pass, s: the fastest fitted kernel, else the roofline pnorm
    of attention_terms_s."""
    c = pt.net[d, net]
    if c[N_KERNELS_FITTED] > 0:
        return fastest_pass_s(pt.kernels[d, net], int(c[N_KERNELS_FITTED]), S, t, C, prefill)
    T = S * t
    memory = c[N_READ] * (C + T) + c[N_NEW] * T
    compute = c[N_PAIR] * (t * C + S * (t * (t + 1) / 2))
    if c[N_WINDOW] > 0:  # roofline.attention_terms_s's window layers
        window_ctx = min(C, S * c[N_WINDOW])
        memory = memory + c[N_WINDOW_READ] * (window_ctx + T)
        compute = compute + c[N_WINDOW_PAIR] * (t * window_ctx + S * (t * (t + 1) / 2))
    return _pnorm2(memory, compute, c[N_P])


@compiled_callee
def measured_attention_ms(pt, d, n, t, C, attention):
    """PassAttention.replace_ms of one target pass (HardwareCostModel._target_parts): the
    measured kernel in place of `attention` (ms, without the fixed time) where tabled."""
    par = pt.mattn_par[d]
    if par[0] == 0.0 or n <= 0 or t > par[1]:
        return attention
    lo, hi = int(pt.mattn_edge[d, n, 0]), int(pt.mattn_edge[d, n, 1])
    if lo < 0:
        return attention
    axis, row = pt.mattn_kv[d], pt.mattn[d, n]
    S, Cf, tf = float(n), float(C), float(t)
    kv = Cf / S + tf
    kc = min(max(kv, axis[lo]), axis[hi])
    i1 = lo
    while i1 < hi and axis[i1] < kc:
        i1 += 1
    if axis[i1] == kc:
        val = row[i1]
    else:
        i0 = i1 - 1
        w = (kc - axis[i0]) / (axis[i1] - axis[i0])
        val = (1.0 - w) * row[i0] + w * row[i1]
    if kc == kv and t == 1:
        return val - par[2]
    r_1 = attention_pow_s(pt, d, TARGET, S, 1.0, Cf + S * (tf - 1.0), DECODE) * 1e3
    if kc != kv:  # beyond the run: the edge's row plus the roofline's increment
        val = val + (r_1 - attention_pow_s(pt, d, TARGET, S, 1.0, S * (kc - 1.0), DECODE) * 1e3)
    if t != 1:  # the roofline's premium of t positions (attention: the cost model's own)
        val = val * (attention / r_1)
    return val - par[2]


@compiled_callee
def launch_ms(c, gpu_ms, t, n):
    """roofline.launch_overhead_s of a pass of gpu_ms GPU time over n sequences x t positions,
    in ms."""
    if c[N_GRAPHS] != 0.0 and (c[N_GRAPH_MAX] == 0.0 or n <= c[N_GRAPH_MAX]) and (
            c[N_GRAPH_MAX_TOKENS] == 0.0 or n * t <= c[N_GRAPH_MAX_TOKENS]):
        return 0.0
    gpu_s = gpu_ms * 1e-3
    if gpu_s <= 0:
        return 0.0
    n = c[N_KERNELS] + c[N_KERNELS_VERIFY] * (1.0 if t > 1 else 0.0)
    total = _pnorm2(gpu_s + n * c[N_GAP], n * c[N_CPU_LAUNCH], c[N_LAUNCH_P])
    return (total - gpu_s) * 1e3


@compiled_callee
def draft_cpu_ms(e, c, n, g):
    """HardwareCostModel._draft_cpu_ms (c: the draft network's row)."""
    if c[N_PRESENT] == 0.0:
        calls = (1.0 if g > 0 else 0.0) if e[E_NGRAM_ONE_CALL] != 0.0 else float(g)
        return calls * e[E_NGRAM_CPU] if n > 0 else 0.0
    if e[E_ONE_GRAPH] != 0.0 and c[N_GRAPHS] != 0.0 and (
            c[N_GRAPH_MAX] == 0.0 or n <= c[N_GRAPH_MAX]):
        g = min(g, 2)
    return g * ((e[E_DRAFT_CPU_FIXED] if n > 0 else 0.0) + e[E_DRAFT_CPU_PER_SEQ] * n)


@compiled_callee
def draft_parts(pt, d, n, C, g, capped_mid, capped_start, h):
    """(physics, cpu, gpu) ms of gamma draft passes (HardwareCostModel._draft_parts); capped_mid
    / capped_start: sum_i min(ctx_i + (g - 1) / 2, b) and sum_i min(ctx_i, b) (budget b >= 0);
    h: the sequences the host CPU is priced over (PassLoad.cpu_seqs)."""
    e = pt.eng[d]
    c = pt.net[d, DRAFT]
    has_net = c[N_PRESENT] != 0.0
    cpu = draft_cpu_ms(e, c, h, g)
    if not has_net:
        return 0.0, cpu, 0.0
    tab = pt.table[d, DRAFT]
    catchup = g if e[E_COVERS] != 0.0 else int(e[E_CATCHUP])
    budget = e[E_BUDGET]
    mid_ctx = C + n * ((g - 1) * 0.5) if budget < 0 else capped_mid
    per_pass = tab[n, 1] + attention_exp_ms(pt, d, DRAFT, n, n, ONE, mid_ctx)
    physics = g * per_pass
    gpu = g * launch_ms(c, per_pass, ONE, n)
    if catchup > 0 and g > 0:
        ctx0 = C if budget < 0 else capped_start
        wide = 1 + catchup
        extra = (tab[n, wide] - tab[n, 1] + attention_exp_ms(pt, d, DRAFT, n, n * wide, wide, ctx0)
                 - attention_exp_ms(pt, d, DRAFT, n, n, ONE, ctx0))
        gpu += extra
        if c[N_GRAPH_MAX_TOKENS] != 0.0:  # the first pass's n (1 + catch-up) tokens
            gpu += launch_ms(c, per_pass + extra, wide, n) - launch_ms(c, per_pass, ONE, n)
    return physics, cpu, gpu


@compiled_callee
def step_fits(pt, d, n, C, g):
    """The cost model's memory check of a step (check_step_fits): weights + KV fit the GPU."""
    e = pt.eng[d]
    need = e[E_WEIGHT_B] + e[E_KV_PER_TOKEN_B] * (C + n * (g + 1.0)) + e[E_KV_PER_SEQ_B] * n
    return need <= e[E_USABLE_B]


@compiled_callee
def decode_ms(pt, d, n, C, g, capped_mid, capped_start):
    """(target_ms, draft_ms) of a step verifying gamma = g drafts of n decoding sequences over C
    cached tokens: HardwareCostModel.step_ms (StepTimer.decode_ms_totals) for one row, one
    scheduler's host CPU over all n."""
    return decode_host_ms(pt, d, n, C, g, capped_mid, capped_start, n, 0.0)


@compiled_callee
def decode_host_ms(pt, d, n, C, g, capped_mid, capped_start, h, extra):
    """decode_ms with h: the sequences the host CPU is priced over (an attention-DP worker's
    busiest rank's: PassLoad.host_seqs) and extra: GPU ms added to the target pass (step_ms's
    gpu_extra_ms: the DP correction)."""
    e = pt.eng[d]
    c = pt.net[d, TARGET]
    t = g + 1
    tokens = n * t
    attention = attention_exp_ms(pt, d, TARGET, n, tokens, t, float(C))
    attention = measured_attention_ms(pt, d, n, t, C, attention)
    physics = pt.table[d, TARGET, n, t] + attention
    verify = t > 1
    per_seq = e[E_CPU_PER_SEQ]
    if verify:
        per_seq += e[E_REJECTION] * t + e[E_KV_BOOK]
        if e[E_EXPANSION] != 0.0:
            per_seq += e[E_CPU_PER_SEQ] * (t - 1)
    cpu = (e[E_CPU_FIXED] if h > 0 else 0.0) + h * per_seq
    gpu = launch_ms(c, physics, t, n)
    if verify and n > 0:
        gpu += e[E_SPEC_EAGER]
    if verify and (e[E_EXPANSION] != 0.0 or e[E_SLOWDOWN] != 1.0):
        engine_attention = attention
        if e[E_EXPANSION] != 0.0:
            engine_attention = attention_exp_ms(pt, d, TARGET, tokens, tokens, ONE,
                                                t * C + n * (t * (t - 1) * 0.5))
        gpu += e[E_SLOWDOWN] * engine_attention - attention
    if extra != 0.0:
        physics = physics + extra
    overlap_spec = e[E_OVERLAP_SPEC] != 0.0
    have = False
    d_phys = d_cpu = d_gpu = 0.0
    if not (e[E_OVERLAP_DECODE] != 0.0 or overlap_spec):
        overhead = cpu + gpu
    else:
        step_cpu, step_gpu = cpu, physics + gpu
        if overlap_spec and verify:
            step_cpu += draft_cpu_ms(e, pt.net[d, DRAFT], h, g)
            if step_cpu > step_gpu:
                d_phys, d_cpu, d_gpu = draft_parts(pt, d, n, C, g, capped_mid, capped_start, h)
                have = True
                step_gpu += d_phys + d_gpu
        overlap = overlap_spec if verify else e[E_OVERLAP_DECODE] != 0.0
        overhead = gpu + (max(step_cpu - step_gpu, 0.0) if overlap else cpu)
    target = physics + overhead
    if e[E_WITH_DRAFT] == 0.0:
        return target, 0.0
    if not have:
        d_phys, d_cpu, d_gpu = draft_parts(pt, d, n, C, g, capped_mid, capped_start, h)
    if overlap_spec:
        return target, d_phys + d_gpu
    return target, d_phys + (d_cpu + d_gpu)


@compiled_callee
def dp_correction_ms(pt, d, n, C, g):
    """DecodeWorker.dp_correction_ms of one row (src/attention_dp/worker.py): a decode worker at
    attention DP = E_DP > 1 holding n requests over C cached tokens at gamma g: its tabled
    context-free terms plus - attention_G(n) + attention_rank(ceil(n / dp)); 0 at dp 1."""
    dp = int(pt.eng[d, E_DP])
    if dp <= 1 or n <= 0:
        return 0.0
    t = g + 1
    r = (n + dp - 1) // dp
    c_rank = r * float(C) / n
    return (-attention_exp_ms(pt, d, TARGET, n, n * t, t, float(C))
            + attention_exp_ms(pt, d, RANK, r, r * t, t, c_rank) + pt.dp_static[d, n, g])


@compiled_callee
def tree_step_fits(pt, d, n, C, g):
    """A token tree's step at g > 0 (TreeStepTimer): the memory checks of the chain step at g, of
    the verification of N positions and of the S draft passes (a draft network's), in that
    order; the gamma of the first that fails, else -1."""
    if not step_fits(pt, d, n, C, g):
        return g
    e = pt.eng[d]
    N, S = int(e[E_TREE_TOKENS]), int(e[E_TREE_STEPS])
    if not step_fits(pt, d, n, C, N - 1):
        return N - 1
    if pt.net[d, DRAFT, N_PRESENT] != 0.0 and not step_fits(pt, d, n, C, S):
        return S
    return -1


@compiled_callee
def tree_decode_ms(pt, d, n, C):
    """(target_ms, draft_ms) of a token tree's speculative step (src/treesim/costs.py: verify_ms,
    draft_ms; no draft KV budget): the target pass of N positions (the chain's at gamma N - 1)
    plus the tree's verification extras (tabled by sequences, tree_extra), and the chain's S
    draft passes plus (S - 1) x (the draft pass of K positions - the pass of 1) at the mean
    context C + n (S - 1) / 2."""
    e = pt.eng[d]
    N, S, K = int(e[E_TREE_TOKENS]), int(e[E_TREE_STEPS]), int(e[E_TREE_TOPK])
    target = decode_ms(pt, d, n, C, N - 1, 0.0, 0.0)[0] + pt.tree_extra[d, n]
    draft = decode_ms(pt, d, n, C, S, 0.0, 0.0)[1]
    if S > 1 and n > 0 and pt.net[d, DRAFT, N_PRESENT] != 0.0:
        tab = pt.table[d, DRAFT]
        ctx = C + n * ((S - 1) * 0.5)
        wide = (tab[n, K] - tab[n, 1] + attention_exp_ms(pt, d, DRAFT, n, n * K, K, ctx)
                - attention_exp_ms(pt, d, DRAFT, n, n, ONE, ctx))
        draft = draft + (S - 1) * wide
    return target, draft


@compiled_callee
def mixed_ms(pt, d, net, S, t, C, P, N, Cp, Lp, dec_attention_s):
    """prefill._mixed_ms of one row: GPU ms of a pass of S sequences x t positions over C cached
    tokens plus P prompt chunks of N positions over Cp cached tokens, Lp of them ending their
    prompt; dec_attention_s: the decode part's attention, s."""
    T = S * t + N
    if T <= 0:
        return 0.0
    L = S * t + Lp
    c = pt.net[d, net]
    head = int(c[N_HEAD_INDEX])
    gemm = pt.gemm[d, net]
    sel = pt.select[d, net]
    mo, mg = pt.moe[d, net], pt.moe_gemm[d, net]
    routed = mo[M_PRESENT] != 0.0
    rows = wait = 0.0
    if routed:  # each decoding sequence and each chunk is one run of the experts' routing
        rows, wait = routed_rows_wait(mo, float(S + P), float(T))
    g0 = 0.0
    g1 = 0.0
    for g in range(gemm.shape[0]):
        if routed and mg[g, G_EXPERT] != 0.0:
            f = routed_gemm_s(mo, mg[g], rows, wait)
        else:
            f = gemm[g, L] if g == head else gemm[g, T]
        g0 += sel[0, g] * f
        g1 += sel[1, g] * f
    total = g0 + g1
    chunk_len = N / max(P, 1)
    multi = (S > 0 and t > 1) or (P > 0 and chunk_len > 1)
    total += c[N_LAYER_ELEM] * T + c[N_LAYER_FIXED] + (c[N_VERIFY_FIXED] if multi else 0.0)
    total += c[N_HEAD_ELEM] * L + c[N_HEAD_FIXED]
    total += dec_attention_s
    if P > 0:
        total += attention_pow_s(pt, d, net, float(max(P, 1)), max(chunk_len, 1.0), float(Cp),
                                 PREFILL)
    total += c[N_ATTN_FIXED]
    total += pt.comm[d, net, T]
    return total * 1e3


@compiled_callee
def prefill_extra_ms(pt, d, n, g, C, P, N, Cp, Lp):
    """StepTimer.prefill_extra_ms of one row: what the P prompt chunks (N positions over Cp
    cached tokens, Lp completing their prompt) add to a step of n sequences verifying g drafts
    over C cached tokens, the draft network's prefill of the same chunks included (a deployment
    with its draft: StepTimer.draft_c)."""
    e = pt.eng[d]
    t = g + 1
    att = attention_pow_s(pt, d, TARGET, float(n), float(max(t, 1)), float(C), DECODE) if n > 0 \
        else 0.0
    extra = (mixed_ms(pt, d, TARGET, n, t, C, P, N, Cp, Lp, att)
             - mixed_ms(pt, d, TARGET, n, t, C, ZERO, ZERO, ZERO, ZERO, att))
    if P > 0:
        extra += e[E_CPU_PER_SEQ] * P + (0.0 if n > 0 else e[E_CPU_FIXED])
    if e[E_WITH_DRAFT] != 0.0 and pt.net[d, DRAFT, N_PRESENT] != 0.0:
        extra += mixed_ms(pt, d, DRAFT, ZERO, ONE, ZERO, P, N, Cp, Lp, 0.0)
    return extra
