"""Deployment scenarios: one GPU, target, draft, parallelism, engine and study grid.

A scenario file (configs/scenarios/*.toml) has a [scenario] table (the deployment; design.md,
"Scenarios", lists its keys) and a [study] table (any StudyConfig field). `load_scenario(path)`
validates everything once and raises ConfigError naming the key (`scenario.gpu`, `study.gammas`,
...), also for a deployment that does not fit in GPU memory. `Scenario.cost_model(engine)` builds
the HardwareCostModel with that engine's overheads.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from src.config import (
    ConfigError,
    FixedLength,
    LengthDistribution,
    LognormalLength,
    StudyConfig,
    UniformLength,
    build_config,
    check_keys,
    list_items,
    read_toml,
)
from src.costmodel import (
    IDEAL_ENGINE,
    CostModelInputError,
    EngineProfile,
    HardwareCostModel,
    check_tp,
    load_engine_profiles,
    load_presets,
)
from src.costmodel.cudagraph_sizes import with_capture_size
from src.costmodel.engines import engine_profile as engine_profile_named
from src.costmodel.hf_config import looks_like_config_path
from src.input_files import MAX_TOML_BYTES, read_file_bytes
from src.kernels.costmodel import with_kernels

SCENARIOS_DIR = Path(__file__).resolve().parents[2] / "configs" / "scenarios"
# draft values that are not model presets (eagle3: a head derived from the target; mtp: the
# target's own multi-token-prediction module; src/costmodel/drafts.py)
SPECIAL_DRAFTS = ("eagle", "eagle3", "mtp", "ngram", "self")
TARGET_TP_DRAFTS = ("eagle", "eagle3", "mtp", "self")  # drafts that run at the target's tp
SCENARIO_KEYS = ("name", "description", "gpu", "target", "draft", "tp", "draft_tp",
                 "engine_profiles", "draft_kv_budget_tokens", "memory_reserve_fraction",
                 "acceptance_source", "presets", "tokenizer_shared", "ep", "weights", "kv_cache",
                 "attention_dp")
REQUIRED_KEYS = ("name", "gpu", "target", "draft")
DEFAULT_ENGINE_PROFILES = ("ideal", "vllm-v1")
# keys of a scenario's [serving] table (read by `run.py serve`, src/online/cli.py)
SERVING_KEYS = ("engine_profile", "rates", "policies", "workload", "arrival", "slo", "requests",
                "duration_s", "replications", "quality_mode", "alpha", "max_num_seqs",
                "max_num_batched_tokens", "max_gamma", "schedule")
# [serving] values TOML must give as these types (a list where a list is meant, an int where an
# int is meant); the rest are strings, or (alpha, duration_s) numbers, checked by serve
_SERVING_INTS = ("requests", "replications", "max_num_seqs", "max_num_batched_tokens",
                 "max_gamma")


def check_serving_table(serving: Any) -> None:
    """A [serving] table's keys are SERVING_KEYS, its counts TOML integers and its rates a list;
    ConfigError naming serving.KEY. The study checks it too, though only serve reads it."""
    if not isinstance(serving, Mapping):
        raise ConfigError("serving", "expected a table")
    for key, value in serving.items():
        if key not in SERVING_KEYS:
            raise ConfigError(f"serving.{key}", f"unknown key; allowed: {', '.join(SERVING_KEYS)}")
        if key in _SERVING_INTS and (isinstance(value, bool) or not isinstance(value, int)):
            raise ConfigError(f"serving.{key}", f"expected an integer, got {value!r}")
        if key == "rates" and not isinstance(value, list):
            raise ConfigError("serving.rates", f"expected a TOML list, e.g. rates = [1, 2, 4], got "
                                               f"{value!r}")


def check_vocabularies(models: Mapping, target: str, draft: str, field: str) -> None:
    """A draft model must share the target's vocabulary (vLLM refuses the pair otherwise); an
    eagle head, n-gram or self draft has no vocabulary of its own. `tokenizer_shared` scenarios
    skip this call. ConfigError naming `field`, with the drafts allowed."""
    if draft not in models or target not in models:
        return
    target_vocab, draft_vocab = models[target].vocab_size, models[draft].vocab_size
    if draft_vocab != target_vocab:
        same = [m for m in sorted(models) if models[m].vocab_size == target_vocab and m != target]
        raise ConfigError(field, f"{draft} has a {draft_vocab}-token vocabulary, {target} "
                                 f"{target_vocab}: the draft must share the target's vocabulary "
                                 "(vLLM refuses the pair); allowed: "
                                 f"{', '.join(['eagle', 'ngram', *same])}")


@dataclass(frozen=True)
class Scenario:
    """One deployment and the study grid to run on it. Build with load_scenario or
    scenario_from_dict."""

    name: str  # short id, e.g. "h100-llama8b-1b"
    description: str  # one or two sentences a reader recognises the deployment by
    gpu_id: str  # GPU preset id (src/presets/gpus.toml)
    target_model_id: str  # target model preset id (src/presets/models.toml)
    # draft model preset id, "eagle" (EAGLE-style head), "ngram" (prompt lookup) or "self"
    draft: str
    tp: int  # tensor-parallel degree of the target (GPUs per replica)
    draft_tp: int  # TP degree of a stand-alone draft model (= tp for eagle and self)
    engine_profiles: tuple[str, ...]  # engine profile names to run; the first is the default
    # cap on the cached tokens a draft pass reads per sequence; None = none
    draft_kv_budget_tokens: int | None
    acceptance_source: str  # citation (or stated assumption) behind the alpha modes of `study`
    memory_reserve_fraction: float | None  # GPU memory kept free; None = the preset's value
    study: StudyConfig  # the grid: StudyConfig defaults + the file's [study] table
    source_path: str | None = None  # file the scenario was read from (None = built in code)
    preset_paths: tuple[str, ...] = ()  # preset files merged over the built-ins (`presets`)
    # --kernels: None = measured GEMMs where the engine profile has tables on the GPU, else the
    # roofline; "measured" (an error without tables) or "roofline" (src/kernels/costmodel.py)
    kernels: str | None = None
    ep: int = 1  # expert-parallel degree of the target's MoE layers (dividing tp and E; `ep`)
    weights: str = ""  # the target's weight format for every layer ("" = the checkpoint's)
    kv_cache: str = ""  # the target's KV-cache format ("" = the checkpoint's)
    # attention data-parallel ranks of the replica (`attention_dp`, dividing tp: each rank runs
    # attention at tp / attention_dp over its own requests and KV; src/online/dp_steptime.py)
    attention_dp: int = 1

    def target_formats(self) -> dict[str, str]:
        """ModelSpec format fields the `weights` / `kv_cache` keys replace."""
        out = {}
        if self.weights:
            out.update(weight_format=self.weights, expert_weight_format=self.weights)
        if self.kv_cache:
            out["kv_cache_format"] = self.kv_cache
        return out
    # --max-cudagraph-capture-size: vLLM's capture size in tokens for the engine profiles with a
    # token capture limit (src/costmodel/cudagraph_sizes.py); None = the profile's
    max_cudagraph_capture_size: int | None = None

    def cost_model(self, engine_profile: str | EngineProfile | None = None) -> HardwareCostModel:
        """HardwareCostModel of this deployment with the named engine's overheads (default: the
        first of engine_profiles), its GEMMs priced as `kernels` says (with_kernels)."""
        engine = self.engine_profiles[0] if engine_profile is None else engine_profile
        if self.max_cudagraph_capture_size is not None:
            if isinstance(engine, str):
                engine = engine_profile_named(engine, extra_paths=self.preset_paths)
            engine = with_capture_size(engine, self.max_cudagraph_capture_size)
        params = None
        if self.memory_reserve_fraction is not None:
            params = replace(load_presets(self.preset_paths).params,
                             memory_reserve_fraction=self.memory_reserve_fraction)
        cost = HardwareCostModel.from_presets(
            self.gpu_id, self.target_model_id, tp=self.tp, draft=self.draft,
            draft_tp=self.draft_tp, engine=engine, params=params,
            draft_kv_budget_tokens=self.draft_kv_budget_tokens, preset_paths=self.preset_paths,
            ep=self.ep, target_formats=self.target_formats(),
            temperature=self.study.temperature)
        return with_kernels(cost, self.kernels, strict=False)

    def max_tokens_per_seq(self) -> int:
        """Most tokens one sequence can hold in cache: longest prompt + longest output +
        largest gamma + 1 or tree size N (the verification's positions)."""
        return (max_length_tokens(self.study.prompt_len) + max_length_tokens(self.study.output_len)
                + max([max(self.study.gammas) + 1] + [t.tokens for t in self.study.trees]))


def max_length_tokens(dist: LengthDistribution) -> int:
    """Largest value a length distribution can draw."""
    if isinstance(dist, FixedLength):
        return dist.tokens
    if isinstance(dist, (UniformLength, LognormalLength)):
        return dist.high
    raise TypeError(f"not a length distribution: {dist!r}")


def _string(key: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"scenario.{key}", f"expected a non-empty string, got {value!r}")
    return value.strip()


def _positive_int(key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"scenario.{key}", f"expected an integer >= 1, got {value!r}")
    return value


def scenario_from_dict(data: Mapping[str, Any], source_path: str | None = None) -> Scenario:
    """Validate a parsed scenario document ({"scenario": {...}, "study": {...}})."""
    if not isinstance(data, Mapping):
        raise ConfigError("scenario", "expected a table")
    for key in data:
        if key == "disagg":  # src/disagg/scenario.py takes it off before it comes here
            raise ConfigError(key, "a disaggregated deployment runs with `python run.py serve "
                                   "--scenario FILE`; this command runs aggregated replicas only")
        if key not in ("scenario", "study", "serving"):  # [serving]: read by `run.py serve`
            raise ConfigError(key, "unknown table; allowed: scenario, study, serving")
    if "serving" in data:
        check_serving_table(data["serving"])
    table = data.get("scenario")
    if not isinstance(table, Mapping):
        raise ConfigError("scenario", "missing [scenario] table")
    check_keys("scenario", table, SCENARIO_KEYS, REQUIRED_KEYS)
    preset_paths = _preset_paths(table.get("presets", []), source_path)
    try:
        presets = load_presets(preset_paths)
        profiles = load_engine_profiles(extra_paths=preset_paths)
    except CostModelInputError as e:
        raise ConfigError("scenario.presets", str(e)) from None
    name = _string("name", table["name"])
    # it names the output folder runs/NAME
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
        raise ConfigError("scenario.name",
                          f"{name!r} is not a plain file name; allowed: letters, digits, '.', '_', "
                          "'-'")
    description = table.get("description", "")
    if not isinstance(description, str):
        raise ConfigError("scenario.description", f"expected a string, got {description!r}")
    gpu = _string("gpu", table["gpu"])
    if gpu not in presets.gpus:
        raise ConfigError("scenario.gpu",
                          f"unknown '{gpu}'; allowed: {', '.join(sorted(presets.gpus))}")
    target = _model_path(_string("target", table["target"]), source_path)
    if target not in presets.models:
        raise ConfigError("scenario.target", f"unknown '{target}'; allowed: "
                          f"{', '.join(sorted(presets.models))}, or a config.json path")
    check_not_a_head(_resolve_model(presets, target, "target"), target, "scenario.target")
    draft = _string("draft", table["draft"])
    if draft not in SPECIAL_DRAFTS:
        draft = _model_path(draft, source_path)
    if draft not in presets.models and draft not in SPECIAL_DRAFTS:
        allowed = ", ".join((*SPECIAL_DRAFTS, *sorted(presets.models)))
        raise ConfigError("scenario.draft",
                          f"unknown '{draft}'; allowed: {allowed}, or a config.json path")
    if draft not in SPECIAL_DRAFTS and _resolve_model(presets, draft, "draft").architecture \
            == "eagle3":  # an EAGLE-3 head preset runs at the target's tp, like "eagle3"
        draft_is_head = True
    else:
        draft_is_head = draft in TARGET_TP_DRAFTS
    shared = table.get("tokenizer_shared", False)
    if not isinstance(shared, bool):
        raise ConfigError("scenario.tokenizer_shared", f"expected true or false, got {shared!r}")
    if not shared and not draft_is_head:  # a head maps its own vocabulary onto the target's
        check_vocabularies(presets.models, target, draft, "scenario.draft")
    tp = _positive_int("tp", table.get("tp", 1))
    try:
        check_tp(presets.model(target), tp)
    except CostModelInputError as e:
        raise ConfigError("scenario.tp", e.allowed) from None
    if draft_is_head:
        draft_tp = _positive_int("draft_tp", table.get("draft_tp", tp))
        if draft_tp != tp:
            raise ConfigError("scenario.draft_tp",
                              f"a '{draft}' draft runs at the target's tp; allowed: {tp}")
    else:
        draft_tp = _positive_int("draft_tp", table.get("draft_tp", 1))
        if draft != "ngram":
            try:
                check_tp(presets.model(draft), draft_tp, "draft_tp")
            except CostModelInputError as e:
                raise ConfigError("scenario.draft_tp", e.allowed) from None
    engines = table.get("engine_profiles", list(DEFAULT_ENGINE_PROFILES))
    if isinstance(engines, str):
        engines = [engines]
    if not isinstance(engines, list) or not engines:
        raise ConfigError("scenario.engine_profiles",
                          f"expected a non-empty list of: {', '.join(sorted(profiles))}")
    for i, engine in enumerate(engines):
        if engine not in profiles:
            raise ConfigError("scenario.engine_profiles",
                              f"unknown {engine!r}; allowed: {', '.join(sorted(profiles))}")
        if engine in engines[:i]:  # each row of the study would come twice
            raise ConfigError("scenario.engine_profiles", f"{engine!r} is listed twice; give "
                                                          "each profile once")
    budget = table.get("draft_kv_budget_tokens")
    if budget is not None:
        budget = _positive_int("draft_kv_budget_tokens", budget)
        if draft == "ngram":
            raise ConfigError("scenario.draft_kv_budget_tokens",
                              "an n-gram draft has no KV cache; allowed: only with a draft model, "
                              "eagle or self")
    elif draft == "self":
        raise ConfigError("scenario.draft_kv_budget_tokens",
                          "required for draft = 'self' (a self-speculation draft reading the full "
                          "KV cache is the target itself); allowed: an integer >= 1")
    reserve = table.get("memory_reserve_fraction")
    if reserve is not None and (isinstance(reserve, bool) or not isinstance(reserve, (int, float))
                                or not 0.0 <= reserve < 1.0):
        raise ConfigError("scenario.memory_reserve_fraction",
                          f"expected a number in 0..1 (exclusive of 1), got {reserve!r}")
    acceptance_source = table.get("acceptance_source", "")
    if not isinstance(acceptance_source, str):
        raise ConfigError("scenario.acceptance_source",
                          f"expected a string, got {acceptance_source!r}")
    attention_dp = _positive_int("attention_dp", table.get("attention_dp", 1))
    ep, weights, kv_cache = _formats_and_ep(table, presets, gpu, target, tp, attention_dp)
    study_table = data.get("study", {})
    if not isinstance(study_table, Mapping):
        raise ConfigError("study", "expected a table of StudyConfig fields")
    if "draft_cost" in study_table:  # would be ignored: the scenario's cost model prices the draft
        raise ConfigError("study.draft_cost", "not used by a scenario: the draft's step time comes "
                                              "from scenario.draft on scenario.gpu; remove it")
    try:
        study = build_config(study_table, toml=True)
    except ConfigError as e:
        raise ConfigError(f"study.{e.field_name}", e.allowed) from None
    scenario = Scenario(
        name=name, description=description.strip(), gpu_id=gpu, target_model_id=target,
        draft=draft, tp=tp, draft_tp=draft_tp, engine_profiles=tuple(dict.fromkeys(engines)),
        draft_kv_budget_tokens=budget, acceptance_source=acceptance_source.strip(),
        memory_reserve_fraction=None if reserve is None else float(reserve), study=study,
        source_path=source_path, preset_paths=preset_paths, ep=ep, weights=weights,
        kv_cache=kv_cache, attention_dp=attention_dp)
    check_memory(scenario)
    check_tree_engines(scenario, "study.trees")
    return scenario


def _formats_and_ep(table: Mapping, presets, gpu: str, target: str, tp: int,
                    attention_dp: int = 1) -> tuple[int, str, str]:
    """(ep, weights, kv_cache) of a [scenario] table: ep dividing tp and the routed experts
    (variants.check_ep; with attention_dp > 1 the attention-DP rules, check_attention_dp),
    weights a format the GPU runs (formats.runnable_weight_formats), kv_cache bf16 or fp8;
    ConfigError naming scenario.KEY."""
    from src.costmodel.formats import KV_CACHE_FORMATS, runnable_weight_formats
    from src.costmodel.variants import check_ep

    ep = _positive_int("ep", table.get("ep", 1))
    if attention_dp == 1:
        try:
            check_ep(presets.model(target), ep, tp)
        except CostModelInputError as e:
            raise ConfigError("scenario.ep", e.allowed) from None
    weights = table.get("weights", "")
    able = runnable_weight_formats(presets.gpu(gpu))
    if weights != "" and weights not in able:
        raise ConfigError("scenario.weights", f"{weights!r} does not run on {gpu}; allowed: "
                          f"{', '.join(able)}")
    kv_cache = table.get("kv_cache", "")
    if kv_cache != "" and kv_cache not in KV_CACHE_FORMATS:
        raise ConfigError("scenario.kv_cache",
                          f"unknown {kv_cache!r}; allowed: {', '.join(KV_CACHE_FORMATS)}")
    if attention_dp > 1:
        formats = {"weight_format": weights, "expert_weight_format": weights} if weights else {}
        check_attention_dp(replace(presets.model(target), **formats), presets.gpu(gpu),
                           presets.params, tp, attention_dp, ep)
    return ep, weights, kv_cache


def check_attention_dp(model, gpu, params, tp: int, dp: int, ep: int) -> None:
    """ConfigError naming scenario.attention_dp, .tp or .ep where a replica of tp GPUs in dp
    attention-DP ranks breaks the rules the [disagg] decode pool keeps (src/attention_dp/shape.py
    shape_refusal: dp divides tp, tp / dp the heads, ep 1 or tp dividing the experts, one node),
    or its weights (attention replicated per rank, weight_bytes_per_gpu) do not fit a GPU."""
    from src.attention_dp.shape import shape_refusal, weight_bytes_per_gpu
    from src.costmodel import memory_usable_bytes
    if tp % dp:
        ok = [d for d in range(1, tp + 1) if tp % d == 0]
        raise ConfigError("scenario.attention_dp", f"{dp} does not divide tp {tp} (each rank "
                                                   f"runs attention at tp / attention_dp); "
                                                   f"allowed: {', '.join(map(str, ok))}")
    names = {"tp": "tp / attention_dp", "dp": "attention_dp", "ep": "ep"}
    refused = shape_refusal(model, tp // dp, dp, ep, names)
    if refused:
        key = {"tp / attention_dp": "attention_dp"}.get(refused[0], refused[0])
        raise ConfigError(f"scenario.{key}", refused[1])
    need, usable = weight_bytes_per_gpu(model, tp // dp, dp), memory_usable_bytes(gpu, params)
    if need > usable:
        raise ConfigError("scenario.attention_dp",
                          f"{model.model_id} at tp {tp}, attention_dp {dp} holds "
                          f"{need / 1e9:.1f} GB of weights per GPU (attention replicated per "
                          f"rank) but {gpu.gpu_id} has {usable / 1e9:.1f} GB usable; allowed: a "
                          "smaller attention_dp or a larger tp")


def _model_path(value: str, source_path: str | None) -> str:
    """A target/draft naming a config.json is taken from the scenario's folder when relative."""
    if not looks_like_config_path(value) or Path(value).is_absolute() or not source_path:
        return value
    return str(Path(source_path).parent / value)


def check_not_a_head(spec, model_id: str, field_name: str) -> None:
    """A target must be a decoder: an EAGLE-3 head (architecture eagle3) has one layer and reads
    the target's hidden states, so it cannot serve on its own."""
    if spec.architecture == "eagle3":
        raise ConfigError(field_name, f"{model_id} is an EAGLE-3 draft head, not a target model; "
                                      "allowed: a decoder preset or config.json (give the head as "
                                      "the draft)")


def _resolve_model(presets, model_id: str, key: str):
    """The ModelSpec of a preset id or config.json (its errors under scenario.<key>)."""
    try:
        return presets.model(model_id, key)
    except CostModelInputError as e:
        raise ConfigError(f"scenario.{key}", e.allowed) from None


def _preset_paths(value: Any, source_path: str | None) -> tuple[str, ...]:
    """`presets`: a list of TOML files; relative ones are taken from the scenario's folder."""
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise ConfigError("scenario.presets",
                          f"expected a list of preset file paths, got {value!r}")
    base = Path(source_path).parent if source_path else Path(".")
    out = []
    for text in value:
        path = Path(text).expanduser()
        path = path if path.is_absolute() else base / path
        if not path.is_file():  # missing, a folder, a FIFO, a device: say which
            read_file_bytes(path, "scenario.presets", "a TOML file", max_bytes=MAX_TOML_BYTES)
        out.append(str(path))
    return tuple(out)


def select_engine_profiles(scenario: Scenario, value, flag: str = "--engine-profiles") -> Scenario:
    """The scenario with only the engine profiles `value` names ('a,b'), each one the scenario
    lists, in the order given (the first is the default); ConfigError(flag, ...) otherwise."""
    listed = scenario.engine_profiles
    names = list_items(flag, value, f"the scenario's engine profiles ({', '.join(listed)})")
    for i, name in enumerate(names):
        if name not in listed:
            raise ConfigError(flag, f"{name!r} is not an engine profile of scenario "
                                    f"{scenario.name}; allowed: {', '.join(listed)}")
        if name in names[:i]:
            raise ConfigError(flag, f"{name!r} is listed twice; give each profile once")
    return replace(scenario, engine_profiles=tuple(names))


def check_tree_engines(scenario: Scenario, field: str) -> None:
    """A tree (topk > 1) needs engine profiles that verify trees (src/presets/tree_engines.toml)."""
    from src.treesim.costs import check_engines_verify
    check_engines_verify(scenario.study.trees, scenario.engine_profiles, field)
    tree = next((t for t in scenario.study.trees if not t.is_chain), None)
    if tree is not None and scenario.draft == "ngram":
        raise ConfigError(field, f"{tree.label}: S:K:N trees are drafted by a draft network's "
                                 "beam (SGLang's EAGLE worker); an n-gram draft has none (SGLang's "
                                 "NGRAM builds its own BFS trees); give chains G:1:G+1")


def check_memory(scenario: Scenario) -> None:
    """Weights must fit (else `scenario.tp`), and so must the KV cache of the largest batch with
    every sequence at its longest (else `study.batch_sizes`, naming the largest batch that fits)."""
    try:
        cost = scenario.cost_model(IDEAL_ENGINE)  # memory does not depend on the engine
    except CostModelInputError as e:  # the draft's own refusals name the draft, the rest the tp
        where = {"draft": "scenario.draft", "draft_tp": "scenario.draft_tp"}
        raise ConfigError(where.get(e.field_name, "scenario.tp"), e.allowed) from None
    tokens = scenario.max_tokens_per_seq()
    batch = max(scenario.study.batch_sizes)
    fits, need_gb, usable_gb = cost.kv_fits(batch, tokens)
    # an attention-DP replica's KV is per rank (serve sizes it, src/online/dp_steptime.py): the
    # TP path's fit, which replicates an MLA latent over every GPU, is not its bound
    if not fits and scenario.attention_dp == 1:
        largest = cost.largest_batch_that_fits(tokens, limit=batch - 1)
        raise ConfigError(
            "study.batch_sizes",
            f"batch {batch} x {tokens} tokens per sequence (longest prompt + output + gamma + 1) "
            f"needs {need_gb:.1f} GB per GPU but {scenario.gpu_id} has {usable_gb:.1f} GB usable; "
            f"allowed: batch sizes up to {largest} at these lengths, a larger tp or shorter "
            "prompts")
    gamma = max(scenario.study.gammas)
    for b in sorted({1, batch}):  # a preset's figures can overflow the model (1e-300 TFLOP/s)
        with np.errstate(all="ignore"):
            step = cost.step_breakdown(b, gamma, tokens - gamma - 1)  # fits: kv_fits said so
        times = (step.decode_ms, step.verify_ms, step.draft_ms)
        if not np.isfinite(times).all():
            raise ConfigError("scenario.presets" if scenario.preset_paths else "scenario.gpu",
                              f"{scenario.gpu_id} with {scenario.target_model_id} gives step times "
                              f"of {', '.join(f'{t:g}' for t in times)} ms at batch {b}, gamma "
                              f"{gamma}: its figures overflow the cost model; allowed: "
                              "datasheet-scale figures")


def check_serve_only(scenario: Scenario, command: str) -> None:
    """ConfigError naming scenario.attention_dp where a command that prices the TP path meets an
    attention-DP replica (only `serve` prices attention_dp > 1, src/online/dp_steptime.py)."""
    if scenario.attention_dp > 1:
        raise ConfigError("scenario.attention_dp",
                          f"{scenario.attention_dp}: attention DP is priced by `python run.py "
                          f"serve` only; allowed: 1 for {command}")


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario TOML file; ConfigError naming the key on any bad input."""
    path = Path(path)
    return scenario_from_dict(read_toml(path, "--scenario"), source_path=str(path))


def scenario_files(directory: str | Path = SCENARIOS_DIR) -> list[Path]:
    """Every scenario file of a folder (configs/scenarios by default), sorted by name."""
    return sorted(Path(directory).glob("*.toml"))


# The default hardware scenario, identical to configs/scenarios/h100-llama8b-1b.toml (tested).
DEFAULT_SCENARIO_TABLE: dict[str, Any] = {
    "scenario": {
        "name": "h100-llama8b-1b",
        "description": "Llama-3.1-8B served on one H100 SXM with a Llama-3.2-1B draft model "
                       "(same tokenizer), 1-2k-token prompts: the common single-GPU deployment.",
        "gpu": "h100-sxm",
        "target": "llama-3.1-8b",
        "draft": "llama-3.2-1b",
        "tp": 1,
        "draft_tp": 1,
        "engine_profiles": ["ideal", "vllm-v1", "sglang", "trtllm"],
        "acceptance_source": "reference modes of the study (design.md, 'Workload'); no published "
                             "per-token acceptance for this pair was used",
    },
    "study": {
        "batch_sizes": [1, 2, 4, 8, 16, 32, 64, 128],
        "gammas": [1, 2, 3, 4, 5, 6, 8],
        "serving_modes": ["continuous_refill"],
    },
}


def default_hardware_scenario() -> Scenario:
    """H100 SXM, Llama-3.1-8B target, Llama-3.2-1B draft, TP 1, prompts uniform 1024..2048
    (the StudyConfig default), batch sizes 1..128 (256 does not fit: see the scenario file)."""
    return scenario_from_dict(DEFAULT_SCENARIO_TABLE)
