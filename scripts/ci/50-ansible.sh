#!/usr/bin/env bash
# CI phase: the Ansible deployment (ansible/). ansible-lint; the filter unit tests on recorded Spark
# outputs; molecule `default` (a real deploy of the CPU serving stand-in on a container host through this
# machine's Docker engine: converge, idempotence, verify, the failing-gate rollback); molecule `cluster`
# (two container hosts: per-host network settings from each host's own facts and a two-rank gloo
# all-reduce between them); the bad inputs, each failing before anything changes.
# Tooling: ansible/requirements.lock (hash-locked) in .work/ansible-venv. Everything it creates on the
# engine is named ans-*, except the CI images it reuses (sparkserve/serve-cpu:ci, sparkserve/debian:*).
source "$(dirname "$0")/lib.sh"
cd "$CI_ROOT"

AVENV="$CI_ROOT/.work/ansible-venv"
ANS_WORK="$CI_WORK/ansible"
TARGET_IMAGE=$CI_ANS_TARGET_IMAGE   # the container hosts (tests/ansible/target/Dockerfile)
PY="${PYTHON311:-$(command -v python3.11 || command -v python3)}"
export ANS_HOST_DIR="$ANS_WORK/host"   # mounted at the same path in the target containers
# molecule and ansible-lint write under ~; keep them in .work
export HOME="$ANS_WORK/home" ANSIBLE_HOME="$ANS_WORK/home/.ansible" XDG_CACHE_HOME="$ANS_WORK/home/.cache"
export ANSIBLE_FORCE_COLOR=0 PY_COLORS=0 ANSIBLE_NOCOLOR=1
mkdir -p "$ANS_HOST_DIR" "$HOME"
: > "$CI_WORK/step-times.txt"

# What the tests leave on the engine when they stop half-way: their compose projects, release tags, targets.
remove_leftovers() {
    local ids
    for project in ans-molecule ans-molecule-dev ans-molecule-cluster ans-bad; do
        ids=$("$DOCKER" ps -aq --filter "label=com.docker.compose.project=$project" || true)
        [[ -z "$ids" ]] || "$DOCKER" rm -f $ids >/dev/null 2>&1 || true
        "$DOCKER" network rm "${project}_default" >/dev/null 2>&1 || true
        # every volume of the project (the model cache, the state and cache volumes, the empty /models)
        ids=$("$DOCKER" volume ls -q --filter "label=com.docker.compose.project=$project" || true)
        [[ -z "$ids" ]] || "$DOCKER" volume rm $ids >/dev/null 2>&1 || true
    done
    for name in ans-mol-spark ans-mol-hub ans-mol-head ans-mol-worker ans-bad-target ans-bad-port-holder; do
        "$DOCKER" rm -f "$name" >/dev/null 2>&1 || true
    done
    "$DOCKER" network rm ans-mol-link ans-mol-lan >/dev/null 2>&1 || true
    local tags
    tags=$("$DOCKER" images --format '{{.Repository}}:{{.Tag}}' | grep -E '^ans-(molecule|bad)/release:' || true)
    [[ -z "$tags" ]] || "$DOCKER" image rm $tags >/dev/null 2>&1 || true
}
cleanup() {
    local rc=$?
    remove_leftovers
    stop_docker
    echo "ansible phase step times:"
    sed 's/^/  /' "$CI_WORK/step-times.txt"
    exit "$rc"
}
trap cleanup EXIT

ansible_venv() {
    local stamp
    stamp=$(sha256sum ansible/requirements.lock | cut -d' ' -f1)
    if [[ -x "$AVENV/bin/ansible-playbook" && "$(cat "$AVENV/.stamp" 2>/dev/null)" == "$stamp" ]]; then
        log "ansible venv reused: $AVENV"
        return 0
    fi
    rm -rf "$AVENV"
    "$PY" -m venv "$AVENV"
    "$AVENV/bin/python" -m pip install -q --disable-pip-version-check --require-hashes \
        -r ansible/requirements.lock 2>&1 | grep -v '^WARNING: Location' || true
    "$AVENV/bin/ansible-playbook" --version | head -1
    echo "$stamp" > "$AVENV/.stamp"
}

target_image() {
    local ctx="$ANS_WORK/target-context"
    rm -rf "$ctx" && mkdir -p "$ctx"
    cp tests/ansible/target/Dockerfile "$ctx/"
    cp "$CI_WORK/tools/compose/docker-compose" "$ctx/docker-compose"
    "$DOCKER" build -q --network host --build-arg "BASE_IMAGE=$CI_BASE_BOOKWORM" -t "$TARGET_IMAGE" "$ctx" >/dev/null
}

molecule() { (cd ansible && "$AVENV/bin/molecule" test -s "$1"); }

timed ansible-venv ansible_venv
export PATH="$AVENV/bin:$PATH"
ensure_docker
ensure_compose
remove_leftovers
timed base-bookworm ensure_base_image bookworm "$CI_BASE_BOOKWORM"
timed cpu-image ensure_cpu_image
# The tests use their own tag of it: other jobs on this engine may rebuild the shared tag meanwhile.
"$DOCKER" tag "$CI_CPU_IMAGE" "$CI_ANS_SERVE_IMAGE"
timed tiny-model ensure_tiny_model "$ANS_HOST_DIR/tiny-model"
timed target-image target_image
timed unit-tests "$AVENV/bin/python" -m pytest -q -p no:cacheprovider tests/ansible/test_filters.py tests/ansible/test_docs.py tests/ansible/test_secrets.py
timed ansible-lint bash -c 'cd ansible && ansible-lint'
timed molecule-default molecule default
timed molecule-cluster molecule cluster
timed bad-inputs "$AVENV/bin/python" -m pytest -q -p no:cacheprovider tests/ansible/test_bad_inputs.py
