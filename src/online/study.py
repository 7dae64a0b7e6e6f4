"""A serving sweep: every (policy, rate) of one deployment, R replications each, same requests.

`ServeConfig` is validated once (`src/online/cli.py` builds it from the command line and the
scenario's [serving] table); `run_serving` simulates each rate in its own engine (rates in parallel
processes where there are cores: every row has its own random streams, so this changes no number)
and returns one table row per (policy, rate) with every metric's mean and confidence interval.
"""

from __future__ import annotations

import math
import os
import sys
import time
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from src.acceptance import hazard_profile
from src.config import ConfigError, PerPositionAlpha
from src.gamma_rule import capped_gammas
from src.hardware.scenario import max_length_tokens
from src.online import metrics
from src.online.arrivals import unit_gaps
from src.online.config import ServeConfig, arrivals_to_draw
from src.online.engine import Deployment, Engine, RequestTable, RowGroup
from src.online.policies import (
    BatchSchedule,
    NoSpeculation,
    compress_schedule,
    parse_policies,
    steady_state_gammas,
)
from src.online.steptime import StepTimer, kv_capacity_tokens
from src.online.workloads import make_requests, mean_length
from src.workload import sample_alpha, stream


@dataclass(frozen=True)
class Prepared:
    """What every rate of a sweep shares: deployments, policies, the schedule and default gamma."""

    deployments: tuple[Deployment, Deployment]  # (without draft, with draft)
    policies: tuple
    schedule: BatchSchedule
    schedule_speedups: np.ndarray  # steady-state speedup of the schedule's gamma per batch size
    default_gamma: int
    mean_context_tokens: float
    # the per-position mode's hazard profile D_1..D_max_gamma (None: i.i.d. acceptance)
    hazard_profile: np.ndarray | None = None
    # a deployment other than one replica (src/disagg/serve.py): the engine's factory (called as
    # Engine is; None: Engine), per-row metrics it adds (result, rows) -> {name: [rows]} and the
    # GPUs that per-GPU throughput divides by (None: the scenario's tp)
    make_engine: object | None = None
    extra_metrics: object | None = None
    gpus: int | None = None


