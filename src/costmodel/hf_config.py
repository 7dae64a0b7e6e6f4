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
import re

from src.config import ConfigError, read_text_file

DENSE = {"LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral",
         "Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3"}
MOE = {"Qwen3MoeForCausalLM": "qwen3_moe", "MixtralForCausalLM": "mixtral",
       "GptOssForCausalLM": "gpt_oss", "DeepseekV3ForCausalLM": "deepseek_v3"}
EAGLE3 = {"LlamaForCausalLMEagle3": "eagle3"}
KNOWN = {**DENSE, **MOE, **EAGLE3}
# Largest integer taken for any size field: 10^7 is ~40x the largest vocabulary (Gemma's 262,144)
# and ~300x the widest hidden size of a published model; above it the file is not a model's.
MAX_INT = 10_000_000
# What a snippet prints for a config.json without a Hugging Face id in `_name_or_path`: the user
# must replace it (a shell refuses the `<`, so it cannot run unnoticed).
MODEL_ID_PLACEHOLDER = "<hf-model-id>"
# A Hugging Face repository id, org/name (huggingface_hub's repo-id rule: letters, digits, '-',
# '_', '.', at most 96 characters per part).
_REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}")


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
    except RecursionError:  # e.g. 200k nested brackets
        raise ConfigError(field_name, f"{path} nests deeper than the JSON reader allows; expected "
                          "a Hugging Face config.json") from None
    except ValueError as e:  # an integer of more than 4300 digits
        raise ConfigError(field_name, f"{path} is not a readable config.json ({e})") from None
    if not isinstance(data, dict):
        raise ConfigError(field_name, f"{path} holds no JSON object; expected a Hugging Face "
                          "config.json")
    return data


def _arch(data: dict, path: str, field_name: str) -> str:
    archs = data.get("architectures")
    if archs is not None and not (isinstance(archs, list)
                                  and all(isinstance(a, str) for a in archs)):
        raise ConfigError(field_name, f"{path}: architectures must be a list of strings, got "
                          f"{_short(archs)}")
    names = list(archs or [])
    model_type = data.get("model_type")
    if model_type is not None and not isinstance(model_type, str):
        raise ConfigError(field_name, f"{path}: model_type must be a string, got "
                          f"{_short(model_type)}")
    for name in names:
        if name in KNOWN:
            return KNOWN[name]
    if not names and model_type in KNOWN.values():
        return model_type
    shown = ", ".join(map(str, names)) or f"model_type {model_type!r}"
    raise ConfigError(field_name, f"{path}: architecture {shown} is not modelled; allowed: "
                      f"{', '.join(sorted(KNOWN))}")


