"""The metrics profile's dashboards checked offline: the schema check of their JSON (each rule by a
dashboard that breaks it), the panel queries as Grafana sends them, the metric names a query selects, the
declared speculation-only panels, the live check's verdicts on Prometheus's answers, and CI's Prometheus
configuration. The live run itself is CI's (scripts/ci/metrics.sh)."""

from __future__ import annotations

import copy
import io
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from sparkserve_lab.metrics import dashboards, live

from sparkserve.errors import SparkserveError

ROOT = Path(__file__).resolve().parents[2]
METRICS = ROOT / "metrics"
SHIPPED = sorted((METRICS / "grafana/dashboards").glob("*.json"))
DATASOURCES = {"sparkserve-prometheus": "prometheus"}
DS = {"type": "prometheus", "uid": "sparkserve-prometheus"}


def board() -> dict[str, Any]:
    return {
        "uid": "u", "title": "t", "schemaVersion": 39,
        "templating": {"list": [{"name": "model", "type": "query", "datasource": DS,
                                 "query": {"query": "label_values(m, model_name)"}}]},
        "panels": [
            {"type": "row", "id": 1, "title": "r", "gridPos": {"h": 1, "w": 24, "x": 0, "y": 0},
             "panels": []},
            {"type": "timeseries", "id": 2, "title": "a", "datasource": DS,
             "gridPos": {"h": 8, "w": 12, "x": 0, "y": 1},
             "targets": [{"refId": "A", "datasource": DS,
                          "expr": 'sum(rate(vllm:x_total{model_name=~"$model"}[$__rate_interval]))'}]},
        ],
    }


def test_the_shipped_dashboards_are_valid() -> None:
    assert SHIPPED, "no dashboard in metrics/grafana/dashboards"
    assert dashboards.check_folder(METRICS / "grafana/dashboards", METRICS / "grafana/provisioning") == []
    assert live.declared_problems([dashboards.load(p) for p in SHIPPED]) == []


def test_a_valid_board_passes() -> None:
    assert dashboards.check(board(), DATASOURCES) == []


def _breaks(change: Any) -> list[str]:
    b = board()
    change(b)
    return dashboards.check(b, DATASOURCES)


@pytest.mark.parametrize(("change", "fragment"), [
    (lambda b: b.pop("uid"), "no uid"),
    (lambda b: b.__setitem__("panels", []), "no panels"),
    (lambda b: b["panels"][1].__setitem__("id", 1), "id 1 also used"),
    (lambda b: b["panels"][1].pop("targets"), "no targets"),
    (lambda b: b["panels"][1]["targets"][0].__setitem__("expr", " "), "no expr"),
    (lambda b: b["panels"][1]["targets"].append(dict(b["panels"][1]["targets"][0])), "refIds used twice"),
    (lambda b: b["panels"][1].__setitem__("datasource", {"type": "prometheus", "uid": "other"}),
     "uid 'other' is not provisioned"),
    (lambda b: b["panels"][1].__setitem__("datasource", "Prometheus"), "must be an object with a uid"),
    (lambda b: b["panels"][1]["targets"][0].__setitem__("datasource", {"type": "loki", "uid":
                                                                        "sparkserve-prometheus"}),
     "type 'loki' is not that of"),
    (lambda b: b["panels"][1]["targets"][0].__setitem__("expr", "up{job=~\"$modle\"}"), "unknown variable"),
    (lambda b: b["panels"][1]["gridPos"].__setitem__("x", 20), "outside the 24-column grid"),
    (lambda b: b["panels"][1].pop("gridPos"), "gridPos needs integer"),
    (lambda b: b["panels"].append({**copy.deepcopy(b["panels"][1]), "id": 3}), "title used by another panel"),
    (lambda b: b["templating"]["list"][0].__setitem__("datasource", {"uid": "nope"}), "variable model"),
    (lambda b: b["panels"][0].__setitem__("targets", [{"refId": "A", "expr": "up"}]), "a row has no queries"),
])
def test_each_rule_refuses_a_board_that_breaks_it(change: Any, fragment: str) -> None:
    problems = _breaks(change)
    assert any(fragment in p for p in problems), problems


