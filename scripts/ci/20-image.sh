#!/usr/bin/env bash
# CI phase: build the production Dockerfile for linux/amd64 on a debootstrapped Debian trixie base
# (no registry here) and smoke-test the image without a GPU.
#   CI_JIT_SET=ci (default) prewarms the modules marked ci = true in docker/jit-modules.toml;
#   the CUTLASS fused-MoE module is production-only (hours on 2 cores; see that file and docs/IMAGE.md).
source "$(dirname "$0")/lib.sh"
cd "$CI_ROOT"

JIT_SET=${CI_JIT_SET:-ci}
# The layer-reuse probes build under this tag, each removed right after it (an untagged probe build
# would stay behind as a dangling ~10 GB image).
PROBE_IMAGE="sparkserve/reuse-probe:ci"
remove_probe() { "$DOCKER" image rm -f "$PROBE_IMAGE" >/dev/null 2>&1 || true; }
trap 'remove_probe; stop_docker' EXIT

ensure_docker
timed base-trixie ensure_base_image trixie "$CI_BASE_TRIXIE"

build_image() {
    "$DOCKER" build --progress plain --network host --platform linux/amd64 \
        --secret "id=ca,src=$(host_ca)" \
        --build-arg "BASE_IMAGE=$CI_BASE_TRIXIE" --build-arg "JIT_SET=$JIT_SET" \
        --build-arg "SPARKSERVE_COMMIT=$(git -C "$CI_ROOT" rev-parse HEAD 2>/dev/null || echo unknown)" \
        -t "$CI_IMAGE" . > "$CI_WORK/docker-build.log" 2>&1
}
previous=$(image_id "$CI_IMAGE")
timed docker-build build_image || { tail -40 "$CI_WORK/docker-build.log" >&2; exit 1; }
retag_cleanup "$CI_IMAGE" "$previous"
grep -E "jit prewarm|\] .*: ok in" "$CI_WORK/docker-build.log" | sed 's/^#[0-9]* [0-9.]* /  /' || true
size=$("$DOCKER" image inspect -f '{{.Size}}' "$CI_IMAGE")
echo "image $CI_IMAGE: $(( size / 1000000 )) MB"
(( size <= 12000000000 )) || { log "runtime image is over the 12 GB target"; exit 1; }

run() { "$DOCKER" run --rm --network none "$@"; }

echo "-- smoke: imports"
run --entrypoint python "$CI_IMAGE" -c \
    "import vllm, flashinfer; print('vllm', vllm.__version__, 'flashinfer', flashinfer.__version__)"

echo "-- smoke: JIT cache holds every listed module, up to date, with sm_121a cubins"
# As root with the prewarm's workspace: verify writes the build files serving would write and asks ninja
# whether it would rebuild (the serving user cannot write /opt/jit-cache, and its workspace is elsewhere).
tools=$(ensure_cuda_tools)
verify_as_build() {  # verify_as_build IMAGE ARGS...
    local image=$1; shift
    run --user 0 -e FLASHINFER_WORKSPACE_BASE=/opt/jit-cache -v "$tools:/opt/ci-tools:ro" --entrypoint python \
        "$image" -m sparkserve jit verify --modules /opt/sparkserve/docker/jit-modules.toml \
        --build-info /opt/jit-cache/sparkserve-build-info.json --cuobjdump /opt/ci-tools/nvidia/cu13/bin/cuobjdump "$@"
}
verify_as_build "$CI_IMAGE" --arch sm_121a
verify_as_build "$CI_IMAGE" --arch sm_120 | tail -1

echo "-- least privilege: the image runs as its serving user, not root"
user=$("$DOCKER" image inspect -f '{{.Config.User}}' "$CI_IMAGE")
[[ "$user" == "10001:10001" ]] || { log "the image's user is '$user', expected 10001:10001"; exit 1; }
whoami_out=$(run --entrypoint id "$CI_IMAGE")
echo "  $whoami_out"
grep -q "^uid=10001(serve) gid=10001(serve)" <<<"$whoami_out" || { log "the image does not run as serve"; exit 1; }

