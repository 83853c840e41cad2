#!/usr/bin/env bash
# Speculative decoding on a GPU host with random weights (docs/GPU.md, "Speculative decoding"): a
# config-only gpt-oss-120b target and a config-only Eagle3 draft of the published draft's shape, both
# served with LOAD_FORMAT=dummy through the matrix's profile (hopper-h100 on an H100).
#
#   lab/scripts/gpu/speculative.sh [--python PY] [--store DIR] [--only identity|cost] [--tokens 1,2,3,4,5,6]
#                              [--draft-config FILE] [--set VAR=VALUE ...]
#
# identity: greedy token ids without and with SPECULATIVE=eagle3 (k=3) must agree; the random draft is
#           rejected at every step, so every token is the target's own, through the verify path.
# cost:     decode tok/s and the acceptance length at batch 1 without speculation, then per k at zero
#           acceptance (the random draft) and full acceptance (SPECULATIVE_SYNTHETIC_ACCEPTANCE=k+1,
#           measurement only): 1 + 2 x (number of k) engine starts, each a few minutes.
# --draft-config: a real draft's config.json (e.g. nvidia/gpt-oss-120b-Eagle3-v2's) to take its shape from.
# --set: more profile variables for both verbs (e.g. MXFP4_LAYERS=moe, with which the identity held).
set -euo pipefail
cd "$(dirname "$0")/../../.."
PY=python3
STORE=()
ONLY=
TOKENS=1,2,3,4,5,6
FROM=()
EXTRA=()
MATRIX=lab/configs/matrix-hopper-h100-random.yaml
PROFILE=hopper-h100
TARGET=/tmp/gpt-oss-120b
DRAFT=/tmp/gpt-oss-120b-eagle3
while (( $# )); do
    case $1 in
        --python) PY=$2; shift 2 ;;
        --store) STORE=(--store "$2"); shift 2 ;;
        --only) ONLY=$2; shift 2 ;;
        --tokens) TOKENS=$2; shift 2 ;;
        --draft-config) FROM=(--from-config "$2"); shift 2 ;;
        --set) EXTRA+=(--set "$2"); shift 2 ;;
        -h|--help) sed -n 2,15p "$0"; exit 0 ;;
        *) echo "speculative.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
export PYTHONPATH="$PWD/src:$PWD/lab/src${PYTHONPATH:+:$PYTHONPATH}"
export SPARKSERVE_ROOT="$PWD"
T0=$(date +%s)
log() { printf '[%s %4ss] %s\n' "$(date +%H:%M:%S)" "$(( $(date +%s) - T0 ))" "$*" >&2; }

[[ -f $TARGET/config.json ]] || "$PY" -m sparkserve_lab.testing gptoss-dummy --out "$TARGET"
"$PY" -m sparkserve_lab.testing eagle3-dummy --out "$DRAFT" "${FROM[@]}"
SPEC=(--set SPECULATIVE=eagle3 --set "SPECULATIVE_DRAFT=$DRAFT" ${EXTRA[@]+"${EXTRA[@]}"})

if [[ -z $ONLY || $ONLY == identity ]]; then
    log "identity: $PROFILE without and with SPECULATIVE=eagle3 (k=3)"
    "$PY" -m sparkserve_lab speculative identity "$PROFILE" --matrix "$MATRIX" "${SPEC[@]}" "${STORE[@]}" \
        --max-tokens 64
fi
if [[ -z $ONLY || $ONLY == cost ]]; then
    log "cost: k in $TOKENS, zero and full acceptance"
    "$PY" -m sparkserve_lab speculative cost "$PROFILE" --matrix "$MATRIX" "${SPEC[@]}" "${STORE[@]}" \
        --tokens "$TOKENS"
fi
log "done"
