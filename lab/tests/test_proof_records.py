"""Every stored proof and measurement earns its verdict: a computed record's verdict is what its exit code
gives, a timing is never a pass, a record without an exit code says it was imported, and every script a
record cites can still be found (in the tree, or in the commit it ran from)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from sparkserve_lab import proofs
from sparkserve_lab.runstore import Store

ROOT = Path(__file__).resolve().parents[2]


def _tree_only(path: str, commit: str | None) -> bool:
    return commit is None and path == "lab/scripts/gpu/here.py"


def _meta(**kw: object) -> dict[str, object]:
    base: dict[str, object] = {"kind": "proof", "verdict": "pass", "exit_code": 0,
                               "command": ["python3", "lab/scripts/gpu/here.py"], "repo": {"commit": "abc"}}
    return {**base, **kw}


def test_a_consistent_computed_record_has_no_problem() -> None:
    assert proofs.record_problems(_meta(), _tree_only) == []
    assert proofs.record_problems(_meta(verdict="fail", exit_code=3), _tree_only) == []
    assert proofs.record_problems(_meta(kind="measurement", verdict="measured"), _tree_only) == []


@pytest.mark.parametrize(("meta", "problem"), [
    (_meta(verdict="pass", exit_code=1), "exit code 1 gives 'fail'"),
    (_meta(verdict="fail", exit_code=0), "exit code 0 gives 'pass'"),
    (_meta(kind="measurement", verdict="pass"), "never 'pass'"),
    (_meta(kind="measurement", verdict="pass", exit_code=None, imported=True), "never 'pass'"),
    (_meta(exit_code=None), "not marked imported"),
    (_meta(exit_code="0"), "not an integer"),
    (_meta(command="python3 lab/scripts/gpu/gone.py --out x.json"), "cites lab/scripts/gpu/gone.py"),
    (_meta(command=["bash", "tests/gpu/gone.sh"], repo={}), "commit it ran from (None)"),
    (_meta(kind="bench"), "not a proof or measurement"),
])
def test_an_unearned_verdict_is_a_problem(meta: dict[str, object], problem: str) -> None:
    found = proofs.record_problems(meta, _tree_only)
    assert any(problem in p for p in found), found


def test_an_imported_record_may_lack_an_exit_code() -> None:
    assert proofs.record_problems(_meta(exit_code=None, imported=True), _tree_only) == []


def test_a_script_gone_from_the_tree_resolves_in_the_commit_it_ran_from() -> None:
    at_commit = _meta(command="python3 lab/scripts/gpu/old.py", repo={"commit": None, "added_in": "c0ffee"})
    assert proofs.record_problems(at_commit, lambda p, c: c == "c0ffee") == []
    assert proofs.record_problems(at_commit, lambda p, c: c == "other") != []


def test_a_script_cited_before_its_folder_moved_is_found_where_it_is_now() -> None:
    old = _meta(command="python3 scripts/gpu/here.py", repo={"commit": None, "added_in": "c0ffee"})
    assert proofs.record_problems(old, lambda p, c: c is None and p == "lab/scripts/gpu/here.py") == []
    assert proofs.record_problems(old, lambda p, c: False) != []


def test_cited_scripts_are_repository_paths_only() -> None:
    meta = {"command": "SPARKSERVE_RESULTS=$OUT python3 -m pytest -q tests/gpu/test_x.py; then "
                       "bash lab/scripts/gpu/a.sh /tmp/scripts/b.py"}
    assert proofs.cited_scripts(meta) == ["lab/scripts/gpu/a.sh", "tests/gpu/test_x.py"]


def test_every_stored_record_earns_its_verdict() -> None:
    store = Store(ROOT / "lab" / "results")
    records = store.proofs() + store.measurements()
    assert records, "the repository stores proofs"
    exists = proofs.git_exists(ROOT)
    problems = {f"{r.hardware}/{r.run_id}": p for r in records
                if (p := proofs.record_problems(r.metadata(), exists))}
    assert problems == {}


def test_proof_run_verdicts(tmp_path: Path) -> None:
    store = Store(tmp_path / "results")
    rec, rc = proofs.run(store, ROOT, "t", ["vllm/0001-x"], [sys.executable, "-c", "pass"],
                         hardware="hw", measurement=True)
    assert rc == 0 and rec.metadata()["kind"] == "measurement" and rec.metadata()["verdict"] == "measured"
    bad, rc = proofs.run(store, ROOT, "t", ["vllm/0001-x"], [sys.executable, "-c", "raise SystemExit(1)"],
                         hardware="hw", measurement=True)
    assert rc == 1 and bad.metadata()["verdict"] == "fail"
    assert [r.run_id for r in store.measurements()] == sorted([rec.run_id, bad.run_id])
    assert store.proofs() == []


def test_git_exists_reads_history() -> None:
    if not (ROOT / ".git").exists():
        pytest.fail("the unit tests run in a git checkout (CI clones the repository)")
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    exists = proofs.git_exists(ROOT)
    assert exists("pyproject.toml", None) and exists("pyproject.toml", head)
    assert not exists("lab/scripts/gpu/never-existed.py", head)


def test_proofs_md_shows_computed_measured_and_imported_apart(tmp_path: Path) -> None:
    from sparkserve_lab.report import proofs as report
    from sparkserve_lab.runstore import write_json

    store = Store(tmp_path / "results")
    records = (("computed", {"kind": "proof", "verdict": "pass", "exit_code": 0}),
               ("timed", {"kind": "measurement", "verdict": "measured", "exit_code": 0}),
               ("by-hand", {"kind": "proof", "verdict": "pass", "exit_code": None, "imported": True}))
    for name, extra in records:
        rec = store.new_record("hw", name)
        write_json(rec.file("metadata.json"), {"name": name, "proves": ["vllm/0001-a"], "command": ["true"],
                                               "created": "2026-11-26", **extra})
    text = report.render(store, tmp_path / "docs" / "PROOFS.md", {"vllm": {}}, ROOT)
    computed = text.split("### Computed proofs")[1].split("###")[0]
    timed = text.split("### Measurements")[1].split("###")[0]
    imported = text.split("### Imported records")[1]
    assert "[computed]" in computed and "[timed]" not in computed and "[by-hand]" not in computed
    assert "[timed]" in timed and "| measured |" in timed
    assert "[by-hand]" in imported and "pass (as written, no exit code)" in imported
    assert "1 computed proof(s), 1 measurement(s), 1 imported" in text


def test_an_artifact_goes_where_asked_or_into_the_record_under_proof_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(proofs.PROOF_DIR_ENV, raising=False)
    assert proofs.write_artifact(None, "bench.json", {"rows": []}) is None  # neither: nothing written
    asked = tmp_path / "asked.json"
    assert proofs.write_artifact(str(asked), "bench.json", {"rows": [1]}) == asked
    record = tmp_path / "record"
    record.mkdir()
    monkeypatch.setenv(proofs.PROOF_DIR_ENV, str(record))
    assert proofs.write_artifact(None, "bench.json", {"rows": [2]}) == record / "bench.json"
    assert proofs.write_artifact(str(asked), "bench.json", {"rows": [3]}) == asked  # OUT wins
    assert json.loads((record / "bench.json").read_text()) == {"rows": [2]}
    assert json.loads(asked.read_text()) == {"rows": [3]}
