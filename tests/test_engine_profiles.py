"""Tests of the engine-profile mechanisms of today's engines (src/costmodel.py, EngineProfile):
CPU work overlapped with the GPU, the first draft pass over all verified positions, the n-gram
proposer called once per step, and the vllm-v1 / sglang profiles against published timings."""
from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from src.costmodel import (
    CostModelInputError,
    HardwareCostModel,
    engine_profile,
    load_engine_profiles,
)

ENGINES_TOML = Path(__file__).resolve().parents[1] / "src/presets/engines.toml"


def _cost(engine, draft="llama-3.2-1b", target="llama-3.1-8b", **kw):
    return HardwareCostModel.from_presets("h100-sxm", target, draft=draft, engine=engine, **kw)


def _uniform(S, ctx):
    return np.ones((1, S), bool), np.full((1, S), ctx)


def _sync(e):
    """The same profile without asynchronous scheduling."""
    return replace(e, cpu_overlap_decode=False, cpu_overlap_draft_kinds=())


def test_new_profiles_load_with_their_mechanisms():
    p = load_engine_profiles()
    v1, sgl, v2 = p["vllm-v1"], p["sglang"], p["sglang-spec-v2"]
    assert v1.cpu_overlap_decode and set(v1.cpu_overlap_draft_kinds) == {"model", "eagle"}
    assert sgl.cpu_overlap_decode and sgl.cpu_overlap_draft_kinds == ()
    assert set(v2.cpu_overlap_draft_kinds) == {"model", "eagle"}
    for e in (v1, sgl, v2):
        assert e.allreduce == "custom" and e.draft_first_pass_covers_verified
        assert e.ngram_one_call_per_step and not e.scoring_batch_expansion and not e.is_ideal
    # the older profiles keep every new mechanism off (the defaults)
    for name in ("ideal", "vllm-2024"):
        e = p[name]
        assert (e.allreduce, e.cpu_overlap_decode, e.cpu_overlap_draft_kinds) == ("nccl", False, ())
        assert not e.draft_first_pass_covers_verified and not e.ngram_one_call_per_step


def test_overlap_pays_only_the_cpu_the_gpu_does_not_hide():
    e = engine_profile("vllm-v1")
    # a 1B target at batch 128: the GPU step (about 3 ms) is shorter than the CPU (about 6.5 ms)
    small = _cost(e, draft="ngram", target="llama-3.2-1b")
    for S, ctx in ((1, 500), (128, 1000)):
        active, c = _uniform(S, ctx)
        physics, overhead = small.target_pass_parts(active, 1, c)
        cpu = e.step_cpu_fixed_ms + e.step_cpu_per_seq_ms * S
        assert overhead[0] == pytest.approx(max(0.0, cpu - physics[0]), abs=1e-12)
        sync_overhead = _cost(_sync(e), draft="ngram", target="llama-3.2-1b").target_pass_parts(
            active, 1, c)[1][0]
        assert sync_overhead == pytest.approx(cpu) and overhead[0] <= sync_overhead
    assert overhead[0] > 0  # at batch 128 the CPU is exposed
    # an 8B target: the GPU hides all of the step's CPU
    active, c = _uniform(64, 1500)
    assert _cost(e).target_pass_parts(active, 1, c)[1][0] == 0.0


def test_overlap_of_a_speculative_step_counts_draft_cpu_and_gpu():
    e = replace(engine_profile("vllm-v1"), step_cpu_fixed_ms=30.0)  # CPU longer than the GPU
    cost, sync = _cost(e), _cost(_sync(e))
    S, gamma = 16, 4
    active, c = _uniform(S, 1200)
    d_phys, d_over = cost.draft_passes_parts(active, gamma, c)
    s_phys, s_over = sync.draft_passes_parts(active, gamma, c)
    np.testing.assert_allclose(d_phys, s_phys)
    draft_cpu = gamma * (e.draft_pass_cpu_fixed_ms + e.draft_pass_cpu_per_seq_ms * S)
    catchup = d_over[0]  # with overlap the draft passes keep only their GPU overhead
    assert s_over[0] == pytest.approx(draft_cpu + catchup) and catchup > 0
    v_phys, v_over = cost.target_pass_parts(active, gamma + 1, c)
    cpu = (e.step_cpu_fixed_ms + S * (e.step_cpu_per_seq_ms + e.kv_bookkeeping_per_seq_ms)
           + draft_cpu)
    gpu = v_phys[0] + d_phys[0] + catchup
    assert v_over[0] == pytest.approx(cpu - gpu)
    # the whole step costs max(CPU, GPU) + GPU overheads: never more than the synchronous engine
    step = v_phys[0] + v_over[0] + d_phys[0] + d_over[0]
    assert step == pytest.approx(max(cpu, gpu)) and step < (
        sum(sync.target_pass_parts(active, gamma + 1, c))[0] + s_phys[0] + s_over[0])


def test_no_overlap_for_draft_kinds_the_engine_runs_synchronously():
    # vLLM turns asynchronous scheduling off for its CPU n-gram proposer; SGLang, by default, for
    # every speculative algorithm
    for name, draft in (("vllm-v1", "ngram"), ("sglang", "llama-3.2-1b"), ("sglang", "eagle")):
        e = engine_profile(name)
        active, c = _uniform(32, 1000)
        over = _cost(e, draft=draft).target_pass_parts(active, 4, c)[1][0]
        sync = _cost(_sync(e), draft=draft).target_pass_parts(active, 4, c)[1][0]
        assert over == pytest.approx(sync) and over > 0
        # while plain decoding of the same engine overlaps
        assert _cost(e, draft=draft).target_pass_parts(active, 1, c)[1][0] == 0.0


