"""txctl's exit codes, one per cause, and how a failed call maps onto them.

Standard library only: `txctl --help` prints TABLE without importing gRPC.
"""

from __future__ import annotations

from typing import Any

OK = 0
JOB_FAILED = 1  # the job ended other than SUCCEEDED (run --wait/--log, wait)
BAD_REQUEST = 2  # usage, unknown handle or scheduler, invalid app or option, component error
# no daemon answers on the socket (or it is shutting down, or refused the token or its scope)
NO_DAEMON = 3
BACKEND = 4  # the daemon answered; the scheduler's backend (its commands, login node) did not
DEADLINE = 5  # the call's --timeout ran out
EXHAUSTED = 6  # the daemon refused for want of a resource (e.g. a message over its size limit)
WAIT_TIMEOUT = 7  # --wait-timeout ran out; the job goes on
# `logs`: a replica's log could not be read (stderr says which); the rest was.
# `describe --native`: txd kept no native request for the job (stderr says why)
INCOMPLETE = 8
INTERNAL = 70  # a bug in txctl or txd (TXD_DEBUG=1 shows the traceback)
INTERRUPTED = 130  # Ctrl-C

TABLE = f"""\
exit codes:
  {OK:<3}  ok
  {JOB_FAILED:<3}  the job did not succeed (run --wait/--log, wait)
  {BAD_REQUEST:<3}  bad request: usage, unknown handle or scheduler, invalid app or option,
       an error in a component (its own exceptions included)
  {NO_DAEMON:<3}  no daemon answers on the socket (or it is shutting down); a tcp://
       daemon refused the token, or the call for the token's scope
  {BACKEND:<3}  the daemon answered but the scheduler's backend did not (a missing
       command, an unconfigured cluster, an unreachable login node)
  {DEADLINE:<3}  the call took longer than --timeout
  {EXHAUSTED:<3}  the daemon refused for want of a resource (e.g. a request over its
       message size limit)
  {WAIT_TIMEOUT:<3}  --wait-timeout ran out; the job goes on
  {INCOMPLETE:<3}  logs: a replica's log could not be read (its container was removed
       outside txd; stderr says which): the other replicas' logs were printed;
       describe --native: txd kept no native request for the job (stderr says why)
  {INTERNAL:<3}  internal error: a bug (TXD_DEBUG=1 prints the traceback)
  {INTERRUPTED:<3}  interrupted (Ctrl-C); the job goes on unless --cancel-on-interrupt
"""

# gRPC status code names (a TxdError's `code`) -> exit code; any other code is a bad request.
_BY_CODE = {
    "UNAVAILABLE": NO_DAEMON,
    "UNAUTHENTICATED": NO_DAEMON,
    "PERMISSION_DENIED": NO_DAEMON,
    "DEADLINE_EXCEEDED": DEADLINE,
    "RESOURCE_EXHAUSTED": EXHAUSTED,
    "INTERNAL": INTERNAL,
}


def for_error(err: Any, *, socket_path: str, timeout: float) -> tuple[str, int]:
    """(one line for stderr, exit code) for a txd.client TxdError raised by a call."""
    backend = getattr(err, "backend", "")
    if backend:  # BackendUnavailableError: the daemon answered for its backend
        return f"{backend} backend unavailable: {err.message}", BACKEND
    code = _BY_CODE.get(err.code, BAD_REQUEST)
    if err.code in ("UNAUTHENTICATED", "PERMISSION_DENIED"):
        return f"{socket_path} refused the call: {err.message}", code
    if code == NO_DAEMON:
        return f"{err.message} (daemon socket {socket_path})", code
    if code == DEADLINE:
        return f"no answer within --timeout {timeout:g} s ({err.message})", code
    if code == EXHAUSTED:
        return f"the daemon refused the request: {err.message}", code
    return err.message, code
