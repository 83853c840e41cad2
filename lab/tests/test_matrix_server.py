"""levels.matrix: a matrix is refused before any server starts when a configuration is not deployable,
and a configuration becomes the entrypoint's server."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from sparkserve_lab.levels import matrix

from sparkserve.errors import SparkserveError
from sparkserve.serving import profiles

ROOT = Path(__file__).resolve().parents[2]


def test_only_names_a_known_configuration(tmp_path: Path) -> None:
    m = tmp_path / "m.yaml"
    m.write_text("profile: spark\ntokenizer: x\nconfigurations:\n  - name: a\n")
    with pytest.raises(SparkserveError, match="no configuration b"):
        matrix.run(m, tmp_path / "store", ROOT, ["b"], tmp_path / "work")


def _matrix(tmp_path: Path, text: str) -> Path:
    m = tmp_path / "m.yaml"
    m.write_text("profile: spark\ntokenizer: x\n" + text)
    return m


@pytest.mark.parametrize("text,message", [
    ("configurations:\n  - profile: no-such\n", "no serving profile 'no-such'"),
    ("configurations:\n  - set: {MOE_BACKNED: marlin}\n", "did you mean MOE_BACKEND"),
    ("configurations:\n  - set: {MOE_BACKEND: cutlass}\n", "MOE_BACKEND='cutlass': must be one of"),
    ("configurations:\n  - set: {MOE_BACKEND: cutlass-mxfp8, SPARKSERVE_TARGET: hopper}\n",
     "does not run on SPARKSERVE_TARGET=hopper"),
    ("model: x\nconfigurations:\n  - name: a\n", "not written by hand"),
    ("configurations:\n  - name: a\n    args: [--enforce-eager]\n", "not written by hand"),
    ("configurations:\n  - name: a\n  - name: a\n", "named twice"),
    ("configurations:\n  - name: a\n  - set: {KV_CACHE_DTYPE: fp8}\n", "resolves to the same server as a"),
    # the file's types (sparkserve.config), each named where it is
    ("server: {port: eighty}\nconfigurations:\n  - name: a\n",
     "m.yaml: server.port: expected a whole number, got 'eighty'"),
    ("configurations:\n  - spark\n", "m.yaml: configurations[1]: expected a table, got 'spark'"),
    ("configurations:\n  - name: a\n    sett: {KV_CACHE_DTYPE: fp8}\n",
     "m.yaml: configurations[1].sett: unknown key (known: name, profile, set)"),
    ("random_weights: yes please\nconfigurations:\n  - name: a\n",
     "m.yaml: random_weights: expected true or false, got 'yes please'"),
])
def test_a_bad_matrix_is_refused_before_any_server(tmp_path: Path, text: str, message: str) -> None:
    """The profile's own message, and no server started (the work directory stays empty)."""
    with pytest.raises(SparkserveError, match=re.escape(message)):
        matrix.run(_matrix(tmp_path, text), tmp_path / "store", ROOT, None, tmp_path / "work")
    assert not (tmp_path / "work").exists()


def test_an_engine_variable_makes_a_configuration_of_its_own(tmp_path: Path) -> None:
    """A patch's switch (an engine variable) changes the server though the profile's settings are the
    same: that configuration is measured; the same switch twice is still one server."""
    rules = ROOT / "lab" / "configs" / "engine-kernels.toml"
    two = matrix.load(_matrix(tmp_path, "configurations:\n  - name: a\n"
                                        "  - set: {VLLM_ROUTER_BIAS_GEMV: '1'}\n"))
    assert [e.name for e in matrix.entries(two, ROOT, rules)] == ["a", "spark+VLLM_ROUTER_BIAS_GEMV=1"]
    same = matrix.load(_matrix(tmp_path, "configurations:\n  - set: {VLLM_ROUTER_BIAS_GEMV: '1'}\n"
                                         "  - name: b\n    set: {VLLM_ROUTER_BIAS_GEMV: '1'}\n"))
    with pytest.raises(SparkserveError, match="b resolves to the same server"):
        matrix.entries(same, ROOT, rules)


