"""A model from its config.json (src/costmodel/hf_config.py): the files below carry the published
values of each model's Hugging Face config.json (the fields the reader uses); no download."""
from __future__ import annotations

import json
from dataclasses import fields

import pytest

from src import stepcalc
from src.costmodel import CostModelInputError, load_presets
from src.hardware.scenario import scenario_from_dict

FP8_BLOCK = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
             "weight_block_size": [128, 128]}
QWEN3_MOE_30B = {
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 2048,
    "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4,
    "head_dim": 128, "intermediate_size": 6144, "moe_intermediate_size": 768,
    "num_experts": 128, "num_experts_per_tok": 8, "decoder_sparse_step": 1,
    "mlp_only_layers": [], "norm_topk_prob": True, "vocab_size": 151936,
    "tie_word_embeddings": False, "attention_bias": False}
QWEN3_MOE_235B = {**QWEN3_MOE_30B, "hidden_size": 4096, "num_hidden_layers": 94,
                  "num_attention_heads": 64, "intermediate_size": 12288,
                  "moe_intermediate_size": 1536}
GPT_OSS_120B = {
    "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "hidden_size": 2880,
    "num_hidden_layers": 36, "num_attention_heads": 64, "num_key_value_heads": 8,
    "head_dim": 64, "intermediate_size": 2880, "num_local_experts": 128,
    "experts_per_token": 4, "num_experts_per_tok": 4, "sliding_window": 128,
    "layer_types": ["sliding_attention", "full_attention"] * 18, "vocab_size": 201088,
    "tie_word_embeddings": False, "attention_bias": True,
    "quantization_config": {"modules_to_not_convert": [
        "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens",
        "lm_head"], "quant_method": "mxfp4"}}
CONFIGS = {
    "qwen3-30b-a3b": QWEN3_MOE_30B,
    "qwen3-30b-a3b-fp8": {**QWEN3_MOE_30B, "quantization_config": FP8_BLOCK},
    "qwen3-235b-a22b": QWEN3_MOE_235B,
    "qwen3-235b-a22b-fp8": {**QWEN3_MOE_235B, "quantization_config": FP8_BLOCK},
    "deepseek-v3": {
        "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
        "hidden_size": 7168, "num_hidden_layers": 61, "num_attention_heads": 128,
        "num_key_value_heads": 128, "intermediate_size": 18432, "moe_intermediate_size": 2048,
        "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 8,
        "first_k_dense_replace": 3, "n_group": 8, "topk_group": 4, "q_lora_rank": 1536,
        "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
        "v_head_dim": 128, "num_nextn_predict_layers": 1, "vocab_size": 129280,
        "tie_word_embeddings": False, "attention_bias": False,
        "quantization_config": FP8_BLOCK},
    "gpt-oss-120b": GPT_OSS_120B,
    "gpt-oss-20b": {**GPT_OSS_120B, "num_hidden_layers": 24, "num_local_experts": 32,
                    "layer_types": ["sliding_attention", "full_attention"] * 12},
    "mixtral-8x7b": {
        "architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": 4096,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
        "intermediate_size": 14336, "num_local_experts": 8, "num_experts_per_tok": 2,
        "vocab_size": 32000, "tie_word_embeddings": False, "sliding_window": None},
    "qwen3-30b-a3b-eagle3": {
        "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": 2048,
        "num_hidden_layers": 1, "num_attention_heads": 32, "num_key_value_heads": 4,
        "head_dim": 128, "intermediate_size": 12288, "vocab_size": 151936,
        "draft_vocab_size": 32000, "tie_word_embeddings": False, "attention_bias": False},
    "llama-3.1-8b": {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
        "head_dim": 128, "intermediate_size": 14336, "vocab_size": 128256,
        "tie_word_embeddings": False, "attention_bias": False},
    "qwen2.5-7b": {
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 3584,
        "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
        "intermediate_size": 18944, "vocab_size": 152064, "tie_word_embeddings": False},
}
IDENTITY = ("model_id", "hf_name", "source", "weights_repository",
            "eagle_head_n_kv_heads")  # the published EAGLE head's, not in the target's config


def _write(tmp_path, name, data) -> str:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(data))
    return str(path)


@pytest.mark.parametrize("preset_id", sorted(CONFIGS))
def test_a_preset_read_from_config_json_equals_the_builtin_field_by_field(tmp_path, preset_id):
    presets = load_presets()
    built_in = presets.model(preset_id)
    read = presets.model(_write(tmp_path, preset_id, CONFIGS[preset_id]))
    for f in fields(built_in):
        if f.name not in IDENTITY:
            assert getattr(read, f.name) == getattr(built_in, f.name), f.name
    assert read.weight_bytes == built_in.weight_bytes


