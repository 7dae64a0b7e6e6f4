"""Measured decode attention (src/kernels/pass_attention.py) in the cost model, step-time and the
compiled serving engine: a table row reproduced at a grid point, linear and monotone between
grid points, continuous at the table's edge (the edge's row plus the roofline's increment), the
compiled engine equal to the cost model where it anchors off the grid, and step-time naming the
attention's source."""
import numpy as np
import pytest

from src import stepcalc
from src.costmodel import HardwareCostModel
from src.kernels.costmodel import AUTO, with_kernels
from src.kernels.sources import data_root

pytestmark = pytest.mark.skipif(data_root() is None, reason="aiconfigurator-core not installed")


@pytest.fixture(scope="module")
def measured():
    cost = HardwareCostModel.from_presets("h200", "llama-3.1-8b", engine="vllm-v1",
                                          draft="llama-3.2-1b")
    return with_kernels(cost, AUTO)


def _grid(a):
    return a.batch_axis, a.kv_axis, a.grid_ms


def test_a_grid_point_is_the_table_s_row_times_the_layers(measured):
    a = measured.attention_kernels
    assert a.kernel_source == "vllm_flash_attn_fa3"
    bs, kv, grid = _grid(a)
    i, j = int(np.searchsorted(bs, 64)), int(np.searchsorted(kv, 2048))
    want = grid[i, j]  # the measured row: batch 64, one new position over 2048 keys
    assert want == a.kernels.decode_attention_ms(64, 2048, 32, 8, 128)
    ms, edge, from_rows = a.pass_ms(64, 64 * 2047, 1)  # 2047 cached + the new one = 2048 keys
    assert edge[0] == 2048
    assert ms[0] == pytest.approx(32 * want, rel=1e-12)
    assert from_rows[0] == ms[0]


def test_linear_and_monotone_between_grid_points(measured):
    a = measured.attention_kernels
    bs, kv, grid = _grid(a)
    # KV 1024 .. 2048 at batch 64: on the chord between the two measured rows
    ctx = np.arange(1023, 2048, 16)
    ms = a.pass_ms(np.full(ctx.size, 64), 64 * ctx, 1)[0]
    lo, hi = (grid[int(np.searchsorted(bs, 64)), int(np.searchsorted(kv, k))] for k in (1024,
                                                                                        2048))
    w = (ctx + 1 - 1024) / 1024
    np.testing.assert_allclose(ms, 32 * ((1 - w) * lo + w * hi), rtol=1e-12)
    assert np.all(np.diff(ms) >= 0)
    # batch 32 .. 64 at KV 1024: the rows rise with batch, so does the interpolation
    S = np.arange(32, 65)
    by_batch = a.pass_ms(S, S * 1023, 1)[0]
    assert np.all(np.diff(by_batch) >= 0) and np.isfinite(by_batch).all()


def test_beyond_the_edge_the_roofline_increment_meets_the_edge_s_row(measured):
    a = measured.attention_kernels
    rows, lo, hi = a.rows(512)
    edge_kv = a.kv_axis[hi[512]]  # batch 512's longest measured KV length (512 on H200)
    assert np.isfinite(rows[512, hi[512]]) and not np.isfinite(rows[512, hi[512] + 1])
    kv = edge_kv + np.array([-2.0, -1.0, 0.0, 1.0, 2.0, 64.0])
    ms, kc, from_rows = a.pass_ms(np.full(kv.size, 512), 512 * (kv - 1), 1)
    assert kc[2] == edge_kv and np.all(kc[3:] == edge_kv)
    assert np.all(np.diff(ms) > 0)
    np.testing.assert_allclose(ms[1:4], ms[2], rtol=2e-3)  # one key either side: no step
    assert from_rows[-1] == pytest.approx(rows[512, hi[512]]) and from_rows[-1] < ms[-1]
    # the increment is the roofline's own: its slope in KV, not the table's row scaled
    roof = a._roof1_ms(512.0, kv[-1]) - a._roof1_ms(512.0, edge_kv)
    assert ms[-1] - ms[2] == pytest.approx(float(roof), rel=1e-9)


