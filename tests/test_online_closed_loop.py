"""Closed-loop serving (`serve --concurrency C`): C clients, each sending its next request when
its last one ends (src/online/engine_types.RequestTable.clients), in both engines."""

from dataclasses import replace

import numpy as np
import pytest

from src.online.engine import CompiledEngine, Engine, EngineLimits
from src.online.policies import Adaptive, FixedGamma, NoSpeculation
from tests.test_online_engine import _assert_same, _deployments, _run

POLICIES = [NoSpeculation(), FixedGamma(3), Adaptive(4)]


def _closed(clients, n=40, reps=2, policies=POLICIES, **kw):
    """Engine arguments whose rows are closed loops of `clients` (every request exists at 0)."""
    rq, groups, deps, row_dep, limits = _run(policies, reps=reps, n=n, **kw)
    rq = replace(rq, arrival_s=np.zeros_like(rq.arrival_s),
                 clients=np.full(rq.arrival_s.shape[0], clients))
    return rq, groups, deps, row_dep, limits


def _in_system(res, r, t):
    """Requests of row r sent and not finished at time t (half-open [arrival, finish))."""
    a, f = res.arrival_s[r], res.finish_s[r]
    return int(((a <= t) & (f > t)).sum())


@pytest.mark.parametrize("clients", [1, 3, 8])
def test_a_closed_loop_never_has_more_than_c_requests_in_the_system(clients):
    res = Engine(*_closed(clients), max_gamma=4).run()
    for r in range(res.arrival_s.shape[0]):
        events = np.concatenate([res.arrival_s[r], res.finish_s[r]])
        counts = [_in_system(res, r, t) for t in events]
        assert max(counts) == clients
        # until the last request is sent, exactly C are in the system
        last = res.arrival_s[r].max()
        assert all(_in_system(res, r, t) == clients for t in events[events < last])


def test_with_one_client_each_request_starts_when_the_previous_ends():
    res = Engine(*_closed(1), max_gamma=4).run()
    np.testing.assert_array_equal(res.arrival_s[:, 1:], res.finish_s[:, :-1])
    np.testing.assert_array_equal(res.first_scheduled_s, res.arrival_s)  # no queueing
    assert np.all(res.preemptions == 0)


@pytest.mark.parametrize("clients", [2, 6])
def test_littles_law_mean_in_system_is_c_while_every_client_waits(clients):
    """Over [0, T], T = the last request's send time, the time-average of the requests in the
    system (the integral of [arrival, finish) clipped to the window / T) is C."""
    res = Engine(*_closed(clients, n=50), max_gamma=4).run()
    for r in range(res.arrival_s.shape[0]):
        a, f = res.arrival_s[r], res.finish_s[r]
        T = a.max()
        inside = np.clip(np.minimum(f, T) - a, 0, None).sum()
        assert inside / T == pytest.approx(clients, rel=1e-12)


@pytest.mark.parametrize("clients, n", [(1, 6), (4, 12), (16, 30)])
def test_the_compiled_engine_equals_the_numpy_engine_in_a_closed_loop(clients, n):
    """n requests a row, more than the clients (a client sends again when one ends); the numpy
    engine steps one step at a time, so one client's rows are kept short."""
    args = _closed(clients, n=n, limits=EngineLimits(64, 512))
    compiled = Engine(*args, max_gamma=4)
    assert isinstance(compiled, CompiledEngine)
    a = compiled.run()
    _assert_same(a, Engine(*args, max_gamma=4, allow_segments=False).run())
    # the numpy engine's stretches (adaptive holds its gamma through one there: not compared)
    args = _closed(clients, n=n, policies=POLICIES[:2], limits=EngineLimits(64, 512))
    _assert_same(Engine(*args, max_gamma=4).run(), Engine(*args, max_gamma=4, compiled=False).run())


def test_a_closed_loop_with_preemption_is_the_same_in_both_engines():
    args = _closed(16, n=30, deps=_deployments("vllm-v1", 150))
    a = Engine(*args, max_gamma=4).run()
    assert a.preemptions.sum() > 0
    _assert_same(a, Engine(*args, max_gamma=4, allow_segments=False).run())


# -- the command line: serve --concurrency, --workload fixed:ISL:OSL ------------------------------
QUICK = ["--requests", "12", "--replications", "2", "--policies", "none,fixed:2", "--workers",
         "1", "--quiet"]


