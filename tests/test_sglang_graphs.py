"""SGLang's CUDA-graph batch limit (engines.toml cuda_graph_max_batch_by_gpu_memory): above it a
pass is launched eagerly and pays the eager launch cost of the profile eager_launch_costs_from
names; the limit follows SGLang v0.5.10's server_args.py by GPU memory and TP."""
import dataclasses
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from src.compiled_cache import python_callable
from src.costmodel import HardwareCostModel
from src.costmodel.engines import load_engine_profiles
from src.costmodel.presets import CostModelInputError
from src.online import step_prices
from src.online.step_prices import pack_prices
from src.online.steptime import StepTimer
from src.treeshape.shape import TreeShape
from src.treesim.costs import draft_ms, verify_ms

decode_ms = python_callable(step_prices.decode_ms)

ROOT = Path(__file__).resolve().parents[1]


def _model(engine="sglang", gpu="h100-sxm", target="llama-3.1-8b", tp=1):
    return HardwareCostModel.from_presets(gpu, target, draft="eagle", engine=engine, tp=tp)


def _no_limit(name="sglang"):
    e = load_engine_profiles()[name]
    return dataclasses.replace(e, cuda_graph_max_batch_by_gpu_memory=())


def test_the_graph_limit_is_sglangs_cuda_graph_max_bs_by_gpu_memory_and_tp():
    """sgl-project/sglang v0.5.10.post1, python/sglang/srt/server_args.py,
    ServerArgs._handle_gpu_memory_settings: gpu_mem < 90 * 1024 MiB (H100, A100 80 GB) and
    < 160 * 1024 (H20, H200): cuda_graph_max_bs = 256 if tp_size < 4 else 512; above (B200):
    512; < 60 * 1024 (A100 40 GB, L40): 32 / 160; < 35 * 1024: 24 / 80; < 20 * 1024: 8."""
    for name in ("sglang", "sglang-spec-v2"):
        e = load_engine_profiles()[name]
        assert e.cuda_graph_max_batch(80.0, 1) == 256 and e.cuda_graph_max_batch(80.0, 8) == 512
        assert e.cuda_graph_max_batch(141.0, 1) == 256 and e.cuda_graph_max_batch(141.0, 4) == 512
        assert e.cuda_graph_max_batch(192.0, 1) == 512
        assert e.cuda_graph_max_batch(40.0, 2) == 32 and e.cuda_graph_max_batch(40.0, 4) == 160
        assert e.cuda_graph_max_batch(24.0, 1) == 24 and e.cuda_graph_max_batch(16.0, 8) == 8
    # the deployment's coefficients carry it, target and draft alike (one capture list)
    m = _model()
    assert m._target_c.cuda_graph_max_seqs == m._draft_c.cuda_graph_max_seqs == 256
    assert _model(gpu="h200", target="llama-3.1-70b", tp=4)._target_c.cuda_graph_max_seqs == 512
    # trtllm: BaseCudaGraphConfig's default max_batch_size 128 (llm_args.py, design.md); no other
    # profile has a limit: graphs at every batch, as before
    profiles = load_engine_profiles()
    assert profiles["trtllm"].cuda_graph_max_batch(141.0, 8) == 128
    others = [p for n, p in profiles.items() if not n.startswith(("sglang", "trtllm"))]
    assert all(p.cuda_graph_max_batch(80.0, 1) == 0 for p in others)


def test_sglang_borrows_the_calibrated_eager_launch_costs():
    profiles = load_engine_profiles()
    launch = ("cpu_launch_us_per_kernel", "launch_gap_us_per_kernel", "launch_overlap_p")
    for name in ("sglang", "sglang-spec-v2"):
        assert profiles[name].eager_launch_costs_from == "pytorch-eager"
        assert [getattr(profiles[name], k) for k in launch] == [
            getattr(profiles["pytorch-eager"], k) for k in launch]
        assert profiles[name].cpu_launch_us_per_kernel > 0


