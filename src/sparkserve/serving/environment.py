"""The container's environment, name by name, before the profile is read.

The image runs under compose, plain `docker run`, Kubernetes and other orchestrators, each of which adds
variables of its own (KUBERNETES_SERVICE_HOST, LD_LIBRARY_PATH, TMPDIR, SSL_CERT_FILE, OTEL_*, ...). So:
- refused (exit 2, with what to do): a name that looks like ours but is no profile variable (any
  `SPARKSERVE_*`, or one or two letters away from a profile variable: a typo would otherwise be ignored),
  a compose host setting put in an env file, an engine variable that would replace a validated setting,
  and, where the installed vLLM says which variables it reads, a `VLLM_*` name it does not read that is a
  letter or two from one it does (vLLM would ignore the typo silently), and a value the patch series'
  engine switches do not accept (serving/switches.py);
- passed through unchecked: engine variables (ENGINE_PREFIXES) and the image's, Docker's and the shell's;
- everything else is passed through with one warning that lists the names.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from sparkserve.serving import switches
from sparkserve.serving.kinds import ProfileError
from sparkserve.serving.settings import ENGINE_PREFIXES, VARIABLES

# Engine variables that would silently replace a validated setting.
ENGINE_OVERRIDES = {"VLLM_ATTENTION_BACKEND": "ATTENTION_BACKEND",
                    "VLLM_MXFP4_MOE_GEMV": "MOE_BACKEND (marlin-gemv)"}
# Set by the image (Dockerfile ENV), Docker, or the shell; never an error, never checked for emptiness.
SYSTEM_VARIABLES = frozenset({
    "PATH", "HOSTNAME", "HOME", "TERM", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TZ", "PWD", "OLDPWD",
    "SHLVL", "_", "USER", "LOGNAME", "SHELL", "container", "VIRTUAL_ENV", "SPARKSERVE_ROOT",
    "SPARKSERVE_BUILD_INFO", "SPARKSERVE_COMMIT", "DO_NOT_TRACK", "DEBIAN_FRONTEND", "SPARKSERVE_DEV_WHEELS",
    "SPARKSERVE_DEV_SRC", "PYTHONDONTWRITEBYTECODE",  # the dev image sets it empty: bytecode is written
    "SPARKSERVE_PROFILE_FILE",  # docker-compose.yml: the profile file it loaded (serving/profiles.py)
    *(f"{p}_PROXY" for p in ("HTTP", "HTTPS", "FTP", "ALL", "NO")),
    *(f"{p}_proxy" for p in ("http", "https", "ftp", "all", "no")),
})
# docker compose reads these on the host (shell or .env next to docker-compose.yml); in an env file that
# the container reads they would do nothing.
COMPOSE_VARIABLES = (
    "SPARKSERVE_IMAGE", "SPARKSERVE_BIND", "SPARKSERVE_HOST_PORT", "SPARKSERVE_API_KEY_FILE",
    "SPARKSERVE_LOCAL_ENV", "SPARKSERVE_MODEL_DIR", "SPARKSERVE_BASE_IMAGE", "SPARKSERVE_JIT_SET",
    "SPARKSERVE_MAX_JOBS",
    # the metrics profile's (docs/METRICS.md)
    "SPARKSERVE_METRICS_BIND", "SPARKSERVE_PROMETHEUS_PORT", "SPARKSERVE_GRAFANA_PORT",
    "SPARKSERVE_GRAFANA_PASSWORD_FILE", "SPARKSERVE_METRICS_RETENTION", "SPARKSERVE_METRICS_RETENTION_SIZE",
    "SPARKSERVE_METRICS_DIR", "SPARKSERVE_PROMETHEUS_IMAGE", "SPARKSERVE_NODE_EXPORTER_IMAGE",
    "SPARKSERVE_GRAFANA_IMAGE",
)
# What Kubernetes injects for a Service named `sparkserve...` in the pod's namespace (service links).
_SERVICE_LINK = re.compile(
    r"^SPARKSERVE[A-Z0-9_]*_(SERVICE_HOST|SERVICE_PORT\w*|PORT(_\d+_(TCP|UDP|SCTP)\w*)?)$", re.ASCII)


def distance(a: str, b: str) -> int:
    """Edits (insert, delete, replace, swap two neighbours) from a to b."""
    prev2: list[int] = []
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        row = [i] + [0] * len(b)
        for j, cb in enumerate(b, 1):
            row[j] = min(prev[j] + 1, row[j - 1] + 1, prev[j - 1] + (ca != cb))
            if i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                row[j] = min(row[j], prev2[j - 2] + 1)
        prev2, prev = prev, row
    return prev[-1]


def near_miss(name: str, known: Iterable[str]) -> str | None:
    """The known name `name` is a typo of: the same but for case, or one edit away (two for names longer
    than 8 characters)."""
    upper = name.upper()
    best: tuple[int, str] | None = None
    for k in known:
        d = distance(upper, k.upper())
        if d <= (2 if len(k) > 8 else 1) and (best is None or d < best[0]):
            best = (d, k)
    return best[1] if best else None


def check(env: Mapping[str, str], engine_names: frozenset[str] | None = None) -> list[str]:
    """Raise a ProfileError for the first name (sorted) that must not pass; return the warnings."""
    if env.get("SPARKSERVE_PORT", "").startswith("tcp://"):
        raise ProfileError("SPARKSERVE_PORT", env["SPARKSERVE_PORT"], _ours_unknown("SPARKSERVE_PORT", env))
    unchecked = []
    for name in sorted(env):
        if name in VARIABLES or name in SYSTEM_VARIABLES:
            continue
        value = env[name]
        if name in ENGINE_OVERRIDES:
            raise ProfileError(name, value, f"would override {ENGINE_OVERRIDES[name]}, which the profile "
                                            f"validates; set {ENGINE_OVERRIDES[name]} instead")
        if name in COMPOSE_VARIABLES:
            raise ProfileError(name, value, "is read by docker compose on the host (the shell, or .env "
                                            "next to docker-compose.yml), not from an env file the container "
                                            "reads")
        close = near_miss(name, VARIABLES)
        if close:
            raise ProfileError(name, value, f"unknown variable; did you mean {close}?")
        if name.startswith("SPARKSERVE_"):
            raise ProfileError(name, value, _ours_unknown(name, env))
        if name.startswith(ENGINE_PREFIXES):
            if value.strip() == "":
                raise ProfileError(name, value, "empty; remove the line or give a value")
            if engine_names is not None and name.startswith("VLLM_") and name not in engine_names:
                typo = near_miss(name, engine_names)
                if typo:
                    raise ProfileError(name, value, f"vLLM reads no {name} and would ignore it; did you mean "
                                                    f"{typo}?")
            continue  # an engine variable, passed through
        unchecked.append(name)
    warnings = switches.check(env)  # the patch series' engine switches: their values, their backend
    if not unchecked:
        return warnings
    return [*warnings, f"passed through unchecked (not profile variables, engine variables or the image's): "
                       f"{', '.join(unchecked)}"]


def _ours_unknown(name: str, env: Mapping[str, str]) -> str:
    if _SERVICE_LINK.match(name) or env.get(name, "").startswith("tcp://"):
        return ("a Kubernetes service link (a Service whose name starts with sparkserve is in this "
                "namespace), "
                "and SPARKSERVE_ names are the image's: set `enableServiceLinks: false` in the pod spec, or "
                "name the Service otherwise")
    return "unknown variable; not a profile variable (docs/PROFILES.md lists them) nor one the image sets"
