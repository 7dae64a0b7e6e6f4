"""Two runs into one --out: both succeed and neither's outputs vanish (src/outputs.py `locked`).

Issue 19 reproduced it with `python run.py --out D & sleep 3.5; python run.py serve ... --out D`:
serve read the files it keeps (the study's), simulated and rendered, and then swapped in that stale
set over the study's newer one, so the study's results.csv, CSVs and plots were gone, both exiting
0. Here the interleaving is forced rather than timed: serve stops inside its render (after reading
the kept files) until the study has published, or until the study says it waits for OUT's lock.
The study is a second process, serve runs in the test's own (one interpreter start, not two).
"""
import os
import subprocess
import sys
import textwrap
import time

from tests.helpers import run_captured

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

STUDY = textwrap.dedent("""
    import os, sys, time
    import run  # before the wait: the imports overlap serve's simulation
    out, marks = sys.argv[1], sys.argv[2]
    end = time.monotonic() + 120
    while not os.path.exists(os.path.join(marks, "serve-rendering")) and time.monotonic() < end:
        time.sleep(0.05)
    code = run.main(["--scenario", "reference", "--batch-sizes", "1", "--gammas", "1",
                     "--quality-modes", "homogeneous_good", "--serving-modes", "static_batch",
                     "--no-plots", "--quiet", "--out", out])
    open(os.path.join(marks, "study-done"), "w").close()
    sys.exit(code)
""")


def test_a_serve_run_and_a_study_run_into_one_out_keep_both_outputs(tmp_path, monkeypatch):
    """The study runs as a second process (the lock is between processes); serve runs in this one
    (tests/helpers.py run_captured), held inside its render."""
    from src.online import report

    out, marks = tmp_path / "D", tmp_path / "marks"
    marks.mkdir()
    render = report.render

    def held_render(*args, **kwargs):  # the window in which the study publishes
        open(marks / "serve-rendering", "w").close()
        end = time.monotonic() + 120
        while time.monotonic() < end and not (marks / "study-done").exists():
            if "waiting for another run" in (marks / "study.err").read_text():
                break
            time.sleep(0.05)
        return render(*args, **kwargs)

    monkeypatch.setattr(report, "render", held_render)
    with open(marks / "study.err", "w") as study_err:
        study = subprocess.Popen([sys.executable, "-c", STUDY, str(out), str(marks)], cwd=ROOT,
                                 stderr=study_err, text=True)
        try:
            serve = run_captured(["serve", "--rates", "1", "--requests", "20", "--replications",
                                  "2", "--policies", "none,fixed:2", "--no-plots", "--quiet",
                                  "--out", str(out)])
            study.wait(timeout=300)
        finally:
            if study.poll() is None:
                study.kill()
    study_text = (marks / "study.err").read_text()
    assert serve.returncode == 0 and study.returncode == 0, (serve.stderr, study_text)
    results = sorted(os.listdir(out / "results"))
    # the study's files and the serve command's, whichever swapped last
    for name in ("results.csv", "verification_comparison.csv", "serving.csv", "summary.txt"):
        assert name in results, results
    summary = (out / "results" / "summary.txt").read_text()
    assert summary.startswith("Batched speculative decoding: summary of the sweep")
    assert "=== SERVING UNDER LOAD (python run.py serve) ===" in summary
    assert not [n for n in os.listdir(out) if n.startswith(".run-")]  # nothing left behind


def test_a_second_holder_of_the_lock_waits_says_so_once_then_refuses(tmp_path):
    import pytest

    from src.outputs import locked
    said = []
    with locked(str(tmp_path / "D")):
        with pytest.raises(OSError, match=r"another run kept .*D locked for 0.3 s; wait for it"):
            with locked(str(tmp_path / "D"), said.append, wait_s=0.3):
                pass
    assert said == [f"waiting for another run that is writing its outputs into {tmp_path / 'D'}"]
    with locked(str(tmp_path / "D"), said.append, wait_s=0.3):  # released: no wait
        pass
    assert len(said) == 1