@pytest.mark.parametrize("positions", [1, 6])
def test_a_pass_above_the_graph_limit_costs_more_than_with_graphs(positions):
    """Same tokens, same physics: above 256 sequences the sglang profile's passes are eager
    (launch cost > 0); at 256 and below they equal the same profile without a limit."""
    limited, free = _model(), _model(engine=_no_limit())
    for n, eager in ((64, False), (256, False), (257, True), (400, True)):
        S, C = np.array([n]), np.array([n * 1000])
        a = limited.target_pass_time_totals(S, C, positions)
        b = free.target_pass_time_totals(S, C, positions)
        d_a = limited.draft_passes_time_totals(S, C, 5)
        d_b = free.draft_passes_time_totals(S, C, 5)
        if eager:
            assert a[0] > b[0] and d_a[0] > d_b[0]
        else:
            assert a[0] == b[0] and d_a[0] == d_b[0]


def test_the_limit_comes_from_the_profile_data(tmp_path):
    """A preset that lowers the limit to 16 moves the eager step from 257 to 17 sequences, for
    chains and for a tree's verification and draft passes."""
    low = tmp_path / "low.toml"
    low.write_text("[engines.sglang]\ncuda_graph_max_batch_by_gpu_memory = [[inf, 16, 16]]\n")
    e = load_engine_profiles(extra_paths=[low])["sglang"]
    assert e.cuda_graph_max_batch(80.0, 1) == 16
    limited, free = _model(engine=e), _model(engine=_no_limit())
    tree = TreeShape(steps=4, topk=4, tokens=16)
    for n in (16, 17):
        S, C = np.array([n]), np.array([n * 500])
        v = verify_ms(limited, tree, S, C)[0] - verify_ms(free, tree, S, C)[0]
        d = draft_ms(limited, tree, S, C)[0] - draft_ms(free, tree, S, C)[0]
        assert (v > 0 and d > 0) if n == 17 else (v == 0 and d == 0)


def test_compiled_step_prices_follow_the_graph_limit(tmp_path):
    """The compiled engine's prices (src/online/step_prices.py) equal the cost model's on both
    sides of a graph limit of 16 sequences."""
    low = tmp_path / "low.toml"
    low.write_text("[engines.sglang]\ncuda_graph_max_batch_by_gpu_memory = [[inf, 16, 16]]\n")
    e = load_engine_profiles(extra_paths=[low])["sglang"]
    timer = StepTimer(_model(engine=e), True)
    pt = pack_prices([timer], 32, 8, 4096)
    for n, gamma in ((16, 3), (17, 3), (32, 5), (20, 0)):
        decoding = np.zeros((1, 32), bool)
        decoding[0, :n] = True
        context = np.where(decoding, 700, 0)
        target, draft = timer.decode_ms(decoding, np.array([gamma]), context)
        t, d = decode_ms(pt, 0, n, int(context.sum()), gamma, 0.0, 0.0)
        np.testing.assert_allclose([t, d], [target[0], draft[0]], rtol=1e-9)


