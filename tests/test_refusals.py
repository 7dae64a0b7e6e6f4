"""Inputs that once took the machine down, ran silently wrong or failed late (issue 19, part 3):
each is refused (or reported) in one line naming the option or key, exit code 2, nothing written,
before anything is simulated or allocated."""
import pytest
from helpers import run_captured, run_cases

SCENARIO = ('[scenario]\nname = "s"\ngpu = "h100-sxm"\ntarget = "llama-3.1-8b"\n'
            'draft = "llama-3.2-1b"\n')


def refused(argv, tmp_path, field: str, *needles: str) -> str:
    """Run argv (with --out under tmp_path); assert one line 'error: FIELD: ...' holding every
    needle, exit 2 and no output folder. Returns the line."""
    out = tmp_path / "out"
    done = run_captured([*argv, "--out", str(out)])
    err = done.stderr
    assert done.returncode == 2, err
    assert err.count("\n") == 1 and err.startswith(f"error: {field}: "), err
    for needle in needles:
        assert needle in err, err
    assert not out.exists()
    return err


def scenario_file(tmp_path, extra: str = "", scenario_extra: str = "") -> str:
    path = tmp_path / "s.toml"
    path.write_text(SCENARIO + scenario_extra + extra)
    return str(path)


# -- work bounded before allocation (src/online/config.py MAX_REQUESTS_PER_REPLICATION, ...) ------

BOUNDS = [
    (["--rates", "1", "--duration-s", "1e9"], "--duration-s",
     ("about 1e+09 requests a replication", "at most 1000000", "up to 1e+06 s at 1/s")),
    (["--rates", "1e9", "--duration-s", "20"], "--duration-s",
     ("about 2e+10 requests a replication", "up to 0.001 s at 1e+09/s")),
    (["--requests", "1000000", "--replications", "10000"], "--requests",
     ("5e+10 requests simulated together", "at most 1e+07", "up to 200 requests")),
    (["--rates", "64", "--duration-s", "5000", "--replications", "40"], "--duration-s",
     ("requests simulated together", "up to 577 s at 64/s")),
]


def test_serve_work_is_bounded_before_allocation(tmp_path):
    """Once OOM-killed (1e9 s) or a traceback ('Unable to allocate 194 GiB'): run in a child with
    a memory limit (helpers.run_cases), so a regression cannot take the machine down."""
    path = scenario_file(tmp_path, "[serving]\nrates = [1e9]\nduration_s = 20\n")
    cases = [(["serve", *argv, "--quiet", "--out", str(tmp_path / "out")], field, needles)
             for argv, field, needles in BOUNDS]
    cases.append((["serve", "--scenario", path, "--quiet", "--out", str(tmp_path / "out")],
                  "serving.duration_s", ("about 2e+10 requests a replication",)))
    results = run_cases([argv for argv, _, _ in cases])
    for argv, field, needles in cases:
        code, err = results[tuple(argv)]
        assert code == 2 and err.count("\n") == 1 and err.startswith(f"error: {field}: "), err
        assert all(n in err for n in needles), err
    assert not (tmp_path / "out").exists()


# -- one line, exit 2, nothing written ------------------------------------------------------------

def test_a_schedule_gamma_above_max_gamma_is_refused_not_run_clamped(tmp_path):
    refused(["serve", "--schedule", "[[1,15,12],[16,1024,0]]"], tmp_path, "--schedule",
            "gamma 12 exceeds --max-gamma 8")
    refused(["serve", "--schedule", "[[1,15,3],[16,1024,0]]", "--max-gamma", "2"], tmp_path,
            "--schedule", "gamma 3 exceeds --max-gamma 2", "or a larger --max-gamma")


@pytest.mark.parametrize("scenario_extra,field,needle", [
    ('engine_profiles = ["vllm-v1", "ideal", "vllm-v1"]\n', "scenario.engine_profiles",
     "'vllm-v1' is listed twice"),
    ("", "scenario.draft", "qwen2.5-0.5b has a 151936-token vocabulary, llama-3.1-8b 128256"),
], ids=["duplicate-engine-profile", "vocabularies-differ"])
def test_scenario_mistakes_are_refused_by_the_study_and_serve(tmp_path, scenario_extra, field,
                                                              needle):
    path = scenario_file(tmp_path, scenario_extra=scenario_extra)
    if "vocabulary" in needle:
        (tmp_path / "s.toml").write_text(SCENARIO.replace("llama-3.2-1b", "qwen2.5-0.5b"))
    for argv in (["--scenario", path, "--quiet"], ["serve", "--scenario", path, "--quiet"]):
        refused(argv, tmp_path, f"--scenario {path}", f"{field}: {needle}")


def test_the_vocabulary_check_is_recommends_too(tmp_path):
    done = run_captured(["recommend", "--gpu", "h100-sxm", "--target", "llama-3.1-8b", "--draft",
                         "qwen2.5-0.5b", "--acceptance", "0.7"])
    assert done.returncode == 2 and done.stderr.startswith("error: --draft: qwen2.5-0.5b has a "
                                                           "151936-token vocabulary"), done.stderr


@pytest.mark.parametrize("serving,field,needle", [
    ("ratez = [1, 2]\n", "serving.ratez", "unknown key; allowed: engine_profile, rates"),
    ("requests = 100.0\n", "serving.requests", "expected an integer, got 100.0"),
    ('rates = "1,2"\n', "serving.rates", "expected a TOML list"),
], ids=["unknown-key", "float-count", "string-rates"])
def test_a_bad_serving_table_is_refused_by_the_study_too(tmp_path, serving, field, needle):
    path = scenario_file(tmp_path, "[serving]\n" + serving)
    refused(["--scenario", path, "--quiet"], tmp_path, f"--scenario {path}", f"{field}: {needle}")
    refused(["serve", "--scenario", path, "--quiet"], tmp_path, field, needle)  # serve's own


