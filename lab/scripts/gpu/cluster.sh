#!/usr/bin/env bash
# The two-node path on two GPUs of one host: rank 0 on GPU 0, rank 1 on GPU 1 (CUDA_VISIBLE_DEVICES per
# rank), the head at 127.0.0.1. Each rank starts as a node of ansible/cluster.yml starts: the entrypoint
# (`python -m sparkserve.serving`, through `sparkserve-lab serve`) with the profile's cluster variables
# (SPARKSERVE_NNODES=2, SPARKSERVE_NODE_RANK, SPARKSERVE_MASTER_ADDR, SPARKSERVE_MASTER_PORT), never vLLM
# flags. Random weights (a config-only gpt-oss-120b, LOAD_FORMAT=dummy), so no checkpoint is needed.
#
#   lab/scripts/gpu/cluster.sh [--out DIR] [--only allreduce|tp2|tp1] [--python PY] [--profile hopper-h100]
#                              [--model DIR] [--cache DIR] [--port 8000] [--master-port 29501] [--runs 3]
#                              [--set VAR=VALUE ...]
#
# Steps (all by default; --only one of them, e.g. one per call where a call's time is limited):
#   allreduce  the cluster role's own NCCL check (ansible/roles/cluster/files/allreduce.py), one rank per GPU
#   tp2        the worker (rank 1), then the head (rank 0); the head's gate (levels 1 and 2, as the serve
#              role runs them on random weights), then decode at c=1, 8, 32 and prefill pp2048
#              (`sparkserve-lab level 4`) against the head
#   tp1        the same profile on one node (GPU 0, no cluster variables): the gate and the same benchmark
# Records under --out (default $OUT): allreduce-rank{0,1}.log, each server's log and launch plan
# (<log>.plan.json), <step>-level{1,2}.json, the run store (store/, one run per step) and summary.txt.
# --cache keeps the compile caches between calls (each rank its own). --set: more profile variables for
# both steps (e.g. MXFP4_LAYERS=moe).
set -euo pipefail
cd "$(dirname "$0")/../../.."
PY=python3 OUTDIR=${OUT:-} ONLY='' PROFILE=hopper-h100 MODEL=/tmp/gpt-oss-120b CACHE=/tmp/sparkserve-cluster
PORT=8000 MASTER_PORT=29501 RUNS=3
EXTRA=()
while (( $# )); do
    case $1 in
        --out) OUTDIR=$2; shift 2 ;;
        --only) ONLY=$2; shift 2 ;;
        --python) PY=$2; shift 2 ;;
        --profile) PROFILE=$2; shift 2 ;;
        --model) MODEL=$2; shift 2 ;;
        --cache) CACHE=$2; shift 2 ;;
        --port) PORT=$2; shift 2 ;;
        --master-port) MASTER_PORT=$2; shift 2 ;;
        --runs) RUNS=$2; shift 2 ;;
        --set) EXTRA+=(--set "$2"); shift 2 ;;
        -h|--help) sed -n 2,21p "$0"; exit 0 ;;
        *) echo "cluster.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
[[ -n $OUTDIR ]] || { echo "cluster.sh: --out DIR (or OUT in the environment) is required" >&2; exit 2; }
case $ONLY in ""|allreduce|tp2|tp1) ;; *) echo "cluster.sh: --only allreduce, tp2 or tp1" >&2; exit 2 ;; esac
[[ -f profiles/$PROFILE.env ]] || { echo "cluster.sh: no profiles/$PROFILE.env" >&2; exit 2; }
mkdir -p "$OUTDIR" "$CACHE"
export PYTHONPATH="$PWD/src:$PWD/lab/src${PYTHONPATH:+:$PYTHONPATH}"
export SPARKSERVE_ROOT="$PWD"
T0=$(date +%s)
log() { printf '[%s %4ss] cluster: %s\n' "$(date +%H:%M:%S)" "$(( $(date +%s) - T0 ))" "$*" | tee -a "$OUTDIR/summary.txt" >&2; }
FAILED=0

# Random weights in gpt-oss-120b's shape, as the matrix's random-weight runs serve them; CUDA graphs up to
# batch 64 (c=32 is the largest measured) keep each start short.
[[ -f $MODEL/config.json ]] || "$PY" -m sparkserve_lab.testing gptoss-dummy --out "$MODEL"
SETS=(--set "MODEL=$MODEL" --set SERVED_MODEL_NAME=openai/gpt-oss-120b --set LOAD_FORMAT=dummy
      --set MAX_MODEL_LEN=8192 --set VLLM_NO_USAGE_STATS=1
      --set "VLLM_EXTRA_ARGS=--max-cudagraph-capture-size 64" ${EXTRA[@]+"${EXTRA[@]}"})
CLUSTER=(--set SPARKSERVE_NNODES=2 --set SPARKSERVE_MASTER_ADDR=127.0.0.1 --set "SPARKSERVE_MASTER_PORT=$MASTER_PORT")
URL=http://127.0.0.1:$PORT
STARTED=()  # process groups of the `sparkserve-lab serve` verbs this script started

stop_all() {  # the lab's verb stops the entrypoint's and vLLM's groups before it exits
    local g
    for g in ${STARTED[@]+"${STARTED[@]}"}; do kill -TERM -- "-$g" 2>/dev/null || true; done
    for g in ${STARTED[@]+"${STARTED[@]}"}; do
        for _ in $(seq 1 60); do kill -0 "$g" 2>/dev/null || break; sleep 1; done
        kill -KILL -- "-$g" 2>/dev/null || true
    done
    STARTED=()
}
trap stop_all EXIT

