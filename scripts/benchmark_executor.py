"""How many tasks per second a Dask LocalCluster's scheduler sustains (src/executor.py): trivial
tasks, so the figure is the scheduler's and the transport's cost per task, not the work's.

    python scripts/benchmark_executor.py [N_WORKERS] [N_TASKS]
"""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from src.executor import open_executor  # noqa: E402


def square(x):
    return x * x


if __name__ == "__main__":
    workers = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
    start = time.perf_counter()
    with open_executor(f"local:{workers}") as ex:
        print(f"LocalCluster of {workers} workers up in {time.perf_counter() - start:.1f} s")
        ex.map(square, [(i,) for i in range(50)])  # warm up
        t = time.perf_counter()
        assert ex.map(square, [(i,) for i in range(n)]) == [i * i for i in range(n)]
        wall = time.perf_counter() - t
    print(f"{n} trivial tasks in {wall:.2f} s: {n / wall:.0f} tasks/s")
