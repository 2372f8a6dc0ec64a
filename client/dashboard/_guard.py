"""Who may use the dashboard: the holder of its token, on no other host name.

Other users of a shared login node can reach its 127.0.0.1 ports, so every request for data or
a change (its API and event streams) needs the token, as `Authorization: Bearer`, and nothing
else carries it: no cookie (a cookie of 127.0.0.1 goes to every port of it, so to any server
another user runs there that the browser visits), no query string. The page gets the token
from the printed URL's fragment, which browsers never send, and keeps it in sessionStorage,
which is per origin (port included). The page, its script and its style are the same for
everyone (they are in the package) and hold no data, so they are served without the token.
The Host header must name 127.0.0.1 or localhost with this port on every request, so a hostile
name that resolves to 127.0.0.1 (DNS rebinding) gets nothing; and a change (cancel, delete)
must also come from this dashboard's own Origin, a second check should the token leak to a
page.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field


def new_token() -> str:
    return secrets.token_urlsafe(32)


@dataclass
class Guard:
    token: str = field(default_factory=new_token)
    port: int = 0

    @property
    def hosts(self) -> frozenset[str]:
        return frozenset({f"127.0.0.1:{self.port}", f"localhost:{self.port}"})

    @property
    def origins(self) -> frozenset[str]:
        return frozenset(f"http://{host}" for host in self.hosts)

    @property
    def url(self) -> str:
        """What the user opens: the token in the fragment, which no request carries."""
        return f"http://127.0.0.1:{self.port}/#token={self.token}"

    def matches(self, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given.encode(), self.token.encode())

    def refusal(self, method: str, headers: Mapping[str, str], public: bool) -> str | None:
        """Why a request is refused (a line for the log, never holding the token), or None.
        `public`: a GET of the page or its static files, which hold no data."""
        host = headers.get("Host", "")
        if host not in self.hosts:
            return f"Host {host!r} is not this dashboard's (127.0.0.1:{self.port})"
        if public and method in ("GET", "HEAD"):
            return None
        bearer = headers.get("Authorization", "")
        if not self.matches(bearer[len("Bearer ") :] if bearer.startswith("Bearer ") else None):
            return "no token or a wrong one"
        if method not in ("GET", "HEAD"):
            origin = headers.get("Origin")
            if origin not in self.origins:
                return f"a {method} from Origin {origin!r}, not this dashboard's"
            if headers.get("Sec-Fetch-Site", "same-origin") != "same-origin":
                return f"a {method} from another site ({headers['Sec-Fetch-Site']})"
        return None
