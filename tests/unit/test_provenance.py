"""The release tag says the pins; an image is judged by what it records of its build (the sparkserve
version, pins.toml, the patch series) against the checkout's, and every difference is named with what to
do; the rules run without the package (the image-check gate and Ansible run the file on its own)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sparkserve import __version__, provenance
from sparkserve.supply import pins as pins_mod

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "src" / "sparkserve" / "provenance.py"
REF = "127.0.0.1:5000/sparkserve/serve:0.1.0-vllm0.33.0-fi0.7.2.post1"
DIGEST = "sha256:" + "ab" * 32
PATCH3 = "0003-serve-attention-sinks-with-flashinfer-on-sm90-sm12x-offline.patch"


def copy_root(dest: Path, src: Path = ROOT) -> Path:
    """A root with what a record reads, as the image's /opt/sparkserve holds it."""
    (dest / "src" / "sparkserve").mkdir(parents=True)
    shutil.copy(src / "pins.toml", dest / "pins.toml")
    shutil.copytree(src / "patches", dest / "patches")
    shutil.copy(src / "src" / "sparkserve" / "__init__.py", dest / "src" / "sparkserve" / "__init__.py")
    return dest


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, (path, old)
    path.write_text(text.replace(old, new, 1))


def reorder(series: Path) -> None:
    """The first patch of a series applied last."""
    lines = series.read_text().splitlines(keepends=True)
    first = next(i for i, line in enumerate(lines) if line.strip() and not line.startswith("#"))
    series.write_text("".join(lines[:first] + lines[first + 1:] + [lines[first]]))


def test_the_tag_says_the_version_and_the_pins() -> None:
    p = pins_mod.load(ROOT)
    want = f"{__version__}-vllm{p.upstreams['vllm'].version}-fi{p.upstreams['flashinfer'].version}"
    assert provenance.tag(ROOT) == want
    assert provenance.tag(ROOT, "linux/arm64") == want + "-arm64"
    assert provenance.tag(ROOT, "linux/amd64") == want + "-amd64"


def test_a_new_pin_is_a_new_tag(tmp_path: Path) -> None:
    root = copy_root(tmp_path)
    before = provenance.tag(root)
    edit(root / "pins.toml", 'version = "0.7.2.post1"', 'version = "0.7.3"')
    assert provenance.tag(root) != before and provenance.tag(root).endswith("-fi0.7.3")


def test_a_version_no_tag_can_hold_is_refused(tmp_path: Path) -> None:
    root = copy_root(tmp_path)
    edit(root / "pins.toml", 'version = "0.33.0"', 'version = "0.33.0+cu130"')
    with pytest.raises(provenance.ProvenanceError, match=r"not a valid image tag"):
        provenance.tag(root)
    with pytest.raises(provenance.ProvenanceError, match="not a platform"):
        provenance.tag(ROOT, "linux/arm64 ; rm")


def test_the_labels_carry_the_tag_and_change_with_the_series_not_with_comments(tmp_path: Path) -> None:
    root = copy_root(tmp_path)
    labels = provenance.labels(root)
    assert labels[provenance.LABEL_VERSION] == provenance.tag(root)
    first = labels[provenance.LABEL_PROVENANCE]
    edit(root / "pins.toml", "# Every pin", "# (a comment edit)\n# Every pin")
    edit(root / "pins.toml", '"wheel",', '"wheel", "rich",')  # [lock.dev]: the dev container only
    assert provenance.labels(root)[provenance.LABEL_PROVENANCE] == first
    patch = sorted((root / "patches" / "vllm").glob("0001-*.patch"))[0]
    patch.write_bytes(patch.read_bytes() + b"\n")
    assert provenance.labels(root)[provenance.LABEL_PROVENANCE] != first


def test_the_same_build_passes(tmp_path: Path) -> None:
    image = copy_root(tmp_path / "image")
    rc, message = provenance.check_image(image, provenance.record(ROOT), REF + "@" + DIGEST)
    assert rc == 0 and message.startswith(f"image-check: {REF}@{DIGEST} is sparkserve {__version__}"), message


@pytest.mark.parametrize(("change", "named"), [
    (lambda r: edit(r / "pins.toml", 'version = "0.33.0"', 'version = "0.32.0"'),
     "pins.toml upstream.vllm.version: 0.32.0 in the image's, 0.33.0 in this checkout's"),
    (lambda r: edit(r / "pins.toml", 'flashinfer_arch_list = "12.1a 12.0f"', 'flashinfer_arch_list = "9.0a"'),
     "pins.toml cuda.flashinfer_arch_list: 9.0a in the image's, 12.1a 12.0f in this checkout's"),
    (lambda r: edit(r / "src" / "sparkserve" / "__init__.py", f'"{__version__}"', '"0.0.9"'),
     f"sparkserve 0.0.9 in the image, {__version__} in this checkout"),
    (lambda r: edit(r / "patches" / "vllm" / "series", "0006-", "# 0006-"),
     "patches/vllm: the image lacks 0006-"),
    (lambda r: (r / "patches" / "vllm" / PATCH3).write_text("changed\n"),
     f"patches/vllm: {PATCH3} differ(s)"),
    (lambda r: reorder(r / "patches" / "flashinfer" / "series"),
     "patches/flashinfer: the image applies the same patches in another order"),
])
def test_another_build_is_refused_naming_what_differs(tmp_path: Path, change, named: str) -> None:
    image = copy_root(tmp_path / "image")
    change(image)
    rc, message = provenance.check_image(image, provenance.record(ROOT), REF, revision="0123abc")
    assert rc == provenance.EXIT_NOT_THIS_BUILD
    lines = message.splitlines()
    assert lines[0] == (f"sparkserve: image {REF} (built from commit 0123abc) is not the build this "
                        "checkout expects:")
    listed = [line for line in lines if line.startswith("  - ")]
    assert listed == [line for line in lines if named in line], message
    # what to do: the release made for this checkout, a build here, or the image's own commit
    assert "docs/RELEASE.md" in message and "docker compose build serve" in message
    assert "git checkout 0123abc" in message


