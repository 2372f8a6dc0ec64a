"""The opt-in TCP listener (`txd --listen tcp://...`), tried as an attacker on the same host would:
a real txd on loopback with certificates made here, reached by raw gRPC calls (every kind:
unary, server stream, health, reflection, a method that does not exist), by txctl and by the
Python client. Loopback gets no exemption: every test here connects from 127.0.0.1.

The certificates are made with `cryptography` (installed with asyncssh, a dependency of the
slurm and lsf extras); the module is skipped where it is missing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2
from txd.v1 import runner_pb2 as pb
from txd.v1.runner_pb2_grpc import RunnerStub
from txd_testing import (
    TXCTL,
    Daemon,
    Gates,
    clean_env,
    log_alarms,
    remove_tree,
    sh_app,
    short_tmpdir,
)

pytest.importorskip("cryptography")
from tls_testing import Pair, Pki, make_pki

TIMEOUT = 30
SERVING = re.compile(r"txd serving on (tcp://127\.0\.0\.1:\d+)")


@pytest.fixture(scope="module")
def pki() -> Iterator[Pki]:
    folder = short_tmpdir("txdt-pki-")
    try:
        yield make_pki(folder)
    finally:
        remove_tree(folder)


# -- the daemon -------------------------------------------------------------------------------


def txd_cli(*args: str, check: int | None = 0) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "txd.daemon", *args],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=TIMEOUT,
    )
    if check is not None:
        assert proc.returncode == check, (proc.returncode, proc.stdout, proc.stderr)
    return proc


def create_token(state_dir: Path, name: str, *extra: str) -> str:
    proc = txd_cli("token", "create", "--name", name, "--state-dir", str(state_dir), *extra)
    secret = proc.stdout.strip()
    assert re.fullmatch(r"txd_[A-Za-z0-9_-]{43}", secret), proc.stdout
    assert secret not in proc.stderr
    return secret


def expired_token(state_dir: Path, name: str) -> str:
    """A token whose expiry has passed (the CLI refuses to make one: the store does not)."""
    from txd.daemon.tokens import TokenStore

    return TokenStore(state_dir).create(name, expires=time.time() - 1)


@dataclass
class TcpDaemon:
    daemon: Daemon
    url: str  # tcp://127.0.0.1:PORT
    tokens: dict[str, str]  # name -> secret
    pki: Pki

    @property
    def address(self) -> str:
        return self.url.removeprefix("tcp://")

    def channel(self, cert: Pair | None = None) -> grpc.Channel:
        tls = grpc.ssl_channel_credentials(
            root_certificates=self.pki.ca.read_bytes(),
            private_key=cert.key.read_bytes() if cert else None,
            certificate_chain=cert.cert.read_bytes() if cert else None,
        )
        return grpc.secure_channel(self.address, tls)

    def txctl(
        self, *args: str, token_file: Path | None = None, **env: str
    ) -> subprocess.CompletedProcess[str]:
        extra = {"TXD_CA": str(self.pki.ca), **env}
        if token_file is not None:
            extra["TXD_TOKEN_FILE"] = str(token_file)
        return subprocess.run(
            [*TXCTL, "--host", self.url, *args],
            capture_output=True,
            text=True,
            env=self.daemon.txctl_env(**extra),
            cwd=self.daemon.home,
            timeout=TIMEOUT,
        )

    def token_file(self, name: str) -> Path:
        path = self.daemon.root / f"{name}.token"
        path.write_text(self.tokens[name] + "\n")
        path.chmod(0o600)
        return path


def start_tcp_daemon(root: Path, pki: Pki, *extra: str, names: tuple[str, ...]) -> TcpDaemon:
    d = Daemon(root)
    tokens = {name: create_token(d.state_dir, name) for name in names}
    tokens["expired"] = expired_token(d.state_dir, "expired")
    d.args = [
        "--listen",
        "tcp://127.0.0.1:0",
        "--tls-cert",
        str(pki.server.cert),
        "--tls-key",
        str(pki.server.key),
        *extra,
    ]
    d.start()
    found = SERVING.search(d.log())
    assert found, d.log()
    return TcpDaemon(d, found[1], tokens, pki)


@pytest.fixture(scope="module")
def tcpd(pki: Pki) -> Iterator[TcpDaemon]:
    root = short_tmpdir("txdt-tcp-")
    t = start_tcp_daemon(root, pki, names=("ci", "doomed", "notebook"))
    try:
        yield t
    finally:
        t.daemon.close()
        log = t.daemon.log()
        remove_tree(root)
    assert not log_alarms(log), log


# -- refusing to start ------------------------------------------------------------------------


def _start(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return txd_cli(
        "--socket", str(tmp / "run" / "txd.sock"), "--state-dir", str(tmp / "state"), *args,
        check=None,
    )  # fmt: skip


def test_refuses_to_start_without_tls_or_a_live_token(pki: Pki, tmp_path: Path) -> None:
    listen = ("--listen", "tcp://127.0.0.1:0")
    tls = ("--tls-cert", str(pki.server.cert), "--tls-key", str(pki.server.key))
    state = tmp_path / "state"

    no_tls = _start(tmp_path, *listen)
    assert no_tls.returncode == 2 and "--listen needs TLS" in no_tls.stderr, no_tls.stderr
    no_token = _start(tmp_path, *listen, *tls)
    assert no_token.returncode == 2, no_token.stderr
    assert "at least one live token" in no_token.stderr and "txd token create" in no_token.stderr
    expired_token(state, "old")  # an expired token is no token
    only_expired = _start(tmp_path, *listen, *tls)
    assert only_expired.returncode == 2 and "live token" in only_expired.stderr

    create_token(state, "ci")
    half = _start(tmp_path, *listen, "--tls-cert", str(pki.server.cert))
    assert half.returncode == 2 and "--tls-key" in half.stderr
    loose = tmp_path / "loose.key"
    loose.write_bytes(pki.server.key.read_bytes())
    loose.chmod(0o644)
    shared_key = _start(
        tmp_path, *listen, "--tls-cert", str(pki.server.cert), "--tls-key", str(loose)
    )
    assert shared_key.returncode == 2 and "chmod 600" in shared_key.stderr, shared_key.stderr
    for bad in ("http://127.0.0.1:1", "tcp://127.0.0.1", "tcp://127.0.0.1:7443/x"):
        wrong = _start(tmp_path, "--listen", bad, *tls)
        assert wrong.returncode == 2 and "tcp://HOST:PORT" in wrong.stderr, wrong.stderr
    state.chmod(0o775)  # a state dir others may write to: they could add a token
    loose_store = _start(tmp_path, *listen, *tls)
    assert loose_store.returncode == 2 and "is not private" in loose_store.stderr
    state.chmod(0o700)
    no_listen = _start(tmp_path, *tls)
    assert no_listen.returncode == 2 and "are for --listen" in no_listen.stderr
    # None of these served: not even the Unix socket was made.
    assert not (tmp_path / "run" / "txd.sock").exists()


# -- every kind of call needs a live token ----------------------------------------------------


def _calls(ch: grpc.Channel) -> dict[str, Callable[[list[tuple[str, str]]], Any]]:
    """One call of each kind, each run to its end with the given metadata."""
    runner, health = RunnerStub(ch), health_pb2_grpc.HealthStub(ch)

    def reflect(service: str) -> Callable[[list[tuple[str, str]]], Any]:
        method = ch.stream_stream(
            f"/{service}/ServerReflectionInfo",
            request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
            response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
        )
        ask = reflection_pb2.ServerReflectionRequest(list_services="")
        return lambda md: list(method(iter([ask]), metadata=md, timeout=TIMEOUT))

    missing = ch.unary_unary("/txd.v1.Runner/NoSuchMethod")
    handle = "local_cwd://txd/x"
    return {
        "unary List": lambda md: runner.List(pb.ListRequest(), metadata=md, timeout=TIMEOUT),
        "server stream Logs": lambda md: list(
            runner.Logs(pb.LogsRequest(app_handle=handle), metadata=md, timeout=TIMEOUT)
        ),
        "server stream Watch": lambda md: next(
            iter(runner.Watch(pb.WatchRequest(app_handle=handle), metadata=md, timeout=TIMEOUT))
        ),
        "health Check": lambda md: health.Check(
            health_pb2.HealthCheckRequest(), metadata=md, timeout=TIMEOUT
        ),
        "health Watch": lambda md: next(
            iter(health.Watch(health_pb2.HealthCheckRequest(), metadata=md, timeout=TIMEOUT))
        ),
        "reflection v1": reflect("grpc.reflection.v1.ServerReflection"),
        "reflection v1alpha": reflect("grpc.reflection.v1alpha.ServerReflection"),
        "unknown method": lambda md: missing(b"", metadata=md, timeout=TIMEOUT),
    }


BAD = {
    "missing": lambda t: [],
    "wrong": lambda t: [("authorization", "Bearer txd_" + "A" * 43)],
    "expired": lambda t: [("authorization", f"Bearer {t['expired']}")],
    "not bearer": lambda t: [("authorization", f"Basic {t['ci']}")],
    "twice": lambda t: [("authorization", f"Bearer {t['ci']}"), ("authorization", "Bearer x")],
    "forwarded from loopback": lambda t: [
        ("x-forwarded-for", "127.0.0.1"),
        ("x-real-ip", "127.0.0.1"),
    ],
}


@pytest.mark.parametrize("kind", sorted(BAD))
def test_every_rpc_kind_refuses_a_bad_token(tcpd: TcpDaemon, kind: str) -> None:
    metadata = BAD[kind](tcpd.tokens)
    with tcpd.channel() as ch:
        for name, call in _calls(ch).items():
            with pytest.raises(grpc.RpcError) as info:
                call(metadata)
            err = info.value
            assert err.code() == grpc.StatusCode.UNAUTHENTICATED, (kind, name, err)
            for secret in tcpd.tokens.values():
                assert secret not in (err.details() or ""), (kind, name)
            assert "A" * 43 not in (err.details() or "")


def test_a_good_token_reaches_every_rpc_kind(tcpd: TcpDaemon) -> None:
    good = [("authorization", f"Bearer {tcpd.tokens['notebook']}")]
    with tcpd.channel() as ch:
        calls = _calls(ch)
        assert calls["unary List"](good) is not None
        assert calls["health Check"](good).status == health_pb2.HealthCheckResponse.SERVING
        assert calls["health Watch"](good).status == health_pb2.HealthCheckResponse.SERVING
        for version in ("v1", "v1alpha"):
            (answer,) = calls[f"reflection {version}"](good)
            names = {s.name for s in answer.list_services_response.service}
            assert "txd.v1.Runner" in names
        for name in ("server stream Logs", "unknown method"):
            with pytest.raises(grpc.RpcError) as info:
                calls[name](good)  # past the door: the handler's own answer
            assert info.value.code() in (
                grpc.StatusCode.NOT_FOUND,
                grpc.StatusCode.UNIMPLEMENTED,
            ), (name, info.value)


def test_a_plaintext_client_gets_no_answer(tcpd: TcpDaemon) -> None:
    good = [("authorization", f"Bearer {tcpd.tokens['ci']}")]
    with grpc.insecure_channel(tcpd.address) as ch, pytest.raises(grpc.RpcError) as info:
        health_pb2_grpc.HealthStub(ch).Check(
            health_pb2.HealthCheckRequest(), metadata=good, timeout=5
        )
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE, info.value
    # Byte by byte: HTTP/2's preface in clear gets no HTTP/2 frame back, only TLS's refusal (an
    # alert record, 0x15) or nothing.
    host, _, port = tcpd.address.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        raw.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\0\0\0\4\0\0\0\0\0")
        reply = b""
        with contextlib.suppress(ConnectionError):
            while chunk := raw.recv(4096):
                reply += chunk
    assert reply == b"" or reply[0] == 0x15, reply[:40]


# -- txctl and the Python client --------------------------------------------------------------


def test_txctl_runs_and_follows_a_job_over_tcp_and_the_token_stays_secret(
    tcpd: TcpDaemon,
) -> None:
    token_file = tcpd.token_file("ci")
    secret = tcpd.tokens["ci"]
    gate = tcpd.daemon.root / "gate"
    # line-1, then (at most 60 s) until the test opens the gate, then line-2 and line-3.
    script = (
        f"echo line-1; i=0; while [ ! -e {gate} ] && [ $i -lt 600 ]; do sleep 0.1; "
        "i=$((i+1)); done; echo line-2; echo line-3"
    )
    run = tcpd.txctl("run", "utils.sh", "sh", "-c", script, token_file=token_file)
    assert run.returncode == 0, run.stderr
    handle = run.stdout.strip().splitlines()[-1]
    assert handle.startswith("local_cwd://txd/"), run.stdout

    # `logs -f` follows over TCP; while it does, `ps` shows its command line: no token in it.
    follow = subprocess.Popen(
        [*TXCTL, "--host", tcpd.url, "--token-file", str(token_file), "logs", "-f", handle],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=tcpd.daemon.txctl_env(TXD_CA=str(tcpd.pki.ca)),
    )
    try:
        assert follow.stdout is not None
        assert follow.stdout.readline().split()[-1] == "line-1"
        ps = subprocess.run(
            ["ps", "-ww", "-o", "args=", "-p", str(follow.pid)],
            capture_output=True,
            text=True,
            timeout=10,
        )
        gate.touch()
        out, err = follow.communicate(timeout=TIMEOUT)
    finally:
        gate.touch()
        if follow.poll() is None:
            follow.kill()
            follow.wait()
    assert follow.returncode == 0, err
    assert [line.split()[-1] for line in out.splitlines()] == ["line-2", "line-3"]
    assert "logs -f" in ps.stdout and "--token-file" in ps.stdout, ps.stdout
    assert secret not in ps.stdout

    status = tcpd.txctl("status", "--json", handle, token_file=token_file)
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["state"] == "SUCCEEDED"
    # The same through the token in TXD_TOKEN.
    listed = tcpd.txctl("list", TXD_TOKEN=secret)
    assert listed.returncode == 0 and handle in listed.stdout, listed.stderr

    # The secret is nowhere the daemon writes: its log, the job store, the job's logs.
    state = tcpd.daemon.state_dir
    for path in [tcpd.daemon.log_path, *state.rglob("*")]:
        if path.is_file() and path.name != "tokens.json":
            assert secret.encode() not in path.read_bytes(), path
    store = (state / "tokens.json").read_text()
    assert secret not in store and "last_used" in store
    assert oct((state / "tokens.json").stat().st_mode & 0o777) == "0o600"


def test_txctl_refused_token_exit_3_without_the_token(tcpd: TcpDaemon, tmp_path: Path) -> None:
    wrong = "txd_" + "B" * 43
    proc = tcpd.txctl("list", TXD_TOKEN=wrong)
    assert proc.returncode == 3, proc.stderr
    assert "refused the call" in proc.stderr and "not valid" in proc.stderr
    assert wrong not in proc.stderr + proc.stdout
    expired = tcpd.txctl("list", TXD_TOKEN=tcpd.tokens["expired"])
    assert expired.returncode == 3 and "expired" in expired.stderr, expired.stderr
    none = tcpd.txctl("list")
    assert none.returncode == 2 and "needs a token" in none.stderr, none.stderr
    no_ca = tcpd.txctl("list", TXD_TOKEN=tcpd.tokens["ci"], TXD_CA="")
    assert no_ca.returncode == 3, no_ca.stderr  # a server the system's roots do not trust


def test_revocation_and_new_tokens_count_on_a_running_daemon(tcpd: TcpDaemon) -> None:
    state = str(tcpd.daemon.state_dir)
    doomed = tcpd.token_file("doomed")
    assert tcpd.txctl("list", token_file=doomed).returncode == 0
    txd_cli("token", "revoke", "doomed", "--state-dir", state)
    refused = tcpd.txctl("list", token_file=doomed)
    assert refused.returncode == 3 and "unknown or revoked" in refused.stderr, refused.stderr
    fresh = create_token(tcpd.daemon.state_dir, "fresh", "--expires", "1h")
    assert tcpd.txctl("list", TXD_TOKEN=fresh).returncode == 0
    listing = txd_cli("token", "list", "--json", "--state-dir", state).stdout
    rows = {row["name"]: row for row in json.loads(listing)["tokens"]}
    assert "doomed" not in rows and rows["fresh"]["last_used"] is not None
    assert rows["expired"]["expired"] is True
    text = txd_cli("token", "list", "--state-dir", state).stdout
    assert "fresh" in text and "(expired)" in text
    for secret in (*tcpd.tokens.values(), fresh):
        assert secret not in listing + text
    txd_cli("token", "revoke", "fresh", "--state-dir", state)


# Each Runner method as a `read` token finds it: True if it passes the door. A method the
# proto gains must be added here, which makes its scope a decision.
READ_SCOPE = {
    "Run": False, "DryRun": False, "Status": True, "Wait": True, "Watch": True,
    "Describe": True, "List": True, "Cancel": False, "Delete": False, "Prune": False,
    "Logs": True, "Schedulers": True, "RunOpts": True, "Where": True, "Events": True,
    "Metrics": True,
}  # fmt: skip


def _raw_call(ch: grpc.Channel, method: Any, md: list[tuple[str, str]]) -> grpc.StatusCode:
    """Calls a Runner method with an empty request; the status code it ends with."""
    path = f"/txd.v1.Runner/{method.name}"
    try:
        if method.client_streaming:
            call = ch.stream_stream(path)(iter([b""]), metadata=md, timeout=TIMEOUT)
            next(iter(call))
        elif method.server_streaming:
            next(iter(ch.unary_stream(path)(b"", metadata=md, timeout=TIMEOUT)))
        else:
            ch.unary_unary(path)(b"", metadata=md, timeout=TIMEOUT)
    except grpc.RpcError as e:
        return e.code()
    except StopIteration:  # a stream that ended with no message, but OK
        pass
    return grpc.StatusCode.OK


def test_a_read_token_observes_and_changes_nothing(tcpd: TcpDaemon) -> None:
    state = str(tcpd.daemon.state_dir)
    secret = create_token(tcpd.daemon.state_dir, "watcher", "--scope", "read")
    md = [("authorization", f"Bearer {secret}")]
    methods = pb.DESCRIPTOR.services_by_name["Runner"].methods
    assert sorted(m.name for m in methods) == sorted(READ_SCOPE)
    with tcpd.channel() as ch:
        for method in methods:
            code = _raw_call(ch, method, md)
            denied = code == grpc.StatusCode.PERMISSION_DENIED
            assert denied is not READ_SCOPE[method.name], (method.name, code)
            assert code != grpc.StatusCode.UNAUTHENTICATED, method.name
        assert _calls(ch)["unary List"](md) is not None
        assert _calls(ch)["health Check"](md).status == health_pb2.HealthCheckResponse.SERVING
        with pytest.raises(grpc.RpcError) as info:
            _calls(ch)["unknown method"](md)
        assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
    # txctl: a job run with an `all` token is seen with the read one, not cancelled by it.
    run = tcpd.txctl("run", "utils.sh", "sleep", "600", token_file=tcpd.token_file("ci"))
    assert run.returncode == 0, run.stderr
    handle = run.stdout.split()[0]
    try:
        seen = tcpd.txctl("status", handle, TXD_TOKEN=secret)
        assert seen.returncode == 0 and "RUNNING" in seen.stdout, seen
        refused = tcpd.txctl("cancel", handle, TXD_TOKEN=secret)
        assert refused.returncode == 3, refused
        assert "token 'watcher' has scope 'read'" in refused.stderr and "Cancel" in refused.stderr
        assert secret not in refused.stderr
        assert "RUNNING" in tcpd.txctl("status", handle, TXD_TOKEN=secret).stdout
    finally:
        assert tcpd.txctl("cancel", handle, token_file=tcpd.token_file("ci")).returncode == 0
    listing = json.loads(txd_cli("token", "list", "--json", "--state-dir", state).stdout)
    scopes = {row["name"]: row["scope"] for row in listing["tokens"]}
    assert scopes["watcher"] == "read" and scopes["ci"] == "all"
    table = txd_cli("token", "list", "--state-dir", state).stdout
    assert re.search(r"^watcher\s+read\s", table, re.M), table
    bad = txd_cli("token", "create", "--name", "x", "--scope", "rw", "--state-dir", state, check=2)
    assert "invalid choice: 'rw'" in bad.stderr
    txd_cli("token", "revoke", "watcher", "--state-dir", state)


async def test_python_client_over_tcp(tcpd: TcpDaemon) -> None:
    from txd.client import AsyncClient, UnauthenticatedError

    async with AsyncClient(tcpd.url, token=tcpd.tokens["ci"], ca=tcpd.pki.ca) as c:
        assert isinstance(await c.list(), list)
    async with AsyncClient(tcpd.url, token="txd_nope", ca=tcpd.pki.ca) as c:
        with pytest.raises(UnauthenticatedError):
            await c.list()
    with pytest.raises(ValueError, match="needs a token"):
        AsyncClient(tcpd.url, ca=tcpd.pki.ca)


def test_the_unix_socket_still_needs_no_token(tcpd: TcpDaemon) -> None:
    proc = tcpd.daemon.txctl("list")
    assert proc.returncode == 0, proc.stderr


# -- client certificates ----------------------------------------------------------------------


def test_client_certificate_required(pki: Pki) -> None:
    root = short_tmpdir("txdt-mtls-")
    t = start_tcp_daemon(root, pki, "--client-ca", str(pki.client_ca), names=("ci",))
    good = [("authorization", f"Bearer {t.tokens['ci']}")]
    try:
        for cert in (None, pki.stranger):  # no certificate, or one no CA here signed
            with t.channel(cert) as ch:
                with pytest.raises(grpc.RpcError) as info:
                    RunnerStub(ch).List(pb.ListRequest(), metadata=good, timeout=10)
                assert info.value.code() == grpc.StatusCode.UNAVAILABLE, info.value
        with t.channel(pki.client) as ch:
            assert RunnerStub(ch).List(pb.ListRequest(), metadata=good, timeout=10) is not None
            with pytest.raises(grpc.RpcError) as info:  # the certificate is not a token
                RunnerStub(ch).List(pb.ListRequest(), timeout=10)
            assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
        token_file = t.token_file("ci")
        ok = t.txctl(
            "--client-cert", str(pki.client.cert), "--client-key", str(pki.client.key), "list",
            token_file=token_file,
        )  # fmt: skip
        assert ok.returncode == 0, ok.stderr
        assert t.txctl("list", token_file=token_file).returncode == 3
    finally:
        t.daemon.close()
        log = t.daemon.log()
        remove_tree(root)
    assert not log_alarms(log), log
    assert "client certificates" in log


# -- certificate renewal ----------------------------------------------------------------------


def _install(pair: Pair, cert: Path, key: Path) -> None:
    """As a renewal tool does: each file written aside, then renamed over the old one."""
    for src, dst in ((pair.cert, cert), (pair.key, key)):
        tmp = dst.with_suffix(".new")
        shutil.copyfile(src, tmp)
        tmp.chmod(0o600)
        os.replace(tmp, dst)


def _answers(t: TcpDaemon, ca: Path) -> bool:
    """Whether a new connection trusting only `ca` gets an answer."""
    tls = grpc.ssl_channel_credentials(root_certificates=ca.read_bytes())
    good = [("authorization", f"Bearer {t.tokens['ci']}")]
    with grpc.secure_channel(t.address, tls) as ch:
        try:
            RunnerStub(ch).List(pb.ListRequest(), metadata=good, timeout=10)
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.UNAVAILABLE, e  # the handshake failed
            return False
    return True


def test_a_renewed_certificate_is_served_without_a_restart(pki: Pki) -> None:
    root = short_tmpdir("txdt-renew-")
    (root / "pki2").mkdir()
    renewed = make_pki(root / "pki2")  # another CA: who trusts which tells which is served
    (root / "tls").mkdir()
    cert, key = root / "tls" / "server.pem", root / "tls" / "server.key"
    _install(pki.server, cert, key)
    (root / "d").mkdir()
    t = start_tcp_daemon(root / "d", replace(pki, server=Pair(cert, key)), names=("ci",))
    try:
        assert _answers(t, pki.ca) and not _answers(t, renewed.ca)
        with t.channel() as kept:  # a connection open across the renewal keeps working
            List = RunnerStub(kept).List
            good = [("authorization", f"Bearer {t.tokens['ci']}")]
            List(pb.ListRequest(), metadata=good, timeout=10)
            _install(renewed.server, cert, key)
            assert _answers(t, renewed.ca) and not _answers(t, pki.ca)
            List(pb.ListRequest(), metadata=good, timeout=10)
        assert "TLS certificate reloaded from" in t.daemon.log()
        # A key that does not match the certificate: refused, logged, the renewed one kept.
        shutil.copyfile(pki.server.key, key)
        assert _answers(t, renewed.ca) and not _answers(t, pki.ca)
        assert "TLS files changed but were not loaded" in t.daemon.log()
    finally:
        t.daemon.close()
        log = t.daemon.log()
        remove_tree(root)
    assert not log_alarms(log), log


# -- shutdown ---------------------------------------------------------------------------------


def test_sigterm_ends_open_tcp_streams_and_the_daemon(pki: Pki) -> None:
    from txd.client import Client, TxdError

    root = short_tmpdir("txdt-tcp-stop-")
    t = start_tcp_daemon(root, pki, names=("ci",))
    try:
        with Client(t.url, token=t.tokens["ci"], ca=pki.ca) as c:
            handle = c.run(_sleeper())
            statuses = c.watch(handle)
            next(statuses)  # the stream is open over TCP
            assert t.daemon.stop() == 0  # raises if the daemon did not exit in time
            # The stream ends with the daemon (its last statuses, or an error), never hangs.
            with contextlib.suppress(TxdError):
                for _ in statuses:
                    pass
    finally:
        t.daemon.close()
        log = t.daemon.log()
        remove_tree(root)
    assert not log_alarms(log), log


def _sleeper() -> Any:
    from txd_testing import sh_app

    return sh_app("sleep 60", name="sleeper")


def test_a_port_in_use_is_a_clear_refusal(tcpd: TcpDaemon, pki: Pki, tmp_path: Path) -> None:
    create_token(tmp_path / "state", "ci")
    tls = ("--tls-cert", str(pki.server.cert), "--tls-key", str(pki.server.key))
    proc = _start(tmp_path, "--listen", tcpd.url, *tls)
    assert proc.returncode == 2, proc.stderr
    assert f"cannot listen on {tcpd.url}" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "run" / "txd.sock").exists()  # removed on the way out


# -- resuming over TCP ------------------------------------------------------------------------


@contextlib.contextmanager
def killable_tcp_daemon(pki: Pki, prefix: str) -> Iterator[TcpDaemon]:
    """A TCP daemon of the test's own (it gets killed), started again on the same port."""
    root = short_tmpdir(prefix)
    t = start_tcp_daemon(root, pki, names=("ci",))
    # A restart listens where the clients connect: the port the first start was given.
    t.daemon.args[t.daemon.args.index("tcp://127.0.0.1:0")] = t.url
    try:
        yield t
    finally:
        t.daemon.close()
        remove_tree(root)


