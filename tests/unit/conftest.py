"""Synthetic pinned upstreams: tiny sdists, a pins.toml for them, and an installed 'site'.

They have the layout of the real ones (vLLM 1:1, FlashInfer's include/csrc under flashinfer/data),
so every code path of the tooling runs here in milliseconds.
"""

from __future__ import annotations

import hashlib
import io
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from sparkserve.supply import pins as pins_mod
from sparkserve.supply import sourcetree
from sparkserve.supply.patches import export
from sparkserve.supply.sources import fetch
from tests.unit.strict_skips import pytest_make_collect_report, pytest_runtest_makereport  # noqa: F401

VLLM_FILES = {
    "PKG-INFO": "Metadata-Version: 2.1\nName: vllm\nVersion: 0.33.0\n",
    "vllm/_version.py": "__commit_id__ = commit_id = 'g4ba787ec9'\n",
    "vllm/kernel.py": "".join(f"line {i}\n" for i in range(1, 41)),
    "vllm/other.py": "alpha\nbeta\ngamma\ndelta\nepsilon\nzeta\neta\n",
    "tests/test_kernel.py": "def test():\n    pass\n",
}
FI_FILES = {
    "PKG-INFO": "Metadata-Version: 2.1\nName: flashinfer-python\nVersion: 0.7.2.post1\n",
    "flashinfer/_build_meta.py": '__git_commit__ = "beabf5004585b03da60e927bbb803acbaa62fe36"\n',
    "flashinfer/decode.py": "def run(sinks=None):\n    return 1\n",
    "include/flashinfer/decode.cuh": "// decode\nint a = 1;\nint b = 2;\n",
    "csrc/batch_decode.cu": "// binding\nvoid f() {}\n",
}
SITE_MAP = {  # source path -> installed path
    "vllm/_version.py": "vllm/_version.py",
    "vllm/kernel.py": "vllm/kernel.py",
    "vllm/other.py": "vllm/other.py",
    "flashinfer/_build_meta.py": "flashinfer/_build_meta.py",
    "flashinfer/decode.py": "flashinfer/decode.py",
    "include/flashinfer/decode.cuh": "flashinfer/data/include/flashinfer/decode.cuh",
    "csrc/batch_decode.cu": "flashinfer/data/csrc/batch_decode.cu",
}


