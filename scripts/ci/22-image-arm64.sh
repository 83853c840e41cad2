#!/usr/bin/env bash
# CI phase: the DGX Spark's image, linux/arm64, built from the same Dockerfile on this amd64 machine and
# tested under emulation (qemu-user through binfmt_misc), without a GPU.
#   - the build stages run natively (the arm64 wheels installed as files, the patches applied to them, the
#     JIT modules compiled by the amd64 nvcc with an aarch64 cross compiler for their host code); only the
#     runtime stage's few commands and the checks below run emulated;
#   - in the image: imports, provenance (sparkserve.serving.provenance: linux/arm64), the patch manifest,
#     every prewarmed module loaded as serving loads it (`jit load-check`: arm64 ELF, FlashInfer's AOT
#     artifact, every symbol bound), the serving user, the entrypoint's refusals, the vLLM command of each
#     Spark profile (`--print-flags`, kept in $CI_WORK/arm64/);
#   - on the host: the patched files against the amd64 image's (where the gate tests ran), the SASS rules
#     on the arm64 modules, and their CUDA ELFs against the amd64 image's (built by 20-image.sh): identical,
#     or identical but for the module id (docs/IMAGE.md);
#   - beside those checks, the amd64 image's evidence (scripts/ci/image-evidence.sh).
#   The JIT modules: one per rule of docker/jit-sass.toml and docker/jit-unbound.toml (4 of the 11 `ci`
#   modules, so the cold phase fits CI's time); the whole `ci` set, as the amd64 image has it:
#   CI_JIT_ARM64_MODULES= scripts/ci/22-image-arm64.sh (docs/IMAGE.md has its recorded result).
source "$(dirname "$0")/lib.sh"
cd "$CI_ROOT"

JIT_SET=${CI_JIT_SET:-ci}
JIT_MODULES=${CI_JIT_ARM64_MODULES-xqa-fp8kv-swa xqa-bf16kv-full prefill-sink-fp8kv-swa decode-sink-bf16kv-full}
OUT="$CI_WORK/arm64"
trap 'stop_docker' EXIT
rm -rf "$OUT" && mkdir -p "$OUT"

ensure_docker
timed arm64-emulation ensure_arm64_emulation
timed base-trixie ensure_base_image trixie "$CI_BASE_TRIXIE"
timed base-trixie-arm64 ensure_base_image trixie "$CI_BASE_TRIXIE_ARM64" arm64
"$DOCKER" image inspect "$CI_IMAGE" >/dev/null 2>&1 \
    || { log "no image $CI_IMAGE: the image phase (scripts/ci/20-image.sh) builds it (its JIT cache is compared)"; exit 1; }

build_arm64() {  # build_arm64 TARGET TAG
    "$DOCKER" build --progress plain --network host --platform linux/arm64 \
        --secret "id=ca,src=$(host_ca)" \
        --build-arg "BASE_IMAGE=$CI_BASE_TRIXIE_ARM64" --build-arg "BUILD_BASE_IMAGE=$CI_BASE_TRIXIE" \
        --build-arg "JIT_SET=$JIT_SET" --build-arg "JIT_MODULES=$JIT_MODULES" \
        --build-arg "SPARKSERVE_COMMIT=$(git -C "$CI_ROOT" rev-parse HEAD 2>/dev/null || echo unknown)" \
        --target "$1" -t "$2" . >> "$CI_WORK/docker-build-arm64.log" 2>&1
}
: > "$CI_WORK/docker-build-arm64.log"
previous=$(image_id "$CI_IMAGE_ARM64")
timed docker-build-arm64 build_arm64 runtime "$CI_IMAGE_ARM64" || { tail -40 "$CI_WORK/docker-build-arm64.log" >&2; exit 1; }
retag_cleanup "$CI_IMAGE_ARM64" "$previous"
# The JIT stage of the same build (an amd64 image: the cross toolchain and the compiled cache) for the
# jit-units phase; every layer comes from the build above.
timed jit-host-arm64 build_arm64 jit "$CI_JIT_ARM64" || { tail -20 "$CI_WORK/docker-build-arm64.log" >&2; exit 1; }
grep -E "jit prewarm|\] .*: ok in" "$CI_WORK/docker-build-arm64.log" | sed 's/^#[0-9]* [0-9.]* /  /' || true
arch=$("$DOCKER" image inspect -f '{{.Os}}/{{.Architecture}}' "$CI_IMAGE_ARM64")
size=$("$DOCKER" image inspect -f '{{.Size}}' "$CI_IMAGE_ARM64")
echo "image $CI_IMAGE_ARM64: $arch, $(( size / 1000000 )) MB"
[[ "$arch" == linux/arm64 ]] || { log "the image is $arch, not linux/arm64"; exit 1; }
(( size <= 12000000000 )) || { log "runtime image is over the 12 GB target"; exit 1; }

