"""How txd is installed: its distribution's name and version, and the command that adds one of
its extras to the Python running this code.

The import name is `txd`, but the distribution is `txd-launcher`: "txd" on the package index is
an unrelated project, so a hint must never say `pip install 'txd[...]'`. From a checkout (an
editable or directory install, as scripts/setup makes) the hint is that checkout's
`scripts/setup`, which installs the extra from the committed lock into this venv; it reaches no
package index name at all.
"""

from __future__ import annotations

import sys
from pathlib import Path

DISTRIBUTION = "txd-launcher"


# importlib.metadata is imported where it is used: it costs a txctl command that imports this
# module (a component's resolution does) 20 ms.
def version() -> str:
    """txd's version; "unknown" where its metadata cannot be read (another user's process
    reaching txd's source, but not its venv's dist-info, must still start and say why it stops)."""
    from importlib import metadata

    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "unknown"


def checkout() -> Path | None:
    """The source folder txd was installed from, when it was installed from one that still
    has scripts/setup (PEP 610's direct_url.json); None for an install from a wheel or index."""
    import json
    from importlib import metadata
    from urllib.parse import unquote, urlparse

    # Every copy of the metadata found: a build leaves an egg-info in the checkout, which
    # shadows the installed dist-info when the checkout is on sys.path.
    found = (d.read_text("direct_url.json") for d in metadata.distributions(name=DISTRIBUTION))
    text = next((t for t in found if t), None)
    try:
        url = json.loads(text or "null") or {}
        parsed = urlparse(url.get("url", ""))
    except (ValueError, AttributeError):
        return None
    if parsed.scheme != "file" or "dir_info" not in url:
        return None
    folder = Path(unquote(parsed.path))
    return folder if (folder / "scripts" / "setup").is_file() else None


def command(extra: str) -> str:
    """The command that installs `extra` into the Python running this code."""
    source = checkout()
    if source is not None and sys.prefix != sys.base_prefix:
        return f"{source / 'scripts' / 'setup'} --venv {sys.prefix} {extra}"
    return f"{sys.executable} -m pip install '{DISTRIBUTION}[{extra}]'"
