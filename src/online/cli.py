"""`python run.py serve`: the serving sweep from the command line and a scenario's [serving] table.

    python run.py serve --scenario configs/scenarios/h100-llama8b-1b.toml --rates 1,2,4,8,16,32 \
        [--policies none,fixed:3,schedule,adaptive,off-above:32] [--workload sharegpt | --trace F]
        [--slo ttft=2s,tpot=50ms] [--requests N | --duration-s S] [--out DIR]

Options override the scenario file's [serving] table, which overrides the defaults. Bad input gets
one line naming the option (or the [serving] key) and what is allowed, exit code 2, nothing written;
so does an option the run would ignore (drop_ignored), and a list with an empty item ('1,,2').
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from src.config import (
    ConfigError,
    OneLineArgumentParser,
    PerPositionAlpha,
    check_alpha,
    list_items,
    read_toml,
)
from src.costmodel.cudagraph_sizes import add_capture_size_argument, capture_size_option
from src.errors import ascii_float, ascii_int
from src.hardware.scenario import SERVING_KEYS, check_serving_table
from src.kernels.costmodel import add_kernels_argument, check_measured
from src.online.engine_limits import MAX_NUM_BATCHED_TOKENS_HELP, MAX_NUM_SEQS_HELP, scenario_limits
from src.online.load_options import parse_concurrency, parse_fixed_workload

DEFAULT_RATES = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0)
DEFAULT_POLICIES = "none,fixed,schedule,adaptive,off-above"


def make_parser() -> argparse.ArgumentParser:
    from src.online.policies import POLICY_FORMS

    p = OneLineArgumentParser(
        prog="python run.py serve",
        description="Simulate serving under load (open-loop arrivals, continuous batching, chunked "
        "prefill, KV-cache preemption) for several speculation policies on the same "
        "requests; write OUT/results/serving.csv, a serving section in "
        "OUT/results/summary.txt and OUT/plots/serving_*.png.",
        epilog="Policies: none, fixed[:G], schedule (vLLM num_speculative_tokens_per_batch_size; "
        "default: the cost model's steady-state optimum), adaptive (goodput-maximising, "
        "SmartSpec-style), off-above[:N[:G]]. A scenario file may hold a [serving] table "
        f"with any of: {', '.join(SERVING_KEYS)}.",
    )
    p.add_argument(
        "--scenario",
        help="scenario TOML file (configs/scenarios/); default: the "
        "default hardware scenario (H100, Llama-3.1-8B + 3.2-1B)",
    )
    p.add_argument(
        "--engine",
        help="engine profile (src/presets/engines.toml); default: the "
        "scenario's [serving] engine_profile, else vllm-v1 where it "
        "exists, else the scenario's first non-ideal profile",
    )
    p.add_argument(
        "--rates",
        help="request rates, requests/s, comma-separated (default "
        f"{','.join(f'{r:g}' for r in DEFAULT_RATES)})",
    )
    p.add_argument(
        "--concurrency",
        help="instead of --rates: closed-loop clients, comma-separated (e.g. 1,8,64): each "
        "client sends its next request when its last one ends, as vllm bench serve and "
        "sglang.bench_serving --max-concurrency run; --requests per replication",
    )
    p.add_argument(
        "--policies",
        help=f"comma-separated, each one of: {POLICY_FORMS}. A bare fixed (and off-above "
        "without G) uses the default gamma, the closed form's best at batch 1 for this "
        "deployment, workload and acceptance; off-above without N drafts up to the largest "
        "batch at which that gamma still beats greedy; schedule without --schedule is the cost "
        f"model's optimum per batch size (default {DEFAULT_POLICIES})",
    )
    p.add_argument(
        "--workload",
        help="length preset of src/presets/workloads.toml (default "
        "sharegpt), 'scenario' (the scenario's [study] lengths) or fixed:ISL:OSL (every "
        "request ISL prompt and OSL output tokens)",
    )
    p.add_argument(
        "--trace",
        help="CSV trace: arrival_s,prompt_tokens,output_tokens[,alpha]; "
        "replayed as is, or rescaled to each --rates value",
    )
    p.add_argument("--arrival", help="poisson (default) or gamma:CV (burstier for CV > 1)")
    p.add_argument("--slo", help="ttft=2s,tpot=50ms (default); each time needs its unit, s or ms")
    p.add_argument("--requests", help="requests per replication (default 500)")
    p.add_argument("--duration-s", help="instead of --requests: arrivals over this many seconds")
    p.add_argument("--replications", help="independent replications per point (default 4)")
    p.add_argument(
        "--alpha", help="per-token acceptance probability of every request, 0.001..0.999"
    )
    p.add_argument(
        "--temperature", help="sampling temperature, 0..2 (default: the scenario's, 0): > 0 "
        "prices the sampler's probability traffic and needs acceptance measured at that "
        "temperature (--alpha or a trace's alpha column)")
    p.add_argument(
        "--quality-mode",
        help="acceptance mode of the scenario's [study] alpha modes (default: its first)",
    )
    p.add_argument("--max-num-seqs", help=MAX_NUM_SEQS_HELP)
    p.add_argument("--max-num-batched-tokens", help=MAX_NUM_BATCHED_TOKENS_HELP)
    p.add_argument("--max-gamma", help="largest gamma any policy may use (default 8)")
    p.add_argument(
        "--schedule", help="the schedule policy's table as vLLM JSON, e.g. '[[1,15,3],[16,1024,0]]'"
    )
    p.add_argument("--seed", help="root random seed (default: the scenario's)")
    p.add_argument("--workers", help="processes (default: one per core, up to the rates)")
    from src.cli import DASK_HELP
    p.add_argument("--dask", help=DASK_HELP)
    add_kernels_argument(p)
    add_capture_size_argument(p)
    p.add_argument("--out", help="output folder (default .): OUT/results, OUT/plots")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.add_argument("--no-plots", action="store_true",
                   help="write results/ only, without drawing the serving plots; serving plots "
                        "an earlier run left in OUT/plots are removed (they would show other "
                        "numbers)")
    return p


# -- value parsers (each raises ConfigError naming `flag`) --------------------------------------
def _int(flag: str, value: Any, low: int, high: int = 10**9) -> int:
    try:
        if isinstance(value, bool):
            raise ValueError
        v = ascii_int(str(value)) if not isinstance(value, int) else value
    except ValueError:
        raise ConfigError(flag, f"'{value}' is not an integer; allowed: {low}..{high}") from None
    if not low <= v <= high:
        raise ConfigError(flag, f"{v} is out of range; allowed: {low}..{high}")
    return v


def _positive_float(flag: str, value: Any) -> float:
    try:
        v = ascii_float(value)
    except (TypeError, ValueError):
        v = math.nan
    if isinstance(value, bool) or not (math.isfinite(v) and v > 0):
        raise ConfigError(flag, f"'{value}' is not a number > 0")
    return v


def parse_rates(flag: str, value: Any) -> tuple[float, ...]:
    items = list_items(flag, value if isinstance(value, list) else str(value),
                       "rates > 0 in requests/s, e.g. 1,2,4")
    rates = []
    for item in items:
        try:
            r = ascii_float(item)
        except (TypeError, ValueError):
            raise ConfigError(
                flag, f"'{item}' is not a number; allowed: rates > 0 in requests/s, e.g. 1,2,4"
            ) from None
        if not (math.isfinite(r) and r > 0):
            raise ConfigError(flag, f"{item} is not a rate > 0 (requests/s)")
        rates.append(r)
    if len(set(rates)) != len(rates):
        raise ConfigError(flag, "a rate is listed twice")
    return tuple(sorted(rates))


def parse_slo(flag: str, value: Any) -> tuple[float, float]:
    """'ttft=2s,tpot=50ms' -> (ttft seconds, tpot seconds); both keys required."""
    out = {}
    for part in str(value).split(","):
        key, eq, amount = part.strip().partition("=")
        key = key.strip()
        if key in out:
            raise ConfigError(flag, f"{key} given twice in '{value}'; expected ttft=2s,tpot=50ms")
        if not eq or key not in ("ttft", "tpot"):
            raise ConfigError(flag, f"'{value}' does not parse; expected ttft=2s,tpot=50ms")
        amount = amount.strip()
        if amount and not amount.endswith("s"):  # a bare number: seconds or milliseconds?
            example = f"{key}={amount}{'ms' if key == 'tpot' else 's'}"
            raise ConfigError(
                flag, f"{key}={amount} has no unit; allowed: a number with s or ms, e.g. {example}"
            )
        unit = 1e-3 if amount.endswith("ms") else 1.0
        number = amount[:-2] if amount.endswith("ms") else amount.removesuffix("s")
        try:
            v = ascii_float(number) * unit
        except ValueError:
            v = math.nan
        if not (math.isfinite(v) and v > 0):
            raise ConfigError(
                flag, f"'{part.strip()}' is not a positive time; expected e.g. ttft=2s,tpot=50ms"
            )
        out[key] = v
    if set(out) != {"ttft", "tpot"}:
        raise ConfigError(flag, f"'{value}' needs both ttft and tpot; expected ttft=2s,tpot=50ms")
    return out["ttft"], out["tpot"]


def _engine_default(scenario, serving: Mapping) -> str:
    from src.costmodel import load_engine_profiles

    profiles = load_engine_profiles()
    if "engine_profile" in serving:
        return str(serving["engine_profile"])
    if "vllm-v1" in profiles:
        return "vllm-v1"
    real = [e for e in scenario.engine_profiles if e != "ideal"]
    return (real or list(scenario.engine_profiles))[0]


def load_serving_scenario(path: str | None, document: Mapping | None = None):
    """(Scenario, [serving] table) of a scenario file (or its parsed `document`), or of the
    default hardware scenario."""
    from src.hardware.scenario import default_hardware_scenario, scenario_from_dict

    if path is None:
        return default_hardware_scenario(), {}
    data = dict(read_toml(path, "--scenario") if document is None else document)
    serving = data.pop("serving", {})
    check_serving_table(serving)
    try:
        scenario = scenario_from_dict(data, source_path=path)
    except ConfigError as e:
        raise ConfigError(f"--scenario {path}", str(e)) from None
    return scenario, dict(serving)


def check_work(rates, requests, duration, replications, n_policies: int, trace) -> None:
    """Refuse, before anything is allocated, a sweep whose requests a replication (at the highest
    rate) exceed MAX_REQUESTS_PER_REPLICATION or whose requests simulated together exceed
    MAX_REQUEST_ROWS (src/online/config.py), naming the largest value that fits. `requests`,
    `duration`, `replications`: (value, the option or [serving] key that set it)."""
    from src.online.config import (
        BYTES_PER_REQUEST_ROW,
        MAX_REQUEST_ROWS,
        MAX_REQUESTS_PER_REPLICATION,
        arrivals_to_draw,
    )
    rate, (n_reps, reps_f), (d, d_f) = max(rates), replications, duration
    if trace is not None:
        n, field = len(trace.arrival_s), "--trace"
    elif d is not None:
        if rate * d > MAX_REQUESTS_PER_REPLICATION:
            raise ConfigError(d_f, f"{d:g} s of arrivals at {rate:g} requests/s is about "
                              f"{rate * d:.3g} requests a replication; allowed: at most "
                              f"{MAX_REQUESTS_PER_REPLICATION} (as --requests), i.e. up to "
                              f"{_floor3(MAX_REQUESTS_PER_REPLICATION / rate)} s at {rate:g}/s")
        n, field = arrivals_to_draw(rate, d), d_f
    else:
        n, field = requests
    rows = n_policies * n_reps * n
    if rows <= MAX_REQUEST_ROWS:
        return
    cap_gb = MAX_REQUEST_ROWS * BYTES_PER_REQUEST_ROW / 1e9
    per_rep = MAX_REQUEST_ROWS // (n_policies * n_reps)  # requests a replication that fit
    if trace is not None or per_rep < 1:
        fits = f"--replications up to {max(MAX_REQUEST_ROWS // (n_policies * n), 0)}"
        field = reps_f if trace is None else field
    elif d is not None:
        low, high = 0.0, d  # the longest duration whose drawn arrivals fit
        for _ in range(60):
            mid = (low + high) / 2
            low, high = (mid, high) if arrivals_to_draw(rate, mid) <= per_rep else (low, mid)
        fits = f"up to {_floor3(low)} s at {rate:g}/s, or fewer --replications"
    else:
        fits = f"up to {per_rep} requests, or fewer --replications"
    raise ConfigError(field, f"{n_policies} policies x {n_reps} replications x {n} requests is "
                      f"{rows:.3g} requests simulated together (about "
                      f"{rows * BYTES_PER_REQUEST_ROW / 1e9:.0f} GB); allowed: at most "
                      f"{MAX_REQUEST_ROWS:.0e} (about {cap_gb:.0f} GB), i.e. {fits}")


def _floor3(x: float) -> str:
    """x rounded down to 3 significant digits, as text."""
    if x <= 0:
        return "0"
    digits = 2 - math.floor(math.log10(x))
    return f"{math.floor(x * 10**digits) / 10**digits:g}"


def drop_ignored(args: argparse.Namespace, serving: Mapping, trace) -> dict:
    """The [serving] table less the keys a command-line option overrides; ConfigError naming an
    option (or [serving] key) that the run would ignore.

    A value is ignored where another setting makes it moot: a trace replays its own requests and
    arrivals (and, with an alpha column, its own acceptance); a schedule needs the schedule policy;
    acceptance and max_gamma need a policy that drafts. Such a value is refused, except where it
    comes from the scenario file and what makes it moot from the command line: options override
    the file, so that key is dropped."""
    serving = dict(serving)

    def origin(option: str, key: str | None) -> str | None:
        if getattr(args, option) is not None:
            return "cli"
        return "file" if key is not None and key in serving else None

    def name(option: str, key: str | None) -> str:
        if origin(option, key) == "file":
            return f"serving.{key}"
        return "--" + option.replace("_", "-")

    def moot(option: str, key: str | None, by_option: str, by_key: str | None, why: str):
        """`option` would be ignored because of `by_option`; `why` may use {name}, {by}."""
        o, b = origin(option, key), origin(by_option, by_key)
        if o is None or b is None:
            return
        if o == "file" and b == "cli":
            serving.pop(key)
            return
        raise ConfigError(name(option, key),
                          why.format(name=name(option, key), by=name(by_option, by_key)))

    def exclusive(option: str, key: str, other: str, other_key: str):
        """Two settings of which one is used: the command line's where one comes from it."""
        if origin(option, key) == "cli" and origin(other, other_key) == "file":
            option, key, other, other_key = other, other_key, option, key
        moot(option, key, other, other_key, "give either {name} or {by}, not both")

    exclusive("requests", "requests", "duration_s", "duration_s")
    exclusive("alpha", "alpha", "quality_mode", "quality_mode")
    if trace is not None:
        n = len(trace.arrival_s)
        moot("workload", "workload", "trace", None, "give either {name} or {by}, not both")
        for option, key in (("requests", "requests"), ("duration_s", "duration_s")):
            moot(option, key, "trace", None, "give either {name} or {by}, not both: the trace's "
                 f"{n} requests are replayed")
        moot("arrival", "arrival", "trace", None, "give either {name} or {by}, not both: the "
             "trace's arrival times are replayed (rescaled to --rates where given)")
        if trace.alpha is not None:
            for option in ("alpha", "quality_mode"):
                moot(option, option, "trace", None, "the trace's alpha column gives each "
                     "request's acceptance, so {name} would be ignored; drop {name} or the "
                     "column")
    value = args.policies if args.policies is not None else serving.get("policies")
    if value is not None:
        listed = [str(p).strip() for p in (value if isinstance(value, list)
                                           else str(value).split(","))]
        parts = set(listed)
        if "schedule" not in parts:
            moot("schedule", "schedule", "policies", "policies", "the schedule policy does not "
                 f"run ({{by}} {','.join(listed)}), so {{name}} would be ignored; add "
                 "schedule to {by} or drop {name}")
        if parts <= {"none"}:
            for option in ("alpha", "quality_mode", "max_gamma"):
                moot(option, option, "policies", "policies", "only the none policy runs (no "
                     "draft), so {name} would be ignored; add a drafting policy to {by} or drop "
                     "{name}")
    return serving



