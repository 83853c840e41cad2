"""Level 6, matrix: serving profiles as shipped and their one-variable ablations, each in its own server
with levels 1, 1.5 and 4. A configuration is a profile plus variable overrides, resolved by the
entrypoint's parser and served by the entrypoint itself (sparkserve_lab/server.py), so a matrix can only
express what a user can deploy, and measures what the entrypoint starts.

name: spark
profile: spark                     # default profile of every configuration (profiles/NAME.env or a path)
set: {MODEL: /models/gpt-oss-120b} # harness settings for every configuration (not what is compared)
tokenizer: /models/gpt-oss-120b    # local tokenizer for llama-benchy
hardware: null                     # results/<hardware>/; null = detected
random_weights: false              # true: LOAD_FORMAT=dummy runs (level 1's harmony check is not
                                   #   applicable, llama-benchy goes through bench.relay)
kernel_rules: null                 # default lab/configs/engine-kernels.toml
server: {python: python3, host: 127.0.0.1, port: 8000, ready_timeout_s: 1800, env: {}}
                                   # python runs the entrypoint; host and port are SPARKSERVE_LISTEN and
                                   # SPARKSERVE_PORT; env: engine variables besides the profile
bench: {preset: quick}             # optional overrides: pp, tg, depth, concurrency, runs, timeout_s
configurations:
  - name: spark                    # optional: default <profile>[+VAR=VALUE...]
  - set: {MOE_BACKEND: marlin}     # an ablation of the default profile
  - profile: spark-graph-safe      # another shipped profile

Every configuration is resolved and checked against the kernel rules before the first server starts:
an unknown profile, an unknown variable, an invalid value, or a claim no rule checks stops the matrix.
Each server writes its log, a `<log>.pid` file (the entrypoint's process group) and its launch plan
(`<log>.plan.json`) to the work directory, and keeps its caches and state there unless the profile names
other folders; SIGTERM / SIGINT stop the running server before the matrix exits.
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkserve.errors import SparkserveError
from sparkserve.gate import smoke
from sparkserve.gate.common import Client, LevelResult
from sparkserve.progress import say
from sparkserve.serving import profiles
from sparkserve.serving.profile import ProfileError
from sparkserve_lab.bench import presets
from sparkserve_lab.levels import benchmark
from sparkserve_lab.server import NotReady, Server, serving
from sparkserve_lab.server import server_for as entrypoint_server
from sparkserve_lab.validate import profile_rules
from sparkserve_lab.validate.kernels import RULES_FILE
from sparkserve_lab.validate.runs import profile_record


@dataclass
class MatrixEntry:
    name: str
    resolved: profiles.Resolved


def load(path: Path) -> dict[str, Any]:
    try:
        import yaml
    except ImportError as exc:
        raise SparkserveError("matrix files need PyYAML: pip install -e lab") from exc
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise SparkserveError(f"cannot read the matrix {path}: {exc}") from None
    if not isinstance(data, dict) or not data.get("configurations"):
        raise SparkserveError(f"{path}: needs a `configurations` list")
    for key in ("profile", "tokenizer"):
        if not data.get(key):
            raise SparkserveError(f"{path}: needs `{key}`")
    stale = [k for k in ("model", "args") if k in data] + [
        "configurations[].args" for c in data["configurations"] if isinstance(c, dict) and "args" in c][:1]
    if stale:
        raise SparkserveError(f"{path}: {', '.join(stale)}: vLLM arguments are not written by hand; name a "
                              "profile and its variables (`profile:`, `set:`)")
    return data


def _strs(where: str, table: Any) -> dict[str, str]:
    if table is None:
        return {}
    if not isinstance(table, dict):
        raise SparkserveError(f"{where}: must be a mapping of VARIABLE: value")
    return {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in table.items()}


def common_settings(data: dict[str, Any]) -> dict[str, str]:
    """The matrix-wide `set`, plus what the harness itself needs: the server's address and port, and dummy
    weights for random-weight matrices."""
    common = _strs("set", data.get("set"))
    srv = data.get("server") or {}
    common["SPARKSERVE_LISTEN"] = str(srv.get("host", "127.0.0.1"))
    common["SPARKSERVE_PORT"] = str(srv.get("port", 8000))
    if data.get("random_weights") is True:
        common["LOAD_FORMAT"] = "dummy"
    return common


def entries(data: dict[str, Any], root: Path, rules_file: Path) -> list[MatrixEntry]:
    """Every configuration resolved and covered by the kernel rules, or a SparkserveError that names the
    configuration and the profile's own message."""
    common = common_settings(data)
    rules = profile_rules.load(rules_file)
    out: list[MatrixEntry] = []
    for i, c in enumerate(data["configurations"]):
        if not isinstance(c, dict):
            raise SparkserveError(f"configuration {i + 1}: must be a mapping (name, profile, set)")
        name = str(c.get("profile") or data["profile"])
        where = f"configuration {c.get('name') or i + 1}"
        try:
            res = profiles.resolve(name, root, common, _strs(f"{where}: set", c.get("set")))
        except ProfileError as exc:
            raise SparkserveError(f"{where}: invalid profile: {exc}") from None
        except SparkserveError as exc:
            raise SparkserveError(f"{where}: {exc}") from None
        missing = profile_rules.uncovered(res.profile, rules)
        if missing:
            raise SparkserveError(f"{where} ({res.label}): no kernel rule in {rules_file} checks "
                                  f"{', '.join(missing)}; add one before measuring it")
        out.append(MatrixEntry(str(c.get("name") or res.label), res))
    names = [e.name for e in out]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise SparkserveError(f"configurations named twice: {', '.join(dupes)}")
    seen: dict[str, str] = {}
    for e in out:
        key = repr(e.resolved.profile)
        if key in seen:
            raise SparkserveError(f"{e.name} resolves to the same server as {seen[key]}: measure it once")
        seen[key] = e.name
    return out


