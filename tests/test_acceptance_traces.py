"""src/acceptance_data/traces.py: per-request acceptance traces -> per-position acceptance."""
import numpy as np
import pytest

from src.acceptance_data.traces import describe, load_trace, to_modes
from src.config import ConfigError


def simulate_trace(rng, rates, scales, steps_per_request, proposed):
    """Rows (request_id, step, proposed, accepted): request r accepts position i with
    a_i^scale_r."""
    rows = []
    rates = np.asarray(rates)
    for r, s in enumerate(scales):
        p = proposed(rng, steps_per_request)
        for t in range(steps_per_request):
            a = np.concatenate([rates, np.full(max(0, p[t] - rates.size), rates[-1])])[:p[t]] ** s
            accepted = int(np.cumprod(rng.random(p[t]) < a).sum())
            rows.append(f"req-{r},{t},{p[t]},{accepted}")
    return "request_id,step,proposed,accepted\n" + "\n".join(rows) + "\n"


def write(tmp_path, text, name="trace.csv"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def fixed(k):
    return lambda rng, n: np.full(n, k)


def test_identical_requests_give_back_their_rates(tmp_path):
    rng = np.random.default_rng(1)
    rates = (0.85, 0.7, 0.6, 0.55)
    fit = load_trace(write(tmp_path, simulate_trace(rng, rates, np.ones(200), 100, fixed(4))))
    assert fit.requests == 200 and fit.steps == 20_000
    assert np.allclose(fit.rates, rates, atol=0.02)
    assert np.median(fit.scales) == pytest.approx(1.0, abs=0.05)
    lines = "\n".join(describe(fit))
    assert "200 requests, 20000 steps" in lines and "a1=0.8" in lines


def test_shorter_drafts_do_not_count_against_deep_positions(tmp_path):
    """Drafts of 1..5 tokens (an n-gram drafter's): the Kaplan-Meier estimate stays unbiased."""
    rng = np.random.default_rng(2)
    rates = (0.8, 0.75, 0.7, 0.65, 0.6)
    text = simulate_trace(rng, rates, np.ones(100), 200, lambda g, n: g.integers(1, 6, n))
    fit = load_trace(write(tmp_path, text))
    assert np.allclose(fit.rates, rates, atol=0.025)


def test_request_scales_follow_the_requests_that_made_them(tmp_path):
    rng = np.random.default_rng(3)
    true = np.exp(0.5 * rng.standard_normal(150))
    fit = load_trace(write(tmp_path, simulate_trace(rng, (0.9, 0.8, 0.7), true, 150, fixed(3))))
    order = {f"req-{r}": r for r in range(150)}  # factorize keeps first-appearance order
    assert list(order) == sorted(order, key=order.get)
    assert np.corrcoef(np.log(fit.scales), np.log(true))[0, 1] > 0.9
    modes = to_modes(fit)
    per_position = modes["trace_per_position"]
    assert per_position.compare_with == "trace_iid" and len(per_position.scales) == 150
    # the i.i.d. fit is each request's maximum-likelihood alpha, kept as a scale on the pooled one
    assert modes["trace_iid"].rates == (fit.iid_alpha,)
    assert 0.5 < fit.iid_alpha < 0.9


def test_iid_fit_is_accepted_over_accepted_plus_rejections(tmp_path):
    text = ("request_id,step,proposed,accepted\n"
            "a,0,4,4\na,1,4,1\na,2,4,2\n"  # 7 accepted, 2 rejections -> 7/9
            "b,0,4,0\nb,1,4,3\n")  # 3 accepted, 2 rejections -> 3/5
    fit = load_trace(write(tmp_path, text))
    alphas = fit.iid_alpha ** np.asarray(fit.iid_scales)
    assert alphas == pytest.approx([7 / 9, 3 / 5])
    assert fit.iid_alpha == pytest.approx(10 / 14)
    # pooled per-position rates by hand: position 1 reached by 5 drafts, passed by 4; ...
    assert fit.rates == pytest.approx((4 / 5, 3 / 4, 2 / 3, 1 / 2))


@pytest.mark.parametrize("text,needle", [
    ("", "is empty; expected a CSV with header request_id,step,proposed,accepted"),
    ("request_id,step,proposed,accepted\n", "has a header but no rows"),
    ("request_id,step,accepted\na,0,1\n", "lacks column(s) proposed"),
    ("request_id,step,proposed,accepted\na,0,4,x\n",
     "line 2: accepted = 'x'; expected an integer >= 0"),
    ("request_id,step,proposed,accepted\na,0,4,1\na,1,0,0\n",
     "line 3: proposed = '0'; expected an integer >= 1"),
    ("request_id,step,proposed,accepted\na,0,4,1.5\n", "accepted = '1.5'; expected an integer"),
    ("request_id,step,proposed,accepted\na,0,4,5\n", "line 2: accepted 5 > proposed 4"),
    ("request_id,step,proposed,accepted\na,0,4,1\na,0,4,2\n", "request 'a' step 0 appears twice"),
    ("request_id,step,proposed,accepted\na,0,4,4\na,1,4,4\n",
     "every proposed draft token was accepted"),
    ("request_id,step,proposed,accepted\na,0,4,1\na,1,4,1\n",
     "position 2 had it accepted (rate 0)"),
    ('request_id,step,proposed,accepted\na,0,4,"1\n', "is not valid CSV"),
    ("request_id,step,proposed,accepted\n,0,4,1\n", "line 2: empty request_id"),
], ids=["empty", "header-only", "missing-column", "not-integer", "zero-proposed", "fraction",
        "accepted-over-proposed", "duplicate-step", "no-rejection", "zero-rate", "bad-quote",
        "no-id"])
def test_bad_traces_are_one_line_naming_the_problem(tmp_path, text, needle):
    with pytest.raises(ConfigError) as e:
        load_trace(write(tmp_path, text))
    message = str(e.value)
    assert message.startswith("--acceptance-trace: ") and needle in message and "\n" not in message
