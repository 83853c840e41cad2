#!/usr/bin/env bash
# What the test command leaves on this machine (called by scripts/test.sh at the end; not a phase):
# the images the CI phases built, the engine's build cache, the work folder; and how to remove them.
# SPARKSERVE_CI_CLEAN=1 removes the images and the work folder's build inputs now. The build cache is
# engine-wide (other projects' too): it is reported with the command that removes it, never pruned here.
source "$(dirname "$0")/lib.sh"
cd "$CI_ROOT"

IMAGES=("$CI_IMAGE" "$CI_CPU_IMAGE" "$CI_BASE_TRIXIE" "$CI_BASE_BOOKWORM")
# Rebuilt by the next run; the venvs (.venv, .work/cpu-venv) and the sdist cache are kept.
WORK_INPUTS=("$CI_WORK/cpu-context" "$CI_WORK/reuse-context" "$CI_WORK/models" "$CI_WORK/jit-cache-copy")

echo "footprint of the test command on this machine:"
if [[ -x "$DOCKER" ]] && "$DOCKER" info >/dev/null 2>&1; then
    present=()
    for image in "${IMAGES[@]}"; do
        size=$("$DOCKER" image inspect -f '{{.Size}}' "$image" 2>/dev/null) || continue
        present+=("$image")
        printf '  image %-34s %6d MB\n' "$image" $(( size / 1000000 ))
    done
    dangling=$("$DOCKER" images -q -f dangling=true | wc -l)
    cache=$("$DOCKER" system df --format '{{.Type}}: {{.Size}} ({{.Reclaimable}} reclaimable)' | grep '^Build Cache' || true)
    echo "  engine build cache (all projects): ${cache#Build Cache: }"
    echo "  dangling images on the engine (all projects): $dangling"
    if [[ "${SPARKSERVE_CI_CLEAN:-0}" == 1 && ${#present[@]} -gt 0 ]]; then
        "$DOCKER" image rm "${present[@]}" >/dev/null && echo "  removed: ${present[*]}"
    elif (( ${#present[@]} > 0 )); then
        echo "  remove the images: docker image rm ${present[*]}   (or SPARKSERVE_CI_CLEAN=1 scripts/test.sh)"
    fi
    echo "  remove the build cache (engine-wide, other projects' too): docker builder prune -f"
else
    echo "  (no Docker engine answering: no images to report)"
fi
if [[ "${SPARKSERVE_CI_CLEAN:-0}" == 1 ]]; then
    rm -rf "${WORK_INPUTS[@]}"
fi
[[ -d "$CI_ROOT/.work" ]] && echo "  $(du -sh "$CI_ROOT/.work" 2>/dev/null | cut -f1) in .work/ (venvs, sdists, logs): rm -rf .work .venv"
echo "  the docker phases install docker.io and debootstrap when missing (root): apt-get remove docker.io debootstrap"
