"""The capacity search of one (deployment, policy): the highest steady request rate meeting the SLO.

A probe at rate r runs serve's engine (src/online/study.py `simulate_rate`) on the policy alone,
R replications of Poisson arrivals over `duration_s` seconds, and classifies r as serve's S5 does:

    meet(r)  <=>  mean SLO attainment over replications >= 0.9  and  r is a steady state
                  (arrival window >= 20 x mean E2E latency: serving_rules.STEADY_WINDOW_E2E)

A meet that is not steady only because the window is short runs again over a longer one, up to
MAX_WINDOW_FACTOR x duration_s (Prober.probe). Each probe is then a meet, a miss (attainment
< 0.9), or "unknown": it meets the SLO but is still not steady at the longest window, so it
proves neither (serve's S5 says "unknown" too). A miss or an unknown bounds the search from
above (only a steady meet proves a rate is sustained; design.md, "Capacity search"); the search
brackets, then bisects:

    1. r = start; while meet(r): r = 2 r (up to MAX_RATE_PER_S); while not meet(r): r = r / 2
       (down to start / 2^MAX_HALVINGS), giving last meet `lo` and first miss `hi` = 2 lo
    2. while hi / lo > 1 + tolerance: m = sqrt(lo hi) (4 significant figures); meet(m) ? lo = m
       : hi = m

The capacity is `lo`. Where the bracket's upper end is an unknown, not a miss, the result's bound
is "unknown": the capacity is at least `lo`, and where it lies above needs a longer window. Else
the true capacity (the rate where attainment crosses 0.9) lies in
[lo, hi), hi / lo <= 1 + tolerance, wherever meet() is monotone in the rate. Every probe's
arrivals are the same unit-rate gaps scaled by 1/r and the same requests (common random numbers,
src/online/arrivals.py), so meet() is monotone up to the noise of a few requests at the cliff.
A search is a pure function of its SearchTask: it runs anywhere (src/executor.py) with the same
result.
"""
from __future__ import annotations

import math
import os
import re
from dataclasses import asdict, dataclass, replace

import numpy as np

from src.config import ConfigError

MAX_RATE_PER_S = 4096.0
MAX_HALVINGS = 8
# the longest probe window, in task windows (600 s at the default 30 s): near the cliff the mean
# E2E latency of sharegpt on an L40S reaches ~15 s, so a steady window (20 x E2E, x 1.25) is
# ~375 s; an overloaded rate's latency grows with the window, so its attainment falls below the
# target before this (a miss) or it stays "unknown"
MAX_WINDOW_FACTOR = 20
# positive quantities: their intervals on the log scale (metrics.mean_ci_positive), never <= 0;
# the fractions (attainment, acceptance) are clipped to [0, 1] and mean gamma at 0
POSITIVE = ("sustained_output_tok_s", "output_throughput_tok_s", "request_throughput_req_s",
            "ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "tpot_p50_s", "tpot_p90_s", "tpot_p99_s",
            "e2e_mean_s", "mean_batch")
FRACTIONS = ("slo_attainment", "acceptance_rate")
METRICS = ("slo_attainment", "sustained_output_tok_s", "output_throughput_tok_s",
               "request_throughput_req_s",
           "ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "tpot_p50_s", "tpot_p90_s", "tpot_p99_s",
           "e2e_mean_s", "mean_batch", "acceptance_rate", "mean_gamma")


@dataclass(frozen=True)
class Deployment:
    """One way to serve: GPU, tensor-parallel size, target and draft, engine, workload."""

    gpu: str
    tp: int
    target: str
    draft: str
    engine: str
    workload: str

    @property
    def label(self) -> str:
        return (f"{self.target}+{self.draft} tp{self.tp} {self.gpu} {self.engine} "
                f"{self.workload}")

    @property
    def draft_tp(self) -> int:
        # vLLM V1 runs a draft model at the target's tp (src/online/recommend.py); n-gram: none
        return 1 if self.draft == "ngram" else self.tp


@dataclass(frozen=True)
class SearchTask:
    """Everything that determines one search's result (plain values: its cache key, src/plan/
    cache.py, is their canonical JSON with the code version)."""

    deployment: Deployment
    policy: str
    slo_ttft_s: float
    slo_tpot_s: float
    slo_attainment_target: float
    alpha: float | None
    quality_mode: str | None
    duration_s: float
    replications: int
    tolerance: float
    start_rate_per_s: float
    seed: int
    max_gamma: int
    # (path, SHA-256) of the deployment's config.json models: a changed file is a new search
    model_files: tuple[tuple[str, str], ...] = ()
    kernels: str | None = None  # --kernels: how the cost model prices GEMMs (part of the key)

    def canonical(self) -> dict:
        return asdict(self)