def test_panels_nested_in_a_collapsed_row_are_checked_and_queried() -> None:
    b = board()
    inner = b["panels"].pop()
    b["panels"][0].update(collapsed=True, panels=[inner])
    assert dashboards.check(b, DATASOURCES) == []
    assert [q.title for q in dashboards.queries(b)] == ["a"]
    inner["targets"][0]["expr"] = ""
    assert any("no expr" in p for p in dashboards.check(b, DATASOURCES))


def test_two_dashboards_with_one_uid_are_refused(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    for name in ("a.json", "b.json"):
        (tmp_path / "d" / name).write_text(json.dumps(board()))
    (tmp_path / "p/datasources").mkdir(parents=True)
    (tmp_path / "p/datasources/ds.yml").write_text(yaml.safe_dump(
        {"datasources": [{"name": "P", "uid": "sparkserve-prometheus", "type": "prometheus"}]}))
    assert any("also used by a.json" in p for p in dashboards.check_folder(tmp_path / "d", tmp_path / "p"))


def test_queries_render_as_grafana_sends_them() -> None:
    (q,) = dashboards.queries(board())
    assert (q.dashboard, q.panel_id, q.title, q.ref_id) == ("u", 2, "a", "A")
    assert dashboards.render(q.expr, {"model": ".*", "__rate_interval": "30s"}) == \
        'sum(rate(vllm:x_total{model_name=~".*"}[30s]))'
    assert dashboards.render("x{a=~\"${model}\"}", {"model": "m"}) == 'x{a=~"m"}'
    with pytest.raises(SparkserveError, match=r"no value for \$__range"):
        dashboards.render("increase(x[$__range])", {})


@pytest.mark.parametrize(("expr", "names"), [
    ('histogram_quantile(0.99, sum by (le) (rate(vllm:ttft_seconds_bucket{model_name=~"$model"}[5m])))',
     {"vllm:ttft_seconds_bucket"}),
    ("1 - node_memory_MemAvailable_bytes{job=\"node\"} / node_memory_MemTotal_bytes",
     {"node_memory_MemAvailable_bytes", "node_memory_MemTotal_bytes"}),
    ('sum by (position) (rate(a_total[1m])) / scalar(sum(rate(b_total{x="by (y)"}[1m])))',
     {"a_total", "b_total"}),
    ("max(up{job=\"serve\"}) or on() vector(0)", {"up"}),
])
def test_metric_names_of_a_query(expr: str, names: set[str]) -> None:
    assert dashboards.metric_names(expr) == names


def _sdist(tmp_path: Path, source: str) -> Path:
    path = tmp_path / "vllm-0.0.0.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        data = source.encode()
        info = tarfile.TarInfo("vllm-0.0.0/vllm/v1/metrics/loggers.py")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return path


def test_a_query_on_a_metric_the_release_does_not_define_is_named(tmp_path: Path) -> None:
    known = dashboards.vllm_metric_names(_sdist(tmp_path, 'Counter(name="vllm:x", documentation="")\n'
                                                          "('vllm:h_seconds', 'doc')\n"))
    assert known == {"vllm:x", "vllm:h_seconds"}
    b = board()
    assert dashboards.unknown_vllm_metrics(b, known) == []  # vllm:x_total is the counter vllm:x
    b["panels"][1]["targets"][0]["expr"] = "histogram_quantile(0.5, rate(vllm:h_secs_bucket[1m]))"
    assert dashboards.unknown_vllm_metrics(b, known) == [
        "u / a / A: vllm:h_secs_bucket is not a metric of this vLLM release"]


# --- the declared speculation-only panels -----------------------------------------------------------------

def test_every_declared_panel_selects_only_speculation_counters() -> None:
    boards = [dashboards.load(p) for p in SHIPPED]
    declared = [q for b in boards for q in dashboards.queries(b)
                if (q.dashboard, q.title) in live.NEEDS_SPECULATION]
    assert {(q.dashboard, q.title) for q in declared} == set(live.NEEDS_SPECULATION)
    for q in declared:
        assert all(n.startswith(live.SPECULATIVE_PREFIX) for n in dashboards.metric_names(q.expr)), q


def test_a_stale_or_wrong_declaration_is_a_problem(monkeypatch: pytest.MonkeyPatch) -> None:
    b = board()
    monkeypatch.setattr(live, "NEEDS_SPECULATION", {("u", "gone"): "r", ("u", "a"): "r"})
    problems = live.declared_problems([b])
    assert any("('u', 'gone'), which no dashboard has" in p for p in problems), problems
    wrong = "u / a / A is declared to need speculation but selects ['vllm:x_total']"
    assert any(wrong in p for p in problems), problems


# --- the live check's verdicts ----------------------------------------------------------------------------

class FakePrometheus(live.Prometheus):
    def __init__(self, answers: dict[str, Any]) -> None:
        super().__init__("http://prometheus.invalid")
        self.answers = answers
        self.asked: list[str] = []

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        self.asked.append(expr)
        answer = next((v for k, v in self.answers.items() if k in expr), [])
        if isinstance(answer, Exception):
            raise answer
        return list(answer)


def _series(*values: str) -> list[dict[str, Any]]:
    return [{"metric": {}, "values": [[0, v] for v in values]}]


def test_verdicts_no_data_nan_only_an_error_and_a_declared_panel(monkeypatch: pytest.MonkeyPatch) -> None:
    b = board()
    b["panels"] += [
        {**copy.deepcopy(b["panels"][1]), "id": 3, "title": "nan",
         "targets": [{"refId": "A", "expr": "nan_only"}, {"refId": "B", "expr": "broken"}]},
        {**copy.deepcopy(b["panels"][1]), "id": 4, "title": "spec",
         "targets": [{"refId": "A", "expr": "vllm:spec_decode_num_drafts_total"}]},
    ]
    monkeypatch.setattr(live, "NEEDS_SPECULATION", {("u", "spec"): "no speculation here"})
    prom = FakePrometheus({"vllm:x_total": _series("NaN", "2.5"), "nan_only": _series("NaN", "+Inf"),
                           "broken": SparkserveError("bad_data: parse error")})
    results = {r.query: r for r in live.check_panels(prom, [b], 0, 10, 2, {"__rate_interval": "30s"})}
    assert prom.asked[0] == 'sum(rate(vllm:x_total{model_name=~".*"}[30s]))'  # the variable at "All"
    assert results["u / a / A"].ok and results["u / a / A"].finite_points == 1
    assert not results["u / nan / A"].ok and "would show nothing" in results["u / nan / A"].line()
    assert not results["u / nan / B"].ok and "parse error" in results["u / nan / B"].line()
    assert results["u / spec / A"].ok  # declared, and without data
    prom.answers["vllm:spec_decode"] = _series("3")
    (spec,) = [r for r in live.check_panels(prom, [b], 0, 10, 2, {"__rate_interval": "30s"})
               if r.query == "u / spec / A"]
    assert not spec.ok and "remove it from NEEDS_SPECULATION" in spec.line()


def test_last_scrape_times_from_prometheus() -> None:
    assert live.scraped_at({"lastScrape": "0001-01-01T00:00:00Z"}) == 0
    nanoseconds = {"lastScrape": "2026-11-28T10:00:00.123456789Z"}
    assert live.scraped_at(nanoseconds) == pytest.approx(1795860000.123456)
    assert live.scraped_at({"lastScrape": "2026-11-28T11:00:00+01:00"}) == 1795860000


def test_ci_config_points_every_job_elsewhere_and_keeps_the_rest(tmp_path: Path) -> None:
    targets = {"serve": "127.0.0.1:8000", "node": "127.0.0.1:9100"}
    text = live.ci_config(METRICS / "prometheus.yml", targets, "2s")
    shipped = yaml.safe_load((METRICS / "prometheus.yml").read_text())
    ci = yaml.safe_load(text)
    assert ci["global"]["scrape_interval"] == ci["global"]["scrape_timeout"] == "2s"
    jobs = {j["job_name"]: j for j in ci["scrape_configs"]}
    assert jobs["serve"]["static_configs"] == [{"targets": ["127.0.0.1:8000"]}]
    assert jobs["node"]["static_configs"] == [{"targets": ["127.0.0.1:9100"]}]
    assert jobs["serve"]["scrape_interval"] == "2s"
    for job in shipped["scrape_configs"]:
        changed = ("static_configs", "scrape_interval", "scrape_timeout")
        rest = {k: v for k, v in job.items() if k not in changed}
        assert {k: jobs[job["job_name"]][k] for k in rest} == rest
    with pytest.raises(SparkserveError, match="every job needs one"):
        live.ci_config(METRICS / "prometheus.yml", {"serve": "x:1"}, "2s")
