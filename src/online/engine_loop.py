"""The serving engine's step loop, compiled with numba: one row (replication) at a time, one
engine step after another, each step as src/online/engine.py's module docstring describes it.

Rows are independent (each has its own clock, requests and counter-based draws), so the loop
simulates row after row; within a row the slots are arrays of max_num_seqs entries of which the
first `hi` are scanned (a slot is taken lowest-index first, as the numpy engine's argmax does).
Every step is priced by src/online/step_prices.py; the policies run here are the batch-size
tables (none, fixed, schedule, off-above and the token trees tree:S:K:N: gamma =
table[running sequences]) and the goodput maximiser `adaptive` (src/online/policies.py),
re-decided every step. A tree row draws its accepted depth against its requests' P(K >= d) and
its deployment's steps are priced as the tree's (step_prices.tree_decode_ms).

A step the cost model's memory check would refuse (it cannot happen while the scheduler keeps
the KV blocks within the deployment's capacity) stops the row with an error code; the caller
raises the cost model's own error for it.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from src.compiled_cache import compiled_callee  # (before the first njit: the cache's stamp)
from src.online.counter_rng import uniform_one
from src.online.step_prices import (
    E_BUDGET,
    E_DP,
    E_PREFILL_FREE,
    E_TREE_TOKENS,
    E_WITH_DRAFT,
    ZERO,
    decode_host_ms,
    decode_ms,
    dp_correction_ms,
    prefill_extra_ms,
    step_fits,
    tree_decode_ms,
    tree_step_fits,
)

POLICY_TABLE, POLICY_ADAPTIVE = 0, 1
# per-row statistics (columns of `stats`)
S_STEPS, S_BUSY, S_RUN, S_KV, S_ACC, S_PROP, S_SLOTS = range(7)


@compiled_callee
def _blocks(tokens, bs, shift):
    """ceil(tokens / bs) KV blocks; shift = log2(bs) where bs is a power of two (a shift instead
    of an integer division), else -1."""
    if shift >= 0:
        return (tokens + bs - 1) >> shift
    return -(-tokens // bs)


@compiled_callee
def _itl_bin(edges, gap, lo, scale):
    """np.searchsorted(edges, max(gap, edges[0]), "right") - 1, at most the last bin: a guess
    from the edges' log spacing, corrected against the edges themselves (exact for any sorted
    edges; one or two comparisons for ITL_BIN_EDGES_MS). lo = log10(edges[0]), scale = bins per
    decade."""
    x = max(gap, edges[0])
    n = edges.size
    i = int((np.log10(x) - lo) * scale)
    i = min(max(i, 0), n - 1)
    while i + 1 < n and edges[i + 1] <= x:
        i += 1
    while i > 0 and edges[i] > x:
        i -= 1
    return min(i, n - 2)


@compiled_callee
def _capped(ctx, dec, hi, shift, budget):
    """sum over decoding slots of min(ctx + shift, budget) (a capped draft KV cache)."""
    s = 0.0
    for c in range(hi):
        if dec[c]:
            s += min(ctx[c] + shift, budget)
    return s


@compiled_callee
def _price(pt, d, n, C, g, ctx, dec, hi):
    budget = pt.eng[d, E_BUDGET]
    mid = start = 0.0
    if budget >= 0:
        mid = _capped(ctx, dec, hi, (g - 1) * 0.5, budget)
        start = _capped(ctx, dec, hi, 0.0, budget)
    dp = int(pt.eng[d, E_DP])
    if dp <= 1:
        return decode_ms(pt, d, n, C, g, mid, start)
    # attention DP > 1: the DP correction inside the GPU time the host CPU overlaps, that CPU
    # over the busiest rank's requests (DecodeWorker.rows_ms)
    return decode_host_ms(pt, d, n, C, g, mid, start, (n + dp - 1) // dp,
                          dp_correction_ms(pt, d, n, C, g))


@compiled_callee
def _adaptive_gamma(pt, d, params, G, n, C, ctx, dec, hi, acc, tested, pool_acc, pool_tested,
                    tokens):
    """policies.Adaptive.gammas for one row: argmax over g <= G of the expected committed tokens
    per ms, each request's acceptance shrunk towards the row's pooled estimate. E[K + 1] =
    (1 - a^(g + 1)) / (1 - a) is summed as 1 + a + ... + a^g: the policy's numbers to rounding.
    tokens: scratch of at least G + 1 entries."""
    if n == 0:
        return 0
    prior_alpha, prior_tokens = params[0], params[1]
    pooled = (pool_acc + prior_alpha * prior_tokens) / (pool_tested + prior_tokens)
    for g in range(G + 1):  # tokens[g]: sum over decoding slots of E[K + 1] at each g
        tokens[g] = 0.0
    for c in range(hi):
        if dec[c]:
            a = (acc[c] + prior_tokens * pooled) / (tested[c] + prior_tokens)
            a = min(max(a, 1e-3), 0.999)
            term, power = 1.0, 1.0  # E[K + 1] at g = 1 + a + ... + a^g
            for g in range(G + 1):
                tokens[g] += term
                power *= a
                term += power
    best_g, best = 0, -1.0
    for g in range(G + 1):
        target, draft = _price(pt, d, n, C, g, ctx, dec, hi)
        goodput = tokens[g] / max(target + draft, 1e-12)
        if goodput > best:
            best_g, best = g, goodput
    return best_g


@compiled_callee
def _head_fits(arrival_ms, prompt, r, n_req, next_new, n_pre_wait, waiting_pre, generated,
               start, n_run, M, budget_tokens, req, ctx, hi, bs, shift, capr):
    """Whether the next waiting request (a preempted one first) has arrived, a free slot, and its
    whole prompt (+ tokens generated before a preemption) fits the token budget and the KV blocks
    the running sequences leave: a prefill-first row's prefill-only step."""
    if n_run >= M:
        return False
    if n_pre_wait > 0:
        h = 0
        while not waiting_pre[h]:
            h += 1
    else:
        h = next_new
        if h >= n_req or arrival_ms[r, h] > start:
            return False
    need = prompt[r, h] + generated[h]
    if need > budget_tokens:
        return False
    used = 0
    for c in range(hi):
        if req[c] >= 0:
            used += _blocks(ctx[c], bs, shift)
    return used + _blocks(need, bs, shift) <= capr


