#!/usr/bin/env bash
# Issue 5 proof on a lent H100, ONE configuration per call (a call may run 600 s): level 6 of
# configs/matrix-h100-dummy.yaml (server start, levels 1, 1.5 and 4) for CONFIGURATION, into the run store
# /tmp/store, which is then packed with the server log and the level results into $OUT/matrix-CONF.tar.gz.
#
#   usage: scripts/gpu/matrix_h100.sh CONFIGURATION   (stock-sm90 | mxfp4-dense-sm90 | flashinfer-sinks-sm90 | hopper-profile-sm90)
#
# Needs, on the host: scripts/gpu/setup_host.sh done (pinned stack + patches in /tmp/site; unidiff in
# /tmp/pylib) and the harness staged in .stage/harness (llama-benchy 0.4.0 and the o200k_harmony
# tokenizer.json.gz; `scripts/gpu/make_harness_stage.sh` makes it). Offline: nothing here needs a network.
# The gpt-oss-120b config-only checkpoint + tokenizer is written to /tmp/gptoss-120b when missing.
# Everything is overridable for the CPU dry run (scripts/gpu/dryrun_matrix_cpu.sh): SPARKSERVE_MATRIX,
# SPARKSERVE_SITE, SPARKSERVE_HARNESS, SPARKSERVE_CKPT, SPARKSERVE_GPTOSS_SIZE, SPARKSERVE_STORE,
# SPARKSERVE_WORK, SPARKSERVE_BUDGET_S, SPARKSERVE_PYTHON, OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
CONF=${1:?usage: $0 CONFIGURATION}
MATRIX=${SPARKSERVE_MATRIX:-configs/matrix-h100-dummy.yaml}
SITE=${SPARKSERVE_SITE:-/tmp/site}
HARNESS=${SPARKSERVE_HARNESS:-$ROOT/.stage/harness}
CKPT=${SPARKSERVE_CKPT:-/tmp/gptoss-120b}     # must be the matrix's `model:`
SIZE=${SPARKSERVE_GPTOSS_SIZE:-120b}
STORE=${SPARKSERVE_STORE:-/tmp/store}
WORK=${SPARKSERVE_WORK:-/tmp/matrix-work}
BUDGET=${SPARKSERVE_BUDGET_S:-525}             # s from the start of this script until level 6 is stopped
                                               # (then up to 40 s to stop the server; a call has 600 s)
PY=${SPARKSERVE_PYTHON:-python3}
OUT=${OUT:-/tmp/out}
T0=$(date +%s)
log() { printf '[matrix_h100 %4ss] %s\n' "$(( $(date +%s) - T0 ))" "$*"; }

export PYTHONPATH="$ROOT/src:$SITE:$HARNESS:/tmp/pylib${PYTHONPATH:+:$PYTHONPATH}"
export PATH="$SITE/bin:$PATH"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INDEX=1 PYTHONUNBUFFERED=1
mkdir -p "$OUT" "$WORK" "$STORE"

# Servers of an earlier call that was cut off: stop their process groups (pid files of levels/server.py).
"$PY" - "$WORK" <<'EOF' || true
import os, signal, sys, time
from pathlib import Path
from sparkserve.harness.levels.server import group_members
for f in Path(sys.argv[1]).glob("*.log.pid"):
    pgid = int(f.read_text().strip() or 0)
    members = group_members(pgid) if pgid > 1 else []
    cmdlines = []
    for p in members:
        try:
            cmdlines.append(Path(f"/proc/{p}/cmdline").read_bytes().lower())
        except OSError:
            pass
    if any(b"vllm" in c for c in cmdlines):  # our server (or its engine), not a recycled pid
        print(f"stopping a leftover server: process group {pgid} ({f})", flush=True)
        for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                break
            end = time.monotonic() + wait
            while group_members(pgid) and time.monotonic() < end:
                time.sleep(0.5)
            if not group_members(pgid):
                break
    f.unlink()
EOF

log "host: $("$PY" -V 2>&1), $(nproc) cores; config $CONF of $MATRIX"
if command -v nvidia-smi > /dev/null; then
    timeout 20 nvidia-smi > "$OUT/nvidia-smi-$CONF.txt" 2>&1 || log "nvidia-smi failed (see $OUT/nvidia-smi-$CONF.txt)"
    timeout 20 nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader || true
fi

