"""The study on real hardware: a deployment scenario run under the hardware cost model.

    scenario.py          a deployment (GPU, target, draft, TP, engine profiles) and its study grid
    study.py             run a scenario: simulated grid per engine profile, steady-state sweeps
    steady_state.py      closed-form step times and speedups; a step's overhead by mechanism
    schedules.py         best gamma per batch, crossover batch sizes, vLLM gamma schedules
    report.py            the scenario's part of summary.txt
    plots.py             the scenario's plots
    published_checks.py  the model against published measurements (MagicDec, vLLM blog)
    validation.py        predicted vs measured step times on every data set (design.md,
                         "Validation")
"""
