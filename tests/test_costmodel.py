"""Tests of the hardware cost model (src/costmodel/).

Measured figures are from the vidur profiling data, microsoft/vidur, in the project's calibration
data (vidur_nonattention_forward_ms.csv); tests that read it skip when it is absent.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from src.costmodel import (
    KERNELS_PER_LAYER_NON_ATTENTION,
    CostModelInputError,
    CostModelParams,
    DraftSpec,
    FlatCostModel,
    HardwareCostModel,
    engine_profile,
    forward_pass_breakdown,
    kernel_fixed_s,
    load_presets,
    non_attention_forward_ms,
    pass_coefficients,
    pass_components_s,
)

CALIBRATION = Path(__file__).resolve().parents[2] / "shared" / "calibration"
needs_calibration = pytest.mark.skipif(
    not (CALIBRATION / "vidur_nonattention_forward_ms.csv").is_file(),
    reason="vidur's tables in ../shared/calibration (the fit data of "
           "src/presets/costmodel_params.toml; its README keeps them out of the repository) "
           "are absent")

# The fit's tolerance (scripts/fit_costmodel.py): worst |relative error| over all 3108 rows is
# 22.7% (per-GPU kernel fixed time); the pinned points below are held to 20%.
PIN_TOLERANCE = 0.20


@pytest.fixture(scope="module")
def presets():
    return load_presets()


def _na_ms(presets, gpu, model, tp, tokens):
    return non_attention_forward_ms(presets.gpu(gpu), presets.model(model), tp, tokens,
                                    presets.params)


# ---------------------------------------------------------------- pinned measurements
# vidur profiling data, microsoft/vidur (the calibration data):
# forward_ms_non_attention by (gpu, model, tp, num_tokens)
PINNED_MS = [
    ("h100-sxm", "llama-2-7b", 1, 1, 5.6),
    ("h100-sxm", "llama-2-7b", 1, 64, 5.856),
    ("h100-sxm", "llama-2-7b", 1, 128, 6.368),
    ("h100-sxm", "llama-2-7b", 1, 256, 9.152),
    ("h100-sxm", "llama-2-7b", 1, 512, 11.984),
    ("h100-sxm", "llama-2-7b", 1, 2048, 40.525),
    ("h100-sxm", "llama-2-7b", 8, 4096, 16.544),
    ("a100-80gb-sxm", "llama-3-8b", 1, 1, 9.696),
    ("a100-80gb-sxm", "llama-3-8b", 1, 4096, 272.928),
    ("a100-80gb-sxm", "llama-2-7b", 4, 512, 10.176),
]
VIDUR_NAMES = {"h100-sxm": "h100", "a100-80gb-sxm": "a100", "llama-2-7b": "Llama-2-7b-hf",
               "llama-3-8b": "Meta-Llama-3-8B"}


@pytest.mark.parametrize("gpu,model,tp,tokens,measured_ms", PINNED_MS)
def test_pinned_nonattention_times(presets, gpu, model, tp, tokens, measured_ms):
    # vidur profiling data, microsoft/vidur (the calibration data)
    predicted = float(_na_ms(presets, gpu, model, tp, [tokens])[0])
    assert predicted == pytest.approx(measured_ms, rel=PIN_TOLERANCE)


@needs_calibration
def test_pinned_figures_match_the_calibration_csv():
    import pandas as pd
    df = pd.read_csv(CALIBRATION / "vidur_nonattention_forward_ms.csv")
    for gpu, model, tp, tokens, measured_ms in PINNED_MS:
        row = df[(df.gpu == VIDUR_NAMES[gpu]) & (df.model == VIDUR_NAMES[model]) & (df.tp == tp)
                 & (df.num_tokens == tokens)]
        assert len(row) == 1
        assert float(row.forward_ms_non_attention.iloc[0]) == pytest.approx(measured_ms, abs=0.01)


@needs_calibration
def test_fit_error_over_every_calibration_row(presets):
    import pandas as pd
    df = pd.read_csv(CALIBRATION / "vidur_nonattention_forward_ms.csv")
    errors = []
    for (gpu, model, tp), s in df.groupby(["gpu", "model", "tp"]):
        g = {v: k for k, v in VIDUR_NAMES.items()}
        pred = _na_ms(presets, g[gpu], g[model], int(tp), s.num_tokens.to_numpy())
        errors.append(np.abs(pred / s.forward_ms_non_attention.to_numpy() - 1))
    errors = np.concatenate(errors)
    assert len(errors) == 3108
    assert np.median(errors) <= 0.10
    # 22.7% at h100 TP4 272 tokens (see design.md); the project's target is 25%. Was 26.0% (h100
    # TP8 1 token) with one kernel fixed time shared by A100 and H100.
    assert errors.max() <= 0.25


# ---------------------------------------------------------------- physics
def test_memory_bound_region_is_flat_in_tokens(presets):
    t = _na_ms(presets, "h100-sxm", "llama-3.1-8b", 1, [1, 8, 16])
    assert t[2] / t[0] == pytest.approx(1.0, abs=0.03)


def test_compute_bound_region_is_linear_in_tokens(presets):
    t = _na_ms(presets, "h100-sxm", "llama-3.1-8b", 1, [2048, 4096, 8192])
    assert t[1] / t[0] == pytest.approx(2.0, rel=0.05)
    assert t[2] / t[1] == pytest.approx(2.0, rel=0.03)


def test_transition_is_smooth_and_above_the_plain_roofline(presets):
    gpu, model, params = presets.gpu("h100-sxm"), presets.model("llama-3.1-8b"), presets.params
    c = pass_coefficients(gpu, model, 1, params)
    tokens = np.arange(1, 2049, dtype=float)
    comp = pass_components_s(c, tokens, 1, np.zeros_like(tokens))
    t = comp["layers_non_attention"]
    assert np.all(np.diff(t) > 0)  # monotone
    # the p-norm is above max(memory, compute) and below their sum
    sharp = replace_params(params, roofline_sharpness_p=200.0)
    t_max = pass_components_s(pass_coefficients(gpu, model, 1, sharp), tokens, 1,
                              np.zeros_like(tokens))["layers_non_attention"]
    assert np.all(t >= t_max * 0.999)


def replace_params(params, **kw):
    from dataclasses import replace
    return replace(params, **kw)


def test_kv_cost_is_linear_in_context(presets):
    gpu, model = presets.gpu("h100-sxm"), presets.model("llama-3.1-8b")
    a = [forward_pass_breakdown(gpu, model, 1, 32, 1, ctx, presets.params).attention_ms
         for ctx in (1024, 2048, 4096, 8192)]
    slope1 = (a[1] - a[0]) / 1024
    slope2 = (a[3] - a[2]) / 4096
    assert slope2 == pytest.approx(slope1, rel=0.01)
    # slope = KV bytes per token per sequence / achieved bandwidth
    bw = gpu.memory_bandwidth_bytes_per_s * presets.params.memory_bandwidth_efficiency_fraction
    assert slope1 == pytest.approx(32 * model.kv_bytes_per_token / bw * 1e3, rel=0.01)


def test_tp_divides_per_gpu_work(presets):
    t1, t2, t4 = (_na_ms(presets, "h100-sxm", "llama-3.1-70b", tp, [4096])[0] for tp in (1, 2, 4))
    assert t1 / t2 == pytest.approx(2.0, rel=0.08)
    assert t1 / t4 == pytest.approx(4.0, rel=0.12)
    gpu, model = presets.gpu("h100-sxm"), presets.model("llama-3.1-8b")
    one = forward_pass_breakdown(gpu, model, 1, 16, 1, 4096, presets.params)
    two = forward_pass_breakdown(gpu, model, 2, 16, 1, 4096, presets.params)
    assert two.attention_ms < 0.6 * one.attention_ms
    assert one.communication_ms == 0.0 and two.communication_ms > 0.0


def test_bound_switches_from_memory_to_compute(presets):
    gpu, model = presets.gpu("h100-sxm"), presets.model("llama-3.1-8b")
    assert forward_pass_breakdown(gpu, model, 1, 1, 1, 128, presets.params).bound == "memory"
    assert forward_pass_breakdown(gpu, model, 1, 64, 32, 128, presets.params).bound == "compute"


def test_tied_lm_head_streamed_once_and_embedding_not_streamed(presets):
    gpu, p = presets.gpu("h100-sxm"), presets.params
    tied = presets.model("llama-3.2-1b")
    bd = forward_pass_breakdown(gpu, tied, 1, 1, 1, 0, p)
    bw = gpu.memory_bandwidth_bytes_per_s * p.memory_bandwidth_efficiency_fraction
    lm_head_bytes = tied.vocab_size * tied.hidden_size * 2
    assert bd.lm_head_ms == pytest.approx(lm_head_bytes / bw * 1e3, rel=0.1)
    # the layers stream the layer weights only (no embedding table), plus the kernels' fixed time
    layer_bytes = tied.n_layers * tied.layer_params * 2
    fixed_ms = tied.n_layers * KERNELS_PER_LAYER_NON_ATTENTION * kernel_fixed_s(gpu, p) * 1e3
    assert bd.layers_non_attention_ms == pytest.approx(layer_bytes / bw * 1e3 + fixed_ms, rel=0.03)


def test_breakdown_total_is_the_sum_of_parts(presets):
    bd = forward_pass_breakdown(presets.gpu("a100-80gb-sxm"), presets.model("llama-3.1-8b"), 2,
                                8, 5, 2048, presets.params, presets.allreduce)
    parts = (bd.layers_non_attention_ms + bd.attention_ms + bd.lm_head_ms + bd.communication_ms
             + bd.overhead_ms)
    assert bd.total_ms == pytest.approx(parts)
    assert bd.tokens == 40


# ---------------------------------------------------------------- presets
def test_presets_load_with_reference_figures(presets):
    assert {"a100-80gb-sxm", "h100-sxm", "h200", "b200", "l40s", "l4", "a40", "mi300x"} <= set(
        presets.gpus)
    assert presets.gpu("h100-sxm").dense_bf16_tflops == pytest.approx(989.4)  # dense, not sparse
    assert presets.gpu("mi300x").dense_bf16_tflops == pytest.approx(1307.4)
    expected_params_b = {"llama-3.1-8b": 8.03, "llama-3.1-70b": 70.55, "llama-3.2-1b": 1.24,
                         "llama-3.2-3b": 3.21, "llama-2-7b": 6.74, "llama-2-70b": 68.98,
                         "qwen2.5-0.5b": 0.49, "qwen2.5-7b": 7.62, "qwen2.5-72b": 72.71,
                         "llama-68m": 0.068}
    for model_id, billions in expected_params_b.items():
        assert presets.model(model_id).total_params / 1e9 == pytest.approx(billions, rel=0.01)
    kib = {"llama-3.1-8b": 128, "llama-2-7b": 512, "llama-3.2-1b": 32}
    for model_id, k in kib.items():
        assert presets.model(model_id).kv_bytes_per_token == k * 1024
    for spec in (*presets.gpus.values(), *presets.models.values()):
        assert spec.source.strip()
    assert presets.params.memory_bandwidth_efficiency_fraction < 1.0


def test_params_file_matches_dataclass_defaults(presets):
    defaults = CostModelParams()
    for name in ("memory_bandwidth_efficiency_fraction", "compute_efficiency_fraction",
                 "roofline_sharpness_p", "kernel_fixed_us"):
        assert getattr(presets.params, name) == pytest.approx(getattr(defaults, name), rel=0.01)


def test_kernel_fixed_time_is_per_gpu_where_fitted_and_shared_elsewhere(presets):
    p = presets.params
    a100, h100, b200 = (presets.gpu(g) for g in ("a100-80gb-sxm", "h100-sxm", "b200"))
    # fitted per GPU (written to costmodel_params.toml by scripts/fit_costmodel.py): H100's
    # kernels finish faster than A100's; the shared value for GPUs without data lies in between
    assert a100.kernel_fixed_us is not None and h100.kernel_fixed_us is not None
    assert 2.0 < h100.kernel_fixed_us < p.kernel_fixed_us < a100.kernel_fixed_us < 5.0
    assert b200.kernel_fixed_us is None
    assert kernel_fixed_s(b200, p) == pytest.approx(p.kernel_fixed_us * 1e-6)
    assert kernel_fixed_s(h100, p) == pytest.approx(h100.kernel_fixed_us * 1e-6)
    # the H200's comes from its own calibration (src/presets/h200_calibration.toml)
    assert 2.0 < presets.gpu("h200").kernel_fixed_us < 6.0
    model = presets.model("llama-3.1-8b")
    for gpu in (a100, h100, b200):
        c = pass_coefficients(gpu, model, 1, p)
        assert c.layer_fixed_s == pytest.approx(
            model.n_layers * KERNELS_PER_LAYER_NON_ATTENTION * kernel_fixed_s(gpu, p))
        assert c.attn_fixed_s == pytest.approx(model.n_layers * 2 * kernel_fixed_s(gpu, p))


def test_gpu_kernel_fixed_time_can_be_set_in_a_preset_file(tmp_path):
    user = tmp_path / "k.toml"
    user.write_text("""
