"""A model named by its Hugging Face id (src/costmodel/hf_ids.py), resolved offline from the
config.json files bundled with aiconfigurator-core (its model_configs/ folder)."""
from __future__ import annotations

import importlib.metadata
import json
from dataclasses import asdict, replace

import pytest

from src import stepcalc
from src.config import ConfigError
from src.costmodel import CostModelInputError, hf_ids, load_presets
from src.hardware.scenario import scenario_from_dict

VERSION = importlib.metadata.version("aiconfigurator-core")
CONFIGS = hf_ids.configs_dir()


def _bundled(hf_id: str) -> str:
    return str(CONFIGS / f"{hf_id.replace('/', '--')}_config.json")


def _step_time(capsys, *args) -> tuple[int, str, str]:
    code = stepcalc.main(["--gpu", "h200", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_bundled_ids_are_the_config_files_less_the_quantization_sidecars():
    files = sorted(p.name for p in CONFIGS.iterdir())
    models = [f for f in files if not f.endswith("_hf_quant_config.json")]
    assert len(hf_ids.bundled_ids()) == len(models) and len(models) < len(files)
    assert "Qwen/Qwen3-32B" in hf_ids.bundled_ids()
    assert hf_ids.bundled_config("Qwen/Qwen3-32B").name == "Qwen--Qwen3-32B_config.json"
    assert hf_ids.bundled_config("qwen/qwen3-32b") is None  # as Hugging Face spells it


@pytest.mark.parametrize("engine", [[], ["--engine", "vllm-v1"]])
def test_step_time_of_an_id_equals_its_bundled_config_json(capsys, engine):
    args = ["--batch", "1,32", "--positions", "1,4", *engine]
    code, by_id, err = _step_time(capsys, "--model", "Qwen/Qwen3-32B", *args)
    assert code == 0, err
    code, by_path, err = _step_time(capsys, "--model", _bundled("Qwen/Qwen3-32B"), *args)
    assert code == 0, err
    assert by_id == by_path and "32" in by_id


def test_an_id_is_the_model_an_engine_serves():
    presets = load_presets()
    spec = presets.model("Qwen/Qwen3-32B")
    assert spec.model_id == spec.hf_name == "Qwen/Qwen3-32B"
    assert spec.source == (f"Qwen/Qwen3-32B (aiconfigurator-core {VERSION} "
                           "model_configs/Qwen--Qwen3-32B_config.json)")
    by_path = presets.model(_bundled("Qwen/Qwen3-32B"))
    assert asdict(replace(by_path, model_id=spec.model_id, hf_name=spec.hf_name,
                          source=spec.source)) == asdict(spec)


def test_unknown_id_one_line_exit_2_with_the_closest_bundled_ids(capsys):
    code, out, err = _step_time(capsys, "--model", "Qwen/Qwen3-33B")
    n = len(hf_ids.bundled_ids())
    assert (code, out) == (2, "")
    assert err == (f"error: --model: unknown model 'Qwen/Qwen3-33B': not a preset nor one of the "
                   f"{n} Hugging Face ids bundled with aiconfigurator-core {VERSION}; closest: "
                   "Qwen/Qwen3-32B, Qwen/Qwen3-8B, Qwen/Qwen3-30B-A3B\n")
    code, _, err = _step_time(capsys, "--model", "qwen/qwen3-32b")  # compared case-folded
    assert code == 2 and "closest: Qwen/Qwen3-32B," in err


def test_without_the_package_an_id_says_where_ids_come_from(monkeypatch):
    monkeypatch.setattr(hf_ids, "bundled_ids", lambda: ())
    with pytest.raises(CostModelInputError) as e:
        load_presets().model("Qwen/Qwen3-32B", "--model")
    assert e.value.field_name == "--model"
    assert "aiconfigurator-core's bundled model_configs/, which is not installed" in str(e.value)


def test_an_unmodelled_bundled_architecture_names_the_id_and_file(capsys):
    code, out, err = _step_time(capsys, "--model", "Qwen/Qwen3-VL-8B-Instruct")
    assert (code, out) == (2, "") and len(err.splitlines()) == 1
    assert err.startswith(f"error: --model: Qwen/Qwen3-VL-8B-Instruct (aiconfigurator-core "
                          f"{VERSION} model_configs/Qwen--Qwen3-VL-8B-Instruct_config.json): ")
    assert "Qwen3VLForConditionalGeneration is not modelled" in err and str(CONFIGS) not in err


@pytest.mark.parametrize("hf_id, weight_format", [
    ("nvidia/Llama-3.1-70B-Instruct-FP8", "fp8"),  # config.json has no quantization_config
    ("nvidia/DeepSeek-V3.1-NVFP4", "nvfp4"),
    ("Qwen/Qwen3-32B-FP8", "fp8-block"),  # its config.json's own quantization_config
])
def test_the_weight_format_of_a_modelopt_sidecar(hf_id, weight_format):
    config = json.loads(hf_ids.bundled_config(hf_id).read_text())
    spec = load_presets().model(hf_id)
    assert spec.weight_format == weight_format
    if "quantization_config" not in config:
        assert load_presets().model(_bundled(hf_id)).weight_format == "bf16"  # the file alone


def test_a_preset_wins_over_the_bundled_file(tmp_path):
    presets = load_presets()
    # a preset whose Hugging Face repository is the id: its extra fields come with it
    assert presets.model("mistralai/Mixtral-8x7B-v0.1") == presets.model("mixtral-8x7b")
    assert presets.model("mixtral-8x7b").eagle_head_n_kv_heads > 0
    # a preset named by the id itself (a user preset file)
    fields = {k: v for k, v in asdict(presets.model("llama-3.2-1b")).items()
              if k != "model_id" and v is not None}
    path = tmp_path / "p.toml"
    path.write_text('[models."Qwen/Qwen3-32B"]\n' + "".join(
        f"{k} = {json.dumps(v)}\n" for k, v in fields.items()))
    mine = load_presets([path]).model("Qwen/Qwen3-32B")
    assert mine.n_layers == fields["n_layers"] != presets.model("Qwen/Qwen3-32B").n_layers


def test_a_scenario_takes_ids_and_names_an_unknown_one_under_its_key():
    sc = scenario_from_dict({"scenario": {"name": "x", "gpu": "h200", "target": "Qwen/Qwen3-32B",
                                          "draft": "Qwen/Qwen3-0.6B"},
                             "study": {"batch_sizes": [1, 8], "gammas": [1, 3]}})
    assert sc.cost_model("vllm-v1").target.model_id == "Qwen/Qwen3-32B"
    with pytest.raises(ConfigError) as e:
        scenario_from_dict({"scenario": {"name": "x", "gpu": "h200", "target": "Qwen/Qwen3-32B",
                                         "draft": "Qwen/Qwen3-0.5B"}})
    assert e.value.field_name == "scenario.draft"
    assert "closest: Qwen/Qwen3-0.6B" in e.value.allowed


def test_plan_takes_ids_and_names_an_unknown_one_under_pairs():
    from src.plan.config import parse_pairs
    from src.plan.search import Deployment, scenario_of
    models = load_presets().models
    assert parse_pairs("--pairs", "Qwen/Qwen3-8B+ngram", models) == (("Qwen/Qwen3-8B", "ngram"),)
    with pytest.raises(ConfigError) as e:
        parse_pairs("--pairs", "Qwen/Qwen3-8B+Qwen/Qwen3-0.5B", models)
    assert e.value.field_name == "--pairs" and "closest: Qwen/Qwen3-0.6B" in e.value.allowed
    # the scenario's name is a plain file name although the id has a '/'
    d = Deployment(gpu="h200", tp=1, target="Qwen/Qwen3-8B", draft="ngram", engine="vllm-v1",
                   workload="sharegpt")
    assert scenario_of(d).cost_model("vllm-v1").target.model_id == "Qwen/Qwen3-8B"


def test_step_time_list_shows_the_bundled_ids_the_cost_model_runs():
    listing = stepcalc.preset_listing([])
    section = listing.split("Hugging Face ids (")[1].split("\n\n")[0]
    rows = {line.split()[0]: line for line in section.splitlines()[1:]}
    runs = [i for i in hf_ids.bundled_ids() if i in rows]
    assert f"the {len(hf_ids.bundled_ids())} config.json files bundled with aiconfigurator-core " \
           f"{VERSION}: the {len(runs)} of an architecture" in section
    assert "Qwen/Qwen3-32B" in rows and "Qwen/Qwen3-VL-8B-Instruct" not in rows
    assert rows["mistralai/Mixtral-8x7B-v0.1"].endswith("(= mixtral-8x7b)")
    assert "bf16, experts mxfp4" in rows["openai/gpt-oss-120b"]
    assert set(rows) == set(runs)


def test_recommend_serves_the_ids_themselves():
    from tests.helpers import run_captured
    rc, out, err = run_captured(["recommend", "--gpu", "h100-sxm", "--target", "Qwen/Qwen3-8B",
                                 "--draft", "Qwen/Qwen3-0.6B", "--acceptance", "0.7",
                                 "--batch", "1,8"])
    assert rc == 0, err
    assert "  vllm serve Qwen/Qwen3-8B --speculative-config '{\"method\": \"draft_model\", " \
           "\"model\": \"Qwen/Qwen3-0.6B\"" in out
    assert "--model-path Qwen/Qwen3-8B --speculative-algorithm STANDALONE " \
           "--speculative-draft-model-path Qwen/Qwen3-0.6B " in out


def test_every_builtin_preset_whose_repository_is_bundled_equals_its_file():
    presets = load_presets()
    extras = {"model_id", "hf_name", "source", "eagle_head_n_kv_heads"}  # a preset's own
    bundled = [m for m in presets.models.values() if m.hf_name in hf_ids.bundled_ids()]
    assert len(bundled) >= 5
    for preset in bundled:
        read = asdict(presets.model(_bundled(preset.hf_name)))
        assert {k: v for k, v in asdict(preset).items() if k not in extras} == \
               {k: v for k, v in read.items() if k not in extras}, preset.model_id
