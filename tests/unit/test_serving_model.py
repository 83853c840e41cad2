"""The model check before vLLM starts, the one-shot download with verification, and the entrypoint's
modes and exit codes (offline by default; a model missing offline is one message and exit 4)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from sparkserve.serving import __main__ as entry
from sparkserve.serving import banner, download, gpu, model, preflight, supervise
from sparkserve.serving.profile import ProfileError, parse

ROOT = Path(__file__).resolve().parents[2]
SHA = "a" * 40


def cache_snapshot(cache: Path, repo_id: str, files: dict[str, bytes], incomplete: bool = False) -> Path:
    """A huggingface_hub cache entry: blobs, a snapshot of symlinks, refs/main."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    snap = repo / "snapshots" / SHA
    (repo / "blobs").mkdir(parents=True)
    snap.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(SHA)
    for name, data in files.items():
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        (snap / name).parent.mkdir(parents=True, exist_ok=True)
        (snap / name).symlink_to(blob)
    if incomplete:
        (repo / "blobs" / "deadbeef.incomplete").write_bytes(b"")
    return snap


INDEX = json.dumps({"weight_map": {"a": "model-00001-of-00002.safetensors",
                                   "b": "model-00002-of-00002.safetensors"}}).encode()
COMPLETE = {"config.json": b'{"model_type": "gpt_oss"}', "model.safetensors.index.json": INDEX,
            "model-00001-of-00002.safetensors": b"x" * 10, "model-00002-of-00002.safetensors": b"y" * 10}


def test_a_cached_model_is_found_offline(tmp_path: Path) -> None:
    cache_snapshot(tmp_path / "hub", "openai/gpt-oss-120b", COMPLETE)
    where = model.check(parse({}), {"HF_HOME": str(tmp_path)})
    assert "from the cache" in where and SHA[:12] in where


def test_a_model_missing_offline_is_one_clear_message(tmp_path: Path) -> None:
    with pytest.raises(model.ModelMissing) as info:
        model.check(parse({}), {"HF_HOME": str(tmp_path)})
    text = str(info.value)
    assert "openai/gpt-oss-120b is not in the model cache" in text
    assert "offline (HF_HUB_OFFLINE=1" in text and model.DOWNLOAD_COMMAND in text


def test_a_partly_downloaded_model_says_what_is_missing(tmp_path: Path) -> None:
    files = {k: v for k, v in COMPLETE.items() if "00002" not in k}
    cache_snapshot(tmp_path / "hub", "openai/gpt-oss-120b", files, incomplete=True)
    with pytest.raises(model.ModelMissing, match=r"partly.*model-00002-of-00002.*1 interrupted download"):
        model.check(parse({}), {"HF_HUB_CACHE": str(tmp_path / "hub")})


