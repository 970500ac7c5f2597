"""Exceptions of the lockd client.

``LockdError`` and its subclasses carry a wire ERROR code (docs/protocol.md, "Error codes"):
``code``, ``code_name`` and ``retryable`` (whether trying the same thing again later may
succeed). ``LockdConnectionError`` is raised when the server cannot be reached or the client
is closed; ``LockLostError`` describes why an owned lock was lost.
"""

from __future__ import annotations


class LockdError(Exception):
    """A request failed with a wire ERROR code."""

    #: Wire code, e.g. 0x07; overridden by each subclass.
    code: int = 0
    #: Wire code name, e.g. "WAIT_TIMEOUT".
    code_name: str = "UNKNOWN"
    #: Whether trying again later may succeed.
    retryable: bool = False

    def __init__(self, message: str, *, lock_name: str = "", code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        #: The lock the error is about ("" when none).
        self.lock_name = lock_name
        if code is not None and code != type(self).code:
            self.code = code

    @staticmethod
    def from_wire(code: int, lock_name: str, message: str) -> LockdError:
        """The exception for a wire ERROR: the subclass of that code, or LockdError for an unknown one."""
        cls = _BY_CODE.get(code)
        if cls is None:
            return LockdError(message, lock_name=lock_name, code=code)
        return cls(message, lock_name=lock_name)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code=0x{self.code:02x}, lock_name={self.lock_name!r}, message={self.message!r})"


# The table of docs/protocol.md "Error codes"; tests check code, name and retryable against the doc.


class MalformedFrameError(LockdError):
    """0x01 MALFORMED_FRAME: A frame could not be parsed (a client bug or a corrupting middlebox)."""

    code = 0x01
    code_name = "MALFORMED_FRAME"
    retryable = False


class ClosedByAdminError(LockdError):
    """0x02 CLOSED_BY_ADMIN: An operator force-released an ownership or removed a waiter of this session."""

    code = 0x02
    code_name = "CLOSED_BY_ADMIN"
    retryable = True


class UnsupportedVersionError(LockdError):
    """0x03 UNSUPPORTED_VERSION: The server does not speak this protocol version."""

    code = 0x03
    code_name = "UNSUPPORTED_VERSION"
    retryable = False


class AclDeniedError(LockdError):
    """0x04 ACL_DENIED: The ACL does not allow this identity to acquire this lock."""

    code = 0x04
    code_name = "ACL_DENIED"
    retryable = False


class LeaseExpiredError(LockdError):
    """0x05 LEASE_EXPIRED: An ownership ended because its lease ran out."""

    code = 0x05
    code_name = "LEASE_EXPIRED"
    retryable = True


class NotOwnerError(LockdError):
    """0x06 NOT_OWNER: RELEASE named a lock this session does not own with that token."""

    code = 0x06
    code_name = "NOT_OWNER"
    retryable = False


class WaitTimeoutError(LockdError):
    """0x07 WAIT_TIMEOUT: The lock was not granted within the wait bound (at once, for a try-lock)."""

    code = 0x07
    code_name = "WAIT_TIMEOUT"
    retryable = True


class DuplicateClaimError(LockdError):
    """0x08 DUPLICATE_CLAIM: This session already owns or waits for the lock."""

    code = 0x08
    code_name = "DUPLICATE_CLAIM"
    retryable = False


class LimitExceededError(LockdError):
    """0x09 LIMIT_EXCEEDED: A server limit was reached (sessions, claims per session, waiters per lock)."""

    code = 0x09
    code_name = "LIMIT_EXCEEDED"
    retryable = True


class ShuttingDownError(LockdError):
    """0x0a SHUTTING_DOWN: The server is shutting down."""

    code = 0x0a
    code_name = "SHUTTING_DOWN"
    retryable = True


class InvalidArgumentError(LockdError):
    """0x0b INVALID_ARGUMENT: A field is out of range: a bad lock name, a client name over 256 bytes."""

    code = 0x0b
    code_name = "INVALID_ARGUMENT"
    retryable = False


class AuditUnavailableError(LockdError):
    """0x0c AUDIT_UNAVAILABLE: The audit log cannot be written, so no new ownership is granted until it can."""

    code = 0x0c
    code_name = "AUDIT_UNAVAILABLE"
    retryable = True


class HandshakeTimeoutError(LockdError):
    """0x0d HANDSHAKE_TIMEOUT: No HELLO arrived within the handshake timeout."""

    code = 0x0d
    code_name = "HANDSHAKE_TIMEOUT"
    retryable = True


