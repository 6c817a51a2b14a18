#!/usr/bin/env bash
# One device call (the `device` tool's `run`, about 10 minutes): the checks of the timing method first, then the
# agent evaluation, resumed from the committed cache. Carry `.eval` (made here on CPU by
# `python bench/evaluate_agent.py prepare --out .eval`). Everything it measures lands in $OUT:
#
#   run(command="bash bench/device_call.sh 420 8", carry=[".eval"], timeout_s=600)
#
# then copy $OUT/cache.sqlite over bench/results/agent-h200-cache.sqlite, append $OUT/results.jsonl to
# bench/results/agent-h200.jsonl, keep $OUT/*.log under bench/results/runs/ with the date, and commit.
# Arguments: seconds for the evaluation (default 420), runs side by side (default 8), extra evaluate_agent
# arguments after them (e.g. --instances bmm,rmsnorm or --methods greedy --budget 5).
set -uo pipefail
cd "$(dirname "$0")/.."
EVAL_S="${1:-420}"
JOBS="${2:-8}"
shift 2 2>/dev/null || shift $#
OUT="${OUT:?run this through the device tool: \$OUT is where results go}"
export PYTHONPATH="$PWD" HF_HUB_OFFLINE=1 KLINEAGE_GPU_OUT="$OUT"

nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
# the baseline process keeps the vendor's time when the trusted process is busy (timing method 2)
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/validator/test_gpu.py -k baseline_process 2>&1 \
  | tail -5 | tee "$OUT/timing-check.log"
# the cache of timing method 2 only (runs/2026-12-04-cache-timing-method-1.sqlite holds the earlier one)
if [ -f bench/results/agent-h200-cache.sqlite ]; then cp bench/results/agent-h200-cache.sqlite "$OUT/cache.sqlite"; fi
: > "$OUT/results.jsonl"
python3 bench/evaluate_agent.py run --prepared .eval --cache "$OUT/cache.sqlite" --results "$OUT/results.jsonl" \
  --budget-s "$EVAL_S" --max-shapes 4 --jobs "$JOBS" "$@" 2>&1 | tee "$OUT/evaluation.log" | tail -40
