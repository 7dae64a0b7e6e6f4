"""Measured kernel times from NVIDIA AIConfigurator's database (PyPI aiconfigurator-core 0.12.0).

sources.py names the tables (GPU preset -> system, engine profile -> backend and version) without
importing pyarrow; tables.py decodes them (pyarrow, imported on first use, cached per process);
grid.py interpolates on their grids; physics.py flags rows that break physics; pricing.py prices
a pass's GEMMs and decode attention from them (design.md, "Measured kernels").
Nothing here is imported at start-up: only `step-time` uses it, and only when it prices from
measured rows.
"""
