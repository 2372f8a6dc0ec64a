"""What the builtin components share: TorchX's default image and its resource defaults."""

from __future__ import annotations

from txd.v1 import Resource

# TorchX 0.7's torchx.IMAGE, the default image of its builtins.
DEFAULT_IMAGE = "ghcr.io/pytorch/torchx:0.7.0"


def resource(cpu: int, gpu: int, mem_mb: int, h: str | None) -> Resource:
    """A builtin's resource, as TorchX's `specs.resource`: a named resource wins over the
    numbers, and a number left at 0 takes TorchX's default (2 CPUs, 0 GPUs, 1024 MiB)."""
    if h:
        # Resolved by the daemon from txd.resources (TorchX's table), which sets cpu, gpu,
        # mem_mb, devices and capabilities to the named values.
        return Resource(named=h)
    return Resource(cpu=cpu or 2, gpu=gpu or 0, mem_mb=mem_mb or 1024)
