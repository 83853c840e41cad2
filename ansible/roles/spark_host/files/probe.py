"""Read-only probe of a host for the spark_host checks, in one round trip; prints one JSON object.

argv: the GPU query command ('' when the target needs no GPU), the model cache directory.
"""

import json
import os
import platform
import shlex
import shutil
import subprocess
import sys

L, R = "{" + "{", "}" + "}"  # Go template braces, spelled so no template engine touches them


def run(argv):
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        return {"rc": p.returncode, "out": p.stdout.strip(), "err": p.stderr.strip()}
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"rc": 127, "out": "", "err": "%s: %s" % (argv[0], exc)}


def free_gb(path):
    while not os.path.exists(path):
        path = os.path.dirname(path) or "/"
    st = os.statvfs(path)
    return {"path": path, "free_gb": round(st.f_bavail * st.f_frsize / 2**30, 1)}


def main():
    smi_cmd, cache_dir = sys.argv[1], sys.argv[2]
    mem_kb = 0
    with open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
    out = {
        "arch": platform.machine(),
        "mem_gb": round(mem_kb / 2**20, 1),
        "docker": run(["docker", "version", "--format", L + ".Server.Version" + R]),
        "compose": run(["docker", "compose", "version", "--short"]),
        "info": run(["docker", "info", "--format", L + ".DockerRootDir" + R + " " + L + "json .Runtimes" + R]),
        "smi": run(shlex.split(smi_cmd)) if smi_cmd else None,
        "ctk": bool(shutil.which("nvidia-ctk") or shutil.which("nvidia-container-cli")),
    }
    root = (out["info"]["out"].split(" ") + [""])[0] or "/var/lib/docker"
    out["disk"] = [dict(free_gb(root), what="image"), dict(free_gb(cache_dir), what="model")]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
