"""Mixture-of-Experts, MLA, sliding windows, number formats and the mtp / eagle3 drafts in the
hardware cost model (src/costmodel/moe.py, formats.py, shapes.py, variants.py, drafts.py)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from src import stepcalc
from src.costmodel import (
    CostModelInputError,
    HardwareCostModel,
    engine_profile,
    expected_distinct_experts,
    forward_pass_breakdown,
    load_presets,
    simulate_distinct_experts,
)
from src.costmodel.formats import gemm_peak_flops_per_s
from src.costmodel.moe import DEFAULT_ROUTING_LOCALITY


@pytest.fixture(scope="module")
def presets():
    return load_presets()


def _model(presets, gpu, target, tp=1, **kw):
    return HardwareCostModel(gpu=presets.gpu(gpu), target=target, tp=tp,
                             engine=engine_profile("ideal"), params=presets.params,
                             allreduce=presets.allreduce, attention_fits=presets.attention, **kw)


def _pass_ms(cost, batch, positions, context=1024):
    active = np.ones((1, batch), bool)
    return float(cost.target_pass_time(active, positions, np.full((1, batch), context))[0])


# ------------------------------------------------------------------ routing: distinct experts

def test_uniform_closed_form_matches_the_published_fractions():
    # moe-and-trees reference: (E, k) = (128, 8): 6% at T=1, 23% at T=4, 64% at T=16, 98% at 64
    frac = expected_distinct_experts(128, 8, np.array([1, 4, 16, 64]), 1) / 128
    assert np.round(frac, 2).tolist() == [0.06, 0.23, 0.64, 0.98]
    # one sequence of T tokens under uniform routing = T sequences of one token
    assert expected_distinct_experts(128, 8, 1, 16) == pytest.approx(
        expected_distinct_experts(128, 8, 16, 1), rel=1e-12)
    assert expected_distinct_experts(128, 8, 0, 4) == 0.0


@pytest.mark.parametrize("E, k, S, t, rho", [
    (128, 8, 1, 4, 0.0), (128, 8, 2, 5, DEFAULT_ROUTING_LOCALITY), (32, 4, 1, 8, 0.6),
    (8, 2, 3, 4, 0.3), (256, 8, 4, 2, 0.9)])
def test_distinct_experts_matches_a_monte_carlo_of_the_routing_model(E, k, S, t, rho):
    draws = simulate_distinct_experts(E, k, S, t, rho, n_trials=3000, seed=E + S + t)
    mean, se = draws.mean(), draws.std(ddof=1) / np.sqrt(draws.size)
    expected = float(expected_distinct_experts(E, k, S, t, rho))
    assert abs(mean - expected) < 4 * se + 1e-9, (mean, se, expected)


def test_default_locality_reproduces_its_measurement():
    # consecutive tokens share rho + (1 - rho) k/E of their experts: 25.7% measured for
    # GLM-4.7-Flash (64 experts, top-4; ml-explore/mlx-lm PR #1485); two tokens touch 2k - shared
    E, k = 64, 4
    two = float(expected_distinct_experts(E, k, 1, 2, DEFAULT_ROUTING_LOCALITY))
    assert (2 * k - two) / k == pytest.approx(0.257, abs=1e-9)


# ------------------------------------------------------------------ the verification premium

def test_moe_verification_costs_several_decode_steps_dense_about_one(presets, capsys):
    # the check: Qwen3-30B-A3B at batch 1, a 4-token verification vs one decode step
    rc = stepcalc.main(["--gpu", "h100-sxm", "--model", "qwen3-30b-a3b", "--batch", "1",
                        "--positions", "1,4", "--csv"])
    out = capsys.readouterr().out.splitlines()
    assert rc == 0 and out[0].split(",") == list(stepcalc.COLUMNS)
    rows = [dict(zip(stepcalc.COLUMNS, line.split(","))) for line in out[1:]]
    assert float(rows[0]["distinct_experts"]) == 8.0  # decode: the token's k experts
    assert float(rows[1]["distinct_experts"]) > 2.5 * 8  # 4 tokens: ~25 of 128 experts
    moe_premium = float(rows[1]["vs_decode"])
    rc = stepcalc.main(["--gpu", "h100-sxm", "--model", "llama-3.1-8b", "--batch", "1",
                        "--positions", "1,4", "--csv"])
    dense = [line.split(",") for line in capsys.readouterr().out.splitlines()[1:]]
    dense_premium = float(dense[1][stepcalc.COLUMNS.index("vs_decode")])
    assert dense_premium < 1.02 and moe_premium > 1.4
    # uniform routing (no reuse between a request's consecutive tokens) costs more still
    uni = _model(presets, "h100-sxm", replace(presets.model("qwen3-30b-a3b"), routing="uniform"))
    loc = _model(presets, "h100-sxm", presets.model("qwen3-30b-a3b"))
    assert _pass_ms(uni, 1, 4) / _pass_ms(uni, 1, 1) > _pass_ms(loc, 1, 4) / _pass_ms(loc, 1, 1)


def test_regimes_expert_bandwidth_then_all_experts_then_compute(presets):
    gpu, m, p = presets.gpu("h200"), presets.model("qwen3-30b-a3b"), presets.params
    per_token = {}
    for tokens in (1, 4, 64, 512, 8192):
        bd = forward_pass_breakdown(gpu, m, 1, tokens, 1, 0, p, include_step_overhead=False)
        per_token[tokens] = (bd.layers_non_attention_ms, bd.distinct_experts, bd.bound)
    assert per_token[1][1] == 8 and per_token[512][1] > 127.9  # all experts touched
    # expert-bandwidth-bound: the layer time grows with the experts touched (x3.1 from 1 to 4
    # tokens; attention weights and kernel fixed times do not grow)
    assert per_token[4][1] / per_token[1][1] > 3.0
    assert per_token[4][0] / per_token[1][0] > 1.5
    # all experts read: 8x the tokens cost little more (64 -> 512)
    assert per_token[512][0] / per_token[64][0] < 2.0
    assert per_token[1][2] == "memory" and per_token[8192][2] == "compute"


# ------------------------------------------------------------------ memory, formats, parallelism

def test_memory_refuses_deepseek_v3_on_one_h100_and_names_the_smallest_tp(presets):
    with pytest.raises(CostModelInputError) as e:
        _model(presets, "h100-sxm", presets.model("deepseek-v3"))
    assert e.value.field_name == "tp"
    assert "673.1 GB of weights" in str(e.value) and "tp >= 16" in str(e.value)
    with pytest.raises(CostModelInputError, match="tp >= 16"):  # 8 x 80 GB is not enough
        _model(presets, "h100-sxm", presets.model("deepseek-v3"), tp=8)
    _model(presets, "h200", presets.model("deepseek-v3"), tp=8)  # 8 x 141 GB holds it


def test_real_bytes_per_format(presets):
    bf16, fp8 = presets.model("qwen3-30b-a3b"), presets.model("qwen3-30b-a3b-fp8")
    assert bf16.total_params == fp8.total_params
    assert fp8.weight_bytes / bf16.weight_bytes == pytest.approx(0.51, abs=0.01)  # BF16 head
    oss = presets.model("gpt-oss-120b")  # MXFP4 experts (4.25 bits), the rest BF16
    assert oss.weight_bytes / 1e9 == pytest.approx(65.2, abs=0.2)
    assert oss.total_params / 1e9 == pytest.approx(116.8, abs=0.1)  # model card: 117B


def test_tensor_core_rate_per_format_and_gpu(presets):
    h100, a100, b200 = presets.gpu("h100-sxm"), presets.gpu("a100-80gb-sxm"), presets.gpu("b200")
    assert gemm_peak_flops_per_s(h100, "fp8-block") == 1979e12  # FP8 tensor cores
    assert gemm_peak_flops_per_s(a100, "fp8") == 312e12  # Ampere: upcast to BF16
    assert gemm_peak_flops_per_s(h100, "mxfp4") == 989.4e12  # Hopper: weight-only MXFP4
    assert gemm_peak_flops_per_s(b200, "nvfp4") == 9000e12
    with pytest.raises(ValueError):
        gemm_peak_flops_per_s(h100, "nvfp4")
    # FP8 speeds a compute-bound pass's GEMMs up on an H100 (its FP8 tensor cores; the BF16
    # router and elementwise work stay), not on an A100 (upcast)
    ratio = {}
    for gpu in ("h100-sxm", "a100-80gb-sxm"):
        g, p = presets.gpu(gpu), presets.params
        bf = forward_pass_breakdown(g, presets.model("qwen3-30b-a3b"), 1, 8192, 1, 0, p)
        f8 = forward_pass_breakdown(g, presets.model("qwen3-30b-a3b-fp8"), 1, 8192, 1, 0, p)
        assert bf.bound == "compute"
        ratio[gpu] = f8.layers_non_attention_ms / bf.layers_non_attention_ms
    assert ratio["h100-sxm"] < 0.7 and ratio["a100-80gb-sxm"] > 0.93


def test_a_format_the_gpu_cannot_run_is_refused(presets, tmp_path, capsys):
    toml = tmp_path / "nvfp4.toml"
    toml.write_text('[models."mixtral-nvfp4"]\nhf_name = "x"\nn_layers = 32\nhidden_size = 4096\n'
                    'n_heads = 32\nn_kv_heads = 8\nhead_dim = 128\nintermediate_size = 14336\n'
                    'vocab_size = 32000\ntied_embeddings = false\nqkv_bias = false\n'
                    'source = "test"\nn_routed_experts = 8\nexperts_per_token = 2\n'
                    'moe_intermediate_size = 14336\nweight_format = "nvfp4"\n')
    argv = ["--gpu", "h100-sxm", "--model", "mixtral-nvfp4", "--presets", str(toml)]
    assert stepcalc.main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1
    assert "weight_format nvfp4, which h100-sxm cannot run" in err
    assert stepcalc.main(["--gpu", "b200", "--model", "mixtral-nvfp4", "--presets", str(toml)]) == 0


def test_top_k_above_the_experts_is_refused(tmp_path, capsys):
    toml = tmp_path / "bad.toml"
    toml.write_text('[models."qwen3-30b-a3b"]\nexperts_per_token = 129\n')
    assert stepcalc.main(["--gpu", "h100-sxm", "--model", "qwen3-30b-a3b", "--presets",
                          str(toml)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1
    assert "experts_per_token: 129 with 128 routed experts; allowed: 1..128" in err


def test_ep_must_divide_the_experts(presets, capsys):
    assert stepcalc.main(["--gpu", "h200", "--model", "deepseek-v3", "--tp", "8", "--ep", "3"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("error: --ep: 3 does not divide the 256 routed experts")
    assert len(err.splitlines()) == 1
    with pytest.raises(CostModelInputError, match="no routed experts"):
        _model(presets, "h100-sxm", presets.model("llama-3.1-8b"), tp=2, ep=2)


def test_ep_on_one_gpu_says_what_to_change(capsys):
    """--ep 2 at tp 1: the allowed list names one value and what to do, not "1 or 1"."""
    assert stepcalc.main(["--gpu", "h100-sxm", "--model", "qwen3-30b-a3b", "--ep", "2"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1
    assert "allowed: 1 (one GPU: raise --tp to spread the experts)" in err
    assert "1 or 1" not in err


def test_ep_spreads_whole_experts_over_the_gpus(presets):
    m = presets.model("deepseek-v3")
    tp_only = _model(presets, "h200", m, tp=8)
    ep = _model(presets, "h200", m, tp=8, ep=8)
    # decode at batch 1: 8 touched experts; TP reads 1/8 of each on every GPU, EP whole experts,
    # and the layer waits for the GPU holding the most of them (about 2.5 of the 8)
    assert _pass_ms(ep, 1, 1) > _pass_ms(tp_only, 1, 1)
    # every expert touched: each GPU reads its 32 whole experts, TP 1/8 of all 256: the same
    assert _pass_ms(ep, 256, 4) == pytest.approx(_pass_ms(tp_only, 256, 4), rel=0.1)
    assert ep.kv_fits(1, 1024)[1] == pytest.approx(tp_only.kv_fits(1, 1024)[1])


def test_slowest_gpu_experts_against_a_monte_carlo_of_the_split():
    from src.costmodel.variants import slowest_gpu_experts

    rng = np.random.default_rng(7)
    for E, ep, D in ((256, 8, 8), (256, 8, 64), (128, 4, 30)):
        # D distinct experts drawn without replacement; expert e lives on GPU e // (E / ep)
        draws = np.array([np.bincount(rng.choice(E, D, replace=False) // (E // ep),
                                      minlength=ep).max() for _ in range(4000)])
        # independent binomials stand in for the hypergeometric split: within 7%
        assert float(slowest_gpu_experts(E, ep, D)) == pytest.approx(draws.mean(), rel=0.07)
    assert float(slowest_gpu_experts(256, 8, 256)) == pytest.approx(32.0)


# ------------------------------------------------------------------ attention variants

def test_mla_caches_the_latent_once_per_token_replicated_over_tp(presets):
    m = presets.model("deepseek-v3")
    assert m.kv_bytes_per_token == 61 * (512 + 64) * 2  # kv_lora_rank + qk_rope_head_dim, BF16
    one, eight = _model(presets, "h200", m, tp=8), _model(presets, "h200", m, tp=8)
    per_token_gb = (one.kv_fits(1, 10_001)[1] - one.kv_fits(1, 1)[1]) / 10_000
    assert per_token_gb * 1e9 == pytest.approx(m.kv_bytes_per_token)  # not divided by tp=8
    assert eight is not one


def test_sliding_window_layers_stop_growing_with_context(presets):
    gpu, p = presets.gpu("h200"), presets.params
    oss = presets.model("gpt-oss-120b")
    full = replace(oss, sliding_window_tokens=0, sliding_window_layers=0)

    def slope(model):
        a = forward_pass_breakdown(gpu, model, 1, 8, 1, 16384, p).attention_ms
        b = forward_pass_breakdown(gpu, model, 1, 8, 1, 32768, p).attention_ms
        return b - a

    assert slope(oss) / slope(full) == pytest.approx(0.5, abs=0.02)  # half the layers windowed
    # the window layers hold at most 128 tokens of KV per sequence
    cost = _model(presets, "h200", oss)
    assert cost.kv_fits(1, 1)[1] < cost.kv_fits(1, 100_000)[1]
    per_token = (cost.kv_fits(1, 100_001)[1] - cost.kv_fits(1, 1)[1]) / 100_000 * 1e9
    assert per_token == pytest.approx(18 * 2 * 8 * 64 * 2)  # only the 18 full layers


# ------------------------------------------------------------------ drafts: mtp and eagle3

def test_mtp_draft_of_deepseek_v3(presets):
    cost = HardwareCostModel.from_presets("h200", "deepseek-v3", tp=8, draft="mtp",
                                          engine="ideal")
    plain = HardwareCostModel.from_presets("h200", "deepseek-v3", tp=8, engine="ideal")
    extra_gb = cost.kv_fits(1, 0)[1] - plain.kv_fits(1, 0)[1]
    assert extra_gb * 8 == pytest.approx(11.6, abs=0.2)  # 11.5B parameters, FP8 (README_WEIGHTS)
    active = np.ones((1, 1), bool)
    draft = float(cost.draft_passes_time(active, 1, np.full((1, 1), 1024))[0])
    target = _pass_ms(plain, 1, 1)
    assert 0.02 < draft / target < 0.2  # one of 61 layers + the shared LM head
    two = float(cost.draft_passes_time(active, 2, np.full((1, 1), 1024))[0])
    assert two == pytest.approx(2 * draft, rel=0.01)  # applied autoregressively
    with pytest.raises(CostModelInputError, match="needs a target with an MTP module"):
        HardwareCostModel.from_presets("h100-sxm", "qwen3-30b-a3b", draft="mtp", engine="ideal")


def test_eagle3_head_preset_and_derived_head(presets):
    head = presets.model("qwen3-30b-a3b-eagle3")
    cost = HardwareCostModel.from_presets("h100-sxm", "qwen3-30b-a3b-fp8",
                                          draft="qwen3-30b-a3b-eagle3", engine="ideal")
    assert cost.draft.kind == "eagle3" and cost.draft.model == head
    plain = HardwareCostModel.from_presets("h100-sxm", "qwen3-30b-a3b-fp8", engine="ideal")
    extra = (cost.kv_fits(1, 0)[1] - plain.kv_fits(1, 0)[1]) * 1e9
    # own weights: attention over 2h, MLP, fc 3h -> h, LM head over 32000 tokens (no embedding)
    h = 2048
    expected = (2 * h * (4096 + 2 * 512) + 4096 * h + 2 * h + 3 * h * 12288 + 32000 * h + h
                + 3 * h * h) * 2
    assert extra == pytest.approx(expected)
    kv = (cost.kv_fits(1, 1001)[1] - cost.kv_fits(1, 1)[1]) / 1000 * 1e9
    assert kv == pytest.approx(plain.target.kv_bytes_per_token * (1 + 1 / 48))  # + one layer
    derived = HardwareCostModel.from_presets("h100-sxm", "llama-3.1-8b", draft="eagle3",
                                             engine="ideal")
    assert derived.draft.kind == "eagle3"
    active, ctx = np.ones((1, 4), bool), np.full((1, 4), 512)
    assert derived.draft_passes_time(active, 3, ctx)[0] < derived.target_pass_time(
        active, 1, ctx)[0]
    with pytest.raises(CostModelInputError, match="cannot be derived"):
        HardwareCostModel.from_presets("h200", "deepseek-v3", tp=8, draft="eagle3",
                                       engine="ideal")


def test_fp8_kv_cache_halves_the_cache(presets):
    m = presets.model("qwen3-30b-a3b-fp8")
    assert replace(m, kv_cache_format="fp8").kv_bytes_per_token * 2 == m.kv_bytes_per_token
    mla = presets.model("deepseek-v3")
    assert replace(mla, kv_cache_format="fp8").kv_bytes_per_token == 61 * 576


def test_engine_per_step_call_agrees_with_the_pass_calls_for_moe(presets):
    # the serving engine's step_ms (lookup tables over (S, t)) = target_pass_time + drafts
    from src.costmodel import PassLoad

    cost = HardwareCostModel.from_presets("h200", "deepseek-v3", tp=8, draft="mtp",
                                          engine="vllm-v1")
    active = np.ones((1, 8), bool)
    ctx = np.full((1, 8), 2048)
    target, draft = cost.step_ms(PassLoad.from_masks(active, ctx), 3)
    assert target[0] == pytest.approx(cost.target_pass_time(active, 4, ctx)[0], rel=1e-9)
    assert draft[0] == pytest.approx(cost.draft_passes_time(active, 3, ctx)[0], rel=1e-9)


def test_eagle_head_of_a_moe_target_is_one_dense_layer(presets):
    cost = HardwareCostModel.from_presets("h100-sxm", "mixtral-8x7b", tp=2, draft="eagle",
                                          engine="ideal")
    plain = HardwareCostModel.from_presets("h100-sxm", "mixtral-8x7b", tp=2, engine="ideal")
    # attention (32 query and 32 KV heads: the head is full multi-head attention) + a dense
    # SwiGLU of intermediate_size + the 2h -> h fc: 0.277B parameters, the 0.28B the EAGLE
    # README lists for yuhuili/EAGLE-mixtral-instruct-8x7B (with Mixtral's 8 KV heads: 0.25B)
    h, inter = 4096, 14336
    expected = (h * (4096 + 2 * 4096) + 4096 * h + 2 * h + 3 * h * inter + 2 * h * h) * 2 / 2
    assert round(expected * 2 / 2 / 1e9, 2) == 0.28
    assert (cost.kv_fits(1, 0)[1] - plain.kv_fits(1, 0)[1]) * 1e9 == pytest.approx(expected)


def test_dense_equivalent_has_the_active_size_and_no_verification_premium(presets):
    from src.costmodel.shapes import dense_equivalent

    moe = presets.model("qwen3-30b-a3b")
    dense = dense_equivalent(moe)
    # the same parameters per token, but the router (h x k instead of h x E)
    router_gap = moe.n_layers * moe.hidden_size * (moe.n_routed_experts - moe.experts_per_token)
    assert dense.total_params == moe.active_params - router_gap
    cost = _model(presets, "h100-sxm", dense)
    assert cost.distinct_experts(np.array([1, 64]), 4).tolist() == [8.0, 8.0]
    assert _pass_ms(cost, 1, 4) / _pass_ms(cost, 1, 1) < 1.02  # like a dense 8B
    assert _model(presets, "h100-sxm", moe).distinct_experts(1, 4) > 20


def test_mixtral_eagle_head_is_full_multi_head_attention(presets):
    """yuhuili/EAGLE-mixtral-instruct-8x7B has 32 KV heads over Mixtral's 8: its KV cache per
    token is one layer x 2 (K, V) x 32 / tp heads x 128 x 2 bytes, 4x a head of the target's
    attention (what vLLM 0.9.2 refused the pair for); a target without the field keeps its own."""
    from src.costmodel.drafts import DraftSpec, draft_network, eagle_head_from_target
    mixtral = presets.model("mixtral-8x7b")
    assert eagle_head_from_target(mixtral).n_kv_heads == 32 and mixtral.n_kv_heads == 8
    qwen = presets.model("qwen3-30b-a3b")
    assert eagle_head_from_target(qwen).n_kv_heads == qwen.n_kv_heads
    gpu = presets.gpu("h100-sxm")
    _, _, kv, _ = draft_network(gpu, mixtral, 2, DraftSpec(kind="eagle", tp=2), presets.params,
                                presets.allreduce, {})
    assert kv == 2 * (32 // 2) * 128 * 2


@pytest.mark.parametrize("model, tp, share", [("qwen3-235b-a22b-fp8", 8, 192),
                                              ("qwen3-30b-a3b-fp8", 4, 192)])
def test_block_fp8_shards_must_be_whole_blocks(capsys, model, tp, share):
    """vLLM and SGLang refuse 128x128-block FP8 experts split into shares that are not whole
    blocks (vllm-project/vllm #17569: 'The output_size of gate's and up's weight = 192 is not
    divisible by weight quantization block_n = 128'; QwenLM/Qwen3 #1485): one line, exit 2."""
    assert stepcalc.main(["--gpu", "h200", "--model", model, "--tp", str(tp)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1 and err.startswith("error: --tp: ")
    assert f"is {share}, not a multiple of 128" in err and "ep = tp" in err
    # expert parallelism keeps each expert whole: the same model then loads
    assert stepcalc.main(["--gpu", "h200", "--model", model, "--tp", str(tp),
                          "--ep", str(tp)]) == 0
    capsys.readouterr()


def test_block_fp8_shards_that_divide_load(presets):
    from src.costmodel.variants import check_block_shards
    check_block_shards(presets.model("deepseek-v3"), 8)  # 2048/8, 18432/8: whole blocks
    check_block_shards(presets.model("qwen3-235b-a22b-fp8"), 4)  # 1536/4 = 384 = 3 x 128
    check_block_shards(presets.model("qwen3-235b-a22b"), 8)  # BF16: no blocks