def test_an_uncovered_claim_is_refused(tmp_path: Path) -> None:
    rules = tmp_path / "rules.toml"
    rules.write_text('[[profile_rule]]\nname = "base"\nwhen = { target = "spark" }\n'
                     'must = { moe = [".+"] }\n')
    m = _matrix(tmp_path, f"kernel_rules: {rules}\nconfigurations:\n  - name: a\n")
    with pytest.raises(SparkserveError, match=r"no kernel rule .* checks .*MOE_BACKEND=cutlass-mxfp8"):
        matrix.run(m, tmp_path / "store", ROOT, None, tmp_path / "work")


def test_a_configuration_becomes_the_entrypoint_in_its_container_environment(tmp_path: Path) -> None:
    data = matrix.load(_matrix(tmp_path, "set: {MAX_MODEL_LEN: '8192'}\nserver: {port: 8123, python: py, "
                               "env: {HF_HUB_OFFLINE: '1'}}\n"
                               "configurations:\n  - set: {MOE_BACKEND: marlin}\n"))
    (e,) = matrix.entries(data, ROOT, ROOT / "lab" / "configs" / "engine-kernels.toml")
    assert e.name == "spark+MOE_BACKEND=marlin"
    srv = matrix.server_for(e, data.server, tmp_path, ROOT)
    assert srv.command == ["py", "-m", "sparkserve.serving"]
    want = profiles.resolve("spark", ROOT, {"MAX_MODEL_LEN": "8192", "SPARKSERVE_LISTEN": "127.0.0.1",
                                            "SPARKSERVE_PORT": "8123"}, {"MOE_BACKEND": "marlin"})
    assert {k: srv.env[k] for k in want.env} == want.env
    assert srv.env["VLLM_FLASHINFER_SINK_DECODE"] == "xqa" and srv.base_url == "http://127.0.0.1:8123"
    assert srv.env["HF_HUB_OFFLINE"] == "1"  # the matrix's server.env
    # the volumes of a harness-started server are in its work directory
    assert srv.env["SPARKSERVE_CACHE_DIR"] == str(tmp_path / "cache")
    assert srv.env["SPARKSERVE_STATE_DIR"] == str(tmp_path / "state")


@pytest.mark.parametrize("path", sorted((ROOT / "lab/configs").glob("matrix*.yaml")), ids=lambda p: p.name)
def test_every_shipped_matrix_names_its_model_as_the_entrypoint_takes_it(path: Path) -> None:
    """The entrypoint takes MODEL as an absolute or ./-relative folder or a Hugging Face id; a bare relative
    folder (`.work/x`) passes the matrix's own checks and is refused at the server's start (exit 2)."""
    from sparkserve.serving import checkpoint

    m = matrix.load(path)
    models = [matrix.common_settings(m).get("MODEL")] + [
        str(c.variables["MODEL"]) for c in m.configurations if "MODEL" in c.variables]
    for model in filter(None, models):
        assert checkpoint.is_path(model) or checkpoint.HF_ID.match(model), f"{path.name}: MODEL={model}"


def test_a_hopper_matrix_gives_its_servers_kernels_an_h100_runs() -> None:
    """No image is built for sm_90 here, so a hopper matrix's servers run outside one, where the entrypoint
    checks the GPU against FLASHINFER_CUDA_ARCH_LIST from the environment: without it every H100/H200 is
    refused (exit 3) before vLLM starts."""
    from sparkserve.serving import gpu, preflight

    rules = ROOT / "lab/configs/engine-kernels.toml"
    hopper = [m for m in map(matrix.load, sorted((ROOT / "lab/configs").glob("matrix*.yaml")))
              if any(e.resolved.profile.target == "hopper" for e in matrix.entries(m, ROOT, rules))]
    assert len(hopper) == 2  # the real checkpoint and random weights
    h100 = gpu.Gpu(0, "H100", *preflight.EXPECTED_CC["hopper"])
    for m in hopper:
        archs = m.server.environment().get("FLASHINFER_CUDA_ARCH_LIST", "")
        assert gpu.compatible(archs, h100), f"{m.name}: FLASHINFER_CUDA_ARCH_LIST={archs!r}"
