"""Mixed passes (src/costmodel/prefill.py) agree with the cost model's own decode and prefill
passes, under every engine profile; the prefill cost against the H200 prefill measurements in
the repository (measurements/h200-2026-11-29) and, where present, another H200 session's beside
the project (../shared/calibration/h200)."""
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from src.costmodel import HardwareCostModel, load_engine_profiles
from src.costmodel.prefill import mixed_pass_physics_ms
from src.online.steptime import StepTimer

PROFILES = sorted(load_engine_profiles())


@pytest.mark.parametrize("engine", PROFILES)
@pytest.mark.parametrize("gpu", ["h100-sxm", "h200"])
def test_decode_only_and_prefill_only_passes_match_the_cost_model(engine, gpu):
    cost = HardwareCostModel.from_presets(gpu, "llama-3.1-8b", draft="llama-3.2-1b", engine=engine)
    active = np.ones((3, 16), bool)
    active[1, 5:] = False
    ctx = np.full((3, 16), 1500)
    g = np.array([0, 3, 5])
    physics, _ = cost.target_pass_parts(active, g + 1, ctx)
    n = active.sum(axis=1)
    mixed = mixed_pass_physics_ms(cost._target_c, n, g + 1, (ctx * active).sum(axis=1))
    np.testing.assert_allclose(mixed, physics, rtol=1e-9)
    prompts, tokens, cached = np.array([1, 4, 8]), np.array([512, 256, 2048]), np.array([0, 0, 512])
    physics, _ = cost.prefill_parts(prompts, tokens, cached)
    mixed = mixed_pass_physics_ms(cost._target_c, 0, 1, 0, prompts, prompts * tokens,
                                  prompts * cached, prompts)
    np.testing.assert_allclose(mixed, physics, rtol=1e-9)


@pytest.mark.parametrize("gpu,target,tp,ep", [
    ("h100-sxm", "qwen3-30b-a3b", 1, 1),
    ("h200", "gpt-oss-120b", 1, 1),
    ("h200", "gpt-oss-120b", 4, 4),  # EP: the layer waits for the slowest GPU's experts
    ("h200", "deepseek-v3", 8, 1),
])
def test_moe_mixed_passes_route_their_tokens_as_the_cost_model(gpu, target, tp, ep):
    """A MoE target's mixed pass routes every token over the experts (D touched experts, T k / D
    rows each) as pass_components_s does: its decode-only and prefill-only passes are the cost
    model's, and a prompt costs more than one expert's GEMM over its T rows would."""
    cost = HardwareCostModel.from_presets(gpu, target, draft="ngram", engine="vllm-v1", tp=tp,
                                          ep=ep)
    c = cost._target_c
    active = np.ones((3, 32), bool)
    active[1, 3:] = False
    ctx = np.full((3, 32), 1500)
    g = np.array([0, 3, 0])
    physics, _ = cost.target_pass_parts(active, g + 1, ctx)
    n = active.sum(axis=1)
    mixed = mixed_pass_physics_ms(c, n, g + 1, (ctx * active).sum(axis=1))
    np.testing.assert_allclose(mixed, physics, rtol=1e-9)
    prompts, tokens, cached = np.array([1, 2, 1]), np.array([921, 4000, 7372]), np.array([0, 0, 0])
    physics, _ = cost.prefill_parts(prompts, tokens, cached)
    mixed = mixed_pass_physics_ms(c, 0, 1, 0, prompts, prompts * tokens, prompts * cached,
                                  prompts)
    np.testing.assert_allclose(mixed, physics, rtol=1e-9)
    from dataclasses import replace
    one_expert = mixed_pass_physics_ms(replace(c, moe=None), 0, 1, 0, prompts, prompts * tokens,
                                       prompts * cached, prompts)
    assert np.all(mixed > one_expert)


def test_chunks_add_to_a_decode_step_less_than_alone():
    """A prefill chunk inside a decode step costs less than the same chunk as its own pass (the
    weights are read once) and more than nothing."""
    cost = HardwareCostModel.from_presets("h100-sxm", "llama-3.1-8b", draft="ngram", engine="ideal")
    timer = StepTimer(cost, speculative=False)
    extra = timer.prefill_extra_ms(np.array([32]), np.array([0]), np.array([32 * 800]),
                                   np.array([1]), np.array([512]), np.array([0]), np.array([1]))
    alone = timer.prefill_ms(1, 512)
    assert 0 < extra[0] < alone


REPO = Path(__file__).resolve().parents[1]
FITTED_SESSION = REPO / "measurements" / "h200-2026-11-29" / "prefill_times_ms.csv"
OTHER_SESSION = REPO.parent / "shared" / "calibration" / "h200" / "h200_prefill_times_ms.csv"


@pytest.mark.parametrize("path", [
    FITTED_SESSION,  # the session the H200 calibration is fitted to (its prefill rows: not fitted)
    pytest.param(OTHER_SESSION, marks=pytest.mark.skipif(
        not OTHER_SESSION.is_file(),
        reason="independent check: another H200 session's measurements in "
               "../shared/calibration/h200, which are not in the repository, are absent"))],
    ids=["repository-session", "independent-session"])
@pytest.mark.skipif("pytorch-graphs" not in PROFILES,
                    reason="needs the pytorch-graphs engine profile (the measured implementation)")
def test_prefill_against_h200_measurements(path):
    """Prompt prefill of Llama-3.1-8B and Llama-3.2-1B on an H200 (16-16384 tokens, batch 1-16),
    the faster attention kernel per configuration: median error <= 10%, worst <= 25%."""
    data = pd.read_csv(path)
    data = data.groupby(["model", "batch", "positions"], as_index=False).median_ms.min()
    errors = []
    for model, rows in data.groupby("model"):
        cost = HardwareCostModel.from_presets("h200", model, draft="ngram",
                                              engine="pytorch-graphs")
        timer = StepTimer(cost, speculative=False)
        pred = np.array([timer.prefill_ms(b, n) for b, n in zip(rows.batch, rows.positions)])
        errors.append(np.abs(pred / rows.median_ms.to_numpy() - 1))
    errors = np.concatenate(errors)
    assert np.median(errors) <= 0.10 and errors.max() <= 0.25, (np.median(errors), errors.max())
