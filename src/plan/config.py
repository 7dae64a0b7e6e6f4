"""What `python run.py plan` searches: the plan file's [plan] and [prices] tables, or options.

    [plan]
    gpus = ["l40s", "h100-sxm"]                # GPU presets (src/presets/gpus.toml)
    tp = [1, 2]                                # tensor-parallel sizes
    pairs = ["llama-3.1-8b+llama-3.2-1b"]      # target+draft (a model preset, eagle or ngram)
    engines = ["vllm-v1"]                      # engine profiles (src/presets/engines.toml)
    policies = ["fixed:3", "adaptive"]         # speculation policies; none is always included
    workloads = ["alpaca"]                     # length presets (src/presets/workloads.toml)
    slo = "ttft=2s,tpot=50ms"                  # met when 90% of requests meet both
    target_rate = 100                          # requests/s the cheapest deployment must carry
    [prices]                                   # optional, USD per GPU-hour, every listed GPU
    source = "where the prices come from, dated"
    l40s = 0.86

    [disagg]                                   # optional: xPyD shapes searched beside the
    prefill_workers = [1, 2]                   # aggregated replicas (src/plan/disagg_config.py)
    prefill = ["tp8 ep8"]
    decode_workers = [1]
    decode = ["dp8 ep8"]

Options (`--gpus l40s,h100-sxm`, `--prices l40s=0.86,h100-sxm=2.99`, ...) override the file,
which overrides the defaults. Every bad value raises ConfigError naming the key or option and
what is allowed, before anything is simulated.
"""
from __future__ import annotations

import hashlib
import math
import os
from dataclasses import dataclass, fields
from typing import Any, Mapping

from src.config import ConfigError, check_alpha, list_items
from src.costmodel.hf_config import looks_like_config_path
from src.errors import ascii_float, ascii_int
from src.input_files import read_file_bytes, read_toml

PLAN_KEYS = ("gpus", "tp", "pairs", "engines", "policies", "workloads", "slo", "target_rate",
             "alpha", "quality_mode", "duration_s", "replications", "tolerance", "start_rate",
             "seed", "max_gamma")
LIST_KEYS = {"gpus": '"l40s", "h100-sxm"', "tp": "1, 2", "pairs": '"llama-3.1-8b+llama-3.2-1b"',
             "engines": '"vllm-v1"', "policies": '"fixed:3"', "workloads": '"sharegpt"'}
# drafts that are not a model preset: an EAGLE head, n-gram lookup, the target's own MTP module
# (src/hardware/scenario.py SPECIAL_DRAFTS; an mtp pair needs a target with mtp_layers)
SPECIAL_DRAFTS = ("eagle", "mtp", "ngram")
TP_SIZES = (1, 2, 4, 8)


@dataclass(frozen=True)
class PlanConfig:
    """A validated plan: the deployments' axes, the policies, the SLO and the search's settings."""

    gpus: tuple[str, ...]
    tp_sizes: tuple[int, ...]
    pairs: tuple[tuple[str, str], ...]  # (target, draft)
    engines: tuple[str, ...]
    policies: tuple[str, ...]  # "none" first
    workloads: tuple[str, ...]
    slo_ttft_s: float = 2.0
    slo_tpot_s: float = 0.050
    slo_attainment_target: float = 0.9  # as serve: a rate meets the SLO when 90% of requests do
    target_rate_per_s: float | None = None
    prices_usd_per_gpu_hour: tuple[tuple[str, float], ...] = ()  # (gpu, price); () = none given
    price_source: str = ""
    alpha: float | None = None  # a point acceptance for every request, else quality_mode
    quality_mode: str | None = None  # a StudyConfig quality mode (default: its first)
    duration_s: float = 30.0  # arrival window of every probe (its steady-state test uses it)
    replications: int = 2
    tolerance: float = 0.1  # the search stops at first miss / last meet <= 1 + tolerance
    start_rate_per_s: float = 4.0
    seed: int = 20261129
    max_gamma: int = 8
    source: str = "options"  # the plan file, for the summary
    # (path, SHA-256 of its bytes) of every config.json model: part of each search's cache key
    model_files: tuple[tuple[str, str], ...] = ()
    kernels: str | None = None  # --kernels (src/kernels/costmodel.py); None: measured where found
    disagg: object | None = None  # the plan file's [disagg] table (src/plan/disagg_config.py)

    def price(self, gpu: str) -> float | None:
        return dict(self.prices_usd_per_gpu_hour).get(gpu)


