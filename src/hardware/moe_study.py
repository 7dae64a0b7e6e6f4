"""The MoE study: each MoE scenario's steady state by batch size, against a dense twin.

For every committed MoE scenario (configs/scenarios/moe-*.toml) and its first engine profile, at
the scenario's mean context (prompt + half the output), for every batch size B and gamma g of its
grid (steady state: src/hardware/steady_state.py, MagicDec eq. 2):

    speedup(B, g)      = Omega_eff(g) T_AR(B) / (g T_D(B) + T_V(B, g))
    premium(B, g)      = T_V(B, g) / T_AR(B)      the verification premium: a pass of B (g + 1)
                                                  tokens against a decode pass of B tokens
    experts touched    = D(B, t) / E per MoE layer, t = 1 (decode) or g + 1 (verification),
                         D from the preset's routing model (src/costmodel/moe.py)

and the same for the scenario's dense twin: the target with only its k routed experts (E = k), so
it has the same active parameters per token (the router shrinks to h x k), attention, formats,
kernels and draft, and no experts-touched growth. Its premium is a dense model's ~1 at small
batch; the MoE's is larger by the expert bytes the extra tokens read. A scenario file is an
ordinary scenario (`python run.py --scenario FILE` simulates it); this module adds the closed-form
comparison the MoE questions need.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from src.hardware import steady_state
from src.hardware.scenario import SCENARIOS_DIR, Scenario, load_scenario
from src.hardware.study import mean_tokens
from src.metrics import best_gamma
from src.workload import acceptance_profile, sample_alpha, stream

MOE_SCENARIO_GLOB = "moe-*.toml"
OMEGA_DRAWS = 20_000  # alphas drawn per quality mode for Omega_eff (as the hardware study)


def moe_scenario_paths(folder: Path = SCENARIOS_DIR) -> list[Path]:
    """The committed MoE scenario files, in name order."""
    return sorted(folder.glob(MOE_SCENARIO_GLOB))


def dense_twin(spec):
    """A dense model of the same active size: the target with only its k routed experts (E = k,
    src/costmodel/shapes.py dense_equivalent), so every token goes through the same k experts and
    the shared ones - the same FFN width, formats and kernels, the same attention, vocabulary and
    MTP module - and every pass reads exactly k experts per layer, whatever its tokens."""
    from src.costmodel.shapes import dense_equivalent
    return replace(dense_equivalent(spec), model_id=f"{spec.model_id}-dense-twin",
                   mtp_layers=spec.mtp_layers)


def experts_touched_fraction(spec, batch, tokens_per_seq):
    """D / E: expected fraction of the routed experts one MoE layer reads in a pass of `batch`
    sequences x `tokens_per_seq` tokens (0 for a dense model)."""
    if not spec.n_routed_experts:
        return np.zeros(np.shape(batch))
    from src.costmodel.moe import expected_distinct_experts, routing_locality
    rho = routing_locality(spec.routing, spec.routing_locality_fraction)
    return expected_distinct_experts(spec.n_routed_experts, spec.experts_per_token, batch,
                                     tokens_per_seq, rho) / spec.n_routed_experts


@dataclass(frozen=True)
class MoeStudy:
    scenario: Scenario
    engine: str
    context_tokens: int
    rows: pd.DataFrame  # one row per (target, quality mode, batch, gamma)
    best: pd.DataFrame  # the best gamma per (target, quality mode, batch)
    other_engines: pd.DataFrame  # best gamma per (engine, quality mode, batch), MoE target only
    kernels_label: str = ""  # what priced the MoE target's passes (kernels_label below)


def kernels_label(cost) -> str:
    """Which of the target's kernels come from measured tables (src/kernels/ with_kernels), e.g.
    'measured tables of vLLM 0.24.0 (h200_sxm), aiconfigurator-core 0.12.0: GEMMs, MoE layers;
    decode attention from the refitted roofline'."""
    from src.kernels.sources import package_version

    gemms, attention = cost.kernels, cost.attention_kernels
    if gemms is None and attention is None:
        return "the refitted roofline (no measured table for this engine and GPU)"
    src = (gemms or attention).kernels.src
    parts = {"GEMMs": gemms is not None and gemms.applies,
             "MoE layers": gemms is not None and gemms.moe is not None,
             "decode attention": attention is not None}
    measured = [k for k, v in parts.items() if v]
    roofline = [k for k, v in parts.items() if not v]
    return (f"measured tables of {src.label}, aiconfigurator-core {package_version()}: "
            f"{', '.join(measured) or 'none'}"
            + (f"; {', '.join(roofline)} from the refitted roofline" if roofline else ""))


