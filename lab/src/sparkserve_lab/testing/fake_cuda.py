"""A pytest plugin (`-p sparkserve_lab.testing.fake_cuda`): vLLM's current platform a CUDA one without a
device, set when pytest loads the plugin, before any test module asks. For upstream test modules that
skip themselves without CUDA (`current_platform.is_cuda()` at import) but test platform decisions through
mocks, so that the CPU subset of `proof upstream-tests` runs them in the image. The capability is None
(no device): a test that needs one mocks it."""

from __future__ import annotations

import vllm.platforms
from vllm.platforms.interface import DeviceCapability, Platform, PlatformEnum


class CudaWithoutDevice(Platform):  # type: ignore[misc]  # vLLM is not typed here
    _enum = PlatformEnum.CUDA
    device_type = "cuda"
    device_name = "cuda"

    @classmethod
    def get_device_capability(cls, device_id: int = 0) -> DeviceCapability | None:
        return None


vllm.platforms._current_platform = CudaWithoutDevice()
