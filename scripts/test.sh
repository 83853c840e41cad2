#!/usr/bin/env bash
# The project's test command (README line 2; .ci/run calls exactly this).
# CPU only: lint, unit tests, the patch series against both upstream forms, the lock check,
# then the phases in scripts/ci/ (image build and smoke tests, compose/ansible, CPU plumbing).
# Each phase prints its wall time and memory peak; the summary at the end lists all of them, and
# .work/test/phases.json holds the same facts for a machine to read (each phase's status, seconds, peak
# memory, largest process and least free disk; the run's total and result). docs/CI.md describes them.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

export SPARKSERVE_CACHE="${SPARKSERVE_CACHE:-$ROOT/.work/cache}"
WORK="$ROOT/.work/test"
VENV="${SPARKSERVE_VENV:-$ROOT/.venv}"
PY="${PYTHON:-python3}"
# Phases to skip, space-separated (e.g. SKIP_PHASES="image" on a machine without root).
SKIP_PHASES="${SKIP_PHASES:-}"
# (exported: the image phase runs the evidence itself when image-arm64, where it runs otherwise, is skipped)
export SKIP_PHASES
# SPARKSERVE_CI_CLEAN=1: remove the images the phases built when done (scripts/ci/footprint.sh).

declare -a SUMMARY=()
T0=$(date +%s)

# The peak memory of each phase (the machine's memory in use and its largest process), sampled every 2 s
# by a watcher on the standard library alone (the first phases run before the venv exists).
memwatch() { PYTHONPATH="$ROOT/lab/src" "$PY" -m sparkserve_lab.testing.memwatch "$@"; }
# The run's facts, phase by phase, as JSON. A summary that cannot be written is said, not a failed run.
FACTS="$WORK/phases.json"
facts() { memwatch "$@" || echo "warning: $FACTS not updated (memwatch $1 failed)" >&2; }

phase() {  # phase NAME COMMAND...
    local name=$1; shift
    if [[ " $SKIP_PHASES " == *" $name "* ]]; then
        echo "==> $name: skipped (SKIP_PHASES)"; SUMMARY+=("$(printf '%-16s skipped' "$name")")
        facts record "$FACTS" "$name" skipped 0; return 0
    fi
    echo "==> $name"
    local start rc mem="$WORK/memory-$name.json" watcher peak
    start=$(date +%s)
    rm -f "$mem"
    # (python itself in the background, not a function: $! must be the process that the kill stops)
    PYTHONPATH="$ROOT/lab/src" "$PY" -m sparkserve_lab.testing.memwatch watch "$mem" --disk "$ROOT" /var/lib/docker &
    watcher=$!
    for _ in {1..30}; do [[ -s "$mem" ]] && break; sleep 0.1; done  # its first sample, before the phase
    # In a subshell of its own with errexit on: a function called as `f || ...` would run with errexit
    # off, and a failing command before its last one (ruff before mypy) would not fail the phase.
    # Its output also goes to a log, from which a failure is printed again at the very end.
    set +e
    (set -e; "$@") 2>&1 | tee "$WORK/phase-$name.log"
    rc=${PIPESTATUS[0]}
    kill "$watcher" 2>/dev/null; wait "$watcher" 2>/dev/null
    set -e
    peak=$(memwatch report "$mem" 2>/dev/null || echo "peak memory not measured")
    local dt=$(( $(date +%s) - start ))
    facts record "$FACTS" "$name" "$( (( rc == 0 )) && echo ok || echo failed)" "$dt" --peaks "$mem"
    if (( rc != 0 )); then
        SUMMARY+=("$(printf '%-16s FAILED %5ds  %s' "$name" "$dt" "$peak")")
        echo "<== $name: FAILED (exit $rc) after ${dt}s; $peak"
        report
        # Last, where a CI log shown in part still shows it.
        echo "phase $name failed (exit $rc); its whole output: $WORK/phase-$name.log"
        PYTHONPATH="$ROOT/lab/src" "$PY" -m sparkserve_lab.testing.phaselog "$WORK/phase-$name.log" || true
        exit "$rc"
    fi
    SUMMARY+=("$(printf '%-16s ok     %5ds  %s' "$name" "$dt" "$peak")")
    echo "<== $name: ok in ${dt}s; $peak"
}

