#!/usr/bin/env bash
# One device call (the `device` tool's `run`, about 10 minutes): the checks of the timing method first, then the
# agent evaluation, resumed from the committed cache. Carry `.eval` (made here on CPU by
# `python bench/evaluate_agent.py prepare --out .eval`). Everything it measures lands in $OUT:
#
#   run(command="bash bench/device_call.sh 540 8", carry=[".eval"], timeout_s=600)
#
# then file what it measured with `python bench/collect_call.py FILES_AT --call N` (merges $OUT/cache.sqlite.gz into
# bench/results/agent-CARD-cache.sqlite, appends $OUT/results.jsonl to bench/results/agent-CARD.jsonl, CARD h200 or
# h100 as gpu.txt says, and copies the logs to bench/results/runs/) and commit.
# With Ray's wheels carried too (`bash bench/ray_wheels.sh`, carry=[".eval", ".whl"]), tests/validator/test_ray_gpu.py
# in PRE_TESTS runs instead of skipping.
# Arguments: seconds for the whole call (default 540; the evaluation gets what the checks before it left, less
# a minute for the runs in flight to finish), runs side by side (default 8), extra evaluate_agent
# arguments after them (e.g. --instances bmm,rmsnorm or --methods greedy --budget 5).
# PRE_TESTS="tests/hostile/test_hostile_gpu.py ..." runs those GPU tests first (their verdicts land in $OUT).
# CONCURRENT="8 --workloads rmsnorm,bmm,column_sum" then measures the device lock per-run vs batched in one run.
# SOLO="rmsnorm,bmm" then times held-out candidates one at a time, split by gate, with a profile of the trusted side
# (SOLO_BEFORE="KLINEAGE_VALIDATOR_IPC_INPUTS=0": the same first under that environment).
# SWEEP="20" then compares the autotune sweep at 20 ms per config with Triton's default (bench/autotune_sweep.py):
# the evidence --autotune-rep-ms needs before the evaluation may use it. When every candidate there agrees within
# 2 % the evaluation of this call runs with --autotune-rep-ms 20 (its rows say so in their options); otherwise
# without it. USE_SWEEP="20" runs the evaluation with it without measuring again (after a passed check).
# Calls made back to back on one warm machine resume from the machine's own copy of the cache
# (/tmp/klineage-eval-cache-CARD.sqlite), so no copy-back is needed between them; runs finished by an earlier call
# (rows in the committed results or in the warm machine's /tmp/klineage-eval-results-CARD.jsonl) are skipped.
set -uo pipefail
cd "$(dirname "$0")/.."
CALL_S="${1:-540}"
JOBS="${2:-8}"
shift 2 2>/dev/null || shift $#
OUT="${OUT:?run this through the device tool: \$OUT is where results go}"
export PYTHONPATH="$PWD" HF_HUB_OFFLINE=1 KLINEAGE_GPU_OUT="$OUT"
# wheels carried as .whl (bench/ray_wheels.sh: Ray, which the machine's image lacks) go to /tmp/site
if compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH="/tmp/site:$PYTHONPATH" RAY_USAGE_STATS_ENABLED=0
fi

nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
# one cache and one results file per kind of card (h200, h100): timings of different cards never mix
CARD=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -o -i 'h[0-9]\{3\}' | tr 'H' 'h')
CARD="${CARD:-gpu}"
COMMITTED_CACHE="bench/results/agent-${CARD}-cache.sqlite"
echo "card: $CARD (cache $COMMITTED_CACHE)" | tee -a "$OUT/gpu.txt"
# the baseline process keeps the vendor's time when the trusted process is busy (timing method 2); checked
# once per machine and validator code: a later call on the same warm machine says so and goes on
BASELINE_OK="/tmp/klineage-baseline-process-ok-$(cat klineage/validator/*.py | sha256sum | cut -c1-12)"
if [ -f "$BASELINE_OK" ]; then
  echo "baseline process: checked earlier on this machine ($BASELINE_OK)" | tee "$OUT/checks.log"
else
  timeout 120 python3 -m pytest -q -p no:cacheprovider tests/validator/test_gpu.py -k baseline_process 2>&1 \
    | tail -5 | tee "$OUT/checks.log"
  grep -q " passed" "$OUT/checks.log" && ! grep -q "failed" "$OUT/checks.log" && touch "$BASELINE_OK"
fi
if [ -n "${PRE_TESTS:-}" ]; then
  # shellcheck disable=SC2086
  timeout 300 python3 -m pytest -q -p no:cacheprovider $PRE_TESTS 2>&1 | tail -15 | tee -a "$OUT/checks.log"
fi
if [ -n "${CONCURRENT:-}" ]; then
  # the device lock before/after in one run (bench/validator.py --concurrent); CONCURRENT holds its arguments,
  # e.g. CONCURRENT="8 --workloads rmsnorm,bmm,column_sum"
  # shellcheck disable=SC2086
  timeout 420 python3 bench/validator.py --no-http --cpu-jobs 0 --out "$OUT/validator-concurrent.json" \
    --concurrent $CONCURRENT 2>&1 | tail -8 | tee -a "$OUT/checks.log"
