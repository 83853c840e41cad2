"""Which records were made with the current patch series, proof records, and docs/PROOFS.md."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from sparkserve_lab import proofs, provenance
from sparkserve_lab.provenance import Hashes
from sparkserve_lab.report import proofs as proofs_report
from sparkserve_lab.runstore import Store

from sparkserve.errors import SparkserveError

ROOT = Path(__file__).resolve().parents[2]
NOW = {"vllm": {"0001-a": Hashes("f1", "c1"), "0002-b": Hashes("f2", "c2")}, "flashinfer": {}}


def _proof(proves: list[str], patches: dict[str, list[dict[str, str]]] | None) -> dict[str, object]:
    return {"kind": "proof", "proves": proves,
            "patches": {u: {"patches": p} for u, p in patches.items()} if patches is not None else None}


def test_proof_current_while_its_patch_is_unchanged() -> None:
    meta = _proof(["vllm/0002-b"],
                  {"vllm": [{"id": "0001-a", "sha256": "old"}, {"id": "0002-b", "sha256": "f2"}]})
    assert provenance.judge(meta, NOW).state == provenance.CURRENT  # 0001 changed, but it is not proven here


def test_proof_stale_when_its_patch_changed() -> None:
    meta = _proof(["vllm/0002-b"], {"vllm": [{"id": "0002-b", "sha256": "f-old", "code_sha256": "c-old"}]})
    v = provenance.judge(meta, NOW)
    assert v.state == provenance.STALE and "vllm/0002-b changed since" in v.why


def test_header_only_edit_keeps_a_proof_current() -> None:
    """Same diff, other DEP-3 header (Verified-On added after the proof): the code hash decides."""
    meta = _proof(["vllm/0001-a"],
                  {"vllm": [{"id": "0001-a", "sha256": "f-before-header-edit", "code_sha256": "c1"}]})
    assert provenance.judge(meta, NOW).state == provenance.CURRENT


def test_proof_of_a_removed_or_unapplied_patch_is_stale() -> None:
    gone = _proof(["vllm/0009-z"], {"vllm": [{"id": "0009-z", "sha256": "x"}]})
    assert "no longer in the series" in provenance.judge(gone, NOW).why
    missing = _proof(["vllm/0002-b"], {"vllm": [{"id": "0001-a", "sha256": "f1"}]})
    assert "was not applied" in provenance.judge(missing, NOW).why


def test_no_manifest_is_unknown() -> None:
    assert provenance.judge(_proof(["vllm/0001-a"], None), NOW).state == provenance.UNKNOWN
    assert provenance.judge({"configuration": "x"}, NOW).state == provenance.UNKNOWN


def test_benchmark_run_needs_the_whole_series() -> None:
    def run(entries: list[dict[str, str]]) -> dict[str, object]:
        return {"site": {"patch_manifest": {"upstreams": {"vllm": {"patches": entries}, "flashinfer": {}}}}}

    same = run([{"id": "0001-a", "sha256": "f1"}, {"id": "0002-b", "sha256": "f2"}])
    assert provenance.judge(same, NOW).state == provenance.CURRENT
    short = provenance.judge(run([{"id": "0001-a", "sha256": "f1"}]), NOW)
    assert short.state == provenance.STALE and "vllm/0002 not applied" in short.why


def test_proof_run_records_output_artifacts_and_verdict(tmp_path: Path) -> None:
    store = Store(tmp_path / "results")
    writer = ("import os, pathlib; d = pathlib.Path(os.environ['SPARKSERVE_PROOF_DIR']); "
              "(d / 'numbers.json').write_text('{}'); "
              "print('gpu required:', os.environ['SPARKSERVE_REQUIRE_GPU'])")
    rec, rc = proofs.run(store, ROOT, "demo", ["vllm/0001-x"], [sys.executable, "-c", writer],
                         hardware="test-hw")
    meta = rec.metadata()
    assert rc == 0 and meta["verdict"] == "pass" and meta["kind"] == "proof"
    assert meta["files"] == ["numbers.json", "output.log"] and meta["proves"] == ["vllm/0001-x"]
    assert "gpu required: 1" in (rec.path / "output.log").read_text()
    assert meta["repo"]["commit"] and "patches" in meta and meta["command"][0] == sys.executable
    bad, rc = proofs.run(store, ROOT, "demo-fails", ["vllm/0001-x"],
                         [sys.executable, "-c", "raise SystemExit(3)"], hardware="test-hw")
    assert rc == 3 and bad.metadata()["verdict"] == "fail"
    assert [r.run_id for r in store.proofs()] == sorted([rec.run_id, bad.run_id]) and store.runs() == []


def test_a_proof_keeps_the_manifest_it_ran_with_in_a_form_provenance_reads(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A proof run on a patched site is current for today's series (it was once stored as the repr of
    the hashes, which read back as 'not applied')."""
    now = provenance.series_now(ROOT)
    manifest = {"upstreams": {u: {"form": "site", "patches": [
        {"id": pid, "sha256": h.file, "code_sha256": h.code} for pid, h in ids.items()]}
        for u, ids in now.items()}}
    monkeypatch.setattr(proofs.metadata, "site_info", lambda python: {"patch_manifest": manifest})
    monkeypatch.setattr(proofs.metadata, "gpus", lambda: [])
    pid = next(iter(now["vllm"]))
    rec, rc = proofs.run(Store(tmp_path / "results"), ROOT, "demo", [f"vllm/{pid}"],
                         [sys.executable, "-c", "pass"], hardware="test-hw")
    stored = json.loads((rec.path / "metadata.json").read_text())
    assert rc == 0 and provenance.judge(stored, now).state == provenance.CURRENT


