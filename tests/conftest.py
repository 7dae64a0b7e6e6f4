"""How the test files are shared between pytest-xdist's worker processes (pytest.ini: -n 2).

Each file is one xdist group, so one worker runs all of a file's tests and a module-scoped fixture
(a study run several tests assert on) runs once; the files that import torch share one group, so
one worker pays its import (~2 s of CPU) and the other never does.
"""
import pytest

TORCH_FILES = {"test_measure_cli.py", "test_measure_model.py", "test_measure_timing.py"}


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(items):
    for item in items:
        group = "torch" if item.path.name in TORCH_FILES else item.path.name
        item.add_marker(pytest.mark.xdist_group(group))
