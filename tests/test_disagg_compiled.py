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


DSV3 = ("h200", 8, "deepseek-v3", "mtp", "sglang", "alpaca")


def _setup(table: dict, deployment=("l4", 1, "llama-3.1-8b", "llama-3.2-1b", "vllm-v1",
                                    "cnn-dailymail"), window_s=10.0):
    """(ServeConfig, Prepared) of serve's disaggregated simulator, fixed:3 and greedy, 2
    replications: by default Llama-3.1-8B on L4s over a 10 s window (plan's test deployment,
    tests/test_disagg_plan.py)."""
    from src.disagg.scenario import disagg_of
    from src.disagg.serve import disaggregated
    from src.plan.search import Deployment, SearchTask, serve_config

    d = Deployment(*deployment)
    task = SearchTask(d, "fixed:3", 2.0, 0.1, 0.9, 0.7, None, window_s, 2, 0.1, 2.0, 20261129, 8)
    cfg = serve_config(task)
    return disaggregated(cfg, disagg_of(table, cfg.scenario))


def _run(cfg, prepared, rate, compiled):
    from src.online.study import _engine_at_rate
    make = replace(prepared.make_engine, compiled=compiled)
    engine, _ = _engine_at_rate(cfg, replace(prepared, make_engine=make), rate)
    return engine, engine.run()


@pytest.mark.parametrize("table, rate, deployment", [
    ({"prefill_workers": 1}, 2.0, None),  # the prefill pool binds: prompts queue
    ({"prefill_workers": 2, "decode_workers": 2}, 4.0, None),  # two decode rows a replication
    # attention DP: its own all-reduce inside a rank of tp 2 (dense: no all-to-all)
    ({"prefill_workers": 2, "decode_tp": 2, "decode_dp": 2}, 4.0, None),
    # plan's example decode worker (configs/plan-disagg-deepseek-v3-mtp-h200.toml): DP 8, EP 8,
    # MLA, the measured DeepEP all-to-all, fitted attention kernels
    ({"prefill_tp": 8, "prefill_ep": 8, "decode_tp": 1, "decode_dp": 8, "decode_ep": 8}, 8.0,
     DSV3),
])
def test_compiled_decode_pool_is_the_numpy_one_to_rounding(table, rate, deployment):
    cfg, prepared = _setup(table, *((deployment, 2.0) if deployment else ()))
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
    """Compiled by default open loop (decode_dp 1 or more); numpy for closed-loop clients (their
    sends wait on finishes); compiled=True where it does not apply is refused."""
    from src.online.study import _engine_at_rate
    cfg, prepared = _setup({"prefill_workers": 1})
    assert isinstance(prepared.make_engine, DisaggEngines)
    engine, _ = _engine_at_rate(cfg, prepared, 2.0)
    assert isinstance(engine, CompiledDisaggEngine)
    closed = replace(cfg, concurrency=(2,), requests_per_replication=8, duration_s=None)
    engine, _ = _engine_at_rate(closed, prepared, 2.0)
    assert type(engine) is DisaggEngine
    with pytest.raises(ValueError, match="runs an open-loop decode pool"):
        _engine_at_rate(closed, replace(prepared, make_engine=replace(prepared.make_engine,
                                                                      compiled=True)), 2.0)
    dcfg, dp2 = _setup({"prefill_workers": 1, "decode_dp": 2})
    engine, _ = _engine_at_rate(dcfg, dp2, 2.0)
    assert isinstance(engine, CompiledDisaggEngine)
