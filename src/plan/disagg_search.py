"""`plan`'s capacity of a disaggregated (xPyD) deployment: its decode worker's and its prefill
pool's capacities, each searched as search.py searches an aggregated replica, then combined:

    capacity(x prefill workers, y decode workers) = min(C_prefill(x), y x C_decode)   req/s

C_decode  serve's disaggregated simulator (src/disagg/serve.py: the decode worker priced with
          attention DP / EP, no prefill in its batches) on one decode worker whose prefill pool
          is unbounded (UNBOUNDED_PREFILL_WORKERS workers: no prefill queue, so TTFT = the
          prompt's prefill + the KV transfer + the decode worker's admission), with the plan's
          policy on the decode worker; the probes, their steady-state rule (issue 26 section 1:
          an unsteady probe is "unknown", never a miss) and the bracket are search.py's. y
          workers carry y x C_decode: requests spread evenly over them (serve simulates one
          decode worker; routing between several is not simulated).
C_prefill the prefill pool alone: x workers x prefill_dp servers, first come first served, each
          batching waiting prompts up to the engine's prefill token budget, the batched
          prefill pass and KV transfer of src/disagg/prefill_front.py (one rule with serve's),
          on the arrivals and prompt lengths serve's probes draw; a rate meets the SLO when at
          least the attainment target of requests have queue + prefill + transfer <= the TTFT
          SLO, and is steady when
          the window holds STEADY_WINDOW_E2E of those latencies (longer windows where not, as
          search.py). Independent of the speculation policy (the decode pool runs it).

The rule is optimistic where both pools are near their limits at once: TTFT's prefill queue and
the decode worker's admission wait are each held to the whole TTFT budget, never added. The
check against serve's joint simulator (a 1P1D deployment, prefill queue and decode worker
together: joint_capacity_search) is in tests/test_disagg_plan.py.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from src.config import ConfigError
from src.plan.search import (
    Prober,
    SearchTask,
    capacity_search,
    probe_verdict,
    search_result,
    serve_config,
)

UNBOUNDED_PREFILL_WORKERS = 256  # enough servers that no prompt waits at plan's rates (<= 1e4/s)


@dataclass(frozen=True)
class PoolTask:
    """One pool's capacity search: `base` holds the deployment (its tp = the pool worker's GPUs),
    the policy, the SLO and the search settings; `disagg` the scenario [disagg] table searched
    (sorted items)."""

    base: SearchTask
    pool: str  # "decode" or "prefill"
    disagg: tuple

    @property
    def policy(self) -> str:
        return self.base.policy

    @property
    def duration_s(self) -> float:
        return self.base.duration_s

    @property
    def start_rate_per_s(self) -> float:
        return self.base.start_rate_per_s

    @property
    def tolerance(self) -> float:
        return self.base.tolerance

    @property
    def deployment(self):  # plan's progress counts searches per deployment: this pool's own
        return (self.pool, self.base.deployment, self.disagg)

    def table(self) -> dict:
        return dict(self.disagg)

    def canonical(self) -> dict:
        return {"base": self.base.canonical(), "pool": self.pool, "disagg": self.table()}


def _disagg(task, cfg):
    from src.disagg.scenario import disagg_of
    return disagg_of(task.table(), cfg.scenario)


class DecodeProber(Prober):
    """search.py's prober on serve's disaggregated simulator (its decode worker)."""

    @staticmethod
    def setup(task):
        from src.disagg.serve import disaggregated
        cfg = serve_config(task.base)
        return disaggregated(cfg, _disagg(task, cfg))


class PrefillProber(Prober):
    """The prefill pool's probes (module docstring): a FCFS queue of c servers, no engine."""

    def __init__(self, task: PoolTask, runs: dict | None = None):
        from src.disagg.serve import prefill_pool
        self.task, self.runs = task, ({} if runs is None else runs)
        self.cfg = serve_config(task.base)
        self.pool = prefill_pool(self.cfg, _disagg(task, self.cfg))
        self.policy_name = "none"
        self.probes: dict[float, dict] = {}

    def _run(self, rate: float, duration_s: float) -> dict:
        from src.disagg.prefill_front import fcfs_latency_s
        from src.online.study import _requests_for_rate

        cfg = replace(self.cfg, duration_s=duration_s)
        req = _requests_for_rate(cfg, rate, 1)
        att, means, p50, p90, util = [], [], [], [], []
        for r in range(req.arrival_s.shape[0]):
            ok = np.isfinite(req.arrival_s[r])
            latency, busy, end = fcfs_latency_s(req.arrival_s[r][ok], req.prompt_tokens[r][ok],
                                                self.pool)
            att.append(float(np.mean(latency <= cfg.slo_ttft_s)))
            means.append(float(np.mean(latency)))
            p50.append(float(np.percentile(latency, 50)))
            p90.append(float(np.percentile(latency, 90)))
            util.append(busy / (self.pool.servers * max(end, duration_s)))
        row = {"slo_attainment": float(np.mean(att)), "e2e_mean_s": float(np.mean(means)),
               "ttft_p50_s": float(np.mean(p50)), "ttft_p90_s": float(np.mean(p90)),
               "prefill_utilisation": float(np.mean(util))}
        return probe_verdict(row, rate, duration_s, cfg.slo_attainment_target)


