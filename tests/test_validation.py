"""Tests of the Validation section and plot (src/hardware/validation.py). The data sets in the
repository (the H200 measurements the calibration is fitted to, published step times) are always
there; the test of the independent data beside the project (../shared/calibration: another H200
session, vidur's tables) skips, saying so, where they are absent."""
from __future__ import annotations

import numpy as np
import pytest

from src.hardware import validation

needs_data = pytest.mark.skipif(
    not validation.available(),
    reason="independent check: ../shared/calibration (another H200 session, vidur's tables; not "
           "in the repository) is absent")


@pytest.fixture(scope="module")
def sets():
    return validation.data_sets(published=False)


@needs_data
def test_every_h200_and_vidur_data_set_is_there(sets):
    names = {(s.name.split(",")[0], s.gpu, s.model, s.role, s.shared) for s in sets}
    for model in ("llama-3.1-8b", "llama-3.2-1b"):
        # the independent session: checked, never fitted
        assert (f"{validation.CHECK_LABEL} step times", "H200", model, "checked", True) in names
        assert (f"{validation.CHECK_LABEL} prefill (pytorch-graphs", "H200", model, "checked",
                True) in names
    assert any(s.name == "vidur non-attention forward" and s.gpu.startswith("H100") and s.shared
               for s in sets)
    graph = [s for s in sets if "graph forward" in s.name and s.name.startswith(
        validation.CHECK_LABEL)]
    assert sum(len(s.measured) for s in graph) == 200  # every configuration, faster kernel
    assert "vidur" in validation.shared_block(sets) and "vidur" not in validation.block(sets=sets)
    for s in sets:
        assert len(s.measured) == len(s.predicted) == len(s.labels) > 0
        assert np.all(s.measured > 0) and np.all(np.isfinite(s.predicted))


def test_table_rows_carry_the_errors(sets):
    text = validation.markdown(sets)
    assert text.count("\n") == len(sets) + 1  # header, rule, one row per data set
    s = sets[0]
    assert f"{100 * np.median(np.abs(s.errors)):.1f}%" in text.splitlines()[2]


def test_plot_is_a_png(sets):
    data = validation.plot_bytes(sets)
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000


def test_plot_legends_are_few_and_readable(sets):
    import matplotlib.pyplot as plt

    fig = validation.plot_figure(sets)
    try:
        timed = [s for s in sets if s.step_time]
        # every plotted value has a colour (its data set) and a marker (its kind of pass)
        assert all(s.source and len(s.kinds) == len(s.measured) for s in timed)
        assert {k for s in timed for k in s.kinds} <= set(validation.KIND_MARKERS)
        entries = [t.get_text() for leg in fig.legends for t in leg.get_texts()]
        assert {s.source for s in timed} <= set(entries)
        assert all(ax.get_legend() is None for ax in fig.axes)  # only the figure's legends
        for leg in fig.legends:
            assert len(leg.get_texts()) <= 8
            assert min(t.get_fontsize() for t in leg.get_texts()) >= 9
        for ax in fig.axes:  # every axis says its unit
            assert ax.get_xlabel().endswith(", ms")
            assert ax.get_ylabel().endswith((", ms", ", %"))
    finally:
        plt.close(fig)


def test_missing_data_leaves_the_sets_out(tmp_path):
    # without the data beside the project only the repository's own measurements remain: the
    # ones the shipped H200 calibration is fitted to (prefill rows: checked, never fitted)
    assert not validation.available(tmp_path)
    sets = validation.data_sets(tmp_path, published=False)
    assert sets and all(s.name.startswith(validation.FIT_LABEL) and not s.shared for s in sets)
    assert {s.role for s in sets if "prefill" not in s.name} == {"fitted"}
    assert {s.role for s in sets if "prefill" in s.name} == {"checked"}
    # positions = 1 rows are decode steps, the rest of the forward rows verification steps
    graph = [s for s in sets if "graph forward" in s.name]
    kinds = {k for s in graph for k in s.kinds}
    assert kinds == {validation.DECODE, validation.VERIFY}
    assert sum(len(s.measured) for s in graph) == 452


def test_repository_block_needs_nothing_beside_the_project(tmp_path):
    # design.md's `validation` block is the same with or without ../shared/calibration
    alone = validation.data_sets(tmp_path, published=False)
    everything = validation.data_sets(published=False)
    assert validation.block(sets=alone) == validation.block(sets=everything)
    assert validation.FIT_LABEL in validation.block(sets=alone)
    assert validation.CHECK_LABEL not in validation.block(sets=everything)
