"""Disaggregated prefill/decode serving: pools, KV transfer, the decode pool's steps (issue 25)."""