def pool_search(task: PoolTask, runs: dict | None = None) -> dict:
    """search.capacity_search's result for one pool (module docstring)."""
    prober = DecodeProber if task.pool == "decode" else PrefillProber
    return search_result(prober(task, runs), task)


def any_search(task) -> dict:
    """The search of an aggregated SearchTask or a PoolTask (what plan hands its executor)."""
    return pool_search(task) if isinstance(task, PoolTask) else capacity_search(task)


def joint_capacity_search(base: SearchTask, cand) -> dict:
    """serve's joint simulator of a 1PyD candidate's one decode worker with its real prefill
    pool in front (the queue and the decode worker together): the min rule's check."""
    decode = pool_tasks(base, cand)["decode"]
    return pool_search(replace(decode, disagg=tuple(sorted(cand.table().items()))))


def pool_tasks(base: SearchTask, cand) -> dict:
    """{"decode": PoolTask, "prefill": PoolTask} of candidate `cand` (disagg_config.
    DisaggCandidate) with base's policy (the prefill task's is always none)."""
    d = base.deployment
    dec_g, pre_g = cand.decode.tp * cand.decode.dp, cand.prefill.tp * cand.prefill.dp
    decode = PoolTask(replace(base, deployment=replace(d, tp=dec_g)), "decode",
                      tuple(sorted(cand.table(UNBOUNDED_PREFILL_WORKERS).items())))
    prefill = PoolTask(replace(base, policy="none", deployment=replace(d, tp=pre_g)), "prefill",
                       tuple(sorted(cand.table().items())))
    return {"decode": decode, "prefill": prefill}


def candidate_check(base: SearchTask, cand, policies: str = "none") -> str | None:
    """None where the candidate can run (the shapes suit the model, both pools' weights fit,
    the decode worker's KV cache holds the workload's longest request and `policies` run on a
    decode pool), else why not, one line."""
    from src.costmodel import CostModelInputError, load_presets
    from src.disagg.config import GPUS_PER_NODE, disagg_from_table
    from src.disagg.pool_timer import decode_capacity_tokens
    from src.disagg.serve import check_servable
    from src.online.study import longest_request_tokens

    tasks = pool_tasks(base, cand)
    d = base.deployment
    try:
        # the shapes first, so a bad one is named as disagg.FIELD (plan's scenarios carry no
        # weight formats: this is disagg_of's check)
        presets = load_presets()
        disagg_from_table(cand.table(), presets.model(d.target, "target"), presets.gpu(d.gpu),
                          presets.params)
        cfg = serve_config(tasks["decode"].base)
        disagg = _disagg(tasks["decode"], cfg)
        check_servable(disagg, policies)
        dec = disagg.decode
        if dec.dp > 1 and dec.gpus_per_worker > GPUS_PER_NODE:
            return (f"disagg.decode: a worker of {dec.gpus_per_worker} GPUs spans nodes (its "
                    f"all-to-all over the network is not modelled); allowed: tp x dp <= "
                    f"{GPUS_PER_NODE}")
        cost = replace(cfg.scenario, tp=dec.gpus_per_worker, ep=dec.ep).cost_model(
            cfg.engine_profile)
        held = decode_capacity_tokens(cost, dec, cfg.limits.max_num_seqs)
        need = longest_request_tokens(cfg) + cfg.max_gamma + 1 + cfg.limits.block_size_tokens
        if held < need:
            return (f"does not fit in GPU memory: the decode worker's KV cache holds {held} "
                    f"tokens, less than the longest {base.deployment.workload} request ({need})")
        serve_config(tasks["prefill"].base)
    except (ConfigError, CostModelInputError) as e:
        return f"{getattr(e, 'field_name', 'disagg')}: {e.allowed}"
    return None