# Preflight: what the harness imports (vllm only located: importing it takes a while; the CPU dry run,
# whose server runs in another Python, leaves it out).
export SPARKSERVE_PREFLIGHT=${SPARKSERVE_PREFLIGHT:-sparkserve yaml tokenizers llama_benchy aiohttp pydantic tabulate numpy requests openai_harmony vllm}
if ! "$PY" - <<'EOF'
import importlib.util, os, sys
want = os.environ["SPARKSERVE_PREFLIGHT"].split()
missing = [m for m in want if importlib.util.find_spec(m) is None]
if missing:
    sys.exit(f"preflight: cannot import {', '.join(missing)} (PYTHONPATH={os.environ['PYTHONPATH']})")
import tokenizers, yaml
where = ", ".join(f"{m} {os.path.dirname(importlib.util.find_spec(m).origin or '?')}" for m in want)
print(f"preflight: tokenizers {tokenizers.__version__}, yaml {yaml.__version__}; {where}")
EOF
then
    log "FAIL: preflight"; exit 2
fi

# The checkpoint: config.json + o200k_harmony tokenizer (prebuilt in the harness, else built from
# openai_harmony, a vLLM dependency). Rewritten when missing or of another size.
if ! "$PY" -c "import json,sys; d=json.load(open('$CKPT/sparkserve-gptoss-dummy.json')); sys.exit(d.get('size') != '$SIZE')" 2>/dev/null \
        || [[ ! -s "$CKPT/tokenizer.json" ]]; then
    TOK=()
    [[ -s "$HARNESS/o200k_harmony-tokenizer.json.gz" ]] && TOK=(--tokenizer-json "$HARNESS/o200k_harmony-tokenizer.json.gz")
    log "writing the gpt-oss-$SIZE config-only checkpoint to $CKPT ${TOK[*]+${TOK[*]}}"
    "$PY" -m sparkserve.testing gptoss-dummy --out "$CKPT" --size "$SIZE" ${TOK[@]+"${TOK[@]}"} \
        || { log "FAIL: checkpoint"; exit 2; }
fi
ls -l "$CKPT"

LEFT=$(( BUDGET - ($(date +%s) - T0) ))
log "level 6: $CONF (stopped after ${LEFT}s if still running)"
timeout -k 40 "$LEFT" "$PY" -m sparkserve level 6 "$MATRIX" --only "$CONF" --store "$STORE" --work "$WORK" \
    --json-out "$WORK/level6-$CONF.json"
rc=$?
(( rc == 124 || rc == 137 )) && log "level 6 ran past ${LEFT}s (rc $rc): partial results only"
log "level 6 rc=$rc"

# Bring back everything, whatever happened: the whole store (runs of earlier calls too) and the logs, as
# one archive (the device returns at most 8 files from $OUT, none deeper than $OUT/a/b/file).
PACK=$(mktemp -d)
mkdir -p "$PACK/store" "$PACK/work"
cp -r "$STORE"/. "$PACK/store/" 2>/dev/null || true
cp "$WORK"/"$CONF"-*.log "$WORK"/"$CONF"-level1.json "$WORK"/level6-"$CONF".json "$PACK/work/" 2>/dev/null || true
tar -C "$PACK" -czf "$OUT/matrix-$CONF.tar.gz" store work \
    && log "packed $OUT/matrix-$CONF.tar.gz ($(du -h "$OUT/matrix-$CONF.tar.gz" | cut -f1))"
rm -rf "$PACK"

"$PY" - "$STORE" "$CONF" <<'EOF' || true
import json, sys
from pathlib import Path
from sparkserve.harness.runstore import Store
from sparkserve.harness.bench.results import rows
store, conf = Store(Path(sys.argv[1])), sys.argv[2]
runs = [r for r in store.runs() if r.configuration == conf]
if not runs:
    print(f"summary: no stored run of {conf}")
for r in runs:
    b = r.bench()
    nums = "; ".join(
        f"{x.label()}: pp {x.pp_tps or 0:.0f} tok/s, tg {x.tg_tps or 0:.1f} tok/s" for x in rows(b or {})
    ) or "no benchmark numbers"
    lv = r.levels()
    l1 = lv.get("1", {}).get("ok")
    l4 = lv.get("4", {}).get("ok")
    v = r.validation() or {}
    bad = [c["check"] for c in v.get("checks", []) if c.get("ok") is False]
    print(f"summary: {r.hardware}/{r.run_id}: level 1.5 {r.status()}{' ' + str(bad) if bad else ''}; "
          f"level 1 {'PASS' if l1 else 'FAIL'}; level 4 {'PASS' if l4 else 'FAIL'}; {nums}")
EOF
log "done: $OUT/matrix-$CONF.tar.gz ($(find "$STORE" -name metadata.json | wc -l) run(s) in the store)"
exit "$rc"
