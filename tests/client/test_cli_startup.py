"""What `txctl` loads before it needs it: its start-up is part of every command's time (issue
18: `txctl run` against `docker run`)."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_help_and_usage_errors_load_neither_asyncio_nor_grpc() -> None:
    code = textwrap.dedent(
        """
        import contextlib, io, sys
        from txd.client import cli
        quiet = contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO())
        for argv in (["--help"], ["run", "--no-such-option"]):
            with quiet[0], quiet[1]:
                try:
                    cli.main(argv)
                except SystemExit:
                    pass
                else:
                    raise AssertionError(f"{argv} did not exit")
        loaded = {"asyncio", "grpc"} & set(sys.modules)
        assert not loaded, loaded
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_resolving_a_component_loads_no_package_metadata() -> None:
    """`txctl run` resolves its component first; importlib.metadata (20 ms, for the hint of a
    missing extra) waits until a hint is needed."""
    code = textwrap.dedent(
        """
        import sys
        from txd.client.components import _finder
        from txd import install
        assert "importlib.metadata" not in sys.modules
        install.checkout()  # loaded when asked
        assert "importlib.metadata" in sys.modules
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
