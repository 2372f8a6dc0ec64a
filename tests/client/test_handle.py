"""txd.handle.Handle: the one reading and writing of `{scheduler}://{session}/{app_id}`."""

from __future__ import annotations

import pytest
from txd.handle import Handle


@pytest.mark.parametrize(
    ("text", "parts"),
    [
        ("local_cwd://txd/echo-abc123", ("local_cwd", "txd", "echo-abc123")),
        ("slurm://txd/1234.2", ("slurm", "txd", "1234.2")),
        ("kubernetes://a/b/ns:job", ("kubernetes", "a/b", "ns:job")),  # a session may hold '/'
        ("x:///id", ("x", "", "id")),
    ],
)
def test_parse_and_format_round_trip(text: str, parts: tuple[str, str, str]) -> None:
    handle = Handle.parse(text)
    assert (handle.scheduler, handle.session, handle.app_id) == parts
    assert handle.format() == str(handle) == text
    assert Handle(*parts) == handle


@pytest.mark.parametrize(
    "text", ["", "echo-abc123", "local_cwd://txd", "local_cwd://txd/", "a:b://txd/x", "://txd/x"]
)
def test_not_a_handle_says_the_form(text: str) -> None:
    with pytest.raises(
        ValueError, match=r"is not of the form \{scheduler\}://\{session\}/\{app_id\}"
    ):
        Handle.parse(text)