def _number(flag: str, value: Any, low: float, high: float, integer: bool = False,
            low_open: bool = False) -> float:
    kind = "an integer" if integer else "a number"
    try:
        if isinstance(value, bool):
            raise ValueError
        v = ascii_int(str(value)) if integer else ascii_float(value)
    except (TypeError, ValueError):
        raise ConfigError(flag, f"'{value}' is not {kind}; allowed: {low:g}..{high:g}") from None
    if not math.isfinite(v) or not (low < v if low_open else low <= v) or v > high:
        bound = f"> {low:g}" if low_open else f"{low:g}..{high:g}"
        raise ConfigError(flag, f"{value} is out of range; allowed: {bound}"
                          + (f" up to {high:g}" if low_open else ""))
    return v


def _names(flag: str, value: Any, known, what: str) -> tuple[str, ...]:
    items = list_items(flag, value, what)
    for item in items:
        if not isinstance(item, str) or item not in known:
            raise ConfigError(flag, f"unknown {what} '{item}'; allowed: {', '.join(sorted(known))}")
    if len(set(items)) != len(items):
        dup = next(x for i, x in enumerate(items) if x in items[:i])
        raise ConfigError(flag, f"{what} '{dup}' is listed twice")
    return tuple(items)


def _model_arg(value: str, base: str | None) -> str:
    """A pair's model: a preset id as given, or a config.json path made absolute (a relative one
    from the plan file's folder, `base`, else from the working directory)."""
    if not looks_like_config_path(value):
        return value
    if base and not os.path.isabs(value):
        value = os.path.join(os.path.dirname(base), value)
    return os.path.abspath(value)


def _split_pair(item: str, models) -> tuple[str, str] | None:
    """target+draft at the '+' that leaves a model on both sides (a config.json path may hold a
    '+' itself); None where no '+' does."""
    cuts = [i for i, c in enumerate(item) if c == "+"]
    def ok(name, draft):
        return bool(name) and (name in models or looks_like_config_path(name)
                               or (draft and name in SPECIAL_DRAFTS))
    good = [(item[:i].strip(), item[i + 1:].strip()) for i in cuts
            if ok(item[:i].strip(), False) and ok(item[i + 1:].strip(), True)]
    if good:
        return good[0]
    if cuts:
        return item[:cuts[0]].strip(), item[cuts[0] + 1:].strip()
    return None


def parse_pairs(flag: str, value: Any, models, base: str | None = None
                ) -> tuple[tuple[str, str], ...]:
    """'target+draft,...' (or a TOML list of such strings) -> ((target, draft), ...). A model is
    a preset id or a Hugging Face config.json path (read and checked here, so a bad file, a
    draft whose vocabulary is not the target's or a head used as a target is refused before any
    work); `base`: the plan file, whose folder relative paths are taken from."""
    from src.costmodel import CostModelInputError
    from src.hardware.scenario import check_vocabularies

    out = []
    drafts = ", ".join((*SPECIAL_DRAFTS, *sorted(models)))
    example = "llama-3.1-8b+llama-3.2-1b or PATH/config.json+PATH/draft.json"
    for item in list_items(flag, value, f"target+draft pairs, e.g. {example}"):
        split = _split_pair(str(item), models)
        if split is None or not split[0] or not split[1]:
            raise ConfigError(flag, f"'{item}' is not target+draft, e.g. {example}")
        target, draft = split
        if target not in models:
            raise ConfigError(flag, f"unknown target model '{target}'; allowed: "
                                    f"{', '.join(sorted(models))}, or a config.json path")
        if draft not in models and draft not in SPECIAL_DRAFTS:
            raise ConfigError(flag, f"unknown draft '{draft}'; allowed: {drafts}, or a "
                                    "config.json path")
        target, draft = _model_arg(target, base), _model_arg(draft, base)
        try:
            specs = [models[m] for m in (target, draft) if m not in SPECIAL_DRAFTS]
        except CostModelInputError as e:
            raise ConfigError(flag, e.allowed) from None
        if specs[0].architecture == "eagle3":
            raise ConfigError(flag, f"{target} is an EAGLE-3 draft head, not a target; allowed "
                                    "as the draft of its target")
        if draft not in SPECIAL_DRAFTS and specs[1].architecture != "eagle3":
            check_vocabularies(models, target, draft, flag)
        out.append((target, draft))
    if len(set(out)) != len(out):
        raise ConfigError(flag, "a pair is listed twice")
    return tuple(out)