def config_from_args(args: argparse.Namespace, document: Mapping | None = None):
    """ServeConfig from the command line over the scenario's [serving] table over defaults
    (`document`: the scenario file as parsed, where the caller has read it)."""
    from src.config import PointAlpha, alpha_mode_label
    from src.costmodel import CostModelInputError, engine_profile
    from src.online.arrivals import parse_arrival, read_trace
    from src.online.config import ServeConfig
    from src.online.engine import EngineLimits
    from src.online.policies import parse_schedule_json
    from src.online.workloads import workload_preset

    scenario, serving = load_serving_scenario(args.scenario, document)
    trace = read_trace(args.trace) if args.trace else None
    serving = drop_ignored(args, serving, trace)

    def pick(option: str, key: str, default=None):
        """(value, field name for errors): the option, else [serving].key, else default."""
        value = getattr(args, option)
        if value is not None:
            return value, "--" + option.replace("_", "-")
        if key in serving:
            return serving[key], f"serving.{key}"
        return default, "--" + option.replace("_", "-")

    engine, field = pick("engine", "engine_profile", None)
    engine = engine or _engine_default(scenario, serving)
    try:
        engine_profile(engine, field_name=field)
    except CostModelInputError as e:
        raise ConfigError(field, str(e).split(": ", 1)[1]) from None
    if args.kernels is not None:
        check_measured(scenario.gpu_id, [engine], args.kernels)
        scenario = replace(scenario, kernels=args.kernels)
    scenario = replace(scenario, max_cudagraph_capture_size=capture_size_option(
        args, [engine], scenario.preset_paths))
    value, policies_field = pick("policies", "policies", DEFAULT_POLICIES)
    policies = ",".join(value) if isinstance(value, list) else str(value)
    value, field = pick("slo", "slo", "ttft=2s,tpot=50ms")
    slo_ttft, slo_tpot = parse_slo(field, value)
    value, field = pick("arrival", "arrival", "poisson")
    try:
        arrival = parse_arrival(str(value))
    except ConfigError as e:
        raise ConfigError(field, str(e).split(": ", 1)[1]) from None
    lim = scenario_limits(engine, scenario)
    v, f = pick("max_num_seqs", "max_num_seqs", lim.max_num_seqs)
    max_num_seqs = _int(f, v, 1, 65536)
    v, f = pick("max_num_batched_tokens", "max_num_batched_tokens", lim.max_num_batched_tokens)
    max_tokens = _int(f, v, 1, 10**7)
    if max_tokens < max_num_seqs:  # vLLM's SchedulerConfig refuses this too
        raise ConfigError(
            f,
            f"{max_tokens} is smaller than max_num_seqs ({max_num_seqs}); vLLM "
            "requires max_num_batched_tokens >= max_num_seqs",
        )
    v, max_gamma_f = pick("max_gamma", "max_gamma", 8)
    max_gamma = _int(max_gamma_f, v, 1, 32)
    from src.online.policies import BatchSchedule, parse_policies

    parse_policies(
        policies, 1, max_gamma, BatchSchedule(((1, 1, 1),), 1), 1, field_name=policies_field
    )  # the syntax, before any cost-model work
    v, reps_f = pick("replications", "replications", 4)
    replications = _int(reps_f, v, 2, 10_000)
    req_v, req_f = pick("requests", "requests", None)
    dur_v, dur_f = pick("duration_s", "duration_s", None)
    requests = _int(req_f, req_v, 1, 10**6) if req_v is not None else (None if dur_v else 500)
    duration = _positive_float(dur_f, dur_v) if dur_v is not None else None
    rates_v, rates_f = pick("rates", "rates", None)
    concurrency = ()
    if args.concurrency is not None:
        if args.rates is not None:
            raise ConfigError("--concurrency", "give --rates (open loop) or --concurrency "
                              "(closed loop), not both")
        for option in ("trace", "duration_s", "arrival"):
            if getattr(args, option) is not None:
                raise ConfigError("--concurrency", f"--{option.replace('_', '-')} sets open-loop "
                                  "arrivals; a closed loop sends each request when one ends")
        concurrency = parse_concurrency("--concurrency", args.concurrency)
        rates_v, rates_f = list(concurrency), "--concurrency"
    if trace is not None:
        if len(trace.arrival_s) < 2 and rates_v is not None:
            raise ConfigError("--trace", "a trace of one request cannot be rescaled to --rates")
        span = trace.arrival_s[-1] - trace.arrival_s[0]
        if len(trace.arrival_s) < 2 and rates_v is None:
            raise ConfigError("--trace", "a trace of one request has no arrival rate to replay; "
                              "give a trace of two or more requests")
        if len(trace.arrival_s) >= 2 and span <= 0:
            # a rate is arrivals over the time they span; rescaling times that are all equal
            # leaves them equal, so --rates could not give them one either
            raise ConfigError("--trace", f"all {len(trace.arrival_s)} arrivals share one "
                              "timestamp: a burst with no arrival rate, at any --rates; give "
                              "arrival times that differ")
        if rates_v is None:
            rates = ((len(trace.arrival_s) - 1) / span,)
        else:
            rates = parse_rates(rates_f, rates_v)
    else:
        rates = parse_rates(rates_f, rates_v if rates_v is not None else list(DEFAULT_RATES))
    n_policies = len(parse_policies(policies, 1, max_gamma, BatchSchedule(((1, 1, 1),), 1), 1,
                                    field_name=policies_field))
    check_work(rates, (requests, req_f), (duration, dur_f), (replications, reps_f), n_policies,
               trace)
    if trace is not None:
        workload, prompt_len, output_len = "trace", None, None
        source = f"{os.path.basename(args.trace)}, {len(trace.arrival_s)} requests."
        from src.config import FixedLength

        prompt_len = FixedLength(int(trace.prompt_tokens.max()))
        output_len = FixedLength(int(trace.output_tokens.max()))
    else:
        value, field = pick("workload", "workload", "sharegpt")
        workload = str(value)
        if workload.startswith("fixed:"):
            prompt_len, output_len = parse_fixed_workload(field, workload)
            source = (f"fixed lengths: {prompt_len.tokens} prompt and {output_len.tokens} output "
                      "tokens per request (the benchmarks' random dataset, range ratio 1).")
        elif workload == "scenario":
            prompt_len, output_len = scenario.study.prompt_len, scenario.study.output_len
            source = f"the scenario's [study] lengths ({scenario.name})."
        else:
            preset = workload_preset(workload, field)
            prompt_len, output_len, source = preset.prompt_len, preset.output_len, preset.source
    alpha_v, alpha_f = pick("alpha", "alpha", None)
    mode_v, mode_f = pick("quality_mode", "quality_mode", None)
    if alpha_v is not None:
        a = check_alpha(alpha_f, alpha_v)
        alpha_mode, alpha = alpha_mode_label(a), PointAlpha(a)
    else:
        modes = scenario.study.alpha_modes
        alpha_mode = str(mode_v) if mode_v is not None else scenario.study.quality_modes[0]
        if alpha_mode not in modes:
            raise ConfigError(
                mode_f, f"unknown quality mode '{alpha_mode}'; allowed: {', '.join(sorted(modes))}"
            )
        alpha = modes[alpha_mode]
        if (isinstance(alpha, PerPositionAlpha) and len(set(alpha.rates)) > 1
                and trace is not None and trace.alpha is not None):
            # the trace's alphas are i.i.d. per-token rates; they would replace the mode's
            raise ConfigError(mode_f,
                              f"'{alpha_mode}' is a per-position mode, but the trace gives each "
                              "request's i.i.d. alpha; drop the trace's alpha column or use an "
                              "i.i.d. mode")
    from src.sampling_acceptance import serve_scenario
    scenario = serve_scenario(args.temperature, args.scenario, scenario, alpha_v is not None
                              or (trace is not None and trace.alpha is not None))
    sched_v, sched_f = pick("schedule", "schedule", None)
    schedule_json = None
    if sched_v is not None:
        import json

        schedule_json = sched_v if isinstance(sched_v, str) else json.dumps(sched_v)
        table = parse_schedule_json(schedule_json, sched_f)
        top = min(max(k for _, _, k in table.ranges), table.num_speculative_tokens)
        if top > max_gamma:  # it would run clamped to max_gamma, yet be reported as given
            raise ConfigError(sched_f, f"gamma {top} exceeds {max_gamma_f} {max_gamma}; allowed: "
                                       f"gammas up to {max_gamma}, or a larger {max_gamma_f}")
    seed = _int("--seed", args.seed, 0, 2**63 - 1) if args.seed is not None else scenario.study.seed
    cfg = ServeConfig(
        scenario=scenario,
        engine_profile=engine,
        rates_per_s=rates,
        policies=policies,
        workload=workload,
        prompt_len=prompt_len,
        output_len=output_len,
        workload_source=source,
        alpha_mode=alpha_mode,
        alpha=alpha,
        arrival=arrival,
        trace=trace,
        requests_per_replication=requests,
        duration_s=duration,
        replications=replications,
        slo_ttft_s=slo_ttft,
        slo_tpot_s=slo_tpot,
        limits=EngineLimits(max_num_seqs, max_tokens),
        max_gamma=max_gamma,
        schedule_json=schedule_json,
        seed=seed,
        confidence=scenario.study.confidence,
        concurrency=concurrency,
    )
    return cfg