def scenario_of(d: Deployment):
    """The Scenario of a deployment; ConfigError (scenario.tp) where its weights do not fit."""
    from src.hardware.scenario import scenario_from_dict

    # the scenario's name must be a plain file name: a config.json model by its file's stem
    short = [re.sub(r"[^A-Za-z0-9._-]", "_", os.path.basename(m).removesuffix(".json"))
             for m in (d.target, d.draft)]
    name = f"{d.gpu}-tp{d.tp}-{short[0]}-{short[1]}"
    return scenario_from_dict({
        "scenario": {"name": name, "gpu": d.gpu, "target": d.target, "draft": d.draft,
                     "tp": d.tp, "draft_tp": d.draft_tp, "engine_profiles": [d.engine]},
        "study": {"batch_sizes": [1]},
    })


def serve_config(task: SearchTask, rate_per_s: float | None = None):
    """The ServeConfig of a task's probes: serve's model of the deployment, workload and SLO."""
    from src.config import PointAlpha, alpha_mode_label
    from src.online.config import ServeConfig
    from src.online.engine_limits import scenario_limits
    from src.online.workloads import workload_preset

    d = task.deployment
    scenario = replace(scenario_of(d), kernels=task.kernels)
    preset = workload_preset(d.workload, "--workloads")
    if task.alpha is not None:
        alpha_mode, alpha = alpha_mode_label(task.alpha), PointAlpha(task.alpha)
    else:
        alpha_mode = task.quality_mode or scenario.study.quality_modes[0]
        alpha = scenario.study.alpha_modes[alpha_mode]
    return ServeConfig(
        scenario=scenario, engine_profile=d.engine,
        rates_per_s=(rate_per_s or task.start_rate_per_s,), policies=task.policy,
        workload=d.workload, prompt_len=preset.prompt_len, output_len=preset.output_len,
        workload_source=preset.source, alpha_mode=alpha_mode, alpha=alpha,
        requests_per_replication=None, duration_s=task.duration_s,
        replications=task.replications, slo_ttft_s=task.slo_ttft_s, slo_tpot_s=task.slo_tpot_s,
        max_gamma=task.max_gamma, seed=task.seed,
        slo_attainment_target=task.slo_attainment_target,
        limits=scenario_limits(d.engine, scenario))  # the engine's own, as serve's default


def fit_check(task: SearchTask) -> str | None:
    """None where the deployment can run and fits in GPU memory (its weights, and with and
    without the draft a KV cache holding the workload's longest request, as serve's prepare()
    checks), else why not, one line naming the cause: "cannot run at tp N: ..." (the tp does not
    divide the heads), "does not fit in GPU memory: ..." or "cannot run: ..." (anything else)."""
    from src.costmodel import CostModelInputError, load_presets
    from src.costmodel.presets import check_tp
    from src.online.study import deployments, longest_request_tokens

    d = task.deployment
    models = load_presets().models
    try:
        check_tp(models[d.target], d.tp)
        if d.draft not in ("eagle", "mtp", "ngram") and models[d.draft].architecture != "eagle3":
            check_tp(models[d.draft], d.draft_tp, "draft_tp")
    except CostModelInputError as e:
        return f"cannot run at tp {d.tp}: {e.allowed}"
    try:
        cfg = serve_config(task)
        deps = deployments(cfg)
    except (ConfigError, CostModelInputError) as e:
        memory = e.field_name in ("scenario.tp", "study.batch_sizes")
        return ("does not fit in GPU memory: " if memory else "cannot run: ") + e.allowed
    bs = cfg.limits.block_size_tokens
    need = longest_request_tokens(cfg) + cfg.max_gamma + 1
    held = min(dep.kv_capacity_blocks for dep in deps) * bs
    if held < need + bs:
        return (f"does not fit in GPU memory: the KV cache holds {held} tokens, less than the "
                f"longest {task.deployment.workload} request ({need} tokens with the "
                "verification's positions)")
    return None


def fit_checks(tasks: list[SearchTask]) -> list[str | None]:
    """fit_check of each task: one call per chunk of deployments, so the executor (src/
    executor.py) starts one worker process per chunk, not per deployment; the presets are read
    once per chunk (presets.memo_presets), not ~4 times per check."""
    from src.costmodel.presets import memo_presets

    with memo_presets():
        return [fit_check(t) for t in tasks]


def max_window_s(task: SearchTask) -> float:
    """The longest arrival window a probe of `task` runs: MAX_WINDOW_FACTOR x duration_s."""
    return MAX_WINDOW_FACTOR * task.duration_s


