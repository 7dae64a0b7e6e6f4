"""recommend with an MTP draft: the checkpoint's MTP depth (config.json num_nextn_predict_layers,
ModelSpec.mtp_layers), the acceptance of positions past it and what recommend prints about them.

Engines run an MTP draft deeper than the checkpoint by reusing its modules autoregressively:
vLLM's SpeculativeConfig (vllm/config/speculative.py at commit 002e77c1, the `n_predict` check)
takes num_speculative_tokens <= n_predict or a multiple of it ("Ensure divisibility for MTP module
reuse") and raises ValueError otherwise; SGLang runs DeepSeek's NextN layer through its EAGLE
worker for any --speculative-num-steps (PR #3582). Past the depth, acceptance is
src/acceptance.py's reuse rule (a guess fitted to DeepSeek-V3's figures), so every K or
--max-gamma hint past it says so and points to measurement.
"""
from __future__ import annotations

import numpy as np

from src.acceptance import MTP_REUSE_DECAY, hazard_profile, mean_hazard, mtp_position_rates
from src.config import ConfigError, PerPositionAlpha

# vLLM's per-position counters (vllm/v1/spec_decode/metrics.py, SpecDecodingProm, read at commit
# 016a8587; Prometheus adds _total): accepted tokens at draft position i (label position="i") and
# the number of drafts, whose ratio its docstring gives as the per-position acceptance vector
PER_POSITION_METRIC = "vllm:spec_decode_num_accepted_tokens_per_pos"
DRAFTS_METRIC = "vllm:spec_decode_num_drafts"


def mtp_layers(cfg) -> int | None:
    """The target checkpoint's MTP depth when the draft is its MTP module, else None."""
    from src.costmodel import load_presets
    from src.hardware.moe_report import draft_kind
    sc = cfg.scenario
    models = load_presets().models
    if sc.draft == "ngram" or draft_kind(sc.draft, models) != "mtp":
        return None
    return int(models[sc.target_model_id].mtp_layers)


def position_rates(cfg) -> np.ndarray | None:
    """a_1..a_max_gamma by the reuse rule where max_gamma passes the MTP depth, else None."""
    depth = mtp_layers(cfg)
    if depth is None or cfg.max_gamma <= depth:
        return None
    return mtp_position_rates(cfg.alpha.value, depth, cfg.max_gamma)


def steady_acceptance(cfg) -> tuple[np.ndarray, np.ndarray | None]:
    """(alphas, hazard profile) for steady_state_gammas: the point alpha, i.i.d.; for an MTP draft
    past its depth the representative rate exp(-Cbar) and profile D of the reuse rule's rates
    (src/acceptance.py, so that 1 + sum_i alpha^(D_i) = 1 + sum_i prod_{j <= i} a_j)."""
    rates = position_rates(cfg)
    if rates is None:
        return np.array([cfg.alpha.value]), None
    return np.array([np.exp(-mean_hazard(rates))]), hazard_profile(rates, cfg.max_gamma)


def serving_alpha(cfg):
    """cfg.alpha for the serving simulation: the reuse rule's rates as a per-position mode where
    they apply (every request the same: spread 0), else the point alpha."""
    rates = position_rates(cfg)
    if rates is None:
        return cfg.alpha
    return PerPositionAlpha(tuple(float(a) for a in rates),
                            source=f"MTP reuse rule, decay {MTP_REUSE_DECAY:g}")


def check_max_gamma(cfg, explicit: bool) -> None:
    """An explicit --max-gamma past the MTP depth: allowed (depth_notes warns) where the engine
    reuses the layers (any K for a depth of 1, as DeepSeek-V3's), refused under a vLLM profile
    where vLLM cannot run it (above n_predict, it takes num_speculative_tokens only as a multiple
    of it)."""
    depth = mtp_layers(cfg)
    if not explicit or depth is None:
        return
    g = cfg.max_gamma
    if g > depth and g % depth and cfg.engine_profile.startswith("vllm"):
        raise ConfigError("--max-gamma", f"{g} drafts from a checkpoint with {depth} MTP layers: "
                                         "vLLM reuses them only in whole passes "
                                         "(num_speculative_tokens a multiple of "
                                         "num_nextn_predict_layers, vllm/config/speculative.py); "
                                         f"allowed: 1..{depth} or a multiple of {depth}")


def allowed_gamma_mask(cfg) -> np.ndarray:
    """[max_gamma + 1] whether vLLM takes each gamma for this draft (all True but for an MTP
    checkpoint deeper than 1 under a vLLM profile: gamma <= depth or a multiple of it)."""
    g = np.arange(cfg.max_gamma + 1)
    depth = mtp_layers(cfg)
    if depth is None or depth == 1 or not cfg.engine_profile.startswith("vllm"):
        return np.ones(g.size, bool)
    return (g <= depth) | (g % depth == 0)


