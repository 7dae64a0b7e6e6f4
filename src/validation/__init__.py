"""Validation of the cost model and the serving simulator against measured deployments."""
