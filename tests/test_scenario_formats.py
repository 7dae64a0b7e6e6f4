"""A scenario's `ep`, `weights` and `kv_cache` keys (issue 23 section 2): they reach the cost
model's target, the same as setting the preset's fields, and bad values are one line naming
scenario.KEY."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from src.config import ConfigError
from src.costmodel import HardwareCostModel
from src.costmodel.presets import load_presets
from src.hardware.scenario import load_scenario


def _write(tmp_path, lines: str):
    p = tmp_path / "s.toml"
    p.write_text(f'[scenario]\nname = "x"\ngpu = "h200"\ndraft = "ngram"\n{lines}\n[study]\n')
    return p


def _raises(field, path, match):
    with pytest.raises(ConfigError) as info:
        load_scenario(path)
    assert info.value.field_name == field and "\n" not in str(info.value)
    assert match in str(info.value), str(info.value)


def test_weights_and_kv_cache_reprice_the_target_as_the_preset_fields_do(tmp_path):
    s = load_scenario(_write(tmp_path, 'target = "llama-3.1-8b"\nweights = "fp8"\n'
                                       'kv_cache = "fp8"\nengine_profiles = ["ideal"]'))
    cost = s.cost_model()
    spec = replace(load_presets().model("llama-3.1-8b"), weight_format="fp8",
                   expert_weight_format="fp8", kv_cache_format="fp8")
    same = HardwareCostModel(gpu=cost.gpu, target=spec, engine=cost.engine, params=cost.params,
                             allreduce=cost.allreduce, attention_fits=cost.attention_fits)
    assert cost.target == spec
    assert np.array_equal(cost._table_ms("target", 64, 9), same._table_ms("target", 64, 9))
    bf16 = load_scenario(_write(tmp_path, 'target = "llama-3.1-8b"\n'
                                          'engine_profiles = ["ideal"]')).cost_model()
    # FP8 weights: half the layers' bytes of a memory-bound decode pass (the LM head and
    # embeddings stay BF16; measured 0.66 of the BF16 pass)
    assert cost._table_ms("target", 1, 1)[1, 1] < 0.75 * bf16._table_ms("target", 1, 1)[1, 1]


def test_ep_reaches_the_cost_model(tmp_path):
    s = load_scenario(_write(tmp_path, 'target = "qwen3-30b-a3b"\ntp = 2\nep = 2'))
    assert s.ep == 2 and s.cost_model("ideal").ep == 2


@pytest.mark.parametrize("lines,field,match", [
    ('target = "llama-3.1-8b"\nep = 2', "scenario.ep", "no routed experts"),
    ('target = "qwen3-30b-a3b"\ntp = 2\nep = 3', "scenario.ep", "does not divide"),
    ('target = "llama-3.1-8b"\nweights = "int3"', "scenario.weights", "allowed: bf16"),
    ('target = "llama-3.1-8b"\nweights = 8', "scenario.weights", "allowed:"),
    ('target = "llama-3.1-8b"\nkv_cache = "fp4"', "scenario.kv_cache", "allowed: bf16, fp8"),
])
def test_bad_values_are_named(tmp_path, lines, field, match):
    _raises(field, _write(tmp_path, lines), match)