def parse_prices(flag: str, value: Any, gpus: tuple[str, ...]) -> tuple[tuple[str, float], ...]:
    """{gpu: USD per GPU-hour} (a TOML table, or 'gpu=price,...'): every listed GPU, each > 0."""
    if isinstance(value, str):
        table = {}
        for part in list_items(flag, value, "gpu=USD per GPU-hour, e.g. h100-sxm=2.99"):
            gpu, eq, price = part.partition("=")
            if not eq:
                raise ConfigError(flag, f"'{part}' is not gpu=price, e.g. h100-sxm=2.99")
            if gpu.strip() in table:
                raise ConfigError(flag, f"{gpu.strip()} given twice in '{value}'; give each "
                                        "GPU's price once")
            table[gpu.strip()] = price.strip()
    elif isinstance(value, Mapping):
        table = dict(value)
    else:
        raise ConfigError(flag, "expected a table of GPU = USD per GPU-hour")
    for gpu in table:
        if gpu not in gpus:
            raise ConfigError(flag, f"a price for '{gpu}', which the plan does not list; "
                                    f"allowed: {', '.join(gpus)}")
    missing = [g for g in gpus if g not in table]
    if missing:
        raise ConfigError(flag, f"no price for {', '.join(missing)}; give one for every GPU of "
                                "the plan, or none")
    out = []
    for gpu in gpus:
        raw = table[gpu]
        try:
            price = ascii_float(raw) if not isinstance(raw, bool) else math.nan
        except (TypeError, ValueError):
            price = math.nan
        if not (math.isfinite(price) and price > 0):
            raise ConfigError(f"{flag} {gpu}" if flag.startswith("--") else f"{flag}.{gpu}",
                              f"{raw!r} is not a price > 0 (USD per GPU-hour)")
        out.append((gpu, price))
    return tuple(out)


def read_plan_file(path: str) -> dict:
    """The plan file as {"plan": {...}, "prices": {...}[, "disagg": DisaggPlan]}; ConfigError on
    --plan (or naming the bad key)."""
    data = read_toml(path, "--plan")  # the project's TOML reader: at most MAX_TOML_BYTES
    for key in data:
        if key not in ("plan", "prices", "disagg"):
            raise ConfigError(key, "unknown table; allowed: plan, prices, disagg")
    plan = data.get("plan")
    if not isinstance(plan, Mapping):
        raise ConfigError("--plan", f"{path} has no [plan] table")
    unknown = sorted(set(plan) - set(PLAN_KEYS))
    if unknown:
        raise ConfigError(f"plan.{unknown[0]}", f"unknown key; allowed: {', '.join(PLAN_KEYS)}")
    prices = data.get("prices", {})
    if not isinstance(prices, Mapping):
        raise ConfigError("prices", "expected a table of GPU = USD per GPU-hour")
    out = {"plan": dict(plan), "prices": dict(prices)}
    if "disagg" in data:
        from src.plan.disagg_config import parse_disagg_plan
        out["disagg"] = parse_disagg_plan(data["disagg"])
    return out


