"""Builtin metrics component: tensorboard.

Every public function here returning an AppDef is a builtin named `metrics.<function>`, built
exactly as TorchX 0.7's `torchx.components.metrics` builds it.
"""

from __future__ import annotations

from txd.client.components._common import DEFAULT_IMAGE
from txd.v1 import AppDef, Role


def tensorboard(
    logdir: str,
    image: str = DEFAULT_IMAGE,
    timeout: float = 60 * 60,  # an int, as TorchX's: the default reaches the args as "3600"
    port: int = 6006,
    start_on_file: str = "",
    exit_on_file: str = "",
) -> AppDef:
    """Runs a TensorBoard server showing the logs under logdir, until a timeout or a file.

    TensorBoard is a service, so it stops after --timeout seconds, or as soon as the fsspec
    path --exit_on_file exists; with --start_on_file it waits for that path before it starts.
    The paths are polled through fsspec by TorchX's process monitor, which the image must hold.

    Args:
        logdir: fsspec URL of the TensorBoard logs
        image: image holding tensorboard and torchx
        timeout: seconds to run before stopping
        port: port TensorBoard listens on (named http in the port map)
        start_on_file: start the server once this fsspec path exists ("" starts at once)
        exit_on_file: stop the server once this fsspec path exists ("" waits for the timeout)
    """
    return AppDef(
        name="tensorboard",
        roles=[
            Role(
                name="tensorboard",
                image=image,
                entrypoint="python",
                num_replicas=1,
                args=[
                    "-m",
                    "torchx.apps.utils.process_monitor",
                    "--timeout",
                    str(timeout),
                    "--start_on_file",
                    start_on_file,
                    "--exit_on_file",
                    exit_on_file,
                    "--",
                    "tensorboard",
                    "--bind_all",
                    "--port",
                    str(port),
                    "--logdir",
                    logdir,
                ],
                # No resource, as TorchX's (whose is unset): the scheduler's defaults apply.
                port_map={"http": port},
            )
        ],
    )