def deployments(cfg: ServeConfig) -> tuple[Deployment, Deployment]:
    """(greedy, speculative): the scenario's deployment without and with its draft; a replica
    of attention_dp > 1 ranks is priced by AttentionDpTimer and holds dp_kv_capacity_tokens
    (src/online/dp_steptime.py), attention_dp 1 by StepTimer as always."""
    spec_cost = cfg.scenario.cost_model(cfg.engine_profile)
    plain = replace(cfg.scenario, draft="ngram", draft_tp=1, draft_kv_budget_tokens=None)
    greedy_cost = plain.cost_model(cfg.engine_profile)
    bs = cfg.limits.block_size_tokens
    dp = getattr(cfg.scenario, "attention_dp", 1)
    out = []
    for cost, spec in ((greedy_cost, False), (spec_cost, True)):
        if dp == 1:
            blocks = kv_capacity_tokens(cost, cfg.limits.max_num_seqs) // bs
            out.append(Deployment(StepTimer(cost, spec), blocks))
            continue
        from src.attention_dp.shape import PoolShape
        from src.online.dp_steptime import AttentionDpTimer, dp_kv_capacity_tokens
        shape = PoolShape(workers=1, tp=cfg.scenario.tp // dp, ep=cfg.scenario.ep, dp=dp)
        blocks = dp_kv_capacity_tokens(cost, shape, cfg.limits.max_num_seqs) // bs
        out.append(Deployment(AttentionDpTimer(cost, spec, shape), blocks))
    return tuple(out)


def serving_hazard_profile(cfg: ServeConfig) -> np.ndarray | None:
    """D_1..D_max_gamma of a per-position mode (src/acceptance.py), as the study samples it
    (src/workload.py); None for i.i.d. acceptance, and where a trace's own alphas replace the
    mode's (cli.py refuses a per-position mode with them)."""
    if not isinstance(cfg.alpha, PerPositionAlpha):
        return None
    if cfg.trace is not None and cfg.trace.alpha is not None:
        return None
    return hazard_profile(cfg.alpha.rates, cfg.max_gamma)


def longest_request_tokens(cfg: ServeConfig) -> int:
    if cfg.trace is not None:
        return int((cfg.trace.prompt_tokens + cfg.trace.output_tokens).max())
    return max_length_tokens(cfg.prompt_len) + max_length_tokens(cfg.output_len)


def check_tree_policies(cfg: ServeConfig) -> None:
    """ConfigError now, before the deployments and the steady state are computed (seconds), where
    a tree:S:K:N policy (topk > 1) meets an engine profile that verifies chains only
    (src/presets/tree_engines.toml). A malformed item is left to parse_policies, which names it."""
    from src.treeshape.shape import TreeShapeError, parse_shape
    from src.treesim.costs import check_engines_verify
    trees = []
    for part in str(cfg.policies).split(","):
        head, _, rest = part.strip().partition(":")
        if head == "tree":
            try:
                trees.append(parse_shape(rest))
            except TreeShapeError:
                continue
    check_engines_verify(trees, (cfg.engine_profile,), "--policies")


def prepare(cfg: ServeConfig, deps: tuple[Deployment, Deployment] | None = None) -> Prepared:
    """Deployments (`deps`, default deployments(cfg)), policies, the default schedule;
    ConfigError where a request cannot fit."""
    check_tree_policies(cfg)
    if getattr(cfg.scenario, "attention_dp", 1) > 1 and any(
            part.strip().startswith("tree") for part in str(cfg.policies).split(",")):
        raise ConfigError("--policies", "token trees are not priced on an attention-DP replica "
                                        "(src/treesim/serving.py prices the TP path); allowed: "
                                        "chain policies, or scenario.attention_dp 1")
    deps = deployments(cfg) if deps is None else deps
    bs = cfg.limits.block_size_tokens
    need_tokens = longest_request_tokens(cfg) + cfg.max_gamma + 1
    for dep, what in zip(deps, ("without", "with")):
        if dep.kv_capacity_blocks * bs < need_tokens + bs:
            raise ConfigError(
                "--trace" if cfg.trace is not None else "--workload",
                f"the KV cache {what} the draft holds {dep.kv_capacity_blocks * bs} tokens, "
                f"less than the longest request ({need_tokens} tokens with the verification's "
                "positions); allowed: shorter requests, a larger tp or a GPU with more memory",
            )
    budget = cfg.limits.max_num_batched_tokens
    if any(dep.prefill_first for dep in deps) and longest_request_tokens(cfg) > budget:
        raise ConfigError(
            "--trace" if cfg.trace is not None else "--workload",
            f"the engine profile schedules whole prompts (prefill_scheduling = prefill_first, "
            f"vLLM v0 without chunked prefill) but the longest request has "
            f"{longest_request_tokens(cfg)} tokens, more than max_num_batched_tokens {budget}; "
            "allowed: shorter requests or a larger token budget")
    if cfg.trace is not None:
        mean_ctx = float(np.mean(cfg.trace.prompt_tokens + cfg.trace.output_tokens / 2))
    else:
        mean_ctx = mean_length(cfg.prompt_len, cfg.seed) + mean_length(cfg.output_len, cfg.seed) / 2
    alphas = (
        cfg.trace.alpha
        if cfg.trace is not None and cfg.trace.alpha is not None
        else sample_alpha(stream(cfg.seed, "serving-omega", cfg.alpha_mode), cfg.alpha, (20_000,))
    )
    profile = serving_hazard_profile(cfg)
    gammas, speedups, by_gamma = steady_state_gammas(
        deps[1].timer,
        deps[0].timer,
        alphas,
        mean_ctx,
        cfg.limits.max_num_seqs,
        cfg.max_gamma,
        kv_tokens=min(d.kv_capacity_blocks for d in deps) * bs,
        hazard_profile=profile,
    )
    default_gamma = int(gammas[1]) or 1
    if cfg.schedule_json is not None:
        from src.online.policies import parse_schedule_json

        schedule = parse_schedule_json(cfg.schedule_json)
    else:
        tolerant, _ = capped_gammas(by_gamma)  # a switch only past 6%, at most 6 ranges
        schedule = compress_schedule(tolerant, max(int(tolerant.max()), 1))
        speedups = by_gamma[tolerant, np.arange(tolerant.size)]
    # off-above's default N: the largest batch at which the default gamma still beats greedy
    off = np.nonzero(by_gamma[default_gamma, 1:] <= 1.0)[0]
    default_off_above = int(off[0]) if off.size else cfg.limits.max_num_seqs
    policies = parse_policies(
        cfg.policies, default_gamma, cfg.max_gamma, schedule, max(default_off_above, 1)
    )
    from src.online.sglang_adaptive import resolve_policies  # SGLang's rule at this acceptance
    policies = resolve_policies(policies, alphas, profile, by_gamma, cfg.max_gamma)
    if not any(p.name == "none" for p in policies):  # every speedup is measured against it
        policies = [NoSpeculation()] + policies
    return Prepared(deps, tuple(policies), schedule, speedups, default_gamma, mean_ctx, profile)


def _requests_for_rate(cfg: ServeConfig, rate: float, n_policies: int,
                       hazard_profile: np.ndarray | None = None) -> RequestTable:
    """Rows policy-major (policy i, replication r at row i R + r); every policy sees the same
    requests and arrivals (common random numbers)."""
    R = cfg.replications
    reps = []
    for r in range(R):
        if cfg.concurrency:  # closed-loop clients: every request exists, sent by the engine
            n = cfg.requests_per_replication
            base = make_requests(cfg.seed, cfg.workload, cfg.prompt_len, cfg.output_len,
                                 cfg.alpha_mode, cfg.alpha, r, n)
            reps.append((np.zeros(n), base.prompt_tokens, base.output_tokens, base.alpha,
                         base.key))
            continue
        if cfg.trace is not None:
            t = cfg.trace
            scale = (
                1.0
                if rate is None or not math.isfinite(rate)
                else ((len(t.arrival_s) - 1) / max(t.arrival_s[-1] - t.arrival_s[0], 1e-9)) / rate
            )
            arrival = (t.arrival_s - t.arrival_s[0]) * scale
            base = make_requests(
                cfg.seed,
                "trace",
                cfg.prompt_len,
                cfg.output_len,
                cfg.alpha_mode,
                cfg.alpha,
                r,
                arrival.size,
            )
            alpha = t.alpha if t.alpha is not None else base.alpha
            reps.append((arrival, t.prompt_tokens, t.output_tokens, alpha, base.key))
            continue
        if cfg.duration_s is not None:
            n_max = arrivals_to_draw(rate, cfg.duration_s)  # src/online/config.py bounds it
        else:
            n_max = cfg.requests_per_replication
        gaps = unit_gaps(cfg.seed, cfg.arrival, r, n_max) / rate
        arrival = np.concatenate([[0.0], np.cumsum(gaps)])
        if cfg.duration_s is not None:
            arrival = np.where(arrival < cfg.duration_s, arrival, np.inf)
        base = make_requests(
            cfg.seed,
            cfg.workload,
            cfg.prompt_len,
            cfg.output_len,
            cfg.alpha_mode,
            cfg.alpha,
            r,
            n_max,
        )
        reps.append((arrival, base.prompt_tokens, base.output_tokens, base.alpha, base.key))
    n = max(x[0].size for x in reps)

    def stacked(i, fill, dtype):
        rows = [np.concatenate([x[i], np.full(n - x[i].size, fill, dtype=dtype)]) for x in reps]
        return np.tile(np.array(rows, dtype=dtype), (n_policies, 1))

    return RequestTable(
        arrival_s=stacked(0, np.inf, float),
        prompt_tokens=stacked(1, 1, np.int64),
        output_tokens=stacked(2, 1, np.int64),
        alpha=stacked(3, 0.5, float),
        key=stacked(4, 0, np.uint64),
        hazard_profile=hazard_profile,
        clients=np.full(n_policies * R, int(rate)) if cfg.concurrency else None,
    )


def simulate_rate(cfg: ServeConfig, prepared: Prepared, rate: float):
    """Run every policy at one rate; returns (EngineResult, rows of each policy, wall seconds)."""
    start = time.perf_counter()
    engine, groups = _engine_at_rate(cfg, prepared, rate)
    result = engine.run()
    return result, groups, time.perf_counter() - start


# seconds of one core that numba takes to compile the serving engine (src/online/engine_loop.py
# and what it calls) into an empty cache (NUMBA_CACHE_DIR an empty folder), the figure stderr
# gives: 20.5-23.5 s of CPU (time.process_time around compile_engine_once, default serve
# config) on the project's 2-core x86_64 machine, numba 0.68, 2026-12-03, with the callees
# compiled without wrappers (src/compiled_cache.py compiled_callee) and run_rows's scratch from
# its caller; 27.2 s before both, measured side by side (the 11.7 s of 2026-12-02 was an
# earlier engine; it grew with later changes to it, not bisected)
ENGINE_COMPILE_S = 21.0


def compile_engine_once(cfg: ServeConfig, prepared: Prepared, say=lambda msg: None,
                        load: bool = True) -> bool:
    """Compile the serving engine here, once, if numba's cache does not hold it yet (and this
    run uses it): src/compiled_cache.py `compile_once`, on a run of 2 x 2 requests at 1/s,
    whose arrays have the types of every run's. Returns whether it compiled. With `load`, a warm
    cache is also loaded into this process (the same tiny run): the worker processes it forks
    then inherit the machine code instead of each loading it again (about 0.35 s of CPU per
    process, 2026-12-04, this 2-core machine)."""
    from src.compiled_cache import cache_is_warm, compile_once
    from src.online import engine_loop
    from src.online.engine_compiled import CompiledEngine

    tiny = replace(cfg, replications=2) if cfg.trace is not None else replace(
        cfg, replications=2, requests_per_replication=2, duration_s=None)
    engine, _ = _engine_at_rate(tiny, prepared, 1.0)
    if not isinstance(engine, CompiledEngine):
        return False
    lock = os.path.join(getattr(engine_loop.run_rows._cache, "_cache_path", "."), "compile.lock")
    compiled = compile_once(lambda: cache_is_warm(engine_loop.run_rows), engine.run, lock, say,
                            "the serving engine", ENGINE_COMPILE_S)
    if load and not compiled:
        engine.run()
    return compiled


def _engine_at_rate(cfg: ServeConfig, prepared: Prepared, rate: float):
    """(the engine of every policy at one rate, ready to run; the row group of each policy)."""
    P, R = len(prepared.policies), cfg.replications
    requests = _requests_for_rate(cfg, rate, P, prepared.hazard_profile)
    groups = [RowGroup(p, np.arange(i * R, (i + 1) * R)) for i, p in enumerate(prepared.policies)]
    deps = list(prepared.deployments)
    row_dep = np.repeat([1 if p.speculative else 0 for p in prepared.policies], R)
    for i, p in enumerate(prepared.policies):  # a token tree prices its steps itself
        if getattr(p, "shape", None) is not None:
            from src.treesim.serving import tree_timer
            deps.append(replace(deps[1], timer=tree_timer(deps[1].timer, p.shape)))
            row_dep[i * R:(i + 1) * R] = len(deps) - 1
    make = prepared.make_engine or Engine
    return make(requests, groups, deps, row_dep, cfg.limits, cfg.max_gamma), groups


def _rate_rows(cfg: ServeConfig, prepared: Prepared, rate: float) -> tuple[list[dict], dict]:
    """Table rows of one rate plus per-replication metrics (for tests) and speed figures."""
    result, groups, wall = simulate_rate(cfg, prepared, rate)
    per_rep = {
        g.policy.name: metrics.per_replication(result, g.rows, cfg.slo_ttft_s, cfg.slo_tpot_s,
                                               prepared.gpus or cfg.scenario.tp)
        for g in groups
    }
    if prepared.extra_metrics is not None:
        for g in groups:
            per_rep[g.policy.name].update(prepared.extra_metrics(result, g.rows))
    base = per_rep["none"]
    rows = []
    for g in groups:
        name = g.policy.name
        row = {
            "policy": name,
            "rate_per_s": np.nan if cfg.concurrency else rate,
            "concurrency": int(rate) if cfg.concurrency else np.nan,
            "replications": cfg.replications,
            "requests": int(np.isfinite(result.arrival_s[g.rows]).sum()),
            **metrics.summarise(per_rep[name], cfg.confidence),
            **metrics.speedups(per_rep[name], base, cfg.confidence),
        }
        rows.append(row)
    speed = {
        "rate": rate,
        "wall_s": wall,
        "requests": int(np.isfinite(result.arrival_s).sum()),
        "steps": float(result.steps.sum()),
        "slot_steps": float(result.slot_steps.sum()),  # running sequences x steps
    }
    return rows, {"per_rep": per_rep, "speed": speed}


def _rates_job(cfg: ServeConfig, prepared: Prepared, rates: list[float]):
    """[(rate, table rows and extras)] for a worker's share of the rates."""
    return [(r, _rate_rows(cfg, prepared, r)) for r in rates]


def rate_work(cfg: ServeConfig, rate: float) -> float:
    """The engine's relative work at one rate, for splitting the rates between processes: about
    one step per token of each running request alone (1 / batch, batch ~ rate x 1 s of E2E) plus
    a share per request and step (0.03: ~30 ns per sequence against ~1 us per step in the
    compiled loop), times the requests (rate x duration, or the fixed count)."""
    if rate is None or not math.isfinite(rate):  # a trace at its own pace
        return 1.0
    n = rate * cfg.duration_s if cfg.duration_s is not None else cfg.requests_per_replication or 1
    return n * (1.0 / max(rate, 1.0) + 0.03)


def run_serving(cfg: ServeConfig, workers: int | None = None, say=lambda msg: None,
                executor=None, prepared: Prepared | None = None) -> dict:
    """Simulate every (policy, rate): {"table": DataFrame, "prepared", "per_rep", "speed"}.
    `executor` (src/executor.py; default: `workers` local processes) runs the shares of rates;
    `prepared`: prepare(cfg)'s result where the caller has it (default: prepared here)."""
    prepared = prepare(cfg) if prepared is None else prepared
    rates = list(cfg.rates_per_s)
    workers = min(executor.workers if executor is not None else workers or os.cpu_count() or 1,
                  len(rates))
    say(
        f"serving sweep: {len(prepared.policies)} policies x {len(rates)} rates x "
        f"{cfg.replications} replications ({cfg.engine_profile}, workload {cfg.workload})"
    )
    # before any worker starts (local workers fork from here and inherit it; Dask's load it)
    compile_engine_once(cfg, prepared, say, load=executor is None)
    start = time.perf_counter()
    if workers > 1 or executor is not None:
        # one task per worker, each with a share of the rates of about equal work (rate_work);
        # local children die with this process (src/processes.py)
        from src.executor import LocalExecutor
        loads = [0.0] * workers
        groups: list[list[float]] = [[] for _ in range(workers)]
        for r in sorted(rates, key=lambda r: -rate_work(cfg, r)):
            i = loads.index(min(loads))
            groups[i].append(r)
            loads[i] += rate_work(cfg, r)
        executor = executor or LocalExecutor(workers)
        done = executor.map(_rates_job, [(cfg, prepared, g) for g in groups if g])
        by_rate = {r: out for group in done for r, out in group}
        outcomes = [by_rate[r] for r in rates]
        say(f"  {len(rates)} rates done ({time.perf_counter() - start:.1f} s)")
    else:
        outcomes = []
        for r in rates:
            outcomes.append(_rate_rows(cfg, prepared, r))
            say(f"  rate {r:g}/s done ({time.perf_counter() - start:.1f} s)")
    table = pd.DataFrame([row for rows, _ in outcomes for row in rows])
    order = {p.name: i for i, p in enumerate(prepared.policies)}
    table["_o"] = table.policy.map(order)
    load = "concurrency" if cfg.concurrency else "rate_per_s"
    table = table.sort_values(["_o", load], kind="stable").drop(columns="_o")
    scenario = cfg.scenario
    meta = {
        "scenario": scenario.name,
        "engine_profile": cfg.engine_profile,
        "workload": cfg.workload,
        "arrival": cfg.arrival_label,
        "quality_mode": cfg.alpha_label,
    }
    for i, (k, v) in enumerate(meta.items()):
        table.insert(i, k, v)
    hindsight_columns(table, load=load)
    return {
        "table": table.reset_index(drop=True),
        "prepared": prepared,
        "per_rep": {r: out[1]["per_rep"] for r, out in zip(rates, outcomes)},
        "speed": [out[1]["speed"] for out in outcomes],
        "wall_s": time.perf_counter() - start,
    }


def hindsight_columns(table: pd.DataFrame, metric: str = "tpot_p50_s",
                      load: str = "rate_per_s") -> None:
    """Per rate (or concurrency, `load`): the fixed gamma (none counting as gamma 0) with the
    lowest `metric` in hindsight, and each policy's gain over it (its metric / the policy's;
    > 1 = the policy beats it)."""
    fixed = table[table.policy.str.startswith("fixed:") | (table.policy == "none")]
    table["hindsight_best_fixed"] = ""
    table["gain_over_best_fixed"] = np.nan
    for rate, grp in fixed.groupby(load):
        best = grp.loc[grp[metric].idxmin()]
        at = table[load] == rate
        table.loc[at, "hindsight_best_fixed"] = best.policy
        table.loc[at, "gain_over_best_fixed"] = best[metric] / table.loc[at, metric]


def benchmark_line(result: dict) -> str:
    """Simulated requests and engine steps per second of wall time (all processes together)."""
    speed = result["speed"]
    requests = sum(s["requests"] for s in speed)
    steps = sum(s["steps"] for s in speed)
    wall = result["wall_s"]
    return (
        f"{requests} requests, {steps:.3g} engine steps in {wall:.1f} s wall: "
        f"{requests / wall:.0f} simulated requests/s, {steps / wall:.3g} steps/s"
    )


def _say_stderr(msg: str) -> None:
    print(msg, file=sys.stderr)
