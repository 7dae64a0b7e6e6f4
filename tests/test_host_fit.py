"""The engine host fit (src/validation/host_fit.py, host_eval.py): it reads only h100_sxm rows,
its fast evaluation equals the serving prediction, its file's values are the profiles' values,
and the file names its source."""
import math

import pytest

from src.validation import host_fit
from src.validation.silicon_rows import SiliconCase


def _case(system, row_id, tpot=10.0, concurrency=1):
    return SiliconCase(row_id=row_id, system=system, backend="vllm", gpu="h100-sxm",
                       model="m", engine="vllm-v1", tp=1, ep=1, weight_format="fp8",
                       expert_weight_format="", isl=1, osl=2, concurrency=concurrency,
                       measured_tpot_ms=tpot, measured_ttft_ms=1.0)


def test_a_planted_h200_row_never_reaches_the_fit():
    cases = [_case("h100_sxm", "a", 3.0, 8), _case("h200_sxm", "planted", 1e6, 8),
             _case("gb200", "planted2", 1e-6, 8), _case("h100_sxm", "d", 5.0, 48)]
    seen = []

    def fake_predict(case, terms):  # an exposed host cost: TPOT = 1 + a + b C
        seen.append(case.row_id)
        return {"tpot_ms": 1.0 + terms["step_cpu_fixed_ms"]
                + terms["step_cpu_per_seq_ms"] * case.concurrency, "ttft_ms": 1.0}

    fit = host_fit.fit_engine(cases, {"step_cpu_fixed_ms": 0.97, "step_cpu_per_seq_ms": 0.04},
                              fake_predict)
    assert not {"planted", "planted2"} & set(seen)
    # 1 + a + 8 b = 3 and 1 + a + 48 b = 5: a = 1.6, b = 0.05, both rows exact
    assert fit["step_cpu_fixed_ms"] == pytest.approx(1.6, abs=1e-3)
    assert fit["step_cpu_per_seq_ms"] == pytest.approx(0.05, abs=1e-4)
    assert fit["rows"] == 2 and fit["row_ids"] == ["a", "d"] and fit["objective_value"] < 1e-8
    assert host_fit.fit_engine([_case("h200_sxm", "b")], {}, fake_predict) == {}


def test_the_fit_keeps_its_terms_non_negative():
    def fake_predict(case, terms):  # the best fixed term would be -2
        return {"tpot_ms": case.measured_tpot_ms * math.exp(terms["step_cpu_fixed_ms"] + 2.0),
                "ttft_ms": 1.0}
    fit = host_fit.fit_engine([_case("h100_sxm", "a")],
                              {"step_cpu_fixed_ms": 1.0, "step_cpu_per_seq_ms": 0.0}, fake_predict)
    assert fit["step_cpu_fixed_ms"] == pytest.approx(0.0, abs=1e-6)
    assert fit["step_cpu_per_seq_ms"] >= 0.0


def test_the_fit_file_names_its_source_and_round_trips(tmp_path):
    path = tmp_path / "fits.toml"
    record = {"step_cpu_fixed_ms": 1.5, "step_cpu_per_seq_ms": 0.01, "cpu_overlap_decode": False,
              "rows": 3, "source": host_fit.SOURCE.format(n=3), "row_ids": ["a", "b", "c"]}
    host_fit.write_fits({"vllm-v1": record}, path)
    text = path.read_text()
    assert ("# source: fitted to 3 h100_sxm rows of aiconfigurator-core 0.12.0 "
            "silicon_sample.csv by `python run.py silicon-validate --refit`") in text
    assert host_fit.read_fits(path) == {"vllm-v1": {"step_cpu_fixed_ms": 1.5,
                                                    "step_cpu_per_seq_ms": 0.01,
                                                    "cpu_overlap_decode": False}}


def test_fitted_values_land_in_the_profile_the_cost_model_uses(tmp_path):
    from src.costmodel import load_engine_profiles
    from src.hardware.scenario import default_hardware_scenario
    path = tmp_path / "fits.toml"
    host_fit.write_fits({"sglang": {"step_cpu_fixed_ms": 2.25, "step_cpu_per_seq_ms": 0.0125,
                                    "cpu_overlap_decode": False}}, path)
    profile = load_engine_profiles(extra_paths=[path])["sglang"]
    assert (profile.step_cpu_fixed_ms, profile.step_cpu_per_seq_ms,
            profile.cpu_overlap_decode) == (2.25, 0.0125, False)
    unfitted = load_engine_profiles()["sglang"]
    assert profile.draft_pass_cpu_fixed_ms == unfitted.draft_pass_cpu_fixed_ms
    # the committed file is merged by default: every engine it fits prices with its values
    committed = host_fit.read_fits()
    base = default_hardware_scenario()
    for engine, terms in committed.items():
        used = base.cost_model(engine).engine
        assert {k: getattr(used, k) for k in terms} == terms


def test_the_committed_fit_file_names_its_rows():
    if not host_fit.HOST_FITS_PATH.exists():
        pytest.skip("no host fit committed")
    text = host_fit.HOST_FITS_PATH.read_text()
    for block in text.split("[engines.")[1:]:
        rows = int(block.split("# rows: ")[1].split()[0])
        assert (f"# source: fitted to {rows} h100_sxm rows of aiconfigurator-core 0.12.0 "
                "silicon_sample.csv by `python run.py silicon-validate --refit`") in block


def test_the_prepared_run_equals_the_serving_prediction():
    from src.validation.host_eval import PreparedCase
    from src.validation.silicon_serve import predict
    case = SiliconCase(row_id="t", system="h100_sxm", backend="vllm", gpu="h100-sxm",
                       model="meta-llama/Llama-3.1-70B", engine="vllm-v1", tp=4, ep=1,
                       weight_format="fp8", expert_weight_format="", isl=128, osl=32,
                       concurrency=4, measured_tpot_ms=10.0, measured_ttft_ms=50.0)
    run = PreparedCase(case)
    for terms in (None, {"step_cpu_fixed_ms": 3.0, "step_cpu_per_seq_ms": 0.5,
                         "cpu_overlap_decode": False}):
        assert run.predict(terms) == predict(case, terms)


def test_a_fit_not_adopted_is_recorded_but_not_merged(tmp_path):
    from src.costmodel import load_engine_profiles
    path = tmp_path / "fits.toml"
    host_fit.write_fits({"trtllm": {"step_cpu_fixed_ms": 5.0, "step_cpu_per_seq_ms": 0.2,
                                    "rows": 3, "source": host_fit.SOURCE.format(n=3)}}, path,
                        not_adopted={"trtllm": "worse on the held-out rows"})
    assert host_fit.read_fits(path) == {}
    assert "# not adopted: worse on the held-out rows" in path.read_text()
    assert host_fit.not_adopted_of(path) == {"trtllm": "worse on the held-out rows"}
    merged = load_engine_profiles(extra_paths=[path])["trtllm"]
    assert merged == load_engine_profiles()["trtllm"]