def test_a_proof_must_name_patches_of_the_series() -> None:
    with pytest.raises(SparkserveError, match="at least one patch"):
        proofs.check_proves([], NOW)
    with pytest.raises(SparkserveError, match="not in the series: vllm/0003-c"):
        proofs.check_proves(["vllm/0003-c"], NOW)
    proofs.check_proves(["vllm/0001-a"], NOW)


def _same(old: Hashes | None, cur: Hashes | None) -> bool:
    if old is None or cur is None:
        return False
    return old.code == cur.code if old.code and cur.code else old.file == cur.file


def test_every_stored_record_has_the_verdict_its_manifest_gives() -> None:
    """The repository's own store, judged against today's patch files read here on their own: a proof is
    current exactly when every patch it proves is unchanged, a benchmark run exactly when its whole
    manifest is the series; a record without a manifest is unknown, and a stale one says why. A probe run
    where no vLLM was installed (its kernels standalone, beside no stack) ran no patch: it has no manifest
    and is unknown."""
    from sparkserve.supply.patches.series import load_series

    now = {u: {p.id: Hashes(p.sha256, p.code_sha256) for p in load_series(ROOT, u)}
           for u in ("vllm", "flashinfer")}
    store = Store(ROOT / "lab" / "results")
    for rec in store.proofs() + store.measurements():
        meta = rec.metadata()
        assert meta.get("proves"), rec.run_id
        site = meta.get("site") or {}
        if (meta["kind"] == "measurement" and "vllm_site" in site
                and site["vllm_site"] is None and site.get("flashinfer_site") is None):
            assert not meta.get("patches"), rec.run_id
            assert provenance.judge(meta, now).state == provenance.UNKNOWN, rec.run_id
            continue
        assert meta.get("patches"), rec.run_id
        assert set(meta.get("files", [])) <= {p.name for p in rec.path.iterdir()}, rec.run_id
        had = provenance.recorded(meta)
        assert had is not None, rec.run_id
        unchanged = all(_same(had.get(u, {}).get(pid), now.get(u, {}).get(pid))
                        for u, _, pid in (str(ref).partition("/") for ref in meta["proves"]))
        v = provenance.judge(meta, now)
        assert v.state == (provenance.CURRENT if unchanged else provenance.STALE), rec.run_id
        assert v.why, rec.run_id
    for rec in store.runs():
        meta = rec.metadata()
        had, v = provenance.recorded(meta), provenance.judge(meta, now)
        if had is None:
            assert v.state == provenance.UNKNOWN, rec.run_id
            continue
        ids = {(u, pid) for side in (now, had) for u, ps in side.items() for pid in ps}
        whole = all(_same(had.get(u, {}).get(pid), now.get(u, {}).get(pid)) for u, pid in ids)
        assert v.state == (provenance.CURRENT if whole else provenance.STALE), rec.run_id


