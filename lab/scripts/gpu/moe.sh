#!/usr/bin/env bash
# FlashInfer's CUTLASS fused MoE on a GPU host (docs/GPU.md, "MoE tactics"): `validate moe`, `moe sweep` with
# its table installed into a scratch state folder, the install refusing that table for another arch, and
# the entrypoint starting from it. validate and sweep record themselves in lab/results/<gpu>/ (kinds
# moe-validate, moe-sweep). On an H100 this runs the SM90 BF16 x MXFP4 path; on a DGX Spark the SM121
# MXFP8 x MXFP4 one (then the entrypoint check uses the spark target).
#
#   lab/scripts/gpu/moe.sh [--python PY] [--store DIR] [--buckets quick|all|LIST] [--dry-run]
#
# --dry-run: the same sequence on a CPU (everything but the kernel launch; synthetic timings), which the
# entrypoint then must refuse, since a dry-run table never serves.
set -euo pipefail
cd "$(dirname "$0")/../../.."
PY=python3
STORE=()
BUCKETS=quick
DRY=()
while (( $# )); do
    case $1 in
        --python) PY=$2; shift 2 ;;
        --store) STORE=(--store "$2"); shift 2 ;;
        --buckets) BUCKETS=$2; shift 2 ;;
        --dry-run) DRY=(--dry-run); shift ;;
        -h|--help) sed -n 2,12p "$0"; exit 0 ;;
        *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
done
export PYTHONPATH="$PWD/src:$PWD/lab/src${PYTHONPATH:+:$PYTHONPATH}"
export SPARKSERVE_ROOT="$PWD"
SS=("$PY" -m sparkserve_lab)
STATE=$(mktemp -d "${TMPDIR:-/tmp}/sparkserve-moe-state.XXXX")
T0=$(date +%s)
log() { printf '[%s %4ss] %s\n' "$(date +%H:%M:%S)" "$(( $(date +%s) - T0 ))" "$*" >&2; }

if (( ${#DRY[@]} )); then
    SWEEP_BUCKETS=1,8; TOKENS=1,7; CC=9.0; TARGET=hopper; BACKEND=cutlass-bf16
else
    SWEEP_BUCKETS=$BUCKETS; TOKENS=1,7,64,333,2048
    CC=$("$PY" -c "import torch; print('%d.%d' % torch.cuda.get_device_capability(0))")
    case $CC in
        9.0) TARGET=hopper; BACKEND=cutlass-bf16 ;;
        12.*) TARGET=spark; BACKEND=cutlass-mxfp8 ;;
        *) TARGET=none; BACKEND=none ;;
    esac
fi

log "validate moe (tokens $TOKENS)"
"${SS[@]}" validate moe --tokens "$TOKENS" "${DRY[@]}" ${STORE[@]+"${STORE[@]}"}

log "moe sweep (buckets $SWEEP_BUCKETS), table installed into $STATE"
"${SS[@]}" moe sweep --buckets "$SWEEP_BUCKETS" --install-to "$STATE" "${DRY[@]}" ${STORE[@]+"${STORE[@]}"}
TABLE="$STATE/moe-tactics.json"

log "the table must be refused for another arch (12.1 if this is 9.0, else 9.0)"
OTHER=9.0; [[ $CC == 9.0 ]] && OTHER=12.1
if "${SS[@]}" moe install "$TABLE" --to "$STATE/other" --compute-capability "$OTHER" > "$STATE/refused.txt" 2>&1; then
    cat "$STATE/refused.txt" >&2; log "FAIL: a table made on $CC was installed for $OTHER"; exit 1
fi
grep -q "arch: the table was made on compute capability $CC" "$STATE/refused.txt" \
    || { cat "$STATE/refused.txt" >&2; log "FAIL: refused for another reason"; exit 1; }
log "refused, naming the arch: $(grep -o 'arch: [^;]*' "$STATE/refused.txt")"

if [[ $TARGET == none ]]; then
    log "no serving profile runs FlashInfer's CUTLASS MoE on compute capability $CC: entrypoint check skipped"
else
    log "the entrypoint with MOE_TACTICS=table (SPARKSERVE_TARGET=$TARGET, MOE_BACKEND=$BACKEND)"
    # A clean environment, as in the container: the profile check refuses variables it does not know (a
    # host's AWS_CA_BUNDLE ...).
    ENVS=(-i PATH="$PATH" PYTHONPATH="$PYTHONPATH" SPARKSERVE_ROOT="$PWD"
          SPARKSERVE_TARGET=$TARGET MOE_BACKEND=$BACKEND MXFP4_LAYERS=moe MOE_TACTICS=table
          MOE_TACTICS_TABLE="$TABLE" SPARKSERVE_STATE_DIR="$STATE" ATTENTION_BACKEND=auto KV_CACHE_DTYPE=auto)
    if (( ${#DRY[@]} )); then
        # a dry-run table must never serve
        if env "${ENVS[@]}" "$PY" -m sparkserve.serving --print-flags > "$STATE/start.txt" 2>&1; then
            cat "$STATE/start.txt" >&2; log "FAIL: the entrypoint took a dry-run table"; exit 1
        fi
        grep -q "CPU dry run" "$STATE/start.txt" || { cat "$STATE/start.txt" >&2; exit 1; }
        log "the entrypoint refused the dry-run table (exit 2), as it must"
    else
        # a config-only checkpoint with dummy weights passes the model check
        "$PY" -m sparkserve_lab.testing gptoss-dummy --out "$STATE/model" > /dev/null
        env "${ENVS[@]}" MODEL="$STATE/model" LOAD_FORMAT=dummy "$PY" -m sparkserve.serving --print-flags \
            > "$STATE/start.txt" 2>&1 \
            || { cat "$STATE/start.txt" >&2; log "FAIL: the entrypoint refused the table"; exit 1; }
        cat "$STATE/start.txt"
        grep -q -- "--no-enable-flashinfer-autotune" "$STATE/start.txt"
    fi
fi
log "done: validate moe, moe sweep, install refusal, entrypoint ($(( $(date +%s) - T0 )) s); state in $STATE"
