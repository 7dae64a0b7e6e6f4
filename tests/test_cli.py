"""run.py, src/cli.py and src/config.py at the edge: every bad input is one line on stderr, exit 2,
no file."""
import os

import pytest

import run
from src import cli
from src.config import ConfigError, StudyConfig, build_config

SMALL = ["--batch-sizes", "1,4", "--gammas", "2", "--quality-modes", "homogeneous_mid",
         "--serving-modes",
         "static_batch", "--quiet", "--scenario", "reference"]


@pytest.mark.parametrize("argv,needle", [
    (["--gammas", "0"], "--gammas"),
    (["--gammas", "2,-1"], "--gammas"),
    (["--gammas", "65"], "--gammas"),
    (["--gammas", "two"], "--gammas"),
    (["--gammas", ""], "--gammas"),
    (["--gammas", "2,,4"], "--gammas"),
    (["--batch-sizes", "0"], "--batch-sizes"),
    (["--batch-sizes", "1000000"], "--batch-sizes"),
    (["--batch-sizes", "4.5"], "--batch-sizes"),
    (["--quality-modes", "great"], "--quality-modes"),
    (["--serving-modes", "paged"], "--serving-modes"),
    (["--verification", "tree"], "--verification"),
    (["--alpha", "1"], "--alpha"),
    (["--alpha", "0"], "--alpha"),
    (["--alpha", "-0.2"], "--alpha"),
    (["--alpha", "high"], "--alpha"),
    (["--alpha", "0.5", "--quality-modes", "bimodal"], "--alpha"),
    (["--draft-cost", "-1"], "--draft-cost"),
    (["--draft-cost", "nan"], "--draft-cost"),
    (["--seed", "-3"], "--seed"),
    (["--seed", "x"], "--seed"),
    (["--config", "does-not-exist.toml"], "--config"),
    (["--no-such-option"], "unrecognized"),
    # values that would otherwise be dropped or changed silently
    (["--batch-sizes", "8,1,8"], "--batch-sizes: 8 is listed twice"),
    (["--quality-modes", "bimodal,bimodal"], "--quality-modes: 'bimodal' is listed twice"),
    (["--scenario", "reference", "--scenario", "configs/scenarios/h100-llama8b-1b.toml"],
     "--scenario: given twice"),
    (["--gammas", "2", "--gammas", "4"], "--gammas: given twice"),
    (["--scenario", "configs/scenarios/h100-llama8b-1b.toml", "--draft-cost", "0.05"],
     "--draft-cost: not used"),
    (["--alpha", "0.9995"], "--alpha: alpha must be in 0.001..0.999"),
    (["--alpha", "0.0005"], "--alpha: alpha must be in 0.001..0.999"),
])
def test_bad_option_is_one_line_exit_2_and_writes_nothing(tmp_path, capsys, argv, needle):
    out = tmp_path / "out"
    usage_error = needle == "unrecognized" or "given twice" in needle  # argparse's own exit
    with pytest.raises(SystemExit) if usage_error else _no_raise() as exc:
        code = run.main(argv + ["--out", str(out)])
    if exc is not None and getattr(exc, "value", None) is not None:
        code = exc.value.code
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("error: ") and needle in err, err
    assert "Traceback" not in err
    assert not out.exists()


class _no_raise:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


