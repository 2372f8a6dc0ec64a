"""`txd token create|revoke|list`: the tokens a TCP listener accepts (txd.daemon.tokens).

No daemon is needed: the commands change the state dir's token store, and a running daemon
reads the change on its next call.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from txd import defaults
from txd.daemon.tokens import SCOPES, TokenError, TokenStore, format_time, parse_expiry


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--state-dir",
        help=f"the daemon's state dir (env {defaults.STATE_DIR_ENV}; default "
        f"{defaults.state_dir()})",
    )
    p = argparse.ArgumentParser(
        prog="txd token",
        description="bearer tokens for `txd --listen tcp://...` (stored only as SHA-256 hashes)",
        parents=[common],
    )
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    create = sub.add_parser(
        "create",
        parents=[common],
        help="make a token and print its secret, once",
        description="Makes a token and prints its secret on stdout, once (it is stored only as "
        "a hash). Give it to the client in the TXD_TOKEN variable or a file (TXD_TOKEN_FILE or "
        "txctl --token-file), never on a command line.",
    )
    create.add_argument("--name", required=True, help="a name to list and revoke it by")
    create.add_argument(
        "--expires",
        default="30d",
        metavar="WHEN",
        help="a duration (30d, 12h, 90m, 2w), an ISO date or time (UTC unless it says), or "
        "'never' (default %(default)s)",
    )
    create.add_argument(
        "--scope",
        choices=SCOPES,
        default="all",
        help="all: every call; read: observe jobs and the daemon (status, list, logs, watch, "
        "events, describe, metrics), never run, cancel or delete (default %(default)s)",
    )
    revoke = sub.add_parser(
        "revoke", parents=[common], help="remove a token; a running daemon refuses it at once"
    )
    revoke.add_argument("name")
    lst = sub.add_parser(
        "list", parents=[common], help="names, expiry and last use (never the secret)"
    )
    lst.add_argument("--json", action="store_true", help="print JSON")
    return p


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    store = TokenStore(defaults.state_dir(args.state_dir))
    try:
        if args.action == "create":
            now = time.time()
            expires = parse_expiry(args.expires, now)
            secret = store.create(args.name, expires, now, scope=args.scope)
            print(secret)
            print(
                f"txd: token {args.name!r} (scope {args.scope}) created in {store.path}, expires "
                f"{format_time(expires)}; the secret above is shown only this once",
                file=sys.stderr,
            )
        elif args.action == "revoke":
            store.revoke(args.name)
            print(f"txd: token {args.name!r} revoked", file=sys.stderr)
        else:
            _print_list(store, args.json)
    except TokenError as e:
        print(f"txd token: error: {e}", file=sys.stderr)
        return 2
    return 0


def _print_list(store: TokenStore, as_json: bool) -> None:
    now = time.time()
    tokens = store.all()
    if as_json:
        rows = [
            {
                "name": t.name,
                "created": t.created,
                "expires": t.expires,
                "last_used": t.last_used,
                "expired": t.expired(now),
                "scope": t.scope,
            }
            for t in tokens
        ]
        print(json.dumps({"tokens": rows}, indent=1))
        return
    if not tokens:
        print("no tokens (txd token create --name NAME makes one)", file=sys.stderr)
        return
    table = [("NAME", "SCOPE", "EXPIRES", "LAST USED")] + [
        (
            t.name,
            t.scope,
            format_time(t.expires) + (" (expired)" if t.expired(now) else ""),
            format_time(t.last_used, never="-"),
        )
        for t in tokens
    ]
    widths = [max(len(row[i]) for row in table) for i in range(3)]
    for name, scope, expires, used in table:
        print(f"{name:<{widths[0]}}  {scope:<{widths[1]}}  {expires:<{widths[2]}}  {used}")
