"""The routed experts of a mixed pass inside the compiled serving loop (step_prices.mixed_ms).

A MoE layer's routed-expert GEMMs are priced as roofline.pass_components_s and
src/costmodel/prefill.py `_mixed_ms` price them: the pass's T tokens in R runs (each decoding
sequence's t positions, each prompt chunk) touch D experts (moe.py distinct_experts_of_draws,
first = R, later = T - R), each GEMM runs T k / D rows per touched expert, and the layer waits for
D experts (TP over the expert FFN) or for the slowest GPU's count (EP: slowest_gpu_experts), its
wave quantisation counting the tiles of the whole group. The rows are fractional, so the price is
computed per step from each expert GEMM's roofline coefficients (pack_moe) instead of looked up
by token count as the other GEMMs are.
"""
from __future__ import annotations

import numpy as np

from src.compiled_cache import compiled_callee  # (before the first njit: the cache's stamp)
from src.costmodel.roofline import SMALL_GEMM_MAX_ROWS

# per-network scalars (row of PriceTables.moe)
M_PRESENT, M_E, M_K, M_RHO, M_EP, M_TILE, M_SMS, M_P = range(8)
N_MOE = 8
# per-GEMM coefficients (PriceTables.moe_gemm[..., g, :])
G_EXPERT, G_WEIGHT, G_WEIGHT_SMALL, G_MEM_TOKEN, G_COMP_TOKEN, G_N = range(6)
N_MOE_GEMM = 6
SMALL_ROWS = float(SMALL_GEMM_MAX_ROWS)


def pack_moe(c, G: int):
    """(moe [N_MOE], moe_gemm [G, N_MOE_GEMM]) of one network's PassCoefficients (zeros where
    it has no routed experts)."""
    row, gem = np.zeros(N_MOE), np.zeros((G, N_MOE_GEMM))
    if c is None or c.moe is None:
        return row, gem
    m = c.moe
    row[:] = (1.0, m.n_experts, m.top_k, m.locality, m.ep, c.gemm_wave_tile, c.sm_count,
              c.sharpness_p)
    n = len(c.gemm_weight_s)
    small = c.gemm_weight_s if c.gemm_weight_small_s is None else c.gemm_weight_small_s
    gem[:n, G_EXPERT] = np.asarray(c.gemm_expert_mask, float)
    gem[:n, G_WEIGHT] = c.gemm_weight_s
    gem[:n, G_WEIGHT_SMALL] = small
    gem[:n, G_MEM_TOKEN] = c.gemm_mem_per_token_s
    gem[:n, G_COMP_TOKEN] = c.gemm_compute_per_token_s
    gem[:n, G_N] = c.gemm_n
    return row, gem


@compiled_callee
def slowest_gpu_experts(E, ep, D):
    """variants.slowest_gpu_experts of one D: sum_j (1 - F(j)^ep), F the CDF of
    Binomial(E / ep, D / E) (its pmf by the ratio recursion)."""
    n = int(E) // int(ep)
    p = min(max(D / E, 0.0), 1.0)
    if p <= 0.0:
        return 0.0
    if p >= 1.0:
        return float(n)
    pmf = np.exp(n * np.log1p(-p))
    ratio = p / (1.0 - p)
    cdf = 0.0
    total = 0.0
    for j in range(n):
        cdf += pmf
        total += 1.0 - min(cdf, 1.0) ** ep
        pmf *= (n - j) / (j + 1.0) * ratio
    return total


@compiled_callee
def routed_rows_wait(mo, runs, T):
    """(rows per touched expert, experts waited for) of a pass of T tokens in `runs` runs."""
    if T <= 0.0 or runs <= 0.0:
        return 0.0, 0.0
    E, k, rho = mo[M_E], mo[M_K], mo[M_RHO]
    later = max(T - runs, 0.0)
    log_u = runs * np.log1p(-k / E) if k < E else -np.inf
    q = k * (1.0 - rho) / E
    if later > 0.0:
        log_u += later * np.log1p(-q) if q < 1.0 else -np.inf
    D = E * -np.expm1(log_u)
    if D <= 0.0:
        return 0.0, 0.0
    rows = T * k / D
    wait = D if mo[M_EP] <= 1.0 else slowest_gpu_experts(E, mo[M_EP], D)
    return rows, wait


@compiled_callee
def routed_gemm_s(mo, mg, rows, wait):
    """s of one routed-expert GEMM (coefficients mg) at `rows` rows per touched expert over
    `wait` experts: gemm_terms_s (grouped, the group's waves) x the multiplicity, p-normed."""
    if wait <= 0.0:
        return 0.0
    weight = mg[G_WEIGHT_SMALL] if rows <= SMALL_ROWS else mg[G_WEIGHT]
    memory = weight + mg[G_MEM_TOKEN] * rows
    compute = mg[G_COMP_TOKEN] * rows
    tile = mo[M_TILE]
    if tile > 0:
        tiles = np.ceil(rows / tile) * np.ceil(mg[G_N] / tile) * max(wait, 1.0)
        if tiles > 0:
            sms = mo[M_SMS]
            compute = compute * (np.ceil(tiles / sms) * sms / max(tiles, 1.0))
    memory, compute = memory * wait, compute * wait
    p = mo[M_P]
    return (memory**p + compute**p) ** (1.0 / p)