run() { "$DOCKER" run --rm --network none --platform linux/arm64 "$@"; }

pylib=$(ensure_pytest_lib)

# The amd64 image's evidence (scripts/ci/image-evidence.sh: the hunk-mutation table of the CPU-tested
# patches, vLLM's own CPU tests) from here on, beside the checks below: they run one emulated process at a
# time, so one core would otherwise idle. Joined before the phase ends; a failure fails this phase.
echo "-- evidence on the amd64 image, in the background (its output follows the arm64 checks)"
evidence_log="$CI_WORK/image-evidence.log"
beside "$evidence_log" image-evidence scripts/ci/image-evidence.sh "$pylib"
evidence_pid=$BESIDE_PID
trap 'kill_tree "$evidence_pid"; stop_docker' EXIT

echo "-- smoke (emulated): the machine"
m=$(run --entrypoint uname "$CI_IMAGE_ARM64" -m)
[[ "$m" == aarch64 ]] || { log "the image's processes run as $m, not aarch64"; exit 1; }

# One process for what depends on the arch (each torch import costs a minute or more under emulation): the
# imports, the patch manifest, provenance (sparkserve.serving.provenance: linux/arm64, arm64 modules),
# every prewarmed module loaded as serving loads it (`jit load-check`), the serving user, no lab module. The gate tests of
# the patches import vLLM's quantization layers, whose first import builds Humming's launcher with gcc:
# ~20 min emulated, so CI runs them in the amd64 image and checks here that the arm64 image's patched files
# are those bytes; CI_ARM64_TESTS=all runs all of tests/image emulated (docs/IMAGE.md has its result).
case "${CI_ARM64_TESTS:-arch}" in
    arch) tests=(test_image_provenance.py test_prewarmed_modules.py test_least_privilege.py test_product_only.py) ;;
    all) tests=(.) ;;
    *) log "CI_ARM64_TESTS is arch (default) or all"; exit 2 ;;
esac
echo "-- tests/image inside the arm64 image (emulated): ${tests[*]}"
timed arm64-image-tests run -v "$pylib:/opt/ci-pytest:ro" -v "$CI_ROOT/tests/image:/opt/ci-tests/image:ro" \
    -w /opt/ci-tests/image -e PYTHONPATH=/opt/ci-pytest:/opt/sparkserve/src --entrypoint python "$CI_IMAGE_ARM64" \
    -m pytest -p no:cacheprovider -q -rs -W ignore::DeprecationWarning "${tests[@]}"

