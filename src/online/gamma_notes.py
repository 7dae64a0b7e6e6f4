"""recommend's notes under its table: what the gamma schedule was optimised for, why its gamma
rises with batch size where it does (the step of the cost model behind it, at the batch where the
step lies), and a flag where the best gamma sits at --max-gamma."""
from __future__ import annotations

import numpy as np

from src.gamma_rule import rises, tops_out


def schedule_notes(cfg, gammas, best, context: int, tolerance: float, simulated: bool) -> list:
    """What the schedule was optimised for, where its gamma rises with batch size and why, and a
    flag where the best gamma sits at --max-gamma (the optimum may lie above it)."""
    workload = (f"the {cfg.workload} workload's mean context, {context} tokens (prompt plus half "
                "the output)" if simulated else f"{context} tokens of context")
    lines = [f"Schedule optimised for: the steady state (every sequence at {workload}; no "
             f"queueing, no prefill), acceptance {cfg.alpha.value:g}; gamma switches only where "
             f"another is modelled faster by more than {tolerance:.0%} (design.md, "
             "'recommend')" + ("; the table above then simulates it under load." if simulated
                               else ".")]
    for b, g0, g1 in rises(gammas):
        start = b - 1
        while start > 1 and gammas[start - 1] == g0:
            start -= 1
        lines.append(f"  gamma rises from {g0} to {g1} at batch {b}: "
                     f"{_rise_reason(cfg, b, g0, g1, start)}")
    if tops_out(best[1:], cfg.max_gamma):
        at = np.nonzero(best[1:] >= cfg.max_gamma)[0] + 1
        more = (f"try --max-gamma {min(2 * cfg.max_gamma, 32)}" if cfg.max_gamma < 32
                else "32 is the largest recommend considers")
        lines.append(f"  The best gamma is --max-gamma {cfg.max_gamma} at batch {at[0]}"
                     + (f" (and at {at.size - 1} more batch size"
                        + ("s" if at.size > 2 else "") + f", up to {at[-1]})" if at.size > 1
                        else "")
                     + f": the optimum may lie above the grid: {more}.")
    return lines


def _rise_reason(cfg, b: int, g0: int, g1: int, start: int = 1) -> str:
    """Why the modelled speedup of gamma g1 overtakes g0's at batch b: where the target pass of
    either gamma (batch x (gamma + 1) tokens) crosses, at a batch from `start` (where g0's range
    begins) up to b, a step of the cost
    model: vLLM's custom all-reduce kernel switch at TP > 1 (src/costmodel/allreduce.py), the
    GEMM regime above 16 rows (the calibrated small-GEMM weight bandwidth, src/costmodel/
    roofline.py `gemm_terms_s`) or a new wave of GEMM output tiles; else a step of the modelled
    kernels in general."""
    from src.costmodel.roofline import SMALL_GEMM_MAX_ROWS
    from src.online.study import deployments
    cost = deployments(cfg)[1].timer.cost
    since = {at: f"; gamma {g1} gains from that step on and is faster by more than the tolerance "
             f"from batch {b}" for at in range(1, b)}  # a step below the rise
    c = getattr(cost, "_target_c", None)
    batches = np.arange(max(start - 1, 1), b + 1)
    for g in (g0, g1):
        tokens = batches * (g + 1)
        ar = getattr(c, "comm_custom", None)
        if cost.tp > 1 and ar is not None:
            algo = ar.algorithm(tokens * c.comm_bytes_per_token)
            switch = np.nonzero(algo[1:] != algo[:-1])[0]
            if switch.size:
                i = int(switch[-1]) + 1
                return (f"at tp {cost.tp} the target pass of gamma {g} switches all-reduce kernel "
                        f"({algo[i - 1]} -> {algo[i]}, vLLM's custom all-reduce) at batch "
                        f"{batches[i]}, {tokens[i]} tokens ({batches[i]} sequences x {g + 1} "
                        "positions), a step in its time" + since.get(batches[i], ""))
        if getattr(c, "gemm_weight_small_s", None) is not None:
            over = np.nonzero((tokens[:-1] <= SMALL_GEMM_MAX_ROWS)
                              & (tokens[1:] > SMALL_GEMM_MAX_ROWS))[0]
            if over.size:
                i = int(over[-1]) + 1
                return (f"at batch {batches[i]} the target pass of gamma {g} grows past "
                        f"{SMALL_GEMM_MAX_ROWS} tokens ({batches[i]} sequences x {g + 1} "
                        f"positions = {tokens[i]}), where the calibrated GEMMs leave their "
                        "small-row regime: a step in its time, not a trend"
                        + since.get(batches[i], ""))
    gemms = getattr(cost, "kernels", None)
    if gemms is not None:  # priced from an engine's measured GEMM rows (src/kernels/)
        return (f"a step in {gemms.label}'s measured GEMM times at this batch size (the engine "
                "switching GEMM kernels between row counts), not a trend")
    return ("a step in the modelled kernel times at this batch size (GEMM wave quantisation or "
            "attention splits), not a trend")
