#!/usr/bin/env bash
# Build the serving image for a DGX Spark (linux/arm64) or for this machine, and optionally hand it to a
# Spark, so that the Spark compiles nothing:
#
#   scripts/build-image.sh --platform linux/arm64                     # on an amd64 machine: the Spark's image
#   scripts/build-image.sh --platform linux/arm64 --ship user@spark   # ... then `docker load` it on the Spark
#   scripts/build-image.sh --platform linux/arm64 --save serve-arm64.tar
#   scripts/build-image.sh --check-emulation                          # only: can this machine run arm64 code?
#   scripts/build-image.sh --push REPO                                # a release: both platforms, pushed
#   scripts/build-image.sh --push REPO --platform linux/arm64         # one platform's image: REPO:<tag>-arm64
#   scripts/build-image.sh --push REPO --platform linux/arm64 --no-build   # push the image built before
#   scripts/build-image.sh --merge REPO                               # REPO:<tag> from the -arm64/-amd64 images
#
# Other arguments go to `docker build` (e.g. --build-arg MAX_JOBS=2). The image is
# localhost/sparkserve/serve:latest, the name docker-compose.yml serves; on the Spark `docker compose up
# serve` then starts it without building. An arm64 image built on an amd64 machine compiles its JIT
# modules natively there (device code with nvcc, host code with a cross compiler) and emulates only a few
# steps of the runtime stage (docs/IMAGE.md, "The arm64 image"): that needs qemu-user and binfmt_misc.
# Every build carries the labels of its provenance (src/sparkserve/provenance.py: the tag, which says the
# pins, and a digest of the pins and patch series). --push (docs/RELEASE.md) builds each platform (default
# linux/arm64,linux/amd64), checks that the image is this checkout's build, pushes it as REPO:<tag>-<arch>
# and, for more than one platform, the multi-platform REPO:<tag> over them (docker buildx imagetools); it
# prints the reference by digest that compose.pull.yml and Ansible's serve_image take.
set -euo pipefail
cd "$(dirname "$0")/.."

IMAGE=localhost/sparkserve/serve:latest
platform="" ship="" save="" check_only=0 push="" merge="" build=1
args=()
while (( $# )); do
    case "$1" in
        --platform) platform=$2; shift 2 ;;
        --ship) ship=$2; shift 2 ;;
        --save) save=$2; shift 2 ;;
        --check-emulation) check_only=1; platform=${platform:-linux/arm64}; shift ;;
        --push) push=$2; shift 2 ;;
        --merge) merge=$2; shift 2 ;;
        --no-build) build=0; shift ;;
        -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
        *) args+=("$1"); shift ;;
    esac
done

machine_platform() {
    case "$(uname -m)" in
        x86_64) echo linux/amd64 ;;
        aarch64|arm64) echo linux/arm64 ;;
        *) echo "linux/$(uname -m)" ;;
    esac
}

# Another arch's binaries run here only through a binfmt_misc entry for qemu-user with the F flag (the
# interpreter is opened when registered, so it works inside containers). Exit 3 says what to install.
check_emulation() {  # check_emulation PLATFORM
    local want=$1 qemu entry
    [[ "$want" == "$(machine_platform)" ]] && return 0
    case "$want" in
        linux/arm64) qemu=aarch64 ;;
        linux/amd64) qemu=x86_64 ;;
        *) echo "build-image: no emulation known for $want" >&2; return 3 ;;
    esac
    entry=/proc/sys/fs/binfmt_misc/qemu-$qemu
    if [[ ! -e /proc/sys/fs/binfmt_misc/status ]]; then
        echo "build-image: building $want on $(machine_platform) needs binfmt_misc, which is not mounted." >&2
        echo "  sudo mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc" >&2
        echo "  (then, if $entry is missing: sudo apt-get install qemu-user-static binfmt-support)" >&2
        return 3
    fi
    if [[ ! -e "$entry" ]] || ! grep -q '^enabled' "$entry"; then
        echo "build-image: building $want on $(machine_platform) needs qemu-user for $qemu registered in" >&2
        echo "  binfmt_misc: sudo apt-get install qemu-user-static binfmt-support" >&2
        echo "  (qemu 8 and newer register through systemd-binfmt: sudo systemctl restart systemd-binfmt;" >&2
        echo "  without systemd: sudo sh -c 'grep ^: /usr/lib/binfmt.d/qemu-$qemu.conf > /proc/sys/fs/binfmt_misc/register';" >&2
        echo "  elsewhere: docker run --privileged --rm tonistiigi/binfmt --install ${want#linux/})" >&2
        return 3
    fi
    if ! grep -q '^flags:.*F' "$entry"; then
        echo "build-image: $entry is registered without the F flag: containers cannot use it." >&2
        echo "  Re-register it with F (Debian's qemu-user-static does): sudo update-binfmts --enable qemu-$qemu" >&2
        return 3
    fi
    # The build emulates only apt, useradd and a small Python step; running torch (the image's tests) needs
    # a recent qemu: 7.2 (Debian 12) hangs in its import, 10.0 works (seen on this project's CI machines).
    local interp major
    interp=$(sed -n 's/^interpreter //p' "$entry")
    major=$("$(readlink -f "$interp")" --version 2>/dev/null | sed -n 's/.*version \([0-9]*\)\..*/\1/p' | head -1)
    if (( ${major:-0} < 10 )); then
        echo "build-image: note: $interp is qemu ${major:-of unknown version}: enough to build; to run torch in" >&2
        echo "  the image under emulation use qemu 10 or newer (Debian: bookworm-backports' qemu-user-static)" >&2
    fi
}