# A created (never started) container of IMAGE, on the image's own platform, to `docker cp` from.
stopped_container() {
    "$DOCKER" create --platform "$("$DOCKER" image inspect -f '{{.Os}}/{{.Architecture}}' "$1")" "$1"
}
echo "-- the patched files of both images, byte for byte (on the host)"
copy_patched() {  # copy_patched IMAGE DEST: the manifest and the files it lists, from the image's site-packages
    local cid rc=0 site=/opt/venv/lib/python3.13/site-packages f
    rm -rf "$2" && mkdir -p "$2"
    cid=$(stopped_container "$1")
    "$DOCKER" cp "$cid:$site/sparkserve_patch_manifest.json" "$2/" || rc=$?
    while read -r f; do
        mkdir -p "$2/$(dirname "$f")"
        "$DOCKER" cp "$cid:$site/$f" "$2/$f" || rc=$?
    done < <("$CI_VENV/bin/python" -c 'import sys
from pathlib import Path
from sparkserve.supply.patches import manifest
for record in manifest.read(Path(sys.argv[1])).values():
    for patch in record["patches"]:
        print("\n".join(patch["files"]))' "$2/sparkserve_patch_manifest.json" | sort -u)
    "$DOCKER" rm "$cid" >/dev/null || rc=$?
    return "$rc"
}
copy_both() { copy_patched "$CI_IMAGE" "$CI_WORK/patched-amd64" && copy_patched "$CI_IMAGE_ARM64" "$CI_WORK/patched-arm64"; }
timed patched-files-copy copy_both
count=$(find "$CI_WORK/patched-arm64" -type f | wc -l)
(( count > 1 )) || { log "no patched files copied out of $CI_IMAGE_ARM64"; exit 1; }
diff -r "$CI_WORK/patched-amd64" "$CI_WORK/patched-arm64" \
    || { log "the arm64 image's patched files differ from the amd64 image's (above)"; exit 1; }
echo "  $count files (the manifest and every file the series touches) identical in both images"
rm -rf "$CI_WORK/patched-amd64" "$CI_WORK/patched-arm64"

echo "-- the entrypoint (emulated): the vLLM command of each Spark profile, then the GPU refusal"
# --print-flags validates the profile and prints the command before it looks for the model (not
# downloaded here: exit 4 after the command).
for profile in profiles/spark*.env; do
    name=$(basename "$profile" .env)
    set +e
    run --env-file "$profile" "$CI_IMAGE_ARM64" --print-flags > "$OUT/print-flags-$name.log" 2>&1; rc=$?
    set -e
    sed -n 's/^  command: //p' "$OUT/print-flags-$name.log" > "$OUT/print-flags-$name.txt"
    if (( rc != 0 && rc != 4 )) || [[ ! -s "$OUT/print-flags-$name.txt" ]]; then
        cat "$OUT/print-flags-$name.log" >&2; log "$name: no vLLM command (exit $rc)"; exit 1
    fi
    echo "  $name: $(cut -c1-150 "$OUT/print-flags-$name.txt") ..."
done
set +e
out=$(run --env-file profiles/spark.env "$CI_IMAGE_ARM64" 2>&1); rc=$?
set -e
echo "$out" | tail -2
(( rc == 3 )) && grep -q "refusing to start: no GPU" <<<"$out" \
    || { log "expected the GPU refusal (exit 3), got $rc"; exit 1; }

echo "-- SASS rules and the CUDA ELFs against the amd64 image's, on the host"
tools=$(ensure_cuda_tools)
copy_cache() {  # copy_cache IMAGE DEST
    local cid rc=0
    rm -rf "$2"
    cid=$(stopped_container "$1")
    "$DOCKER" cp "$cid:/opt/jit-cache" "$2" || rc=$?
    "$DOCKER" rm "$cid" >/dev/null || rc=$?
    return "$rc"
}
timed arm64-cache-copy copy_cache "$CI_IMAGE_ARM64" "$CI_WORK/jit-cache-arm64"
timed amd64-cache-copy copy_cache "$CI_IMAGE" "$CI_WORK/jit-cache-amd64"
timed arm64-sass-check "$CI_VENV/bin/sparkserve" jit sass-check --cache "$CI_WORK/jit-cache-arm64" \
    --rules docker/jit-sass.toml --cuobjdump "$tools/nvidia/cu13/bin/cuobjdump" \
    --report "$OUT/sass-report.json" > "$OUT/sass-check.txt"
tail -1 "$OUT/sass-check.txt"
timed cubin-compare "$CI_VENV/bin/sparkserve" jit cubin-compare "$CI_WORK/jit-cache-amd64" \
    "$CI_WORK/jit-cache-arm64" --cuobjdump "$tools/nvidia/cu13/bin/cuobjdump" \
    --report "$OUT/cubin-compare.json" | tee "$OUT/cubin-compare.txt"
rm -rf "$CI_WORK/jit-cache-arm64" "$CI_WORK/jit-cache-amd64"
echo "arm64 image ok; artifacts in $OUT"
joined "$evidence_pid" "$evidence_log" "evidence on the amd64 image (mutation table, vLLM's own CPU tests):" \
    || { log "the amd64 image's evidence failed (above)"; exit 1; }
