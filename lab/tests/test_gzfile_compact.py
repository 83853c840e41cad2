"""A record's large artifacts kept gzipped (gzfile.compact): only the named kinds over the size, read back by
their plain names through the store's readers, and a proof's file list naming what is on disk."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from sparkserve_lab import gzfile, proofs
from sparkserve_lab.report import proof_summary
from sparkserve_lab.runstore import Store, read_json

ROOT = Path(__file__).resolve().parents[2]
BIG = gzfile.COMPACT_BYTES + 1


def test_only_the_named_kinds_over_the_size_are_compacted_once(tmp_path: Path) -> None:
    (tmp_path / "step-b1.json").write_text(json.dumps(["x" * BIG]))
    (tmp_path / "step-b32.json").write_text(json.dumps(["small"]))
    (tmp_path / "kernels-b1.json").write_text(json.dumps(["x" * BIG]))  # not a compacted kind
    (tmp_path / "metadata.json").write_text(json.dumps({"x": "x" * BIG}))
    assert gzfile.compact(tmp_path) == ["step-b1.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kernels-b1.json", "metadata.json",
                                                          "step-b1.json.gz", "step-b32.json"]
    assert gzfile.compact(tmp_path) == []  # a second pass changes nothing
    assert read_json(tmp_path / "step-b1.json") == ["x" * BIG]  # by its plain name
    assert read_json(tmp_path / "step-b32.json") == ["small"]
    assert gzfile.existing(tmp_path / "step-b32.json") == tmp_path / "step-b32.json"


def test_the_same_content_gives_the_same_bytes(tmp_path: Path) -> None:
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "output.log").write_text("line\n" * BIG)
        gzfile.compact(tmp_path / folder)
    assert (tmp_path / "a/output.log.gz").read_bytes() == (tmp_path / "b/output.log.gz").read_bytes()


def test_a_proof_compacts_its_large_artifacts_and_lists_them_as_kept(tmp_path: Path) -> None:
    """upstream-tests.json and output.log over the size: gzipped at the end, the record's file list names
    the .gz files, and the report reads the artifact and the failed command's last error through them."""
    report = ("{'vllm': {'selected': {'vllm/a.py': ['tests/t1.py']}, 'tests': 9, 'flips': [], "
              f"'environmental': [], 'padding': 'x' * {BIG}}}}}")
    writer = ("import json, os, pathlib, sys; d = pathlib.Path(os.environ['SPARKSERVE_PROOF_DIR']); "
              f"(d / 'upstream-tests.json').write_text(json.dumps({report})); "
              "print(('n' * 1023 + '\\n') * 140); print('E   AssertionError: the last one'); sys.exit(1)")
    rec, rc = proofs.run(Store(tmp_path / "results"), ROOT, "demo", ["vllm/0001-x"],
                         [sys.executable, "-c", writer], hardware="test-hw")
    meta = rec.metadata()
    assert rc == 1 and meta["files"] == ["output.log.gz", "upstream-tests.json.gz"]
    assert {p.name for p in rec.path.iterdir()} == {"metadata.json", *meta["files"]}
    line = proof_summary.computed(rec.path)
    assert line is not None and "9 tests of 1 files" in line
    (rec.path / "upstream-tests.json.gz").unlink()
    assert proof_summary.computed(rec.path, failed=True) == "E   AssertionError: the last one"
