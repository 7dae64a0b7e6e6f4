"""Serving under load: an open-loop, continuous-batching engine simulator (`python run.py serve`)
and the deployment advice built on it (`python run.py recommend`).
design.md, "Serving under load"."""