def depth_notes(cfg, k: int, sglang_gamma: int, hint: bool, explicit: bool) -> list[str]:
    """One line each where an explicit --max-gamma, the printed K or a --max-gamma hint passes
    the MTP depth."""
    depth = mtp_layers(cfg)
    if depth is None:
        return []
    layer = f"{depth} MTP layer" + ("s" if depth > 1 else "")
    lines = []
    if explicit and cfg.max_gamma > depth:
        lines.append(f"  MTP depth: --max-gamma {cfg.max_gamma} asks past the checkpoint's "
                     f"{layer}: allowed, as the engines reuse it, but the gammas past {depth} are "
                     "priced with the reuse rule's acceptance, not a measured one.")
    if k > depth:
        lines.append("  " + reuse_line(
            depth, k, f"K {k} (vLLM num_speculative_tokens; SGLang --speculative-num-steps "
                      f"{sglang_gamma})",
            f"is not the {cfg.alpha.value:g} asked but modelled to fall x{MTP_REUSE_DECAY:g} per "
            "reused position"))
    if hint and cfg.max_gamma >= depth:
        lines.append(
            f"  MTP depth: a --max-gamma above {depth} adds only reused MTP positions, whose "
            "acceptance here is the decay rule's guess: raise it on per-position rates measured "
            f"on the engine ({PER_POSITION_METRIC}), not on this hint.")
    return lines


def reuse_line(depth: int, k: int, what: str, acceptance: str, verb: str = "passes") -> str:
    """The one line recommend and serve print where `what` drafts K `k` past an MTP depth:
    the layer is reused, the reused positions' acceptance (`acceptance`, the clause after
    'whose acceptance'), and where to measure it."""
    layer = f"{depth} MTP layer" + ("s" if depth > 1 else "")
    return (f"MTP depth: {what} {verb} the checkpoint's {layer} (num_nextn_predict_layers "
            f"{depth}): vLLM and SGLang reuse it for drafts {depth + 1}-{k}, whose acceptance "
            f"{acceptance} (design.md, 'MTP depth'); measure it per position "
            f"({PER_POSITION_METRIC} / {DRAFTS_METRIC}) and give it to serve "
            "--acceptance-from-vllm.")


def policy_max_k(policy, max_gamma: int) -> int:
    """The largest K a serve policy (src/online/policies.py, sglang_adaptive.py) can draft."""
    if not getattr(policy, "speculative", False):
        return 0
    if hasattr(policy, "ranges"):  # BatchSchedule
        return min(max(k for *_, k in policy.ranges), policy.num_speculative_tokens)
    if getattr(policy, "table", None):  # SGLangAdaptive, resolved
        return int(max(policy.table))
    if hasattr(policy, "gamma"):  # FixedGamma, OffAbove, FixedTree (its S draft passes)
        return int(policy.gamma)
    return max_gamma  # Adaptive, and anything else up to --max-gamma


def serve_notes(cfg, policies) -> list[str]:
    """serve's line where a policy drafts past the checkpoint's MTP depth (recommend's line, with
    the acceptance this run takes: the scenario's mode, as written)."""
    depth = mtp_layers(cfg)
    if depth is None:
        return []
    over = [(p.name, policy_max_k(p, cfg.max_gamma)) for p in policies]
    over = [(name, k) for name, k in over if k > depth]
    if not over:
        return []
    what = ("policy " if len(over) == 1 else "policies ") + ", ".join(f"{name} (K {k})"
                                                                    for name, k in over)
    return [reuse_line(depth, max(k for _, k in over), what,
                       f"falls by the reuse rule's guess x{MTP_REUSE_DECAY:g} per reused position "
                       f"while this run takes acceptance mode '{cfg.alpha_mode}' as written",
                       "passes" if len(over) == 1 else "pass")]


def tree_notes(cfg) -> list[str]:
    """One line under the token-tree table of an MTP draft: its acceptance model (Sequoia's, a
    top-1 rate at every depth) has no reuse decay, so its steps past the depth are upper bounds."""
    depth = mtp_layers(cfg)
    if depth is None:
        return []
    return [f"  MTP depth: these shapes take the top-1 rate {cfg.alpha.value:g} at every depth, "
            f"without the reuse decay above: --speculative-num-steps past {depth} reuses the MTP "
            "layer, so their speedups are upper bounds until per-position rates are measured."]


def acceptance_assumption(cfg) -> str | None:
    """The Assumptions line on acceptance where the reuse rule applies, else None (the i.i.d.
    line)."""
    depth = mtp_layers(cfg)
    if position_rates(cfg) is None:
        return None
    return (f"  - acceptance: {cfg.alpha.value:g} per token at the checkpoint's {depth} MTP "
            f"position{'s' if depth > 1 else ''}; each reused position past it x"
            f"{MTP_REUSE_DECAY:g} the one before (a_i = {cfg.alpha.value:g} x "
            f"{MTP_REUSE_DECAY:g}^(i - {depth}), fitted to DeepSeek-V3's report and the nebius "
            "MTP model card: design.md, 'MTP depth')")
