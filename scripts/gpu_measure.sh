#!/usr/bin/env bash
# Measure forward-step times of llama-3.1-8b and llama-3.2-1b on one CUDA GPU with
# `python run.py measure`, within a wall-clock budget, for fitting and checking the cost model.
#
#   scripts/gpu_measure.sh                      # results into $OUT (default ./measure-out)
#   MEASURE_DRY_RUN=1 scripts/gpu_measure.sh    # plan and time estimate only (no torch needed)
#   MEASURE_TINY=1 scripts/gpu_measure.sh       # the same runs on the CPU with a tiny model
#
# $OUT receives four files, rewritten after every run (so a stopped session keeps what it has):
#   step_times_ms.csv      decode/verification rows (forward, attention_only; graph and eager)
#   prefill_times_ms.csv   prefill rows
#   environment.json       per run: GPU, versions, clocks, copy/matmul rates, skipped configs
#   gpu_measure.log        everything printed
# Environment: OUT, PYTHON (default python3), MEASURE_BUDGET_S (wall-clock limit of the measuring
# runs, default 320 s), MEASURE_WORK (folder for per-run files, default a fresh one in /tmp).
# Each run gets --time-budget-s = the time left minus what the runs after it are estimated to
# need, so one slow run cannot starve the rest; a run that still overruns is stopped by `timeout`
# (SIGTERM: measure writes the rows it has and exits).
# Runs, most valuable first (configurations that do not fit in memory are skipped by measure):
#   forward-grid     both models, CUDA graphs, flash + cudnn attention: batch 1..256 (powers of
#                    2) x positions 1,2,3,5,9 x context 512,2048,8192
#   forward-context  contexts 1024,4096,16384 (positions 1,3,5)
#   forward-batch    batch sizes between the powers of 2 (3..192), positions 1,3,5, context 2048
#   eager            eager execution, flash, batch 1,4,16,64,256 x positions 1,5, context 2048
#   attention        attention_only rows of the 8B, both kernels, contexts 2048,4096,16384
#   prefill-1        prefill at batch 1, prompts 16..16384
#   prefill-batch    prefill at batch 2,4,8,16, prompts 256,1024,2048, flash only (the two
#                    kernels' prefill times differ by under 1% in the H200 data shipped with
#                    the calibration data, and these are the most expensive steps)
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
OUT="${OUT:-./measure-out}"
PY="${PYTHON:-python3}"  # the GPU image holds PyTorch in python3
BUDGET_S="${MEASURE_BUDGET_S:-320}"
STARTUP_S=8  # per run: Python, torch import, CUDA context, GPU rate checks (not in the estimate)
MODELS=llama-3.1-8b,llama-3.2-1b
POW2=1,2,4,8,16,32,64,128,256

NAMES=(forward-grid forward-context forward-batch eager attention prefill-1 prefill-batch)
STEP_RUNS=(forward-grid forward-context forward-batch eager attention)
PREFILL_RUNS=(prefill-1 prefill-batch)
# repetitions (measure refuses an option given twice, so each run names its own)
REPS="--min-reps 5 --warmup 2"
PREFILL_REPS="--min-reps 3 --warmup 1"  # long prefills: 0.1-1 s per step
COMMON="--target-ms 40 --max-reps 100"
if [ -n "${MEASURE_TINY:-}" ]; then
  # CPU smoke test of the same runs: tiny model, eager timing, one repetition
  REPS="--min-reps 1 --warmup 1"
  PREFILL_REPS="$REPS"
  COMMON="--target-ms 1 --max-reps 1"
fi
ARGS=(
  "--model $MODELS --mode graph --attention flash,cudnn --batch $POW2 --positions 1,2,3,5,9 --context 512,2048,8192 $REPS"
  "--model $MODELS --mode graph --attention flash,cudnn --batch $POW2 --positions 1,3,5 --context 1024,4096,16384 $REPS"
  "--model $MODELS --mode graph --attention flash,cudnn --batch 3,6,12,24,48,96,192 --positions 1,3,5 --context 2048 $REPS"
  "--model $MODELS --mode eager --attention flash --batch 1,4,16,64,256 --positions 1,5 --context 2048 $REPS"
  "--model llama-3.1-8b --what attention_only --mode graph --attention flash,cudnn --batch 1,16,64,256 --positions 1,5 --context 2048,4096,16384 $REPS"
  "--model $MODELS --what prefill --mode graph --attention flash,cudnn --prefill-batch 1 --prefill 16,32,64,128,256,512,1024,2048,4096,8192,16384 $PREFILL_REPS"
  "--model $MODELS --what prefill --mode graph --attention flash --prefill-batch 2,4,8,16 --prefill 256,1024,2048 $PREFILL_REPS"
)
if [ -n "${MEASURE_TINY:-}" ]; then
  for i in "${!ARGS[@]}"; do
    ARGS[$i]="${ARGS[$i]/--mode graph/--mode eager} --device cpu"
  done
fi

mkdir -p "$OUT" || { echo "error: cannot create $OUT" >&2; exit 2; }
if [ -z "${MEASURE_DRY_RUN:-}" ]; then
  exec 3>&1 4>&2
  exec > >(tee -a "$OUT/gpu_measure.log") 2>&1
  TEE_PID=$!
fi