[gpus."h100-sxm"]
kernel_fixed_us = 2.5

[gpus."new-gpu"]
name = "New"
dense_bf16_tflops = 500.0
memory_bandwidth_gb_per_s = 2000.0
memory_gb = 96.0
interconnect_bidirectional_gb_per_s = 400.0
interconnect = "NVLink"
source = "mine"
""")
    p = load_presets([user])
    assert p.gpu("h100-sxm").kernel_fixed_us == 2.5
    assert p.gpu("new-gpu").kernel_fixed_us is None  # optional: the shared value applies
    bad = tmp_path / "bad.toml"
    bad.write_text('[gpus."h100-sxm"]\nkernel_fixed_us = "fast"\n')
    with pytest.raises(CostModelInputError,
                       match=r"gpus\.h100-sxm\.kernel_fixed_us: expected a number"):
        load_presets([bad])
    bad.write_text('[gpus."h100-sxm"]\nkernel_fixed_us = -1.0\n')
    with pytest.raises(CostModelInputError, match=r"kernel_fixed_us: must be >= 0"):
        load_presets([bad])


def test_user_preset_file_merges_over_builtins(tmp_path):
    user = tmp_path / "mine.toml"
    user.write_text("""
[gpus."my-gpu"]
name = "My GPU"
dense_bf16_tflops = 500.0
memory_bandwidth_gb_per_s = 2000.0
memory_gb = 96.0
interconnect_bidirectional_gb_per_s = 400.0
interconnect = "NVLink"
source = "my measurements"