def _short(value) -> str:
    """repr() of a config value, cut to fit one line."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def model_id_of(data: dict) -> str:
    """The model's Hugging Face id: `_name_or_path` where it is one (org/name), else
    MODEL_ID_PLACEHOLDER (a local folder or no id: the user names the weights)."""
    name = data.get("_name_or_path")
    return name if isinstance(name, str) and _REPO_ID.fullmatch(name) else MODEL_ID_PLACEHOLDER


def snippet_id_note(path: str, model_id: str, role: str = "target") -> str:
    """The line printed beside an engine snippet naming a config.json model by `model_id`."""
    if model_id == MODEL_ID_PLACEHOLDER:
        return (f"(the {role} is the config.json {path}: replace {MODEL_ID_PLACEHOLDER} with its "
                "Hugging Face id or weights folder; the file's _name_or_path names no repository)")
    return (f"(the {role} is the config.json {path}: {model_id} is its _name_or_path; check it "
            "names the weights you serve)")


def snippet_id_notes(target: str, draft: str, models, draft_path: str | None = None) -> list:
    """The note lines (indented) for the config.json models a snippet names by id: the target,
    and a draft printed by its own id (not where --draft-model-path names it)."""
    notes = []
    if looks_like_config_path(target):
        notes.append("  " + snippet_id_note(target, models[target].hf_name))
    if looks_like_config_path(draft) and not draft_path:
        notes.append("  " + snippet_id_note(draft, models[draft].hf_name, "draft"))
    return notes


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
                if isinstance(v, bool) or not isinstance(v, int) or not minimum <= v <= MAX_INT:
                    self.fail(key, f"must be an integer {minimum}..{MAX_INT:,}, got {_short(v)}")
                return v
        if default is None:
            self.fail(" / ".join(keys), "is missing")
        return default

    def strings(self, key: str) -> list:
        """A list of strings (absent or null: empty)."""
        v = self.data.get(key)
        if v is None:
            return []
        if not isinstance(v, list) or not all(isinstance(t, str) for t in v):
            self.fail(key, f"must be a list of strings, got {_short(v)}")
        return v

    def bool(self, key: str, default: bool) -> bool:
        v = self.data.get(key)
        v = default if v is None else v
        if not isinstance(v, bool):
            self.fail(key, f"must be true or false, got {_short(v)}")
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
        f.fail("quantization_config.quant_algo",
               f"{_short(algo)} is not modelled; allowed: FP8, NVFP4")
    f.fail("quantization_config.quant_method",
           f"{_short(method)} is not modelled; allowed: fp8, mxfp4, modelopt")


def model_fields_from_config(path: str, field_name: str) -> dict:
    """ModelSpec keyword arguments (all but model_id) of the config.json at `path`."""
    data = _read_json(path, field_name)
    arch = _arch(data, path, field_name)
    f = _Fields(data, path, field_name, arch)
    h = f.int("hidden_size")
    L = f.int("num_hidden_layers")
    H = f.int("num_attention_heads")
    if "head_dim" not in data or data["head_dim"] is None:
        # transformers derives head_dim = hidden_size // num_attention_heads only where config.json
        # gives none (LlamaAttention, Qwen2Attention: getattr(config, "head_dim", ...)); where it
        # is given (Qwen3, gpt-oss) hidden_size need not be heads x head_dim
        if arch != "deepseek_v3" and h % H:
            f.fail("hidden_size", f"= {h} is not divisible by num_attention_heads = {H}, and no "
                   "head_dim is given; allowed: a multiple of the heads, or an explicit head_dim")
    out = {
        "hf_name": model_id_of(data), "n_layers": L, "hidden_size": h,
        "n_heads": H, "n_kv_heads": f.int("num_key_value_heads", default=H),
        "head_dim": f.int("head_dim", default=h // H),
        "intermediate_size": f.int("intermediate_size"), "vocab_size": f.int("vocab_size"),
        "tied_embeddings": f.bool("tie_word_embeddings", False),
        "qkv_bias": True if arch == "qwen2" else f.bool("attention_bias", False),
        "source": f"{path} (config.json)",
    }
    kv = out["n_kv_heads"]
    if kv > H or H % kv:  # each KV head serves a whole group of H / kv query heads
        f.fail("num_key_value_heads", f"= {kv} does not divide num_attention_heads = {H}; "
               f"allowed: a divisor of {H}")
    if arch == "qwen3_moe":
        E = f.int("num_experts")
        step = f.int("decoder_sparse_step", default=1)
        only = data.get("mlp_only_layers") or []
        if not isinstance(only, list) or not all(
                isinstance(i, int) and not isinstance(i, bool) for i in only):
            f.fail("mlp_only_layers", f"must be a list of layer indices, got {_short(only)}")
        moe_layers = sum(1 for i in range(L) if i not in only and (i + 1) % step == 0)
        out.update(n_routed_experts=E, experts_per_token=f.int("num_experts_per_tok"),
                   moe_intermediate_size=f.int("moe_intermediate_size"),
                   first_k_dense_replace=L - moe_layers)
    elif arch == "mixtral":
        out.update(n_routed_experts=f.int("num_local_experts"),
                   experts_per_token=f.int("num_experts_per_tok"),
                   moe_intermediate_size=out["intermediate_size"])
    elif arch == "gpt_oss":
        types = f.strings("layer_types")
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