def test_an_image_without_a_record_is_refused(tmp_path: Path) -> None:
    (tmp_path / "image").mkdir()
    rc, message = provenance.check_image(tmp_path / "image", provenance.record(ROOT), REF)
    assert rc == provenance.EXIT_NOT_THIS_BUILD and "records no sparkserve build" in message
    assert "git checkout" not in message  # no commit known: nothing to check out


def test_a_pulled_reference_must_name_a_digest(tmp_path: Path) -> None:
    image = copy_root(tmp_path / "image")
    expected = provenance.record(ROOT)
    rc, message = provenance.check_image(image, expected, REF, require_digest=True)
    assert rc == provenance.EXIT_NOT_THIS_BUILD and f"{REF} names no digest" in message
    assert provenance.check_image(image, expected, f"{REF}@{DIGEST}", require_digest=True)[0] == 0
    assert provenance.check_image(image, expected, REF)[0] == 0  # a build here has no digest
    assert not provenance.pinned(REF + "@sha256:abc") and provenance.pinned(f"{REF}@{DIGEST}")
    assert provenance.digest_refusal(f"{REF}@{DIGEST}") == ""


def test_the_files_of_a_record_are_all_a_record_reads(tmp_path: Path) -> None:
    """What compose mounts into the gate (tests/deploy/test_compose_pull.py): enough for the same record."""
    for rel in provenance.files(ROOT):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp_path / rel)
    assert provenance.record(tmp_path) == provenance.record(ROOT)
    assert "src/sparkserve/provenance.py" in provenance.files(ROOT)


def run_alone(args: list[str], cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """The file on its own, as the gate and Ansible run it: isolated (-I), outside the checkout."""
    return subprocess.run([sys.executable, "-I", *args], cwd=cwd, input=stdin, capture_output=True,
                          text=True, check=False, env={"PATH": "/usr/bin:/bin"})


def test_the_gate_runs_the_file_alone_against_mounted_roots(tmp_path: Path) -> None:
    image = copy_root(tmp_path / "image")
    expected = copy_root(tmp_path / "expected")
    shutil.copy(SCRIPT, expected / "src" / "sparkserve" / "provenance.py")
    args = [str(expected / "src" / "sparkserve" / "provenance.py"), "check-image", "--image-root", str(image),
            "--expected-root", str(expected), "--image", REF]
    ok = run_alone(args, cwd=tmp_path)
    assert ok.returncode == 0 and "image-check:" in ok.stdout, ok.stderr
    edit(image / "pins.toml", 'version = "2.14.0"', 'version = "2.13.0"')
    bad = run_alone(args, cwd=tmp_path)
    assert bad.returncode == provenance.EXIT_NOT_THIS_BUILD, bad.stderr
    assert "pins.toml upstream.torch.version: 2.13.0 in the image's, 2.14.0 in this checkout's" in bad.stderr


def test_ansible_pipes_the_file_with_the_expected_record(tmp_path: Path) -> None:
    image = copy_root(tmp_path / "image")
    expected = json.dumps(provenance.record(ROOT))
    args = ["-", "check-image", "--image-root", str(image), "--expected-json", expected, "--image", REF]
    ok = run_alone(args, cwd=Path("/"), stdin=SCRIPT.read_text())
    assert ok.returncode == 0, ok.stderr
    edit(image / "patches" / "vllm" / "series", "0002-", "# 0002-")
    bad = run_alone(args, cwd=Path("/"), stdin=SCRIPT.read_text())
    assert bad.returncode == provenance.EXIT_NOT_THIS_BUILD and "the image lacks 0002-" in bad.stderr


def test_the_command_line_prints_what_build_image_sh_reads() -> None:
    tag = run_alone([str(SCRIPT), "tag", "--platform", "linux/arm64"], cwd=Path("/"))
    assert tag.stdout.strip() == provenance.tag(ROOT, "linux/arm64"), tag.stderr
    labels = run_alone([str(SCRIPT), "labels"], cwd=Path("/"))
    assert labels.stdout.splitlines() == [f"{k}={v}" for k, v in provenance.labels(ROOT).items()]
    record = run_alone([str(SCRIPT), "record"], cwd=Path("/"))
    assert json.loads(record.stdout) == provenance.record(ROOT)
    missing = run_alone([str(SCRIPT), "tag", "--root", "/nonexistent"], cwd=Path("/"))
    assert missing.returncode == 2
    assert missing.stderr.startswith("sparkserve: no pins at /nonexistent/pins.toml")


@pytest.mark.parametrize("inventory", ["single/group_vars/sparkserve.yml",
                                       "pair/group_vars/sparkserve_cluster.yml"])
def test_the_example_inventories_pull_this_checkouts_release_by_digest(inventory: str) -> None:
    import yaml

    data = yaml.safe_load((ROOT / "ansible" / "inventories" / "example" / inventory).read_text())
    assert data["serve_image_source"] == "pull"
    ref = data["serve_image"]
    assert provenance.pinned(ref), ref
    assert ref.split("@")[0].rsplit(":", 1)[1] == provenance.tag(ROOT), "a new pin: a new release tag"