@pytest.mark.parametrize("config,field,needle", [
    ('batch_sizes = "1,2"\n', "batch_sizes", 'expected a TOML list, e.g. batch_sizes = [1, 2], '
                                             "got '1,2'"),
    ('quality_modes = "bimodal"\n', "quality_modes", "expected a TOML list"),
    ("gammas = [1, 2.0]\n", "gammas", "expected a list of integers, got 2.0"),
    ("seed = 1.0\n", "seed", "expected an integer, got 1.0"),
    ("[output_len]\nkind = \"fixed\"\ntokens = 64.0\n", "output_len.tokens",
     "expected an integer, got 64.0"),
    ("[alpha_modes.mine]\nkind = \"mixture\"\nweights = [0.3, 0.3]\ncomponents = ["
     "{kind = \"point\", value = 0.5}, {kind = \"point\", value = 0.7}]\n",
     "alpha_modes.mine.weights", "weights [0.3, 0.3] sum to 0.6; allowed: weights that sum to 1"),
], ids=["string-list", "string-names", "float-in-int-list", "float-seed", "float-tokens",
        "weights-not-summing-to-1"])
def test_toml_values_are_type_checked_not_parsed_as_text(tmp_path, config, field, needle):
    path = tmp_path / "c.toml"
    path.write_text(config)
    refused(["--config", str(path), "--scenario", "reference", "--quiet"], tmp_path,
            f"--config {path}", f"{field}: {needle}")
    table = config.replace("[output_len]", "[study.output_len]").replace("[alpha_modes.",
                                                                         "[study.alpha_modes.")
    study = scenario_file(tmp_path, "[study]\n" + table)
    refused(["--scenario", study, "--quiet"], tmp_path, f"--scenario {study}",
            f"study.{field}: {needle}")


def test_mixture_weights_that_sum_to_1_within_the_tolerance_are_kept():
    from src.config import parse_alpha_distribution
    third = {"kind": "point", "value": 0.5}
    d = parse_alpha_distribution("m", {"kind": "mixture", "weights": [0.3333333, 0.3333333,
                                                                      0.3333334],
                                       "components": [third, third, third]})
    assert sum(d.weights) == pytest.approx(1.0)


def test_unsorted_trace_arrivals_are_refused(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,100,20\n2,100,20\n1,100,20\n")
    refused(["serve", "--trace", str(trace), "--quiet"], tmp_path, "--trace",
            "line 4: arrival_s 1 comes before line 3's 2; allowed: rows sorted by arrival_s")


def test_a_preset_whose_step_times_overflow_is_refused(tmp_path):
    preset = tmp_path / "p.toml"
    preset.write_text('[gpus."tiny"]\nname = "tiny"\ndense_bf16_tflops = 1e-300\n'
                      "memory_bandwidth_gb_per_s = 1e-300\nmemory_gb = 80.0\n"
                      'interconnect_bidirectional_gb_per_s = 600.0\ninterconnect = "x"\n'
                      'source = "x"\nsm_count = 108\n')
    done = run_captured(["step-time", "--presets", str(preset), "--gpu", "tiny", "--model",
                         "llama-3.1-8b"])
    assert done.returncode == 2 and done.stdout == "", done.stdout
    assert done.stderr.count("\n") == 1 and done.stderr.startswith(
        "error: --presets: tiny with llama-3.1-8b gives a step time of nan ms"), done.stderr
    path = scenario_file(tmp_path, scenario_extra=f'presets = ["{preset}"]\n')
    (tmp_path / "s.toml").write_text((tmp_path / "s.toml").read_text().replace('"h100-sxm"',
                                                                               '"tiny"'))
    refused(["--scenario", path, "--quiet"], tmp_path, f"--scenario {path}",
            "scenario.presets: tiny with llama-3.1-8b gives step times of nan")


def test_an_out_name_the_file_system_cannot_hold_is_refused_before_simulating(tmp_path):
    for argv in (["--scenario", "reference", "--quiet"], ["serve", "--quiet"]):
        done = run_captured([*argv, "--out", str(tmp_path / ("x" * 300))])
        assert done.returncode == 2 and done.stderr == (
            "error: --out: the folder name 'xxxxxxxxxxxxxxxxxxxxxxxx...' is 300 bytes long; "
            "allowed: at most 255 bytes a name (the file system's limit)\n")


# -- reported -------------------------------------------------------------------------------------

def test_two_requests_days_apart_are_not_called_a_steady_state(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,100,50\n1e12,100,50\n")
    out = tmp_path / "out"
    done = run_captured(["serve", "--trace", str(trace), "--policies", "none,fixed:3",
                         "--no-plots", "--quiet", "--out", str(out)])
    assert done.returncode == 0, done.stderr
    summary = (out / "results" / "summary.txt").read_text()
    line = next(x for x in summary.splitlines() if x.startswith("Steady state:"))
    assert "not steady (marked *): 1e-12/s (every policy) (fewer than 20 requests a replication " \
           "are not one at any window)" in line, line


def test_recommend_says_which_rates_are_bursts_as_serve_does():
    done = run_captured(["recommend", "--gpu", "h100-sxm", "--target", "llama-3.1-8b", "--draft",
                         "llama-3.2-1b", "--acceptance", "0.8", "--rate", "1e6",
                         "--requests", "40"])
    assert done.returncode == 0, done.stderr
    assert ("Bursts, not steady states, at 1e+06/s (arrival window < 20x mean E2E, as serve marks "
            "them)") in done.stdout, done.stdout