@pytest.mark.parametrize("args, message", [
    (["--concurrency", "2", "--rates", "4"],
     "error: --concurrency: give --rates (open loop) or --concurrency (closed loop), not both"),
    (["--concurrency", "0"], "error: --concurrency: 0 is out of range"),
    (["--concurrency", "-3"], "error: --concurrency: '-3' is not a number of clients"),
    (["--concurrency", "٣"], "error: --concurrency: '٣' is not a number of clients"),
    (["--concurrency", "2,2"], "error: --concurrency: a concurrency is listed twice"),
    (["--concurrency", "99999999999999999999"], "error: --concurrency: '9999"),
    (["--concurrency", "2", "--duration-s", "5"], "error: --concurrency: --duration-s sets"),
    (["--concurrency", "2", "--arrival", "gamma:2"], "error: --concurrency: --arrival sets"),
    (["--workload", "fixed:512"], "error: --workload: 'fixed:512': allowed: fixed:ISL:OSL"),
    (["--workload", "fixed:0:16"], "error: --workload: 0 is out of range"),
    (["--workload", "fixed:1e3:16"], "error: --workload: '1e3' is not a prompt length"),
    (["--workload", "fixed:64:+8"], "error: --workload: '+8' is not an output length"),
    (["--workload", "fixed:64:2000000"], "error: --workload: 2000000 is out of range"),
    # one output token has no TPOT: every latency column would be empty (a pandas traceback)
    (["--workload", "fixed:512:1"], "error: --workload: 1 is out of range; allowed: an output "
                                    "length in tokens (TPOT needs at least 2), 2..1000000"),
])
def test_bad_closed_loop_input_is_one_line_exit_2_nothing_written(tmp_path, args, message):
    from tests.helpers import run_captured
    out = tmp_path / "o"
    p = run_captured(["serve", *args, "--out", str(out)])
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(message), p.stderr
    assert not out.exists()


def test_serve_by_concurrency_writes_its_columns(tmp_path):
    import pandas as pd

    from tests.helpers import run_captured
    p = run_captured(["serve", "--concurrency", "1,4", "--workload", "fixed:256:32", *QUICK,
                      "--out", str(tmp_path)])
    assert p.returncode == 0, p.stderr
    t = pd.read_csv(tmp_path / "results" / "serving.csv")
    assert list(t.concurrency) == [1, 4, 1, 4] and t.rate_per_s.isna().all()
    assert (t.requests == 24).all()
    none1 = t[(t.policy == "none") & (t.concurrency == 1)].iloc[0]
    assert none1.queue_delay_mean_s == 0  # one client: no request waits
    assert none1.mean_running == pytest.approx(1.0)  # Little's law: one request always in
    assert none1.tpot_mean_ms == pytest.approx(none1.tpot_mean_s * 1e3, rel=1e-5)  # (%.6g)
    assert none1.output_tok_s_per_user == pytest.approx(1 / none1.tpot_mean_s, rel=1e-4)
    # one GPU (tp 1): per GPU is the whole output throughput
    assert none1.output_tok_s_per_gpu == pytest.approx(none1.output_throughput_tok_s, rel=1e-5)
    # greedy commits one token per step and fixed lengths: ITL = TPOT for every request
    assert none1.itl_mean_ms == pytest.approx(none1.tpot_mean_ms, rel=1e-5)


def test_a_concurrency_run_replaces_a_by_rate_serving_section(tmp_path):
    """A by-concurrency run over a by-rate run's OUT: summary.txt's serving section is the closed
    loop's own table (no rate, steadiness or capacity lines left from the by-rate run)."""
    from tests.helpers import run_captured
    p = run_captured(["serve", "--rates", "1,2", *QUICK, "--no-plots", "--out", str(tmp_path)])
    assert p.returncode == 0, p.stderr
    p = run_captured(["serve", "--concurrency", "1,4", "--workload", "fixed:256:32", *QUICK,
                      "--out", str(tmp_path)])
    assert p.returncode == 0, p.stderr
    summary = (tmp_path / "results" / "summary.txt").read_text()
    assert summary.count("=== SERVING UNDER LOAD") == 1
    assert "Closed loop (serve --concurrency)" in summary and "S1. TPOT p50" not in summary
    rows = [ln.split() for ln in summary.splitlines() if ln.startswith("  ") and "x" in ln
            and ln.split()[0] in ("1", "4")]
    assert [(r[0], r[1]) for r in rows] == [("1", "none"), ("1", "fixed:2"), ("4", "none"),
                                            ("4", "fixed:2")]
    assert rows[0][-1] == "1.00x"  # none against itself
