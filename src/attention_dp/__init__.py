"""Attention data parallelism: the shape rules and step pricing the aggregated replica
(`attention_dp`) and the disaggregated decode pool (`[disagg]` decode_dp) share."""
