import pytest

from sparkserve.errors import SparkserveError
from sparkserve.supply.patches.pathmap import to_site


@pytest.mark.parametrize(
    ("upstream", "src", "site"),
    [
        ("vllm", "vllm/model_executor/layers/x.py", "vllm/model_executor/layers/x.py"),
        ("vllm", "tests/kernels/test_x.py", None),
        ("flashinfer", "flashinfer/prefill.py", "flashinfer/prefill.py"),
        ("flashinfer", "include/flashinfer/attention/decode.cuh",
         "flashinfer/data/include/flashinfer/attention/decode.cuh"),
        ("flashinfer", "csrc/batch_decode.cu", "flashinfer/data/csrc/batch_decode.cu"),
        ("flashinfer", "3rdparty/cutlass/include/cutlass/gemm/x.inl",
         "flashinfer/data/cutlass/include/cutlass/gemm/x.inl"),
        ("flashinfer", "tests/attention/test_decode.py", None),
    ],
)
def test_maps_sdist_paths_to_wheel_paths(upstream: str, src: str, site: str | None) -> None:
    assert to_site(upstream, src) == site


def test_compiled_sources_cannot_go_into_a_wheel() -> None:
    with pytest.raises(SparkserveError, match=r"csrc/moe\.cu has no place in an installed wheel"):
        to_site("vllm", "csrc/moe.cu")
