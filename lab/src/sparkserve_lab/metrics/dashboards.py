"""The Grafana dashboards of the metrics profile (metrics/grafana/), checked rather than trusted.

`check` is a schema check of the dashboard JSON that Grafana's file provisioning loads: what a dashboard
needs to show anything (panels with unique ids and titles, a grid position, Prometheus targets with an
expression and a unique refId, a data source that the provisioning defines) and variables that exist.
`queries` lists every panel's queries, and `render` turns one into the PromQL that Prometheus runs, as
Grafana would (its variables replaced), so that the live check (live.py) can ask Prometheus for each.
"""

from __future__ import annotations

import json
import re
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sparkserve.errors import SparkserveError

# Grafana's own variables that a query may use, and what they mean to the live check (live.py sets them).
BUILTINS = ("__rate_interval", "__interval", "__range")
GRID_COLUMNS = 24
# Panel types that draw a query's result; rows only group.
ROW = "row"
# Words of PromQL that look like names but are not metrics.
_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless",
             "offset", "inf", "nan", "atan2"}
_VARIABLE = re.compile(r"\$(?:\{(?P<braced>[A-Za-z0-9_]+)(?::[a-z]+)?\}|(?P<plain>[A-Za-z0-9_]+))")


@dataclass(frozen=True)
class Query:
    """One target of one panel: what Grafana sends to Prometheus for it."""

    dashboard: str  # the dashboard's uid
    panel_id: int
    title: str
    ref_id: str
    expr: str

    @property
    def name(self) -> str:
        return f"{self.dashboard} / {self.title} / {self.ref_id}"