def _seq(cursor: str) -> int:
    return int(cursor.rsplit(".", 1)[1])


def _changes(events: list[Any]) -> list[tuple[int, str, int]]:
    kinds = (pb.EventsResponse.Kind.CHANGED, pb.EventsResponse.Kind.DELETED)
    return [
        (_seq(e.cursor), e.status.app_handle, e.status.state) for e in events if e.kind in kinds
    ]


def _stored(d: Daemon, after: int) -> list[tuple[int, str, int]]:
    with contextlib.closing(sqlite3.connect(d.state_dir / "jobs.db")) as db:
        rows = db.execute(
            "SELECT seq, handle, state FROM events WHERE seq > ? ORDER BY seq", (after,)
        )
        return [(r[0], r[1], r[2]) for r in rows]


async def test_python_client_events_resume_over_tcp_across_a_kill_9(
    pki: Pki, tmp_path: Path
) -> None:
    """One events() iterator over TLS with a token rides out a kill -9 and restart of the
    daemon (same state dir, port and token): it carries on from its last cursor, and what it
    yields equals what the store holds, once each."""
    from txd.client import AsyncClient
    from txd.v1 import TERMINAL_STATES

    Kind = pb.EventsResponse.Kind
    with killable_tcp_daemon(pki, "txdt-tcp-resume-") as t, Gates(tmp_path) as gates:
        gate = gates.new("end")
        async with AsyncClient(t.url, token=t.tokens["ci"], ca=pki.ca) as c:
            start = ""
            async for e in c.events(snapshot=True, follow=False, handles=["none://x/none"]):
                start = e.cursor if e.kind == Kind.SYNCED else start
            handles = {await c.run(sh_app(f"{gate.wait}; true")) for _ in range(3)}
            got: list[Any] = []
            pid = t.daemon.pid
            async with asyncio.timeout(TIMEOUT):
                async for e in c.events(since=start):
                    got.append(e)
                    if t.daemon.pid == pid and len(_changes(got)) == 3:  # every job submitted
                        t.daemon.kill()
                        t.daemon.restart()
                        for _ in handles:
                            gate.open()
                    ended = {h for _, h, s in _changes(got) if s in TERMINAL_STATES}
                    if ended >= handles:
                        break
        assert t.daemon.pid != pid, "never killed"
        both = _changes(got)
        assert both == _stored(t.daemon, _seq(start))[: len(both)]
        assert len({s for s, _, _ in both}) == len(both)
        assert "Traceback" not in t.daemon.log()