[gpus."h100-sxm"]
memory_gb = 94.0

[models."tiny"]
hf_name = "me/tiny"
n_layers = 2
hidden_size = 256
n_heads = 4
n_kv_heads = 2
head_dim = 64
intermediate_size = 1024
vocab_size = 1000
tied_embeddings = true
qkv_bias = false
source = "config.json"

[params]
kernel_fixed_us = 5.0
""")
    p = load_presets([user])
    assert p.gpu("my-gpu").dense_bf16_tflops == 500.0
    assert p.gpu("h100-sxm").memory_gb == 94.0
    assert p.gpu("h100-sxm").dense_bf16_tflops == pytest.approx(989.4)  # other fields kept
    assert p.model("tiny").n_layers == 2
    assert p.params.kernel_fixed_us == 5.0
    assert "llama-3.1-8b" in p.models  # built-ins still there
    m = HardwareCostModel.from_presets("my-gpu", "tiny", engine="ideal", preset_paths=[user])
    assert m.target_pass_time(np.ones((2, 3), bool), 1, np.full((2, 3), 10)).shape == (2,)


# ---------------------------------------------------------------- engine protocol
@pytest.fixture(scope="module")
def model_draft():
    return HardwareCostModel.from_presets("h100-sxm", "llama-3.1-8b", engine="ideal", tp=1,
                                          draft="llama-3.2-1b")


def _batch(R=4, B=8, seed=0):
    rng = np.random.default_rng(seed)
    active = rng.random((R, B)) < 0.7
    active[1] = False  # an empty replication
    ctx = rng.integers(500, 3000, (R, B))
    return active, ctx


def test_protocol_shapes_and_zero_for_empty_replications(model_draft):
    active, ctx = _batch()
    for m in (model_draft, FlatCostModel()):
        t = m.target_pass_time(active, 5, ctx)
        d = m.draft_passes_time(active, 4, ctx)
        assert t.shape == (4,) and d.shape == (4,)
        assert t[1] == 0.0 and d[1] == 0.0
        assert np.all(t[[0, 2, 3]] > 0) and np.all(d[[0, 2, 3]] > 0)
    assert model_draft.time_unit == "ms"


def test_engine_path_matches_breakdown(model_draft, presets):
    B, ctx_len, t = 8, 2048, 5
    active = np.ones((1, B), bool)
    ctx = np.full((1, B), ctx_len)
    bd = forward_pass_breakdown(presets.gpu("h100-sxm"), presets.model("llama-3.1-8b"), 1, B, t,
                                ctx_len, presets.params, presets.allreduce,
                                include_step_overhead=False)  # the ideal engine has none
    assert model_draft.target_pass_time(active, t, ctx)[0] == pytest.approx(bd.total_ms, rel=1e-9)


def test_per_replication_arrays_of_positions_and_gamma(model_draft):
    active, ctx = _batch()
    gammas = np.array([1, 2, 4, 8])
    t = model_draft.target_pass_time(active, gammas + 1, ctx)
    d = model_draft.draft_passes_time(active, gammas, ctx)
    for r in range(4):
        assert t[r] == pytest.approx(model_draft.target_pass_time(active, int(gammas[r]) + 1,
                                                                  ctx)[r])
        assert d[r] == pytest.approx(model_draft.draft_passes_time(active, int(gammas[r]), ctx)[r])
    assert np.all(model_draft.draft_passes_time(active, 0, ctx) == 0.0)


def test_draft_closed_form_matches_explicit_sum(model_draft):
    active, ctx = _batch(R=3, B=64)
    for gamma in (1, 3, 8, 32):
        explicit = sum(model_draft.draft_passes_time(active, 1, ctx + k) for k in range(gamma))
        closed = model_draft.draft_passes_time(active, gamma, ctx)
        np.testing.assert_allclose(closed, explicit, rtol=1e-3)


def test_target_grows_with_batch_positions_and_context(model_draft):
    def one(B, t, c):
        return model_draft.target_pass_time(np.ones((1, B), bool), t, np.full((1, B), c))[0]
    assert one(1, 1, 1024) < one(8, 1, 1024) < one(64, 1, 1024)
    assert one(8, 1, 1024) < one(8, 5, 1024) < one(8, 17, 1024)
    assert one(8, 5, 1024) < one(8, 5, 8192)


def test_draft_kinds(presets):
    active, ctx = _batch(R=2, B=16)
    engine = engine_profile("vllm-2024")
    cost = {kind: HardwareCostModel.from_presets("h100-sxm", "llama-3.1-8b", engine=engine,
                                                 draft=kind)
            for kind in ("ngram", "eagle", "llama-68m", "llama-3.2-1b")}
    d = {k: m.draft_passes_time(active, 4, ctx)[0] for k, m in cost.items()}
    t = cost["ngram"].target_pass_time(active, 1, ctx)[0]
    assert d["ngram"] == pytest.approx(4 * engine.ngram_pass_cpu_ms)
    assert d["ngram"] < d["llama-68m"] < d["eagle"] < 4 * t
    assert d["llama-68m"] < d["llama-3.2-1b"] < 4 * t
    # EAGLE: one target-shaped layer + the target's LM head per pass
    eagle = cost["eagle"]
    assert eagle.draft == DraftSpec(kind="eagle", tp=1)


# ---------------------------------------------------------------- engine implementations
def _engine(**over):
    from dataclasses import replace

    from src.costmodel import IDEAL_ENGINE
    return replace(IDEAL_ENGINE, **over)


def _pass_ms(presets, engine, batch=1, positions=1, context=512, gpu="h100-sxm",
             model="llama-3.1-8b", attention_fits=(), prefill=False):
    return forward_pass_breakdown(
        presets.gpu(gpu), presets.model(model), 1, batch, positions, context, presets.params,
        include_step_overhead=False, engine=engine, attention_fits=attention_fits,
        prefill=prefill)


def test_kernel_counts_of_the_engine_set_the_fixed_time(presets):
    # a plain implementation launching 25 kernels per layer pays L x 15 more fixed times than
    # sarathi's 10 (the default), on the GPU's own fitted kernel_fixed_us
    kfix_ms = kernel_fixed_s(presets.gpu("h100-sxm"), presets.params) * 1e3
    base = _pass_ms(presets, _engine())
    plain = _pass_ms(presets, _engine(kernels_per_layer=25, kernels_per_pass=4))
    assert plain.layers_non_attention_ms - base.layers_non_attention_ms == pytest.approx(
        32 * 15 * kfix_ms)
    assert plain.lm_head_ms - base.lm_head_ms == pytest.approx(2 * kfix_ms)
    # extra kernels of a verification pass count only when a sequence scores > 1 position
    verify = _engine(verification_extra_kernels_per_layer=1.5)
    assert _pass_ms(presets, verify).total_ms == pytest.approx(base.total_ms)
    assert (_pass_ms(presets, verify, positions=2).total_ms
            - _pass_ms(presets, _engine(), positions=2).total_ms) == pytest.approx(
        32 * 1.5 * kfix_ms)


def test_eager_launches_overlap_the_gpu_and_bind_at_small_batch(presets):
    eager = _engine(cuda_graphs=False, cpu_launch_us_per_kernel=25.0, launch_overlap_p=50.0)
    graphs = _pass_ms(presets, _engine())
    r = _pass_ms(presets, eager)
    n_kernels = 32 * (10 + 2) + 2
    # CPU-bound: the pass takes as long as issuing its kernels (p = 50: nearly a max)
    assert r.total_ms == pytest.approx(n_kernels * 25e-3, rel=0.02)
    assert r.launch_ms == pytest.approx(r.total_ms - graphs.total_ms)
    # GPU-bound at a large batch: the launches hide behind the GPU work
    big = _pass_ms(presets, eager, batch=128, positions=8, context=2048)
    big_graphs = _pass_ms(presets, _engine(), batch=128, positions=8, context=2048)
    assert big.total_ms == pytest.approx(big_graphs.total_ms, rel=0.01)


def test_engine_launch_cost_reaches_the_engine_path(presets):
    eager = _engine(cuda_graphs=False, cpu_launch_us_per_kernel=25.0, launch_overlap_p=50.0)
    m = HardwareCostModel.from_presets("h100-sxm", "llama-3.1-8b", draft="llama-3.2-1b",
                                       engine=eager)
    physics, overhead = m.target_pass_parts(np.ones((1, 1), bool), 1, np.full((1, 1), 512))
    assert physics[0] + overhead[0] == pytest.approx(_pass_ms(presets, eager).total_ms)
    d_physics, d_overhead = m.draft_passes_parts(np.ones((1, 1), bool), 3, np.full((1, 1), 512))
    assert d_overhead[0] == pytest.approx(3 * (16 * 12 + 2) * 25e-3 - d_physics[0], rel=0.03)


def test_fitted_attention_kernel_replaces_the_roofline_where_the_engine_names_it(presets):
    from dataclasses import replace as dc_replace

    from src.costmodel.presets import AttentionKernelFit
    gpu = dc_replace(presets.gpu("h200"), sm_count=132, attention_softmax_flops_per_pair=256.0)
    fits = (AttentionKernelFit("h200", "cudnn", 0.9, 0.85),
            AttentionKernelFit("h200", "flash", 0.5, 0.9))
    model = presets.model("llama-3.1-8b")

    def attn(kernel, batch, context):
        return forward_pass_breakdown(gpu, model, 1, batch, 1, context, presets.params,
                                      include_step_overhead=False,
                                      engine=_engine(attention_kernel=kernel),
                                      attention_fits=fits).attention_ms

    # batch 1 at a long context: cuDNN has one CTA per KV head, flash splits the KV
    assert attn("flash", 1, 8192) < attn("cudnn", 1, 8192) / 3
    # best = the faster per pass
    for batch, context in ((1, 8192), (64, 2048)):
        best = attn("best", batch, context)
        assert best == pytest.approx(min(attn("flash", batch, context),
                                         attn("cudnn", batch, context)))
    # a GPU without a fit for the kernel keeps its roofline attention
    assert attn("flash", 1, 8192) != attn("roofline", 1, 8192)
    no_fit = forward_pass_breakdown(gpu, model, 1, 1, 1, 8192, presets.params,
                                    include_step_overhead=False,
                                    engine=_engine(attention_kernel="flash"))
    assert no_fit.attention_ms == pytest.approx(attn("roofline", 1, 8192))


def test_engine_fields_are_optional_and_preset_files_override_them(tmp_path):
    from src.costmodel import load_engine_profiles
    profiles = load_engine_profiles()
    assert profiles["ideal"].kernels_per_layer == KERNELS_PER_LAYER_NON_ATTENTION
    assert profiles["ideal"].cuda_graphs and profiles["ideal"].attention_kernel == "roofline"
    mine = tmp_path / "mine.toml"
    mine.write_text('[engines.ideal]\nkernels_per_layer = 7\nattention_kernel = "best"\n')
    merged = load_engine_profiles(extra_paths=[mine])
    assert merged["ideal"].kernels_per_layer == 7 and merged["ideal"].attention_kernel == "best"
    assert merged["ideal"].step_cpu_fixed_ms == 0.0  # the rest is kept
    mine.write_text('[engines.ideal]\nattention_kernel = "xformers"\n')
    with pytest.raises(CostModelInputError, match="attention_kernel.*allowed: roofline"):
        load_engine_profiles(extra_paths=[mine])
    mine.write_text('[engines.ideal]\nlaunch_overlap_p = 0.5\n')
    with pytest.raises(CostModelInputError, match="launch_overlap_p: must be >= 1"):
        load_engine_profiles(extra_paths=[mine])
    mine.write_text('[engines.new-one]\nkernels_per_layer = 7\n')
    with pytest.raises(CostModelInputError, match="engines.new-one: missing field"):
        load_engine_profiles(extra_paths=[mine])


def test_attention_fits_load_from_preset_files(tmp_path):
    mine = tmp_path / "fit.toml"
    mine.write_text('[gpus.h200]\nsm_count = 132\n\n[attention.h200.flash]\n'
                    'compute_efficiency_fraction = 0.5\n'
                    'memory_bandwidth_efficiency_fraction = 0.9\n')
    presets = load_presets([mine])
    assert presets.gpu("h200").sm_count == 132
    (fit,) = [f for f in presets.attention if f.gpu_id == "h200" and f.kernel == "flash"]
    assert fit.compute_efficiency_fraction == 0.5
    mine.write_text('[attention.h200.xformers]\ncompute_efficiency_fraction = 0.5\n'
                    'memory_bandwidth_efficiency_fraction = 0.9\n')
    with pytest.raises(CostModelInputError, match="attention.h200.xformers"):
        load_presets([mine])
    mine.write_text('[attention.h200.flash]\ncompute_efficiency_fraction = 0.5\n')
    with pytest.raises(CostModelInputError, match="missing field"):
        load_presets([mine])


def test_prefill_runs_the_lm_head_on_the_last_position_only(presets):
    engine = _engine()
    forward = _pass_ms(presets, engine, batch=2, positions=1024, context=0)
    prefill = _pass_ms(presets, engine, batch=2, positions=1024, context=0, prefill=True)
    assert prefill.layers_non_attention_ms == pytest.approx(forward.layers_non_attention_ms)
    assert prefill.attention_ms == pytest.approx(forward.attention_ms)  # roofline: same pairs
    decode_head = _pass_ms(presets, engine, batch=2, positions=1, context=1024).lm_head_ms
    assert prefill.lm_head_ms == pytest.approx(decode_head, rel=1e-3)
    m = HardwareCostModel.from_presets("h100-sxm", "llama-3.1-8b", draft="llama-3.2-1b",
                                       engine=engine)
    physics, overhead = m.prefill_parts(2, 1024)
    assert float(physics) == pytest.approx(prefill.total_ms) and float(overhead) == 0.0
    assert m.prefill_time(np.array([0, 1]), 64)[0] == 0.0
    assert m.prefill_time(1, 64, network="draft") < m.prefill_time(1, 64)
    with pytest.raises(CostModelInputError, match="network"):
        m.prefill_time(1, 64, network="both")
