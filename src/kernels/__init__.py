"""Measured kernel times from NVIDIA AIConfigurator's database (PyPI aiconfigurator-core 0.12.0).

sources.py names the tables (GPU preset -> system, engine profile -> backend and version) without
importing pyarrow; tables.py decodes them (pyarrow, imported on first use, cached per process);
grid.py interpolates on their grids; physics.py flags rows that break physics; pricing.py prices
a pass's GEMMs and decode attention from them (design.md, "Measured kernels").
pass_gemms.py prices a pass's GEMMs vectorised over its row count (step-time and the cost model's
table share it); costmodel.py is `--kernels` for the commands that build cost models from a
scenario. Only sources.py and costmodel.py are imported at start-up (neither reads a table);
the rest is imported when a pass is priced from measured rows.
"""
