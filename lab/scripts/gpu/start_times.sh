#!/usr/bin/env bash
# First start vs later starts of the serving entrypoint on a GPU host without Docker: the image's
# `python -m sparkserve.serving` with a profile, started by `sparkserve-lab serve`, its caches under one
# folder that outlives each start (what the compose volumes do), stopped after it answers /health and one
# completion, started again. Each start's log keeps the entrypoint's start summary; the time to ready is
# the lab's (from the entrypoint's start to /health and /v1/models).
# In the container: `docker compose up -d serve`, wait for healthy, `docker compose down`, again, and
# `docker compose logs serve | grep -A8 'start summary'`.
#
#   lab/scripts/gpu/start_times.sh --profile hopper-h100 --cache DIR --out DIR [--starts 2] [--python PY] [VAR=VALUE ...]
# e.g. on an H100 with a config-only checkpoint (python -m sparkserve_lab.testing gptoss-dummy --out /tmp/gpt-oss-120b):
#   lab/scripts/gpu/start_times.sh --cache /tmp/cache --out /tmp/starts MODEL=/tmp/gpt-oss-120b LOAD_FORMAT=dummy \
#       MAX_MODEL_LEN=8192 FLASHINFER_CUDA_ARCH_LIST=9.0a "VLLM_EXTRA_ARGS=--max-cudagraph-capture-size 64"
set -euo pipefail
cd "$(dirname "$0")/../../.."
PY=python3 PROFILE=hopper-h100 CACHE= OUTDIR= STARTS=2 PORT=8000
OVERRIDES=()
while (( $# )); do
    case $1 in
        --python) PY=$2; shift 2 ;;
        --profile) PROFILE=$2; shift 2 ;;
        --cache) CACHE=$2; shift 2 ;;
        --out) OUTDIR=$2; shift 2 ;;
        --starts) STARTS=$2; shift 2 ;;
        -h|--help) sed -n 2,12p "$0"; exit 0 ;;
        *=*) OVERRIDES+=("$1"); shift ;;
        *) echo "start_times.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
[[ -n $CACHE && -n $OUTDIR ]] || { echo "start_times.sh: --cache and --out are required" >&2; exit 2; }
[[ -f profiles/$PROFILE.env ]] || { echo "start_times.sh: no profiles/$PROFILE.env" >&2; exit 2; }
mkdir -p "$CACHE/home" "$OUTDIR"
# The server as the lab starts every server (`sparkserve-lab serve`: the entrypoint in the profile's
# container environment), its volumes in the cache folder. HOME inside it too: anything that still
# defaults to ~/.cache survives the restart.
export PYTHONPATH="$PWD/src:$PWD/lab/src${PYTHONPATH:+:$PYTHONPATH}"
SETS=(--set "SPARKSERVE_CACHE_DIR=$CACHE" --set "SPARKSERVE_STATE_DIR=$CACHE/state")
for v in "${OVERRIDES[@]}"; do SETS+=(--set "$v"); done
echo "start_times: profile $PROFILE, caches in $CACHE ($(du -sh "$CACHE" | cut -f1) before the first start)"
for n in $(seq 1 "$STARTS"); do
    log=$OUTDIR/start-$n.log
    # it serves: /v1/models and one completion (random weights: the harmony check does not apply)
    "$PY" -m sparkserve_lab serve --profile "$PROFILE" "${SETS[@]}" --env "HOME=$CACHE/home" --port "$PORT" \
        --python "$PY" --work "$OUTDIR" --log "$log" --ready-file "$OUTDIR/start-$n.json" -- \
        "$PY" -m sparkserve level 1 --base-url "http://127.0.0.1:$PORT" --random-weights --max-tokens 16 \
        --json-out "$OUTDIR/start-$n-level1.json" | tail -1 \
        || { echo "start_times: start $n failed; last lines of $log:" >&2; tail -30 "$log" >&2; exit 1; }
    secs=$("$PY" -c 'import json, sys; print(json.load(open(sys.argv[1]))["ready_s"])' "$OUTDIR/start-$n.json")
    printf 'start_times: start %d: ready (/health and /v1/models) after %.1f s (caches %s)\n' "$n" "$secs" \
        "$(du -sh "$CACHE" | cut -f1)" | tee -a "$OUTDIR/start-times.txt"
    grep -A10 'start summary' "$log" | tee -a "$OUTDIR/start-times.txt" || echo "  (no start summary in $log)"
done
