"""A model preset from a Hugging Face config.json: wherever a model id is taken, a path to one.

    model_fields_from_config(path, field_name) -> dict of ModelSpec fields (presets.py builds and
    checks the ModelSpec; this module imports nothing of the cost model)

Architectures (config.json `architectures[0]`, else `model_type`): Llama, Mistral, Qwen2, Qwen3
(dense); Qwen3-MoE, Mixtral, gpt-oss, DeepSeek-V3 (MoE); LlamaForCausalLMEagle3 (an EAGLE-3 head).
The weight format comes from `quantization_config` (quant_method fp8 -> "fp8", or "fp8-block"
with a weight_block_size; mxfp4 -> the routed experts in "mxfp4"; modelopt NVFP4 -> "nvfp4").
An unknown architecture, a missing field or a value out of range raises ConfigError(field_name,
one line naming it).
"""
from __future__ import annotations

import json

from src.config import ConfigError, read_text_file

DENSE = {"LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral",
         "Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3"}
MOE = {"Qwen3MoeForCausalLM": "qwen3_moe", "MixtralForCausalLM": "mixtral",
       "GptOssForCausalLM": "gpt_oss", "DeepseekV3ForCausalLM": "deepseek_v3"}
EAGLE3 = {"LlamaForCausalLMEagle3": "eagle3"}
KNOWN = {**DENSE, **MOE, **EAGLE3}


def looks_like_config_path(model_id: str) -> bool:
    """A model argument naming a JSON file rather than a preset id."""
    return isinstance(model_id, str) and model_id.endswith(".json")


def _read_json(path: str, field_name: str) -> dict:
    text = read_text_file(path, field_name, "a Hugging Face config.json")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(field_name, f"{path} is not JSON ({e.msg} at line {e.lineno} column "
                          f"{e.colno}); expected a Hugging Face config.json") from None
    if not isinstance(data, dict):
        raise ConfigError(field_name, f"{path} holds no JSON object; expected a Hugging Face "
                          "config.json")
    return data


def _arch(data: dict, path: str, field_name: str) -> str:
    archs = data.get("architectures")
    names = list(archs) if isinstance(archs, list) else []
    for name in names:
        if name in KNOWN:
            return KNOWN[name]
    model_type = data.get("model_type")
    if not names and model_type in KNOWN.values():
        return model_type
    shown = ", ".join(map(str, names)) or f"model_type {model_type!r}"
    raise ConfigError(field_name, f"{path}: architecture {shown} is not modelled; allowed: "
                      f"{', '.join(sorted(KNOWN))}")


class _Fields:
    """config.json look-ups that name the file and field when they fail."""

    def __init__(self, data: dict, path: str, field_name: str, arch: str):
        self.data, self.path, self.field_name, self.arch = data, path, field_name, arch

    def fail(self, key: str, what: str):
        raise ConfigError(self.field_name, f"{self.path}: {key} {what} ({self.arch})")

    def int(self, *keys: str, default=None, minimum: int = 1) -> int:
        for key in keys:
            if key in self.data and self.data[key] is not None:
                v = self.data[key]
                if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
                    self.fail(key, f"must be an integer >= {minimum}, got {v!r}")
                return v
        if default is None:
            self.fail(" / ".join(keys), "is missing")
        return default

    def bool(self, key: str, default: bool) -> bool:
        v = self.data.get(key, default)
        if not isinstance(v, bool):
            self.fail(key, f"must be true or false, got {v!r}")
        return v


def _formats(data: dict, f: _Fields, arch: str) -> dict:
    q = data.get("quantization_config")
    if q is None:
        return {}
    if not isinstance(q, dict):
        f.fail("quantization_config", "must be an object")
    method = str(q.get("quant_method", "")).lower()
    if method == "fp8":
        return {"weight_format": "fp8-block" if q.get("weight_block_size") else "fp8"}
    if method == "mxfp4":
        return {"expert_weight_format": "mxfp4"}
    if method == "modelopt":
        algo = str(q.get("quant_algo", "")).upper()
        if algo in ("FP8", "NVFP4"):
            return {"weight_format": algo.lower()}
        f.fail("quantization_config.quant_algo", f"{algo!r} is not modelled; allowed: FP8, NVFP4")
    f.fail("quantization_config.quant_method", f"{method!r} is not modelled; allowed: fp8, mxfp4, "
           "modelopt")


