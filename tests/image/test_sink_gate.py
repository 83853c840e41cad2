"""Gate of patch vllm/0003 (serve attention sinks with FlashInfer on SM90/SM12x offline).

VLLM_FLASHINFER_SINK_DECODE=auto|xqa|fa2 (default auto) picks the FlashInfer decode kernel that serves
attention sinks on SM90/SM12x; the decision needs only a local toolchain (or prebuilt kernels), never
the artifactory probe; an invalid value names the variable; a kernel that cannot honour sinks raises
instead of dropping them; the metadata builder logs the choice once. The device capability is faked.
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
import requests
import torch
import vllm.envs as envs
from vllm.config import CUDAGraphMode
from vllm.platforms.interface import DeviceCapability, Platform, PlatformEnum
from vllm.utils import flashinfer as fi_utils
from vllm.v1.attention.backends import flashinfer as fi_backend
from vllm.v1.attention.backends.utils import PerLayerParameters
from vllm.v1.kv_cache_interface import KVQuantMode

ENV = "VLLM_FLASHINFER_SINK_DECODE"
LOG = "FlashInfer attention-sink decode kernel"
select = fi_utils.select_flashinfer_sink_decode_kernel


def _platform(cap: tuple[int, int] | None) -> type[Platform]:
    """The real Platform capability helpers (is_device_capability, ..._family) over a fixed capability."""

    def get_device_capability(cls: type[Platform], device_id: int = 0) -> DeviceCapability | None:
        return None if cap is None else DeviceCapability(*cap)

    return type("FakeCudaPlatform", (Platform,), {
        "_enum": PlatformEnum.CUDA, "device_type": "cuda", "device_name": "cuda",
        "get_device_capability": classmethod(get_device_capability),
    })


def _probe(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("network probe (has_nvidia_artifactory / requests) on a path that must be offline")


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test here may reach the artifactory probe or the network, and none inherits a setting."""
    monkeypatch.setattr(fi_utils, "has_nvidia_artifactory", _probe)
    for name in ("get", "head", "request"):
        monkeypatch.setattr(requests, name, _probe)
    monkeypatch.setattr(requests.Session, "request", _probe)
    monkeypatch.delenv(ENV, raising=False)
    # --attention-config.use_trtllm_attention unset (it reads the current vLLM config otherwise)
    monkeypatch.setattr(fi_utils, "force_use_trtllm_attention", lambda: None)
    monkeypatch.setattr(fi_backend, "force_use_trtllm_attention", lambda: None)
    fi_utils.supports_trtllm_attention.cache_clear()


@pytest.fixture
def device(monkeypatch: pytest.MonkeyPatch) -> Callable[[tuple[int, int] | None], None]:
    def fake(cap: tuple[int, int] | None) -> None:
        platform = _platform(cap)
        monkeypatch.setattr(fi_utils, "current_platform", platform)
        monkeypatch.setattr(fi_backend, "current_platform", platform)
        fi_utils.supports_trtllm_attention.cache_clear()

    return fake


# --------------------------------------------------------------------------------------- the decision

@pytest.mark.parametrize(("setting", "cap", "has_cubin", "can_jit", "fa2_sinks", "want"), [
    ("auto", (12, 1), False, True, True, "xqa"),   # DGX Spark, nvcc + ninja in the image
    ("auto", (12, 0), False, True, True, "xqa"),   # RTX PRO 6000 / 5090
    ("auto", (9, 0), False, True, True, "xqa"),    # H100
    ("auto", (12, 1), True, False, True, "xqa"),   # prebuilt kernels only, no toolchain
    ("xqa", (12, 1), False, True, False, "xqa"),
    ("XQA", (12, 1), False, True, True, "xqa"),    # the variable is case-insensitive
    ("fa2", (12, 1), False, True, True, "fa2"),
    ("fa2", (9, 0), True, True, True, "fa2"),
    ("Fa2", (12, 0), False, True, True, "fa2"),
    ("auto", (10, 0), False, True, True, None),    # SM100: trtllm-gen rules, not this gate
    ("fa2", (8, 9), False, True, True, None),
    ("xqa", (11, 0), False, True, True, None),
    ("auto", None, False, True, True, None),       # no device
])
def test_decision(setting: str, cap: tuple[int, int] | None, has_cubin: bool, can_jit: bool,
                  fa2_sinks: bool, want: str | None) -> None:
    assert select(setting, cap, has_cubin, can_jit, fa2_sinks) == want


