"""src/outputs.py: a run's outputs are replaced as one set, with the umask's permissions; a failed
or killed run leaves the whole previous set."""
from __future__ import annotations

import errno
import os
import signal
import time

import pytest

import run
from src import outputs
from src.reporting import write_atomic

OLD = {"results/results.csv": b"old results\n", "results/stale.csv": b"from an older run\n",
       "plots/a.png": b"old a"}
NEW = {"results/results.csv": b"new results\n", "results/summary.txt": b"new summary\n",
       "plots/a.png": b"new a", "plots/b.png": b"new b"}


def tree(out) -> dict:
    return {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*") if p.is_file()}


def leftovers(out) -> list:
    return [name for name in os.listdir(out) if name.startswith(outputs.PREFIX)]


@pytest.fixture
def old_set(tmp_path):
    outputs.publish(str(tmp_path), OLD)
    return tmp_path


@pytest.fixture
def umask_027():
    previous = os.umask(0o027)
    yield
    os.umask(previous)


def test_publish_replaces_both_folders_whole(old_set):
    paths = outputs.publish(str(old_set), NEW)
    assert tree(old_set) == NEW  # results/stale.csv of the older run is gone
    assert sorted(paths) == sorted(os.path.join(str(old_set), rel) for rel in NEW)
    assert leftovers(old_set) == []


def test_outputs_get_the_permissions_the_umask_gives(tmp_path, umask_027):
    outputs.publish(str(tmp_path / "out"), NEW)
    for rel in NEW:
        assert (tmp_path / "out" / rel).stat().st_mode & 0o777 == 0o640, rel
    for folder in ("out", "out/results", "out/plots"):
        assert (tmp_path / folder).stat().st_mode & 0o777 == 0o750, folder
    readme = tmp_path / "README.md"
    write_atomic(str(readme), b"new")
    assert readme.stat().st_mode & 0o777 == 0o640
    readme.chmod(0o644)
    write_atomic(str(readme), b"newer")  # an existing file keeps its permissions
    assert readme.stat().st_mode & 0o777 == 0o644


def test_a_failed_write_leaves_the_previous_set(old_set, monkeypatch):
    real = outputs._write_file
    calls = []

    def disk_full_on_the_third_file(path, data):
        calls.append(path)
        if len(calls) == 3:
            raise OSError(errno.ENOSPC, "No space left on device", path)
        real(path, data)

    monkeypatch.setattr(outputs, "_write_file", disk_full_on_the_third_file)
    with pytest.raises(OSError):
        outputs.publish(str(old_set), NEW)
    assert tree(old_set) == OLD and leftovers(old_set) == []


def killed_child(publish) -> int:
    """The signal that ended a child forked from this process to call publish() (a real process
    killed mid-write, SIGKILL leaving no chance to clean up; a fork, not a new interpreter:
    src.outputs is already loaded). The child never returns into pytest."""
    pid = os.fork()
    if pid == 0:  # the child
        code = 1
        try:
            publish()
            code = 0
        finally:
            os._exit(code)
    end = time.monotonic() + 60
    while time.monotonic() < end:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.WTERMSIG(status) if os.WIFSIGNALED(status) else -os.WEXITSTATUS(status)
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    raise AssertionError("the child did not end within 60 s")


@pytest.mark.parametrize("n", [1, 2, 3, 4], ids=lambda n: f"killed-at-rename-{n}")
def test_a_run_killed_inside_the_swap_is_rolled_back_to_the_previous_set(old_set, n):
    def publish():
        real, calls = os.rename, []

        def rename(a, b):
            calls.append(a)
            if len(calls) == n:
                os.kill(os.getpid(), signal.SIGKILL)
            real(a, b)

        outputs.os.rename = rename  # in the child only
        outputs.publish(str(old_set), NEW)

    assert killed_child(publish) == signal.SIGKILL
    assert leftovers(old_set)  # the journal and folders of the killed run
    outputs.prepare(str(old_set))
    assert tree(old_set) == OLD and leftovers(old_set) == []


def test_leftovers_of_a_run_killed_after_the_commit_are_removed(old_set):
    def publish():
        outputs.publish(str(old_set), NEW,
                        after_commit=lambda: os.kill(os.getpid(), signal.SIGKILL))

    assert killed_child(publish) == signal.SIGKILL
    assert leftovers(old_set)  # the previous folders, not yet removed
    outputs.prepare(str(old_set))
    assert tree(old_set) == NEW and leftovers(old_set) == []


def test_files_the_run_does_not_own_are_kept(old_set):
    (old_set / "results" / "notes.md").write_bytes(b"mine")
    (old_set / "plots" / "mine").mkdir()
    (old_set / "plots" / "mine" / "x.png").write_bytes(b"my plot")
    owns = {"results/results.csv", "results/summary.txt", "results/stale.csv", "plots/a.png",
            "plots/b.png"}
    outputs.publish(str(old_set), NEW, owns=owns.__contains__)
    assert tree(old_set) == {**NEW, "results/notes.md": b"mine", "plots/mine/x.png": b"my plot"}
    assert leftovers(old_set) == []


def test_a_study_run_keeps_the_serve_commands_outputs(tmp_path):
    """results/serving.csv and the serving plots belong to `python run.py serve`: a study run that
    replaces its own outputs in the same folder keeps them."""
    outputs.publish(str(tmp_path),
                    {"results/serving.csv": b"serve", "plots/serving_goodput.png": b"png"})
    argv = ["--scenario", "reference", "--batch-sizes", "1", "--gammas", "2", "--quality-modes",
            "homogeneous_mid", "--serving-modes", "static_batch", "--out", str(tmp_path), "--quiet"]
    assert run.main(argv) == 0
    found = tree(tmp_path)
    assert found["results/serving.csv"] == b"serve" and found["plots/serving_goodput.png"] == b"png"
    assert "results/results.csv" in found


def test_a_study_run_without_plots_removes_its_old_plots_and_keeps_the_serve_commands(tmp_path):
    """--no-plots: the study's plots of an earlier run go (they would show other numbers than the
    new results/), the serve command's files stay."""
    outputs.publish(str(tmp_path), {"results/serving.csv": b"serve",
                                    "plots/serving_goodput.png": b"png",
                                    "plots/speedup_vs_batch.png": b"an earlier study's plot"})
    argv = ["--scenario", "reference", "--batch-sizes", "1", "--gammas", "2", "--quality-modes",
            "homogeneous_mid", "--serving-modes", "static_batch", "--out", str(tmp_path), "--quiet",
            "--no-plots"]
    assert run.main(argv) == 0
    found = tree(tmp_path)
    assert found["results/serving.csv"] == b"serve" and found["plots/serving_goodput.png"] == b"png"
    assert "results/results.csv" in found
    assert [rel for rel in found if rel.startswith("plots/")] == ["plots/serving_goodput.png"]


def test_write_failure_after_the_simulation_is_one_line_exit_2(old_set, monkeypatch, capsys):
    def disk_full(path, data):
        raise OSError(errno.ENOSPC, "No space left on device", path)

    monkeypatch.setattr(outputs, "_write_file", disk_full)
    code = run.main(["--scenario", "reference", "--batch-sizes", "1", "--gammas", "2",
                     "--quality-modes",
                     "homogeneous_mid", "--serving-modes", "static_batch", "--out", str(old_set),
                     "--quiet", "--no-plots"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith("error: --out: could not write the outputs") and "No space left" in err
    assert tree(old_set) == OLD and leftovers(old_set) == []


def test_replace_section_replaces_in_place_and_appends_when_absent():
    """The one implementation behind the serving, MoE and plan sections of summary.txt."""
    from src.outputs import replace_section
    b, e = "=== S ===", "=== END S ==="
    text = replace_section("study\n", f"{b}\none\n{e}", b, e)
    assert text == f"study\n\n{b}\none\n{e}\n"
    again = replace_section(text + "\nlater\n", f"{b}\ntwo\n{e}", b, e)
    assert again == f"study\n\n{b}\ntwo\n{e}\n\nlater\n"
    assert replace_section(again, f"{b}\ntwo\n{e}", b, e) == again
