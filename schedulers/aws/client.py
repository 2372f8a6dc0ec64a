"""One AWS connection per scheduler (aioboto3): long-lived clients, counted calls, one backoff.

Every AWS scheduler's settings include `AwsSettings` (region, profile, endpoint_url): they are
the daemon's, never a caller's, and credentials come from the daemon's environment and AWS
configuration as the AWS CLI finds them. `Aws.call` is the only way a scheduler talks to AWS:

- it counts every request it sends in `calls`, by operation (`describe_jobs`, ...): what the
  scheduler's backend_calls reports and what AWS bills against its rate limits;
- throttling (ThrottlingException, TooManyRequestsException, HTTP 429, and the other codes
  botocore treats as throttling) is retried here, with exponential backoff and full jitter,
  at most `tries` times and `cap` seconds a wait, then raised as BackendUnavailable. botocore's
  own retries are off, so this is the one policy, and a test can see it work;
- errors become txd's: an unreachable endpoint or missing credentials BackendUnavailable
  (naming the endpoint), AWS's validation errors InvalidArgument, a missing resource NotFound,
  each with AWS's own message.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections import Counter
from dataclasses import dataclass
from typing import Any

import aioboto3
import aiohttp
from aiobotocore.config import AioConfig
from botocore import exceptions as boto
from txd.schedulers.api import Settings
from txd.schedulers.errors import (
    BackendUnavailable,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
)
from txd.schedulers.options import opt

# Error codes botocore's standard retry mode counts as throttling, and the HTTP status.
THROTTLING_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottledException",
        "TooManyRequestsException",
        "ProvisionedThroughputExceededException",
        "TransactionInProgressException",
        "RequestLimitExceeded",
        "BandwidthLimitExceeded",
        "LimitExceededException",
        "RequestThrottled",
        "SlowDown",
        "PriorRequestNotComplete",
        "EC2ThrottledException",
    }
)
# A request that AWS refused as malformed or invalid: the caller's input is wrong.
INVALID_CODES = frozenset(
    {
        "ClientException",  # Batch: a bad parameter, or a queue or definition that is not there
        "ValidationException",
        "ValidationError",
        "InvalidParameterValue",
        "InvalidParameterValueException",
        "InvalidParameterException",
        "InvalidParameterCombination",
        "MissingParameter",
        "SerializationException",
    }
)
NOT_FOUND_CODES = frozenset(
    {"ResourceNotFoundException", "ResourceNotFound", "NoSuchEntity", "NotFoundException"}
)
# Credentials AWS does not accept: nothing txd asks will be answered until they are fixed.
AUTH_CODES = frozenset(
    {
        "AccessDenied",
        "AccessDeniedException",
        "UnrecognizedClientException",
        "InvalidClientTokenId",
        "InvalidSignatureException",
        "SignatureDoesNotMatch",
        "ExpiredToken",
        "ExpiredTokenException",
        "AuthFailure",
        "MissingAuthenticationToken",
    }
)

TRIES = 5  # requests per call while throttled
BASE = 0.2  # seconds: the first backoff's bound; doubled at each try
CAP = 5.0  # seconds: no backoff waits longer
# Connect fast; a read may take a while (a describe of 100 jobs is a few hundred KiB).
CONNECT_TIMEOUT = 10
READ_TIMEOUT = 60


@dataclass
class AwsSettings(Settings):
    """Where an AWS scheduler's requests go (daemon settings, `[schedulers.NAME]`)."""

    region: str = opt(
        "",
        "the AWS region (default: as the AWS CLI finds it: $AWS_REGION, $AWS_DEFAULT_REGION, "
        "the profile's region)",
    )
    profile: str = opt(
        "", "the AWS profile of txd's credentials (default: $AWS_PROFILE, else the default)"
    )
    endpoint_url: str = opt(
        "", "send every request to this URL instead of AWS's endpoints (a proxy, a test server)"
    )


def error_code(e: boto.ClientError) -> tuple[str, int]:
    """AWS's error code and the HTTP status of a refused request."""
    err = e.response.get("Error") or {}
    meta = e.response.get("ResponseMetadata") or {}
    return str(err.get("Code", "")), int(meta.get("HTTPStatusCode") or 0)


def error_message(e: boto.ClientError) -> str:
    err = e.response.get("Error") or {}
    return " ".join(str(err.get("Message") or err.get("Code") or e).split())


def is_throttling(e: BaseException) -> bool:
    if not isinstance(e, boto.ClientError):
        return False
    code, http = error_code(e)
    return code in THROTTLING_CODES or http == 429


# Calls that are safe to repeat when AWS failed them (HTTP 5xx) without saying whether they
# took effect: reads, and a job definition registered twice is one spare revision. A second
# submit_job or create_training_job could start the job twice: those fail instead.
_REPEATABLE = ("describe_", "get_", "list_", "search", "register_job_definition")


def is_transient(e: BaseException, op: str) -> bool:
    """Throttling, or a repeatable call that AWS failed (HTTP 5xx): worth another try."""
    if is_throttling(e):
        return True
    return (
        isinstance(e, boto.ClientError) and error_code(e)[1] >= 500 and op.startswith(_REPEATABLE)
    )