@pytest.mark.parametrize("body,needle", [
    ("gammas = [0]", "gammas"),
    ("unknown_key = 1", "unknown_key"),
    ("batch_sizes = []", "batch_sizes"),
    ("serving_modes = 'static'", "serving_modes"),
    ("[alpha_modes.x]\nkind = 'normal'\nmean = 1.2\nstd = 0.1", "alpha_modes.x.mean"),
    ("[alpha_modes.x]\nkind = 'gamma'", "alpha_modes.x.kind"),
    ("[alpha_modes.x]\nkind = 'point'\nvalue = 0.5\nextra = 1", "alpha_modes.x.extra"),
    ("[alpha_modes.x]\nkind = 'mixture'\nweights = [1]\ncomponents = []", "alpha_modes.x.weights"),
    ("[output_len]\nkind = 'uniform'\nlow = 10\nhigh = 5", "output_len.low"),
    ("this is not toml", "not valid TOML"),
])
def test_bad_config_file_names_the_key(tmp_path, capsys, body, needle):
    path = tmp_path / "bad.toml"
    path.write_text(body)
    out = tmp_path / "out"
    assert run.main(["--config", str(path), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err and str(path) in err, err
    assert not out.exists()


def test_out_that_is_a_file_is_refused(tmp_path, capsys):
    target = tmp_path / "file"
    target.write_text("x")
    assert run.main(SMALL + ["--out", str(target)]) == 2
    assert "--out" in capsys.readouterr().err


def test_options_override_the_config_file_and_alpha_makes_a_point_mode(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text("gammas = [3, 5]\nseed = 9\n[alpha_modes.mine]\nkind = 'beta'\na = 4\nb = 1\n")
    args = cli.make_parser().parse_args(["--config", str(path), "--gammas", "1,2"])
    cfg = cli.config_from_args(args)
    assert cfg.gammas == (1, 2) and cfg.seed == 9 and "mine" in cfg.quality_modes
    cfg = cli.config_from_args(cli.make_parser().parse_args(["--alpha", "0.7"]))
    assert cfg.quality_modes == ("alpha_0.7",)


def test_build_config_errors_are_single_lines():
    with pytest.raises(ConfigError) as e:
        build_config({"gammas": [1, 100]}, StudyConfig())
    assert "\n" not in str(e.value) and "1..64" in str(e.value)


def test_help_lists_every_option(capsys):
    with pytest.raises(SystemExit) as e:
        run.main(["--help"])
    assert e.value.code == 0
    text = capsys.readouterr().out
    for option in ("--batch-sizes", "--gammas", "--quality-modes", "--serving-modes",
                   "--verification", "--seed",
                   "--out", "--alpha", "--draft-cost", "--config", "step-time"):
        assert option in text


def test_example_config_is_valid():
    root = os.path.dirname(os.path.dirname(__file__))
    cfg = cli.config_from_args(cli.make_parser().parse_args(["--config",
                                                             os.path.join(root, "configs",
                                                                          "example.toml")]))
    assert "measured_chat" in cfg.quality_modes and "code_and_chat" in cfg.quality_modes


def test_unreadable_inputs_and_unwritable_out_are_one_line_exit_2(tmp_path, capsys):
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b"\xff\xfe\x00\x01")
    cases = [(["--config", str(tmp_path)], "--config", "is a folder"),
             (["--config", str(binary)], "--config", "not UTF-8"),
             (["--scenario", str(tmp_path)], "--scenario", "is a folder"),
             (["--scenario", str(binary)], "--scenario", "not UTF-8"),
             (["--out", "/dev/null/x"], "--out", "cannot create or write"),
             (["--out", ""], "--out", "must name a folder")]
    for argv, field, text in cases:
        out_args = [] if "--out" in argv else ["--out", str(tmp_path / "out")]
        assert run.main(argv + out_args + ["--quiet"]) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(f"error: {field}: ") and text in err, err
        assert not (tmp_path / "out").exists()


def test_batch_size_the_hardware_scenario_cannot_hold_names_the_option(tmp_path, capsys):
    assert run.main(["--batch-sizes", "1,256", "--out", str(tmp_path / "o"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --batch-sizes: ") and "--scenario reference" in err


def test_a_config_draft_cost_that_a_scenario_file_would_ignore_is_refused(tmp_path, capsys):
    config = tmp_path / "c.toml"
    config.write_text("draft_cost = 0.05\n")
    out = tmp_path / "out"
    scenario = os.path.join(os.path.dirname(os.path.dirname(__file__)), "configs", "scenarios",
                            "h100-llama8b-1b.toml")
    assert run.main(["--scenario", scenario, "--config", str(config),
                     "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: --config {config}: draft_cost is not "
                                                   "used")
    assert not out.exists()


# -- --engine-profiles: pick the scenario's engine profiles (issue 26) ----------------------------

CHAIN_SCENARIO = "configs/scenarios/h100-llama8b-1b.toml"  # engine_profiles = ["ideal", "vllm-v1"]


def test_engine_profiles_drops_a_chains_only_engine_so_trees_run(tmp_path):
    from src.cli import parse
    out = ["--out", str(tmp_path / "out")]
    plan = parse(["--scenario", CHAIN_SCENARIO, "--trees", "3:2:6", "--engine-profiles", "ideal",
                  *out])
    assert plan.scenario.engine_profiles == ("ideal",)
    assert [t.label for t in plan.scenario.study.trees if not t.is_chain] == ["3:2:6"]
    plan = parse(["--scenario", CHAIN_SCENARIO, "--engine-profiles", "vllm-v1,ideal", *out])
    assert plan.scenario.engine_profiles == ("vllm-v1", "ideal")  # the order given: first default


def test_trees_refusal_names_engine_profiles():
    from tests.helpers import run_captured
    done = run_captured(["--scenario", CHAIN_SCENARIO, "--trees", "3:2:6", "--out", "/nonexistent"])
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "vllm-v1 verifies chains only" in done.stderr
    assert done.stderr.rstrip().endswith("--engine-profiles ideal,sglang")


@pytest.mark.parametrize("argv,needle", [
    (["--scenario", CHAIN_SCENARIO, "--engine-profiles", "sglang-spec-v2"],
     "'sglang-spec-v2' is not an engine profile of scenario h100-llama8b-1b; allowed: ideal, "
     "vllm-v1, sglang, trtllm"),
    (["--scenario", CHAIN_SCENARIO, "--engine-profiles", "ideal,ideal"], "listed twice"),
    (["--scenario", CHAIN_SCENARIO, "--engine-profiles", "ideal,"], "empty item"),
    (["--scenario", "reference", "--engine-profiles", "ideal"], "has no engine profiles"),
])
def test_engine_profiles_refusals_are_one_line(argv, needle, tmp_path):
    from tests.helpers import run_captured
    done = run_captured([*argv, "--out", str(tmp_path / "out")])
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("error: --engine-profiles: ") and needle in done.stderr
    assert not (tmp_path / "out").exists()
