"""Arrival processes and trace files (src/online/arrivals.py); workload presets."""
import numpy as np
import pytest

from src.config import ConfigError
from src.online.arrivals import ArrivalProcess, arrival_times, parse_arrival, read_trace
from src.online.workloads import load_workloads, mean_length


def test_poisson_and_gamma_have_the_asked_rate_and_variability():
    for process, cv in ((ArrivalProcess(), 1.0), (ArrivalProcess("gamma", 3.0), 3.0),
                        (ArrivalProcess("gamma", 0.5), 0.5)):
        t = arrival_times(1, process, 8.0, 0, 200_000)
        gaps = np.diff(t)
        assert t[0] == 0
        assert gaps.mean() == pytest.approx(1 / 8, rel=0.02)
        assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.05)


def test_common_random_numbers_across_rates():
    """The same unit-rate gaps at every rate: arrivals at rate 8 come exactly half as late."""
    a4 = arrival_times(7, ArrivalProcess(), 4.0, 3, 100)
    a8 = arrival_times(7, ArrivalProcess(), 8.0, 3, 100)
    np.testing.assert_allclose(a8, a4 / 2)


def test_parse_arrival():
    assert parse_arrival("gamma:2").cv == 2.0
    for bad in ("gamma:0", "gamma:x", "uniform"):
        with pytest.raises(ConfigError, match="--arrival"):
            parse_arrival(bad)


def test_trace_is_read_in_order_and_checked(tmp_path):
    f = tmp_path / "t.csv"
    f.write_text("output_tokens,arrival_s,prompt_tokens,alpha\n5,1.0,10,0.5\n7,2.0,20,0.9\n")
    t = read_trace(str(f))
    np.testing.assert_array_equal(t.arrival_s, [1.0, 2.0])
    np.testing.assert_array_equal(t.prompt_tokens, [10, 20])
    np.testing.assert_array_equal(t.alpha, [0.5, 0.9])
    # unsorted arrivals were once re-sorted silently: a shuffled file is refused, naming the line
    f.write_text("arrival_s,prompt_tokens,output_tokens\n0,5,5\n\n2.0,10,5\n1.0,20,7\n")
    with pytest.raises(ConfigError, match=r"^--trace: .*t.csv line 5: arrival_s 1 comes before "
                                          r"line 4's 2; allowed: rows sorted by arrival_s"):
        read_trace(str(f))
    for text, what in (("arrival_s,prompt_tokens,output_tokens\n-1,5,5\n", "arrival_s"),
                       ("arrival_s,prompt_tokens,output_tokens\n0,5,0\n", "output_tokens"),
                       ("arrival_s,prompt_tokens,output_tokens,alpha\n0,5,5,1\n", "alpha"),
                       ("arrival_s,prompt_tokens,output_tokens\n0,5\n", "fields"),
                       ("arrival_s,prompt_tokens,output_tokens\n", "no requests")):
        f.write_text(text)
        with pytest.raises(ConfigError, match=what):
            read_trace(str(f))


def test_workload_presets_reproduce_their_published_means():
    """Clipping moves each lognormal's mean by under 2% from the source's figure."""
    published = {"sharegpt": (161.31, 337.99), "lmsys-chat": (69.5, 214.5),
                 "alpaca": (19.31, 58.45)}
    presets = load_workloads()
    for name, (prompt, output) in published.items():
        w = presets[name]
        assert mean_length(w.prompt_len) == pytest.approx(prompt, rel=0.02)
        assert mean_length(w.output_len) == pytest.approx(output, rel=0.02)
        assert w.source