@pytest.mark.parametrize(("setting", "has_cubin", "can_jit", "fa2_sinks", "reason"), [
    ("fa2", True, True, False, "fa2 decode wrapper has no use_sinks support"),
    ("fa2", True, False, True, "cannot JIT-build it (nvcc/ninja not found)"),
    ("xqa", False, False, True, "cannot JIT-build it (nvcc/ninja not found)"),
    ("auto", False, False, True, "cannot JIT-build it (nvcc/ninja not found)"),
])
def test_kernel_that_cannot_honour_sinks_raises(setting: str, has_cubin: bool, can_jit: bool,
                                                fa2_sinks: bool, reason: str) -> None:
    with pytest.raises(ValueError, match="Attention sinks need a FlashInfer decode kernel") as info:
        select(setting, (12, 1), has_cubin, can_jit, fa2_sinks)
    assert f"{ENV}={setting} cannot be served" in str(info.value) and reason in str(info.value)


def test_default_is_auto_and_resolution_uses_the_environment(
        monkeypatch: pytest.MonkeyPatch, device: Callable[[tuple[int, int] | None], None]) -> None:
    assert envs.VLLM_FLASHINFER_SINK_DECODE == "auto"
    device((12, 1))
    monkeypatch.setattr(fi_utils, "flashinfer_can_jit", lambda: True)
    assert fi_utils.resolve_flashinfer_sink_decode_kernel(True) == "xqa"
    monkeypatch.setenv(ENV, "fa2")
    assert fi_utils.resolve_flashinfer_sink_decode_kernel(True) == "fa2"
    with pytest.raises(ValueError, match="no use_sinks support"):
        fi_utils.resolve_flashinfer_sink_decode_kernel(False)


@pytest.mark.parametrize("value", ["cutlass", "trtllm", "", "xqa,fa2"])
def test_invalid_value_names_the_variable(monkeypatch: pytest.MonkeyPatch,
                                          device: Callable[[tuple[int, int] | None], None],
                                          value: str) -> None:
    monkeypatch.setenv(ENV, value)
    with pytest.raises(ValueError, match=f"Invalid value '{value}' for {ENV}"):
        _ = envs.VLLM_FLASHINFER_SINK_DECODE
    device((12, 1))
    with pytest.raises(ValueError, match=ENV):
        fi_utils.resolve_flashinfer_sink_decode_kernel(True)
    with pytest.raises(ValueError, match=ENV):
        fi_backend.FlashInferBackend.supports_sink()
    with pytest.raises(ValueError, match=f"Invalid {ENV}="):
        select(value, (12, 1), False, True, True)


# ------------------------------------------------------------------------------- offline on SM90/SM12x

def test_the_image_can_jit() -> None:
    """The image carries nvcc (CUDA_HOME) and ninja, so FlashInfer builds XQA/fa2 locally."""
    assert fi_utils.flashinfer_can_jit() is True


@pytest.mark.parametrize("cap", [(12, 1), (12, 0), (9, 0)])
def test_no_network_probe_on_sm90_sm12x(device: Callable[[tuple[int, int] | None], None],
                                        cap: tuple[int, int]) -> None:
    device(cap)
    # The probe raises (autouse fixture): reaching it fails the test.
    assert fi_utils.supports_trtllm_attention(is_prefill=False) is True  # XQA decode
    assert fi_utils.supports_trtllm_attention(is_prefill=True) is False  # no trtllm prefill here
    assert fi_utils.can_use_trtllm_attention(64, 8, is_prefill=False) is True
    assert fi_backend.FlashInferBackend.supports_sink() is True
    assert fi_utils.resolve_flashinfer_sink_decode_kernel(fi_backend._fa2_decode_supports_sinks()) == "xqa"


def test_sm100_still_asks_the_artifactory(device: Callable[[tuple[int, int] | None], None]) -> None:
    """The trap is live: off SM90/SM12x the (unchanged) trtllm-gen path still probes."""
    device((10, 0))
    with pytest.raises(AssertionError, match="network probe"):
        fi_utils.supports_trtllm_attention(is_prefill=False)


def test_without_a_toolchain(monkeypatch: pytest.MonkeyPatch,
                             device: Callable[[tuple[int, int] | None], None]) -> None:
    """No nvcc/ninja and no prebuilt kernels: auto declines sinks (vLLM picks another backend), an
    explicit choice raises, and still nothing probes the network."""
    device((12, 1))
    monkeypatch.setattr(fi_utils, "flashinfer_can_jit", lambda: False)
    monkeypatch.setattr(fi_utils, "has_flashinfer_cubin", lambda: False)
    assert fi_utils.supports_trtllm_attention(is_prefill=False) is False
    assert fi_backend.FlashInferBackend.supports_sink() is False
    monkeypatch.setenv(ENV, "xqa")
    with pytest.raises(ValueError, match=f"{ENV}=xqa cannot be served"):
        fi_backend.FlashInferBackend.supports_sink()