def scratch(max_num_seqs: int, n_requests: int, max_gamma: int):
    """run_rows's zeroed scratch arrays (work_i, work_f, work_b, s_thr, s_key)."""
    W = max(max_num_seqs, n_requests, max_gamma + 1)
    return (np.zeros((13, W), np.int64), np.zeros((4, W)), np.zeros((2, W), np.bool_),
            np.zeros((max_num_seqs, max(max_gamma, 1))), np.zeros(max_num_seqs, np.uint64))


@njit(cache=True)
def run_rows(pt, arrival_ms, released, closed, prompt, output, alpha, key, n_req, row_dep, cap,
             row_group,
             group_kind, group_table, group_params, dep_prefill_first, max_gamma, max_num_seqs,
             budget_tokens,
             block_size, hazard_profile, per_position, tree_tokens, tree_thr, edges,
             first_sched, first_token, finish, preemptions, stats, gamma_steps, itl, error,
             work_i, work_f, work_b, s_thr, s_key):
    """Simulate every row to completion; outputs (NaN-filled times in s, zeroed counts) are
    written in place. error[r] = 1: a step of row r failed the memory check (error[r, 1:] =
    n, C, gamma of it). dep_prefill_first[d]: deployment d schedules prefill-first (a step
    with a waiting prompt that fits whole is a prefill-only step of whole prompts, else a decode
    step that admits nothing); else chunked prefill. tree_tokens[r] > 0: row r verifies a token
    tree of that many tokens N (N positions of token budget and KV per decoding sequence, N - 1
    drafts proposed; no speculation in a step whose N positions per sequence exceed the budget),
    its request q's accepted depth K = #{d : U < tree_thr[r, q, d]} (P(K >= d), zero-padded),
    priced by its deployment's tree tables (step_prices.tree_decode_ms). closed[r]: row r's
    requests come from closed-loop clients: a request finishing at time t sends the row's next
    one (arrival_ms[r, released[r]] = t, in place; released[r] requests sent so far).
    work_i, work_f, work_b, s_thr, s_key: zeroed scratch (`scratch`), allocated by the caller:
    each array this function allocated was one more numba overload compiled (np.zeros and
    np.empty per dtype and rank: about 2 s of a cold compile)."""
    R, N = arrival_ms.shape
    M = max_num_seqs
    bs = block_size
    itl_lo = np.log10(edges[0])
    itl_scale = (edges.size - 1) / (np.log10(edges[edges.size - 1]) - itl_lo)
    shift = int(np.log2(bs)) if bs & (bs - 1) == 0 else -1
    req, ctx, pf, rem = work_i[0, :M], work_i[1, :M], work_i[2, :M], work_i[3, :M]
    # acceptance thresholds alpha^(D_i) of the slot's request (s_thr [M, G1]):
    # K = #{i <= gamma: U <= thr_i}
    G1 = max(max_gamma, 1)
    positions = work_f[0, :G1]  # D_i: the hazard profile (inf past its end), or i (i.i.d.)
    for i in range(G1):
        if per_position:
            positions[i] = hazard_profile[i] if i < hazard_profile.size else np.inf
        else:
            positions[i] = i + 1.0
    s_steps, s_acc, s_tested = work_i[4, :M], work_i[5, :M], work_i[6, :M]
    last_emit = work_f[1, :M]
    admit_seq, chunk = work_i[7, :M], work_i[8, :M]
    dec = work_b[0, :M]
    generated, q_steps, q_acc, q_tested = work_i[9, :N], work_i[10, :N], work_i[11, :N], \
        work_i[12, :N]
    q_last_emit = work_f[2, :N]
    waiting_pre = work_b[1, :N]
    tokens = work_f[3]
    for r in range(R):
        d = row_dep[r]
        grp = row_group[r]
        speculative = pt.eng[d, E_WITH_DRAFT] != 0.0
        prefill_first = dep_prefill_first[d]
        row_tokens = tree_tokens[r]
        is_tree = row_tokens > 0
        tree_dep = pt.eng[d, E_TREE_TOKENS] > 0
        kind = group_kind[grp]
        G_adapt = min(int(group_params[grp, 2]), max_gamma)
        capr = cap[r]
        req[:] = -1
        ctx[:] = 0
        pf[:] = 0
        rem[:] = 0
        generated[:] = 0
        q_steps[:] = 0
        q_acc[:] = 0
        q_tested[:] = 0
        q_last_emit[:] = 0.0
        waiting_pre[:] = False
        hi = ZERO  # slots 0..hi-1 may be occupied
        n_run = ZERO
        clock = 0.0
        next_new = ZERO
        n_pre_wait = ZERO
        admit_counter = 0
        pool_acc = 0.0
        pool_tested = 0.0
        n_dec_start = ZERO  # running slots decoding at the next step's start
        while True:
            if n_run == 0 and n_pre_wait == 0:
                if next_new >= n_req[r]:
                    break
                clock = max(clock, arrival_ms[r, next_new])  # idle: jump to the next arrival
            # 1. the policy's gamma from the state at the step's start
            gamma = ZERO
            if speculative:
                if kind == POLICY_TABLE:
                    gamma = group_table[grp, n_run]
                else:
                    n0 = ZERO
                    C0 = ZERO
                    for c in range(hi):
                        dec[c] = (req[c] >= 0) & (pf[c] == 0)
                        if dec[c]:
                            n0 += 1
                            C0 += ctx[c]
                    gamma = _adaptive_gamma(pt, d, group_params[grp], G_adapt, n0, C0, ctx, dec,
                                            hi, s_acc, s_tested, pool_acc, pool_tested, tokens)
                gamma = min(max(gamma, 0), max_gamma)
            start = clock
            preempted_any = False
            prefill_only = False
            if prefill_first:
                prefill_only = _head_fits(arrival_ms, prompt, r, n_req[r], next_new, n_pre_wait,
                                          waiting_pre, generated, start, n_run, M, budget_tokens,
                                          req, ctx, hi, bs, shift, capr)
            # 2. schedule the running sequences; preempt the latest admitted until KV fits
            while True:
                n_dec = n_dec_start  # running slots with their prompt done (counted last step)
                if prefill_only:  # the running sequences wait for the prompts
                    n_dec = ZERO
                g = min(gamma, max(budget_tokens // max(n_dec, 1) - 1, 0))
                if is_tree and gamma > 0:  # N positions per sequence, or no speculation
                    g = gamma if n_dec * row_tokens <= budget_tokens else 0
                if prefill_only:
                    g = ZERO
                per_seq = row_tokens if is_tree and g > 0 else g + 1  # positions per sequence
                left = budget_tokens - n_dec * per_seq
                before = 0
                demand = 0
                C_dec = ZERO
                P = ZERO
                Ntok = ZERO
                Cp = ZERO
                Lp = ZERO
                for c in range(hi):
                    chunk[c] = 0
                    dec[c] = (req[c] >= 0) & (pf[c] == 0) & (not prefill_only)
                    if req[c] < 0:
                        continue
                    if dec[c]:
                        demand += _blocks(ctx[c] + per_seq, bs, shift)
                        C_dec += ctx[c]
                    else:
                        x = max(min(pf[c], left - before), 0)
                        chunk[c] = x
                        before += pf[c]
                        demand += _blocks(ctx[c] + x, bs, shift)
                        if x > 0:
                            P += 1
                            Ntok += x
                            Cp += ctx[c]
                            Lp += pf[c] == x
                if demand <= capr:
                    break
                victim, latest = -1, -1
                for c in range(hi):
                    if req[c] >= 0 and admit_seq[c] > latest:
                        victim, latest = c, admit_seq[c]
                q = req[victim]
                waiting_pre[q] = True
                n_pre_wait += 1
                preemptions[r, q] += 1
                generated[q] = output[r, q] - rem[victim]
                q_steps[q] = s_steps[victim]
                q_acc[q] = s_acc[victim]
                q_tested[q] = s_tested[victim]
                q_last_emit[q] = last_emit[victim]
                req[victim] = -1
                rem[victim] = 0
                pf[victim] = 0
                ctx[victim] = 0
                n_run -= 1
                n_dec_start -= dec[victim]
                preempted_any = True
            left -= Ntok
            # 3. admit waiting requests first come, first served (preempted ones first)
            if not preempted_any and (prefill_only or not prefill_first):
                while left > 0 and n_run < M:
                    pre = n_pre_wait > 0
                    if pre:
                        h = 0
                        while not waiting_pre[h]:
                            h += 1
                    else:
                        h = next_new
                        if h >= n_req[r] or arrival_ms[r, h] > start:
                            break
                    need = prompt[r, h] + generated[h]
                    take = min(need, left)
                    if prefill_only and take < need:  # whole prompts only
                        break
                    blocks = _blocks(take, bs, shift)
                    if demand + blocks > capr:
                        break
                    c = 0
                    while c < hi and req[c] >= 0:
                        c += 1
                    if c == hi:
                        hi += 1
                    req[c] = h
                    ctx[c] = 0
                    pf[c] = need
                    rem[c] = output[r, h] - generated[h]
                    log_alpha = np.log(alpha[r, h])
                    for i in range(G1):
                        s_thr[c, i] = np.exp(positions[i] * log_alpha)
                    s_key[c] = key[r, h]
                    s_steps[c] = q_steps[h]
                    s_acc[c] = q_acc[h]
                    s_tested[c] = q_tested[h]
                    last_emit[c] = q_last_emit[h]
                    admit_seq[c] = admit_counter
                    admit_counter += 1
                    dec[c] = False
                    chunk[c] = take
                    n_run += 1
                    if np.isnan(first_sched[r, h]):
                        first_sched[r, h] = start * 1e-3
                    if pre:
                        waiting_pre[h] = False
                        n_pre_wait -= 1
                    else:
                        next_new += 1
                    left -= take
                    demand += blocks
                    P += 1
                    Ntok += take
                    Lp += need == take  # its ctx is 0
            # 4. the step's time
            bad_g = -1 if step_fits(pt, d, n_dec, C_dec, g) else g
            tree_step = tree_dep and g > 0
            if tree_step:
                bad_g = tree_step_fits(pt, d, n_dec, C_dec, g)
            if bad_g >= 0:
                error[r, 0] = 1
                error[r, 1] = n_dec
                error[r, 2] = C_dec
                error[r, 3] = bad_g
                break
            if tree_step:
                target, draft = tree_decode_ms(pt, d, n_dec, C_dec)
            else:
                target, draft = _price(pt, d, n_dec, C_dec, g, ctx, dec, hi)
            # (without chunks the extra is exactly 0: the same pass twice; a prefill-free
            # deployment's chunks cost nothing, step_prices.pack_prices)
            if P > 0 and pt.eng[d, E_PREFILL_FREE] == 0.0:
                g_pass = int(pt.eng[d, E_TREE_TOKENS]) - 1 if tree_step else g  # its positions
                target += prefill_extra_ms(pt, d, n_dec, g_pass, C_dec, P, Ntok, Cp, Lp)
            step_ms = target + draft  # (the numpy engine's order of the sums)
            end = start + step_ms
            # 5. outcomes: decoding sequences commit K + 1 tokens, completed prompts one;
            # then the statistics and finished requests leave (one scan)
            blocks_used = 0
            n_sched = n_run
            n_dec_start = ZERO
            gap_seen, bin_seen = -1.0, 0  # most slots emitted at the same time: one bin lookup
            bin_count = 0.0  # gaps in bin_seen not yet added to the histogram
            acc_step = 0
            for c in range(hi):
                if req[c] < 0:
                    continue
                if dec[c]:
                    k = 0
                    if g > 0:
                        u = uniform_one(s_key[c], s_steps[c])
                        if is_tree:  # the depth from the tree's survival (all of its depth)
                            q = req[c]
                            for i in range(tree_thr.shape[2]):
                                if u < tree_thr[r, q, i]:
                                    k += 1
                        else:
                            while k < g and u <= s_thr[c, k]:
                                k += 1
                    commit = min(k + 1, rem[c])
                    if g > 0:
                        s_steps[c] += 1
                        s_acc[c] += k
                        t = k + (1 if k < g else 0)
                        s_tested[c] += t
                        acc_step += k
                        pool_tested += t
                    ctx[c] += commit
                    rem[c] -= commit
                    gap = end - last_emit[c]
                    if gap != gap_seen:
                        itl[r, bin_seen] += bin_count
                        gap_seen, bin_seen = gap, _itl_bin(edges, gap, itl_lo, itl_scale)
                        bin_count = 0.0
                    bin_count += 1.0
                    last_emit[c] = end
                elif chunk[c] > 0:
                    ctx[c] += chunk[c]
                    pf[c] -= chunk[c]
                    if pf[c] == 0:
                        q = req[c]
                        if generated[q] == 0:  # its first token (else a recompute's next one)
                            first_token[r, q] = end * 1e-3
                        else:
                            itl[r, _itl_bin(edges, end - last_emit[c], itl_lo, itl_scale)] += 1.0
                        last_emit[c] = end
                        rem[c] -= 1
                        ctx[c] += 1
                blocks_used += _blocks(ctx[c], bs, shift)
                if rem[c] > 0:
                    n_dec_start += pf[c] == 0
                else:
                    q = req[c]
                    finish[r, q] = end * 1e-3
                    if closed[r] and released[r] < n_req[r]:  # its client's next request
                        arrival_ms[r, released[r]] = end
                        released[r] += 1
                    generated[q] = output[r, q]
                    q_steps[q] = s_steps[c]
                    q_acc[q] = s_acc[c]
                    q_tested[q] = s_tested[c]
                    q_last_emit[q] = last_emit[c]
                    req[c] = -1
                    rem[c] = 0
                    pf[c] = 0
                    ctx[c] = 0
                    n_run -= 1
            itl[r, bin_seen] += bin_count
            pool_acc += acc_step
            stats[r, S_ACC] += acc_step
            stats[r, S_PROP] += (row_tokens - 1 if is_tree and g > 0 else g) * n_dec
            stats[r, S_STEPS] += 1
            stats[r, S_BUSY] += step_ms
            stats[r, S_RUN] += step_ms * n_sched
            stats[r, S_SLOTS] += n_sched
            stats[r, S_KV] += step_ms * min(blocks_used, capr) / capr
            if n_dec > 0:
                gamma_steps[r, g] += 1
            clock = end
            while hi > 0 and req[hi - 1] < 0:
                hi -= 1