def omega_by_gamma(scenario: Scenario) -> dict[str, dict[int, float]]:
    """Omega_eff per quality mode and gamma, from the scenario's own seeded streams."""
    cfg = scenario.study
    out = {}
    for m in cfg.quality_modes:
        alphas = sample_alpha(stream(cfg.seed, "omega", m), cfg.alpha_modes[m], (OMEGA_DRAWS,))
        profile = acceptance_profile(cfg.alpha_modes[m])
        out[m] = {g: steady_state.effective_tokens_per_step(alphas, g, profile)
                  for g in cfg.gammas}
    return out


def run_moe_scenario(scenario: Scenario) -> MoeStudy:
    """The closed-form comparison of the module docstring for one scenario."""
    cfg = scenario.study
    engine = scenario.engine_profiles[0]
    cost = scenario.cost_model(engine)
    # the twin prices its own network: the target's measured kernels (keyed on the MoE target's
    # shapes, src/kernels/) are dropped and rebuilt for the twin, as the scenario builds them
    from src.kernels.costmodel import with_kernels

    twin = with_kernels(replace(cost, target=dense_twin(cost.target), kernels=None,
                                attention_kernels=None), scenario.kernels, strict=False)
    ctx = int(round(mean_tokens(cfg.seed, cfg.prompt_len) + mean_tokens(cfg.seed, cfg.output_len)
                    / 2))
    omega = omega_by_gamma(scenario)
    parts = []
    for label, model in (("moe", cost), ("dense twin", twin)):
        times = steady_state.step_times_ms(model, cfg.batch_sizes, cfg.gammas, ctx)
        spec = model.target
        times["experts_decode_fraction"] = experts_touched_fraction(spec, times.batch_size, 1)
        times["experts_verify_fraction"] = experts_touched_fraction(spec, times.batch_size,
                                                                    times.gamma + 1)
        times["premium"] = times.t_verify_ms / times.t_ar_ms
        for m in cfg.quality_modes:
            t = times.assign(target=label, quality_mode=m)
            t["speedup"] = steady_state.steady_state_speedups(t, omega[m])
            parts.append(t)
    rows = pd.concat(parts, ignore_index=True)
    rows.insert(0, "scenario", scenario.name)
    rows.insert(1, "engine_profile", engine)
    best = best_gamma(rows, ["scenario", "target", "quality_mode", "batch_size"])
    others = []
    for other in scenario.engine_profiles[1:]:
        times = steady_state.step_times_ms(scenario.cost_model(other), cfg.batch_sizes,
                                           cfg.gammas, ctx)
        for m in cfg.quality_modes:
            t = times.assign(engine_profile=other, quality_mode=m)
            t["speedup"] = steady_state.steady_state_speedups(t, omega[m])
            others.append(best_gamma(t, ["engine_profile", "quality_mode", "batch_size"]))
    other_best = (pd.concat(others, ignore_index=True) if others
                  else pd.DataFrame(columns=["engine_profile", "quality_mode", "batch_size"]))
    return MoeStudy(scenario, engine, ctx, rows, best.reset_index(drop=True), other_best,
                    kernels_label(cost))


def run_moe_study(paths=None) -> list[MoeStudy]:
    """Every MoE scenario (default: the committed ones)."""
    return [run_moe_scenario(load_scenario(str(p))) for p in (paths or moe_scenario_paths())]
