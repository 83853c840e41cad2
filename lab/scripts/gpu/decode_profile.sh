#!/usr/bin/env bash
# One sitting of the decode-step breakdown and the concurrency curve on a GPU host without Docker: for each
# arm (the shipped hopper-h100 profile as the lab serves it, `sparkserve-lab serve`; stock vLLM with its
# defaults), start the server with vLLM's torch profiler endpoints, `sparkserve-lab trace decode` (batch 1 and 32), then
# `sparkserve-lab level 4 --preset concurrency`, stop it. Everything goes into the run store (--store).
#
#   lab/scripts/gpu/decode_profile.sh --python PY --model DIR --store DIR --work DIR [--arms hopper-h100,vllm-defaults]
#                                 [--no-curve] [--runs N] [--port N] [--set VAR=VALUE ...] [--prefill C,C]
#                                 [--batch B,B]
# DIR of --model: a config-only checkpoint (python -m sparkserve_lab.testing gptoss-dummy --out DIR), served with
# random weights (LOAD_FORMAT=dummy). Both arms capture CUDA graphs up to batch 64 (as the random-weight
# matrix does) and keep the profiler endpoints on for the whole start: the curve is measured on the same
# server as the breakdown (the profiler is idle outside /start_profile .. /stop_profile). --port (default 8000)
# lets two sittings share a host; pick the GPU with CUDA_VISIBLE_DEVICES. --set overrides a profile variable of the
# profile arms (repeatable; e.g. MOE_BACKEND=marlin-gemv): their records are named PROFILE+VAR=VALUE.
# --prefill C,C: also each arm's prefill chunks under C concurrent requests of 2,048 prompt tokens
# (`sparkserve-lab trace prefill`, kind prefill-profile), after the decode breakdown.
# --batch B,B: the decode breakdown's batches (default 1,32; `trace decode --batch`).
set -euo pipefail
cd "$(dirname "$0")/../../.."
PY=python3 MODEL= STORE=results WORK= ARMS=hopper-h100,vllm-defaults CURVE=1 RUNS=3 PORT=8000 OVERRIDES=() PREFILL=
BATCH=1,32
while (( $# )); do
    case $1 in
        --python) PY=$2; shift 2 ;;
        --model) MODEL=$2; shift 2 ;;
        --store) STORE=$2; shift 2 ;;
        --work) WORK=$2; shift 2 ;;
        --arms) ARMS=$2; shift 2 ;;
        --runs) RUNS=$2; shift 2 ;;
        --port) PORT=$2; shift 2 ;;
        --no-curve) CURVE=0; shift ;;
        --set) OVERRIDES+=("$2"); shift 2 ;;
        --prefill) PREFILL=$2; shift 2 ;;
        --batch) BATCH=$2; shift 2 ;;
        -h|--help) sed -n "2,/^set /{/^#/p}" "$0"; exit 0 ;;
        *) echo "decode_profile.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
[[ -n $MODEL && -n $WORK ]] || { echo "decode_profile.sh: --model and --work are required" >&2; exit 2; }
mkdir -p "$WORK"
SS=(env PYTHONPATH="$PWD/src:$PWD/lab/src${PYTHONPATH:+:$PYTHONPATH}" "$PY" -m sparkserve_lab)
URL=http://127.0.0.1:$PORT
CAPTURE="--max-cudagraph-capture-size 64"
SETS=(MODEL="$MODEL" SERVED_MODEL_NAME=openai/gpt-oss-120b MAX_MODEL_LEN=8192 LOAD_FORMAT=dummy ${OVERRIDES[@]+"${OVERRIDES[@]}"})
SUFFIX=$(IFS=+; echo "${OVERRIDES[*]+${OVERRIDES[*]}}")

