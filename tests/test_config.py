"""src/config.py: the per_position quality-mode kind, parsed and validated at the edge."""
import pytest

from src.config import ConfigError, PerPositionAlpha, StudyConfig, build_config


def modes(spec: dict) -> StudyConfig:
    return build_config({"alpha_modes": {"pp": spec}}, StudyConfig())


def test_per_position_mode_is_parsed_with_its_spread():
    cfg = modes({"kind": "per_position", "rates": [0.8, 0.7, 1.0], "spread": 0.2})
    assert cfg.alpha_modes["pp"] == PerPositionAlpha((0.8, 0.7, 1.0), 0.2)
    assert cfg.quality_modes[-1] == "pp"
    cfg = modes({"kind": "per_position", "rates": [0.8], "scales": [0.5, 2]})
    assert cfg.alpha_modes["pp"].scales == (0.5, 2.0)


@pytest.mark.parametrize("spec,needle", [
    ({"kind": "per_position", "rates": [0.8, 0.0]},
     "alpha_modes.pp.rates[1]: acceptance rates must lie in (0, 1]"),
    ({"kind": "per_position", "rates": [1.2]},
     "rates[0]: acceptance rates must lie in (0, 1], got 1.2"),
    ({"kind": "per_position", "rates": [1.0, 1.0]}, "at least one rate must be below 1"),
    ({"kind": "per_position", "rates": []}, "alpha_modes.pp.rates: expected a list of 1..64"),
    ({"kind": "per_position", "rates": [0.5], "spread": -1}, "alpha_modes.pp.spread: sigma"),
    ({"kind": "per_position", "rates": [0.5], "spread": 0.1, "scales": [1]},
     "either spread or scales"),
    ({"kind": "per_position", "rates": [0.5], "scales": [1, 0]},
     "every per-request scale must be > 0"),
    ({"kind": "per_position", "rates": [0.5], "compare_with": "nope"},
     "compare_with: unknown mode 'nope'"),
    ({"kind": "per_position", "rate": [0.5]}, "alpha_modes.pp.rate: unknown key"),
    ({"kind": "mixture", "weights": [1], "components": [{"kind": "per_position", "rates": [0.5]}]},
     "per_position cannot be a mixture component"),
])
def test_bad_per_position_modes_name_the_key(spec, needle):
    with pytest.raises(ConfigError) as e:
        modes(spec)
    assert needle in str(e.value) and "\n" not in str(e.value)