# --- plan: configuration count and time estimate of every run (dry runs: no torch, and
# `src.measure` without run.py's study imports). One Python process plans every run: a process
# per run spent most of its time importing numpy and the cost model again. ------------------
plans=$("$PY" - "$COMMON" "${ARGS[@]}" <<'PYEOF'
import contextlib, io, sys
from src.measure.cli import main
for args in sys.argv[2:]:  # each run's options, split on spaces as the shell splits them
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        status = main(sys.argv[1].split() + args.split() + ["--dry-run"])
    plan = [line for line in printed.getvalue().splitlines() if line.startswith("plan:")]
    if status != 0 or len(plan) != 1:
        sys.exit(2)  # measure said why on stderr; the runs planned so far are printed
    print(plan[0], flush=True)
PYEOF
)
status=$?
PLANS=()
[ -n "$plans" ] && mapfile -t PLANS <<< "$plans"
if [ "$status" -ne 0 ] || [ "${#PLANS[@]}" -ne "${#NAMES[@]}" ]; then
  echo "error: the plan of run ${NAMES[${#PLANS[@]}]:-?} failed" >&2
  exit 2
fi
EST=()
TOTAL_CONFIGS=0
TOTAL_EST=0
for i in "${!NAMES[@]}"; do
  line=${PLANS[$i]}
  n=$(printf '%s\n' "$line" | sed -E 's/^plan: ([0-9]+) configurations.*/\1/')
  s=$(printf '%s\n' "$line" | sed -E 's/.*estimated ([0-9]+) s.*/\1/')
  EST+=("$((s + STARTUP_S))")
  TOTAL_CONFIGS=$((TOTAL_CONFIGS + n))
  TOTAL_EST=$((TOTAL_EST + s + STARTUP_S))
  echo "run ${NAMES[$i]}: $n configurations, estimated $((s + STARTUP_S)) s"
done
echo "total: $TOTAL_CONFIGS configurations, estimated $TOTAL_EST s (wall-clock budget $BUDGET_S s)"
if [ -n "${MEASURE_DRY_RUN:-}" ]; then
  exit 0
fi

WORK="${MEASURE_WORK:-$(mktemp -d /tmp/gpu_measure.XXXXXX)}"
mkdir -p "$WORK" || { echo "error: cannot create $WORK" >&2; exit 2; }

# run.py imports the whole study (matplotlib, scipy, pandas); a GPU machine may have only torch
# and numpy, and `python -m src.measure` is the same command without them
if "$PY" run.py measure --help >/dev/null 2>&1; then
  MEASURE=(run.py measure)
else
  MEASURE=(-m src.measure)
  echo "note: run.py cannot start here (study dependencies missing); using python -m src.measure"
fi

# --- collect: the per-run files of $WORK into the four files of $OUT -------------------------
combine() {  # combine OUTPUT RUN...: the first header, then every run's rows
  local target=$1; shift
  local files=() f
  for f in "$@"; do [ -s "$WORK/$f.csv" ] && files+=("$WORK/$f.csv"); done
  [ "${#files[@]}" -gt 0 ] || return 0
  { head -n 1 "${files[0]}"; for f in "${files[@]}"; do tail -n +2 "$f"; done; } \
    > "$target.part" && mv "$target.part" "$target"
}
collect() {
  combine "$OUT/step_times_ms.csv" "${STEP_RUNS[@]}"
  combine "$OUT/prefill_times_ms.csv" "${PREFILL_RUNS[@]}"
  "$PY" - "$OUT/environment.json" "$WORK" "${NAMES[@]}" <<'PYEOF'
import json, os, sys
target, work, names = sys.argv[1], sys.argv[2], sys.argv[3:]
env = {}
for name in names:
    path = os.path.join(work, name + ".env.json")
    if os.path.exists(path):
        with open(path) as fh:
            env[name] = json.load(fh)
if env:
    with open(target + ".part", "w") as fh:
        json.dump(env, fh, indent=1)
    os.replace(target + ".part", target)
PYEOF
}
trap collect EXIT

# --- environment ---------------------------------------------------------------------------
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm,power.limit,driver_version --format=csv
"$PY" -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'gpu', torch.cuda.is_available() and torch.cuda.get_device_name())" || true

# --- measure -------------------------------------------------------------------------------
START=$(date +%s)
FAILED=0
for i in "${!NAMES[@]}"; do
  now=$(date +%s)
  later=0
  for ((j = i + 1; j < ${#NAMES[@]}; j++)); do later=$((later + EST[j])); done
  left=$((START + BUDGET_S - now))
  budget=$((left - later - STARTUP_S))
  if [ "$budget" -lt 5 ]; then
    budget=5
  fi
  if [ "$left" -lt 20 ]; then
    echo "=== ${NAMES[$i]}: skipped, ${left} s left of the budget"
    continue
  fi
  echo "=== ${NAMES[$i]} ($(( now - START )) s elapsed; this run may take up to ${budget} s)"
  # shellcheck disable=SC2086
  timeout --signal=TERM --kill-after=15 "$((budget + 30))" \
    "$PY" "${MEASURE[@]}" $COMMON ${ARGS[$i]} --time-budget-s "$budget" \
    --out "$WORK/${NAMES[$i]}.csv"
  rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "=== ${NAMES[$i]}: exit status $rc"
    FAILED=$((FAILED + 1))
  fi
  collect
done

echo "done in $(( $(date +%s) - START )) s; $FAILED run(s) with a non-zero exit status"
for f in "$OUT"/*.csv; do [ -e "$f" ] && echo "  $f: $(( $(wc -l < "$f") - 1 )) rows"; done
exec 1>&3 2>&4 3>&- 4>&-
wait "$TEE_PID" 2>/dev/null
exit 0
