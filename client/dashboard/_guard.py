"""Who may use the dashboard: a token as Jupyter's, and no other site or host name.

Other users of a shared login node can reach its 127.0.0.1 ports, so every request (the page,
its API, its event streams) needs the token: the URL's `?token=` on the first load (then an
HttpOnly, SameSite=Strict cookie named for the port, as Jupyter's), or `Authorization: Bearer`.
A cookie of 127.0.0.1 is sent to every port of it, and SameSite counts another port as the same
site, so a change (cancel, delete) also needs its Origin to be this dashboard's own; and the
Host header must name 127.0.0.1 or localhost with this port on every request, so a hostile
name that resolves to 127.0.0.1 (DNS rebinding) gets nothing.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field

COOKIE_PREFIX = "txd-dashboard-"


def new_token() -> str:
    return secrets.token_urlsafe(32)


@dataclass
class Guard:
    token: str = field(default_factory=new_token)
    port: int = 0

    @property
    def cookie(self) -> str:
        """The cookie's name: one per port, so two dashboards of one browser keep theirs."""
        return f"{COOKIE_PREFIX}{self.port}"

    @property
    def hosts(self) -> frozenset[str]:
        return frozenset({f"127.0.0.1:{self.port}", f"localhost:{self.port}"})

    @property
    def origins(self) -> frozenset[str]:
        return frozenset(f"http://{host}" for host in self.hosts)

    def matches(self, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given.encode(), self.token.encode())

    def refusal(
        self,
        method: str,
        headers: Mapping[str, str],
        query: Mapping[str, str],
        cookies: Mapping[str, str],
    ) -> str | None:
        """Why a request is refused (a line for the log, never holding the token), or None."""
        host = headers.get("Host", "")
        if host not in self.hosts:
            return f"Host {host!r} is not this dashboard's (127.0.0.1:{self.port})"
        bearer = headers.get("Authorization", "")
        given = (
            query.get("token")
            or cookies.get(self.cookie)
            or (bearer[len("Bearer ") :] if bearer.startswith("Bearer ") else None)
        )
        if not self.matches(given):
            return "no token or a wrong one"
        if method not in ("GET", "HEAD"):
            origin = headers.get("Origin")
            if origin not in self.origins:
                return f"a {method} from Origin {origin!r}, not this dashboard's"
            if headers.get("Sec-Fetch-Site", "same-origin") != "same-origin":
                return f"a {method} from another site ({headers['Sec-Fetch-Site']})"
        return None