fi
if [ -n "${SOLO:-}" ]; then
  # one candidate at a time on a warm pool (held-out kernels and their rewrites), seconds per gate, and a
  # cProfile of the trusted side (read it with python -m pstats): where a lone candidate's time goes.
  # SOLO_BEFORE="VAR=value ..." runs it first under that environment (a change turned off: the figures
  # before and after in one call)
  if [ -n "${SOLO_BEFORE:-}" ]; then
    echo "before ($SOLO_BEFORE):" | tee -a "$OUT/checks.log"
    # shellcheck disable=SC2086
    env $SOLO_BEFORE timeout 300 python3 bench/validator.py --no-http --cpu-jobs 0 --concurrent 1 \
      --lock-modes batched --workloads "$SOLO" --out "$OUT/validator-solo-before.json" 2>&1 \
      | tail -3 | tee -a "$OUT/checks.log"
    echo "after:" | tee -a "$OUT/checks.log"
  fi
  timeout 300 python3 bench/validator.py --no-http --cpu-jobs 0 --concurrent 1 --lock-modes batched \
    --workloads "$SOLO" --profile "$OUT/validator-solo.pstats" --out "$OUT/validator-solo.json" 2>&1 \
    | tail -3 | tee -a "$OUT/checks.log"
  if [ -n "${SOLO_BEFORE:-}" ]; then
    python3 bench/validator.py --compare "$OUT/validator-solo-before.json" "$OUT/validator-solo.json" 2>&1 \
      | tee -a "$OUT/checks.log"
  fi
fi
SWEEP_ARGS=()
if [ -n "${USE_SWEEP:-}" ]; then
  SWEEP_ARGS=(--autotune-rep-ms "$USE_SWEEP")
elif [ -n "${SWEEP:-}" ]; then
  if timeout 420 python3 bench/autotune_sweep.py --rep-ms "$SWEEP" --out "$OUT/autotune-sweep.json" \
      > "$OUT/autotune-sweep.log" 2>&1; then
    SWEEP_ARGS=(--autotune-rep-ms "$SWEEP")
  fi
  tail -12 "$OUT/autotune-sweep.log" | tee -a "$OUT/checks.log"
  echo "evaluation sweep option: ${SWEEP_ARGS[*]:-none, the autotuner default}" | tee -a "$OUT/checks.log"
fi
# the cache of timing method 2 only (runs/2026-12-04-cache-timing-method-1.sqlite holds the earlier one)
WARM_CACHE="/tmp/klineage-eval-cache-${CARD}.sqlite"  # left by an earlier call on this (warm) machine: a superset
if [ -f "$WARM_CACHE" ]; then
  cp "$WARM_CACHE" "$OUT/cache.sqlite"
elif [ -f "$COMMITTED_CACHE" ]; then
  cp "$COMMITTED_CACHE" "$OUT/cache.sqlite"
fi
: > "$OUT/results.jsonl"
WARM_RESULTS="/tmp/klineage-eval-results-${CARD}.jsonl"
EVAL_S=$((CALL_S - SECONDS - 90))
if [ "$EVAL_S" -lt 60 ]; then
  # the checks took the call: the evaluation waits for the next one (USE_SWEEP=... there after a passed SWEEP)
  echo "evaluation: skipped, ${EVAL_S} s left of the call" | tee -a "$OUT/gpu.txt"
  exit 0
fi
echo "evaluation: ${EVAL_S} s" | tee -a "$OUT/gpu.txt"
# a hard stop after the budget: the runs in flight get 70 s to finish their validations, then the evaluation
# ends (what they had not finished is not in the cache; they resume next call) and the cache is copied for
# the next call on this machine while the call is still alive (a call cut by the device's limit copies nothing)
timeout -k 5 "$((EVAL_S + 70))" \
  python3 bench/evaluate_agent.py run --prepared .eval --cache "$OUT/cache.sqlite" --results "$OUT/results.jsonl" \
  --done "bench/results/agent-${CARD}.jsonl" --done "$WARM_RESULTS" \
  --budget-s "$EVAL_S" --max-shapes 4 --jobs "$JOBS" "${SWEEP_ARGS[@]}" "$@" 2>&1 | tee "$OUT/evaluation.log" | tail -40
cp "$OUT/cache.sqlite" "$WARM_CACHE" 2>/dev/null || true
cat "$OUT/results.jsonl" >> "$WARM_RESULTS"
# the whole cache outgrew what a call may send back (16.9 MB on 2026-12-07; gzipped 1.7 MB): collect_call.py unpacks it
gzip -9 -f "$OUT/cache.sqlite" 2>/dev/null || true
