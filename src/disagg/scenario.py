"""A scenario file with a `[disagg]` table: the deployment's aggregated twin and its pools.

The [scenario] and [study] tables are read by src/hardware/scenario.py as for any scenario
(its tp and ep are the aggregated replica the disaggregated one is compared with); the
[disagg] table is taken off first and validated by src/disagg/config.py against the same
target (with the scenario's weight formats) and GPU. Errors: ConfigError naming disagg.FIELD.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping

from src.config import ConfigError, read_toml
from src.disagg.config import DisaggConfig, disagg_from_table


def disagg_scenario_from_dict(data: Mapping[str, Any], source_path: str | None = None):
    """(Scenario, DisaggConfig) of a parsed scenario document with a [disagg] table."""
    from src.hardware.scenario import scenario_from_dict
    if not isinstance(data, Mapping) or "disagg" not in data:
        raise ConfigError("disagg", "missing [disagg] table (prefill_workers, prefill_tp, "
                                    "prefill_ep, prefill_dp, decode_workers, decode_tp, "
                                    "decode_ep, decode_dp, kv_link)")
    rest = {k: v for k, v in data.items() if k != "disagg"}
    scenario = scenario_from_dict(rest, source_path)
    return scenario, disagg_of(data["disagg"], scenario)


def disagg_of(table: Any, scenario) -> DisaggConfig:
    """The [disagg] table validated against the scenario's target (with its weight formats)
    and GPU."""
    from src.costmodel import load_presets
    presets = load_presets(scenario.preset_paths)
    target = replace(presets.model(scenario.target_model_id, "target"),
                     **scenario.target_formats())
    return disagg_from_table(table, target, presets.gpu(scenario.gpu_id), presets.params)


def load_disagg_scenario(path: str | Path) -> tuple[Any, DisaggConfig]:
    path = Path(path)
    return disagg_scenario_from_dict(read_toml(path, "--scenario"), source_path=str(path))
