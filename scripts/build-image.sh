#!/usr/bin/env bash
# Build the serving image for a DGX Spark (linux/arm64) or for this machine, and optionally hand it to a
# Spark, so that the Spark compiles nothing:
#
#   scripts/build-image.sh --platform linux/arm64                     # on an amd64 machine: the Spark's image
#   scripts/build-image.sh --platform linux/arm64 --ship user@spark   # ... then `docker load` it on the Spark
#   scripts/build-image.sh --platform linux/arm64 --save serve-arm64.tar
#   scripts/build-image.sh --check-emulation                          # only: can this machine run arm64 code?
#
# Other arguments go to `docker build` (e.g. --build-arg MAX_JOBS=2). The image is
# localhost/sparkserve/serve:latest, the name docker-compose.yml serves; on the Spark `docker compose up
# serve` then starts it without building. An arm64 image built on an amd64 machine compiles its JIT
# modules natively there (device code with nvcc, host code with a cross compiler) and emulates only a few
# steps of the runtime stage (docs/IMAGE.md, "The arm64 image"): that needs qemu-user and binfmt_misc.
set -euo pipefail
cd "$(dirname "$0")/.."

IMAGE=localhost/sparkserve/serve:latest
platform="" ship="" save="" check_only=0
args=()
while (( $# )); do
    case "$1" in
        --platform) platform=$2; shift 2 ;;
        --ship) ship=$2; shift 2 ;;
        --save) save=$2; shift 2 ;;
        --check-emulation) check_only=1; platform=${platform:-linux/arm64}; shift ;;
        -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
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

platform=${platform:-$(machine_platform)}
check_emulation "$platform" || exit $?
if (( check_only )); then
    echo "build-image: this $(machine_platform) machine can build $platform images"
    exit 0
fi

echo "build-image: $IMAGE for $platform (started $(date -u +%H:%M:%SZ))"
start=$(date +%s)
DOCKER_BUILDKIT=1 docker build --platform "$platform" \
    --build-arg "SPARKSERVE_COMMIT=$(git rev-parse HEAD 2>/dev/null || echo unknown)" \
    -t "$IMAGE" "${args[@]}" .
echo "build-image: built in $(( $(date +%s) - start )) s"

if [[ -n "$save" ]]; then
    docker save "$IMAGE" -o "$save"
    echo "build-image: saved to $save; on the Spark: docker load -i $(basename "$save")"
fi
if [[ -n "$ship" ]]; then
    echo "build-image: docker save | ssh $ship docker load"
    docker save "$IMAGE" | ssh "$ship" docker load
    echo "build-image: on $ship: docker compose up serve (the image is there; nothing is built)"
fi