@pytest.mark.parametrize("value, shown", [
    ("[[90, 0, 512]]", "bad row [90, 0, 512]"),
    ("[[90, 256, 512], [60, 32, 160]]", "bad row [60, 32, 160]"),
    ("[[90, 256.5, 512]]", "bad row [90, 256.5, 512]"),
    ("[[90, 256]]", "bad row [90, 256]"),
    ("256", "bad row None"),
])
def test_a_bad_graph_limit_is_refused_naming_the_field(tmp_path, value, shown):
    bad = tmp_path / "bad.toml"
    bad.write_text(f"[engines.sglang]\ncuda_graph_max_batch_by_gpu_memory = {value}\n")
    field = "engines.sglang.cuda_graph_max_batch_by_gpu_memory"
    with pytest.raises(CostModelInputError, match=rf"^{field}: {shown.replace('[', '.')}"):
        load_engine_profiles(extra_paths=[bad])
    done = subprocess.run([sys.executable, "run.py", "step-time", "--list", "--presets", str(bad)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert field in done.stderr and "allowed:" in done.stderr


def test_an_unknown_eager_launch_source_is_refused(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('[engines.sglang]\neager_launch_costs_from = "sglang-spec-v2"\n')
    with pytest.raises(CostModelInputError,
                       match=r"^engines\.sglang\.eager_launch_costs_from: unknown "):
        load_engine_profiles(extra_paths=[bad])
    assert math.isinf(load_engine_profiles()["sglang"].cuda_graph_max_batch_by_gpu_memory[-1][0])


def test_the_drafts_of_a_step_replay_two_graphs_within_the_limit(tmp_path):
    """sgl-project/sglang v0.5.10.post1 speculative/eagle_worker.py: draft() replays one CUDA
    graph for the S - 1 draft decode passes (EAGLEDraftCudaGraphRunner, captured only when
    speculative_num_steps > 1) and forward_draft_extend_after_decode one for the draft extend
    (EAGLEDraftExtendCudaGraphRunner): the draft CPU is two passes' worth for S >= 2, one for
    S = 1; above the limit every pass is launched and pays its own."""
    e = load_engine_profiles()["sglang"]
    assert e.draft_passes_one_graph
    m = _model()
    per_pass = lambda n: e.draft_pass_cpu_fixed_ms + e.draft_pass_cpu_per_seq_ms * n  # noqa: E731
    for n, g, passes in ((8, 5, 2), (8, 1, 1), (256, 7, 2), (257, 5, 5), (300, 1, 1)):
        cpu = m._draft_cpu_ms(np.array([n]), np.array([g]))
        assert cpu[0] == pytest.approx(passes * per_pass(n))
    # an n-gram draft and a profile without the mechanism keep one CPU cost per pass
    plain = _model(engine="vllm-v1")
    assert plain._draft_cpu_ms(np.array([8]), np.array([5]))[0] == pytest.approx(5 * (
        plain.engine.draft_pass_cpu_fixed_ms + 8 * plain.engine.draft_pass_cpu_per_seq_ms))


def test_the_eager_kernels_between_graphs_are_priced_per_verification():
    """31 kernels counted along SGLang v0.5.10's EAGLE step (engines.toml lists them by file and
    function), each at the GPU's kernel fixed time and the eager launch cost: added to every
    verification with an EAGLE draft, never to a greedy decode pass or an n-gram draft."""
    e = load_engine_profiles()["sglang"]
    assert e.spec_step_eager_kernels == 31
    with_k, without = _model(), _model(engine=dataclasses.replace(e, spec_step_eager_kernels=0))
    S, C = np.array([32]), np.array([32 * 800])
    extra = (with_k.target_pass_time_totals(S, C, 6) - without.target_pass_time_totals(S, C, 6))[0]
    cpu_launch = 31 * e.cpu_launch_us_per_kernel * 1e-3
    assert extra == pytest.approx(with_k._target_c.spec_step_eager_s * 1e3)
    assert cpu_launch <= extra < cpu_launch * 1.2  # launch-bound: the CPU issues them one by one
    assert with_k.target_pass_time_totals(S, C, 1)[0] == without.target_pass_time_totals(S, C, 1)[0]
    e0 = dataclasses.replace(e, spec_step_eager_kernels=0)
    ngram = HardwareCostModel.from_presets("h100-sxm", "llama-3.1-8b", draft="ngram", engine=e)
    ngram0 = HardwareCostModel.from_presets("h100-sxm", "llama-3.1-8b", draft="ngram", engine=e0)
    assert ngram.target_pass_time_totals(S, C, 6)[0] == ngram0.target_pass_time_totals(S, C, 6)[0]