echo "-- smoke: every module of the production (full) list resolves to a FlashInfer JIT spec"
run --entrypoint python "$CI_IMAGE" -m sparkserve jit prewarm --dry-run --set full \
    --modules /opt/sparkserve/docker/jit-modules.toml

echo "-- SASS: xqa, prefill-sink and decode-sink modules hold sm_121a + sm_120f code with the expected opcodes"
# The image's JIT cache is copied out (a created, never started container) and disassembled on the host.
jit_copy="$CI_WORK/jit-cache-copy"
copy_jit_cache() {
    local cid rc=0
    rm -rf "$jit_copy"
    cid=$("$DOCKER" create "$CI_IMAGE")
    "$DOCKER" cp "$cid:/opt/jit-cache" "$jit_copy" || rc=$?
    "$DOCKER" rm "$cid" >/dev/null || rc=$?
    return "$rc"
}
timed jit-cache-copy copy_jit_cache
timed sass-check "$CI_VENV/bin/sparkserve" jit sass-check --cache "$jit_copy" \
    --rules docker/jit-sass.toml --cuobjdump "$tools/nvidia/cu13/bin/cuobjdump" \
    --report "$CI_WORK/sass-report.json"
rm -rf "$jit_copy"

echo "-- tests/image inside the image (no GPU, no network): the patch manifest, every prewarmed module loaded"
echo "   as serving loads it (jit load-check), the gate tests of the patches, no lab module in the image"
pylib=$(ensure_pytest_lib)
timed gate-tests run -v "$pylib:/opt/ci-pytest:ro" -v "$CI_ROOT/tests/image:/opt/ci-tests/image:ro" \
    -e PYTHONPATH=/opt/ci-pytest:/opt/sparkserve/src --entrypoint python "$CI_IMAGE" \
    -m pytest -p no:cacheprovider -q -rs -W ignore::DeprecationWarning /opt/ci-tests/image

# The evidence on this image (the hunk-mutation table of the CPU-tested patches, vLLM's own CPU tests) runs
# in the arm64 phase, beside its emulated checks, which keep one core busy and leave the other idle; here
# only when that phase is skipped.
if [[ " ${SKIP_PHASES:-} " == *" image-arm64 "* ]]; then
    echo "-- evidence on the image: the hunk-mutation table of the CPU-tested patches, vLLM's own CPU tests"
    timed image-evidence scripts/ci/image-evidence.sh "$pylib"
fi

echo "-- smoke: the entrypoint refuses to serve without a GPU"
set +e
out=$(run --env-file profiles/spark.env -e MXFP4_LAYERS=moe,qkv,o "$CI_IMAGE" 2>&1); rc=$?
set -e
echo "$out" | tail -3
(( rc == 3 )) || { log "expected exit 3 (GPU refusal), got $rc"; exit 1; }
grep -q "refusing to start: no GPU" <<<"$out" && grep -q -- "--gpus all" <<<"$out" \
    && grep -q "FLASHINFER_CUDA_ARCH_LIST='12.1a 12.0f'" <<<"$out" \
    || { log "the refusal does not say what to do"; exit 1; }
grep -q "patches applied:" <<<"$out" && grep -q "pins: vllm 0.33.0" <<<"$out" \
    || { log "the banner (pins, patches) is missing"; exit 1; }

echo "-- smoke: an invalid profile value fails before vLLM, naming the variable"
set +e
out=$(run --env-file profiles/spark.env -e MXFP4_LAYERS=moe,attn "$CI_IMAGE" 2>&1); rc=$?
set -e
grep "invalid serving profile" <<<"$out" || true
(( rc == 2 )) && grep -q "MXFP4_LAYERS='moe,attn': unknown 'attn'; valid tokens: moe, qkv, o, lm_head" <<<"$out" \
    || { log "expected exit 2 naming MXFP4_LAYERS, got $rc"; exit 1; }