def test_step_time_takes_a_config_json(tmp_path, capsys):
    path = _write(tmp_path, "qwen3", CONFIGS["qwen3-30b-a3b"])
    assert stepcalc.main(["--gpu", "h100-sxm", "--model", path, "--positions", "1,4",
                          "--csv"]) == 0
    by_path = capsys.readouterr().out
    assert stepcalc.main(["--gpu", "h100-sxm", "--model", "qwen3-30b-a3b", "--positions", "1,4",
                          "--csv"]) == 0
    assert by_path == capsys.readouterr().out


@pytest.mark.parametrize("text, message", [
    ("{not json", "is not JSON (Expecting property name"),
    ("[1, 2]", "holds no JSON object"),
    (json.dumps({"architectures": ["FalconForCausalLM"]}),
     "architecture FalconForCausalLM is not modelled; allowed:"),
    (json.dumps({**QWEN3_MOE_30B, "num_experts_per_tok": 200}),
     "num_experts_per_tok = 200 exceeds the 128 routed experts; allowed: 1..128"),
    (json.dumps({k: v for k, v in QWEN3_MOE_30B.items() if k != "moe_intermediate_size"}),
     "moe_intermediate_size is missing (qwen3_moe)"),
    (json.dumps({**QWEN3_MOE_30B, "quantization_config": {"quant_method": "awq"}}),
     "quantization_config.quant_method 'awq' is not modelled"),
])
def test_bad_config_json_one_line_exit_2(tmp_path, capsys, text, message):
    path = tmp_path / "config.json"
    path.write_text(text)
    out_dir = tmp_path / "out"
    assert stepcalc.main(["--gpu", "h100-sxm", "--model", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1 and not out_dir.exists()
    assert err.startswith("error: --model: ") and message in err


def test_missing_config_file(capsys):
    assert stepcalc.main(["--gpu", "h100-sxm", "--model", "/nonexistent/config.json"]) == 2
    assert "file not found: /nonexistent/config.json" in capsys.readouterr().err


def test_scenario_target_and_draft_from_config_json(tmp_path):
    path = _write(tmp_path, "qwen3", CONFIGS["qwen3-30b-a3b-fp8"])
    head = _write(tmp_path, "head", CONFIGS["qwen3-30b-a3b-eagle3"])
    sc = scenario_from_dict({"scenario": {"name": "x", "gpu": "h100-sxm", "target": "qwen3.json",
                                          "draft": "head.json"},
                             "study": {"batch_sizes": [1, 8], "gammas": [1, 3]}},
                            source_path=str(tmp_path / "s.toml"))
    assert sc.target_model_id == path and sc.draft == head and sc.draft_tp == 1
    assert sc.cost_model("ideal").draft.kind == "eagle3"
    bad = _write(tmp_path, "bad", {**QWEN3_MOE_30B, "num_experts_per_tok": 129})
    with pytest.raises(Exception) as e:
        scenario_from_dict({"scenario": {"name": "x", "gpu": "h100-sxm", "target": bad,
                                         "draft": "ngram"}})
    assert e.value.field_name == "scenario.target" and "exceeds the 128" in str(e.value)
    assert not isinstance(e.value, CostModelInputError)


@pytest.mark.parametrize("draft", ["qwen3-30b-a3b-eagle3", "ngram"])
def test_recommend_names_the_flag_of_a_bad_config_json(tmp_path, draft):
    """A bad --target config.json is named --target whatever the draft (a model-preset draft used
    to report it as 'model:', from the vocabulary check that reads both)."""
    from tests.helpers import run_captured
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    rc, out, err = run_captured(["recommend", "--gpu", "h100-sxm", "--target", str(bad),
                                 "--draft", draft, "--acceptance", "0.7"])
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert err.startswith("error: --target: ") and "is not JSON" in err
    good = _write(tmp_path, "target", CONFIGS["qwen3-30b-a3b-fp8"])
    head = _write(tmp_path, "head", {**QWEN3_MOE_30B, "num_experts_per_tok": 200})
    rc, _, err = run_captured(["recommend", "--gpu", "h100-sxm", "--target", good,
                               "--draft", head, "--acceptance", "0.7"])
    assert rc == 2 and err.startswith("error: --draft: ") and "exceeds the 128" in err