def build_plan(options: Mapping[str, Any], path: str | None) -> PlanConfig:
    """A PlanConfig from options (None = not given) over the plan file over the defaults."""
    from src.config import StudyConfig
    from src.costmodel import load_engine_profiles, load_presets
    from src.online.cli import parse_slo
    from src.online.policies import BatchSchedule, parse_policies
    from src.online.workloads import load_workloads

    data = read_plan_file(path) if path else {"plan": {}, "prices": {}}
    plan, prices = data["plan"], data["prices"]

    def pick(key: str, default=None, required: bool = False):
        """(value, name for errors)."""
        option = "--" + key.replace("_", "-")
        if options.get(key) is not None:
            return options[key], option
        if key in plan:
            if key in LIST_KEYS and not isinstance(plan[key], list):
                # a string '1,2' is the command line's form, a likely mistake in a file
                raise ConfigError(f"plan.{key}", f"expected a TOML list, e.g. {key} = "
                                                 f"[{LIST_KEYS[key]}], got {plan[key]!r}")
            return plan[key], f"plan.{key}"
        if required:
            raise ConfigError(option, f"required (or plan.{key} in --plan)")
        return default, option

    presets = load_presets()
    value, flag = pick("gpus", required=True)
    gpus = _names(flag, value, presets.gpus, "GPU")
    value, flag = pick("tp", [1])
    tps = []
    for item in list_items(flag, value, "tensor-parallel sizes, e.g. 1,2"):
        tps.append(int(_number(flag, item, 1, 64, integer=True)))
    if len(set(tps)) != len(tps):
        raise ConfigError(flag, "a tp size is listed twice")
    value, flag = pick("pairs", required=True)
    pairs = parse_pairs(flag, value, presets.models, path if flag.startswith("plan.") else None)
    value, flag = pick("engines", ["vllm-v1"])
    engines = _names(flag, value, load_engine_profiles(), "engine profile")
    value, flag = pick("workloads", ["sharegpt"])
    workloads = _names(flag, value, load_workloads(), "workload")
    value, flag = pick("max_gamma", 8)
    max_gamma = int(_number(flag, value, 1, 32, integer=True))
    value, flag = pick("policies", [])
    listed = [] if value in ([], "") else list_items(
        flag, value, "policies: none, fixed[:G], schedule, adaptive, off-above[:N[:G]], "
        "sglang-adaptive[:ema|:throughput_aware]")
    parse_policies(",".join(map(str, listed)) or "none", 1, max_gamma,
                   BatchSchedule(((1, 1, 1),), 1), 1, field_name=flag)  # the syntax
    policies = tuple(dict.fromkeys(["none", *map(str, listed)]))
    value, flag = pick("slo", "ttft=2s,tpot=50ms")
    ttft, tpot = parse_slo(flag, value)
    value, flag = pick("target_rate")
    target = None if value is None else _number(flag, value, 0, 1e6, low_open=True)
    alpha_v, alpha_f = pick("alpha")
    mode_v, mode_f = pick("quality_mode")
    if alpha_v is not None and mode_v is not None:
        raise ConfigError(alpha_f, f"give either {alpha_f} or {mode_f}, not both")
    alpha = None if alpha_v is None else check_alpha(alpha_f, alpha_v)
    if mode_v is not None and str(mode_v) not in StudyConfig().alpha_modes:
        raise ConfigError(mode_f, f"unknown quality mode '{mode_v}'; allowed: "
                                  f"{', '.join(sorted(StudyConfig().alpha_modes))}")
    defaults = {f.name: f.default for f in fields(PlanConfig)}
    value, flag = pick("duration_s", defaults["duration_s"])
    duration = _number(flag, value, 1, 86400)
    value, flag = pick("replications", defaults["replications"])
    replications = int(_number(flag, value, 2, 1000, integer=True))
    value, flag = pick("tolerance", defaults["tolerance"])
    tolerance = _number(flag, value, 0.005, 1.0)
    value, flag = pick("start_rate", defaults["start_rate_per_s"])
    start = _number(flag, value, 0, 1e5, low_open=True)
    value, flag = pick("seed", defaults["seed"])
    seed = int(_number(flag, value, 0, 2**63 - 1, integer=True))
    price_table, source = None, ""
    if options.get("prices") is not None:
        price_table, price_flag = options["prices"], "--prices"
    elif prices:
        price_table = {k: v for k, v in prices.items() if k != "source"}
        price_flag, source = "prices", str(prices.get("source", "")).strip()
        if not source:
            raise ConfigError("prices.source", "say where the prices come from (a price list "
                                               "and its date)")
    parsed_prices = parse_prices(price_flag, price_table, gpus) if price_table is not None else ()
    if options.get("prices") is not None:
        source = "given with --prices"
    return PlanConfig(
        gpus=gpus, tp_sizes=tuple(tps), pairs=pairs, engines=engines, policies=policies,
        workloads=workloads, slo_ttft_s=ttft, slo_tpot_s=tpot, target_rate_per_s=target,
        prices_usd_per_gpu_hour=parsed_prices, price_source=source, alpha=alpha,
        quality_mode=None if mode_v is None else str(mode_v), duration_s=duration,
        replications=replications, tolerance=tolerance, start_rate_per_s=start, seed=seed,
        max_gamma=max_gamma, source=path or "options", disagg=data.get("disagg"), model_files=tuple(
            (m, hashlib.sha256(read_file_bytes(m, "--pairs", "a Hugging Face config.json"))
             .hexdigest()) for m in dict.fromkeys(m for pair in pairs for m in pair)
            if looks_like_config_path(m)))