echo "-- smoke: the shipped spark profile as is (its lm_head patch is in the image: only the GPU is missing)"
set +e
out=$(run --env-file profiles/spark.env "$CI_IMAGE" 2>&1); rc=$?
set -e
echo "$out" | tail -1
(( rc == 3 )) || { log "spark profile: expected the GPU refusal (3), got $rc"; exit 1; }

echo "-- smoke: runtime image content"
run --entrypoint bash "$CI_IMAGE" -c '
    set -e
    test ! -e /opt/build-tools && ! command -v git >/dev/null && ! command -v uv >/dev/null
    test -f /opt/jit-cache/sparkserve-build-info.json && test -x /opt/venv/bin/nvcc -o -x "$CUDA_HOME/bin/nvcc"
    echo "  no build tools (uv, git) in the runtime image; JIT toolchain present for modules not prebuilt"'
hc=$("$DOCKER" image inspect -f '{{json .Config.Healthcheck.Test}}' "$CI_IMAGE")
grep -q "sparkserve.serving.health" <<<"$hc" || { log "no healthcheck on /health"; exit 1; }

echo "-- layer reuse: a lab edit must rebuild nothing of the image; a patch edit must not re-install wheels,"
echo "   and a header-only one must not re-run the JIT prewarm; a module-list edit must not re-apply patches;"
echo "   an edit of product code the build stages do not run must not re-apply patches or re-run the prewarm"
ctx="$CI_WORK/reuse-context"
rm -rf "$ctx" && mkdir -p "$ctx/lab"
# cp -a: BuildKit's cache keys hash each file's mode; the copy must differ from the checkout only by the edits.
# The lab's sources are in the copy as in the checkout: .dockerignore is what keeps them out of the context.
cp -a Dockerfile .dockerignore pins.toml locks patches src docker profiles "$ctx/"
cp -a lab/src "$ctx/lab/"
build_probe_kept() {  # build_probe_kept TARGET LOG [ARGS...]: the probe image stays (remove_probe)
    local target=$1 out=$2; shift 2
    "$DOCKER" build --progress plain --network host --secret "id=ca,src=$(host_ca)" -t "$PROBE_IMAGE" \
        --build-arg "BASE_IMAGE=$CI_BASE_TRIXIE" --build-arg "JIT_SET=$JIT_SET" --target "$target" "$@" \
        "$ctx" > "$out" 2>&1
}
build_probe() {  # build_probe TARGET LOG [ARGS...]
    local rc=0
    build_probe_kept "$@" || rc=$?
    remove_probe
    return "$rc"
}
step_cached() {  # step_cached LOG STAGE: was the RUN step of STAGE taken from the cache?
    local n
    n=$(grep -m1 -E "^#[0-9]+ \[$2 [0-9]+/[0-9]+\] RUN" "$1" | cut -d' ' -f1)
    [[ -n "$n" ]] || { log "no RUN step of stage $2 in $1"; exit 1; }
    grep -q "^$n CACHED" "$1"
}
expect_cached() {  # expect_cached LOG STAGE MESSAGE: fail with MESSAGE and the stage's steps unless cached
    step_cached "$1" "$2" && return 0
    log "$3; the steps of stage $2 in $1:"
    grep -E -A1 "^#[0-9]+ \[$2 +[0-9]+/[0-9]+\]" "$1" | grep -v -e '^--$' -e ' sha256:' | cut -c1-160 | sed 's/^/    /'
    exit 1
}
# A lab module edited: the whole image, built as the main build was (same commit argument), is the image
# that build made, by its id: no step ran again, the lab reached no layer.
echo "# CI layer-reuse probe $(date +%s%N)" >> "$ctx/lab/src/sparkserve_lab/report/markdown.py"
lab_probe() {
    build_probe_kept runtime "$CI_WORK/reuse-lab.log" \
        --build-arg "SPARKSERVE_COMMIT=$(git -C "$CI_ROOT" rev-parse HEAD 2>/dev/null || echo unknown)" || return 1
    local probe_id image_id_now
    probe_id=$(image_id "$PROBE_IMAGE"); image_id_now=$(image_id "$CI_IMAGE")
    remove_probe
    [[ -n "$probe_id" && "$probe_id" == "$image_id_now" ]] && return 0
    log "editing a lab module changed the image (${probe_id:7:12}, not ${image_id_now:7:12}); the steps that ran:"
    awk '/^#[0-9]+ \[/ && !/\[internal\]/ { name[$1] = substr($0, length($1) + 2, 120) }
         /^#[0-9]+ DONE/ && ($1 in name) { print "    " name[$1] }' \
        "$CI_WORK/reuse-lab.log"
    return 1
}
timed reuse-probe-lab-edit lab_probe || exit 1
rm -rf "$ctx/lab" && mkdir -p "$ctx/lab" && cp -a lab/src "$ctx/lab/"
# The baseline: each compared stage built as its own target from the unedited copy. The main build does not
# leave them behind: when its last stage is found in the cache, BuildKit loads none of the stages before it,
# and a record pruned since an earlier run (a `docker builder prune`) stays missing until a build needs it.
build_baseline() { build_probe patched "$CI_WORK/reuse-base-patched.log" && build_probe jit "$CI_WORK/reuse-base-jit.log"; }
timed reuse-baseline build_baseline || { log "the unedited copy of the context did not build"; exit 1; }
# Only the module list differs from the baseline: `patched` must come from the cache.
echo "# CI layer-reuse probe" >> "$ctx/docker/jit-modules.toml"
timed reuse-probe-list-edit build_probe patched "$CI_WORK/reuse-modules.log"
expect_cached "$CI_WORK/reuse-modules.log" patched "editing the JIT module list re-applied the patches"
# Only a product module that no build stage runs differs (the deploy gate's smoke level): neither the
# patches nor the JIT prewarm may run again (the build stages copy only what they import; the runtime
# stage copies the whole package).
rm -rf "$ctx/docker" && cp -a docker "$ctx/"
echo "# CI layer-reuse probe $(date +%s%N)" >> "$ctx/src/sparkserve/gate/smoke.py"
timed reuse-probe-product-edit build_probe jit "$CI_WORK/reuse-product.log"
expect_cached "$CI_WORK/reuse-product.log" patched "editing the deploy gate's code re-applied the patches"
expect_cached "$CI_WORK/reuse-product.log" jit "editing the deploy gate's code re-ran the JIT prewarm"
rm -rf "$ctx/src" && cp -a src "$ctx/"
# The edit is a patch's DEP-3 header, new every run (the build cache outlives a run, and a repeated edit
# would be a cache hit): FlashInfer's patched files are as they were, so the prewarm is not re-run (its
# hosts take FlashInfer's part of the overlay, compared by content), and the reused JIT cache must still be
# up to date in the runtime image built around it (ninja's view, as `jit verify` asks it).
patch_file=$(find "$ctx/patches" -name '0*.patch' | sort | head -1)
sed -i "0,/^Description: /s//Description: (CI layer-reuse probe $(date +%s%N)) /" "$patch_file"
probe_verify() {
    build_probe_kept runtime "$CI_WORK/reuse-patched.log" || return 1
    verify_as_build "$PROBE_IMAGE" --arch sm_121a | tail -1
}
timed reuse-probe-patch-edit probe_verify || { remove_probe; log "after a patch header edit the reused JIT cache is not up to date"; exit 1; }
remove_probe
expect_cached "$CI_WORK/reuse-patched.log" stack "editing a patch re-ran the wheel install"
if step_cached "$CI_WORK/reuse-patched.log" patched; then log "an edited patch was not re-applied"; exit 1; fi
expect_cached "$CI_WORK/reuse-patched.log" jit "a patch header edit re-ran the JIT prewarm"
rm -rf "$ctx"
echo "layer reuse ok"
