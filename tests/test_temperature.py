"""Sampling at temperature > 0 (issue 24, section 5): the sampler's probability traffic added to
the target pass (src/costmodel/sampling.py), its closed form and growth, T = 0 unchanged, the
compiled serving engine's step prices at T > 0, and the commands' --temperature refusals
(src/sampling_acceptance.py)."""
import numpy as np
import pytest

from src.compiled_cache import python_callable
from src.costmodel import HardwareCostModel
from src.costmodel.sampling import SGLANG, VLLM_V1, sampling_bytes
from src.online.step_prices import decode_ms as _decode_ms
from src.online.step_prices import pack_prices
from src.online.steptime import StepTimer
from tests.helpers import run_captured

# the engine's callees have no Python wrappers (src/compiled_cache.py): call a twin
decode_ms = python_callable(_decode_ms)

GPU, TARGET, DRAFT = "h100-sxm", "llama-3.1-8b", "llama-3.2-1b"


def _cost(engine="vllm-v1", temperature=0.0, draft=DRAFT):
    return HardwareCostModel.from_presets(GPU, TARGET, draft=draft, engine=engine,
                                          temperature=temperature)


def _physics_ms(cost, n_seqs, t, context=2000):
    active = np.zeros((1, n_seqs + 1), dtype=bool)
    active[0, :n_seqs] = True
    ctx = np.full(active.shape, context)
    return float(cost.target_pass_parts(active, t, ctx)[0][0])


def _bandwidth(cost):
    eff = (cost.gpu.memory_bandwidth_efficiency_fraction
           or cost.params.memory_bandwidth_efficiency_fraction)
    return cost.gpu.memory_bandwidth_bytes_per_s * eff


@pytest.mark.parametrize("engine,per_seq_bytes", [
    # vLLM V1: plain row 42 B (bonus), K = 4 draft rows of 38 B, q [S, V] 4 B
    ("vllm-v1", lambda K: 42 + 38 * K + 4),
    # SGLang: t = K + 1 rows of 28 B, the residual draw's two rows 8 B
    ("sglang", lambda K: 28 * (K + 1) + 8),
])
def test_the_added_time_is_the_closed_form(engine, per_seq_bytes):
    S, K = 64, 4
    hot, cold = _cost(engine, 1.0), _cost(engine, 0.0)
    V = hot.target.vocab_size
    assert V == 128256  # Llama 3.1's vocabulary
    expected_ms = per_seq_bytes(K) * S * V / _bandwidth(hot) * 1e3
    added = _physics_ms(hot, S, K + 1) - _physics_ms(cold, S, K + 1)
    assert added == pytest.approx(expected_ms, rel=1e-9)
    # a decode row at T > 0 pays the plain sampling pass alone
    plain = {"vllm-v1": 42, "sglang": 20}[engine]
    added_decode = _physics_ms(hot, S, 1) - _physics_ms(cold, S, 1)
    assert added_decode == pytest.approx(plain * S * V / _bandwidth(hot) * 1e3, rel=1e-9)


def test_temperature_zero_is_today_bit_for_bit():
    default = HardwareCostModel.from_presets(GPU, TARGET, draft=DRAFT, engine="vllm-v1")
    zero = _cost("vllm-v1", 0.0)
    np.testing.assert_array_equal(default._table_ms("target", 64, 9),
                                  zero._table_ms("target", 64, 9))
    for t in (1, 5, 9):
        assert _physics_ms(default, 32, t) == _physics_ms(zero, 32, t)


def test_the_added_time_grows_with_batch_positions_and_vocabulary():
    for traffic in (VLLM_V1, SGLANG):
        b = sampling_bytes(traffic, 8, 5, 32000)
        assert sampling_bytes(traffic, 16, 5, 32000) == pytest.approx(2 * b)  # linear in batch
        assert sampling_bytes(traffic, 8, 5, 64000) == pytest.approx(2 * b)  # and vocabulary
        assert sampling_bytes(traffic, 8, 9, 32000) > b  # more verified positions, more bytes
        assert sampling_bytes(traffic, 0, 5, 32000) == 0.0
    hot, cold = _cost("vllm-v1", 1.0), _cost("vllm-v1", 0.0)
    added = {(S, t): _physics_ms(hot, S, t) - _physics_ms(cold, S, t)
             for S, t in ((8, 5), (16, 5), (16, 9))}
    assert 0 < added[8, 5] < added[16, 5] < added[16, 9]


