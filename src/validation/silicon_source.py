"""Which benchmark measured an aggregated row of silicon_sample.csv, and what its timed run sent.

The csv's `silicon_data_source` names where each row came from (its text up to the first ';').

InferenceX single-node runs (`INFERENCEX_SOURCES`):
  * `db-dump/2026-04-27; config_id=..; workflow_run_id=..; <image>`: a row of InferenceX's public
    PostgreSQL dump, released as SemiAnalysisAI/InferenceX-app's `db-dump/YYYY-MM-DD` tags with
    the tables configs, workflow_runs and benchmark_results (ai-dynamo/aisimulate
    scripts/e2e_accuracy/fetch_accuracy_measurements.py at 7bf44ce: RELEASE_ROOT, TABLES).
  * `source_file=2026-03-25.csv` and `source_file=2026-04-06.csv`: the same database's exports;
    their models (DeepSeek-R1, GPT-OSS-120B, Llama-3.1-70B, ...), lengths (1k/1k, 1k/8k, 8k/1k)
    and images (e.g. `nvcr.io#nvidia/tensorrt-llm/release:gpt-oss-dev`, InferenceX's
    .github/configs/nvidia-master.yaml at 235b232) are InferenceX's, and 275 of their
    (TTFT, TPOT) pairs repeat a db-dump row's float for float.
  What they ran: InferenceX's benchmarks/benchmark_lib.sh run_benchmark_serving (235b232,
  2026-04-07) calls its utils/bench_serving/benchmark_serving.py with `--dataset-name random
  --random-range-ratio $RANDOM_RANGE_RATIO --num-prompts $((CONC * 10)) --max-concurrency
  $CONC --request-rate inf --ignore-eos --num-warmups $((2 * CONC))`; every single-node script
  there passes `$(( $CONC * 10 ))` prompts, RANDOM_RANGE_RATIO is 0.8
  (.github/workflows/benchmark-tmpl.yml). The warm-up (added 2026-01-21, d053ae24e; gathered
  before the timed run) leaves an idle engine, as the runs before it started from one.
  One exception is not settled per row: until 2026-01-21 (d053ae24e removed it) the B200
  docker runners launch_b200-nvd.sh / -dgxc.sh gave DeepSeek-R1 `NUM_PROMPTS = CONC x 20`
  (OSL 8192) or `x 50`, while launch_b200-tg.sh kept x 10, and the csv does not name the
  runner: those rows (B200 SGLang DeepSeek, measured 2025-11 and 2025-12) are taken at 10 too.
  NVIDIA's own replay of these rows uses the same 10 C requests at range ratio 0.8
  (ai-dynamo/aisimulate scripts/e2e_accuracy/run_e2e_accuracy.py at 8ec38fe, replay_spec).

Every other source (`aic-auto-gap-analysis` Dynamo runs with gtl job ids, the kimi-k2.5 and
qwen3.5 gap-analysis files): no benchmark command is published for them, so their rows keep
the project's generic closed loop (fixed lengths at the row's ISL and OSL, DEFAULT_PROMPTS_PER_
CLIENT requests per client). design.md, "What an aggregated row's measured TTFT holds".
"""
from __future__ import annotations

from dataclasses import dataclass

from src.validation.bench_run import RANDOM_RANGE_RATIO

INFERENCEX_SOURCES = ("db-dump/", "source_file=2026-03-25.csv", "source_file=2026-04-06.csv")
INFERENCEX_PROMPTS_PER_CLIENT = 10  # benchmarks/single_node/*.sh: --num-prompts $((CONC * 10))
# rows whose benchmark is not established: the closed loop's requests per client before this
# change (4 waves of C requests), lengths fixed at the row's ISL and OSL
DEFAULT_PROMPTS_PER_CLIENT = 4


@dataclass(frozen=True)
class BenchRun:
    """The timed run of a row's benchmark: its name, range ratio, prompts per client."""

    benchmark: str  # "inferencex" or "" (not established)
    range_ratio: float  # lengths uniform on int(ratio L) .. L; 1.0 = fixed at L
    prompts_per_client: int  # W: --num-prompts / --max-concurrency


def source_of(silicon_data_source) -> str:
    """The csv's source text up to its first ';' ("" when the cell is empty)."""
    text = "" if silicon_data_source is None else str(silicon_data_source)
    return "" if text == "nan" else text.split(";", 1)[0].strip()


def bench_run_of(silicon_data_source) -> BenchRun:
    """The timed run that measured a row, from its silicon_data_source."""
    source = source_of(silicon_data_source)
    if source.startswith(INFERENCEX_SOURCES):
        return BenchRun("inferencex", RANDOM_RANGE_RATIO, INFERENCEX_PROMPTS_PER_CLIENT)
    return BenchRun("", 1.0, DEFAULT_PROMPTS_PER_CLIENT)
