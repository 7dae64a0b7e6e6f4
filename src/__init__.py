"""batched-speculative-decoding-bench: a simulator of speculative decoding at batch size > 1."""