# ----------------------------------------------------------------------- fa2 decode honours the sinks

def test_fa2_decode_plans_with_sinks(monkeypatch: pytest.MonkeyPatch) -> None:
    """The patched FlashInfer's decode wrapper takes plan(use_sinks=...), and vLLM's fast_plan_decode
    forwards it (only when sinks are used, so an unpatched FlashInfer keeps working without them)."""
    assert fi_backend._fa2_decode_supports_sinks() is True
    monkeypatch.setattr(fi_backend, "pin_host_range_buf", lambda n: None)
    for use_sinks in (True, False):
        calls: list[dict[str, Any]] = []
        wrapper = SimpleNamespace(is_cuda_graph_enabled=False, plan=lambda _c=calls, **kw: _c.append(kw))
        one = torch.ones(1, dtype=torch.int32)
        fi_backend.fast_plan_decode(wrapper, torch.tensor([0, 1], dtype=torch.int32), one, one, one,
                                    num_qo_heads=64, num_kv_heads=8, head_dim=64, page_size=16,
                                    use_sinks=use_sinks)
        assert len(calls) == 1
        assert calls[0].get("use_sinks") is (True if use_sinks else None)


# ------------------------------------------------------------------ the metadata builder and its log line

def _builder(monkeypatch: pytest.MonkeyPatch, head_dim: int = 64,
             reads: list[Any] | None = None) -> fi_backend.FlashInferMetadataBuilder:
    """FlashInferMetadataBuilder.__init__ for a gpt-oss attention group (64 q / 8 kv heads, fp8 KV,
    sliding window, sinks) on the faked device, with the model's layers replaced by their parameters
    (each read of them appended to `reads`)."""
    def parameters(*args: Any) -> dict[str, PerLayerParameters]:
        if reads is not None:
            reads.append(args)
        return {"model.layers.0.self_attn.attn": PerLayerParameters(127, None, 0.125, True)}

    monkeypatch.setattr(fi_backend, "get_per_layer_parameters", parameters)
    monkeypatch.setattr(fi_backend, "get_num_attention_heads_from_layers", lambda *a: 64)
    config = SimpleNamespace(
        cache_config=SimpleNamespace(cache_dtype="fp8"),
        model_config=SimpleNamespace(max_model_len=4096, dtype=torch.bfloat16),
        attention_config=SimpleNamespace(disable_flashinfer_q_quantization=False, use_trtllm_attention=None),
        num_speculative_tokens=0,
        compilation_config=SimpleNamespace(cudagraph_mode=CUDAGraphMode.NONE,
                                           max_cudagraph_capture_size=None),
        scheduler_config=SimpleNamespace(max_num_batched_tokens=8192, max_num_seqs=4),
        speculative_config=None,
        parallel_config=SimpleNamespace(cp_kv_cache_interleave_size=1, dcp_comm_backend="ag_rs",
                                        decode_context_parallel_size=1),
    )
    spec = SimpleNamespace(block_size=16, num_kv_heads=8, head_size=head_dim, dcp_sharded=False,
                           kv_quant_mode=KVQuantMode.FP8_PER_TENSOR, dtype=torch.uint8)
    return fi_backend.FlashInferMetadataBuilder(spec, ["model.layers.0.self_attn.attn"], config,
                                                torch.device("cpu"))


@pytest.mark.parametrize(("cap", "setting", "head_dim", "want"), [
    ((12, 1), None, 64, "xqa"),
    ((12, 0), "xqa", 64, "xqa"),
    ((12, 1), "fa2", 64, "fa2"),
    ((9, 0), "auto", 64, "xqa"),
    # XQA takes head_dim <= 256: the group falls back to native (fa2) decode, which must then take the sinks
    ((12, 1), "auto", 512, "fa2"),
])
def test_builder_logs_the_kernel_once(monkeypatch: pytest.MonkeyPatch, vllm_log: Any,
                                      device: Callable[[tuple[int, int] | None], None],
                                      cap: tuple[int, int], setting: str | None, head_dim: int,
                                      want: str) -> None:
    device(cap)
    if setting is not None:
        monkeypatch.setenv(ENV, setting)
    for _ in range(3):  # one builder per KV-cache group / layer group: still one line
        builder = _builder(monkeypatch, head_dim)
    assert builder.has_sinks
    assert builder.use_xqa is (want == "xqa")
    shown = setting or "auto"
    assert vllm_log.messages(LOG) == [f"{LOG}: {want} ({ENV}={shown})."]


