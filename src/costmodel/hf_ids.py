"""Hugging Face ids resolved offline from the config.json files bundled with aiconfigurator-core.

Wherever a model id is taken, "Qwen/Qwen3-32B" names
<aiconfigurator_core>/model_configs/Qwen--Qwen3-32B_config.json, the file name aiconfigurator-core's
own reader builds (sdk/utils.py, _load_pre_downloaded_hf_config: hf_id.replace("/", "--") +
"_config.json"; its ModelOpt sidecar is "<same>_hf_quant_config.json"). presets.py turns the file
into a ModelSpec through hf_config.py, as for a config.json path; this module only finds files.

    looks_like_hf_id(text)        "org/name" (and not a .json path)
    bundled_config(hf_id)         the bundled config.json of that id, or None
    unknown_id_message(hf_id)     one line: not bundled, with the closest bundled ids (difflib)
    sidecar_formats(hf_id, field_name)
                                  ModelSpec weight formats from the ModelOpt sidecar, for a
                                  config.json that has no quantization_config of its own

The package is located with importlib.util.find_spec (never imported); nothing of the cost model
is imported here.
"""
from __future__ import annotations

import difflib
import importlib.metadata
import importlib.util
import json
import re
from functools import lru_cache
from pathlib import Path

from src.config import ConfigError

PACKAGE, DISTRIBUTION = "aiconfigurator_core", "aiconfigurator-core"
CONFIG_SUFFIX, QUANT_SUFFIX = "_config.json", "_hf_quant_config.json"
# a Hugging Face repository id: namespace/name, letters, digits, '-', '_', '.'
_HF_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")
# ModelOpt quant_algo of a sidecar -> ModelSpec.weight_format (as hf_config.py reads a
# quantization_config with quant_method "modelopt")
SIDECAR_WEIGHT_FORMATS = {"FP8": "fp8", "NVFP4": "nvfp4"}
CLOSEST = 3  # bundled ids named in the unknown-id message


def looks_like_hf_id(text) -> bool:
    """A model argument of the form org/name that is not a path to a .json file."""
    return (isinstance(text, str) and not text.endswith(".json")
            and _HF_ID.fullmatch(text) is not None)


@lru_cache(maxsize=1)
def configs_dir() -> Path | None:
    """<aiconfigurator_core>/model_configs, or None where the package is not installed."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(list(spec.submodule_search_locations)[0]) / "model_configs"
    return root if root.is_dir() else None


def package_label() -> str:
    """e.g. 'aiconfigurator-core 0.12.0' (without a version where it is not installed)."""
    try:
        return f"{DISTRIBUTION} {importlib.metadata.version(DISTRIBUTION)}"
    except importlib.metadata.PackageNotFoundError:
        return DISTRIBUTION


def _file_stem(hf_id: str) -> str:
    return hf_id.replace("/", "--")


@lru_cache(maxsize=1)
def bundled_ids() -> tuple[str, ...]:
    """Every bundled id, sorted: one per <org>--<name>_config.json (sidecars excluded)."""
    root = configs_dir()
    if root is None:
        return ()
    ids = []
    for path in root.glob(f"*{CONFIG_SUFFIX}"):
        name = path.name
        if name.endswith(QUANT_SUFFIX) or "--" not in name:
            continue
        org, _, rest = name[:-len(CONFIG_SUFFIX)].partition("--")
        ids.append(f"{org}/{rest}")
    return tuple(sorted(ids))


def bundled_config(hf_id: str) -> Path | None:
    """The bundled config.json of `hf_id` (exact, case-sensitive, as Hugging Face spells it)."""
    if not looks_like_hf_id(hf_id) or hf_id not in bundled_ids():
        return None
    return configs_dir() / f"{_file_stem(hf_id)}{CONFIG_SUFFIX}"


def display_name(hf_id: str) -> str:
    """How messages and ModelSpec.source name a bundled file, e.g.
    'Qwen/Qwen3-32B (aiconfigurator-core 0.12.0 model_configs/Qwen--Qwen3-32B_config.json)'."""
    return f"{hf_id} ({package_label()} model_configs/{_file_stem(hf_id)}{CONFIG_SUFFIX})"


def unknown_id_message(hf_id: str) -> str:
    """One line: `hf_id` is neither a preset nor bundled; the closest bundled ids (difflib,
    compared case-folded) or how to get the package."""
    ids = bundled_ids()
    if not ids:
        return (f"unknown model '{hf_id}': not a preset, and Hugging Face ids are read from "
                f"{DISTRIBUTION}'s bundled model_configs/, which is not installed "
                "(pip install -r requirements.txt); allowed: a preset id or a config.json path")
    folded = {i.casefold(): i for i in ids}
    close = difflib.get_close_matches(hf_id.casefold(), list(folded), n=CLOSEST, cutoff=0.0)
    return (f"unknown model '{hf_id}': not a preset nor one of the {len(ids)} Hugging Face ids "
            f"bundled with {package_label()}; closest: {', '.join(folded[c] for c in close)}")


def sidecar_formats(hf_id: str, field_name: str) -> dict:
    """{"weight_format": ...} from <id>_hf_quant_config.json where the bundled config.json has no
    quantization_config ({} where it has one, or where there is no sidecar): ModelOpt's
    quantization.quant_algo FP8 -> "fp8", NVFP4 -> "nvfp4"; any other algorithm is refused
    (ConfigError(field_name)). The sidecar's kv_cache_quant_algo is not taken: vLLM and SGLang
    keep the KV cache in the model's dtype unless --kv-cache-dtype says otherwise."""
    config = bundled_config(hf_id)
    sidecar = config.with_name(f"{_file_stem(hf_id)}{QUANT_SUFFIX}") if config else None
    if sidecar is None or not sidecar.is_file():
        return {}
    try:
        if "quantization_config" in json.loads(config.read_text()):
            return {}
        quant = json.loads(sidecar.read_text()).get("quantization") or {}
    except (OSError, ValueError, AttributeError):
        raise ConfigError(field_name, f"{display_name(hf_id)}: its {QUANT_SUFFIX[1:]} is not "
                          "readable JSON") from None
    algo = str(quant.get("quant_algo", "")).upper() if isinstance(quant, dict) else ""
    if algo not in SIDECAR_WEIGHT_FORMATS:
        raise ConfigError(field_name, f"{display_name(hf_id)}: {QUANT_SUFFIX[1:]} quant_algo "
                          f"{algo or '(none)'} is not modelled; allowed: "
                          f"{', '.join(SIDECAR_WEIGHT_FORMATS)}")
    return {"weight_format": SIDECAR_WEIGHT_FORMATS[algo]}