def test_one_call_over_mixed_passes_is_the_calls_one_pass_at_a_time(measured):
    """pass_ms over passes of every kind at once (no sequence, too many positions, one and
    several positions, inside and beyond a row's run, on a grid line, a batch past the table,
    without and with the caller's roofline) gives each pass the bytes of its own call: the
    vectorised path (gathers of the entries that need each part) is the one-pass path."""
    a = measured.attention_kernels
    rows, lo, hi = a.rows(600)
    S = np.array([0, 1, 1, 64, 64, 64, 512, 512, 600, 3, 7, 64])
    t = np.array([1, 1, 4, 1, 8, 17, 1, 3, 2, 1, 16, 5])
    kv = np.array([9.0, 2.0, 100.0, 2048.0, 3000.5, 50.0, a.kv_axis[hi[512]] + 70, 300.0,
                   800.0, 65536.0 * 4, 17.0, a.kv_axis[lo[64]]])
    C = np.round(S * (kv - t))
    roof = measured._attention_pnorm_ms(measured._target_c, S, S * t, t, C)
    for given in (None, roof):
        together = a.pass_ms(S, C, t, given)
        for i in range(S.size):
            alone = a.pass_ms(S[i:i + 1], C[i:i + 1], t[i:i + 1],
                              None if given is None else given[i:i + 1])
            for x, y in zip(together, alone):
                assert x[i:i + 1].tobytes() == y.tobytes(), (i, x[i], y[0])
        ms = together[0]
        assert np.isnan(ms[[0, 5]]).all() and np.isfinite(ms[[1, 2, 3, 4, 6, 7]]).all()
        assert together[1][9] == a.kv_axis[hi[3]]  # past the longest KV: the run's edge


def test_the_compiled_engine_agrees_where_attention_is_anchored_off_the_grid(measured):
    from src.compiled_cache import python_callable
    from src.online import step_prices
    from src.online.steptime import StepTimer

    decode_ms, pack_prices = python_callable(step_prices.decode_ms), step_prices.pack_prices

    timer = StepTimer(measured, True)
    rng = np.random.default_rng(11)
    rows, width = 60, 300  # batches of hundreds: past the table's KV edge (512-1024 keys)
    decoding = rng.random((rows, width)) < 0.3 + 0.7 * rng.random((rows, 1))
    context = rng.integers(0, 1800, (rows, width))
    gamma = rng.integers(0, 6, rows)
    pt = pack_prices([timer], width, 8, 512)
    target, draft = timer.decode_ms(decoding, gamma, context)
    n, C = decoding.sum(axis=1), (context * decoding).sum(axis=1)
    kc = measured.attention_kernels.pass_ms(n, C, gamma + 1)[1]
    kv = C / np.maximum(n, 1) + gamma + 1
    assert np.sum(np.isfinite(kc) & (kc != kv)) > 10  # the anchored branch is exercised
    for r in range(rows):
        t, d = decode_ms(pt, 0, int(n[r]), int(C[r]), int(gamma[r]), 0.0, 0.0)
        np.testing.assert_allclose([t, d], [target[r], draft[r]], rtol=1e-9, atol=1e-12)
    # and measured attention moved the price: the roofline's engine differs
    roof = StepTimer(with_kernels(measured, "roofline"), True).decode_ms(decoding, gamma, context)
    assert not np.allclose(roof[0], target)


def test_step_time_names_the_attention_source_and_kernel(capsys):
    argv = ["--gpu", "h200", "--model", "llama-3.1-8b", "--batch", "64,512", "--positions", "1",
            "--context", "1024", "--engine", "vllm-v1"]
    assert stepcalc.main(argv + ["--csv"]) == 0
    import csv
    import io

    got = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [r["attention_source"] for r in got] == ["vllm-0.24.0", "vllm-0.24.0+roofline"]
    # beyond the edge only the edge's row counts as measured: the share drops
    assert float(got[1]["measured_share"]) < float(got[0]["measured_share"])
    assert stepcalc.main(argv) == 0
    out = capsys.readouterr().out
    assert "decode attention: vllm_flash_attn_fa3)" in out
    assert ("roofline: decode attention batch=512 kv=1025: beyond the table's edge kv=512 for "
            "this batch: the edge's measured row plus the roofline's increment") in out


def test_an_fp8_target_takes_measured_attention_and_keeps_roofline_gemms():
    cost = HardwareCostModel.from_presets("h200", "llama-3.1-70b", engine="vllm-v1", tp=4,
                                          target_formats={"weight_format": "fp8"})
    m = with_kernels(cost, AUTO)
    assert m.kernels is None  # measured GEMMs price dense BF16 decoders so far
    assert m.attention_kernels is not None and m.attention_kernels.heads == (16, 2, 128)
    active, ctx = np.ones((1, 32), bool), np.full((1, 32), 2000)
    roof = with_kernels(cost, "roofline").target_pass_parts(active, 1, ctx)[0][0]
    assert m.target_pass_parts(active, 1, ctx)[0][0] != roof
