"""A cold numba cache is compiled once per machine, not once per worker, and serve says so."""
import os
import threading
import time

import pytest
from helpers import run_captured

from src import compiled_cache
from src.compiled_cache import compile_once
from src.online.study import ENGINE_COMPILE_S


class FakeCompile:
    """A compile that takes a while and fills the 'cache' it is asked about."""

    def __init__(self):
        self.calls = 0
        self.warm = False

    def is_warm(self):
        return self.warm

    def compile_(self):
        self.calls += 1
        time.sleep(0.05)  # the others reach the lock meanwhile
        self.warm = True


def test_racing_callers_compile_once_and_the_others_wait_for_it(tmp_path):
    fake, said, done = FakeCompile(), [], []
    lock = str(tmp_path / "sub" / "compile.lock")

    def call():
        done.append(compile_once(fake.is_warm, fake.compile_, lock, said.append, "the engine", 30))
        assert fake.warm  # nobody returns before the cache is there

    threads = [threading.Thread(target=call) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert fake.calls == 1 and sorted(done) == [False, False, False, True]
    assert said[0] == ("compiling the engine once (numba; about 30 s of one core; later runs load "
                       "the cache)")
    assert said[1].startswith("  compiled in ") and len(said) == 2
    assert compile_once(fake.is_warm, fake.compile_, lock, said.append, "x", 1) is False
    assert fake.calls == 1 and len(said) == 2  # warm: silent, no compile


SERVE = ["serve", "--rates", "1,2", "--requests", "20", "--replications", "2",
         "--policies", "none,fixed:2", "--no-plots"]


@pytest.mark.parametrize("quiet", [False, True])
def test_serve_compiles_a_cold_engine_in_the_parent_and_says_so(tmp_path, monkeypatch, quiet):
    compiled = []
    real = compiled_cache.compile_once

    def cold_once(is_warm, compile_, *args):
        compiled.append(1)
        return real(lambda: len(compiled) > 1, compile_, *args)

    monkeypatch.setattr(compiled_cache, "compile_once", cold_once)
    done = run_captured(SERVE + ["--out", str(tmp_path)] + (["--quiet"] if quiet else []))
    assert done.returncode == 0, done.stderr
    assert compiled == [1]  # once, in this process, whatever the number of workers
    said = (f"compiling the serving engine once (numba; about {ENGINE_COMPILE_S:.0f} s of one "
            "core; later runs load the cache)") in done.stderr
    assert said is not quiet
    assert ENGINE_COMPILE_S >= 15  # the measured figure (study.py), not the 12 s it once said


FAST = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fast_study.toml")
STUDY = ["--batch-sizes", "1,4", "--gammas", "2", "--no-plots", "--scenario", "reference",
         "--config", FAST]


@pytest.mark.parametrize("quiet", [False, True])
def test_the_study_compiles_a_cold_step_loop_before_its_second_process(tmp_path, monkeypatch,
                                                                        quiet):
    asked = []
    real = compiled_cache.compile_once

    def cold_once(is_warm, compile_, lock_path, say, what, about_s):
        asked.append(what)
        return real(lambda: len(asked) > 1, compile_, lock_path, say, what, about_s)

    monkeypatch.setattr(compiled_cache, "compile_once", cold_once)
    done = run_captured(STUDY + ["--out", str(tmp_path)] + (["--quiet"] if quiet else []))
    assert done.returncode == 0, done.stderr
    assert asked == ["the study's step loop"]
    said = "compiling the study's step loop once (numba; about 6 s of one core" in done.stderr
    assert said is not quiet


def test_the_engine_compiles_each_function_for_no_literal_argument():
    """numba compiles a callee once more for every Python literal (0, 1, True) a compiled caller
    passes it, typed Literal[int] / Literal[bool] (54 signatures of 24 functions, where 24 do):
    the engine's functions pass one another numpy scalars, so no signature numba saved for them
    (the session's compile, tests/conftest.py) has a literal argument."""
    from numba.core.registry import CPUDispatcher

    from src.compiled_cache import cache_is_warm
    from src.online import counter_rng, engine_loop, kernel_attention, step_prices

    assert cache_is_warm(engine_loop.run_rows)
    saved = {}
    for module in (engine_loop, step_prices, kernel_attention, counter_rng):
        for name, f in vars(module).items():
            if isinstance(f, CPUDispatcher) and f.__module__ == module.__name__:
                index = f._cache._cache_file._load_index()
                saved[name] = [str(key[0]) for key in index]  # (signature, target, ...)
    assert saved["attention_exp_ms"] and saved["mixed_ms"]  # compiled as callees, saved
    literal = {name: sigs for name, sigs in saved.items() if any("Literal" in s for s in sigs)}
    assert literal == {}


def test_only_the_engines_entry_point_has_a_python_wrapper():
    """Every compiled function of the serving engine but run_rows (the one Python calls) is
    compiled without numba's CPython and cfunc wrappers (src/compiled_cache.py
    compiled_callee): building them was about a fifth of the engine's cold compile."""
    from numba.core.caching import FunctionCache
    from numba.core.registry import CPUDispatcher

    from src.online import counter_rng, engine_loop, kernel_attention, step_prices

    wrapped = set()
    for module in (engine_loop, step_prices, kernel_attention, counter_rng):
        for name, f in vars(module).items():
            if isinstance(f, CPUDispatcher) and f.__module__ == module.__name__:
                opts = f.targetoptions
                if not (opts.get("no_cpython_wrapper") and opts.get("no_cfunc_wrapper")):
                    wrapped.add(name)
                assert isinstance(f._cache, FunctionCache), name  # each one is in numba's cache
    assert wrapped == {"run_rows"}


def test_no_test_calls_a_wrapperless_callee_from_python():
    """A compiled_callee has no Python wrapper: called from Python it segfaults the test process
    (and with it an xdist worker). A test file that imports one by name must call it through
    python_callable (a twin), as tests/test_online_step_prices.py does."""
    import ast
    import importlib
    import pathlib

    bad = []
    for path in sorted(pathlib.Path(__file__).parent.glob("test_*.py")):
        text = path.read_text()
        for node in ast.walk(ast.parse(text)):
            if not (isinstance(node, ast.ImportFrom) and (node.module or "").startswith("src.")):
                continue
            module = importlib.import_module(node.module)
            for alias in node.names:
                obj = getattr(module, alias.name, None)
                options = getattr(obj, "targetoptions", {})
                if options.get("no_cpython_wrapper") and \
                        f"python_callable({alias.asname or alias.name}" not in text:
                    bad.append(f"{path.name}: {alias.name}")
    assert not bad, bad


@pytest.mark.parametrize("load", [True, False])
def test_a_warm_cache_is_loaded_here_before_workers_fork_only_when_asked(monkeypatch, load):
    """With a warm cache compile_step_loop_once / compile_engine_once still run their tiny run
    here when `load` (the study and serve pass it for local workers, which fork from this process
    and inherit the loaded machine code), and not otherwise (a Dask run, whose workers load it)."""
    from src import serving
    from src.online import study
    from src.online.cli import config_from_args, make_parser
    from src.online.engine_compiled import CompiledEngine

    monkeypatch.setattr(compiled_cache, "compile_once", lambda *args: False)  # warm
    ran = []
    monkeypatch.setattr(serving, "simulate_steps", lambda *args: ran.append("step loop"))
    monkeypatch.setattr(CompiledEngine, "run", lambda self: ran.append("engine"))
    assert serving.compile_step_loop_once(load=load) is False
    cfg = config_from_args(make_parser().parse_args([]))
    assert study.compile_engine_once(cfg, study.prepare(cfg), load=load) is False
    assert ran == (["step loop", "engine"] if load else [])