def test_txctl_wait_resumes_over_tcp_across_a_kill_9(pki: Pki) -> None:
    """`txctl wait` over TLS with a token file rides out a kill -9 and restart: it says it
    reconnects, and prints the status the restarted daemon holds."""
    with killable_tcp_daemon(pki, "txdt-tcp-wait-") as t:
        run = t.txctl("run", "utils.sh", "sleep", "300", token_file=t.token_file("ci"))
        assert run.returncode == 0, run.stderr
        handle = run.stdout.strip().splitlines()[-1]
        wait = subprocess.Popen(
            [*TXCTL, "--host", t.url, "--token-file", str(t.token_file("ci")), "wait", handle],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=t.daemon.txctl_env(TXD_CA=str(pki.ca)),
        )
        try:
            assert wait.stderr is not None
            err: list[str] = []
            for line in wait.stderr:  # ends with txctl; the test's timeout ends the rest
                err.append(line)
                if "RUNNING" in line:  # its Watch is open
                    break
            t.daemon.kill()
            t.daemon.restart()
            out, rest = wait.communicate(timeout=TIMEOUT)
        finally:
            if wait.poll() is None:
                wait.kill()
                wait.wait()
        stderr = "".join(err) + rest
        assert "connection to the daemon lost" in stderr and "reconnected" in stderr, stderr
        final = t.txctl("status", "--json", handle, token_file=t.token_file("ci"))
        state = json.loads(final.stdout)["state"]
        assert state in ("CANCELLED", "FAILED"), final.stdout
        assert f"  state:    {state}\n" in out, out
        assert wait.returncode != 0