def probe_verdict(row: dict, rate: float, duration_s: float, attainment_target: float) -> dict:
    """A probe's row with its verdict: 'miss' where the SLO is not attained, 'meet' where it is
    and the window holds STEADY_WINDOW_E2E mean end-to-end latencies, else 'unknown' (needs a
    longer window: never a miss; issue 26 section 1)."""
    from src.online.serving_rules import STEADY_WINDOW_E2E, duration_to_steady_s

    steady = bool(duration_s >= STEADY_WINDOW_E2E * row["e2e_mean_s"])
    attained = bool(row["slo_attainment"] >= attainment_target)
    verdict = "miss" if not attained else ("meet" if steady else "unknown")
    return {"rate_per_s": rate, "window_s": duration_s, "steady": steady,
            "attained": attained, "meet": steady and attained, "verdict": verdict,
            "window_to_steady_s": duration_to_steady_s(row["e2e_mean_s"]), **row}


class Prober:
    """meet(rate) of one task, each rate simulated once (a dict of probes by rate)."""

    def __init__(self, task: SearchTask, runs: dict | None = None):
        """`runs`: engine runs by (rate, window) to share between Probers of tasks that differ
        only in their SLO (the SLO classifies a run; it does not change it)."""
        self.task, self.runs = task, ({} if runs is None else runs)
        self.cfg, prepared = self.setup(task)
        policy = [p for p in prepared.policies if p.name == task.policy]
        if not policy:  # a bare "fixed" is named fixed:G after parsing
            policy = [p for p in prepared.policies if p.name != "none"] or list(prepared.policies)
        self.policy_name = policy[0].name
        self.prepared = replace(prepared, policies=(policy[0],))
        self.probes: dict[float, dict] = {}

    @staticmethod
    def setup(task):
        """(ServeConfig, Prepared) of the task's probes: an aggregated replica's (src/plan/
        disagg_search.py prices a disaggregated deployment's decode worker instead)."""
        from src.online.study import prepare

        cfg = serve_config(task)
        return cfg, prepare(cfg)

    def _run(self, rate: float, duration_s: float) -> dict:
        from src.online import metrics
        from src.online.study import simulate_rate

        cfg = replace(self.cfg, duration_s=duration_s)
        if (rate, duration_s) not in self.runs:
            self.runs[(rate, duration_s)] = simulate_rate(cfg, self.prepared, rate)[:2]
        result, groups = self.runs[(rate, duration_s)]
        per_rep = metrics.per_replication(result, groups[0].rows, cfg.slo_ttft_s, cfg.slo_tpot_s)
        # the output tokens of the requests that arrived, over the arrival window: the sustained
        # rate (the makespan-based throughput includes the drain of the last long requests)
        per_rep["sustained_output_tok_s"] = (per_rep["output_throughput_tok_s"]
                                             * per_rep["makespan_s"] / duration_s)
        row = {k: float(v) for k, v in metrics.summarise(per_rep, cfg.confidence).items()
               if k.removesuffix("_ci_low").removesuffix("_ci_high") in METRICS}
        for k in (k for k in POSITIVE if k in per_rep):
            _, row[f"{k}_ci_low"], row[f"{k}_ci_high"] = (
                float(x) for x in metrics.mean_ci_positive(per_rep[k], cfg.confidence))
        for k in METRICS:
            top = 1.0 if k in FRACTIONS else math.inf
            if np.isfinite(row.get(f"{k}_ci_low", math.nan)):
                row[f"{k}_ci_low"] = float(np.clip(row[f"{k}_ci_low"], 0.0, top))
                row[f"{k}_ci_high"] = float(np.clip(row[f"{k}_ci_high"], 0.0, top))
        return probe_verdict(row, rate, duration_s, cfg.slo_attainment_target)

    def probe(self, rate: float) -> dict:
        """The probe at `rate`: first over the task's window; a rate that meets the SLO but is
        not steady runs again over the window that holds 20 of its mean E2E latencies (x 1.25,
        rounded up to 10 s), at most max_window_s(); one still not steady there is "unknown" (an
        overloaded rate's latency grows with the window: its attainment falls to a miss, or it
        stays unknown)."""
        if rate not in self.probes:
            from src.online.serving_rules import STEADY_WINDOW_E2E

            window, longest = self.task.duration_s, max_window_s(self.task)
            row = self._run(rate, window)
            while row["verdict"] == "unknown" and window < longest:
                longer = math.ceil(1.25 * STEADY_WINDOW_E2E * row["e2e_mean_s"] / 10) * 10
                window = float(min(max(longer, window + 10), longest))
                row = self._run(rate, window)
            self.probes[rate] = row
        return self.probes[rate]

    def meet(self, rate: float) -> bool:
        return self.probe(rate)["meet"]