def test_a_model_the_serving_user_cannot_read_says_how_to_open_it(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # CI runs as root, which reads anything: the denial is injected where a 0644 snapshot folder raises it.
    snap = cache_snapshot(tmp_path / "hub", "openai/gpt-oss-120b", COMPLETE)

    def denied(folder: Path) -> list[str]:
        raise PermissionError(13, "Permission denied", str(folder / "config.json"))

    monkeypatch.setattr(model, "missing_files", denied)
    with pytest.raises(model.ModelMissing) as info:
        model.check(parse({}), {"HF_HOME": str(tmp_path)})
    text = str(info.value)
    assert f"{snap / 'config.json'} is not readable by the serving user (uid {os.getuid()}" in text
    assert "chmod -R a+rX" in text and f"-R {os.getuid()}:{os.getgid()} /data/huggingface" in text


def test_online_the_cache_is_not_required(tmp_path: Path) -> None:
    assert "online" in model.check(parse({"HF_HUB_OFFLINE": "0"}), {"HF_HOME": str(tmp_path)})


def test_a_model_path_with_nothing_mounted_is_not_a_repo_id_error(tmp_path: Path) -> None:
    """MODEL=/models/x with nothing mounted used to give vLLM's misleading "Repo id must be..."."""
    p = parse({"MODEL": str(tmp_path / "x"), "MXFP4_LAYERS": "none"})
    with pytest.raises(model.ModelMissing, match=r"no such folder in the container. Mount the model folder"):
        model.check(p, {})
    (tmp_path / "x").mkdir()
    with pytest.raises(model.ModelMissing, match=r"lacks config\.json"):
        model.check(p, {})
    for name, data in COMPLETE.items():
        (tmp_path / "x" / name).write_bytes(data)
    assert model.check(p, {}).startswith("local folder")


def test_a_model_that_is_neither_path_nor_id_is_a_profile_error() -> None:
    with pytest.raises(ProfileError) as info:
        model.check(parse({"MODEL": "gpt-oss 120b"}), {})
    assert info.value.variable == "MODEL"


# --- the download ----------------------------------------------------------------------------------------

def expected_of(files: dict[str, bytes], lfs: bool = True) -> list[download.Expected]:
    def oid(data: bytes) -> str:
        return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()

    return [download.Expected(n, len(d), hashlib.sha256(d).hexdigest() if lfs and n.endswith(".safetensors")
                              else None, oid(d)) for n, d in files.items()]


class FakeHub:
    def __init__(self, files: dict[str, bytes], served: dict[str, bytes] | None = None,
                 fail: Exception | None = None) -> None:
        self.files_, self.served, self.fail = files, served or files, fail
        self.calls: list[tuple[str, tuple[str, ...]]] = []

    def download(self, repo_id: str, cache: Path, ignore: tuple[str, ...]) -> Path:
        self.calls.append((repo_id, ignore))
        if self.fail:
            raise self.fail
        return cache_snapshot(cache, repo_id, self.served)

    def files(self, repo_id: str, revision: str) -> list[download.Expected]:
        assert revision == SHA
        return [*expected_of(self.files_), download.Expected("original/model.safetensors", 5, "0" * 64, None)]


def test_download_verifies_every_file(tmp_path: Path) -> None:
    hub = FakeHub(COMPLETE)
    snap = download.run(parse({}), {"HF_HOME": str(tmp_path)}, hub)
    assert snap.name == SHA
    assert hub.calls == [("openai/gpt-oss-120b", download.IGNORE)]
    # the server's own check now finds it
    assert "from the cache" in model.check(parse({}), {"HF_HOME": str(tmp_path)})


def test_a_corrupt_download_fails_naming_the_file(tmp_path: Path) -> None:
    bad = {**COMPLETE, "model-00002-of-00002.safetensors": b"z" * 10}
    with pytest.raises(download.DownloadError, match=r"model-00002-of-00002.safetensors: sha256"):
        download.run(parse({}), {"HF_HOME": str(tmp_path)}, FakeHub(COMPLETE, served=bad))


def test_non_lfs_files_are_checked_by_git_blob_id(tmp_path: Path) -> None:
    snap = cache_snapshot(tmp_path, "o/m", {"config.json": b'{"a": 2}'})
    assert download.verify(snap, expected_of({"config.json": b'{"a": 1}'})) == [
        "config.json: git blob id " + hashlib.sha1(b'blob 8\0{"a": 2}', usedforsecurity=False).hexdigest()
        + ", the hub says " + hashlib.sha1(b'blob 8\0{"a": 1}', usedforsecurity=False).hexdigest()]


def test_download_errors_are_download_errors(tmp_path: Path) -> None:
    with pytest.raises(download.DownloadError, match="ConnectionError: no network"):
        download.run(parse({}), {"HF_HOME": str(tmp_path)},
                     FakeHub(COMPLETE, fail=ConnectionError("no network")))
    with pytest.raises(ProfileError, match="nothing to download"):
        download.run(parse({"MODEL": "/models/x", "MXFP4_LAYERS": "none"}), {}, FakeHub(COMPLETE))


# --- the entrypoint ---------------------------------------------------------------------------------------

class ContainerEnv(dict[str, str]):
    """os.environ of a container: pytest's own PYTEST_CURRENT_TEST does not get in."""

    def __setitem__(self, key: str, value: str) -> None:
        if not key.startswith("PYTEST_"):
            super().__setitem__(key, value)


real_check_gpu = preflight.check_gpu


@pytest.fixture
def container(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, object]:
    """The entrypoint with a container-like environment, a GPU that passes and exec recorded."""
    env = ContainerEnv(PATH="/usr/bin:/bin", SPARKSERVE_ROOT=str(ROOT), HF_HOME=str(tmp_path / "hf"),
                       MXFP4_LAYERS="moe,qkv,o", SPARKSERVE_CACHE_DIR=str(tmp_path / "cache"),
                       SPARKSERVE_STATE_DIR=str(tmp_path / "state"))
    monkeypatch.setattr(os, "environ", env)
    monkeypatch.setattr(preflight, "check_gpu", lambda p, archs, env: [])
    seen: dict[str, object] = {"env": env}

    def run(argv: list[str], on_line: object, watchdog: supervise.Watchdog | None = None,
            env: dict[str, str] | None = None, judge: object = None) -> int:
        seen["argv"] = argv
        seen["exec_env"] = env
        seen["watchdog"] = watchdog
        raise SystemExit(0)

    monkeypatch.setattr(supervise, "run", run)
    return seen


def test_the_server_starts_offline_by_default(container: dict[str, object], tmp_path: Path) -> None:
    """With no HF_HUB_OFFLINE, the production default used to query the hub (and crash without network)."""
    cache_snapshot(tmp_path / "hf" / "hub", "openai/gpt-oss-120b", COMPLETE)
    with pytest.raises(SystemExit):
        entry.main([])
    exec_env = container["exec_env"]
    assert isinstance(exec_env, dict) and exec_env["HF_HUB_OFFLINE"] == "1"


def test_the_server_runs_under_the_watchdog_on_its_own_port(container: dict[str, object],
                                                            tmp_path: Path) -> None:
    cache_snapshot(tmp_path / "hf" / "hub", "openai/gpt-oss-120b", COMPLETE)
    container["env"]["SPARKSERVE_PORT"] = "8123"  # type: ignore[index]
    with pytest.raises(SystemExit):
        entry.main([])
    assert container["watchdog"] == supervise.Watchdog("http://127.0.0.1:8123/health", 15.0, 3, 8.0)


def test_a_missing_model_exits_4_before_vllm(container: dict[str, object],
                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert entry.main([]) == preflight.EXIT_MODEL == 4
    assert "argv" not in container
    err = capsys.readouterr().err
    assert err.count("sparkserve: model not available: openai/gpt-oss-120b is not in the model cache") == 1
    assert "Traceback" not in err


def test_preflight_checks_the_model_without_a_gpu(container: dict[str, object],
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    def no_gpu(*a: object) -> list[str]:
        raise AssertionError("the preflight must not look for a GPU")

    monkeypatch.setattr(preflight, "check_gpu", no_gpu)
    env = container["env"]
    assert isinstance(env, dict)
    env["MODEL"], env["MXFP4_LAYERS"] = "/models/x", "none"
    assert entry.main(["--preflight"]) == 4
    assert "MODEL=/models/x: no such folder in the container" in capsys.readouterr().err
    assert entry.main(["--print-flags"]) == 4


@pytest.mark.parametrize("mode", [["--preflight"], ["--print-flags"], []])
def test_a_model_folder_that_is_not_mounted_exits_4_with_the_shipped_layers(
        container: dict[str, object], tmp_path: Path, mode: list[str],
        capsys: pytest.CaptureFixture[str]) -> None:
    """MODEL=/models/x with a shipped profile's MXFP4 layers used to exit 2 (`moe` ... is not gpt-oss): the
    folder's config.json was not there, so its name decided, before the model was checked."""
    env = container["env"]
    assert isinstance(env, dict)
    env["MODEL"], env["MXFP4_LAYERS"] = str(tmp_path / "models" / "x"), "moe,qkv,o,lm_head"
    assert entry.main(mode) == preflight.EXIT_MODEL
    err = capsys.readouterr().err
    assert "no such folder in the container. Mount the model folder there" in err and "gpt-oss" not in err
    (tmp_path / "models" / "x").mkdir(parents=True)
    assert entry.main(mode) == preflight.EXIT_MODEL
    assert "lacks config.json" in capsys.readouterr().err
    assert "argv" not in container


def test_the_gpu_gate_judges_a_model_folder_without_it(container: dict[str, object], tmp_path: Path) -> None:
    """gpu-check does not mount the model: the folder check is the model gates' (preflight, serve)."""
    env = container["env"]
    assert isinstance(env, dict)
    env["MODEL"] = str(tmp_path / "gpt-oss-120b")
    assert entry.main(["--check-device"]) == 0


def test_the_container_command_cannot_override_a_validated_flag(container: dict[str, object],
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert entry.main(["--gpu-memory-utilization", "0.95"]) == 2
    assert "set GPU_MEMORY_UTILIZATION instead" in capsys.readouterr().err


def test_check_device_mode_is_the_gpu_gate(container: dict[str, object],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    assert entry.main(["--check-device"]) == 0  # no model needed

    def refuse(*a: object) -> list[str]:
        raise preflight.GpuRefusal("no GPU")

    monkeypatch.setattr(preflight, "check_gpu", refuse)
    assert entry.main(["--check-device"]) == 3


def test_the_gpu_gate_refuses_the_series_kernels_on_a_gpu_they_are_not_compiled_for(
        container: dict[str, object], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A build whose FlashInfer kernels run on the GPU, with a profile that asks for the series' own
    Triton kernels, compiled and checked for other GPUs only: exit 2 naming the variable, before vLLM."""
    monkeypatch.setattr(preflight, "check_gpu", real_check_gpu)
    monkeypatch.setattr(banner, "jit_arch_list", lambda: "10.0a 9.0a")
    env = container["env"]
    assert isinstance(env, dict)
    env.update(SPARKSERVE_TARGET="hopper", MOE_BACKEND="marlin", VLLM_MXFP4_MOE_GEMM_MIN_TOKENS="64")
    monkeypatch.setattr(gpu, "visible_gpus", lambda: [gpu.Gpu(0, "NVIDIA H200", 9, 0)])
    assert entry.main(["--check-device"]) == 0
    monkeypatch.setattr(gpu, "visible_gpus", lambda: [gpu.Gpu(0, "NVIDIA B200", 10, 0)])
    assert entry.main(["--check-device"]) == preflight.EXIT_PROFILE == 2
    err = capsys.readouterr().err
    assert "VLLM_MXFP4_MOE_GEMM_MIN_TOKENS='64': runs patch vllm/0008's kernels" in err
    assert "GPU 0 (NVIDIA B200) is 10.0: set VLLM_MXFP4_MOE_GEMM_MIN_TOKENS=0" in err
    env["VLLM_MXFP4_MOE_GEMM_MIN_TOKENS"] = "0"  # Marlin's own experts: FlashInfer's build decides alone
    assert entry.main(["--check-device"]) == 0


def test_download_mode_exit_codes(container: dict[str, object], monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(download, "HuggingFaceHub", lambda: FakeHub(COMPLETE, fail=OSError("no route")))
    assert entry.main(["--download"]) == preflight.EXIT_DOWNLOAD == 5
    err = capsys.readouterr().err
    assert "download failed: download of openai/gpt-oss-120b failed: OSError: no route" in err
    monkeypatch.setattr(download, "HuggingFaceHub", lambda: FakeHub(COMPLETE))
    assert entry.main(["--download"]) == 0




def test_dummy_weights_need_the_config_but_no_weight_file(tmp_path: Path) -> None:
    """LOAD_FORMAT=dummy (random weights) reads config.json and the tokenizer, never a weight file."""
    folder = tmp_path / "gpt-oss-120b"
    folder.mkdir()
    dummy = parse({"MODEL": str(folder), "LOAD_FORMAT": "dummy"})
    with pytest.raises(model.ModelMissing, match=r"config\.json"):
        model.check(dummy, {})
    (folder / "config.json").write_text("{}")
    assert "random weights" in model.check(dummy, {})
    with pytest.raises(model.ModelMissing, match="weights"):
        model.check(parse({"MODEL": str(folder)}), {})


def test_the_compile_caches_point_into_the_cache_volume_per_build(container: dict[str, object],
                                                                  tmp_path: Path) -> None:
    cache_snapshot(tmp_path / "hf" / "hub", "openai/gpt-oss-120b", COMPLETE)
    with pytest.raises(SystemExit):
        entry.main([])
    exec_env = container["exec_env"]
    assert isinstance(exec_env, dict)
    build = Path(exec_env["VLLM_CACHE_ROOT"]).parent
    assert build.parent == tmp_path / "cache" and len(build.name) == 16
    for var in ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "XDG_CACHE_HOME"):
        assert Path(exec_env[var]).parent == build and Path(exec_env[var]).is_dir()


def test_an_unwritable_cache_volume_exits_6_saying_how_to_fix(container: dict[str, object], tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    cache_snapshot(tmp_path / "hf" / "hub", "openai/gpt-oss-120b", COMPLETE)
    blocker = tmp_path / "cache"
    blocker.write_text("a file where the volume should be")
    assert entry.main([]) == preflight.EXIT_CACHE == 6
    assert "argv" not in container
    err = capsys.readouterr().err
    assert "not writable" in err and "chown" in err and "docker volume rm" in err


def test_an_unwritable_state_volume_exits_6_without_offering_to_drop_it(
        container: dict[str, object], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cache_snapshot(tmp_path / "hf" / "hub", "openai/gpt-oss-120b", COMPLETE)
    (tmp_path / "state").write_text("a file where the volume should be")
    assert entry.main([]) == preflight.EXIT_CACHE
    assert "argv" not in container
    err = capsys.readouterr().err
    assert f"{tmp_path / 'state'} is not writable" in err and "chown serve -R" in err
    assert "docker volume rm" not in err  # the tuned tactics live there


def test_a_download_into_an_unwritable_model_cache_exits_6_before_asking_the_hub(
        container: dict[str, object], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    asked: list[str] = []
    monkeypatch.setattr(download, "HuggingFaceHub", lambda: asked.append("hub"))
    (tmp_path / "hf").write_text("a file where the volume should be")
    assert entry.main(["--download"]) == preflight.EXIT_CACHE
    assert asked == []
    err = capsys.readouterr().err
    assert "hf/hub is not writable" in err and "chown serve -R" in err and "docker volume rm" not in err