class IoTimeoutError(LockdError):
    """0x0e IO_TIMEOUT: The session sent nothing for the I/O timeout and was closed."""

    code = 0x0e
    code_name = "IO_TIMEOUT"
    retryable = True


class AcquireCancelledError(LockdError):
    """0x0f CANCELLED: The waiting ACQUIRE was cancelled by the client's own RELEASE."""

    code = 0x0f
    code_name = "CANCELLED"
    retryable = False


class TokensUnavailableError(LockdError):
    """0x10 TOKENS_UNAVAILABLE: No fencing token could be reserved (the server's token file cannot be written); the server retries by itself."""

    code = 0x10
    code_name = "TOKENS_UNAVAILABLE"
    retryable = True


class NotLeaderError(LockdError):
    """0x11 NOT_LEADER: cluster mode: this node does not serve; ``leader`` is the leader's advertised host:port ("" while none is known)."""

    code = 0x11
    code_name = "NOT_LEADER"
    retryable = True

    @property
    def leader(self) -> str:
        """The leader's address the node named (the ERROR's name field), or ""."""
        return self.lock_name


class ClaimVoidError(LockdError):
    """0x12 CLAIM_VOID: protocol version 2: a reclaimed claim could not be carried over to the new leader."""

    code = 0x12
    code_name = "CLAIM_VOID"
    retryable = False


_BY_CODE: dict[int, type[LockdError]] = {
    cls.code: cls
    for cls in (
        MalformedFrameError,
        ClosedByAdminError,
        UnsupportedVersionError,
        AclDeniedError,
        LeaseExpiredError,
        NotOwnerError,
        WaitTimeoutError,
        DuplicateClaimError,
        LimitExceededError,
        ShuttingDownError,
        InvalidArgumentError,
        AuditUnavailableError,
        HandshakeTimeoutError,
        IoTimeoutError,
        AcquireCancelledError,
        TokensUnavailableError,
        NotLeaderError,
        ClaimVoidError,
    )
}

#: Every error class by wire code.
ERROR_CLASSES: dict[int, type[LockdError]] = dict(_BY_CODE)


class LockdConnectionError(ConnectionError):
    """The server could not be reached (dial, TLS, handshake), or the client is closed."""

    def __init__(self, message: str, *, retryable: bool = True) -> None:
        super().__init__(message)
        #: Whether trying to connect again later may succeed.
        self.retryable = retryable


class ConnectTimeoutError(LockdConnectionError, TimeoutError):
    """Dial, TLS handshake and HELLO/WELCOME did not finish within ``connect_timeout_ms``."""


class ServerProtocolError(LockdConnectionError):
    """The server broke the protocol: a reply that does not fit the request it names (an unknown
    request id, another lock's name, a reply of the wrong type), a WELCOME outside the documented
    bounds, a frame that does not parse, a NOT_LEADER naming something that is not an address.

    The client closes that connection (owned locks report ``lost``, waiting acquires move to the
    next connection), counts it (``client.protocol_errors``) and reports it (``on_protocol_error``
    and the ``lockd`` logger); a ``connect()`` that meets one on every node raises it.
    """

    def __init__(self, addr: str, what: str) -> None:
        super().__init__(f"lockd at {addr} broke the protocol: {what}; the connection was closed")
        #: The node (``host:port``) that broke the protocol.
        self.addr = addr


#: Why an owned lock was lost; the same strings in every lockd client (docs/protocol.md, "Lost reasons").
LOST_REASONS = ("expired", "force", "io_timeout", "disconnected", "lease_unconfirmed", "failover")

_LOSS_TEXT = {
    "expired": "its lease expired",
    "force": "an operator force-released it",
    "io_timeout": "the server timed the session out",
    "disconnected": "the connection to the server was lost",
    "lease_unconfirmed": "no heartbeat was acknowledged in time to be sure the lease still runs",
    "failover": "the cluster's leader changed and the lock could not be carried over to the new one (fail-over)",
}


class LockLostError(Exception):
    """Why an owned lock was lost: ``reason`` is one of ``LOST_REASONS``."""

    def __init__(self, lock_name: str, token: int, reason: str) -> None:
        super().__init__(f'Lost lock "{lock_name}" (token {token}): {_LOSS_TEXT.get(reason, reason)}')
        self.lock_name = lock_name
        self.token = token
        self.reason = reason
