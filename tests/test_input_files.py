"""Every file input refuses what is not a regular file, and caps what it reads (src/input_files.py).

A symlink to /dev/zero once grew a run to 24 GB; a FIFO blocked it forever. The command-line cases
run in one child process with a memory limit and a timeout, so a regression fails the test rather
than hanging the suite or exhausting the machine's memory.
"""
import os
import signal

import pytest
from helpers import run_cases

from src.config import ConfigError
from src.input_files import MAX_TEXT_BYTES, MAX_TOML_BYTES, read_file_bytes, read_toml


@pytest.fixture(scope="module")
def specials(tmp_path_factory):
    """A FIFO and a symlink to /dev/zero, each under a name its reader expects."""
    tmp_path = tmp_path_factory.mktemp("specials")
    made = {}
    for ext in ("toml", "csv", "txt"):
        fifo = tmp_path / f"fifo.{ext}"
        os.mkfifo(fifo)
        zero = tmp_path / f"zero.{ext}"
        zero.symlink_to("/dev/zero")
        made[ext] = (str(fifo), str(zero))
    return made


def _options(path: str, ext: str, out: str) -> list[list[str]]:
    """Every command-line option that reads a file of this kind."""
    study = ["--quiet", "--out", out]
    if ext == "toml":
        return [["--config", path, *study], ["--scenario", path, *study],
                ["serve", "--scenario", path, "--out", out],
                ["step-time", "--gpu", "h100-sxm", "--model", "llama-3.1-8b", "--presets", path],
                ["calibrate", "--measurements", "measurements/h200-2026-11-29/steps.csv",
                 "--presets", path]]
    if ext == "csv":
        return [["--acceptance-trace", path, *study], ["serve", "--trace", path, "--out", out],
                ["calibrate", "--measurements", path],
                ["calibrate-moe", "--measurements", path, "--gpu", "h200", "--out",
                 os.path.join(out, "moe.toml")]]
    return [["--acceptance-from-vllm", path, *study]]


@pytest.fixture(scope="module")
def commands(specials, tmp_path_factory):
    """Every command-line case of this file, run in one child (helpers.run_cases: a memory limit
    and a timeout; one interpreter start instead of one per test): {"fifo": (cases, expected,
    out), "presets": (argv, scenario path), "cap": (big csv, big toml), "results": {argv: (code,
    stderr)}}."""
    tmp_path = tmp_path_factory.mktemp("commands")
    out = str(tmp_path / "out")
    cases, expected = [], {}
    for ext, (fifo, zero) in specials.items():
        for path, kind in ((fifo, "is a named pipe (FIFO), not a regular file"),
                           (zero, "is a character device, not a regular file")):
            for argv in _options(path, ext, out):
                cases.append(argv)
                expected[tuple(argv)] = kind
    scenario = tmp_path / "s.toml"
    scenario.write_text('[scenario]\nname = "s"\ngpu = "h100-sxm"\ntarget = "llama-3.1-8b"\n'
                        f'draft = "llama-3.2-1b"\npresets = ["{specials["toml"][0]}"]\n')
    presets = ["--scenario", str(scenario), "--out", str(tmp_path / "o")]
    big_csv, big_toml = tmp_path / "big.csv", tmp_path / "big.toml"
    for path, size in ((big_csv, MAX_TEXT_BYTES + 1), (big_toml, MAX_TOML_BYTES + 1)):
        with open(path, "wb") as f:  # sparse: no disk used
            f.truncate(size)
    cap = [["serve", "--trace", str(big_csv)], ["--config", str(big_toml)]]
    return {"fifo": (cases, expected, out), "presets": presets, "cap": (big_csv, big_toml),
            "results": run_cases(cases + [presets] + cap)}


def test_every_file_option_refuses_a_fifo_and_dev_zero_in_one_line(specials, commands):
    cases, expected, out = commands["fifo"]
    results = commands["results"]
    for argv in cases:
        code, err = results[tuple(argv)]
        option = next(a for a in argv if a.startswith("--") and argv[argv.index(a) + 1]
                      in (specials["toml"] + specials["csv"] + specials["txt"]))
        assert code == 2, (argv, err)
        assert err.count("\n") == 1 and err.startswith(f"error: {option}: "), (argv, err)
        assert expected[tuple(argv)] in err, (argv, err)
    assert not os.path.exists(out)


def test_a_scenario_presets_entry_that_is_a_fifo_is_refused(commands):
    code, err = commands["results"][tuple(commands["presets"])]
    assert code == 2 and err.count("\n") == 1, err
    assert "scenario.presets: " in err and "named pipe (FIFO)" in err, err


def test_files_above_the_cap_are_refused_before_reading(commands):
    big_csv, big_toml = commands["cap"]
    with pytest.raises(ConfigError, match=r"^--trace: .*big.csv is larger than 64 MiB"):
        read_file_bytes(big_csv, "--trace", "a CSV file")
    with pytest.raises(ConfigError, match=r"^--config: .*big.toml is larger than 4 MiB"):
        read_toml(big_toml, "--config")
    results = commands["results"]
    for argv, option in ((("serve", "--trace", str(big_csv)), "--trace"),
                         (("--config", str(big_toml)), "--config")):
        code, err = results[argv]
        assert code == 2 and err.startswith(f"error: {option}: ") and "larger than" in err, err


def test_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "f.toml"
    os.mkfifo(fifo)

    def hung(signum, frame):
        raise TimeoutError("the reader blocked on a FIFO")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(10)
    try:
        with pytest.raises(ConfigError, match=r"^--config: .* is a named pipe \(FIFO\)"):
            read_toml(fifo, "--config")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def test_a_regular_file_is_read_whole_and_line_ends_normalised(tmp_path):
    from src.input_files import read_text_file
    path = tmp_path / "a.csv"
    path.write_bytes(b"a,b\r\n1,2\r3,4\n")
    assert read_text_file(path, "--trace", "a CSV file") == "a,b\n1,2\n3,4\n"
    link = tmp_path / "link.csv"
    link.symlink_to(path)  # a symlink to a regular file is fine
    assert read_text_file(link, "--trace", "a CSV file").startswith("a,b")


def test_a_toml_read_is_the_callers_own_copy(tmp_path):
    """read_toml keeps one parse per file content (_parse_toml) and hands out copies: a caller
    changing its dict, a nested table or an array must not change the next read."""
    from src.input_files import read_toml
    f = tmp_path / "a.toml"
    f.write_text('top = 1\nlist = [1, [2, 3]]\n[t]\nu = { v = "w" }\n')
    first = read_toml(f, "f")
    first["top"] = 9
    first["list"][1].append(4)
    first["t"]["u"]["v"] = "changed"
    assert read_toml(f, "f") == {"top": 1, "list": [1, [2, 3]], "t": {"u": {"v": "w"}}}
