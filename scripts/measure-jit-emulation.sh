#!/usr/bin/env bash
# How much an arm64 JIT module costs to build on an amd64 machine, three ways, for one module of
# docker/jit-modules.toml (default: a small one):
#   emulated  everything under qemu-user in the arm64 image (nvcc, cicc, ptxas and gcc all emulated)
#   split     the arm64 build's JIT stage: nvcc/cicc/ptxas native, host code by aarch64-linux-gnu-g++
#   native    the amd64 image, for reference (an amd64 module)
# Each build runs in a fresh workspace inside its image and reports its wall and CPU seconds (user +
# system of the compiler processes, from `jit prewarm`'s build info). Needs the images of CI's image
# phases (scripts/ci/20-image.sh, 22-image-arm64.sh):
#   scripts/measure-jit-emulation.sh [MODULE] [--out FILE.json]
set -euo pipefail
cd "$(dirname "$0")/.."

MODULE=decode-sink-bf16kv-full
OUT=""
while (( $# )); do
    case "$1" in
        --out) OUT=$2; shift 2 ;;
        -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
        *) MODULE=$1; shift ;;
    esac
done
DOCKER=${DOCKER:-/usr/bin/docker}
ARM64=${CI_IMAGE_ARM64:-sparkserve/serve:ci-arm64}
AMD64=${CI_IMAGE:-sparkserve/serve:ci}
SPLIT=sparkserve/jit-host-arm64:ci
for image in "$ARM64" "$AMD64" "$SPLIT"; do
    "$DOCKER" image inspect "$image" >/dev/null 2>&1 || { echo "no image $image: run the CI image phases first" >&2; exit 3; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

build() {  # build WAY IMAGE PLATFORM PYTHON_MODULE EXTRA...
    local way=$1 image=$2 platform=$3 entry=$4; shift 4
    mkdir -p "$work/$way"
    echo "== $way ($image, $platform): $MODULE" >&2
    "$DOCKER" run --rm --network none --platform "$platform" --user 0 -v "$work/$way:/out" \
        -e FLASHINFER_WORKSPACE_BASE=/out/ws --entrypoint python "$image" -m "$entry" jit prewarm \
        --modules /opt/sparkserve/docker/jit-modules.toml --module "$MODULE" --build-info /out/info.json "$@" >&2
}
build emulated "$ARM64" linux/arm64 sparkserve
build split "$SPLIT" linux/amd64 sparkserve.cli.imagebuild --target-arch arm64 --cross-link-dir /opt/cross/link
build native "$AMD64" linux/amd64 sparkserve

python3 - "$work" "$MODULE" "${OUT:-}" <<'EOF'
import json, pathlib, sys
work, module, out = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3]
rows = {}
for way in ("emulated", "split", "native"):
    info = json.loads((work / way / "info.json").read_text())
    b = info["built"][0]
    rows[way] = {"wall_s": b["seconds"], "cpu_s": b.get("cpu_seconds"), "cpu_arch": info.get("cpu_arch"),
                 "host_compiler": info.get("host_compiler"), "build_machine_arch": info.get("build_machine_arch")}
print(f"| {module} | wall s | CPU s | module arch | host code by |")
print("|---|---|---|---|---|")
for way, r in rows.items():
    print(f"| {way} | {r['wall_s']} | {r['cpu_s']} | {r['cpu_arch']} | {r['host_compiler']} on {r['build_machine_arch']} |")
ratio = rows["emulated"]["cpu_s"] / rows["split"]["cpu_s"]
print(f"emulated / split CPU: {ratio:.1f}x")
if out:
    pathlib.Path(out).write_text(json.dumps({"module": module, "ways": rows, "emulated_over_split_cpu": ratio},
                                            indent=1) + "\n")
EOF
