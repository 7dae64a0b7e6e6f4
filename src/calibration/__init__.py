"""Calibration: fit the hardware cost model to a GPU's own measured step times.

    measurements.py  the project's measurement format (CSV) and its checks
    fit.py           the fit: GPU efficiencies, attention kernels, launch costs
    command.py       `python run.py calibrate`
    shipped.py       the shipped H200 preset: the repository's measurements it is fitted to

The check of the fitted model on every data set is src/hardware/validation.py: it runs the
hardware study's scenarios, and src/hardware/ stands above this package (its report quotes
shipped.py).
"""
