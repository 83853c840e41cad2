"""What the sweep and `validate moe` need from a device, as one interface with two implementations: the
GPU (`GpuBackend`, FlashInfer's kernel) and the CPU dry run (`sparkserve_lab.moe.dryrun`), which runs
everything but the kernel so the commands can be rehearsed without a GPU."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import torch

from sparkserve.serving.moe.shape import MoeShape
from sparkserve_lab.moe import kernel, reference
from sparkserve_lab.moe.reference import Experts
from sparkserve_lab.moe.rotation import Rotation, plan

# Share of the free device memory the rotated weight copies may take.
COPY_BUDGET = 0.5


@dataclass(frozen=True)
class Device:
    name: str
    compute_capability: str  # "9.0"
    l2_bytes: int
    memory_bytes: int
    simulated: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "compute_capability": self.compute_capability, "l2_bytes": self.l2_bytes,
                "memory_bytes": self.memory_bytes, "simulated": self.simulated}


class Backend(Protocol):
    path: str
    shape: MoeShape
    device: Device

    @property
    def activation(self) -> str: ...

    def load(self, experts: Experts) -> None: ...

    def module_status(self) -> dict[str, Any]: ...

    def bucket(self, x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor) -> None: ...

    def reference(self) -> torch.Tensor: ...

    def space(self) -> kernel.TacticSpace: ...

    def run(self, profile_ids: list[int] | None) -> torch.Tensor: ...

    def rotation(self, tokens: int) -> Rotation: ...

    def time_us(self, profile_ids: list[int] | None, rot: Rotation, replays: int, warmup: int,
                repeats: int) -> float: ...


class GpuBackend:
    def __init__(self, shape: MoeShape, activation: str | None = None, index: int = 0) -> None:
        if not torch.cuda.is_available():
            raise kernel.Unsupported("no CUDA device visible to torch: `validate moe` and `moe sweep` run "
                                     "on a GPU (or rehearse with --dry-run)")
        self.dev = torch.device("cuda", index)
        torch.cuda.set_device(self.dev)
        self.path = kernel.choose_path(self.dev, activation)
        self.shape = shape
        props = torch.cuda.get_device_properties(self.dev)
        major, minor = kernel.device_capability(self.dev)
        self.device = Device(props.name, f"{major}.{minor}", int(getattr(props, "L2_cache_size", 0)),
                             int(props.total_memory))
        self.runner = kernel.Runner(self.path, shape, self.dev)
        self.copies: list[kernel.Prepared] = []
        self.experts: Experts | None = None
        self.call: kernel.Call | None = None
        self.inputs: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
        self._space: kernel.TacticSpace | None = None
        self._budget = 0

    @property
    def activation(self) -> str:
        return self.runner.activation

    def module_status(self) -> dict[str, Any]:
        return kernel.module_status(self.dev)

    def load(self, experts: Experts) -> None:
        self.experts = experts.to(self.dev)
        self.copies = [kernel.prepare(experts, self.path, self.dev)]
        free, _ = torch.cuda.mem_get_info(self.dev)
        self._budget = int(free * COPY_BUDGET) + self.copies[0].nbytes()

    def _copy(self) -> kernel.Prepared:
        p = self.copies[0]
        return kernel.Prepared(p.fc1.clone(), p.fc2.clone(), [s.clone() for s in p.quant_scales],
                               p.fc1_bias.clone(), p.fc2_bias.clone())

    def bucket(self, x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor) -> None:
        self.inputs = (x.to(self.dev), ids.to(self.dev), weights.to(self.dev))
        self.call = self.runner.call(*self.inputs)

    def reference(self) -> torch.Tensor:
        assert self.inputs is not None and self.experts is not None
        s = self.shape
        return reference.moe(*self.inputs, self.experts, self.activation, s.swiglu_alpha, s.swiglu_beta,
                             s.swiglu_limit)

    def space(self) -> kernel.TacticSpace:
        assert self.call is not None
        if self._space is None:  # depends on the weights' shapes only
            self._space = kernel.tactic_space(self.runner, self.call, self.copies[0])
        return self._space

    def run(self, profile_ids: list[int] | None) -> torch.Tensor:
        assert self.call is not None
        out = self.runner.run(self.call, self.copies[0], profile_ids).clone()
        torch.cuda.synchronize(self.dev)
        return out

    def rotation(self, tokens: int) -> Rotation:
        per_copy = self.copies[0].nbytes()
        return plan(per_copy, per_copy // self.shape.experts, tokens, self.shape.top_k,
                             self.shape.experts, self.device.l2_bytes, self._budget)

    def time_us(self, profile_ids: list[int] | None, rot: Rotation, replays: int, warmup: int,
                repeats: int) -> float:
        from sparkserve_lab.moe.timing import graph_time_us

        call = self.call
        assert call is not None
        while len(self.copies) < rot.copies:
            self.copies.append(self._copy())
        calls = [lambda w=w: self.runner.run(call, w, profile_ids) for w in self.copies[:rot.copies]]
        return graph_time_us(calls, replays, warmup, repeats)
