#!/usr/bin/env bash
# One sitting on a lent GPU host without a package index (docs/GPU.md section 11): the pinned stack from a
# wheel bundle, this checkout copied where the next call's upload of the working tree cannot touch it, jobs
# longer than one call in the background, and the records they write brought back under $OUT.
#
#   sitting.sh setup BUNDLE [WHEEL...]   install BUNDLE (a folder of wheels, or of the pieces p00, p01, ...
#                                        of one tar of wheels) and each WHEEL into $SITE, copy the checkout to
#                                        $REPO, patch $SITE, write the random-weight gpt-oss-120b checkpoint
#   sitting.sh install BUNDLE [WHEEL...] setup's first step alone (a second call changes nothing)
#   sitting.sh run COMMAND...            COMMAND in $REPO with the stack, in the foreground
#   sitting.sh start NAME COMMAND...     the same in the background, in a session of its own (it outlives
#                                        the call that started it); its output in $STATE/NAME.log
#   sitting.sh wait NAME [SECONDS]       wait for NAME while it runs, SECONDS at most (540), print its last
#                                        lines, then collect
#   sitting.sh collect                   the records written since setup (records.tgz, paths from the
#                                        checkout's root: `tar -xzf records.tgz` there) and the logs to $OUT
#
# SITE (/tmp/site), STATE (/tmp/sitting) and REPO ($STATE/repo) may be set; MODEL_DIR (/tmp/gpt-oss-120b) is
# where the random-weight matrices (lab/configs/matrix-*-random.yaml) look for the checkpoint. run, start,
# wait and collect need setup done first in the same host's lifetime (/tmp goes with the host).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
SITE=${SITE:-/tmp/site}
STATE=${STATE:-/tmp/sitting}
REPO=${REPO:-$STATE/repo}
MODEL_DIR=${MODEL_DIR:-/tmp/gpt-oss-120b}
PY=${PY:-python3}
# the installed stack first, then this checkout's packages (its copy under $REPO)
STACK_PATH=$SITE:$REPO/src:$REPO/lab/src

stack() {  # the command in $REPO with the installed stack and this checkout's packages first
    [[ -d $REPO ]] || { echo "no $REPO: run setup first" >&2; exit 2; }
    cd "$REPO"
    PYTHONPATH=$STACK_PATH PYTHONUNBUFFERED=1 "$@"
}

install_bundle() {  # install_bundle BUNDLE [WHEEL...]
    local bundle=$1 wheels pieces; shift
    if [[ -f $SITE/.sitting-installed ]]; then echo "stack already installed in $SITE"; return; fi
    wheels=$bundle
    mapfile -t pieces < <(find "$bundle" -maxdepth 1 -name 'p[0-9]*' | sort -V)
    if (( ${#pieces[@]} )); then
        wheels=$STATE/wheels
        rm -rf "$wheels" && mkdir -p "$wheels"
        echo "reassembling ${#pieces[@]} pieces"
        cat "${pieces[@]}" | tar -x -C "$wheels"
    fi
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" "$wheels"/*.whl "$@"
    rm -rf "$STATE/wheels"
    touch "$SITE/.sitting-installed"
    echo "installed $(find "$wheels" -maxdepth 1 -name '*.whl' 2>/dev/null | wc -l) wheels into $SITE"
}

copy_checkout() {  # the checkout, less the bundle when it lies inside it, to $REPO
    local bundle=$1 skip=()
    case $(cd "$bundle" && pwd)/ in "$ROOT"/*) skip=(--exclude "./${bundle#"$ROOT"/}") ;; esac
    rm -rf "$REPO" && mkdir -p "$REPO"
    tar -C "$ROOT" "${skip[@]}" -cf - . | tar -xf - -C "$REPO"
}

alive() {  # alive PID: running, not a zombie that nobody reaped (an orphan's new parent may never wait)
    local stat
    stat=$(cat "/proc/$1/stat" 2> /dev/null) || return 1
    stat=${stat##*) }
    [[ ${stat:0:1} != Z ]]
}

collect() {
    : "${OUT:?OUT: the folder whose files come back}"
    mkdir -p "$OUT"
    local new=()
    [[ -f $STATE/since ]] || { echo "no $STATE/since: run setup first" >&2; exit 2; }
    mapfile -t new < <(cd "$REPO" && find lab/results -mindepth 2 -maxdepth 2 -type d -newer "$STATE/since" | sort)
    if (( ${#new[@]} )); then
        printf 'record %s\n' "${new[@]}"
        tar -C "$REPO" -czf "$OUT/records.tgz" "${new[@]}"
    fi
    local logs=()
    mapfile -t logs < <(cd "$STATE" && find . -maxdepth 1 -name '*.log')
    if (( ${#logs[@]} )); then tar -C "$STATE" -czf "$OUT/logs.tgz" "${logs[@]}"; fi
}

cmd=${1:-}; shift || true
case $cmd in
    setup)
        bundle=${1:?setup BUNDLE [WHEEL...]}; shift
        bundle=$(cd "$bundle" && pwd)
        mkdir -p "$STATE"
        [[ -f $STATE/since ]] || touch "$STATE/since"  # what collect brings back: records made from here on
        install_bundle "$bundle" "$@"
        copy_checkout "$bundle"
        stack "$PY" -m sparkserve patches apply --site "$SITE"
        [[ -f $MODEL_DIR/config.json ]] || stack "$PY" -m sparkserve_lab.testing gptoss-dummy --out "$MODEL_DIR"
        ;;
    install)
        bundle=${1:?install BUNDLE [WHEEL...]}; shift
        mkdir -p "$STATE"
        install_bundle "$bundle" "$@"
        ;;
    run)
        stack "$@"
        ;;
    start)
        name=${1:?start NAME COMMAND...}; shift
        (( $# )) || { echo "start $name: no command" >&2; exit 2; }
        [[ -d $REPO ]] || { echo "no $REPO: run setup first" >&2; exit 2; }
        cd "$REPO"
        # setsid in the job itself (not a function's subshell) so that the pid kept is the job's
        PYTHONPATH=$STACK_PATH PYTHONUNBUFFERED=1 setsid nohup "$@" > "$STATE/$name.log" 2>&1 < /dev/null &
        echo $! > "$STATE/$name.pid"
        echo "$name started (pid $(cat "$STATE/$name.pid")), output in $STATE/$name.log"
        ;;
    wait)
        name=${1:?wait NAME [SECONDS]}
        pid=$(cat "$STATE/$name.pid")
        end=$((SECONDS + ${2:-540}))
        while alive "$pid" && (( SECONDS < end )); do sleep 5; done
        tail -n 30 "$STATE/$name.log"
        if alive "$pid"; then echo "$name: still running"; else echo "$name: ended"; fi
        collect
        ;;
    collect)
        collect
        ;;
    *)
        sed -n 2,21p "$0"
        [[ $cmd == -h || $cmd == --help ]]
        ;;
esac
