"""Study configuration: frozen dataclasses, validated once at the edge.

Everything a run depends on lives in one `StudyConfig`. It is built from defaults, then a TOML file
(`--config`), then command-line options, in that order; `build_config` checks every field and
raises `ConfigError` naming the field and what is allowed. Nothing downstream re-validates.
"""
from __future__ import annotations

import argparse
import math
import textwrap
from dataclasses import dataclass, field, fields, replace
from typing import Any, Callable, Mapping, Union

from src.errors import ConfigError, ascii_float, ascii_int
from src.input_files import read_text_file, read_toml  # noqa: F401 (the readers' home here)
from src.treeshape import config_rules as tr

QUALITY_MODES = ("homogeneous_good", "homogeneous_mid", "heterogeneous", "bimodal")
SERVING_MODES = ("static_batch", "continuous_refill")
VERIFICATION_POLICIES = ("ragged", "lockstep")

# vLLM's largest default max_num_seqs-scale batch; beyond is not a serving batch
MAX_BATCH_SIZE = 4096
MAX_GAMMA = 64  # no engine speculates deeper; acceptance^65 is ~0 for any alpha < 0.95
ALPHA_CLIP = (0.001, 0.999)  # sampled alphas are clipped here so every request has 0 < alpha < 1


class HelpFormatter(argparse.HelpFormatter):
    """argparse's formatter, wrapping at spaces only: ids such as homogeneous_mid or h100-sxm and
    paths are never split across lines."""

    def _split_lines(self, text, width):
        return textwrap.wrap(" ".join(text.split()), width, break_long_words=False,
                             break_on_hyphens=False)

    def _fill_text(self, text, width, indent):
        return textwrap.fill(" ".join(text.split()), width, initial_indent=indent,
                             subsequent_indent=indent, break_long_words=False,
                             break_on_hyphens=False)


class _StoreOnce(argparse._StoreAction):
    """argparse's plain store, except that the same option a second time is refused rather than
    silently replacing the first value."""

    def __call__(self, parser, namespace, values, option_string=None):
        given = namespace.__dict__.setdefault("_options_given", set())
        if self.dest in given:
            parser.error(f"{option_string}: given twice ({getattr(namespace, self.dest)!r} and "
                         f"{values!r}); give it once")
        given.add(self.dest)
        setattr(namespace, self.dest, values)


class OneLineArgumentParser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line (and exit code 2), like every other bad
    input, and wraps help at spaces only. An option given twice is refused (every option added
    without an explicit action, argument groups included) unless refuse_repeats=False."""

    def __init__(self, *args, refuse_repeats: bool = True, **kwargs):
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)
        if refuse_repeats:
            self.register("action", None, _StoreOnce)

    def error(self, message):
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")


@dataclass(frozen=True)
class Rule:
    """How one StudyConfig field is checked and converted (`parse`), and what --help says of it."""

    parse: Callable[[str, Any, Mapping[str, AlphaDistribution]], Any]  # (field, raw, alpha modes)
    allowed: str  # the values allowed, for --help


def setting(default, help: str, rule: Rule | None, option: bool = False, factory=None):
    """A StudyConfig field carrying its meaning, its check and whether the command line offers it
    as --field-name (src/cli.py builds the options from these)."""
    metadata = {"help": help, "rule": rule, "option": option}
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def _listed(parse, what: str, allowed: str) -> Rule:
    """The Rule of a list field: the value's items by list_items (naming `what`), then parse."""
    return Rule(lambda n, v, m: parse(n, list_items(n, v, what)), allowed)


_COUNT = Rule(lambda n, v, m: _integer(n, v, 1, 1_000_000), "an integer in 1..1000000")
_OPEN_UNIT = Rule(lambda n, v, m: _open_unit(n, v), "strictly between 0 and 1")


# --- distributions of the per-request draft acceptance probability alpha --------------------------

@dataclass(frozen=True)
class PointAlpha:
    value: float  # every request has this alpha


