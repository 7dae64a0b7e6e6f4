"""Calibration: fit the hardware cost model to a GPU's own measured step times.

    measurements.py  the project's measurement format (CSV) and its checks
    fit.py           the fit: GPU efficiencies, attention kernels, launch costs
    command.py       `python run.py calibrate`
"""