@contextlib.contextmanager
def _stop_on_term() -> Iterator[None]:
    """Turn SIGTERM into SystemExit so `finally` blocks stop the server (e.g. under `timeout`)."""

    def handler(signum: int, frame: object) -> None:
        say(f"level 6: signal {signum}: stopping the server, leaving the matrix")
        raise SystemExit(128 + signum)

    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def run(
    path: Path, store: Path, root: Path, only: list[str] | None = None, work: Path | None = None
) -> LevelResult:
    with _stop_on_term():
        return _run(path, store, root, only, work)


def server_for(e: MatrixEntry, srv: dict[str, Any], work: Path, root: Path | None = None) -> Server:
    """The configuration's server (not started): the entrypoint, run by `server.python`, in the
    configuration's container environment plus `server.env`."""
    return entrypoint_server(e.resolved, work, e.name, python=str(srv.get("python", "python3")),
                             extra_env=_strs("server.env", srv.get("env")), root=root)


def _run(path: Path, store: Path, root: Path, only: list[str] | None, work: Path | None) -> LevelResult:
    data = load(path)
    rk = data.get("kernel_rules")
    rules_file = (Path(rk) if Path(rk).is_absolute() else root / rk) if rk else root / RULES_FILE
    all_entries = entries(data, root, rules_file)
    known = [e.name for e in all_entries]
    unknown = [n for n in only or [] if n not in known]
    if unknown:
        raise SparkserveError(f"{path}: no configuration {', '.join(unknown)} (known: {', '.join(known)})")
    res = LevelResult("6", f"matrix {data.get('name', path.stem)}")
    start = time.monotonic()
    srv = data.get("server") or {}
    b = data.get("bench") or {}
    preset = presets.get(str(b.get("preset", "quick"))).with_overrides(
        b.get("pp"), b.get("tg"), b.get("depth"), b.get("concurrency"), b.get("runs")
    )
    bench_timeout = float(b["timeout_s"]) if b.get("timeout_s") else None
    work = work or root / ".work" / "matrix"
    for e in all_entries:
        if only and e.name not in only:
            continue
        say(f"==> matrix: {e.name}")
        server = server_for(e, srv, work, root)
        try:
            with serving(server, float(srv.get("ready_timeout_s", 1800))):
                _measure(e, server, data, res, work, store, root, preset, bench_timeout, rules_file)
        except NotReady as exc:
            res.add(f"{e.name}: server starts", False, f"{exc}; log {server.log}")
    res.wall_s = time.monotonic() - start
    return res


def _measure(e: MatrixEntry, server: Server, data: dict[str, Any], res: LevelResult, work: Path, store: Path,
             root: Path, preset: presets.Preset, bench_timeout: float | None, rules_file: Path) -> None:
    """Levels 1, 1.5 and 4 of one configuration on its running server."""
    random_weights = data.get("random_weights") is True
    srv = data.get("server") or {}
    l1 = smoke.run(Client(server.base_url), random_weights=random_weights)
    l1_file = work / f"{e.name}-level1.json"
    l1.write(l1_file)
    res.add(f"{e.name}: level 1", l1.ok, l1.summary())
    run_, l4 = benchmark.run(
        benchmark.BenchSpec(
            base_url=server.base_url,
            tokenizer=Path(str(data["tokenizer"])),
            preset=preset,
            configuration=e.name,
            store=store,
            root=root,
            hardware=data.get("hardware"),
            engine_log=server.log,
            server_pid=server.pid,
            serve_python=str(srv.get("python", "python3")),
            attach=(l1_file,),
            kernel_rules=rules_file,
            timeout_s=bench_timeout,
            token_relay=random_weights,
            random_weights=random_weights,
            profile=profile_record(e.resolved.name, e.resolved.env, e.resolved.overrides),
        )
    )
    res.add(f"{e.name}: levels 1.5 + 4", l4.ok, f"{l4.summary()} -> {run_.hardware}/{run_.run_id}")
