"""Time every `python run.py` example of README.md and write the table into its timings block.

    python scripts/time_examples.py            # run each example once (into a temp folder)
    python scripts/time_examples.py --dry-run  # list the commands it would time

The commands are read from README.md's code blocks, so the table times what the README shows.
Examples that need files a reader brings (a /metrics snapshot, a trace) or a GPU (measure), and
help or listing commands, are left out. Each runs with --quiet, its outputs in a temporary
folder, so the repository is not touched. Wall time depends on the machine and on what else it
runs: the block states the core count and the load average at the start; CPU time (user +
system, all processes of the run) is the steadier figure.
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import resource
import shlex
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from src.doc_blocks import replace_block  # noqa: E402
from src.reporting import md_table, write_atomic  # noqa: E402

SKIP_FLAGS = ("--help", "--list", "--acceptance-from-vllm", "--acceptance-trace", "--trace")
SKIP_SUBCOMMANDS = ("measure", "measure-moe")  # need a GPU and PyTorch


def readme_examples(readme: str) -> list[str]:
    """The `python run.py ...` lines of the README's code blocks, without trailing comments."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", readme, flags=re.S):
        block = re.sub(r"\\\n\s*", "", block)  # join continued lines
        for line in block.splitlines():
            line = line.split(" #", 1)[0].strip()
            if "python run.py" not in line:
                continue
            command = line[line.index("python run.py"):]
            words = command.split()
            subcommand = words[2] if len(words) > 2 else ""
            if any(flag in words for flag in SKIP_FLAGS) or subcommand in SKIP_SUBCOMMANDS:
                continue
            if command not in commands:
                commands.append(command)
    return commands


def with_temp_out(command: str, folder: str) -> list[str]:
    """argv of command with --out pointing into folder (added where the command has none) and
    --quiet; step-time takes neither."""
    argv = shlex.split(command)
    argv[0] = sys.executable
    subcommand = argv[2:3] if len(argv) > 2 and not argv[2].startswith("-") else []
    options = subprocess.run([sys.executable, "run.py", *subcommand, "--help"], cwd=ROOT,
                             capture_output=True, text=True).stdout
    if "--out" not in options:  # a command that writes no files (step-time)
        return argv
    if "--out" in argv:
        argv[argv.index("--out") + 1] = os.path.join(folder, "out")
    else:
        argv += ["--out", os.path.join(folder, "out")]
    return argv + (["--quiet"] if "--quiet" in options else [])


def timed(argv: list[str]) -> tuple[float, float, int, str]:
    """(wall s, CPU s of the command and its worker processes, exit code, last stderr line)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    last = (done.stderr.strip().splitlines() or [""])[-1]
    return wall, cpu, done.returncode, last


def _seconds(x: float) -> str:
    return f"{x:.1f} s" if x < 10 else f"{x:.0f} s"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dry-run", action="store_true", help="list the commands, run nothing")
    ap.add_argument("--tests", action="store_true", help="also time `python -m pytest -q`")
    args = ap.parse_args(argv)
    path = os.path.join(ROOT, "README.md")
    with open(path) as f:
        readme = f.read()
    commands = readme_examples(readme)
    if args.dry_run:
        print("\n".join(commands))
        return 0
    load = os.getloadavg()[0]
    rows, untimed = [], []
    for command in commands + (["python -m pytest -q"] if args.tests else []):
        with tempfile.TemporaryDirectory() as folder:
            run_argv = [sys.executable, "-m", "pytest", "-q"] if "pytest" in command else \
                with_temp_out(command, folder)
            wall, cpu, code, last = timed(run_argv)
        if code != 0 and "pytest" in command:
            print("the test suite failed: no timings written", file=sys.stderr)
            return 1
        if code != 0:  # an example that needs the reader's own files
            print(f"not timed (exit {code}: {last}): {command}", file=sys.stderr)
            untimed.append(f"`{command}` ({last.removeprefix('error: ')})")
            continue
        print(f"{wall:7.1f} s wall {cpu:7.1f} s CPU  {command}", file=sys.stderr)
        rows.append([f"`{command}`", _seconds(wall), _seconds(cpu)])
    body = (md_table(["command", "wall time", "CPU time"], rows) + "\n\n"
            f"Measured by `scripts/time_examples.py` on a {os.cpu_count()}-core machine "
            f"({platform.machine()}, "
            f"Python {platform.python_version()}, load average {load:.1f} at the start, "
            f"{datetime.date.today().isoformat()}). CPU time adds up every process of the run; the "
            "default run uses two processes where there are two cores."
            + ("" if not untimed else " Not timed, as they need the reader's files: "
               + "; ".join(untimed) + "."))
    write_atomic(path, replace_block(readme, "timings", body).encode())
    print("updated README.md (timings)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
