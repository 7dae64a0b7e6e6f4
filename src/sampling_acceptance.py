"""Which acceptance a run at sampling temperature T > 0 may use.

The built-in quality modes, the scenarios' alpha modes and the presets' figures are measured or
assumed at temperature 0 (greedy). Acceptance falls with temperature - vLLM issue #31483 reports
~80% at T = 0 and ~30% at T = 1 - so at T > 0 a run takes acceptance only from the user's input
at that temperature: a mean (--alpha, --acceptance), a per-position list or engine metrics
(--acceptance-from-vllm, --acceptance-length, --acceptance-trace, a trace's alpha column), or a
file that states the temperature beside its own alpha modes (a --config or scenario file whose
[study] table sets both `temperature` and `alpha_modes`). Anything else is refused with one line
naming --temperature and what to give; the greedy figure is never reused silently.
"""
from __future__ import annotations

from src.config import ConfigError
from src.costmodel.sampling import TEMPERATURE_RANGE
from src.errors import ascii_float

ISSUE = "acceptance falls with temperature: ~80% at T=0, ~30% at T=1 in vLLM issue #31483"


def refusal(temperature: float, give: str) -> ConfigError:
    """The one-line refusal of a run at `temperature` > 0 without acceptance measured there."""
    return ConfigError("--temperature", f"{temperature:g} needs acceptance measured at that "
                                        f"temperature: give {give}; the default and preset "
                                        f"acceptance figures are greedy (temperature 0) and "
                                        f"{ISSUE}")


STUDY_SOURCES = ("--alpha, --acceptance-from-vllm, --acceptance-length with --gamma-measured, "
                 "--acceptance-trace, or alpha_modes beside temperature in the --config or "
                 "scenario file")
SERVE_SOURCES = ("--alpha (or serving.alpha), a --trace with an alpha column, or a scenario "
                 "file whose [study] table sets temperature beside its alpha_modes")


def parse_temperature(flag: str, value) -> float:
    """A temperature in TEMPERATURE_RANGE (0..2), else ConfigError naming `flag`; read by
    ascii_float, the project's number reader (float() alone takes other scripts' digits)."""
    low, high = TEMPERATURE_RANGE
    try:
        t = ascii_float(str(value))
    except ValueError:
        t = float("nan")
    if not low <= t <= high:  # NaN fails too
        raise ConfigError(flag, f"must be in {low:g}..{high:g}, got {value}")
    return t


def file_states_temperature(table: dict, temperature: float) -> bool:
    """Whether a TOML file's [study] table (or a --config file's top level) sets its own alpha
    modes and `temperature` equal to the one run: the file's author gives acceptance at that T."""
    study = table.get("study", table)
    if not (isinstance(study, dict) and "alpha_modes" in study):
        return False
    try:
        return float(study.get("temperature", "nan")) == temperature
    except (TypeError, ValueError):
        return False


def check_study(temperature: float, user_acceptance: bool) -> None:
    """ConfigError unless T = 0 or the study's acceptance is the user's at T."""
    if temperature > 0 and not user_acceptance:
        raise refusal(temperature, STUDY_SOURCES)


def check_serve(temperature: float, user_acceptance: bool) -> None:
    """ConfigError unless T = 0 or serve's acceptance is the user's at T."""
    if temperature > 0 and not user_acceptance:
        raise refusal(temperature, SERVE_SOURCES)


def serve_scenario(option, path: str | None, scenario, user_acceptance: bool):
    """serve's scenario at --temperature `option` (None: the scenario's [study] temperature),
    refused at T > 0 unless the acceptance is the user's at T: user_acceptance, or the scenario
    file `path` states its alpha modes' temperature and that is the one run."""
    from dataclasses import replace

    from src.config import load_toml
    temperature = scenario.study.temperature
    if option is not None:
        temperature = parse_temperature("--temperature", option)
    same = temperature == scenario.study.temperature
    stated = path is not None and file_states_temperature(load_toml(path), temperature)
    check_serve(temperature, user_acceptance or stated)
    if same:
        return scenario
    return replace(scenario, study=replace(scenario.study, temperature=temperature))
