"""Calibration: fit the hardware cost model to a GPU's own measured step times.

    measurements.py  the project's measurement format (CSV) and its checks
    fit.py           the fit: GPU efficiencies, attention kernels, launch costs
    command.py       `python run.py calibrate`
    shipped.py       the shipped H200 preset: the repository's measurements it is fitted to
    validation.py    predicted vs measured on every data set (design.md, "Validation")
"""
