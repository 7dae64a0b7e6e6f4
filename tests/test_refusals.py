"""Inputs that once took the machine down, ran silently wrong or failed late (issue 19, part 3):
each is refused (or reported) in one line naming the option or key, exit code 2, nothing written,
before anything is simulated or allocated."""
from helpers import run_captured, run_cases

SCENARIO = ('[scenario]\nname = "s"\ngpu = "h100-sxm"\ntarget = "llama-3.1-8b"\n'
            'draft = "llama-3.2-1b"\n')


def refused(argv, tmp_path, field: str, *needles: str) -> str:
    """Run argv (with --out under tmp_path); assert one line 'error: FIELD: ...' holding every
    needle, exit 2 and no output folder. Returns the line."""
    out = tmp_path / "out"
    done = run_captured([*argv, "--out", str(out)])
    err = done.stderr
    assert done.returncode == 2, err
    assert err.count("\n") == 1 and err.startswith(f"error: {field}: "), err
    for needle in needles:
        assert needle in err, err
    assert not out.exists()
    return err


def scenario_file(tmp_path, extra: str = "", scenario_extra: str = "") -> str:
    path = tmp_path / "s.toml"
    path.write_text(SCENARIO + scenario_extra + extra)
    return str(path)


# -- work bounded before allocation (src/online/config.py MAX_REQUESTS_PER_REPLICATION, ...) ------

BOUNDS = [
    (["--rates", "1", "--duration-s", "1e9"], "--duration-s",
     ("about 1e+09 requests a replication", "at most 1000000", "up to 1e+06 s at 1/s")),
    (["--rates", "1e9", "--duration-s", "20"], "--duration-s",
     ("about 2e+10 requests a replication", "up to 0.001 s at 1e+09/s")),
    (["--requests", "1000000", "--replications", "10000"], "--requests",
     ("5e+10 requests simulated together", "at most 1e+07", "up to 200 requests")),
    (["--rates", "64", "--duration-s", "5000", "--replications", "40"], "--duration-s",
     ("requests simulated together", "up to 577 s at 64/s")),
]


def test_serve_work_is_bounded_before_allocation(tmp_path):
    """Once OOM-killed (1e9 s) or a traceback ('Unable to allocate 194 GiB'): run in a child with
    a memory limit (helpers.run_cases), so a regression cannot take the machine down."""
    path = scenario_file(tmp_path, "[serving]\nrates = [1e9]\nduration_s = 20\n")
    cases = [(["serve", *argv, "--quiet", "--out", str(tmp_path / "out")], field, needles)
             for argv, field, needles in BOUNDS]
    cases.append((["serve", "--scenario", path, "--quiet", "--out", str(tmp_path / "out")],
                  "serving.duration_s", ("about 2e+10 requests a replication",)))
    results = run_cases([argv for argv, _, _ in cases])
    for argv, field, needles in cases:
        code, err = results[tuple(argv)]
        assert code == 2 and err.count("\n") == 1 and err.startswith(f"error: {field}: "), err
        assert all(n in err for n in needles), err
    assert not (tmp_path / "out").exists()
