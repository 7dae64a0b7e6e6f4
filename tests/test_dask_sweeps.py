"""The study's grid and serve's (policy, rate) points on a two-worker Dask LocalCluster (127.0.0.1)
give the same bytes as the local run (plan's: tests/test_plan_cli.py). One cluster
(tests/conftest.py `dask_cluster`, shared with tests/test_executor.py and test_plan_cli.py) serves
every command through its address, as a remote cluster would (`--dask tcp://...`)."""
import os

import pytest

from tests.helpers import run_captured

FAST = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fast_study.toml")


@pytest.fixture(scope="module")
def address(dask_cluster):
    return dask_cluster.client.scheduler.address


def outputs(out, names):
    return {n: (out / "results" / n).read_bytes() for n in names}


def test_address_is_loopback(address):
    """The scheduler, its HTTP endpoint and the workers listen on 127.0.0.1 only."""
    import psutil

    assert address.startswith("tcp://127.0.0.1:")
    procs = [psutil.Process(), *psutil.Process().children(recursive=True)]
    listening = [c.laddr.ip for p in procs for c in p.net_connections(kind="inet")
                 if c.status == psutil.CONN_LISTEN]
    assert listening and set(listening) == {"127.0.0.1"}


def test_serve_on_dask_gives_the_same_bytes(address, tmp_path):
    argv = ["serve", "--rates", "1,2", "--requests", "20", "--replications", "2", "--policies",
            "none,fixed:2", "--no-plots", "--quiet"]
    local = run_captured([*argv, "--workers", "2", "--out", str(tmp_path / "a")])
    dask = run_captured([*argv, "--dask", address, "--out", str(tmp_path / "b")])
    assert local.returncode == 0 and dask.returncode == 0, dask.stderr
    names = ("serving.csv", "summary.txt")
    assert outputs(tmp_path / "a", names) == outputs(tmp_path / "b", names)


def test_study_on_dask_gives_the_same_bytes(address, tmp_path):
    argv = ["--config", FAST, "--scenario", "reference", "--batch-sizes", "1,4", "--gammas",
            "2,4", "--no-plots", "--quiet"]
    local = run_captured([*argv, "--out", str(tmp_path / "a")])
    dask = run_captured([*argv, "--dask", address, "--out", str(tmp_path / "b")])
    assert local.returncode == 0 and dask.returncode == 0, dask.stderr
    names = ("results.csv", "verification_comparison.csv", "summary.txt")
    assert outputs(tmp_path / "a", names) == outputs(tmp_path / "b", names)