@dataclass(frozen=True)
class NormalAlpha:
    mean: float  # centre of the normal
    std: float  # standard deviation; draws are clipped to ALPHA_CLIP


@dataclass(frozen=True)
class UniformAlpha:
    low: float  # inclusive lower bound
    high: float  # upper bound


@dataclass(frozen=True)
class BetaAlpha:
    a: float  # Beta(a, b): mean a / (a + b)
    b: float


@dataclass(frozen=True)
class MixtureAlpha:
    weights: tuple[float, ...]  # mixture weights, summing to 1 (within 1e-6; renormalised)
    components: tuple["AlphaDistribution", ...]  # one distribution per weight


@dataclass(frozen=True)
class PerPositionAlpha:
    """Conditional acceptance rates by draft position (src/acceptance.py, "Per-position").

    rates[i-1] = P(draft token i accepted | tokens 1..i-1 accepted); positions past the last rate
    reuse it. Requests differ by a scale s on the hazard: a request's rates are rates[i]^s, with
    ln s ~ Normal(0, spread) (s has median 1, so `rates` are the median request's), or s drawn
    from `scales` (an empirical list, e.g. fitted to a trace) when that is given.
    """

    rates: tuple[float, ...]  # conditional rates a_1..a_k, each in (0, 1], at least one below 1
    spread: float = 0.0  # sigma of ln s across requests; 0 = every request has exactly `rates`
    scales: tuple[float, ...] = ()  # empirical per-request scales s (> 0); replaces spread if given
    source: str = ""  # where the rates come from, shown in summary.txt
    # an i.i.d. mode the summary compares this one with (best gamma, speedup)
    compare_with: str = ""


AlphaDistribution = Union[PointAlpha, NormalAlpha, UniformAlpha, BetaAlpha, MixtureAlpha,
                          PerPositionAlpha]

# The reference study's four draft-quality modes (design.md, "Workload", gives the reasoning).
DEFAULT_ALPHA_MODES: dict[str, AlphaDistribution] = {
    "homogeneous_good": NormalAlpha(mean=0.85, std=0.02),
    "homogeneous_mid": NormalAlpha(mean=0.65, std=0.02),
    "heterogeneous": UniformAlpha(low=0.45, high=0.85),
    "bimodal": MixtureAlpha(
        weights=(0.5, 0.5),
        components=(NormalAlpha(mean=0.85, std=0.03), NormalAlpha(mean=0.45, std=0.05)),
    ),
}


# --- distributions of token counts (prompt and output lengths) ------------------------------------

@dataclass(frozen=True)
class FixedLength:
    tokens: int  # every request has this many tokens


@dataclass(frozen=True)
class UniformLength:
    low: int  # inclusive
    high: int  # inclusive


@dataclass(frozen=True)
class LognormalLength:
    median: float  # exp(mu) of the lognormal
    sigma: float  # shape; draws are rounded and clipped to [low, high]
    low: int
    high: int


LengthDistribution = Union[FixedLength, UniformLength, LognormalLength]


