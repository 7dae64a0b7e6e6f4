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

Options (`--gpus l40s,h100-sxm`, `--prices l40s=0.86,h100-sxm=2.99`, ...) override the file,
which overrides the defaults. Every bad value raises ConfigError naming the key or option and
what is allowed, before anything is simulated.
"""
from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, fields
from typing import Any, Mapping

from src.config import ConfigError, check_alpha, list_items, read_text_file
from src.errors import ascii_float, ascii_int

PLAN_KEYS = ("gpus", "tp", "pairs", "engines", "policies", "workloads", "slo", "target_rate",
             "alpha", "quality_mode", "duration_s", "replications", "tolerance", "start_rate",
             "seed", "max_gamma")
SPECIAL_DRAFTS = ("eagle", "ngram")
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
        raise ConfigError(flag, f"a {what} is listed twice")
    return tuple(items)


def parse_pairs(flag: str, value: Any, models) -> tuple[tuple[str, str], ...]:
    """'target+draft,...' (or a TOML list of such strings) -> ((target, draft), ...)."""
    out = []
    drafts = ", ".join((*SPECIAL_DRAFTS, *sorted(models)))
    for item in list_items(flag, value, "target+draft pairs, e.g. llama-3.1-8b+llama-3.2-1b"):
        target, plus, draft = str(item).partition("+")
        target, draft = target.strip(), draft.strip()
        if not plus or not target or not draft:
            raise ConfigError(flag, f"'{item}' is not target+draft, e.g. llama-3.1-8b+llama-3.2-1b")
        if target not in models:
            raise ConfigError(flag, f"unknown target model '{target}'; allowed: "
                                    f"{', '.join(sorted(models))}")
        if draft not in models and draft not in SPECIAL_DRAFTS:
            raise ConfigError(flag, f"unknown draft '{draft}'; allowed: {drafts}")
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
    """The plan file as {"plan": {...}, "prices": {...}}; ConfigError on --plan."""
    text = read_text_file(path, "--plan", "a TOML plan file")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError("--plan", f"{path} is not valid TOML ({e})") from None
    for key in data:
        if key not in ("plan", "prices"):
            raise ConfigError(key, "unknown table; allowed: plan, prices")
    plan = data.get("plan")
    if not isinstance(plan, Mapping):
        raise ConfigError("--plan", f"{path} has no [plan] table")
    unknown = sorted(set(plan) - set(PLAN_KEYS))
    if unknown:
        raise ConfigError(f"plan.{unknown[0]}", f"unknown key; allowed: {', '.join(PLAN_KEYS)}")
    prices = data.get("prices", {})
    if not isinstance(prices, Mapping):
        raise ConfigError("prices", "expected a table of GPU = USD per GPU-hour")
    return {"plan": dict(plan), "prices": dict(prices)}


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
    pairs = parse_pairs(flag, value, presets.models)
    value, flag = pick("engines", ["vllm-v1"])
    engines = _names(flag, value, load_engine_profiles(), "engine profile")
    value, flag = pick("workloads", ["sharegpt"])
    workloads = _names(flag, value, load_workloads(), "workload")
    value, flag = pick("max_gamma", 8)
    max_gamma = int(_number(flag, value, 1, 32, integer=True))
    value, flag = pick("policies", [])
    listed = [] if value in ([], "") else list_items(
        flag, value, "policies: none, fixed[:G], schedule, adaptive, off-above[:N[:G]]")
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
        max_gamma=max_gamma, source=path or "options")
