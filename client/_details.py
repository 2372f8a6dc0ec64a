"""The rich error details of a failed call: google.rpc.Status from the `grpc-status-details-bin`
trailer. Imported only once an error's details are asked for, so a call that succeeds never
loads the google.rpc messages."""

from __future__ import annotations

from google.rpc import error_details_pb2, status_pb2


def field_violations(details: bytes) -> list[tuple[str, str]]:
    """(field path, description) of every google.rpc.BadRequest field violation in the
    serialized google.rpc.Status `details`; [] when there is none."""
    status = status_pb2.Status.FromString(details)
    out: list[tuple[str, str]] = []
    for detail in status.details:
        bad = error_details_pb2.BadRequest()
        if detail.Unpack(bad):
            out.extend((v.field, v.description) for v in bad.field_violations)
    return out