@dataclass(frozen=True)
class StudyConfig:
    batch_sizes: tuple[int, ...] = setting(
        (1, 2, 4, 8, 16, 32, 64), "batch sizes (concurrent sequences, slots)",
        Rule(lambda n, v, m: _int_list(n, v, 1, MAX_BATCH_SIZE), f"1..{MAX_BATCH_SIZE}"),
        option=True)
    gammas: tuple[int, ...] = setting(
        (1, 2, 4, 6, 8, 12, 16), "draft tokens proposed per step",
        Rule(lambda n, v, m: _int_list(n, v, 1, MAX_GAMMA), f"1..{MAX_GAMMA}"), option=True)
    trees: tuple = setting((), tr.TREES_HELP, _listed(*tr.TREES), option=True)  # src/treeshape/
    sibling_vector: tuple = setting(tr.SEQUOIA_VECTOR, tr.SIBLINGS_HELP, _listed(*tr.SIBLINGS))
    quality_modes: tuple[str, ...] = setting(
        QUALITY_MODES, "draft-quality modes to run",
        Rule(lambda n, v, m: _name_list(n, v, tuple(m)), "the default quality modes or ones "
             "defined in --config"), option=True)
    alpha_modes: Mapping[str, AlphaDistribution] = setting(
        None, "every known draft-quality mode, built-in and user: name -> acceptance distribution",
        None, factory=lambda: dict(DEFAULT_ALPHA_MODES))  # parsed by build_config itself
    serving_modes: tuple[str, ...] = setting(
        SERVING_MODES, "serving modes",
        Rule(lambda n, v, m: _name_list(n, v, SERVING_MODES), ", ".join(SERVING_MODES)),
        option=True)
    verification: str = setting(
        "ragged", "how a batch commits accepted drafts: ragged = each sequence keeps its own "
        "accepted prefix, lockstep = the batch advances by its smallest accepted count",
        Rule(lambda n, v, m: _choice(n, v, VERIFICATION_POLICIES),
             " or ".join(VERIFICATION_POLICIES)),
        option=True)
    seed: int = setting(20261129, "root random seed of every random stream",
                        Rule(lambda n, v, m: _integer(n, v, 0, None), "an integer >= 0"),
                        option=True)
    temperature: float = setting(
        0.0, "sampling temperature of the hardware scenario's requests: > 0 prices the "
        "sampler's and rejection sampler's probability traffic per step and needs acceptance "
        "measured at that temperature (the reference study's flat cost model has no sampler)",
        Rule(lambda n, v, m: _bounded(n, v, 0.0, 2.0), "0..2"), option=True)
    draft_cost: float = setting(
        0.2, "cost of one draft pass in target passes (flat cost model)",
        Rule(lambda n, v, m: _bounded(n, v, 0.0, 10.0), "0..10"), option=True)
    output_len: LengthDistribution = setting(
        UniformLength(64, 256), "tokens each request generates",
        Rule(lambda n, v, m: parse_length_distribution(n, v), "a length table"))
    prompt_len: LengthDistribution = setting(
        UniformLength(1024, 2048), "context before decoding starts, tokens",
        Rule(lambda n, v, m: parse_length_distribution(n, v), "a length table"))
    requests_per_slot: int = setting(
        4, "requests per replication = requests_per_slot x batch size", _COUNT)
    slot_rows_per_block: int = setting(
        256, "replications per block = max(min_replications_per_block, this // batch)", _COUNT)
    min_replications_per_block: int = setting(8, "fewest replications simulated together", _COUNT)
    ci_half_width: float = setting(
        0.015, "add replication blocks until the speedup CI half-width is this tight", _OPEN_UNIT)
    max_replications: int = setting(8192, "stop adding blocks here, and say so", _COUNT)
    confidence: float = setting(0.95, "confidence level of every interval", _OPEN_UNIT)

    def replications_per_block(self, batch_size: int) -> int:
        return max(self.min_replications_per_block, self.slot_rows_per_block // batch_size)


# --- parsing and validation -----------------------------------------------------------------------

def _number(name: str, value: Any, *, integer: bool = False,
            error: type[ConfigError] = ConfigError) -> float | int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        if isinstance(value, str):
            try:
                value = ascii_int(value) if integer else ascii_float(value)
            except ValueError:
                kind = "an integer" if integer else "a number"
                raise error(name, f"expected {kind}, got {value!r}") from None
        else:
            raise error(name, f"expected a number, got {value!r}")
    if integer and isinstance(value, float):  # TOML's 1.0 is a float: an int field wants 1
        raise error(name, f"expected an integer, got {value!r}")
    if integer and (not float(value).is_integer()):
        raise error(name, f"expected an integer, got {value!r}")
    if not math.isfinite(float(value)):
        raise error(name, f"expected a finite number, got {value!r}")
    return int(value) if integer else float(value)


def coerce(name: str, value: Any, kind: str, error: type[ConfigError] = ConfigError):
    """The project's one conversion of a raw value (TOML or command line) to a field's type, kind
    "int", "float", "bool" or "str" (a dataclass field's annotation); error(name, ...) if it is not
    one. Numbers may come as text (the command line); they must be finite."""
    kind = kind.removesuffix(" | None")  # an optional field: a given value is never None
    if kind == "bool":
        if not isinstance(value, bool):
            raise error(name, f"expected true or false, got {value!r}")
        return value
    if kind == "str":
        if not isinstance(value, str):
            raise error(name, f"expected a string, got {value!r}")
        return value
    return _number(name, value, integer=kind == "int", error=error)


def list_items(name: str, value: Any, allowed: str) -> list:
    """Items of a comma-separated string or a TOML list, strings stripped. No item, or an empty
    one ('1,,2', a trailing comma), is refused rather than dropped: the study's and serve's lists
    share this rule. `allowed` ends "expected a non-empty comma-separated list of ..."."""
    if isinstance(value, str):
        items = [s.strip() for s in value.split(",")] if value.strip() else []
    else:
        items = value
    expected = f"expected a non-empty comma-separated list of {allowed}"
    if not isinstance(items, (list, tuple)) or not items:
        raise ConfigError(name, expected)
    if any(isinstance(i, str) and not i.strip() for i in items):
        shown = value if isinstance(value, str) else ",".join(map(str, value))
        raise ConfigError(name, f"'{shown}' has an empty item; {expected}")
    return [i.strip() if isinstance(i, str) else i for i in items]


def _int_list(name: str, value: Any, low: int, high: int) -> tuple[int, ...]:
    items = list_items(name, value, f"integers {low}..{high}")
    out = []
    for item in items:
        n = _number(name, item, integer=True)
        if not low <= n <= high:
            raise ConfigError(name, f"each value must be an integer in {low}..{high}, got {item}")
        if n in out:
            raise ConfigError(name, f"{n} is listed twice; give each value once")
        out.append(n)
    return tuple(sorted(out))


def _name_list(name: str, value: Any, known: tuple[str, ...]) -> tuple[str, ...]:
    items = list_items(name, value, f"these names: {', '.join(known)}")
    for i, item in enumerate(items):
        if item not in known:
            raise ConfigError(name, f"unknown {item!r}; allowed: {', '.join(known)}")
        if item in items[:i]:
            raise ConfigError(name, f"{item!r} is listed twice; give each value once")
    return tuple(items)


def _choice(name: str, value: Any, known: tuple[str, ...]) -> str:
    if value not in known:
        raise ConfigError(name, f"unknown {value!r}; allowed: {', '.join(known)}")
    return value


def _integer(name: str, value: Any, low: int, high: int | None) -> int:
    n = _number(name, value, integer=True)
    if n < low or (high is not None and n > high):
        allowed = f"an integer >= {low}" if high is None else f"an integer in {low}..{high}"
        raise ConfigError(name, f"must be {allowed}, got {value}")
    return n


def _bounded(name: str, value: Any, low: float, high: float) -> float:
    x = _number(name, value)
    if not low <= x <= high:
        raise ConfigError(name, f"must be in {low:g}..{high:g}, got {value}")
    return x


def _open_unit(name: str, value: Any) -> float:
    x = _number(name, value)
    if not 0.0 < x < 1.0:
        raise ConfigError(name, f"must be strictly between 0 and 1, got {value}")
    return x


def check_alpha(name: str, value: Any) -> float:
    """An acceptance probability the simulator uses as given: within ALPHA_CLIP, where it clips
    sampled alphas (a value outside would be changed silently, so it is refused)."""
    a = _number(name, value)
    low, high = ALPHA_CLIP
    if not low <= a <= high:
        raise ConfigError(name,
                          f"alpha must be in {low:g}..{high:g} (the simulator clips acceptance "
                                f"probabilities to that range), got {value}")
    return a


def check_keys(name: str, table: Mapping, allowed: tuple[str, ...],
               required: tuple[str, ...] | None = None) -> None:
    """Every key of `table` must be in `allowed`, every key of `required` (default: all allowed)
    present."""
    for key in table:
        if key not in allowed:
            raise ConfigError(f"{name}.{key}", f"unknown key; allowed: {', '.join(allowed)}")
    for key in allowed if required is None else required:
        if key not in table:
            raise ConfigError(f"{name}.{key}", "missing (required)")


MAX_SPREAD = 2.0  # sigma of ln s; 2 already spans a factor e^4 ~ 55 in hazard between +-1 sigma


def check_rate(name: str, value: Any) -> float:
    """A conditional acceptance rate: 0 < a <= 1."""
    a = _number(name, value)
    if not 0.0 < a <= 1.0:
        raise ConfigError(name, f"acceptance rates must lie in (0, 1], got {value}")
    return a


def parse_per_position(name: str, params: Mapping) -> PerPositionAlpha:
    """{rates = [a1, ..., ak], spread = sigma} or {rates = [...], scales = [s, ...]}."""
    check_keys(name, params, ("rates", "spread", "scales", "source", "compare_with"),
               required=("rates",))
    rates = params["rates"]
    if not isinstance(rates, (list, tuple)) or not 1 <= len(rates) <= MAX_GAMMA:
        raise ConfigError(f"{name}.rates",
                          f"expected a list of 1..{MAX_GAMMA} conditional rates in (0, 1]")
    out = tuple(check_rate(f"{name}.rates[{i}]", a) for i, a in enumerate(rates))
    if all(a == 1.0 for a in out):
        raise ConfigError(f"{name}.rates",
                          "at least one rate must be below 1 (a draft that is never "
                                           "rejected has no optimal gamma)")
    if "spread" in params and "scales" in params:
        raise ConfigError(f"{name}.scales", "give either spread or scales, not both")
    spread = _number(f"{name}.spread", params.get("spread", 0.0))
    if not 0.0 <= spread <= MAX_SPREAD:
        raise ConfigError(f"{name}.spread",
                          f"sigma of ln(scale) must be in 0..{MAX_SPREAD:g}, got {spread}")
    scales = params.get("scales", [])
    if not isinstance(scales, (list, tuple)) or ("scales" in params and not scales):
        raise ConfigError(f"{name}.scales", "expected a non-empty list of per-request scales > 0")
    checked = tuple(_number(f"{name}.scales", s) for s in scales)
    if any(s <= 0 for s in checked):
        raise ConfigError(f"{name}.scales", "every per-request scale must be > 0")
    text = {}
    for key in ("source", "compare_with"):
        text[key] = params.get(key, "")
        if not isinstance(text[key], str):
            raise ConfigError(f"{name}.{key}", f"expected a string, got {text[key]!r}")
    return PerPositionAlpha(out, spread, checked, **text)


def alpha_from_acceptance_length(name: str, tau: Any, gamma: Any) -> float:
    """The i.i.d. per-token rate a whose chain of `gamma` drafts has mean accept length `tau`
    (bonus token included): tau = (1 - a^(gamma+1)) / (1 - a), increasing in a, by bisection."""
    k = _number(f"{name}.gamma", gamma, integer=True)
    if not 1 <= k <= MAX_GAMMA:
        raise ConfigError(f"{name}.gamma", f"must be an integer in 1..{MAX_GAMMA}, got {gamma}")
    t = _number(f"{name}.tau", tau)
    if not 1.0 < t < k + 1:
        raise ConfigError(f"{name}.tau", f"must lie strictly between 1 and gamma + 1 = {k + 1}, "
                                         f"got {tau}")
    lo, hi = 0.0, 1.0
    for mid in ((lo + hi) / 2 for _ in range(200)):  # reads lo, hi as the body rebinds them
        lo, hi = (mid, hi) if sum(mid ** i for i in range(k + 1)) < t else (lo, mid)
    return check_alpha(f"{name}.tau", round((lo + hi) / 2, 12))


WEIGHT_SUM_TOLERANCE = 1e-6  # mixture weights: room for decimals such as 1/3 written 0.333333


def parse_alpha_distribution(name: str, table: Any) -> AlphaDistribution:
    """A TOML table {kind = "point"|"normal"|"uniform"|"beta"|"mixture"|"per_position", ...} ->
    distribution of per-request acceptance."""
    kinds = ("point", "normal", "uniform", "beta", "mixture", "per_position", "acceptance_length")
    if not isinstance(table, Mapping) or table.get("kind") not in kinds:
        raise ConfigError(f"{name}.kind", f"expected one of: {', '.join(kinds)}")
    kind = table["kind"]
    params = {k: v for k, v in table.items() if k != "kind"}
    if kind == "point":
        check_keys(name, params, ("value",))
        return PointAlpha(check_alpha(f"{name}.value", params["value"]))
    if kind == "acceptance_length":  # a published mean accept length of a chain of `gamma` drafts
        check_keys(name, params, ("tau", "gamma"))
        return PointAlpha(alpha_from_acceptance_length(name, params["tau"], params["gamma"]))
    if kind == "normal":
        check_keys(name, params, ("mean", "std"))
        std = _number(f"{name}.std", params["std"])
        if not 0.0 <= std <= 0.5:
            raise ConfigError(f"{name}.std", f"must be in 0..0.5, got {std}")
        return NormalAlpha(check_alpha(f"{name}.mean", params["mean"]), std)
    if kind == "uniform":
        check_keys(name, params, ("low", "high"))
        low, high = check_alpha(f"{name}.low", params["low"]), check_alpha(f"{name}.high",
                                                                           params["high"])
        if low > high:
            raise ConfigError(f"{name}.low", f"must not exceed high ({high}), got {low}")
        return UniformAlpha(low, high)
    if kind == "beta":
        check_keys(name, params, ("a", "b"))
        a, b = _number(f"{name}.a", params["a"]), _number(f"{name}.b", params["b"])
        if a <= 0 or b <= 0:
            raise ConfigError(f"{name}.a", "Beta parameters a and b must both be > 0")
        return BetaAlpha(a, b)
    if kind == "per_position":
        return parse_per_position(name, params)
    check_keys(name, params, ("weights", "components"))
    weights, comps = params["weights"], params["components"]
    if (not isinstance(weights, list) or not isinstance(comps, list) or not weights
            or len(weights) != len(comps)):
        raise ConfigError(f"{name}.weights",
                          "expected a list of weights, one per entry of components")
    ws = [_number(f"{name}.weights", w) for w in weights]
    if any(w < 0 for w in ws) or sum(ws) <= 0:
        raise ConfigError(f"{name}.weights", "weights must be >= 0 with a positive sum")
    total = sum(ws)
    if abs(total - 1.0) > WEIGHT_SUM_TOLERANCE:  # a typo would otherwise be renormalised away
        raise ConfigError(f"{name}.weights", f"weights {weights} sum to {total:g}; allowed: "
                          f"weights that sum to 1 (within {WEIGHT_SUM_TOLERANCE:g})")
    components = tuple(parse_alpha_distribution(f"{name}.components[{i}]", c)
                       for i, c in enumerate(comps))
    for i, component in enumerate(components):
        if isinstance(component, PerPositionAlpha):
            raise ConfigError(f"{name}.components[{i}].kind", "per_position cannot be a mixture "
                                                              "component; give it a spread instead")
    return MixtureAlpha(tuple(w / total for w in ws), components)


def parse_length_distribution(name: str, table: Any) -> LengthDistribution:
    """A TOML table {kind = "fixed"|"uniform"|"lognormal", ...} -> distribution of token counts."""
    kinds = ("fixed", "uniform", "lognormal")
    if not isinstance(table, Mapping) or table.get("kind") not in kinds:
        raise ConfigError(f"{name}.kind", f"expected one of: {', '.join(kinds)}")
    params = {k: v for k, v in table.items() if k != "kind"}

    def tokens(key: str, low: int = 1) -> int:
        n = _number(f"{name}.{key}", params[key], integer=True)
        if not low <= n <= 1_000_000:
            raise ConfigError(f"{name}.{key}", f"must be an integer in {low}..1000000, got {n}")
        return n

    if table["kind"] == "fixed":
        check_keys(name, params, ("tokens",))
        return FixedLength(tokens("tokens"))
    if table["kind"] == "uniform":
        check_keys(name, params, ("low", "high"))
        low, high = tokens("low"), tokens("high")
        if low > high:
            raise ConfigError(f"{name}.low", f"must not exceed high ({high}), got {low}")
        return UniformLength(low, high)
    check_keys(name, params, ("median", "sigma", "low", "high"))
    low, high = tokens("low"), tokens("high")
    sigma = _number(f"{name}.sigma", params["sigma"])
    median = _number(f"{name}.median", params["median"])
    if low > high or sigma < 0 or median <= 0:
        raise ConfigError(name, "lognormal needs median > 0, sigma >= 0 and low <= high")
    return LognormalLength(median, sigma, low, high)


def load_toml(path: str) -> dict:
    return read_toml(path, "--config")


RULES: dict[str, Rule] = {f.name: f.metadata["rule"] for f in fields(StudyConfig)
                          if f.metadata["rule"] is not None}


def _check_toml_list(name: str, value: Any, kind: str, default: tuple) -> None:
    """A list field in TOML must be a TOML list (a string '1,2' is the command line's form, a
    likely mistake in a file), of integers where the field holds integers."""
    example = ", ".join(f'"{v}"' if isinstance(v, str) else str(v) for v in default[:2])
    if not isinstance(value, list):
        raise ConfigError(name, f"expected a TOML list, e.g. {name} = [{example}], got {value!r}")
    if kind == "tuple[int, ...]":
        for item in value:
            if isinstance(item, bool) or not isinstance(item, int):
                raise ConfigError(name, f"expected a list of integers, got {item!r} in {value!r}")


def build_config(overrides: Mapping[str, Any], base: StudyConfig | None = None,
                 toml: bool = False) -> StudyConfig:
    """Apply raw overrides (from TOML or the command line) to `base`, validating each field.

    Keys are StudyConfig field names; `alpha_modes` is a table of new or redefined quality modes.
    `toml`: the values come from a TOML file, so a list field must be a TOML list (the command
    line's '1,2' is text)."""
    cfg = base or StudyConfig()
    known = tuple(f.name for f in fields(StudyConfig))
    for key in overrides:
        if key not in known:
            raise ConfigError(key, f"unknown configuration key; allowed: {', '.join(known)}")
    if toml:
        for f in fields(StudyConfig):
            if f.name in overrides and str(f.type).startswith("tuple["):
                _check_toml_list(f.name, overrides[f.name], str(f.type), getattr(cfg, f.name))
    new: dict[str, Any] = {}
    alpha_modes = dict(cfg.alpha_modes)
    if "alpha_modes" in overrides:
        table = overrides["alpha_modes"]
        if not isinstance(table, Mapping) or not table:
            raise ConfigError("alpha_modes", "expected a table of named alpha distributions")
        for mode_name, spec in table.items():
            alpha_modes[mode_name] = parse_alpha_distribution(f"alpha_modes.{mode_name}", spec)
        new["alpha_modes"] = alpha_modes
        if "quality_modes" not in overrides:  # a user who defines modes wants to run them
            new["quality_modes"] = tuple(dict.fromkeys((*cfg.quality_modes, *table)))
    for key, value in overrides.items():
        if key != "alpha_modes":
            new[key] = RULES[key].parse(key, value, alpha_modes)
    for mode_name, dist in alpha_modes.items():
        other = getattr(dist, "compare_with", "")
        if other and other not in alpha_modes:
            raise ConfigError(f"alpha_modes.{mode_name}.compare_with",
                              f"unknown mode {other!r}; allowed: {', '.join(alpha_modes)}")
    out = replace(cfg, **new)
    if out.min_replications_per_block < 2:
        raise ConfigError("min_replications_per_block",
                          "must be at least 2 for a confidence interval")
    return out


def alpha_mode_label(alpha: float) -> str:
    """Name of the point-mass mode made by --alpha A."""
    return f"alpha_{alpha:g}"