start_arm() {  # $1 arm, $2 trace dir, $3 log; sets SERVE_PID (what to stop) and SERVER_PID (vLLM's)
    local arm=$1 tdir=$2 log=$3
    local prof="{\"profiler\":\"torch\",\"torch_profiler_dir\":\"$tdir\",\"torch_profiler_with_stack\":false,\"ignore_frontend\":true}"
    local ready=$WORK/ready-$arm.json
    rm -f "$ready"
    if [[ $arm == vllm-defaults ]]; then
        # stock vLLM with its own defaults: the comparison point, deliberately not a profile
        env VLLM_NO_USAGE_STATS=1 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 setsid "$PY" -m vllm.entrypoints.openai.api_server \
            --model "$MODEL" --host 127.0.0.1 --port "$PORT" --served-model-name openai/gpt-oss-120b \
            --load-format dummy --max-model-len 8192 --gpu-memory-utilization 0.88 $CAPTURE \
            --profiler-config "$prof" >"$log" 2>&1 &
        SERVE_PID=$! SERVER_PID=$!
        wait_ready "$log" "$URL/health"
    else
        # the profile as the lab serves every profile (the entrypoint in its container environment)
        local sets=() s
        for s in "${SETS[@]}"; do sets+=(--set "$s"); done
        setsid "${SS[@]}" serve --profile "$arm" "${sets[@]}" --set FLASHINFER_CUDA_ARCH_LIST=9.0a \
            --set VLLM_NO_USAGE_STATS=1 --set "VLLM_EXTRA_ARGS=$CAPTURE --profiler-config '$prof'" \
            --env "HOME=$WORK/home" --port "$PORT" --python "$PY" --work "$WORK" --name "$arm" --log "$log" \
            --ready-file "$ready" &
        SERVE_PID=$!
        mkdir -p "$WORK/home"
        wait_ready "$log" "$ready"
        SERVER_PID=$("$PY" -c 'import json, sys; print(json.load(open(sys.argv[1]))["pid"])' "$ready")
    fi
}

wait_ready() {  # $1 log, $2 the URL that answers (stock vLLM) or the file the lab writes at ready
    local t0=$SECONDS
    while kill -0 "$SERVE_PID" 2>/dev/null; do
        if [[ $2 == http* ]]; then
            if "$PY" - "$2" <<'PYEOF'
import sys, urllib.request
try:
    urllib.request.urlopen(sys.argv[1], timeout=5)
except Exception:
    sys.exit(1)
PYEOF
            then echo "decode_profile: ready after $((SECONDS - t0)) s"; return 0; fi
        elif [[ -s $2 ]]; then echo "decode_profile: ready after $((SECONDS - t0)) s"; return 0; fi
        sleep 3
    done
    echo "decode_profile: the server exited before it was ready; last lines of $1:" >&2
    tail -40 "$1" >&2
    return 1
}

IFS=',' read -r -a arm_list <<<"$ARMS"
for arm in "${arm_list[@]}"; do
    tdir=$WORK/traces-$arm log=$WORK/engine-$arm.log
    mkdir -p "$tdir"
    echo "decode_profile: $arm: starting ($(date -u +%H:%M:%S))"
    start_arm "$arm" "$tdir" "$log"
    pid=$SERVER_PID
    trap 'kill -TERM -- -'"$SERVE_PID"' 2>/dev/null || true' EXIT
    if [[ $arm == vllm-defaults ]]; then cfg=(--configuration vllm-defaults) gcfg=(--cuda-graphs on)
    else cfg=(--configuration "$arm${SUFFIX:++$SUFFIX}" --profile "$arm") gcfg=(); fi
    "${SS[@]}" trace decode --batch "$BATCH" --base-url "$URL" --trace-dir "$tdir" "${cfg[@]}" ${gcfg[@]+"${gcfg[@]}"} --server-pid "$pid" \
        --random-weights --store "$STORE" || echo "decode_profile: $arm: profile decode failed (rc $?)"
    if [[ -n $PREFILL ]]; then
        "${SS[@]}" trace prefill --base-url "$URL" --trace-dir "$tdir" "${cfg[@]}" --concurrency "$PREFILL" \
            --server-pid "$pid" --random-weights --store "$STORE" \
            || echo "decode_profile: $arm: profile prefill failed (rc $?)"
    fi
    if (( CURVE )); then
        if [[ $arm == vllm-defaults ]]; then bcfg=(--configuration stock-sm90)
        else bcfg=(--configuration "$arm${SUFFIX:++$SUFFIX}" --profile "$arm"); for s in "${SETS[@]}"; do bcfg+=(--set "$s"); done
             bcfg+=(--set "VLLM_EXTRA_ARGS=$CAPTURE"); fi
        cp "$log" "$WORK/engine-snapshot.log"
        "${SS[@]}" level 4 --base-url "$URL" --tokenizer "$MODEL" --preset concurrency --runs "$RUNS" "${bcfg[@]}" \
            --engine-log "$WORK/engine-snapshot.log" --server-pid "$pid" --serve-python "$PY" --random-weights \
            --store "$STORE" --timeout 900 || echo "decode_profile: $arm: concurrency curve failed (rc $?)"
    fi
    # the lab's verb stops the entrypoint's and vLLM's process groups before it exits
    kill -TERM -- "-$SERVE_PID" 2>/dev/null || true
    for _ in $(seq 1 60); do kill -0 "$SERVE_PID" 2>/dev/null || break; sleep 1; done
    kill -KILL -- "-$SERVE_PID" 2>/dev/null || true
    trap - EXIT
    echo "decode_profile: $arm: done ($(date -u +%H:%M:%S))"
done