def test_compiled_step_prices_equal_the_cost_model_at_temperature_one():
    timer = StepTimer(_cost("vllm-v1", 1.0), True)
    rng = np.random.default_rng(3)
    rows, width = 60, 32
    decoding = rng.random((rows, width)) < rng.random((rows, 1))
    context = rng.integers(0, 5000, (rows, width))
    gamma = rng.integers(0, 9, rows)
    pt = pack_prices([timer], width, 8, 4096)
    target, draft = timer.decode_ms(decoding, gamma, context)
    n = decoding.sum(axis=1)
    C = (context * decoding).sum(axis=1)
    for r in range(rows):
        t, d = decode_ms(pt, 0, int(n[r]), int(C[r]), int(gamma[r]), 0.0, 0.0)
        np.testing.assert_allclose([t, d], [target[r], draft[r]], rtol=1e-9, atol=1e-12)
    cold = StepTimer(_cost("vllm-v1", 0.0), True).decode_ms(decoding, gamma, context)[0]
    assert (target[n > 0] > cold[n > 0]).all()  # the traffic is in the compiled prices too


@pytest.mark.parametrize("argv", [
    ["--temperature", "3"],
    ["--temperature", "-0.5", "--alpha", "0.5"],
    ["serve", "--temperature", "2.5", "--alpha", "0.5"],
    ["serve", "--temperature", "hot", "--alpha", "0.5"],
    ["serve", "--temperature", "\u0661", "--alpha", "0.5"],  # an Arabic-Indic 1: ASCII only
    ["recommend", "--gpu", GPU, "--target", TARGET, "--draft", "ngram", "--acceptance", "0.5",
     "--temperature", "nan"],
])
def test_a_temperature_outside_0_to_2_is_one_line_exit_2(argv, tmp_path):
    done = run_captured([*argv, "--out", str(tmp_path / "out")] if argv[0] != "recommend"
                        else argv)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "--temperature" in done.stderr
    assert "0..2" in done.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("argv", [["--temperature", "1"], ["serve", "--temperature", "0.7"]])
def test_temperature_above_zero_without_measured_acceptance_is_refused(argv, tmp_path):
    done = run_captured([*argv, "--out", str(tmp_path / "out")])
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    assert done.stderr.startswith("error: --temperature: ")
    assert "#31483" in done.stderr and "--alpha" in done.stderr
    assert not (tmp_path / "out").exists()


def test_temperature_with_the_user_s_acceptance_reaches_the_cost_model(tmp_path):
    from src import cli
    from src.online import cli as serve_cli
    plan = cli.parse(["--temperature", "1", "--alpha", "0.3", "--out", str(tmp_path)])
    assert plan.cfg.temperature == 1.0 and plan.scenario.study.temperature == 1.0
    assert plan.scenario.cost_model().sampling_temperature == 1.0
    args = serve_cli.make_parser().parse_args(["--temperature", "0.7", "--alpha", "0.3"])
    cfg = serve_cli.config_from_args(args)
    assert cfg.scenario.cost_model(cfg.engine_profile).sampling_temperature == 0.7
    args = serve_cli.make_parser().parse_args(["--alpha", "0.3"])
    assert serve_cli.config_from_args(args).scenario.study.temperature == 0.0


def test_a_file_that_states_its_modes_temperature_is_its_own_acceptance(tmp_path):
    from src import cli
    from src.config import ConfigError
    base = open("configs/scenarios/h100-llama8b-1b.toml").read()
    stated = tmp_path / "stated.toml"
    stated.write_text(base + '\ntemperature = 1.0\nquality_modes = ["at_t1"]\n'
                             '[study.alpha_modes.at_t1]\nkind = "point"\nvalue = 0.3\n')
    plan = cli.parse(["--scenario", str(stated), "--out", str(tmp_path / "a")])
    assert plan.scenario.study.temperature == 1.0
    unstated = tmp_path / "unstated.toml"
    unstated.write_text(base + "\ntemperature = 1.0\n")  # the reference (greedy) modes
    with pytest.raises(ConfigError, match="--temperature: 1 needs acceptance measured"):
        cli.parse(["--scenario", str(unstated), "--out", str(tmp_path / "b")])
    assert not (tmp_path / "b").exists()
    from src.online import cli as serve_cli
    args = serve_cli.make_parser().parse_args(["--scenario", str(stated)])
    assert serve_cli.config_from_args(args).scenario.study.temperature == 1.0
    args = serve_cli.make_parser().parse_args(["--scenario", str(stated), "--temperature", "0.5"])
    with pytest.raises(ConfigError, match="--temperature: 0.5 needs"):  # the file said T = 1
        serve_cli.config_from_args(args)
    with pytest.raises(ConfigError, match="--temperature: 0.5 needs"):  # the study's check too
        cli.parse(["--scenario", str(stated), "--temperature", "0.5", "--out", str(tmp_path / "c")])
