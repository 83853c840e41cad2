#!/usr/bin/env bash
# CI phase: the Ansible deployment (ansible/). ansible-lint; the filter unit tests on recorded Spark
# outputs; molecule `default` (a real deploy of the CPU serving stand-in on a container host through this
# machine's Docker engine: converge, idempotence, verify, the failing-gate rollback); molecule `cluster`
# (two container hosts: per-host network settings from each host's own facts and a two-rank gloo
# all-reduce between them; the image pulled by digest from a registry on this machine, serve_image_source:
# pull, and its build checked against this checkout's); the bad inputs, each failing before anything
# changes.
# Tooling: ansible/requirements.lock (hash-locked) in .work/ansible-venv. Everything it creates on the
# engine is named ans-*, except the CI images it reuses (sparkserve/serve-cpu:ci, sparkserve/debian:*).
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/registry.sh"
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
    for name in ans-mol-spark ans-mol-hub ans-mol-head ans-mol-worker ans-bad-target ans-bad-port-holder \
                ans-bad-nodocker; do
        "$DOCKER" rm -f "$name" >/dev/null 2>&1 || true
    done
    "$DOCKER" network rm ans-mol-link ans-mol-lan >/dev/null 2>&1 || true
    local tags
    tags=$("$DOCKER" images --format '{{.Repository}}:{{.Tag}}' | grep -E '^ans-(molecule|bad)/release:' || true)
    [[ -z "$tags" ]] || "$DOCKER" image rm $tags >/dev/null 2>&1 || true
}
cleanup() {
    local rc=$? pid
    for pid in ${venv_pid:-} ${default_pid:-}; do kill_tree "$pid"; done
    remove_leftovers
    registry_stop
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

# COMMAND with a ~ of its own: the jobs beside molecule `default` must not write its caches (molecule,
# ansible-compat) or Ansible's tmp, where default's verify looks for the token.
in_home() {  # in_home NAME COMMAND...
    local home="$ANS_WORK/home-$1"; shift
    mkdir -p "$home"
    ( export HOME="$home" ANSIBLE_HOME="$home/.ansible" XDG_CACHE_HOME="$home/.cache"; "$@" )
}

# The venv (pip) beside the images, which use Docker and $CI_VENV only.
venv_log="$ANS_WORK/ansible-venv.log"
beside "$venv_log" ansible-venv ansible_venv
venv_pid=$BESIDE_PID
ensure_docker
ensure_compose
remove_leftovers
timed base-bookworm ensure_base_image bookworm "$CI_BASE_BOOKWORM"
timed cpu-image ensure_cpu_image
# The tests use their own tag of it: other jobs on this engine may rebuild the shared tag meanwhile.
"$DOCKER" tag "$CI_CPU_IMAGE" "$CI_ANS_SERVE_IMAGE"
timed tiny-model ensure_tiny_model "$ANS_HOST_DIR/tiny-model"
timed target-image target_image
# molecule `cluster` pulls the CPU image (serve_image_source: pull) from a registry of this phase's own
# (its layers stay on the engine with the CPU image: the pull takes the manifest and config by digest)
registry_start
ANS_PULL_IMAGE=$(registry_push "$CI_ANS_SERVE_IMAGE" sparkserve/serve-cpu:ci)
export ANS_PULL_IMAGE
log "molecule cluster pulls $ANS_PULL_IMAGE"
joined "$venv_pid" "$venv_log" "the ansible venv, built beside the images:" \
    || { log "the ansible venv failed (above)"; exit 1; }
venv_pid=
export PATH="$AVENV/bin:$PATH"
timed unit-tests "$AVENV/bin/python" -m pytest -q -p no:cacheprovider tests/ansible/test_filters.py tests/ansible/test_docs.py tests/ansible/test_secrets.py \
    tests/ansible/test_serve_role.py
timed ansible-lint bash -c 'cd ansible && ansible-lint'

# molecule `default` (most of the phase, mostly vLLM starting) in the background; the bad inputs, then
# molecule `cluster`, beside it: containers, projects, ports, model caches and ~ of their own. All three
# run to the end; the phase fails if one failed.
default_log="$ANS_WORK/molecule-default.log"
beside "$default_log" molecule-default molecule default
default_pid=$BESIDE_PID
default_rc=0 bad_rc=0 cluster_rc=0
timed bad-inputs in_home side-bad "$AVENV/bin/python" -m pytest -q -p no:cacheprovider \
    tests/ansible/test_bad_inputs.py || bad_rc=$?
timed molecule-cluster in_home side-cluster molecule cluster || cluster_rc=$?
joined "$default_pid" "$default_log" "molecule default, run beside the bad inputs and molecule cluster:" \
    || default_rc=$?
default_pid=
(( bad_rc == 0 )) || log "the bad inputs failed (exit $bad_rc, above)"
(( cluster_rc == 0 )) || log "molecule cluster failed (exit $cluster_rc, above)"
(( default_rc == 0 )) || log "molecule default failed (exit $default_rc, above)"
(( bad_rc == 0 && cluster_rc == 0 && default_rc == 0 )) || exit 1