def test_builder_reads_the_layer_parameters_once(monkeypatch: pytest.MonkeyPatch,
                                                 device: Callable[[tuple[int, int] | None], None]) -> None:
    """The layers' hyperparameters (sinks among them) are read before the decode kernel is chosen, and
    only there: reading them walks every attention layer of the model."""
    device((12, 1))
    reads: list[Any] = []
    builder = _builder(monkeypatch, reads=reads)
    assert len(reads) == 1 and builder.has_sinks and builder.window_left == 127


def test_builder_plans_fa2_decode_with_the_sinks(monkeypatch: pytest.MonkeyPatch,
                                                 device: Callable[[tuple[int, int] | None], None]) -> None:
    """A decode batch on fa2 (VLLM_FLASHINFER_SINK_DECODE=fa2) is planned with use_sinks: the kernel
    built for the sinks is the one the batch runs. The page-index kernel (Triton) and FlashInfer's
    wrapper are stood in for; the plan's arguments are recorded."""
    device((12, 1))
    monkeypatch.setenv(ENV, "fa2")
    builder = _builder(monkeypatch)
    assert builder.has_sinks and not builder.use_xqa
    plans: list[dict[str, Any]] = []
    monkeypatch.setattr(fi_backend, "fast_plan_decode", lambda wrapper, **kw: plans.append(kw))
    monkeypatch.setattr(builder, "_get_decode_wrapper", lambda *a: SimpleNamespace())
    monkeypatch.setattr(builder, "_compute_flashinfer_kv_metadata",
                        lambda *a: torch.zeros(4, dtype=torch.int32))
    lens = torch.tensor([17, 20], dtype=torch.int32)
    meta = SimpleNamespace(
        num_reqs=2, num_actual_tokens=2, causal=True, max_query_len=1, max_seq_len=20,
        query_start_loc=torch.arange(3, dtype=torch.int32),
        query_start_loc_cpu=torch.arange(3, dtype=torch.int32),
        seq_lens=lens, seq_lens_cpu_upper_bound=lens, block_table_tensor=torch.zeros(2, 4, dtype=torch.int32),
        slot_mapping=torch.zeros(2, dtype=torch.int64), dcp_local_seq_lens=None)
    monkeypatch.setattr(builder.cache_config, "get_resolved_kv_cache_layout", lambda: "NHD", raising=False)
    monkeypatch.setattr(fi_backend, "PIN_MEMORY", False)  # no CUDA host memory here
    builder.build(0, meta)  # type: ignore[arg-type]
    assert [p.get("use_sinks") for p in plans] == [True]


def test_builder_raises_when_fa2_cannot_take_the_sinks(
        monkeypatch: pytest.MonkeyPatch, vllm_log: Any,
        device: Callable[[tuple[int, int] | None], None]) -> None:
    """XQA chosen, but this group must decode natively (head_dim 512) on an fa2 without use_sinks:
    raising is the only alternative to silently dropping the sinks."""
    device((12, 1))
    monkeypatch.setattr(fi_backend, "_fa2_decode_supports_sinks", lambda: False)
    with pytest.raises(NotImplementedError, match="cannot apply sinks in fa2 decode"):
        _builder(monkeypatch, head_dim=512)
    assert vllm_log.messages(LOG) == []


def test_builder_rejects_an_invalid_value(monkeypatch: pytest.MonkeyPatch,
                                          device: Callable[[tuple[int, int] | None], None]) -> None:
    device((12, 1))
    monkeypatch.setenv(ENV, "trtllm")
    with pytest.raises(ValueError, match=f"Invalid value 'trtllm' for {ENV}"):
        _builder(monkeypatch)


# ------------------------------------------------------------------------ what the patch declares

def test_the_variable_is_declared_for_type_checkers() -> None:
    """vLLM declares every variable of envs.environment_variables under TYPE_CHECKING, for mypy."""
    import ast
    from pathlib import Path

    tree = ast.parse(Path(envs.__file__).read_text())
    block = next(n for n in tree.body if isinstance(n, ast.If) and isinstance(n.test, ast.Name)
                 and n.test.id == "TYPE_CHECKING")
    declared = {n.target.id for n in block.body
                if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    assert ENV in envs.environment_variables and ENV in declared


def test_the_helpers_are_exported() -> None:
    """vllm.utils.flashinfer lists its public helpers in __all__ (what `import *` and the docs take)."""
    namespace: dict[str, Any] = {}
    exec("from vllm.utils.flashinfer import *", namespace)
    for name in ("flashinfer_can_jit", "select_flashinfer_sink_decode_kernel",
                 "resolve_flashinfer_sink_decode_kernel"):
        assert name in fi_utils.__all__ and namespace[name] is getattr(fi_utils, name)