serve() {  # $1 name, $2 GPU, $3 port, then more `sparkserve-lab serve` options; sets SERVE_PID
    local name=$1 gpu=$2 port=$3
    shift 3
    mkdir -p "$CACHE/$name/home"
    rm -f "$OUTDIR/$name.ready.json"
    setsid "$PY" -m sparkserve_lab serve --profile "$PROFILE" "${SETS[@]}" "$@" \
        --set "SPARKSERVE_CACHE_DIR=$CACHE/$name/cache" --set "SPARKSERVE_STATE_DIR=$CACHE/$name/state" \
        --env "CUDA_VISIBLE_DEVICES=$gpu" --env "HOME=$CACHE/$name/home" --port "$port" --python "$PY" \
        --work "$OUTDIR/work" --name "$name" --log "$OUTDIR/$name.log" --ready-file "$OUTDIR/$name.ready.json" \
        --ready-timeout 1800 >>"$OUTDIR/$name.serve.txt" 2>&1 &
    SERVE_PID=$!
    STARTED+=("$SERVE_PID")
}

wait_ready() {  # $1 name, $2 its verb's pid, then the pids of the servers it needs (a head: its worker)
    local name=$1 pid
    shift
    while [[ ! -s $OUTDIR/$name.ready.json ]]; do
        for pid in "$@"; do
            if ! kill -0 "$pid" 2>/dev/null; then
                log "$name: a server it needs (pid $pid) exited before it was ready; the logs: $OUTDIR/*.log"
                tail -40 "$OUTDIR/$name.log" >&2 || true
                tail -5 "$OUTDIR/$name.serve.txt" >&2 || true
                return 1
            fi
        done
        sleep 3
    done
    log "$name ready ($(ready_field "$name" ready_s) s)"
}

ready_field() { "$PY" -c 'import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$OUTDIR/$1.ready.json" "$2"; }

measure() {  # $1 step (tp2|tp1), $2 the head's name, then the profile settings it runs with
    local step=$1 head=$2 pid
    shift 2
    pid=$(ready_field "$head" pid)
    "$PY" -m sparkserve level 1 --base-url "$URL" --random-weights --json-out "$OUTDIR/$step-level1.json" \
        || { log "$step: level 1 failed"; FAILED=1; }
    "$PY" -m sparkserve level 2 --base-url "$URL" --configuration "cluster-$step" \
        --json-out "$OUTDIR/$step-level2.json" || { log "$step: level 2 failed"; FAILED=1; }
    cp "$OUTDIR/$head.log" "$OUTDIR/$step-engine-snapshot.log"
    "$PY" -m sparkserve_lab level 4 --base-url "$URL" --tokenizer "$MODEL" --preset quick --pp 2048 --tg 128 \
        --concurrency 1,8,32 --runs "$RUNS" --configuration "cluster-$step" --profile "$PROFILE" "$@" \
        --engine-log "$OUTDIR/$step-engine-snapshot.log" --server-pid "$pid" --serve-python "$PY" \
        --random-weights --store "$OUTDIR/store" --timeout 1800 --json-out "$OUTDIR/$step-level4.json" \
        || { log "$step: level 4 failed"; FAILED=1; }
}

if [[ -z $ONLY || $ONLY == allreduce ]]; then
    log "allreduce: NCCL between GPU 0 and GPU 1 (the cluster role's check, master 127.0.0.1:$((MASTER_PORT + 10)))"
    pids=()
    for rank in 0 1; do
        CUDA_VISIBLE_DEVICES=$rank "$PY" ansible/roles/cluster/files/allreduce.py --rank "$rank" --world 2 \
            --master-addr 127.0.0.1 --master-port "$((MASTER_PORT + 10))" --backend nccl --mb 256 \
            --timeout 180 >"$OUTDIR/allreduce-rank$rank.log" 2>&1 &
        pids+=($!)
    done
    for rank in 0 1; do
        wait "${pids[$rank]}" || { log "allreduce: rank $rank failed: $(tail -3 "$OUTDIR/allreduce-rank$rank.log")"; exit 1; }
    done
    grep -h '^allreduce {' "$OUTDIR"/allreduce-rank*.log | tee -a "$OUTDIR/summary.txt"
fi

if [[ -z $ONLY || $ONLY == tp2 ]]; then
    log "tp2: the worker (node rank 1, GPU 1), then the head (node rank 0, GPU 0)"
    serve tp2-rank1 1 "$((PORT + 1))" "${CLUSTER[@]}" --set SPARKSERVE_NODE_RANK=1
    worker=$SERVE_PID
    wait_ready tp2-rank1 "$worker"
    serve tp2-rank0 0 "$PORT" "${CLUSTER[@]}" --set SPARKSERVE_NODE_RANK=0
    wait_ready tp2-rank0 "$SERVE_PID" "$worker"
    measure tp2 tp2-rank0 "${SETS[@]}" "${CLUSTER[@]}" --set SPARKSERVE_NODE_RANK=0
    stop_all
fi

if [[ -z $ONLY || $ONLY == tp1 ]]; then
    log "tp1: one node (GPU 0)"
    serve tp1 0 "$PORT"
    wait_ready tp1 "$SERVE_PID"
    measure tp1 tp1 "${SETS[@]}"
    stop_all
fi
log "done (failures: $FAILED)"
exit "$FAILED"
