"""The compiled serving loop on a disaggregated decode pool (src/disagg/compiled_pool.py) against
the numpy engines (DisaggEngine, RoutedDisaggEngine), open loop: every per-request time and
every per-row statistic to 1e-9 relative, at one and at two decode workers, with and without
speculation; and where each engine is chosen."""
from dataclasses import replace

import numpy as np
import pytest

from src.disagg.compiled_pool import CompiledDisaggEngine, DisaggEngines
from src.disagg.decode_router import RoutedDisaggEngine
from src.disagg.prefill_front import DisaggEngine

FIELDS = ("arrival_s", "first_scheduled_s", "first_token_s", "finish_s", "output_tokens",
          "preemptions", "makespan_s", "steps", "busy_s", "running_integral_s", "kv_integral_s",
          "accepted_drafts", "proposed_drafts", "decode_steps_by_gamma", "itl_histogram",
          "kv_capacity_blocks", "slot_steps", "prefill_busy_s")


def _setup(table: dict, policy="fixed:3", workload="cnn-dailymail"):
    """(ServeConfig, Prepared) of serve's disaggregated simulator: Llama-3.1-8B on L4s, 2
    replications of a 10 s window (plan's test deployment, tests/test_disagg_plan.py)."""
    from src.disagg.scenario import disagg_of
    from src.disagg.serve import disaggregated
    from src.plan.search import Deployment, SearchTask, serve_config

    d = Deployment("l4", 1, "llama-3.1-8b", "llama-3.2-1b", "vllm-v1", workload)
    task = SearchTask(d, policy, 2.0, 0.1, 0.9, 0.7, None, 10.0, 2, 0.1, 2.0, 20261129, 8)
    cfg = serve_config(task)
    return disaggregated(cfg, disagg_of(table, cfg.scenario))


def _run(cfg, prepared, rate, compiled):
    from src.online.study import _engine_at_rate
    make = replace(prepared.make_engine, compiled=compiled)
    engine, _ = _engine_at_rate(cfg, replace(prepared, make_engine=make), rate)
    return engine, engine.run()


@pytest.mark.parametrize("table, rate", [
    ({"prefill_workers": 1}, 2.0),  # the prefill pool binds: prompts queue
    ({"prefill_workers": 2, "decode_workers": 2}, 4.0),  # two decode rows per replication
])
def test_compiled_decode_pool_is_the_numpy_one_to_rounding(table, rate):
    cfg, prepared = _setup(table)
    ref_engine, ref = _run(cfg, prepared, rate, False)
    got_engine, got = _run(cfg, prepared, rate, True)
    y = table.get("decode_workers", 1)
    assert isinstance(ref_engine, DisaggEngine if y == 1 else RoutedDisaggEngine)
    assert isinstance(got_engine, CompiledDisaggEngine)
    assert got.decode_workers == ref.decode_workers == y
    assert got.prefill_servers == ref.prefill_servers
    assert np.isfinite(ref.finish_s[np.isfinite(ref.arrival_s)]).all()
    assert ref.accepted_drafts.sum() > 0 and ref.prefill_busy_s.min() > 0
    for f in FIELDS:
        a, b = np.asarray(getattr(ref, f), float), np.asarray(getattr(got, f), float)
        assert a.shape == b.shape, f
        assert np.array_equal(np.isnan(a), np.isnan(b)), f
        ok = ~np.isnan(a)
        np.testing.assert_allclose(b[ok], a[ok], rtol=1e-9, atol=0, err_msg=f)


def test_each_run_gets_the_engine_that_applies():
    """Compiled by default open loop at decode_dp 1; numpy for closed-loop clients (their sends
    wait on finishes) and at decode_dp > 1 (its step correction is numpy's); compiled=True where
    it does not apply is refused."""
    from src.online.study import _engine_at_rate
    cfg, prepared = _setup({"prefill_workers": 1})
    assert isinstance(prepared.make_engine, DisaggEngines)
    engine, _ = _engine_at_rate(cfg, prepared, 2.0)
    assert isinstance(engine, CompiledDisaggEngine)
    closed = replace(cfg, concurrency=(2,), requests_per_replication=8, duration_s=None)
    engine, _ = _engine_at_rate(closed, prepared, 2.0)
    assert type(engine) is DisaggEngine
    with pytest.raises(ValueError, match="open-loop decode pool at attention DP 1"):
        _engine_at_rate(closed, replace(prepared, make_engine=replace(prepared.make_engine,
                                                                      compiled=True)), 2.0)
    dcfg, dp2 = _setup({"prefill_workers": 1, "decode_dp": 2})
    engine, _ = _engine_at_rate(dcfg, dp2, 2.0)
    assert type(engine) is DisaggEngine
