"""The disaggregated candidates of a plan: every GPU x pair x engine x workload of the [plan]
table with every xPyD shape of its [disagg] table (src/plan/disagg_config.py), checked, and the
pool searches each needs (src/plan/disagg_search.py), counted before any is built.

A candidate's decode search does not depend on the worker counts (one decode worker, an
unbounded prefill pool), so candidates that differ only in them share it; its prefill search
does not depend on the policy. plan_searches() is what plan.cli's size limit counts.
"""
from __future__ import annotations

import itertools


def groups_of(plan) -> list[tuple]:
    """(gpu, (target, draft), engine, workload) of the plan, in plan order."""
    return list(itertools.product(plan.gpus, plan.pairs, plan.engines, plan.workloads))


def disagg_searches(plan) -> int:
    """The pool searches of the plan's [disagg] table at most (0 without one): per group, one
    decode search per (prefill shape, decode shape, policy) and one prefill search per
    (prefill workers, prefill shape, decode shape)."""
    c = plan.disagg
    if c is None:
        return 0
    shapes = len(c.prefill) * len(c.decode)
    return len(groups_of(plan)) * shapes * (len(plan.policies) + len(c.prefill_workers))


def disagg_entries(plan, make_task) -> tuple[list, list]:
    """(entries, skipped): entries [(Deployment, DisaggCandidate, {policy: {"decode": PoolTask,
    "prefill": PoolTask}})] of the candidates that can run; skipped [(Deployment, candidate,
    why)]. make_task(deployment, policy) -> SearchTask (the plan's settings)."""
    from src.plan.disagg_search import candidate_check, pool_tasks
    from src.plan.search import Deployment

    if plan.disagg is None:
        return [], []
    entries, skipped, checked = [], [], {}
    policies = ",".join(plan.policies)
    for gpu, (target, draft), engine, workload in groups_of(plan):
        d = Deployment(gpu, 1, target, draft, engine, workload)
        for cand in plan.disagg.candidates():
            key = (d, cand.prefill, cand.decode)
            if key not in checked:
                base = make_task(d, "none")
                checked[key] = candidate_check(base, cand, policies)
            if checked[key]:
                skipped.append((d, cand, checked[key]))
                continue
            entries.append((d, cand, {p: pool_tasks(make_task(d, p), cand)
                                      for p in plan.policies}))
    return entries, skipped


def entry_tasks(entries) -> list:
    """Every distinct PoolTask of the entries, in order."""
    return list(dict.fromkeys(t for _, _, by_policy in entries for pair in by_policy.values()
                              for t in pair.values()))
