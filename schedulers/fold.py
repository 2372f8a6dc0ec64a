"""From replicas to an app: the one rule every scheduler uses to fold replica states into the
app's state, the one way replicas are grouped into roles, and the AppStatus made of both."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from txd.v1 import TERMINAL_STATES, AppState
from txd.v1.app_pb2 import AppStatus, ReplicaStatus, RoleStatus

# While any replica lives, the first of these present names the app's state.
_LIVE_ORDER = (AppState.RUNNING, AppState.UNKNOWN, AppState.PENDING, AppState.SUBMITTED)
# Once every replica has ended, the first of these present names the app's state.
_FINAL_ORDER = (AppState.FAILED, AppState.CANCELLED, AppState.SUCCEEDED)


def fold(states: Sequence[AppState]) -> AppState:
    """The app's state from its replicas' states.

    An app is terminal only when every replica is: then FAILED if any replica failed, else
    CANCELLED if any was cancelled, else SUCCEEDED. While any replica lives, the app is RUNNING
    if any replica runs, else UNKNOWN if any is unknown, else PENDING if any is pending, else
    SUBMITTED. No replicas at all: UNKNOWN.

    A backend that fails fast (one failed replica ends the app) must stop the surviving
    replicas itself; the app becomes FAILED once they have ended, never before, so a job
    reported terminal has nothing left running.
    """
    if not states:
        return AppState.UNKNOWN
    present = set(states)
    order = _FINAL_ORDER if present <= TERMINAL_STATES else _LIVE_ORDER
    for state in order:
        if state in present:
            return state
    return AppState.SUBMITTED  # only UNSUBMITTED replicas among the live ones


def group_replicas(replicas: Iterable[ReplicaStatus]) -> list[RoleStatus]:
    """One RoleStatus per role, in order of the role's first replica."""
    roles: dict[str, RoleStatus] = {}
    for rep in replicas:
        if rep.role not in roles:
            roles[rep.role] = RoleStatus(role=rep.role)
        roles[rep.role].replicas.append(rep)
    return list(roles.values())


def replica_states(roles: Iterable[RoleStatus]) -> list[AppState]:
    return [r.state for role in roles for r in role.replicas]


def app_status(
    app_id: str,
    replicas: Sequence[ReplicaStatus],
    *,
    state: AppState | None = None,
    msg: str = "",
) -> AppStatus:
    """The app's status from its replicas: their fold, unless the backend has the last word on
    the app's state (`state`: a controller's phase, say), and the replicas grouped into roles."""
    return AppStatus(
        app_id=app_id,
        state=fold([r.state for r in replicas]) if state is None else state,
        msg=msg,
        roles=group_replicas(replicas),
    )
