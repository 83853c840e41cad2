# sparkserve: pinned, patched vLLM for openai/gpt-oss-120b on DGX Spark (sm_121) and desktop Blackwell (sm_120).
#
#   docker build -t sparkserve/serve .                       # production, for this machine's arch: FROM debian:trixie-slim
#   docker build --platform linux/arm64 -t sparkserve/serve:arm64 .   # the Spark's image on an amd64 machine
#   docker build --build-arg BASE_IMAGE=sparkserve/debian:trixie-slim --build-arg JIT_SET=ci ...   # CI (amd64)
#   docker build --platform linux/arm64 --build-arg BASE_IMAGE=sparkserve/debian:trixie-slim-arm64 \
#       --build-arg BUILD_BASE_IMAGE=sparkserve/debian:trixie-slim --build-arg JIT_SET=ci ...   # CI (arm64)
#
#   docker build --target dev -t sparkserve/dev:local .        # the dev container (docs/DEV.md)
#
# Stages (each one's inputs are COPYed as late as possible, so that):
#   build-base  the build machine's Debian + Python + compilers: every build stage runs natively on it,
#               also when the image is for another arch (docs/IMAGE.md, "The arm64 image")
#   tools       build-base + uv (build only)
#   stack       the target arch's hash-locked wheels into /opt/venv   <- inputs: its lock only
#               (docker/install-lock.sh, the one install of a lock: jit-cross-stack runs it too)
#   dev         stack + the kernel toolchain: the dev container (`--target dev`; never part of the image)
#   patched     `sparkserve patches apply` on /opt/venv                 <- inputs: patches/, pins.toml, the patch code
#               editing a patch re-runs from here: the wheel layer is reused; editing the serving or gate
#               code does not (only the runtime stage copies the whole package)
#   jit         FlashInfer JIT modules of docker/jit-modules.toml      <- inputs: the module list, the patched
#               FlashInfer files. Editing the list re-runs from here: the patches are not re-applied. A patch
#               edit that leaves FlashInfer's patched files as they were (a DEP-3 header, a vLLM patch) does
#               not re-run it: its hosts take `stack` plus those files, which the build cache compares by
#               content. For another arch the device code is compiled natively and only the host code by a
#               cross compiler (jit-cross-host)
#   base        the target arch's Debian + Python + the host compiler Triton/FlashInfer need at run time
#   runtime     base + the venv + the patched files + the JIT cache + the product (src/sparkserve: serving,
#               the deploy gate, the verbs); entrypoint and healthcheck. The default target.
# The lab (lab/: levels 1.5 and 3-6, A/B, proofs, the run store) is never in the image: .dockerignore keeps
# it out of the build context, and tests/image/test_product_only.py checks the built image. Where a lab verb
# runs in a container of this image (CI's evidence step, compose's `harness` service), the checkout's lab/
# is mounted and put on PYTHONPATH.
#
# The CUDA toolchain for JIT (nvcc, crt, nvvm, cccl, cudart, nvrtc, cublas, curand headers) comes from the
# locked PyPI wheels vLLM depends on; no CUDA base image, no GPU needed to build.
# pip/uv behind a TLS-intercepting proxy: pass the CA bundle as a build secret
# (`--secret id=ca,src=/etc/ssl/certs/ca-certificates.crt`); it is mounted for single RUNs and is never a layer.

ARG BASE_IMAGE=debian:trixie-slim@sha256:d7e12182ce18b85b93007c1dedf31f2d29e01ccf3182cc4017c709b6259bc132
# The build machine's Debian: the same multi-arch image by default. Only an engine that keeps one arch per
# tag (CI's debootstrapped bases) names its build-machine image apart.
ARG BUILD_BASE_IMAGE=${BASE_IMAGE}

