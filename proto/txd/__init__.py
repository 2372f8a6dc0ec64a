"""txd: TorchX's job-launcher model as an async gRPC daemon (`txd`) with thin clients (`txctl`).

Subpackages: txd.v1 (the generated API), txd.client, txd.daemon, txd.schedulers.
"""

__version__ = "0.1.0"