def main(argv: list[str], document: Mapping | None = None, setup=None) -> int:
    """`document`: the --scenario file as parsed; `setup(cfg) -> (cfg, Prepared)`: a deployment
    other than one replica (src/disagg/serve_cli.py); default: study.prepare."""
    args = make_parser().parse_args(argv)
    out = "." if args.out is None else args.out
    try:
        cfg = config_from_args(args, document)
        from src.outputs import prepare as prepare_out
        prepare_out(out)
        workers = _int("--workers", args.workers, 1, 256) if args.workers is not None else None
        from src.online.study import prepare
        # every check that needs the cost model, before any simulation
        cfg, prepared = (cfg, prepare(cfg)) if setup is None else setup(cfg)
        from src.online.mtp_depth import serve_notes  # a policy past the MTP depth: one line
        sys.stderr.writelines(f"note: {line}\n" for line in serve_notes(cfg, prepared.policies))
        from src.executor import dask_option, open_executor
        dask = dask_option(args.dask)
        executor = open_executor(dask) if dask else None
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    from src.online import report
    from src.online.study import benchmark_line, run_serving
    from src.outputs import existing_outputs, locked, publish
    say = (lambda msg: None) if args.quiet else (lambda msg: print(msg, file=sys.stderr))
    try:
        result = run_serving(cfg, workers=workers, say=say, executor=executor, prepared=prepared)
    finally:
        if executor is not None:
            executor.close()
    try:
        # OUT/results and OUT/plots are replaced as one set: keep what other commands wrote there,
        # read under OUT's lock, so a run that published meanwhile is kept too
        with locked(out, lambda msg: print(msg, file=sys.stderr)):
            files = existing_outputs(out)
            summary = files.get("results/summary.txt", b"").decode("utf-8", "replace")
            new = report.render(result, cfg, summary, plots=not args.no_plots)
            for stale in report.SWEEP_PLOTS:
                files.pop(stale, None)
            files.update(new)
            publish(out, files)
    except OSError as e:
        where = f"{e.filename}: " if e.filename else ""
        print(f"error: --out: could not write the outputs ({where}{e.strerror or e}); previous "
              "outputs left as they were", file=sys.stderr)
        return 2
    say(benchmark_line(result))
    say(f"wrote {', '.join(os.path.join(out, k) for k in new)}")
    return 0


def with_defaults(cfg, **changes):
    """A copy of a ServeConfig with some fields changed (tests and the benchmark)."""
    return replace(cfg, **changes)
