# A registry on this machine for the prebuilt-image path (compose.pull.yml, Ansible's serve_image_source:
# pull; docs/RELEASE.md): Debian's distribution registry (docker-registry) on a free loopback port, its
# storage in .work. Sourced after lib.sh by the phases that pull (scripts/ci/30-serve-cpu.sh,
# 50-ansible.sh); each one starts its own registry process on the one storage folder. The serve-cpu phase
# leaves what it pushed there for the ansible phase of the same test command, whose push of the same
# image then finds every layer there (the engine remembers each layer's compressed digest and asks the
# registry before it compresses and uploads ~3 GB again: minutes on 2 cores, seconds the second time); the
# ansible phase, or a serve-cpu phase run on its own, removes the storage with everything pushed to it.
# Docker pulls from 127.0.0.0/8 over plain HTTP without configuration (an insecure registry by default),
# so neither the engine nor the hosts it serves need a certificate.

REGISTRY_PID="" REGISTRY="" REGISTRY_DIR="$CI_WORK/registry"

registry_start() {  # registry_start: sets REGISTRY (127.0.0.1:PORT)
    local dir=$REGISTRY_DIR port
    apt_install docker-registry
    mkdir -p "$dir/storage"
    port=$("$CI_VENV/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    cat > "$dir/config.yml" <<EOF
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: $dir/storage
  delete:
    enabled: true
http:
  addr: 127.0.0.1:$port
EOF
    docker-registry serve "$dir/config.yml" > "$dir/registry.log" 2>&1 &
    REGISTRY_PID=$!
    for _ in $(seq 1 50); do
        if curl -fsS "http://127.0.0.1:$port/v2/" >/dev/null 2>&1; then
            REGISTRY="127.0.0.1:$port"
            log "registry at $REGISTRY (storage $dir/storage)"
            return 0
        fi
        sleep 0.2
    done
    log "the registry did not answer on 127.0.0.1:$port:"; tail -20 "$dir/registry.log" >&2
    return 1
}

# Stops the registry, removes this engine's references to its images (their layers stay with the images
# they came from) and, unless told to keep it, the storage with all that was pushed to it.
registry_stop() {  # registry_stop [keep]
    if [[ -n "$REGISTRY" ]]; then
        local refs
        refs=$("$DOCKER" images --digests --format '{{.Repository}}:{{.Tag}} {{.Repository}}@{{.Digest}}' \
            | tr ' ' '\n' | grep "^$REGISTRY/" | grep -v -e ':<none>$' -e '@<none>$' || true)
        [[ -z "$refs" ]] || "$DOCKER" image rm $refs >/dev/null 2>&1 || true
    fi
    if [[ -n "$REGISTRY_PID" ]]; then
        kill "$REGISTRY_PID" 2>/dev/null || true
        wait "$REGISTRY_PID" 2>/dev/null || true
    fi
    [[ "${1:-}" == keep ]] || rm -rf "$REGISTRY_DIR"
    REGISTRY_PID="" REGISTRY=""
}

# registry_push IMAGE NAME: pushes IMAGE as $REGISTRY/NAME, removes that name from this engine again (the
# next use pulls it) and prints the reference by digest.
registry_push() {
    local image="$REGISTRY/$2" digest
    "$DOCKER" tag "$1" "$image"
    "$DOCKER" push "$image" >/dev/null
    digest=$("$DOCKER" image inspect -f '{{range .RepoDigests}}{{println .}}{{end}}' "$image" \
        | sed -n "s|^${image%:*}@||p" | head -1)
    [[ "$digest" == sha256:* ]] || { log "no digest for $image after the push"; return 1; }
    # the tag and the digest reference the push added (with either left, nothing would be pulled); the
    # engine drops the second with the first when no other tag of that repository is left
    "$DOCKER" image rm "$image" >/dev/null
    if "$DOCKER" image inspect "${image%:*}@$digest" >/dev/null 2>&1; then
        "$DOCKER" image rm "${image%:*}@$digest" >/dev/null
    fi
    echo "$image@$digest"
}
