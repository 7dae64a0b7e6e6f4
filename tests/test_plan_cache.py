"""src/plan/cache.py: a search is found again only under the same inputs and code."""
from dataclasses import replace

from src.plan.cache import SearchCache, code_version, task_key
from src.plan.search import Deployment, SearchTask

TASK = SearchTask(Deployment("l4", 1, "llama-3.1-8b", "llama-3.2-1b", "vllm-v1", "alpaca"),
                  "none", 2.0, 0.05, 0.9, 0.7, None, 30.0, 2, 0.1, 4.0, 1, 8)


def test_key_changes_with_every_input_and_the_code():
    base = task_key(TASK, "v1")
    assert task_key(TASK, "v1") == base
    assert task_key(TASK, "v2") != base
    for changed in (replace(TASK, slo_tpot_s=0.06), replace(TASK, seed=2),
                    replace(TASK, policy="fixed:3"), replace(TASK, tolerance=0.2),
                    replace(TASK, deployment=replace(TASK.deployment, tp=2))):
        assert task_key(changed, "v1") != base


def test_code_version_covers_the_engine_but_not_the_plan_report(tmp_path):
    root = tmp_path / "src"
    (root / "online").mkdir(parents=True)
    (root / "plan").mkdir()
    (root / "online" / "engine.py").write_text("x = 1\n")
    (root / "plan" / "report.py").write_text("y = 1\n")
    v = code_version(root)
    (root / "plan" / "report.py").write_text("y = 2\n")
    assert code_version(root) == v
    (root / "online" / "engine.py").write_text("x = 2\n")
    assert code_version(root) != v


def test_code_version_covers_the_bundled_model_configs_package(tmp_path):
    # a pair named by Hugging Face id reads aiconfigurator-core's bundled config.json, and
    # measured kernels its tables: another package version is another result
    (tmp_path / "a.py").write_text("x = 1\n")
    assert code_version(tmp_path, "0.12.0") == code_version(tmp_path, "0.12.0")
    assert code_version(tmp_path, "0.12.0") != code_version(tmp_path, "0.13.0")


def test_put_get_round_trip_and_a_corrupt_file(tmp_path):
    cache = SearchCache(str(tmp_path / "c"), "v1")
    assert cache.get(TASK) is None
    result = {"capacity_per_s": 12.5, "first_miss_per_s": float("nan"), "probes": [{"a": 1}]}
    cache.put(TASK, result)
    got = cache.get(TASK)
    assert got["capacity_per_s"] == 12.5 and got["probes"] == [{"a": 1}]
    assert SearchCache(str(tmp_path / "c"), "v2").get(TASK) is None
    (path,) = (tmp_path / "c").iterdir()
    path.write_text("{not json")
    assert cache.get(TASK) is None  # searched again, not a crash
    assert SearchCache(None, "v1").get(TASK) is None