def model_fields_from_config(path: str, field_name: str) -> dict:
    """ModelSpec keyword arguments (all but model_id) of the config.json at `path`."""
    data = _read_json(path, field_name)
    arch = _arch(data, path, field_name)
    f = _Fields(data, path, field_name, arch)
    h = f.int("hidden_size")
    L = f.int("num_hidden_layers")
    H = f.int("num_attention_heads")
    out = {
        "hf_name": str(data.get("_name_or_path") or path), "n_layers": L, "hidden_size": h,
        "n_heads": H, "n_kv_heads": f.int("num_key_value_heads", default=H),
        "head_dim": f.int("head_dim", default=h // H),
        "intermediate_size": f.int("intermediate_size"), "vocab_size": f.int("vocab_size"),
        "tied_embeddings": f.bool("tie_word_embeddings", False),
        "qkv_bias": True if arch == "qwen2" else f.bool("attention_bias", False),
        "source": f"{path} (config.json)",
    }
    if arch == "qwen3_moe":
        E = f.int("num_experts")
        step = f.int("decoder_sparse_step", default=1)
        only = data.get("mlp_only_layers") or []
        if not isinstance(only, list):
            f.fail("mlp_only_layers", "must be a list of layer indices")
        moe_layers = sum(1 for i in range(L) if i not in only and (i + 1) % step == 0)
        out.update(n_routed_experts=E, experts_per_token=f.int("num_experts_per_tok"),
                   moe_intermediate_size=f.int("moe_intermediate_size"),
                   first_k_dense_replace=L - moe_layers)
    elif arch == "mixtral":
        out.update(n_routed_experts=f.int("num_local_experts"),
                   experts_per_token=f.int("num_experts_per_tok"),
                   moe_intermediate_size=out["intermediate_size"])
    elif arch == "gpt_oss":
        types = data.get("layer_types") or []
        window = f.int("sliding_window", default=0, minimum=0)
        out.update(n_routed_experts=f.int("num_local_experts", "num_experts"),
                   experts_per_token=f.int("num_experts_per_tok", "experts_per_token"),
                   moe_intermediate_size=out["intermediate_size"],
                   sliding_window_tokens=window, attention_sinks=True,
                   sliding_window_layers=sum(t == "sliding_attention" for t in types)
                   if window else 0)
    elif arch == "deepseek_v3":
        nope, rope = f.int("qk_nope_head_dim"), f.int("qk_rope_head_dim")
        out.update(n_routed_experts=f.int("n_routed_experts"),
                   experts_per_token=f.int("num_experts_per_tok"),
                   moe_intermediate_size=f.int("moe_intermediate_size"),
                   n_shared_experts=f.int("n_shared_experts", default=0, minimum=0),
                   first_k_dense_replace=f.int("first_k_dense_replace", default=0, minimum=0),
                   attention="mla", q_lora_rank=f.int("q_lora_rank", default=0, minimum=0),
                   kv_lora_rank=f.int("kv_lora_rank"), qk_nope_head_dim=nope,
                   qk_rope_head_dim=rope, v_head_dim=f.int("v_head_dim"), head_dim=nope + rope,
                   mtp_layers=f.int("num_nextn_predict_layers", default=0, minimum=0))
    elif arch == "eagle3":
        out.update(architecture="eagle3",
                   draft_vocab_size=f.int("draft_vocab_size", default=0, minimum=0))
    if arch in ("qwen3_moe", "mixtral", "gpt_oss", "deepseek_v3"):
        E, k = out["n_routed_experts"], out["experts_per_token"]
        if k > E:
            f.fail("num_experts_per_tok", f"= {k} exceeds the {E} routed experts; allowed: "
                   f"1..{E}")
        if out["first_k_dense_replace"] > L if "first_k_dense_replace" in out else False:
            f.fail("first_k_dense_replace", f"exceeds num_hidden_layers = {L}")
    out.update(_formats(data, f, arch))
    return out
