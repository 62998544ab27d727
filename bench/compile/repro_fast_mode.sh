#!/bin/bash
# Fast mode run twice at one seed, each in a fresh state dir, on the SIMULATED L4 (issue 23):
# prints each run's measured candidates in store order (candidate id | latency s) and whether
# the two runs measured the same ones. Usage (repository root, project .venv):
#   bench/compile/repro_fast_mode.sh OUT_DIR OPERATOR TRIALS [more tune options]
# e.g. bench/compile/repro_fast_mode.sh runs/det mistral_k_proj 8
# The L4 profile is copied from runs/us_holdout_work/profiles (made by user_spec_tune).
set -euo pipefail
out=$1; op=$2; trials=$3; shift 3
for run in 1 2; do
  d=$out/$op-$trials-run$run
  rm -rf "$d"; mkdir -p "$d/agent"
  cp -r runs/us_holdout_work/profiles "$d/agent/profiles"
  SIMOE_HOME=$d /usr/bin/time -v .venv/bin/simoe-agent tune \
    --model "bench/inputs/outside_ops.py:$op" --device sim:bench/inputs/user_gpus/l4.json \
    --cost-model simoe --model-rounds 5 --trials "$trials" --seed 0 --largest-tasks 1 \
    --json --state-dir "$d/agent" "$@" > "$d/out.json" 2> "$d/time.txt"
  sqlite3 "$d/agent/store.sqlite" \
    "select candidate_id, latency_s from records order by rowid" > "$d/measured.txt"
  echo "run $run: $(grep -E 'User time' "$d/time.txt")"
done
if cmp -s "$out/$op-$trials-run1/measured.txt" "$out/$op-$trials-run2/measured.txt"; then
  echo "the same candidates, in the same order, with the same latencies"
else
  echo "the runs measured different candidates"
fi