class Aws:
    """The AWS connection of one scheduler (`name`, for messages): one aioboto3 Session, one
    client per service opened on first use and closed by aclose, and `calls` by operation."""

    def __init__(self, settings: AwsSettings, name: str) -> None:
        self.settings = settings
        self.name = name
        self.calls: Counter[str] = Counter()
        self.tries = TRIES
        self.base = BASE
        self.cap = CAP
        self._session: aioboto3.Session | None = None
        self._clients: dict[str, Any] = {}
        self._stack = contextlib.AsyncExitStack()
        self._lock = asyncio.Lock()
        self._config = AioConfig(
            retries={"total_max_attempts": 1, "mode": "standard"},  # no retry: see `call`
            connect_timeout=CONNECT_TIMEOUT,
            read_timeout=READ_TIMEOUT,
        )

    @property
    def endpoint(self) -> str:
        """Where requests go, for messages."""
        if self.settings.endpoint_url:
            return self.settings.endpoint_url
        return f"AWS ({self.settings.region or 'default region'})"

    def _new_session(self) -> aioboto3.Session:
        try:
            return aioboto3.Session(
                profile_name=self.settings.profile or None,
                region_name=self.settings.region or None,
            )
        except boto.ProfileNotFound as e:
            raise FailedPrecondition(
                f"{self.name}: AWS profile {self.settings.profile!r} not found ({e}): "
                f"set [schedulers.{self.name}] profile to one in ~/.aws/config"
            ) from None

    def region(self) -> str:
        """The region requests go to, as the AWS CLI finds it ("" for none); no request."""
        if self._session is None:
            self._session = self._new_session()
        return str(self._session.region_name or "")

    async def readiness(self) -> str:
        """Why requests could not be sent now: no region, no credentials (as the AWS CLI finds
        them; nothing is sent, and whether AWS takes them is not known). "" when both are
        there."""
        if self._session is None:
            self._session = self._new_session()
        if not self._session.region_name:
            return (
                f"no AWS region: set [schedulers.{self.name}] region, or AWS_REGION in txd's "
                "environment"
            )
        if await self._session.get_credentials() is None:
            return (
                "no AWS credentials: none in txd's environment, ~/.aws or an instance role "
                "(as the AWS CLI looks)"
            )
        return ""

    async def client(self, service: str) -> Any:
        """The service's client (aiobotocore), opened on first use and kept until aclose."""
        if (c := self._clients.get(service)) is not None:
            return c
        async with self._lock:
            if (c := self._clients.get(service)) is not None:
                return c
            if self._session is None:
                self._session = self._new_session()
            kw: dict[str, Any] = {"config": self._config}
            if self.settings.endpoint_url:
                kw["endpoint_url"] = self.settings.endpoint_url
            try:
                c = await self._stack.enter_async_context(self._session.client(service, **kw))
            except boto.NoRegionError:
                raise FailedPrecondition(
                    f"{self.name}: no AWS region: set [schedulers.{self.name}] region, or "
                    "AWS_REGION in txd's environment"
                ) from None
            self._clients[service] = c
            return c

    async def call(self, client: Any, op: str, *, field: str = "app", **kw: Any) -> Any:
        """`client.<op>(**kw)`'s response, counted, retried while throttled (and after an
        AWS failure, for a call safe to repeat: is_transient). Raises
        BackendUnavailable (unreachable, throttled past the retries, credentials refused,
        AWS failing), InvalidArgument (`field`: what the request was built from) for a request
        AWS refused as invalid, NotFound for a missing resource, FailedPrecondition otherwise."""
        method = getattr(client, op)
        for attempt in range(self.tries):
            self.calls[op] += 1
            try:
                return await method(**kw)
            except boto.ClientError as e:
                if is_transient(e, op) and attempt + 1 < self.tries:
                    await asyncio.sleep(self.backoff(attempt))
                    continue
                raise self._mapped(op, e, field) from e
            except (boto.ConnectionError, boto.HTTPClientError, aiohttp.ClientError) as e:
                raise BackendUnavailable(
                    f"{self.name}: cannot reach {self.endpoint_of(client)}: {e}"
                ) from e
            except (boto.NoCredentialsError, boto.PartialCredentialsError) as e:
                raise BackendUnavailable(f"{self.name}: no usable AWS credentials: {e}") from e
            except boto.CredentialRetrievalError as e:
                raise BackendUnavailable(f"{self.name}: {e}") from e
            except boto.ParamValidationError as e:
                raise InvalidArgument(field, f"{op}: {' '.join(str(e).split())}") from e
        raise AssertionError("unreachable: the last try returns or raises")

    def backoff(self, attempt: int) -> float:
        """Full jitter: a random wait up to base * 2^attempt, at most cap."""
        return random.uniform(0, min(self.cap, self.base * 2**attempt))

    def endpoint_of(self, client: Any) -> str:
        url = getattr(getattr(client, "meta", None), "endpoint_url", "")
        return str(url or self.endpoint)

    def _mapped(self, op: str, e: boto.ClientError, field: str) -> Exception:
        code, http = error_code(e)
        msg = f"{op}: {error_message(e)}"
        if code in THROTTLING_CODES or http == 429:
            return BackendUnavailable(
                f"{self.name}: AWS is throttling txd ({code or http}) after {self.tries} tries: "
                f"{msg}"
            )
        if code in AUTH_CODES:
            return BackendUnavailable(f"{self.name}: AWS refused txd's credentials ({code}): {msg}")
        if http >= 500 or http == 0:
            return BackendUnavailable(f"{self.name}: AWS failed ({code or http}): {msg}")
        if code in NOT_FOUND_CODES or http == 404:
            return NotFound(msg)
        if code in INVALID_CODES:
            return InvalidArgument(field, msg)
        return FailedPrecondition(f"{msg} ({code})")

    async def aclose(self) -> None:
        """Closes every client. Safe to call twice; never raises."""
        self._clients.clear()
        with contextlib.suppress(Exception):
            await self._stack.aclose()
        self._stack = contextlib.AsyncExitStack()