def _sdist(path: Path, root: str, files: dict[str, str]) -> str:
    with tarfile.open(path, "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{root}/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_pins(root: Path, vllm_sha: str, fi_sha: str, index_url: str = "http://127.0.0.1:9/simple") -> None:
    (root / "pins.toml").write_text(f'''
[upstream.vllm]
version = "0.33.0"
commit = "4ba787ec9"
sdist = "vllm-0.33.0.tar.gz"
sdist_sha256 = "{vllm_sha}"
sdist_root = "vllm-0.33.0"
[upstream.flashinfer]
distribution = "flashinfer-python"
version = "0.7.2.post1"
commit = "beabf5004585b03da60e927bbb803acbaa62fe36"
sdist = "flashinfer_python-0.7.2.post1.tar.gz"
sdist_sha256 = "{fi_sha}"
sdist_root = "flashinfer_python-0.7.2.post1"
[upstream.torch]
version = "2.14.0"
[cuda]
flashinfer_arch_list = "12.1a 12.0f"
torch_arch_list = "12.1a;12.0f"
[base_image]
debian_release = "trixie"
production = "debian:trixie-slim"
python = "3.13"
[index]
url = "{index_url}"
[lock]
exclude_newer = "2026-11-22T00:00:00Z"
requirements = ["vllm==0.33.0", "flashinfer-python==0.7.2.post1", "torch==2.14.0"]
overrides = ["certifi==2026.10.18"]
[lock.platforms.linux-amd64]
uv_platform = "x86_64-manylinux_2_34"
file = "locks/amd64.txt"
''')


@dataclass
class Project:
    root: Path
    cache: Path
    pins: pins_mod.Pins

    def reload(self) -> pins_mod.Pins:
        self.pins = pins_mod.load(self.root)
        return self.pins


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Project:
    root = tmp_path / "repo"
    cache = tmp_path / "cache" / "sources"
    cache.mkdir(parents=True)
    vsha = _sdist(cache / "vllm-0.33.0.tar.gz", "vllm-0.33.0", VLLM_FILES)
    fsha = _sdist(cache / "flashinfer_python-0.7.2.post1.tar.gz", "flashinfer_python-0.7.2.post1",
                  FI_FILES)
    root.mkdir()
    write_pins(root, vsha, fsha)
    from sparkserve.supply.patches.export import SERIES_HEADER as header
    for up in ("vllm", "flashinfer"):
        (root / "patches" / up).mkdir(parents=True)
        (root / "patches" / up / "series").write_text(header)
    monkeypatch.setenv("SPARKSERVE_CACHE", str(cache.parent))
    monkeypatch.setenv("SPARKSERVE_ROOT", str(root))
    monkeypatch.delenv("SPARKSERVE_INDEX_URL", raising=False)
    return Project(root, cache, pins_mod.load(root))


def make_site(base: Path) -> Path:
    site = base / "site"
    for src, dst in SITE_MAP.items():
        text = {**VLLM_FILES, **FI_FILES}[src]
        (site / dst).parent.mkdir(parents=True, exist_ok=True)
        (site / dst).write_text(text)
    for dist, version in (("vllm", "0.33.0"), ("flashinfer_python", "0.7.2.post1")):
        info = site / f"{dist}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    return site


@pytest.fixture
def site(tmp_path: Path) -> Path:
    return make_site(tmp_path)


HEADER = """Description: {summary}
 A longer explanation.
 .
 Second paragraph.
Author: sparkserve developers <dev@sparkserve.invalid>
Origin: vendor
Forwarded: no
Forward: not ready: a test patch
Gate: always on
Proof: tests/unit
Verified-On: cpu
Last-Update: 2026-11-22
"""


def commit_patch(tree: Path, summary: str, edits: dict[str, str]) -> None:
    """Edit files in a dev tree and commit them with a patch header as the message."""
    for rel, text in edits.items():
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_text(text)
    env = {"GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1", "PATH": "/usr/bin:/bin",
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    subprocess.run(["git", "add", "-A"], cwd=tree, check=True, env=env)
    subprocess.run(["git", "commit", "-q", "--cleanup=verbatim", "-m", HEADER.format(summary=summary)],
                   cwd=tree, check=True, env=env)


def author_series(project: Project, tmp: Path) -> dict[str, Path]:
    """Two vLLM patches (the second edits lines the first touched) and one FlashInfer patch
    touching include/, csrc/ and tests/, written through dev tree + export like a developer."""
    trees = {}
    for name in ("vllm", "flashinfer"):
        trees[name] = sourcetree.make(fetch(project.pins, name), tmp / "dev" / name,
                                      project.pins.upstream(name))
    v = trees["vllm"]
    kernel = VLLM_FILES["vllm/kernel.py"]
    commit_patch(v, "Kernel: change line 20", {"vllm/kernel.py": kernel.replace("line 20\n", "LINE 20\n")})
    commit_patch(v, "Kernel: change line 20 again and other.py",
                 {"vllm/kernel.py": kernel.replace("line 20\n", "LINE XX\n").replace("line 3\n", "L3\n"),
                  "vllm/other.py": VLLM_FILES["vllm/other.py"].replace("delta", "DELTA"),
                  "tests/test_kernel.py": "def test():\n    assert True\n"})
    f = trees["flashinfer"]
    commit_patch(f, "Decode: honour sinks",
                 {"include/flashinfer/decode.cuh": FI_FILES["include/flashinfer/decode.cuh"] + "int sink;\n",
                  "csrc/batch_decode.cu": FI_FILES["csrc/batch_decode.cu"].replace("f()", "f(int s)"),
                  "flashinfer/decode.py": FI_FILES["flashinfer/decode.py"].replace("return 1", "return 2"),
                  "tests/test_new.py": "x = 1\n"})
    for name, tree in trees.items():
        export.write(export.render(tree), project.root / "patches" / name)
    return trees
