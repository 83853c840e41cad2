#!/usr/bin/env bash
# Room on a machine whose Docker data earlier runs left (called by scripts/test.sh when the room check finds
# the disk short of a cold run; not a phase). BuildKit's cache grows with every changed input of a build
# (the phases remove the images their builds replace, but a stopped run can leave one untagged). This
# removes the untagged images and the build cache beyond SPARKSERVE_CI_KEEP_CACHE (default 30GB: the newest
# records stay, so a warm run stays warm). Only where Docker is installed; an engine it starts, it stops.
source "$(dirname "$0")/lib.sh"
KEEP="${SPARKSERVE_CI_KEEP_CACHE:-30GB}"

if [[ ! -x "$DOCKER" ]] || ! command -v dockerd >/dev/null; then
    log "reclaim: Docker is not installed; nothing of earlier runs to remove"
    exit 0
fi
free_gb() { df -P -B1G "$CI_ROOT" | awk 'NR == 2 {print $4}'; }
before=$(free_gb)
start_docker
trap stop_docker EXIT
log "reclaim: the untagged images (replaced by later builds), then the build cache beyond $KEEP"
"$DOCKER" image prune -f | tail -1
"$DOCKER" builder prune -f --keep-storage "$KEEP" | tail -1
log "reclaim: ${before} GB free before, $(free_gb) GB after"
