"""silicon_sample.csv rows whose model is not bundled, priced as the bundled model of the same
architecture with the row's weight formats (src/validation/silicon_rows.py SAME_ARCHITECTURE),
each pinned by a real row of aiconfigurator-core 0.12.0's CSV."""
import pytest

from src.validation.silicon_rows import SiliconCase, load_rows, map_row

ENGINES = {"vllm-v1", "sglang", "trtllm"}


@pytest.fixture(scope="module")
def rows():
    return load_rows().set_index("id", drop=False)


@pytest.mark.parametrize("row_id, model, tp, ep, weights, experts", [
    ("meta_llama_llama_3_1_8b_instruct_meta_llama_llama_3_1_8b_instruct_h100_sxm_trtllm_agg_"
     "1024x128_c8_tp1_epnone_1", "meta-llama/Meta-Llama-3.1-8B", 1, 1, "bf16", ""),
    ("meta_llama_llama_3_1_8b_instruct_meta_llama_llama_3_1_8b_instruct_h200_sxm_sglang_agg_"
     "1000x100_c160_tp1_epnone_1", "meta-llama/Meta-Llama-3.1-8B", 1, 1, "fp8-block", ""),
    ("nvidia_llama_3_1_8b_instruct_fp8_nvidia_llama_3_1_8b_instruct_fp8_h200_sxm_vllm_agg_"
     "1000x100_c112_tp1_epnone_1", "meta-llama/Meta-Llama-3.1-8B", 1, 1, "fp8", ""),
    ("nvidia_deepseek_r1_nvfp4_nvidia_deepseek_r1_nvfp4_b200_sxm_trtllm_agg_4000x1000_c224_tp4_"
     "epnone_1", "deepseek-ai/DeepSeek-R1", 4, 4, "nvfp4", "nvfp4"),
    ("nvidia_qwen3_32b_nvfp4_nvidia_qwen3_32b_nvfp4_b200_sxm_trtllm_agg_15000x500_c416_tp2_0_"
     "epnone_2", "Qwen/Qwen3-32B", 2, 1, "nvfp4", ""),
])
def test_unbundled_models_price_as_their_architecture(rows, row_id, model, tp, ep, weights,
                                                      experts):
    case = map_row(rows.loc[row_id], ENGINES)
    assert isinstance(case, SiliconCase)
    assert (case.model, case.tp, case.ep, case.weight_format, case.expert_weight_format) == (
        model, tp, ep, weights, experts)


def test_the_llama_architecture_is_the_presets():
    """meta-llama/Meta-Llama-3.1-8B's bundled config.json is the llama-3.1-8b preset's shape."""
    from src.costmodel.presets import load_presets
    p = load_presets()
    a, b = p.model("meta-llama/Meta-Llama-3.1-8B", "model"), p.model("llama-3.1-8b")
    for f in ("hidden_size", "n_layers", "n_heads", "n_kv_heads", "head_dim",
              "intermediate_size", "vocab_size"):
        assert getattr(a, f) == getattr(b, f), f


def test_a_layout_that_cannot_hold_the_concurrencys_kv_is_refused(rows):
    """DeepSeek-R1 labelled tp 64 on GB200 at concurrency 538, ISL 8192 / OSL 1024: MLA's latent
    KV is replicated on every TP rank, so a GPU holds about 249 such sequences (design.md, "The
    GB200 TensorRT-LLM rows"); the row is refused with the numbers, before any serving run."""
    from src.validation.silicon_serve import predict
    case = map_row(rows.loc["2026_04_06_deepseek_r1_gb200_trtllm_fp4_agg_8192x1024_c538_tp64_"
                            "ep1_113"], ENGINES)
    out = predict(case)
    assert isinstance(out, str) and out.startswith("layout cannot hold KV: tp 64, ep 1 holds ")
    held = int(out.split(" holds ")[1].split()[0])
    assert 200 < held < 300 and out.endswith("of 9216 tokens per replica, the concurrency is 538")


@pytest.mark.parametrize("row_id", [
    # holds its 14 x 15,500 tokens
    "nvidia_qwen3_32b_nvfp4_nvidia_qwen3_32b_nvfp4_gb200_trtllm_agg_15000x500_c448_tp2_0_epnone_2",
    # Llama-3.1-70B FP8 at tp 1 on H200, 128 clients of 9,216 tokens: the model holds ~17, and the
    # engine queued too (measured TTFT 369 s): a real deployment at tp <= 8, kept
    "2026_04_06_llama_3_1_70b_h200_sxm_trtllm_fp8_agg_1024x8192_c128_tp1_ep1_417",
])
def test_layouts_of_one_node_are_not_refused(rows, row_id):
    from src.validation.silicon_serve import kv_hold_refusal, serve_config
    case = map_row(rows.loc[row_id], ENGINES)
    assert kv_hold_refusal(case, serve_config(case).scenario.cost_model()) == ""


@pytest.mark.parametrize("row_id", [
    # vLLM 0.12.0 on H200, labelled gemm/moe `fp8`: Qwen/Qwen3-235B-A22B-FP8's config.json has
    # quantization_config.weight_block_size [128, 128], so vLLM's Fp8Config takes the block path
    "qwen_qwen3_235b_a22b_fp8_qwen_qwen3_235b_a22b_fp8_h200_sxm_vllm_agg_1000x100_c16_tp2_epnone_1",
])
def test_an_fp8_label_on_a_block_fp8_checkpoint_prices_block_fp8(rows, row_id):
    row = rows.loc[row_id]
    assert (row["gemm_quant_mode"], row["moe_quant_mode"]) == ("fp8", "fp8")
    case = map_row(row, ENGINES)
    assert isinstance(case, SiliconCase), case
    assert (case.weight_format, case.expert_weight_format) == ("fp8-block", "fp8-block")


def test_an_fp8_label_on_a_bf16_checkpoint_stays_per_tensor_fp8(rows):
    row = rows.loc["nvidia_llama_3_1_8b_instruct_fp8_nvidia_llama_3_1_8b_instruct_fp8_h200_sxm_"
                   "vllm_agg_1000x100_c112_tp1_epnone_1"]
    case = map_row(row, ENGINES)
    assert case.weight_format == "fp8"
