"""One SiliconCase's greedy serving run prepared once, re-run at other engine host terms.

silicon_serve.predict builds the deployment (cost model, physics tables of every pass, measured
kernels) for each call: ~0.5-1.3 s a row on 2 cores, nearly all of it independent of the host
terms. The host fit (host_fit.py) evaluates each row at tens of host-term points, so it prepares
each row once (src/online/study.py prepare, the function run_serving calls) and for each point
swaps the EngineProfile the deployments' cost models and step timers read (the only objects that
read step_cpu_* fields: src/costmodel/hardware.py _target_parts, src/online/steptime.py, and the
compiled engine's price pack, src/online/step_prices.py pack_prices), then re-runs the
simulation only. The physics tables cached on each cost model do not depend on the host terms,
so a point's figures equal silicon_serve.predict's at the same terms
(tests/test_host_fit.py checks it).
"""
from __future__ import annotations

from dataclasses import replace

from src.validation.silicon_rows import SiliconCase


class PreparedCase:
    """predict(terms) == silicon_serve.predict(case, terms), the deployment built once."""

    def __init__(self, case: SiliconCase):
        from src.online.study import compile_engine_once, prepare
        from src.validation.silicon_serve import serve_config
        self.case = case
        self.cfg = serve_config(case, None)
        self.prepared = prepare(self.cfg)
        compile_engine_once(self.cfg, self.prepared)
        self.base = {id(d): d.timer.engine for d in self.prepared.deployments}

    def predict(self, terms: dict | None) -> dict:
        """{"tpot_ms", "ttft_ms"} of the greedy run with these EngineProfile fields replaced."""
        from src.online.study import _rate_rows
        for dep in self.prepared.deployments:
            engine = replace(self.base[id(dep)], **(terms or {}))
            dep.timer.engine = engine
            # HardwareCostModel is frozen (its inputs are validated once); the swap keeps every
            # validated input but the host terms (the fit keeps them >= 0, as the loader requires)
            object.__setattr__(dep.timer.cost, "engine", engine)
        rows, _ = _rate_rows(self.cfg, self.prepared, float(self.case.concurrency))
        row = next(r for r in rows if r["policy"] == "none")
        return {"tpot_ms": float(row["tpot_mean_ms"]), "ttft_ms": float(row["ttft_mean_ms"])}


def prepare_cases(cases: list[SiliconCase], say=lambda m: None):
    """({case key: PreparedCase}, {case key: refusal}) of the distinct deployments among cases
    (rows measured more than once share one run; the key leaves out the row id and measurement)."""
    from src.config import ConfigError
    from src.costmodel import CostModelInputError
    runs, refused = {}, {}
    for i, c in enumerate(cases):
        k = case_key(c)
        if k in runs or k in refused:
            continue
        try:
            runs[k] = PreparedCase(c)
        except (ConfigError, CostModelInputError) as e:
            refused[k] = str(e).splitlines()[0][:160]
        if (i + 1) % 50 == 0:
            say(f"  prepared {i + 1}/{len(cases)} rows")
    return runs, refused


def case_key(c: SiliconCase) -> tuple:
    """What a run depends on: the deployment and the workload, not the row id or the measurement."""
    return (c.gpu, c.model, c.engine, c.tp, c.ep, c.weight_format, c.expert_weight_format, c.isl,
            c.osl, c.concurrency)