def midpoint(lo: float, hi: float) -> float:
    """The geometric middle of lo and hi to 4 significant figures (a rate one can print), or
    exactly where rounding would land on lo or hi."""
    m = math.sqrt(lo * hi)
    rounded = float(f"{m:.4g}")
    return rounded if lo < rounded < hi else m


def bracket_and_bisect(meet, start: float, tolerance: float,
                       max_rate: float = MAX_RATE_PER_S,
                       halvings: int = MAX_HALVINGS) -> tuple[str, float | None, float | None]:
    """(bound, last meet lo, first miss hi) of the module docstring's steps 1-2 for any predicate
    meet(rate): "found" (hi / lo <= 1 + tolerance), "above" (met at every doubling up to
    max_rate; hi None) or "below" (missed down to start / 2^halvings; lo None)."""
    lo = hi = None
    if meet(start):
        lo = start
        while hi is None and lo * 2 <= max_rate:
            hi = None if meet(lo * 2) else lo * 2
            if hi is None:
                lo *= 2
    else:
        hi = start
        for _ in range(halvings):
            if meet(hi / 2):
                lo = hi / 2
                break
            hi /= 2
    bound = "above" if hi is None else ("below" if lo is None else "found")
    if bound == "found":
        while hi / lo > 1 + tolerance:
            m = midpoint(lo, hi)
            lo, hi = (m, hi) if meet(m) else (lo, m)
    return bound, lo, hi


def capacity_search(task: SearchTask, runs: dict | None = None) -> dict:
    """The search of the module docstring: {"capacity_per_s", "first_miss_per_s", "bound"
    ("found": lo and hi bracket it; "above": met at MAX_RATE_PER_S; "below": missed at the lowest
    rate tried; "unknown": the bracket's upper end met the SLO without being steady at the
    longest window, so the capacity is >= lo and needs a longer window above it),
    "unknown_per_s" (that rate, else NaN), "window_to_steady_s" (the window that would hold 20 of
    its mean E2E latencies, a lower bound; else NaN), "policy" (as parsed), "at_capacity" (the
    probe at the capacity, or None), "probes" (every probe, by rate)}. first_miss_per_s: the
    lowest probed miss above the capacity (NaN where none)."""
    return search_result(Prober(task, runs), task)


def search_result(p, task) -> dict:
    """capacity_search's result of a prober `p` (.meet(rate), .probes, .policy_name)."""
    bound, lo, hi = bracket_and_bisect(p.meet, task.start_rate_per_s, task.tolerance)
    unknown = hi is not None and p.probes[hi]["verdict"] == "unknown"
    floor = -math.inf if lo is None else lo
    misses = [r for r, q in p.probes.items() if r > floor and q["verdict"] == "miss"]
    return {
        "policy": p.policy_name,
        "bound": "unknown" if unknown else bound,
        "capacity_per_s": float(lo) if lo is not None else 0.0,
        "first_miss_per_s": float(min(misses)) if misses else math.nan,
        "unknown_per_s": float(hi) if unknown else math.nan,
        "window_to_steady_s": float(p.probes[hi]["window_to_steady_s"]) if unknown else math.nan,
        "at_capacity": p.probes[lo] if lo is not None else None,
        "probes": [p.probes[r] for r in sorted(p.probes)],
    }


def dense_capacity(task: SearchTask, rates, runs: dict | None = None) -> float:
    """The capacity a dense sweep of `rates` gives by the same rule: the highest rate below the
    first one that is not a steady meet (0 where the lowest is not)."""
    p = Prober(task, runs)
    best = 0.0
    for r in sorted(rates):
        if not p.meet(r):
            break
        best = r
    return best


def capacity_gain(policy: dict, none: dict) -> tuple[float, float, float]:
    """(gain, low, high): the policy's capacity over none's, and the range the two brackets allow
    (lo_p / hi_none .. hi_p / lo_none); NaN where either capacity is unknown (bound "unknown":
    only a lower bound) or zero."""
    lo_p, hi_p = policy["capacity_per_s"], policy["first_miss_per_s"]
    lo_n, hi_n = none["capacity_per_s"], none["first_miss_per_s"]
    if not (lo_p > 0 and lo_n > 0) or "unknown" in (policy.get("bound"),
                                                      none.get("bound")):
        return (math.nan, math.nan, math.nan)
    with np.errstate(all="ignore"):
        return (lo_p / lo_n, lo_p / hi_n if np.isfinite(hi_n) else math.nan,
                hi_p / lo_n if np.isfinite(hi_p) else math.nan)
