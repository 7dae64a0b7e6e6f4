"""`python run.py measure`: time real forward steps of a preset's architecture on this GPU.

plan.py     which configurations to time, their memory need and a planning estimate (no torch)
model.py    the Llama-shaped step with random BF16 weights and a preallocated KV cache (torch)
timing.py   warm-up, CUDA-graph capture and CUDA-event timing of one step (torch)
machine.py  the environment a measurement came from: GPU, versions, clocks, copy/matmul rates
cli.py      the command line: validation, the measuring loop, progress, atomic CSV/JSON output

Only plan.py and cli.py are imported before torch is known to be present, so a bad command line
gets its one-line error on any machine and the package never needs the plotting libraries.
"""
