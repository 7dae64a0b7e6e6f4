"""`serve` on a disaggregated deployment: the serving sweep of src/online/study.py with the
decode worker as the replica and the prefill pool as its own queue in front.

`disagg_setup(table)` returns the setup src/online/cli.py main calls in place of study.prepare:

    decode worker   the scenario at tp = decode_tp x decode_dp, ep = decode_ep, priced by
                    DecodePoolTimer (src/disagg/pool_timer.py: no prefill in its batches, the
                    attention-DP step), greedy and with the scenario's draft, every serve
                    policy on it (study.prepare: schedules, default gamma, adaptive rules)
    token budget    max_num_seqs x (longest request + max_gamma + 1): a prompt whose KV arrived
                    is not chunked through a prefill budget, so every waiting request that has a
                    slot and KV blocks joins at the next step
    prefill pool    src/disagg/prefill_front.py: FCFS over prefill_workers x prefill_dp servers,
                    each batching waiting prompts into one pass up to the engine's prefill token
                    budget (src/disagg/prefill_budget.py), then the KV transfer
    engine          src/disagg/compiled_pool.py: the compiled serving loop where it applies
                    (open loop), else the numpy engines (closed loop)
    serving.csv     prefill_utilisation and decode_utilisation (each with its interval) after the
                    metrics; per-GPU throughput over every GPU of both pools

decode_workers = y > 1: requests go round-robin to y decode workers behind the shared prefill
pool (src/disagg/decode_router.py; y = 1 is the one-worker engine, float for float; open
loop, the compiled loop runs the y rows, src/disagg/compiled_pool.py).
Token-tree policies are refused (their step pricing, src/treesim/serving.py, is not the decode
pool's).
"""
from __future__ import annotations

from dataclasses import replace

from src.config import ConfigError
from src.disagg.compiled_pool import DisaggEngines
from src.disagg.config import DisaggConfig
from src.disagg.pool_timer import DecodePoolTimer, decode_capacity_tokens
from src.disagg.prefill_budget import prefill_token_budget
from src.disagg.prefill_front import PrefillPool, pool_utilisation
from src.disagg.scenario import disagg_of
from src.disagg.transfer import kv_link


def _plain(scenario):
    return replace(scenario, draft="ngram", draft_tp=1, draft_kv_budget_tokens=None)


def check_servable(disagg: DisaggConfig, policies: str) -> None:
    trees = [p.strip() for p in policies.split(",") if p.strip().startswith("tree")]
    if trees:
        raise ConfigError("--policies", f"{trees[0]}: token trees are not priced on a "
                                        "disaggregated decode pool; allowed: none, fixed[:G], "
                                        "schedule, adaptive, off-above[:N[:G]], "
                                        "sglang-adaptive[:ema|:throughput_aware]")


def prefill_pool(cfg, disagg: DisaggConfig) -> PrefillPool:
    """The prefill pool and KV link of `disagg` for serve config `cfg` (its scenario's target
    without the draft, at the prefill worker's tp x dp GPUs and ep)."""
    pre, dec = disagg.prefill, disagg.decode
    prefill_cost = replace(_plain(cfg.scenario), tp=pre.gpus_per_worker, ep=pre.ep).cost_model(
        cfg.engine_profile)
    budget = prefill_token_budget(cfg.engine_profile, prefill_cost.gpu, pre.dp,
                                  cfg.limits.max_num_batched_tokens)
    return PrefillPool(prefill_cost=prefill_cost, prefill_dp=pre.dp, servers=pre.workers * pre.dp,
                       model=prefill_cost.target, link=kv_link(disagg.link(), prefill_cost.gpu),
                       prefill_tp=pre.tp, decode_tp=dec.tp, budget_tokens=budget)


def decode_deployments(dcfg, dec):
    """(greedy, speculative) Deployments of one decode worker of shape `dec` (PoolShape) for the
    serve config `dcfg` whose scenario is already at tp = dec.tp x dec.dp, ep = dec.ep: each
    priced by DecodePoolTimer and holding decode_capacity_tokens (serve's engine and recommend's
    steady state, src/disagg/recommend.py, price the same worker)."""
    from src.online.engine import Deployment
    lim, scenario = dcfg.limits, dcfg.scenario
    deps = []
    for sc, spec in ((_plain(scenario), False), (scenario, True)):
        cost = sc.cost_model(dcfg.engine_profile)
        blocks = decode_capacity_tokens(cost, dec, lim.max_num_seqs) // lim.block_size_tokens
        deps.append(Deployment(DecodePoolTimer(cost, spec, dec), blocks))
    return tuple(deps)


def disaggregated(cfg, disagg: DisaggConfig):
    """(the decode worker's ServeConfig, its Prepared) for the serving sweep (module
    docstring)."""
    from src.online.study import longest_request_tokens, prepare
    check_servable(disagg, cfg.policies)
    dec = disagg.decode
    scenario = replace(cfg.scenario, tp=dec.gpus_per_worker, ep=dec.ep)
    lim = cfg.limits
    budget = lim.max_num_seqs * (longest_request_tokens(cfg) + cfg.max_gamma + 1)
    dcfg = replace(cfg, scenario=scenario, limits=replace(lim, max_num_batched_tokens=budget))
    pool = prefill_pool(cfg, disagg)
    prepared = prepare(dcfg, deps=decode_deployments(dcfg, dec))
    return dcfg, replace(prepared, make_engine=DisaggEngines(pool, dec.workers),
                         extra_metrics=pool_utilisation, gpus=disagg.gpus)


def disagg_setup(table):
    """The setup src/online/cli.py main runs for a scenario whose [disagg] table is `table`."""
    def setup(cfg):
        return disaggregated(cfg, disagg_of(table, cfg.scenario))
    return setup