# The provenance rules of this checkout (standard library only: nothing needs to be installed).
provenance() { python3 "$PWD/src/sparkserve/provenance.py" "$@"; }
provenance tag >/dev/null || { echo "build-image: cannot derive the release tag (above)" >&2; exit 2; }

# The multi-platform index over the one-platform images a release pushed (the release workflow's last job).
merge_index() {  # merge_index REPO PLATFORM...: prints REPO:<tag>@sha256:...
    local repo=$1 tag digest p sources=()
    shift
    tag=$(provenance tag)
    for p in "$@"; do sources+=("$repo:$(provenance tag --platform "$p")"); done
    docker buildx version >/dev/null 2>&1 || {
        echo "build-image: the multi-platform index needs docker buildx (Docker's docker-buildx-plugin)" >&2; return 3; }
    echo "build-image: $repo:$tag over ${sources[*]}" >&2
    docker buildx imagetools create -t "$repo:$tag" "${sources[@]}" >&2
    digest=$(docker buildx imagetools inspect "$repo:$tag" --format '{{json .Manifest}}' \
        | python3 -c 'import json, sys; print(json.load(sys.stdin)["digest"])')
    echo "$repo:$tag@$digest"
}
if [[ -n "$merge" ]]; then
    ref=$(merge_index "$merge" linux/arm64 linux/amd64)
    echo "build-image: pushed; serve it with SPARKSERVE_IMAGE=$ref (docs/RELEASE.md)"
    exit 0
fi

platform=${platform:-$( [[ -n "$push" ]] && echo linux/arm64,linux/amd64 || machine_platform )}
IFS=, read -r -a platforms <<< "$platform"
if (( ${#platforms[@]} > 1 )) && [[ -z "$push" ]]; then
    echo "build-image: one --platform at a time without --push (the local image holds one)" >&2; exit 2
fi
if (( ! build )) && { [[ -z "$push" ]] || (( ${#platforms[@]} > 1 )); }; then
    echo "build-image: --no-build pushes the image built before: give --push REPO and one --platform" >&2; exit 2
fi
for p in "${platforms[@]}"; do check_emulation "$p" || exit $?; done
if (( check_only )); then
    echo "build-image: this $(machine_platform) machine can build $platform images"
    exit 0
fi
labels=()
while IFS= read -r label; do labels+=(--label "$label"); done < <(provenance labels)

# The image's build is this checkout's (what compose's image-check gate and Ansible check before serving),
# by the checkout's rules piped into the image's interpreter, and it is of the platform asked for.
check_image() {  # check_image IMAGE PLATFORM
    local got
    got=$(docker image inspect -f '{{.Os}}/{{.Architecture}}' "$1")
    [[ "$got" == "$2" ]] || { echo "build-image: $1 is $got, not $2" >&2; return 1; }
    docker run --rm -i --network none --platform "$2" --entrypoint /opt/venv/bin/python \
        --env "SPARKSERVE_IMAGE_REF=$1" "$1" -I - check-image --image-root /opt/sparkserve \
        --expected-json "$(provenance record)" < src/sparkserve/provenance.py
}

build_one() {  # build_one PLATFORM TAG...
    local p=$1; shift
    local tags=() t
    for t in "$@"; do tags+=(-t "$t"); done
    echo "build-image: $* for $p (started $(date -u +%H:%M:%SZ))"
    local start
    start=$(date +%s)
    DOCKER_BUILDKIT=1 docker build --platform "$p" \
        --build-arg "SPARKSERVE_COMMIT=$(git rev-parse HEAD 2>/dev/null || echo unknown)" \
        "${labels[@]}" "${tags[@]}" "${args[@]}" .
    echo "build-image: built in $(( $(date +%s) - start )) s"
}

if [[ -n "$push" ]]; then
    refs=()
    for p in "${platforms[@]}"; do
        ref="$push:$(provenance tag --platform "$p")"
        if (( build )); then
            build_one "$p" "$ref"
            check_image "$ref" "$p"
        else  # (checked before it gets the registry's name: a refused image is left as it was)
            check_image "$IMAGE" "$p"
            docker tag "$IMAGE" "$ref"
        fi
        docker push "$ref"
        refs+=("$ref@$(docker image inspect -f '{{range .RepoDigests}}{{println .}}{{end}}' "$ref" \
            | sed -n "s|^$push@||p" | head -1)")
    done
    printf 'build-image: pushed %s\n' "${refs[@]}"
    if (( ${#platforms[@]} > 1 )); then
        ref=$(merge_index "$push" "${platforms[@]}")
        echo "build-image: pushed; serve it with SPARKSERVE_IMAGE=$ref (docs/RELEASE.md)"
    fi
    exit 0
fi

build_one "$platform" "$IMAGE"

if [[ -n "$save" ]]; then
    docker save "$IMAGE" -o "$save"
    echo "build-image: saved to $save; on the Spark: docker load -i $(basename "$save")"
fi
if [[ -n "$ship" ]]; then
    echo "build-image: docker save | ssh $ship docker load"
    docker save "$IMAGE" | ssh "$ship" docker load
    echo "build-image: on $ship: docker compose up serve (the image is there; nothing is built)"
fi