def load(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise SparkserveError(f"{path}: not a readable JSON file: {exc}") from None
    if not isinstance(data, dict):
        raise SparkserveError(f"{path}: a dashboard is a JSON object, not {type(data).__name__}")
    return data


def dashboard_files(folder: Path) -> list[Path]:
    files = sorted(folder.glob("*.json"))
    if not files:
        raise SparkserveError(f"{folder}: no dashboard (*.json) in it")
    return files


def datasource_uids(provisioning: Path) -> dict[str, str]:
    """uid -> type of every data source the provisioning folder (provisioning/datasources/*.yml) defines."""
    found: dict[str, str] = {}
    for path in sorted((provisioning / "datasources").glob("*.y*ml")):
        doc = yaml.safe_load(path.read_text()) or {}
        for ds in doc.get("datasources") or []:
            if not ds.get("uid"):
                raise SparkserveError(f"{path}: data source {ds.get('name')!r} has no uid: dashboards cannot "
                                      "name it")
            found[str(ds["uid"])] = str(ds.get("type", ""))
    if not found:
        raise SparkserveError(f"{provisioning}/datasources: no data source provisioned")
    return found


def _panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel, those nested in collapsed rows included, in order."""
    out: list[dict[str, Any]] = []
    for p in dashboard.get("panels") or []:
        out.append(p)
        if isinstance(p, dict):
            out.extend(q for q in p.get("panels") or [] if isinstance(q, dict))
    return out


def variables_of(dashboard: dict[str, Any]) -> list[str]:
    return [str(v.get("name")) for v in (dashboard.get("templating") or {}).get("list") or []
            if isinstance(v, dict)]


def used_variables(expr: str) -> list[str]:
    return [m["braced"] or m["plain"] for m in _VARIABLE.finditer(expr)]


def check(dashboard: dict[str, Any], datasources: dict[str, str], where: str = "dashboard") -> list[str]:
    """What keeps Grafana from showing this dashboard as meant: one line per problem (none: valid)."""
    problems: list[str] = []

    def need(ok: bool, what: str) -> bool:
        if not ok:
            problems.append(f"{where}: {what}")
        return ok

    def datasource_ok(ds: Any, of: str) -> None:
        if need(isinstance(ds, dict) and "uid" in ds,
                f"{of}: datasource must be an object with a uid, not {ds!r}"):
            need(ds["uid"] in datasources, f"{of}: datasource uid {ds['uid']!r} is not provisioned "
                                           f"(provisioned: {', '.join(sorted(datasources))})")
            need(ds.get("type") in (None, datasources.get(ds["uid"])),
                 f"{of}: datasource type {ds.get('type')!r} is not that of {ds['uid']!r}")

    need(isinstance(dashboard.get("uid"), str) and bool(dashboard.get("uid")),
         "no uid (provisioning and links need a stable one)")
    need(isinstance(dashboard.get("title"), str) and bool(dashboard.get("title")), "no title")
    need(isinstance(dashboard.get("schemaVersion"), int), "no integer schemaVersion")
    if not need(isinstance(dashboard.get("panels"), list) and bool(dashboard.get("panels")), "no panels"):
        return problems
    variables = variables_of(dashboard)
    for v in (dashboard.get("templating") or {}).get("list") or []:
        name = v.get("name") if isinstance(v, dict) else None
        if need(isinstance(name, str) and bool(name), f"a variable without a name: {v!r}") and \
                v.get("type") == "query":
            datasource_ok(v.get("datasource"), f"variable {name}")
            query = v.get("query")
            need(bool(query.get("query") if isinstance(query, dict) else query), f"variable {name}: no query")
    need(len(set(variables)) == len(variables), f"variables named twice: {variables}")
    ids: dict[int, str] = {}
    titles: set[str] = set()
    for p in _panels(dashboard):
        if not need(isinstance(p, dict), f"a panel is not an object: {p!r}"):
            continue
        title = p.get("title")
        of = f"panel {p.get('id')!r} ({title!r})"
        if need(isinstance(p.get("id"), int), f"{of}: no integer id"):
            need(p["id"] not in ids, f"{of}: id {p['id']} also used by panel {ids.get(p['id'])!r}")
            ids[p["id"]] = str(title)
        need(isinstance(p.get("type"), str) and bool(p.get("type")), f"{of}: no type")
        grid = p.get("gridPos")
        if need(isinstance(grid, dict) and all(isinstance(grid.get(k), int) for k in "hwxy"),
                f"{of}: gridPos needs integer h, w, x, y"):
            assert isinstance(grid, dict)
            need(grid["w"] > 0 and grid["h"] > 0 and grid["x"] >= 0 and grid["y"] >= 0
                 and grid["x"] + grid["w"] <= GRID_COLUMNS, f"{of}: gridPos {grid} is outside the "
                                                            f"{GRID_COLUMNS}-column grid")
        if p.get("type") == ROW:
            need(not p.get("targets"), f"{of}: a row has no queries")
            continue
        if need(isinstance(title, str) and bool(title), f"{of}: no title"):
            need(title not in titles, f"{of}: title used by another panel (the live check and the docs name "
                                      "panels by title)")
            titles.add(str(title))
        datasource_ok(p.get("datasource"), of)
        targets = p.get("targets")
        if not need(isinstance(targets, list) and bool(targets), f"{of}: no targets (queries)"):
            continue
        assert isinstance(targets, list)
        refs: list[str] = []
        for t in targets:
            if not need(isinstance(t, dict), f"{of}: a target is not an object"):
                continue
            ref = t.get("refId")
            need(isinstance(ref, str) and bool(ref), f"{of}: a target without refId")
            refs.append(str(ref))
            expr = t.get("expr")
            if need(isinstance(expr, str) and bool(expr.strip()), f"{of} target {ref}: no expr"):
                assert isinstance(expr, str)
                unknown = [v for v in used_variables(expr) if v not in variables and v not in BUILTINS]
                need(not unknown, f"{of} target {ref}: unknown variable(s) {unknown} (dashboard variables: "
                                  f"{variables}; Grafana's: {list(BUILTINS)})")
            if "datasource" in t:
                datasource_ok(t["datasource"], f"{of} target {ref}")
        need(len(set(refs)) == len(refs), f"{of}: refIds used twice: {refs}")
    return problems


def check_folder(dashboards: Path, provisioning: Path) -> list[str]:
    """Every dashboard of the folder against the provisioned data sources; uids unique across them."""
    datasources = datasource_uids(provisioning)
    problems: list[str] = []
    uids: dict[str, Path] = {}
    for path in dashboard_files(dashboards):
        d = load(path)
        problems += check(d, datasources, path.name)
        uid = str(d.get("uid"))
        if uid in uids:
            problems.append(f"{path.name}: uid {uid!r} also used by {uids[uid].name}")
        uids[uid] = path
    return problems


def queries(dashboard: dict[str, Any]) -> list[Query]:
    uid = str(dashboard.get("uid"))
    return [Query(uid, int(p["id"]), str(p.get("title")), str(t["refId"]), str(t["expr"]))
            for p in _panels(dashboard) if p.get("type") != ROW
            for t in p.get("targets") or [] if not t.get("hide")]


def render(expr: str, values: dict[str, str]) -> str:
    """The query as Grafana sends it, each $variable / ${variable} replaced by values[name]."""

    def one(m: re.Match[str]) -> str:
        name = m["braced"] or m["plain"]
        if name not in values:
            raise SparkserveError(f"no value for ${name} in {expr!r}")
        return values[name]

    return _VARIABLE.sub(one, expr)


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (label matchers, ranges, grouping labels, strings,
    functions and keywords left out)."""
    text = re.sub(r'"(?:\\.|[^"\\])*"', '""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = set()
    for m in re.finditer(r"(?<![A-Za-z0-9_:.$])([A-Za-z_:][A-Za-z0-9_:]*)(\s*\()?", text):
        word, call = m.group(1), m.group(2)
        if call or word in _KEYWORDS:
            continue
        names.add(word)
    return names


def base_name(metric: str) -> str:
    """A sample's metric family as the exporting code names it: counters gain _total, histograms
    _bucket/_sum/_count."""
    for suffix in ("_total", "_bucket", "_sum", "_count"):
        if metric.endswith(suffix):
            return metric[: -len(suffix)]
    return metric


def vllm_metric_names(sdist: Path) -> set[str]:
    """The `vllm:` metric names that a vLLM source release defines (its Python sources' string literals)."""
    found: set[str] = set()
    literal = re.compile(r"""["'](vllm:[a-z0-9_]+)["']""")
    try:
        with tarfile.open(sdist) as tar:
            for member in tar:
                if member.isfile() and member.name.endswith(".py") and "/vllm/" in member.name:
                    f = tar.extractfile(member)
                    if f is not None:
                        found.update(literal.findall(f.read().decode(errors="replace")))
    except (OSError, tarfile.TarError) as exc:
        raise SparkserveError(f"cannot read the vLLM sdist {sdist}: {exc}") from None
    if not found:
        raise SparkserveError(f"{sdist}: no vllm: metric name in it (not a vLLM source release?)")
    return found


def unknown_vllm_metrics(dashboard: dict[str, Any], known: set[str]) -> list[str]:
    """Panels that select a vllm: metric the given release does not define: one line each."""
    out = []
    for q in queries(dashboard):
        for name in sorted(metric_names(q.expr)):
            if name.startswith("vllm:") and name not in known and base_name(name) not in known:
                out.append(f"{q.name}: {name} is not a metric of this vLLM release")
    return out