report() {
    local total=$(( $(date +%s) - T0 ))
    echo
    echo "phase timings:"
    printf '  %s\n' "${SUMMARY[@]}"
    echo "  total            ${total}s"
    facts finish "$FACTS" "$total"
    echo "phase facts (JSON): $FACTS"
    echo
    # What the run leaves behind (images, build cache, .work) and how to remove it.
    env PATH="$VENV/bin:$PATH" SPARKSERVE_VENV="$VENV" bash scripts/ci/footprint.sh || true
}

setup() {
    [[ -x "$VENV/bin/python" ]] || "$PY" -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q --upgrade pip
    # the product, and the lab that proves and measures it beside it (lab/: its own package and command)
    "$VENV/bin/python" -m pip install -q -e ".[dev]" -e ./lab
}

lint() {
    "$VENV/bin/ruff" check src tests scripts lab
    "$VENV/bin/mypy"
}

unit() { SPARKSERVE_STRICT_SKIPS=1 "$VENV/bin/pytest" -q tests/unit lab/tests; }

fetch() { "$VENV/bin/sparkserve" sources fetch; }

# Both upstreams as git trees made from the sdists: every patch applies and re-exports byte for byte.
check_trees() { "$VENV/bin/sparkserve" patches check; }

# The installed form: the pinned vllm/flashinfer wheels (--no-deps) in a throwaway target.
check_site() {
    local site="$WORK/site"
    rm -rf "$site"
    "$VENV/bin/sparkserve" wheels install --target "$site"
    "$VENV/bin/sparkserve" patches check --no-tree --site "$site"
    "$VENV/bin/sparkserve" patches apply --site "$site"
    # A second apply must be a no-op detected from the manifest.
    "$VENV/bin/sparkserve" patches apply --site "$site" | tee "$WORK/apply2.txt"
    grep -q "already applied" "$WORK/apply2.txt"
    rm -rf "$site"
}

lock_check() {
    "$VENV/bin/sparkserve" lock --check
    # A release without a wheel for the lock's platform (the image installs wheels only) is named.
    if "$VENV/bin/sparkserve" lock --check-wheels tests/data/lock-without-arm64-wheels.txt \
            --platform linux-arm64 > "$WORK/lock-no-wheel.txt"; then
        echo "a lock without arm64 wheels passed the wheel check"; return 1
    fi
    # (quietly: a CI log viewer that looks for the word FAIL would stop at this expected refusal)
    grep -q "intel-cmplr-lib-ur==2024.2.1 has no wheel for aarch64" "$WORK/lock-no-wheel.txt"
    echo "as expected, the wheel check refuses a lock with a release without an aarch64 wheel (intel-cmplr-lib-ur)"
}

# The phases: this file's own (name:function), then each scripts/ci/NN-name.sh in order, with the venv on PATH.
OWN_PHASES=(setup:setup lint:lint unit:unit fetch:fetch patches-tree:check_trees patches-site:check_site
            lock:lock_check)
CI_SCRIPTS=(scripts/ci/[0-9][0-9]-*.sh)
ci_phase_name() { local name; name=$(basename "$1" .sh); echo "${name#[0-9][0-9]-}"; }

# Room on the disk for the phases that will run, before anything is written: a full disk would fail the
# first phase with a message about anything but the disk (lab/src/sparkserve_lab/testing/room.py).
to_run=()
for name in "${OWN_PHASES[@]%%:*}" $(for script in "${CI_SCRIPTS[@]}"; do ci_phase_name "$script"; done); do
    [[ " $SKIP_PHASES " == *" $name "* ]] || to_run+=("$name")
done
room() {
    PYTHONPATH="$ROOT/lab/src" "$PY" -m sparkserve_lab.testing.room --phases "${to_run[*]}" \
        --work "$ROOT/.work" "$ROOT" /var/lib/docker
}
room_rc=0; room || room_rc=$?
# Short (3) or refused (1) where earlier runs left Docker data: reclaim what they left, then check again.
if (( room_rc != 0 )) && [[ -d /var/lib/docker ]]; then
    bash scripts/ci/reclaim.sh || echo "warning: scripts/ci/reclaim.sh failed; checking the room again" >&2
    room_rc=0; room || room_rc=$?
fi
(( room_rc != 1 )) || exit 1

mkdir -p "$WORK"
facts start "$FACTS"
for entry in "${OWN_PHASES[@]}"; do
    phase "${entry%%:*}" "${entry#*:}"
done
for script in "${CI_SCRIPTS[@]}"; do
    [[ -e "$script" ]] || continue
    phase "$(ci_phase_name "$script")" env PATH="$VENV/bin:$PATH" SPARKSERVE_VENV="$VENV" bash "$script"
done
report
