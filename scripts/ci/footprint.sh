#!/usr/bin/env bash
# What the test command leaves on this machine (called by scripts/test.sh at the end; not a phase): every
# image and tag the CI phases make (CI_IMAGES of lib.sh), whatever their compose test projects left
# (containers, networks, volumes: CI_PROJECT_PREFIXES), the engine's build cache, the work folder; and how
# to remove them. SPARKSERVE_CI_CLEAN=1 removes all of it but the build cache, which is engine-wide (other
# projects' too): it is reported with the command that removes it (scripts/ci/reclaim.sh bounds it when a
# later run finds the disk short).
source "$(dirname "$0")/lib.sh"
cd "$CI_ROOT"

# Rebuilt by the next run; the venvs (.venv, .work/cpu-venv) and the sdist cache are kept.
WORK_INPUTS=("$CI_WORK/cpu-context" "$CI_WORK/reuse-context" "$CI_WORK/models" "$CI_WORK/jit-cache-copy")
CLEAN=${SPARKSERVE_CI_CLEAN:-0}

# Names (of containers, networks or volumes) that belong to a CI compose project.
ours() { grep -E "^($(IFS='|'; echo "${CI_PROJECT_PREFIXES[*]}"))[-_]" || true; }

echo "footprint of the test command on this machine:"
if [[ -x "$DOCKER" ]] && "$DOCKER" info >/dev/null 2>&1; then
    present=()
    for image in "${CI_IMAGES[@]}"; do
        size=$("$DOCKER" image inspect -f '{{.Size}}' "$image" 2>/dev/null) || continue
        present+=("$image")
        printf '  image %-34s %6d MB\n' "$image" $(( size / 1000000 ))
    done
    mapfile -t containers < <("$DOCKER" ps -a --format '{{.Names}}' | ours)
    mapfile -t networks < <("$DOCKER" network ls --format '{{.Name}}' | ours)
    mapfile -t volumes < <("$DOCKER" volume ls --format '{{.Name}}' | ours)
    for v in "${volumes[@]}"; do echo "  volume $v"; done
    for c in "${containers[@]}"; do echo "  container $c"; done
    for n in "${networks[@]}"; do echo "  network $n"; done
    dangling=$("$DOCKER" images -q -f dangling=true | wc -l)
    cache=$("$DOCKER" system df --format '{{.Type}}: {{.Size}} ({{.Reclaimable}} reclaimable)' | grep '^Build Cache' || true)
    echo "  engine build cache (all projects): ${cache#Build Cache: }"
    echo "  dangling images on the engine (all projects): $dangling"
    if [[ "$CLEAN" == 1 ]]; then
        (( ${#containers[@]} == 0 )) || "$DOCKER" rm -f "${containers[@]}" >/dev/null
        (( ${#networks[@]} == 0 )) || "$DOCKER" network rm "${networks[@]}" >/dev/null
        (( ${#volumes[@]} == 0 )) || "$DOCKER" volume rm "${volumes[@]}" >/dev/null
        (( ${#present[@]} == 0 )) || "$DOCKER" image rm "${present[@]}" >/dev/null
        echo "  removed: ${containers[*]} ${networks[*]} ${volumes[*]} ${present[*]}" | tr -s ' '
    else
        (( ${#present[@]} == 0 )) || echo "  remove the images: docker image rm ${present[*]}"
        (( ${#volumes[@]} == 0 )) || echo "  remove the volumes: docker volume rm ${volumes[*]}"
        (( ${#containers[@]} + ${#networks[@]} == 0 )) \
            || echo "  remove the rest: docker rm -f ${containers[*]}; docker network rm ${networks[*]}"
        echo "  (or all of these: SPARKSERVE_CI_CLEAN=1 scripts/test.sh, or SPARKSERVE_CI_CLEAN=1 bash scripts/ci/footprint.sh)"
    fi
    echo "  remove the build cache (engine-wide, other projects' too): docker builder prune -f"
else
    echo "  (no Docker engine answering: no images to report)"
fi
if [[ "$CLEAN" == 1 ]]; then
    rm -rf "${WORK_INPUTS[@]}"
fi
[[ -d "$CI_ROOT/.work" ]] && echo "  $(du -sh "$CI_ROOT/.work" 2>/dev/null | cut -f1) in .work/ (venvs, sdists, logs): rm -rf .work .venv"
echo "  the docker phases install docker.io and debootstrap when missing (root): apt-get remove docker.io debootstrap"