# ------------------------------------------------------------------------------------------------ build-base
# The build machine's platform (BUILDPLATFORM), whatever the image's: an arm64 image built on an amd64
# machine installs its wheels, applies the patches and compiles its JIT modules without emulation.
FROM --platform=$BUILDPLATFORM ${BUILD_BASE_IMAGE} AS build-base
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV LANG=C.UTF-8 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# python3-dev, gcc/g++: the JIT prewarm compiles host code; git, python3-venv: the build tools.
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        ca-certificates python3 python3-dev python3-venv gcc g++ libc6-dev git \
    && rm -rf /var/lib/apt/lists/* \
    && python3 --version
# FlashInfer links its JIT modules with -lcudart -lcuda; the wheels ship only libcudart.so.13 and no
# libcuda stub. This folder gives the linker both; at run time the driver's libcuda.so.1 is loaded.
RUN mkdir -p /opt/cuda-stubs \
    && gcc -shared -nostdlib -Wl,-soname,libcuda.so.1 -o /opt/cuda-stubs/libcuda.so -x c /dev/null \
    && ln -s /opt/venv/lib/python3.13/site-packages/nvidia/cu13/lib/libcudart.so.13 /opt/cuda-stubs/libcudart.so \
    && ln -s /opt/venv/lib/python3.13/site-packages/nvidia/cu13/lib/libnvrtc.so.13 /opt/cuda-stubs/libnvrtc.so
ENV VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    CUDA_HOME=/opt/venv/lib/python3.13/site-packages/nvidia/cu13 \
    FLASHINFER_EXTRA_LDFLAGS=-L/opt/cuda-stubs \
    SPARKSERVE_ROOT=/opt/sparkserve \
    PYTHONPATH=/opt/sparkserve/src

# ------------------------------------------------------------------------------------------------ tools
FROM build-base AS tools
COPY docker/requirements-build.txt /tmp/requirements-build.txt
RUN --mount=type=secret,id=ca \
    if [ -s /run/secrets/ca ]; then export PIP_CERT=/run/secrets/ca; fi \
    && python3 -m venv /opt/build-tools \
    && /opt/build-tools/bin/pip install --no-cache-dir --disable-pip-version-check -q \
        --require-hashes --no-deps --only-binary :all: -r /tmp/requirements-build.txt

# ------------------------------------------------------------------------------------------------ locks
# One lock per arch; its header names the wheel platform it was resolved for (`sparkserve lock`). `stack`
# takes the image's, `jit-cross-stack` the build machine's: the same install over the same file, so an
# arm64 build on an amd64 machine takes its compiler venv from the amd64 image's wheel layer.
FROM scratch AS lock-amd64
COPY locks/requirements-linux-amd64-cp313.txt /lock.txt
FROM scratch AS lock-arm64
COPY locks/requirements-linux-arm64-cp313.txt /lock.txt
# Stage aliases chosen by arch, not images from a registry: nothing to tag.
# hadolint ignore=DL3006
FROM lock-${TARGETARCH} AS lock
# hadolint ignore=DL3006
FROM lock-${BUILDARCH} AS build-lock

# ------------------------------------------------------------------------------------------------ stack
FROM tools AS stack
COPY --from=lock /lock.txt /tmp/lock.txt
COPY docker/requirements-sparkserve.txt /tmp/requirements-sparkserve.txt
ARG INDEX_URL=https://pypi.org/simple
# The script is mounted, not copied: it is no layer, and the cache key holds its content.
RUN --mount=type=secret,id=ca \
    --mount=type=cache,target=/root/.cache/uv,sharing=locked \
    --mount=type=bind,source=docker/install-lock.sh,target=/tmp/install-lock.sh \
    bash /tmp/install-lock.sh /tmp/lock.txt /tmp/requirements-sparkserve.txt

# ------------------------------------------------------------------------------------------------ dev
# The dev container (docker-compose.dev.yml, docs/DEV.md): the image's stack (same locks, same torch: the
# wheel layer above is the production build's, taken from the build cache) with vLLM and FlashInfer
# installed editable at every start from the source trees of `sparkserve dev init`, mounted from the host,
# plus the toolchain for kernel work: cmake, ccache, gdb (git is in build-base; ninja and nvcc are wheels
# of the stack), locks/requirements-dev-linux-<arch>-cp313.txt (editable-install backends, pytest,
# llama-benchy, cuobjdump/nvdisasm) and the locked vLLM wheel file that vLLM's editable install takes its
# compiled ops from (SPARKSERVE_DEV_WHEELS). It is built on the machine it runs on, so build-base is its
# own platform's. No later stage builds on it.
FROM stack AS dev
ARG TARGETARCH
ARG INDEX_URL=https://pypi.org/simple
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        cmake ccache gdb less procps \
    && rm -rf /var/lib/apt/lists/* \
    && ln -s /opt/build-tools/bin/uv /usr/local/bin/uv
COPY locks/requirements-dev-linux-${TARGETARCH}-cp313.txt /tmp/requirements-dev.txt
# The stack's own packages are satisfied already; only the dev additions are installed.
RUN --mount=type=secret,id=ca \
    --mount=type=cache,target=/root/.cache/uv,sharing=locked \
    if [ -s /run/secrets/ca ]; then export SSL_CERT_FILE=/run/secrets/ca; fi \
    && export UV_LINK_MODE=copy UV_NO_CONFIG=1 \
    && uv pip install -q --python /opt/venv/bin/python --index-url "$INDEX_URL" \
        --require-hashes --no-deps --only-binary :all: -r /tmp/requirements-dev.txt
# The locked vLLM wheel itself (its lock hash checked): the stack installed its files but keeps no .whl,
# and vLLM's editable install extracts the compiled ops from a wheel file. Then the wheels' vllm and
# flashinfer packages go: in this image they come only from the mounted trees (sparkserve dev enter).
RUN --mount=type=secret,id=ca \
    if [ -s /run/secrets/ca ]; then export PIP_CERT=/run/secrets/ca; fi \
    && awk '/^vllm==/ {p = 1; print; next} p && /^ / {print; next} {p = 0}' /tmp/lock.txt > /tmp/vllm-wheel.txt \
    && /opt/build-tools/bin/pip download -q --no-cache-dir --disable-pip-version-check --index-url "$INDEX_URL" \
        --require-hashes --no-deps --only-binary :all: -d /opt/wheels -r /tmp/vllm-wheel.txt \
    && uv pip uninstall -q --python /opt/venv/bin/python vllm flashinfer-python \
    && ls -l /opt/wheels
# sparkserve runs from the mounted checkout (/workspace), the trees are its dev-src/; the lab beside it
# (lab/src: the levels, A/B and traces, run on the trees' engine). The trees may belong to the host user
# while this runs as root: git must not call that dubious ownership.
# Bytecode is written, but to a cache volume (PYTHONPYCACHEPREFIX), never into the trees: the wheels ship
# none, and without it every new process compiles torch and vLLM again (minutes on a small machine).
ENV SPARKSERVE_ROOT=/workspace \
    PYTHONDONTWRITEBYTECODE= \
    PYTHONPYCACHEPREFIX=/cache/pycache \
    PYTHONPATH=/workspace/src:/workspace/lab/src \
    SPARKSERVE_DEV_WHEELS=/opt/wheels \
    PATH=/opt/venv/bin:/opt/venv/lib/python3.13/site-packages/nvidia/cu13/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    GIT_CONFIG_COUNT=1 \
    GIT_CONFIG_KEY_0=safe.directory \
    GIT_CONFIG_VALUE_0=* \
    FLASHINFER_CUDA_ARCH_LIST=12.1a \
    FLASHINFER_EXTRA_CUDAFLAGS=-DCCCL_DISABLE_CTK_COMPATIBILITY_CHECK \
    FLASHINFER_WORKSPACE_BASE=/cache/flashinfer \
    CCACHE_DIR=/cache/ccache \
    VLLM_CACHE_ROOT=/cache/vllm \
    TORCHINDUCTOR_CACHE_DIR=/cache/vllm/torchinductor \
    TRITON_CACHE_DIR=/cache/vllm/triton \
    HF_HOME=/data/huggingface \
    VLLM_NO_USAGE_STATS=1 \
    DO_NOT_TRACK=1
WORKDIR /workspace
# Editable installs from the mounts, the check of where vllm/flashinfer import from, then the command.
ENTRYPOINT ["/opt/venv/bin/python", "-m", "sparkserve", "dev", "enter", "--"]
CMD ["bash"]

# ------------------------------------------------------------------------------------------------ patched
FROM stack AS patched
COPY pins.toml /opt/sparkserve/pins.toml
COPY patches/ /opt/sparkserve/patches/
# Only what `python -m sparkserve.cli.imagebuild` imports (tests/unit/test_image_layers.py): editing the
# serving code, the gate or another verb reuses this layer and the JIT prewarm below.
COPY src/sparkserve/__init__.py src/sparkserve/errors.py src/sparkserve/progress.py src/sparkserve/config.py \
     /opt/sparkserve/src/sparkserve/
COPY src/sparkserve/cli/__init__.py src/sparkserve/cli/common.py src/sparkserve/cli/imagebuild.py \
     src/sparkserve/cli/jit.py src/sparkserve/cli/patches.py src/sparkserve/cli/supply.py \
     /opt/sparkserve/src/sparkserve/cli/
COPY src/sparkserve/supply/ /opt/sparkserve/src/sparkserve/supply/
# What the series changes goes to /opt/overlay as well (files/<path> and deleted.txt, the files it removes),
# so the runtime image takes the big unpatched venv layer from `stack` (reused while only patches change)
# plus this small delta.
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# The JIT prewarm's input is FlashInfer's part of that delta alone (/opt/jit-input): the manifest, which
# names each patch file's hash, and the vLLM files stay out of it. The delta's files get one fixed mtime:
# a JIT cache reused from an earlier build (same FlashInfer files) must stay newer than its sources in the
# runtime image, or ninja, which compares mtimes, would call every module out of date.
RUN python -m sparkserve.cli.imagebuild patches apply --site /opt/venv/lib/python3.13/site-packages \
        --overlay /opt/overlay \
    && test -f /opt/venv/lib/python3.13/site-packages/sparkserve_patch_manifest.json \
    && test -f /opt/overlay/files/opt/venv/lib/python3.13/site-packages/sparkserve_patch_manifest.json \
    && find /opt/overlay/files -exec touch -h -d @946684800 {} + \
    && fisite=/opt/venv/lib/python3.13/site-packages/flashinfer \
    && mkdir -p "/opt/jit-input/files${fisite%/*}" \
    && if [ -d "/opt/overlay/files$fisite" ]; then cp -a "/opt/overlay/files$fisite" "/opt/jit-input/files$fisite"; fi \
    && { grep "^$fisite/" /opt/overlay/deleted.txt || true; } > /opt/jit-input/deleted.txt

# ------------------------------------------------------------------------------------------------ jit hosts
# Where the JIT prewarm runs: a venv with FlashInfer's patched files laid over it (FlashInfer's JIT sources
# are the same files on every arch). For the build machine's own arch: `stack`. For another arch: a venv
# of the build machine's arch (the same install as `stack`, from the build machine's lock), a cross
# compiler for the target's host code, and the target's libcudart and a libcuda stub to link against.
# nvcc, cicc and ptxas run natively: device code does not depend on the host CPU.
FROM stack AS jit-native-host
COPY --from=patched /opt/jit-input/files/ /
COPY --from=patched /opt/jit-input/deleted.txt /opt/jit-input-deleted.txt
RUN xargs -r -d '\n' rm -f -- < /opt/jit-input-deleted.txt

FROM tools AS jit-cross-stack
COPY --from=build-lock /lock.txt /tmp/lock.txt
COPY docker/requirements-sparkserve.txt /tmp/requirements-sparkserve.txt
ARG INDEX_URL=https://pypi.org/simple
RUN --mount=type=secret,id=ca \
    --mount=type=cache,target=/root/.cache/uv,sharing=locked \
    --mount=type=bind,source=docker/install-lock.sh,target=/tmp/install-lock.sh \
    bash /tmp/install-lock.sh /tmp/lock.txt /tmp/requirements-sparkserve.txt

FROM jit-cross-stack AS jit-cross-host
ARG TARGETARCH
COPY --from=patched /opt/jit-input/files/ /
COPY --from=patched /opt/jit-input/deleted.txt /opt/jit-input-deleted.txt
COPY --from=stack /opt/venv/lib/python3.13/site-packages/nvidia/cu13/lib/ /opt/cross/cuda-lib/
RUN xargs -r -d '\n' rm -f -- < /opt/jit-input-deleted.txt \
    && case "$TARGETARCH" in \
        arm64) package=g++-aarch64-linux-gnu; gcc=aarch64-linux-gnu-gcc ;; \
        amd64) package=g++-x86-64-linux-gnu; gcc=x86_64-linux-gnu-gcc ;; \
        *) echo "no cross compiler known for $TARGETARCH" >&2; exit 1 ;; esac \
    && apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$package" \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /opt/cross/link \
    && "$gcc" -shared -nostdlib -Wl,-soname,libcuda.so.1 -o /opt/cross/link/libcuda.so -x c /dev/null \
    && ln -s /opt/cross/cuda-lib/libcudart.so.13 /opt/cross/link/libcudart.so \
    && ln -s /opt/cross/cuda-lib/libnvrtc.so.13 /opt/cross/link/libnvrtc.so

# The host for this build: native when the image's arch is the build machine's, cross otherwise.
FROM jit-native-host AS jit-host-amd64-amd64
FROM jit-native-host AS jit-host-arm64-arm64
FROM jit-cross-host AS jit-host-amd64-arm64
FROM jit-cross-host AS jit-host-arm64-amd64

# ------------------------------------------------------------------------------------------------ jit
# hadolint ignore=DL3006
FROM jit-host-${BUILDARCH}-${TARGETARCH} AS jit
# Space-separated, as FlashInfer reads it. One compile per module holds cubins for every listed arch.
ARG FLASHINFER_CUDA_ARCH_LIST="12.1a 12.0f"
# full: every module of docker/jit-modules.toml; ci: the modules marked ci = true (see that file).
ARG JIT_SET=full
# Module names (space-separated) to build instead of a set: CI's arm64 build takes one module per SASS rule.
ARG JIT_MODULES=""
# Parallel nvcc jobs; 0 = FlashInfer's default (one per core). CUTLASS units need ~2-6 GB each.
ARG MAX_JOBS=0
ARG BASE_IMAGE
ARG TARGETARCH
# The nvcc wheel (13.5) is newer than the CUDA runtime headers torch pins (13.0); CCCL refuses that pair
# unless told otherwise. Runtime sets the same flags (below): FlashInfer recompiles when they differ.
# The prewarm's workspace: the runtime image keeps it read-only and loads its modules as AOT modules.
ENV FLASHINFER_CUDA_ARCH_LIST=${FLASHINFER_CUDA_ARCH_LIST} \
    FLASHINFER_EXTRA_CUDAFLAGS=-DCCCL_DISABLE_CTK_COMPATIBILITY_CHECK \
    FLASHINFER_WORKSPACE_BASE=/opt/jit-cache
# The patch verbs' code (as `patched` copied it: the same files, so a cache hit) and the JIT code.
COPY --from=patched /opt/sparkserve/src/ /opt/sparkserve/src/
COPY src/sparkserve/image/ /opt/sparkserve/src/sparkserve/image/
COPY docker/jit-modules.toml /opt/sparkserve/docker/jit-modules.toml
# --target-arch: the prewarm checks every module is a library of that arch; on another arch's machine it
# compiles host code with the cross compiler and links against /opt/cross/link.
RUN if [ "$MAX_JOBS" != 0 ]; then export MAX_JOBS; else unset MAX_JOBS; fi \
    && set -- && for name in $JIT_MODULES; do set -- "$@" --module "$name"; done \
    && python -m sparkserve.cli.imagebuild jit prewarm --modules /opt/sparkserve/docker/jit-modules.toml --set "$JIT_SET" "$@" \
        --target-arch "$TARGETARCH" --cross-link-dir /opt/cross/link \
        --build-info /opt/jit-cache/sparkserve-build-info.json --record "base_image=$BASE_IMAGE" \
        --record "target_arch=$TARGETARCH" --record "max_jobs=$MAX_JOBS"

# ------------------------------------------------------------------------------------------------ base
# The image's own platform: for an arm64 image built on an amd64 machine, this stage and the runtime
# stage's few commands are all that run under emulation (qemu-user, binfmt_misc).
FROM ${BASE_IMAGE} AS base
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV LANG=C.UTF-8 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# python3-dev: Triton compiles its launcher against Python.h at run time; gcc/g++: Triton and FlashInfer JIT.
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        ca-certificates python3 python3-dev gcc g++ libc6-dev \
    && rm -rf /var/lib/apt/lists/* \
    && python3 --version
RUN mkdir -p /opt/cuda-stubs \
    && gcc -shared -nostdlib -Wl,-soname,libcuda.so.1 -o /opt/cuda-stubs/libcuda.so -x c /dev/null \
    && ln -s /opt/venv/lib/python3.13/site-packages/nvidia/cu13/lib/libcudart.so.13 /opt/cuda-stubs/libcudart.so \
    && ln -s /opt/venv/lib/python3.13/site-packages/nvidia/cu13/lib/libnvrtc.so.13 /opt/cuda-stubs/libnvrtc.so
ENV VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    CUDA_HOME=/opt/venv/lib/python3.13/site-packages/nvidia/cu13 \
    FLASHINFER_EXTRA_LDFLAGS=-L/opt/cuda-stubs \
    SPARKSERVE_ROOT=/opt/sparkserve \
    PYTHONPATH=/opt/sparkserve/src

# ------------------------------------------------------------------------------------------------ runtime
FROM base AS runtime
ARG FLASHINFER_CUDA_ARCH_LIST="12.1a 12.0f"
COPY --from=stack /opt/venv /opt/venv
COPY --from=patched /opt/overlay/files/ /
COPY --from=patched /opt/overlay/deleted.txt /opt/sparkserve/patch-overlay-deleted.txt
RUN xargs -r -d '\n' rm -f -- < /opt/sparkserve/patch-overlay-deleted.txt
COPY --from=jit /opt/jit-cache /opt/jit-cache
COPY --from=patched /opt/sparkserve /opt/sparkserve
COPY --from=jit /opt/sparkserve /opt/sparkserve
# FlashInfer loads every prewarmed module as one of its AOT modules (a link in its package folder,
# src/sparkserve/image/aotlinks.py): /opt/jit-cache stays read-only and root-owned, and the server's JIT
# workspace is the cache volume's (src/sparkserve/serving/caches.py).
RUN python -m sparkserve.cli.imagebuild jit aot-link --build-info /opt/jit-cache/sparkserve-build-info.json \
        --site /opt/venv/lib/python3.13/site-packages
# The serving user: vLLM and every compile at run time write only into the volumes below, /tmp and its
# home. uid 10001 is outside the range of host users, so files it writes never map to a person. The
# folders are the mount points of compose's named volumes, which take their owner from here when created:
# the state volume (sparkserve-state, MoE tactics), the cache volume (sparkserve-cache, compile caches per
# image build) and the model cache (hf-cache).
RUN groupadd --system --gid 10001 serve \
    && useradd --system --no-log-init --uid 10001 --gid serve --home-dir /home/serve --create-home \
        --shell /usr/sbin/nologin serve \
    && mkdir -p /var/lib/sparkserve /var/cache/sparkserve /data/huggingface \
    && chown serve:serve /var/lib/sparkserve /var/cache/sparkserve /data/huggingface
# The whole product package (the build stages above had only their part): a serving or gate edit rebuilds
# from here on. Only src/sparkserve: the lab is not in the build context.
COPY src/sparkserve/ /opt/sparkserve/src/sparkserve/
COPY profiles/ /opt/sparkserve/profiles/
# What `sparkserve jit load-check` needs besides the module list (the JIT stage copied that one).
COPY docker/jit-unbound.toml /opt/sparkserve/docker/jit-unbound.toml
# At run time FlashInfer must see the build's arch list, CUDA path and link flags, or it recompiles.
ENV FLASHINFER_CUDA_ARCH_LIST=${FLASHINFER_CUDA_ARCH_LIST} \
    FLASHINFER_EXTRA_CUDAFLAGS=-DCCCL_DISABLE_CTK_COMPATIBILITY_CHECK \
    HF_HOME=/data/huggingface \
    VLLM_NO_USAGE_STATS=1 \
    DO_NOT_TRACK=1 \
    SPARKSERVE_PORT=8000 \
    SPARKSERVE_STATE_DIR=/var/lib/sparkserve \
    SPARKSERVE_CACHE_DIR=/var/cache/sparkserve
USER 10001:10001
WORKDIR /opt/sparkserve
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=10s --start-period=1800s --retries=3 \
    CMD ["/opt/venv/bin/python", "-m", "sparkserve.serving.health"]
ENTRYPOINT ["/opt/venv/bin/python", "-m", "sparkserve.serving"]
# Last, so a new commit rebuilds only this layer: the commit the image was built from (the image's
# provenance, sparkserve.image.provenance, reads it with the build info above; compose and CI pass it).
ARG SPARKSERVE_COMMIT=unknown
LABEL org.opencontainers.image.revision=$SPARKSERVE_COMMIT
ENV SPARKSERVE_COMMIT=$SPARKSERVE_COMMIT