def test_first_draft_pass_covers_the_verified_positions():
    e = engine_profile("vllm-v1")
    for draft in ("llama-3.2-1b", "eagle"):
        cost = _cost(e, draft=draft)
        S, ctx = 8, 900
        active, c = _uniform(S, ctx)
        for gamma in (1, 3, 6):
            overhead = cost.draft_passes_parts(active, gamma, c)[1][0]  # GPU part only (overlap)
            table = cost._table_ms("draft", S, gamma + 1)
            att = cost._attention_pnorm_ms
            wide = gamma + 1
            expected = (table[S, wide] - table[S, 1]
                        + att(cost._draft_c, S, S * wide, wide, S * ctx)
                        - att(cost._draft_c, S, S, 1, S * ctx))
            assert overhead == pytest.approx(expected, rel=1e-9)
        # vectorised over per-replication gammas, as the sweep calls it
        active3, c3 = np.ones((3, S), bool), np.full((3, S), ctx)
        g = np.array([1, 3, 6])
        rows = cost.draft_passes_parts(active3, g, c3)[1]
        singles = [cost.draft_passes_parts(active, int(k), c)[1][0] for k in g]
        np.testing.assert_allclose(rows, singles, rtol=1e-12)


def test_ngram_proposer_once_per_step():
    v1, old = engine_profile("vllm-v1"), engine_profile("vllm-2024")
    active, c = _uniform(16, 1000)
    for gamma in (1, 5):
        assert _cost(v1, draft="ngram").draft_passes_parts(active, gamma, c)[1][0] == (
            pytest.approx(v1.ngram_pass_cpu_ms))
        assert _cost(old, draft="ngram").draft_passes_parts(active, gamma, c)[1][0] == (
            pytest.approx(gamma * old.ngram_pass_cpu_ms))


def test_optional_fields_and_their_errors(tmp_path):
    text = ENGINES_TOML.read_text()
    p = tmp_path / "e.toml"
    p.write_text(text.replace('allreduce = "custom"', 'allreduce = "mpi"', 1))
    with pytest.raises(CostModelInputError, match=r'^engines\.vllm-v1\.allreduce: unknown .mpi.'):
        load_engine_profiles(p)
    p.write_text(text.replace('cpu_overlap_draft_kinds = ["model", "eagle"]',
                              'cpu_overlap_draft_kinds = ["model", "medusa"]', 1))
    with pytest.raises(CostModelInputError, match=r"cpu_overlap_draft_kinds: unknown draft kind"):
        load_engine_profiles(p)
    p.write_text(text.replace('cpu_overlap_draft_kinds = ["model", "eagle"]',
                              'cpu_overlap_draft_kinds = "model"', 1))
    with pytest.raises(CostModelInputError, match=r"expected a list of strings"):
        load_engine_profiles(p)
    p.write_text(text.replace("cpu_overlap_decode = true", "cpu_overlap_decode = 1", 1))
    with pytest.raises(CostModelInputError, match=r"cpu_overlap_decode: expected true or false"):
        load_engine_profiles(p)


def test_self_speculation_has_no_first_pass_catchup():
    """A self-speculation draft is the target network: its verification pass already wrote the KV
    entries the draft's window takes, so the draft needs no pass over the verified positions."""
    e = engine_profile("vllm-v1")
    cost = _cost(e, draft="self", draft_kv_budget_tokens=512)
    active, c = _uniform(8, 4000)
    physics, overhead = cost.draft_passes_parts(active, 4, c)
    # vLLM has no self-speculation method, so the profile does not overlap its CPU: the overhead
    # is the draft passes' CPU alone, with no GPU catch-up on top
    cpu = 4 * (e.draft_pass_cpu_fixed_ms + 8 * e.draft_pass_cpu_per_seq_ms)
    assert overhead[0] == pytest.approx(cpu) and physics[0] > 0


def test_prefill_scheduling_is_read_from_the_profile_and_unknown_values_are_refused(tmp_path):
    """vllm-2024 (vLLM v0.6: chunked prefill off with a speculative model, and off by default at
    Llama-3-70B's 8K context) schedules prefill-first; every other profile chunked prefill."""
    profiles = load_engine_profiles()
    assert profiles["vllm-2024"].prefill_scheduling == "prefill_first"
    assert {p.prefill_scheduling for n, p in profiles.items() if n != "vllm-2024"} == {"chunked"}
    bad = tmp_path / "bad.toml"
    bad.write_text('[engines."vllm-2024"]\nprefill_scheduling = "eager"\n')
    with pytest.raises(CostModelInputError,
                       match=r"^engines\.vllm-2024\.prefill_scheduling: unknown 'eager'"):
        load_engine_profiles(extra_paths=[bad])
    done = subprocess.run([sys.executable, "run.py", "step-time", "--list", "--presets", str(bad)],
                          cwd=ENGINES_TOML.parents[2], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "prefill_scheduling: unknown 'eager'" in done.stderr
