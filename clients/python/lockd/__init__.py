"""lockd client for Python (asyncio, standard library only).

    import lockd

    async with lockd.connect("127.0.0.1:7400") as client:
        async with client.lock("jobs/nightly", lease_ms=10_000, wait_ms=30_000) as lock:
            write_with_fence(data, lock.token)   # check lock.lost before acting

The protocol is documented in docs/protocol.md of the lockd repository; this client follows
its "Writing a client" section. ``lockd.sync`` wraps the same client for threaded code.
"""

from ._client import (
    CONNECT_TIMEOUT_MS_CLUSTER_DEFAULT,
    CONNECT_TIMEOUT_MS_DEFAULT,
    VERSION,
    Client,
    Holder,
    Lock,
    LockState,
    LostEvent,
    Observer,
    backoff_delay_ms,
    bound_client_name,
    compose_client_name,
    connect,
    default_client_name,
    lease_margin_ms,
    local_deadline_ms,
    parse_addr,
    tls_context,
)
from .errors import (
    ERROR_CLASSES,
    LOST_REASONS,
    AclDeniedError,
    AcquireCancelledError,
    AuditUnavailableError,
    ClaimVoidError,
    ClosedByAdminError,
    ConnectTimeoutError,
    DuplicateClaimError,
    HandshakeTimeoutError,
    InvalidArgumentError,
    IoTimeoutError,
    LeaseExpiredError,
    LimitExceededError,
    LockdConnectionError,
    LockdError,
    LockLostError,
    MalformedFrameError,
    NotLeaderError,
    NotOwnerError,
    ServerProtocolError,
    ShuttingDownError,
    TokensUnavailableError,
    UnsupportedVersionError,
    WaitTimeoutError,
)

__version__ = VERSION

__all__ = [
    "CONNECT_TIMEOUT_MS_CLUSTER_DEFAULT",
    "CONNECT_TIMEOUT_MS_DEFAULT",
    "ERROR_CLASSES",
    "LOST_REASONS",
    "VERSION",
    "AclDeniedError",
    "AcquireCancelledError",
    "AuditUnavailableError",
    "ClaimVoidError",
    "Client",
    "ClosedByAdminError",
    "Holder",
    "ConnectTimeoutError",
    "DuplicateClaimError",
    "HandshakeTimeoutError",
    "InvalidArgumentError",
    "IoTimeoutError",
    "LeaseExpiredError",
    "LimitExceededError",
    "Lock",
    "LockLostError",
    "LockState",
    "LockdConnectionError",
    "LockdError",
    "LostEvent",
    "MalformedFrameError",
    "NotLeaderError",
    "NotOwnerError",
    "Observer",
    "ServerProtocolError",
    "ShuttingDownError",
    "TokensUnavailableError",
    "UnsupportedVersionError",
    "WaitTimeoutError",
    "backoff_delay_ms",
    "bound_client_name",
    "compose_client_name",
    "connect",
    "default_client_name",
    "lease_margin_ms",
    "local_deadline_ms",
    "parse_addr",
    "tls_context",
]
