#!/usr/bin/env bash
# One sitting of the decode-step breakdown and the concurrency curve on a GPU host without Docker: for each
# arm (the shipped hopper-h100 profile through the serving entrypoint, stock vLLM with its defaults), start
# the server with vLLM's torch profiler endpoints, `sparkserve-lab trace decode` (batch 1 and 32), then
# `sparkserve-lab level 4 --preset concurrency`, stop it. Everything goes into the run store (--store).
#
#   lab/scripts/gpu/decode_profile.sh --python PY --model DIR --store DIR --work DIR [--arms hopper-h100,vllm-defaults]
#                                 [--no-curve] [--runs N] [--port N]
# DIR of --model: a config-only checkpoint (python -m sparkserve_lab.testing gptoss-dummy --out DIR), served with
# random weights (LOAD_FORMAT=dummy). Both arms capture CUDA graphs up to batch 64 (as the random-weight
# matrix does) and keep the profiler endpoints on for the whole start: the curve is measured on the same
# server as the breakdown (the profiler is idle outside /start_profile .. /stop_profile). --port (default 8000)
# lets two sittings share a host; pick the GPU with CUDA_VISIBLE_DEVICES.
set -euo pipefail
cd "$(dirname "$0")/../../.."
PY=python3 MODEL= STORE=results WORK= ARMS=hopper-h100,vllm-defaults CURVE=1 RUNS=3 PORT=8000
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
        -h|--help) sed -n 2,13p "$0"; exit 0 ;;
        *) echo "decode_profile.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
[[ -n $MODEL && -n $WORK ]] || { echo "decode_profile.sh: --model and --work are required" >&2; exit 2; }
mkdir -p "$WORK"
SS=(env PYTHONPATH="$PWD/src:$PWD/lab/src${PYTHONPATH:+:$PYTHONPATH}" "$PY" -m sparkserve_lab)
URL=http://127.0.0.1:$PORT
CAPTURE="--max-cudagraph-capture-size 64"
SETS=(MODEL="$MODEL" SERVED_MODEL_NAME=openai/gpt-oss-120b MAX_MODEL_LEN=8192 LOAD_FORMAT=dummy)

start_arm() {  # $1 arm, $2 trace dir, $3 log; prints the server's pid
    local arm=$1 tdir=$2 log=$3
    local prof="{\"profiler\":\"torch\",\"torch_profiler_dir\":\"$tdir\",\"torch_profiler_with_stack\":false,\"ignore_frontend\":true}"
    if [[ $arm == vllm-defaults ]]; then
        env VLLM_NO_USAGE_STATS=1 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 setsid "$PY" -m vllm.entrypoints.openai.api_server \
            --model "$MODEL" --host 127.0.0.1 --port "$PORT" --served-model-name openai/gpt-oss-120b \
            --load-format dummy --max-model-len 8192 --gpu-memory-utilization 0.88 $CAPTURE \
            --profiler-config "$prof" >"$log" 2>&1 &
    else
        # the entrypoint in a clean environment, as in the container (its strict check refuses unknown names)
        local envv=(PATH="$PATH" HOME="$WORK/home" PYTHONPATH="$PWD/src:$PWD/lab/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
                    SPARKSERVE_CACHE_DIR="$WORK/cache" SPARKSERVE_STATE_DIR="$WORK/state" SPARKSERVE_PORT="$PORT"
                    SPARKSERVE_LISTEN=127.0.0.1 FLASHINFER_CUDA_ARCH_LIST=9.0a VLLM_NO_USAGE_STATS=1 "${SETS[@]}")
        while IFS='=' read -r k v; do
            [[ $k =~ ^[A-Z_][A-Z0-9_]*$ ]] || continue
            printf '%s\n' "${envv[@]}" | grep -q "^$k=" || envv+=("$k=$v")
        done < "profiles/$arm.env"
        envv+=("VLLM_EXTRA_ARGS=$CAPTURE --profiler-config '$prof'")
        mkdir -p "$WORK/home"
        env -i "${envv[@]}" setsid "$PY" -m sparkserve.serving >"$log" 2>&1 &
    fi
    echo $!
}

wait_ready() {  # $1 pid, $2 log
    local t0=$SECONDS
    while kill -0 "$1" 2>/dev/null; do
        if "$PY" - "$URL" <<'PYEOF'
import sys, urllib.request
try:
    urllib.request.urlopen(sys.argv[1] + "/health", timeout=5)
except Exception:
    sys.exit(1)
PYEOF
        then echo "decode_profile: ready after $((SECONDS - t0)) s"; return 0; fi
        sleep 3
    done
    echo "decode_profile: the server exited before /health answered; last lines of $2:" >&2
    tail -40 "$2" >&2
    return 1
}

IFS=',' read -r -a arm_list <<<"$ARMS"
for arm in "${arm_list[@]}"; do
    tdir=$WORK/traces-$arm log=$WORK/engine-$arm.log
    mkdir -p "$tdir"
    echo "decode_profile: $arm: starting ($(date -u +%H:%M:%S))"
    pid=$(start_arm "$arm" "$tdir" "$log")
    trap 'kill -TERM -- -'"$pid"' 2>/dev/null || true' EXIT
    wait_ready "$pid" "$log"
    if [[ $arm == vllm-defaults ]]; then cfg=(--configuration vllm-defaults --cuda-graphs on)
    else cfg=(--configuration "$arm" --profile "$arm"); fi
    "${SS[@]}" trace decode --base-url "$URL" --trace-dir "$tdir" "${cfg[@]}" --server-pid "$pid" \
        --random-weights --store "$STORE" || echo "decode_profile: $arm: profile decode failed (rc $?)"
    if (( CURVE )); then
        if [[ $arm == vllm-defaults ]]; then bcfg=(--configuration stock-sm90)
        else bcfg=(--configuration "$arm" --profile "$arm"); for s in "${SETS[@]}"; do bcfg+=(--set "$s"); done
             bcfg+=(--set "VLLM_EXTRA_ARGS=$CAPTURE"); fi
        cp "$log" "$WORK/engine-snapshot.log"
        "${SS[@]}" level 4 --base-url "$URL" --tokenizer "$MODEL" --preset concurrency --runs "$RUNS" "${bcfg[@]}" \
            --engine-log "$WORK/engine-snapshot.log" --server-pid "$pid" --serve-python "$PY" --random-weights \
            --store "$STORE" --timeout 900 || echo "decode_profile: $arm: concurrency curve failed (rc $?)"
    fi
    kill -TERM -- "-$pid" 2>/dev/null || true
    for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    kill -KILL -- "-$pid" 2>/dev/null || true
    trap - EXIT
    echo "decode_profile: $arm: done ($(date -u +%H:%M:%S))"
done
