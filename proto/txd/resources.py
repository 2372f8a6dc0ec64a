"""Named resources: t-shirt sizes and AWS instance shapes, as TorchX defines them.

`lookup(name)` returns a fresh Resource; an unknown name raises KeyError with the closest names.
"""

from __future__ import annotations

from txd.v1.app_pb2 import Resource

GiB = 1024
_AWS_GiB = int(1024 * 0.96)  # AWS shapes leave room for the OS, as TorchX does
_EFA = "vpc.amazonaws.com/efa"
_NEURON = "aws.amazon.com/neurondevice"
_INSTANCE_TYPE = "node.kubernetes.io/instance-type"

# name: (cpu, gpu, memory in GiB)
_GENERIC: dict[str, tuple[int, int, float]] = {
    "gpu.small": (8, 1, 32),
    "gpu.medium": (16, 2, 64),
    "gpu.large": (32, 4, 128),
    "gpu.xlarge": (64, 8, 256),
    "cpu.nano": (1, 0, 0.5),
    "cpu.micro": (1, 0, 1),
    "cpu.small": (1, 0, 2),
    "cpu.medium": (2, 0, 4),
    "cpu.large": (2, 0, 8),
    "cpu.xlarge": (8, 0, 32),
}

# instance type: (cpu, gpu, memory in AWS GiB, efa devices, neuron devices)
_AWS: dict[str, tuple[int, int, int, int, int]] = {
    "t3.medium": (2, 0, 4, 0, 0),
    "m5.2xlarge": (8, 0, 32, 0, 0),
    "c5.18xlarge": (72, 0, 144, 0, 0),
    "p3.2xlarge": (8, 1, 61, 0, 0),
    "p3.8xlarge": (32, 4, 244, 0, 0),
    "p3.16xlarge": (64, 8, 488, 0, 0),
    "p3dn.24xlarge": (96, 8, 768, 1, 0),
    "p4d.24xlarge": (96, 8, 1152, 4, 0),
    "p4de.24xlarge": (96, 8, 1152, 4, 0),
    "p5.48xlarge": (192, 8, 2048, 32, 0),
    "p5en.48xlarge": (192, 8, 2048, 16, 0),
    "g4dn.xlarge": (4, 1, 16, 0, 0),
    "g4dn.2xlarge": (8, 1, 32, 0, 0),
    "g4dn.4xlarge": (16, 1, 64, 0, 0),
    "g4dn.8xlarge": (32, 1, 128, 1, 0),
    "g4dn.12xlarge": (48, 4, 192, 1, 0),
    "g4dn.16xlarge": (64, 1, 256, 1, 0),
    "g4dn.metal": (96, 8, 384, 1, 0),
    "g5.xlarge": (4, 1, 16, 0, 0),
    "g5.2xlarge": (8, 1, 32, 0, 0),
    "g5.4xlarge": (16, 1, 64, 0, 0),
    "g5.8xlarge": (32, 1, 128, 1, 0),
    "g5.12xlarge": (48, 4, 192, 1, 0),
    "g5.16xlarge": (64, 1, 256, 1, 0),
    "g5.24xlarge": (96, 4, 384, 1, 0),
    "g5.48xlarge": (192, 8, 768, 1, 0),
    "g6e.xlarge": (4, 1, 32, 0, 0),
    "g6e.2xlarge": (8, 1, 64, 0, 0),
    "g6e.4xlarge": (16, 1, 128, 0, 0),
    "g6e.8xlarge": (32, 1, 256, 0, 0),
    "g6e.12xlarge": (48, 4, 384, 0, 0),
    "g6e.16xlarge": (64, 1, 512, 0, 0),
    "g6e.24xlarge": (96, 4, 768, 2, 0),
    "g6e.48xlarge": (192, 8, 1536, 4, 0),
    "trn1.2xlarge": (8, 0, 32, 0, 1),
    "trn1.32xlarge": (128, 0, 512, 8, 16),
    "inf2.xlarge": (4, 0, 16, 0, 1),
    "inf2.8xlarge": (32, 0, 128, 0, 1),
    "inf2.24xlarge": (96, 0, 384, 0, 6),
    "inf2.48xlarge": (192, 0, 768, 0, 12),
}


def names() -> list[str]:
    return sorted([*_GENERIC, *(f"aws_{t}" for t in _AWS)])


def lookup(name: str) -> Resource:
    if name in _GENERIC:
        cpu, gpu, mem = _GENERIC[name]
        return Resource(cpu=cpu, gpu=gpu, mem_mb=int(mem * GiB))
    if name.startswith("aws_") and name[4:] in _AWS:
        cpu, gpu, mem, efa, neuron = _AWS[name[4:]]
        devices = {k: v for k, v in ((_EFA, efa), (_NEURON, neuron)) if v}
        return Resource(
            cpu=cpu,
            gpu=gpu,
            mem_mb=mem * _AWS_GiB,
            devices=devices,
            capabilities={_INSTANCE_TYPE: name[4:]},
        )
    import difflib  # for this error only: `txctl run` starts sooner without it

    close = difflib.get_close_matches(name, names(), n=3)
    hint = f"did you mean {', '.join(close)}?" if close else f"known: {', '.join(names())}"
    raise KeyError(f"unknown named resource {name!r}; {hint}")