def test_a_patch_removed_from_the_series_makes_a_run_stale() -> None:
    """A benchmark run measured the whole stack: a patch it ran with that the series dropped since makes
    it stale; a proof of a dropped patch is stale too."""
    entries = [{"id": "0001-a", "sha256": "f1"}, {"id": "0002-b", "sha256": "f2"},
               {"id": "0003-c", "sha256": "f3"}]
    run = {"site": {"patch_manifest": {"upstreams": {"vllm": {"patches": entries}, "flashinfer": {}}}}}
    v = provenance.judge(run, NOW)
    assert v.state == provenance.STALE and v.why == "vllm/0003 removed since"
    dropped_upstream = {"site": {"patch_manifest": {"upstreams": {
        "vllm": {"patches": [{"id": "0001-a", "sha256": "f1"}, {"id": "0002-b", "sha256": "f2"}]},
        "flashinfer": {"patches": [{"id": "0001-x", "sha256": "z"}]}}}}}
    assert provenance.judge(dropped_upstream, NOW).why == "flashinfer/0001 removed since"
    proof = _proof(["vllm/0003-c"], {"vllm": [{"id": "0003-c", "sha256": "f3"}]})
    assert provenance.judge(proof, NOW).state == provenance.STALE


def test_a_header_only_change_keeps_a_run_current_when_both_sides_kept_the_code_hash() -> None:
    """As designed: with code hashes on both sides a DEP-3 header edit changes nothing; a record that kept
    only the file hash cannot tell a header edit from a code change, so the edit makes it stale."""
    def run(entries: list[dict[str, str]]) -> dict[str, object]:
        return {"site": {"patch_manifest": {"upstreams": {"vllm": {"patches": entries}, "flashinfer": {}}}}}

    header_edit = run([{"id": "0001-a", "sha256": "f1-old-header", "code_sha256": "c1"},
                       {"id": "0002-b", "sha256": "f2-old-header", "code_sha256": "c2"}])
    assert provenance.judge(header_edit, NOW).state == provenance.CURRENT
    file_hash_only = run([{"id": "0001-a", "sha256": "f1-old-header"}, {"id": "0002-b", "sha256": "f2"}])
    v = provenance.judge(file_hash_only, NOW)
    assert v.state == provenance.STALE and v.why == "vllm/0001 changed since"
    proof = _proof(["vllm/0001-a"], {"vllm": [{"id": "0001-a", "sha256": "f1-old-header"}]})
    assert provenance.judge(proof, NOW).state == provenance.STALE


def test_docs_proofs_md_matches_the_store() -> None:
    """docs/PROOFS.md is what `sparkserve report` makes of the store today: a patch edit that makes a proof
    stale fails here until the docs are regenerated (and say so)."""
    out = ROOT / "docs" / "PROOFS.md"
    text = proofs_report.render(Store(ROOT / "lab" / "results"), out, provenance.series_now(ROOT))
    assert out.read_text() == text, "docs/PROOFS.md is out of date: run `sparkserve report`"
    assert json.dumps(text)  # renders to plain text


def test_scratch_space_does_not_make_a_checkout_dirty() -> None:
    from sparkserve_lab.metadata import dirty_files

    status = ("?? .stage/p00/x.whl\n?? .work/ci/log\n?? dev-src/vllm/\n M src/sparkserve/cli/main.py\n"
              "?? notes.txt\n")
    assert dirty_files(status) == ["src/sparkserve/cli/main.py", "notes.txt"]
    assert dirty_files("?? .stage/\n") == []
    assert dirty_files("R  a.py -> b.py\n") == ["b.py"]


def test_a_flashinfer_only_site_has_its_manifest_found(tmp_path: Path) -> None:
    """A site patched with `--upstream flashinfer` alone (no vLLM in it): the manifest beside FlashInfer
    is the one a proof records, not the interpreter's own purelib's."""
    import stat

    from sparkserve_lab import metadata

    from sparkserve.supply.patches.manifest import SITE_MANIFEST

    site = tmp_path / "site"
    (site / "flashinfer").mkdir(parents=True)
    (site / "flashinfer" / "__init__.py").write_text("")
    (site / SITE_MANIFEST).write_text(json.dumps({"upstreams": {"flashinfer": {"patches": []}}}))
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} \"$@\"\n")
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    info = metadata.site_info(str(python))
    assert info["flashinfer_site"] == str(site)
    assert info["patch_manifest_path"] == str(site / SITE_MANIFEST)
    assert info["patch_manifest"] == {"upstreams": {"flashinfer": {"patches": []}}}
