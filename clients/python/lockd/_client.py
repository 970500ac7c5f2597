"""The asyncio lockd client, built from docs/protocol.md ("Writing a client").

One ``Client`` holds one connection (a session) at a time. Requests in flight are kept by
request id, because replies do not come in request order. Each owned lock has a local lease
deadline on the event loop's monotonic clock; heartbeats keep it moving. When the connection
ends, owned locks are lost and waiting acquires are re-sent on the next connection, which is
dialled after a full-jitter back-off.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import re
import socket
import ssl
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from . import _codec as wire
from ._checks import (
    ReplyLedger,
    cut_utf8,
    node_key,
    redirect_verdict,
    refused_redirect_text,
    welcome_out_of_bounds,
)
from .errors import (
    ClosedByAdminError,
    ConnectTimeoutError,
    InvalidArgumentError,
    IoTimeoutError,
    LeaseExpiredError,
    LockdConnectionError,
    LockdError,
    LockLostError,
    NotLeaderError,
    ServerProtocolError,
    UnsupportedVersionError,
    WaitTimeoutError,
)

__all__ = [
    "Client",
    "Lock",
    "LostEvent",
    "backoff_delay_ms",
    "bound_client_name",
    "connect",
    "default_client_name",
    "parse_addr",
]

VERSION = "0.1.0"
#: Dial + TLS + HELLO/WELCOME bound (docs/protocol.md, "Connection states").
CONNECT_TIMEOUT_MS_DEFAULT = 5_000
#: Full-jitter back-off bounds (docs/protocol.md, "Reconnecting").
RECONNECT_BACKOFF_MS_MIN = 50
RECONNECT_BACKOFF_MS_MAX = 5_000
#: The server's shortest lease (leases are clamped to [50, leaseMaxMs]).
LEASE_MS_MIN = 50
#: With several cluster nodes, a connection silent this long (heartbeats unanswered) is left.
CLUSTER_SILENCE_MS = 3_000
#: The server refuses a HELLO whose client name is longer (docs/protocol.md, "Lock names").
CLIENT_NAME_BYTES_MAX = 256

#: Codes that always end the session (docs/protocol.md, "Error codes": "closes connection").
_CLOSING = frozenset((0x01, 0x02, 0x03, 0x0A, 0x0D, 0x0E, 0x11))

logger = logging.getLogger("lockd")
logger.addHandler(logging.NullHandler())  # the application decides where lockd's log goes


def parse_addr(addr: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port`` to (host, port)."""
    if addr.startswith("["):
        host, sep, rest = addr[1:].partition("]:")
        if not sep:
            raise ValueError(f'Cannot parse address "{addr}": want [host]:port')
    else:
        host, sep, rest = addr.rpartition(":")
        if not sep or ":" in host:
            raise ValueError(f'Cannot parse address "{addr}": want host:port or [v6]:port')
    if not rest.isdigit() or not 0 < int(rest) < 65536:
        raise ValueError(f'Cannot parse address "{addr}": bad port "{rest}"')
    return host, int(rest)


def bound_client_name(name: str) -> str:
    """A client name that fits HELLO: at most 256 UTF-8 bytes, cut between two characters and
    marked with "…" when cut (a lone surrogate, which UTF-8 cannot carry, becomes U+FFFD)."""
    clean = "".join("\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c for c in name)
    return cut_utf8(clean, CLIENT_NAME_BYTES_MAX)


def compose_client_name(program: str, host: str, pid: int | None) -> str:
    """``<program>@<host>:<pid>`` within 256 bytes (the host is what gets cut); ``<program>:<pid>`` without a host."""
    tail = "" if pid is None else f":{pid}"
    if not host:
        return bound_client_name(program + tail)
    room = CLIENT_NAME_BYTES_MAX - len(f"{program}@".encode()) - len(tail.encode())
    return bound_client_name(f"{program}@{cut_utf8(host, room) if room > 3 else host}{tail}")


def default_client_name(program: str = f"lockd-python/{VERSION}") -> str:
    """The client name sent when none is given: ``lockd-python/<version>@<host>:<pid>``, so the
    admin API and the audit log say which host and process hold a lock, even without mTLS."""
    try:
        host = socket.gethostname()
    except OSError:
        host = ""
    return compose_client_name(program, host, os.getpid())


def backoff_delay_ms(attempt: int, rng: Callable[[], float] | None = None) -> float:
    """Full jitter: ``random(0, min(5000, 50 * 2^attempt))``; ``attempt`` counts failures since the last WELCOME."""
    cap = min(RECONNECT_BACKOFF_MS_MAX, RECONNECT_BACKOFF_MS_MIN * 2 ** min(attempt, 16))
    return (rng or random.random)() * cap


def lease_margin_ms(lease_ms: float) -> float:
    """``max(lease / 10, min(50, lease / 4))`` (docs/protocol.md, "The local lease deadline")."""
    return max(lease_ms / 10, min(50, lease_ms / 4))


def local_deadline_ms(confirmed_send_ms: float, lease_ms: float, io_timeout_ms: float) -> float:
    """When an ownership stops being safe to use, on the client's monotonic clock.

    The server ends it no earlier than the confirmed send time plus the lease (it processed the
    request after it was sent) and no earlier than that time plus its I/O timeout (it heard the
    request): whichever bound is shorter, minus the margin of that bound.
    """
    bound_ms = min(lease_ms, io_timeout_ms)
    return confirmed_send_ms + bound_ms - lease_margin_ms(bound_ms)


class LostEvent(asyncio.Event):
    """``lock.lost``: set once when ownership ends without ``release()``; ``reason`` says why.

    ``is_set()`` first compares the lock's local lease deadline with the clock, so the first look
    after a pause (a long GC, SIGSTOP, a blocked event loop) already says lost, before the timer
    that sets the event has run.
    """

    def __init__(self, probe: Callable[[], None] | None = None) -> None:
        super().__init__()
        #: One of ``lockd.LOST_REASONS`` once set, else None.
        self.reason: str | None = None
        #: The ``LockLostError`` describing the loss once set, else None.
        self.error: LockLostError | None = None
        self._probe = probe

    def is_set(self) -> bool:
        if not super().is_set() and self._probe is not None:
            self._probe()
        return super().is_set()


class Lock:
    """An owned lock. ``token`` is the fencing token: pass it to the guarded resource."""

    def __init__(self, client: Client, session: _Session, name: str, token: int, lease_ms: int, acquire_id: int) -> None:
        self._client = client
        self._session = session
        #: The lock's name.
        self.name = name
        #: The fencing token, larger than every token issued before (about 1.8e15).
        self.token = token
        #: The effective lease in ms, after the server's clamping.
        self.lease_ms = lease_ms
        self._lost = LostEvent(self._probe)
        self._acquire_id = acquire_id
        self._released = False
        self._confirmed_send_ms = 0.0
        self._deadline_handle: asyncio.TimerHandle | None = None
        self._lost_callbacks: list[Callable[[str], None]] = []
        self._release_future: asyncio.Future[None] | None = None

    @property
    def lost(self) -> LostEvent:
        """Set when ownership ends without ``release()``; ``lost.reason`` says why. Reading it (and
        ``lost.is_set()``) checks the local lease deadline against the clock first."""
        self._probe()
        return self._lost

    @property
    def state(self) -> str:
        """``"held"``, ``"releasing"`` (release() called, no answer yet), ``"released"`` or ``"lost"``;
        like ``lost``, checked against the local lease deadline when read."""
        self._probe()
        if self._lost._value:  # type: ignore[attr-defined]
            return "lost"
        if self._released:
            future = self._release_future
            return "releasing" if future is not None and not future.done() else "released"
        return "held"

    @property
    def deadline_ms(self) -> float:
        """The local lease deadline on the event loop clock (ms); past it the lock counts as lost."""
        return local_deadline_ms(self._confirmed_send_ms, self.lease_ms, self._session.welcome.io_timeout_ms)

    def check(self) -> None:
        """Raises ``LockLostError`` when the lock was lost; call it before acting on the lock."""
        if self.lost.error is not None:
            raise self.lost.error
        if self._released:
            raise LockdError(f'Lock "{self.name}" was released')

    async def release(self) -> None:
        """Ends the ownership. Returns quietly when the lock was already lost or released."""
        if self._released or self.lost.is_set():
            return
        self._released = True
        await self._client._release(self)

    def add_lost_callback(self, callback: Callable[[str], None]) -> None:
        """Calls ``callback(reason)`` on the event loop when the lock is lost (at once if it is)."""
        if self.lost.reason is not None:
            callback(self.lost.reason)
        else:
            self._lost_callbacks.append(callback)

    async def __aenter__(self) -> Lock:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.release()

    def __repr__(self) -> str:
        lost = self._lost
        state = "released" if self._released else f"lost:{lost.reason}" if lost.reason is not None else "owned"
        return f"<Lock {self.name!r} token={self.token} lease_ms={self.lease_ms} {state}>"

    # -- internals ----------------------------------------------------------

    def _probe(self) -> None:
        """The deadline, read against the clock now (only on the client's own event loop)."""
        if self._lost.reason is None and self._session.owned.get(self._acquire_id) is self:
            self._client._check_deadline(self)

    def _arm_deadline(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._deadline_handle is not None:
            self._deadline_handle.cancel()
        delay_s = max(0.0, (self.deadline_ms - _now_ms(loop)) / 1000)
        self._deadline_handle = loop.call_later(delay_s, self._client._deadline_passed, self)

    def _mark_lost(self, reason: str) -> None:
        if self._deadline_handle is not None:
            self._deadline_handle.cancel()
            self._deadline_handle = None
        lost = self._lost
        if self._released or lost.reason is not None:
            return
        lost.reason = reason
        lost.error = LockLostError(self.name, self.token, reason)
        lost.set()
        callbacks, self._lost_callbacks = self._lost_callbacks, []
        for callback in callbacks:
            try:
                callback(reason)
            except Exception:  # a caller's callback must not break the client
                logger.exception("lost callback of lock %r failed", self.name)


@dataclass(eq=False)
class _PendingAcquire:
    name: str
    lease_ms: int
    deadline_ms: float | None  # loop clock; None = wait forever
    wait_ms: float | None
    future: asyncio.Future[Lock]
    request_id: int = 0
    sent_ms: float = 0.0
    abandoned: bool = False
    wait_handle: asyncio.TimerHandle | None = None


@dataclass(eq=False)
class _Session:
    """One connection after its WELCOME, with everything keyed by its request ids."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    welcome: wire.Welcome
    frames: wire.FrameReader  # holds any bytes that came after WELCOME
    addr: str = ""
    #: Every request of this connection that may still get an answer: replies are checked.
    ledger: ReplyLedger = field(init=False)
    #: The server broke the protocol on this connection (it is being closed).
    violated: bool = False
    pending: dict[int, _PendingAcquire] = field(default_factory=dict)
    owned: dict[int, Lock] = field(default_factory=dict)
    releases: dict[int, Lock] = field(default_factory=dict)  # RELEASE request id -> lock
    heartbeats: dict[int, float] = field(default_factory=dict)  # request id -> send time
    last_acked_heartbeat_send_ms: float = 0.0
    last_heartbeat_sent_ms: float = 0.0
    heartbeat_handle: asyncio.TimerHandle | None = None
    reader_task: asyncio.Task[None] | None = None
    close_code: int | None = None
    ended: bool = False

    def __post_init__(self) -> None:
        self.ledger = ReplyLedger(self.welcome)


def _now_ms(loop: asyncio.AbstractEventLoop) -> float:
    return loop.time() * 1000


class Client:
    """A session with a lockd server. Create it with ``lockd.connect(...)``."""

    def __init__(
        self,
        addr: str,
        *,
        addrs: list[str] | None = None,
        client_name: str | None = None,
        ssl_context: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
        connect_timeout_ms: float = CONNECT_TIMEOUT_MS_DEFAULT,
        reconnect: bool = True,
        on_protocol_error: Callable[[ServerProtocolError], None] | None = None,
    ) -> None:
        #: Every address to try (several: the nodes of a lockd cluster, docs/cluster.md).
        self.addrs = list(addrs) if addrs else [addr]
        for each in self.addrs:
            parse_addr(each)
        #: The address of the current (or last) session.
        self.addr = self.addrs[0]
        #: Where the next connect starts: the node that served last, or the leader it named.
        self._preferred: str | None = None
        #: A node that went silent (frozen, cut off): tried last by the next connect.
        self._avoid: str | None = None
        self._client_name = bound_client_name(client_name if client_name is not None else default_client_name())
        self._ssl = ssl_context
        self._server_hostname = server_hostname
        self._connect_timeout_ms = connect_timeout_ms
        self._reconnect = reconnect
        self._session: _Session | None = None
        self._unsent: list[_PendingAcquire] = []
        self._next_request_id = 1
        self._closed = False
        #: The connection ended and ``reconnect`` is off: the client is of no more use.
        self._failed = False
        self._reconnect_task: asyncio.Task[None] | None = None
        self._reconnect_attempt = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        #: Sessions opened so far (1 after connect, +1 per reconnect).
        self.sessions_opened = 0
        #: How many times a server broke the protocol on this client's connections (each closed it).
        self.protocol_errors = 0
        self._on_protocol_error = on_protocol_error
        #: Connections in a row that ended in a protocol error: a WELCOME resets the back-off only
        #: to this, so a node that welcomes and then misbehaves is not redialled in a storm.
        self._violations_in_a_row = 0

    # -- public API -----------------------------------------------------------

    @property
    def session_id(self) -> int:
        """The server's id of the current session (changes after a reconnect); 0 when disconnected."""
        return self._session.welcome.session_id if self._session is not None else 0

    @property
    def server_version(self) -> str:
        return self._session.welcome.server_version if self._session is not None else ""

    @property
    def connected(self) -> bool:
        return self._session is not None and not self._session.ended

    async def connect(self) -> Client:
        """Opens the first session; raises on failure (no retry: the caller decides)."""
        if self._closed:
            raise LockdConnectionError("The client is closed", retryable=False)
        self._loop = asyncio.get_running_loop()
        self._attach(await self._open_session())
        return self

    async def acquire(self, name: str, *, lease_ms: int = 0, wait_ms: float | None = None) -> Lock:
        """Waits for the lock and returns it once owned.

        ``lease_ms`` 0 asks for the server's default lease. ``wait_ms`` None waits without bound;
        otherwise ``WaitTimeoutError`` is raised when ``wait_ms`` has passed on this client's
        clock, and the claim is cancelled on the server. Cancelling the awaiting task leaves the
        queue too.
        """
        if self._closed:
            raise LockdConnectionError("The client is closed", retryable=False)
        if self._failed:
            raise LockdConnectionError(f"The connection to lockd at {self.addr} was lost", retryable=False)
        if not isinstance(lease_ms, int) or not 0 <= lease_ms <= 0xFFFF_FFFF:
            raise ValueError(f"lease_ms must be an integer in 0..2^32-1, not {lease_ms!r}")
        if wait_ms is not None and not 0 <= wait_ms <= wire.WAIT_MS_MAX:
            raise ValueError(f"wait_ms must be in 0..{wire.WAIT_MS_MAX} or None, not {wait_ms!r}")
        loop = self._running_loop()
        pending = _PendingAcquire(
            name=name,
            lease_ms=lease_ms,
            deadline_ms=None if wait_ms is None else _now_ms(loop) + wait_ms,
            wait_ms=wait_ms,
            future=loop.create_future(),
        )
        if wait_ms is not None and wait_ms > 0:
            pending.wait_handle = loop.call_later(wait_ms / 1000, self._wait_bound_passed, pending)
        self._send_acquire(pending)
        try:
            return await asyncio.shield(pending.future)
        except asyncio.CancelledError:
            self._abandon(pending, None)
            raise

    async def try_acquire(self, name: str, *, lease_ms: int = 0) -> Lock | None:
        """Takes the lock if it is free right now; None when it is held."""
        try:
            return await self.acquire(name, lease_ms=lease_ms, wait_ms=0)
        except WaitTimeoutError:
            return None

    @contextlib.asynccontextmanager
    async def lock(self, name: str, *, lease_ms: int = 0, wait_ms: float | None = None) -> AsyncIterator[Lock]:
        """``async with client.lock(name, ...) as lock:`` acquires, and releases on exit."""
        held = await self.acquire(name, lease_ms=lease_ms, wait_ms=wait_ms)
        try:
            yield held
        finally:
            await held.release()

    async def close(self) -> None:
        """Closes the session: the server releases owned locks (graceful); waits fail."""
        if self._closed:
            return
        self._closed = True
        if self._reconnect_task is not None:
            self._reconnect_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reconnect_task
        session = self._session
        if session is not None:
            self._end_session(session, None)
            with contextlib.suppress(Exception):
                await session.writer.wait_closed()
            if session.reader_task is not None and session.reader_task is not asyncio.current_task():
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await session.reader_task
        self._fail_unsent(LockdConnectionError("The client is closed", retryable=False))

    async def __aenter__(self) -> Client:
        if self._session is None and not self._closed:
            await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- connecting -------------------------------------------------------------

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
        elif self._loop is not loop:
            raise RuntimeError("A lockd Client is bound to the event loop it connected on")
        return loop

    async def _open_session(self) -> _Session:
        """One round over the addresses, the preferred one first: the first WELCOME wins.

        A NOT_LEADER naming the leader (cluster mode) is followed at once, a few times a round.
        """
        avoid = self._avoid
        order = [a for a in self.addrs if a not in (self._preferred, avoid)]
        if self._preferred is not None:
            order.insert(0, self._preferred)
        if avoid is not None and avoid != self._preferred and avoid in self.addrs:
            order.append(avoid)  # a node that went silent is tried last
        tried: set[str] = set()
        redirects = 0
        last: BaseException | None = None
        while order:
            addr = order.pop(0)
            if node_key(addr) in tried:
                continue
            tried.add(node_key(addr))
            try:
                session = await self._open_session_at(addr)
            except NotLeaderError as error:
                last = error
                follow, why = redirect_verdict(error.leader, self.addrs, self._ssl is not None)
                if follow is not None:
                    if node_key(follow) not in tried and redirects < 3:
                        redirects += 1
                        order.insert(0, follow)
                elif why == "invalid":
                    # A redirect that is no address: that node failed; the list goes on.
                    last = ServerProtocolError(addr, refused_redirect_text(addr, error.leader, "invalid"))
                    last.__cause__ = error
                elif why == "outside_list":
                    last = LockdConnectionError(
                        "Cannot connect to lockd: " + refused_redirect_text(addr, error.leader, "outside_list")
                    )
                    last.__cause__ = error
                continue
            except (LockdError, LockdConnectionError) as error:
                last = error
                if len(self.addrs) == 1 and not isinstance(error, ServerProtocolError):
                    raise
                continue
            self.addr = addr
            self._preferred = addr
            self._avoid = None
            return session
        assert last is not None
        raise last

    async def _open_session_at(self, addr: str) -> _Session:
        """Dial, TLS, HELLO, WELCOME — all within ``connect_timeout_ms``."""
        writer: asyncio.StreamWriter | None = None
        first_bytes_seen = False
        try:
            host, port = parse_addr(addr)
            async with asyncio.timeout(self._connect_timeout_ms / 1000):
                reader, writer = await asyncio.open_connection(
                    host,
                    port,
                    ssl=self._ssl,
                    server_hostname=(self._server_hostname or host) if self._ssl else None,
                )
                sock = writer.get_extra_info("socket")
                if sock is not None:
                    with contextlib.suppress(OSError):
                        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                writer.write(wire.encode(wire.Hello(wire.PROTOCOL_VERSION, self._client_name)))
                frames = wire.FrameReader()
                while True:
                    message = frames.next()
                    if message is None:
                        data = await reader.read(64 * 1024)
                        if not data:
                            cause = None if first_bytes_seen else self._handshake_close_cause(None)
                            if cause is not None:
                                raise LockdConnectionError(f"Cannot connect to lockd at {addr}: {cause}")
                            raise LockdConnectionError(f"{addr}: the server closed the connection before WELCOME")
                        if not first_bytes_seen:
                            first_bytes_seen = True
                            if self._ssl is None and _is_tls_record(data):
                                raise LockdConnectionError(
                                    f"Cannot connect to lockd at {addr}: the server expects TLS (it answered "
                                    "with a TLS record); connect with ssl_context=lockd.tls_context(ca_file=...)"
                                )
                        frames.push(data)
                        continue
                    if isinstance(message, wire.Welcome):
                        out_of_bounds = welcome_out_of_bounds(message)
                        if out_of_bounds is not None:
                            raise ServerProtocolError(addr, out_of_bounds)
                        break
                    if isinstance(message, wire.Error):
                        error = LockdError.from_wire(message.code, message.name, message.message)
                        raise error
                    raise ServerProtocolError(addr, f"it sent {type(message).__name__.upper()} before WELCOME")
        except BaseException as error:
            # Every failure, a cancelled connect included, closes what was opened.
            if writer is not None:
                writer.close()
            if isinstance(error, (LockdError, LockdConnectionError)):
                raise
            if isinstance(error, TimeoutError):
                raise ConnectTimeoutError(
                    f"Cannot connect to lockd at {addr}: no WELCOME within {self._connect_timeout_ms:g} ms"
                ) from error
            if isinstance(error, ssl.SSLError) and _is_not_tls(error):
                raise LockdConnectionError(
                    f"Cannot connect to lockd at {addr}: the server does not speak TLS (its answer is not "
                    f"a TLS record: {error}); it listens without -tls-cert, so connect without "
                    "ssl_context, or point at the TLS listener"
                ) from error
            if isinstance(error, wire.MalformedFrame):
                raise ServerProtocolError(addr, f"a malformed frame: {error}") from error
            if isinstance(error, (OSError, ssl.SSLError)) and writer is not None and not first_bytes_seen:
                # The TLS handshake was done, and the server closed before any lockd byte.
                cause = self._handshake_close_cause(error)
                if cause is not None:
                    raise LockdConnectionError(f"Cannot connect to lockd at {addr}: {cause}") from error
            if isinstance(error, (OSError, ssl.SSLError, ValueError)):
                raise LockdConnectionError(f"Cannot connect to lockd at {addr}: {error}") from error
            raise
        return _Session(reader=reader, writer=writer, welcome=message, frames=frames, addr=addr)

    def _handshake_close_cause(self, error: BaseException | None) -> str | None:
        """Why a TLS server closed the connection after the TLS handshake and before any lockd byte
        (with TLS 1.3 a refused client certificate shows up only then), or None without TLS."""
        if self._ssl is None:
            return None
        text = f"{getattr(error, 'reason', '') or ''} {error or ''}"
        if "CERTIFICATE_REQUIRED" in text.upper():
            return (
                "the server requires a client certificate (mutual TLS): give "
                "lockd.tls_context(cert_file=..., key_file=...), signed by a CA the server trusts "
                "(its -tls-client-ca)"
            )
        alert = re.search(r"ALERT_[A-Z_]+", text.upper())
        alert_text = f" (TLS alert: {alert.group(0)})" if alert else ""
        has_cert = getattr(self._ssl, "lockd_client_certificate", None)
        if has_cert:
            return (
                f"the server did not accept the client certificate{alert_text}: is it signed by a CA "
                "the server trusts (its -tls-client-ca), still valid, and made for client authentication?"
            )
        if has_cert is False:
            return (
                f"the server closed the connection right after the TLS handshake{alert_text}; it probably "
                "requires a client certificate (mutual TLS): give lockd.tls_context(cert_file=..., key_file=...)"
            )
        return (
            f"the server closed the connection right after the TLS handshake{alert_text}: it probably "
            "requires a client certificate (mutual TLS), or did not accept the one given (is it signed by "
            "a CA the server trusts, its -tls-client-ca, and still valid?)"
        )

    def _attach(self, session: _Session) -> None:
        loop = self._running_loop()
        self._session = session
        self.sessions_opened += 1
        # Reset only after a WELCOME (and not below the count of misbehaving nodes in a row).
        self._reconnect_attempt = self._violations_in_a_row
        now = _now_ms(loop)
        session.last_heartbeat_sent_ms = now
        # Frames that came with WELCOME answer nothing this session sent: they are handled before
        # any request goes out, so none of them can be taken for the answer to a later one.
        self._drain_buffered(session)
        if session.ended:
            return
        session.reader_task = loop.create_task(self._read_loop(session))
        self._schedule_heartbeat(session)
        unsent, self._unsent = self._unsent, []
        for pending in unsent:
            self._send_acquire(pending)

    def _drain_buffered(self, session: _Session) -> None:
        try:
            while not session.ended and (message := session.frames.next()) is not None:
                self._on_message(session, message)
        except wire.MalformedFrame as error:
            self._violation(session, f"a malformed frame: {error}")

    def _schedule_reconnect(self) -> None:
        if self._closed or self._reconnect_task is not None:
            return
        self._reconnect_task = self._running_loop().create_task(self._reconnect_loop())

    async def _reconnect_loop(self) -> None:
        try:
            while not self._closed:
                delay_ms = backoff_delay_ms(self._reconnect_attempt)
                self._reconnect_attempt += 1
                await asyncio.sleep(delay_ms / 1000)
                if self._closed:
                    return
                try:
                    session = await self._open_session()
                except (UnsupportedVersionError, InvalidArgumentError) as error:
                    # Will fail every time: tell the waiting callers, keep trying for later ones.
                    logger.error("lockd reconnect to %s refused: %s", self.addr, error)
                    self._fail_unsent(error)
                    continue
                except (LockdError, LockdConnectionError) as error:
                    logger.info("lockd reconnect to %s failed: %s", self.addr, error)
                    continue
                except Exception:  # a bug must not end reconnecting: waiting acquires would hang
                    logger.exception("lockd reconnect to %s failed", self.addr)
                    continue
                if self._closed:
                    session.writer.close()
                    return
                self._reconnect_task = None
                self._attach(session)
                return
        finally:
            if self._reconnect_task is asyncio.current_task():
                self._reconnect_task = None

    # -- requests -------------------------------------------------------------------

    def _new_request_id(self, session: _Session | None) -> int:
        """Counts from 1, wraps from 2^32-1 to 1, skips ids still in use."""
        while True:
            request_id = self._next_request_id
            self._next_request_id = 1 if request_id >= 0xFFFF_FFFF else request_id + 1
            if session is None or not (
                request_id in session.pending
                or request_id in session.owned
                or request_id in session.releases
                or request_id in session.heartbeats
                or request_id in session.ledger
            ):
                return request_id

    def _send(self, session: _Session, message: wire.Message) -> None:
        if session.ended:
            return
        try:
            session.writer.write(wire.encode(message))
        except (OSError, RuntimeError) as error:  # the transport is closing
            logger.debug("lockd write failed: %s", error)

    def _send_acquire(self, pending: _PendingAcquire) -> None:
        if pending.future.done() or pending.abandoned:
            return
        session = self._session
        if session is None or session.ended:
            self._unsent.append(pending)  # sent after the next WELCOME
            return
        loop = self._running_loop()
        now = _now_ms(loop)
        wait_ms = wire.WAIT_FOREVER
        if pending.deadline_ms is not None:
            wait_ms = max(0, min(wire.WAIT_MS_MAX, round(pending.deadline_ms - now)))
        pending.request_id = self._new_request_id(session)
        pending.sent_ms = now
        session.pending[pending.request_id] = pending
        session.ledger.acquire_sent(pending.request_id, pending.name)
        self._send(session, wire.Acquire(pending.request_id, pending.lease_ms, wait_ms, pending.name))
        self._schedule_heartbeat(session)  # a waiting claim's lease counts for the cadence

    def _wait_bound_passed(self, pending: _PendingAcquire) -> None:
        pending.wait_handle = None
        if pending.future.done() or pending.abandoned:
            return
        self._abandon(
            pending,
            WaitTimeoutError(
                f'Cannot acquire lock "{pending.name}": wait timed out after {pending.wait_ms:g} ms',
                lock_name=pending.name,
            ),
        )

    def _abandon(self, pending: _PendingAcquire, error: BaseException | None) -> None:
        """The caller gave up (wait bound, cancellation): cancel the claim; a racing grant is released."""
        if pending.abandoned:
            return
        pending.abandoned = True
        if pending.wait_handle is not None:
            pending.wait_handle.cancel()
            pending.wait_handle = None
        if pending in self._unsent:
            self._unsent.remove(pending)
        if error is not None and not pending.future.done():
            pending.future.set_exception(error)
        elif not pending.future.done():
            pending.future.cancel()
        session = self._session
        if session is not None and session.pending.get(pending.request_id) is pending:
            # Keep it in the table: its CANCELLED / WAIT_TIMEOUT / ACQUIRED still arrives.
            self._send_release(session, 0, pending.name, 0)

    async def _release(self, lock: Lock) -> None:
        """Sends RELEASE; the lock stays owned (heartbeats, deadline) until the answer comes."""
        session = lock._session
        if session.owned.get(lock._acquire_id) is not lock:
            return
        if session.ended:
            del session.owned[lock._acquire_id]
            return  # the session that held it is gone, and so is the ownership
        future: asyncio.Future[None] = self._running_loop().create_future()
        lock._release_future = future
        request_id = self._send_release(session, lock.token, lock.name, lock._acquire_id)
        session.releases[request_id] = lock
        await future

    def _send_release(self, session: _Session, token: int, name: str, acquire_id: int) -> int:
        """Sends RELEASE; the ledger expects its answer, which also ends what may come for the
        ACQUIRE ``acquire_id`` (0: a token-0 cancel)."""
        request_id = self._new_request_id(session)
        session.ledger.release_sent(request_id, name, acquire_id)
        self._send(session, wire.Release(request_id, token, name))
        return request_id

    def _ownership_over(self, session: _Session, lock: Lock, reason: str, error: BaseException | None = None) -> None:
        """The ownership ended for this client: a held lock reports lost, a lock being released is done."""
        if session.owned.get(lock._acquire_id) is lock:
            del session.owned[lock._acquire_id]
        if lock._deadline_handle is not None:
            lock._deadline_handle.cancel()
            lock._deadline_handle = None
        future = lock._release_future
        if future is not None:
            for request_id in [rid for rid, held in session.releases.items() if held is lock]:
                del session.releases[request_id]
            if not future.done():
                if error is None:
                    future.set_result(None)
                else:
                    future.set_exception(error)
            return
        lock._mark_lost(reason)

    def _check_deadline(self, lock: Lock) -> None:
        """Reading ``lost`` or ``state``: the ownership ends now if its local deadline has passed,
        whether or not the deadline timer has run. Only on the client's own event loop."""
        loop = self._loop
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            return
        if running is not loop or lock._session.owned.get(lock._acquire_id) is not lock:
            return
        if _now_ms(loop) >= lock.deadline_ms:
            self._deadline_passed(lock)

    def _deadline_passed(self, lock: Lock, *, final: bool = False) -> None:
        """The local lease deadline passed with no newer confirmation: the lock is lost.

        ``final``: another thread saw the deadline pass (lockd.sync); a confirmation that came
        after that cannot revive the ownership.
        """
        handle, lock._deadline_handle = lock._deadline_handle, None
        if handle is not None:
            handle.cancel()
        session = lock._session
        if session.owned.get(lock._acquire_id) is not lock:
            return
        if not final and _now_ms(self._running_loop()) < lock.deadline_ms:  # a late ACK moved it
            lock._arm_deadline(self._running_loop())
            return
        releasing = lock._release_future is not None
        if not releasing:
            logger.warning("lockd lock %r lost: lease not confirmed by the server in time", lock.name)
        self._ownership_over(session, lock, "lease_unconfirmed")
        if not releasing:
            # Best effort: if the server still counts it as ours, let the next waiter have it.
            self._send_release(session, lock.token, lock.name, lock._acquire_id)
        self._schedule_heartbeat(session)

    # -- heartbeats -----------------------------------------------------------------------

    def _heartbeat_interval_ms(self, session: _Session) -> float:
        welcome = session.welcome
        shortest = float(welcome.io_timeout_ms)
        for lock in session.owned.values():
            shortest = min(shortest, lock.lease_ms)
        for pending in session.pending.values():
            if pending.abandoned:
                continue
            asked = pending.lease_ms or welcome.lease_default_ms
            shortest = min(shortest, max(LEASE_MS_MIN, min(asked, welcome.lease_max_ms)))
        return max(1.0, shortest / 3)

    def _schedule_heartbeat(self, session: _Session) -> None:
        if session.ended or self._closed:
            return
        loop = self._running_loop()
        if session.heartbeat_handle is not None:
            session.heartbeat_handle.cancel()
        due_ms = session.last_heartbeat_sent_ms + self._heartbeat_interval_ms(session)
        delay_s = max(0.0, (due_ms - _now_ms(loop)) / 1000)
        session.heartbeat_handle = loop.call_later(delay_s, self._heartbeat_due, session)

    def _heartbeat_due(self, session: _Session) -> None:
        session.heartbeat_handle = None
        if session.ended or self._closed:
            return
        now = _now_ms(self._running_loop())
        oldest = min(session.heartbeats.values(), default=None)
        silence_ms = session.welcome.io_timeout_ms
        if len(self.addrs) > 1:
            # A frozen or cut-off cluster leader: another node takes over meanwhile.
            silence_ms = min(silence_ms, CLUSTER_SILENCE_MS)
        if oldest is not None and now - oldest > silence_ms:
            if len(self.addrs) > 1:
                self._avoid, self._preferred = self._preferred, None
            # No answer for the I/O timeout: the server closed its side by now, or the path is dead.
            logger.warning("lockd connection to %s unanswered for %d ms; reconnecting", self.addr, now - oldest)
            self._end_session(session, None)
            return
        request_id = self._new_request_id(session)
        session.heartbeats[request_id] = now
        session.ledger.heartbeat_sent(request_id)
        session.last_heartbeat_sent_ms = now
        self._send(session, wire.Heartbeat(request_id))
        self._schedule_heartbeat(session)

    # -- reading --------------------------------------------------------------------------

    async def _read_loop(self, session: _Session) -> None:
        frames = session.frames
        try:
            while not session.ended:
                message = frames.next()
                if message is None:
                    data = await session.reader.read(64 * 1024)
                    if not data:
                        break
                    frames.push(data)
                    continue
                self._on_message(session, message)
        except wire.MalformedFrame as error:
            self._violation(session, f"a malformed frame: {error}")
        except (OSError, ssl.SSLError) as error:
            logger.info("lockd connection to %s failed: %s", self.addr, error)
        except asyncio.CancelledError:
            pass
        self._end_session(session, None)

    def _on_message(self, session: _Session, message: wire.Message) -> None:
        if session.ended:
            return  # frames after a closing ERROR are ignored
        loop = self._running_loop()
        if not isinstance(message, (wire.Acquired, wire.HeartbeatAck, wire.Released, wire.Error, wire.Queued)):
            self._violation(session, f"it sent {type(message).__name__.upper()} after WELCOME")
            return
        closing = isinstance(message, wire.Error) and message.request_id != 0 and message.code in _CLOSING
        if message.request_id != 0 and not closing:
            misfit = session.ledger.accept(message)
            if misfit is not None:
                self._violation(session, misfit)
                return
        if isinstance(message, wire.Acquired):
            pending = session.pending.pop(message.request_id, None)
            if pending is None:
                return
            if pending.wait_handle is not None:
                pending.wait_handle.cancel()
                pending.wait_handle = None
            if pending.abandoned or pending.future.done():
                # The caller gave up while the grant was on its way: hand it back at once.
                self._send_release(session, message.token, message.name, message.request_id)
                return
            lock = Lock(self, session, message.name, message.token, message.lease_ms, message.request_id)
            lock._confirmed_send_ms = max(pending.sent_ms, session.last_acked_heartbeat_send_ms)
            session.owned[message.request_id] = lock
            if _now_ms(loop) >= lock.deadline_ms:
                # Granted too late to be confirmed (a long wait without acknowledged heartbeats):
                # it arrives lost, and goes back to the server at once.
                self._ownership_over(session, lock, "lease_unconfirmed")
                self._send_release(session, lock.token, lock.name, lock._acquire_id)
            else:
                lock._arm_deadline(loop)
            pending.future.set_result(lock)
            self._schedule_heartbeat(session)
        elif isinstance(message, wire.HeartbeatAck):
            sent_ms = session.heartbeats.pop(message.request_id, None)
            if sent_ms is None:
                return
            # Older heartbeats answered out of order? They cannot be: the ACKs keep send order.
            for request_id in [rid for rid, at in session.heartbeats.items() if at < sent_ms]:
                del session.heartbeats[request_id]
            session.last_acked_heartbeat_send_ms = max(session.last_acked_heartbeat_send_ms, sent_ms)
            for lock in session.owned.values():
                if sent_ms > lock._confirmed_send_ms:
                    lock._confirmed_send_ms = sent_ms
                    lock._arm_deadline(loop)
        elif isinstance(message, wire.Released):
            lock = session.releases.get(message.request_id)
            if lock is not None:
                self._ownership_over(session, lock, "")
                self._schedule_heartbeat(session)
        elif isinstance(message, wire.Error):
            self._on_error(session, message)
        else:
            pass  # QUEUED: informational; sent once, never updated

    def _on_error(self, session: _Session, message: wire.Error) -> None:
        if message.request_id == 0 or message.code in _CLOSING:
            # After WELCOME, request id 0 closes the session unless it answers a request whose
            # own id was 0 (INVALID_ARGUMENT), which this client never sends; so does a code that
            # always closes the connection, whatever its request id.
            if message.request_id == 0 and message.code == InvalidArgumentError.code:
                logger.warning("lockd server %s: %s", self.addr, message.message)
            else:
                logger.info("lockd server %s closes the session: %s", self.addr, message.message)
                if message.code == NotLeaderError.code:
                    # Cluster mode: the node stopped leading; go to the leader it names first, if
                    # the trust model allows; a name that is no address is that node's failure.
                    follow, why = redirect_verdict(message.name, self.addrs, self._ssl is not None)
                    self._preferred = follow
                    if follow is None and len(self.addrs) > 1:
                        self._avoid = session.addr  # asked last
                    if why == "invalid":
                        self._report(
                            ServerProtocolError(
                                session.addr, refused_redirect_text(session.addr, message.name, "invalid")
                            )
                        )
                self._end_session(session, message.code)
            return
        if message.code == LeaseExpiredError.code:
            lock = session.owned.get(message.request_id)
            if lock is not None:
                self._ownership_over(session, lock, "expired")
                self._schedule_heartbeat(session)
            return
        error = LockdError.from_wire(message.code, message.name, message.message)
        pending = session.pending.pop(message.request_id, None)
        if pending is not None:
            if pending.wait_handle is not None:
                pending.wait_handle.cancel()
                pending.wait_handle = None
            if not pending.abandoned and not pending.future.done():
                pending.future.set_exception(error)
            self._schedule_heartbeat(session)
            return
        lock = session.releases.get(message.request_id)
        if lock is not None:  # NOT_OWNER: the server had no such ownership
            self._ownership_over(session, lock, "", error)
            self._schedule_heartbeat(session)

    # -- the end of a connection --------------------------------------------------------

    def _end_session(self, session: _Session, close_code: int | None) -> None:
        """The connection ended: owned locks are lost, waiting acquires wait for the next session."""
        if session.ended:
            return
        session.ended = True
        session.close_code = close_code
        if session.violated:
            # That node broke the protocol: try the others first, and keep backing off.
            if len(self.addrs) > 1:
                self._avoid = session.addr
            self._preferred = None
        else:
            self._violations_in_a_row = 0
        if session.heartbeat_handle is not None:
            session.heartbeat_handle.cancel()
        with contextlib.suppress(Exception):
            session.writer.close()
        reason = (
            "force"
            if close_code == ClosedByAdminError.code
            else "io_timeout"
            if close_code == IoTimeoutError.code
            else "failover"
            if close_code == NotLeaderError.code
            else "disconnected"
        )
        # Locks being released are done (the session is gone, and so is the ownership); the
        # others are lost.
        for lock in list(session.owned.values()):
            self._ownership_over(session, lock, reason)
        session.owned.clear()
        session.releases.clear()
        waiting = [p for p in session.pending.values() if not p.abandoned and not p.future.done()]
        session.pending.clear()
        if self._session is session:
            self._session = None
        if self._closed:
            self._fail_unsent(LockdConnectionError("The client is closed", retryable=False), waiting)
            return
        if not self._reconnect:
            self._failed = True
            self._fail_unsent(LockdConnectionError(f"The connection to lockd at {self.addr} was lost"), waiting)
            return
        # Waiting claims rejoin the tail of their queues on the next session.
        self._unsent.extend(waiting)
        self._schedule_reconnect()

    def _violation(self, session: _Session, what: str) -> None:
        """The server broke the protocol on ``session``: count, report, close the connection."""
        if session.violated or session.ended:
            return
        session.violated = True
        self._violations_in_a_row += 1
        self._report(ServerProtocolError(session.addr or self.addr, what))
        self._end_session(session, None)

    def _report(self, error: ServerProtocolError) -> None:
        self.protocol_errors += 1
        logger.error("%s", error)
        if self._on_protocol_error is not None:
            try:
                self._on_protocol_error(error)
            except Exception:  # the application's callback must not break the client
                logger.exception("on_protocol_error callback failed")

    def _fail_unsent(self, error: BaseException, extra: list[_PendingAcquire] | None = None) -> None:
        failed, self._unsent = [*self._unsent, *(extra or [])], []
        for pending in failed:
            if pending.wait_handle is not None:
                pending.wait_handle.cancel()
            if not pending.future.done():
                pending.future.set_exception(error)


class _Connecting:
    """What ``connect()`` returns: await it, or use it as ``async with``."""

    def __init__(self, client: Client) -> None:
        self._client = client

    def __await__(self):  # type: ignore[no-untyped-def]
        return self._client.connect().__await__()

    async def __aenter__(self) -> Client:
        return await self._client.connect()

    async def __aexit__(self, *exc: object) -> None:
        await self._client.close()


def connect(
    addr: str = "127.0.0.1:7400",
    *,
    addrs: list[str] | None = None,
    client_name: str | None = None,
    ssl_context: ssl.SSLContext | None = None,
    server_hostname: str | None = None,
    connect_timeout_ms: float = CONNECT_TIMEOUT_MS_DEFAULT,
    reconnect: bool = True,
    on_protocol_error: Callable[[ServerProtocolError], None] | None = None,
) -> _Connecting:
    """Connects to a lockd server: ``client = await connect(...)`` or ``async with connect(...) as client``.

    ``ssl_context`` turns TLS on (see ``lockd.tls_context`` for mutual TLS). ``connect_timeout_ms``
    bounds dial + TLS + HELLO/WELCOME, here and on every reconnect. With ``reconnect`` (default),
    a lost connection is re-dialled with full-jitter back-off and waiting acquires are re-sent.
    ``addrs`` lists the nodes of a lockd cluster (docs/cluster.md): they are tried in order, and a
    NOT_LEADER naming the leader is followed at once; a session the leader ends with NOT_LEADER
    loses its locks with reason ``failover``.
    """
    return _Connecting(
        Client(
            addr,
            addrs=addrs,
            client_name=client_name,
            ssl_context=ssl_context,
            server_hostname=server_hostname,
            connect_timeout_ms=connect_timeout_ms,
            reconnect=reconnect,
            on_protocol_error=on_protocol_error,
        )
    )


def _is_tls_record(data: bytes) -> bool:
    """A TLS server answers a plaintext HELLO with a TLS record (alert 0x15 or handshake 0x16, then
    version 0x03 ..); a lockd frame starts with 0x00 (lengths below 16 MiB)."""
    return len(data) >= 2 and data[0] in (0x15, 0x16) and data[1] == 0x03


def _is_not_tls(error: ssl.SSLError) -> bool:
    """What OpenSSL says when the peer's bytes are not a TLS record (a plaintext server)."""
    text = f"{getattr(error, 'reason', '')} {error}"
    return any(mark in text.upper() for mark in ("WRONG_VERSION_NUMBER", "PACKET_LENGTH_TOO_LONG", "RECORD_LAYER_FAILURE"))


def tls_context(
    *, ca_file: str | None = None, cert_file: str | None = None, key_file: str | None = None
) -> ssl.SSLContext:
    """A client TLS context: trusts ``ca_file`` (else the system CAs); presents ``cert_file`` + ``key_file`` for mutual TLS."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca_file)
    if cert_file is not None:
        context.load_cert_chain(cert_file, key_file)
    elif key_file is not None:
        raise ValueError("key_file needs cert_file")
    # Lets the client name the likely cause when a mutual-TLS server closes after the handshake.
    context.lockd_client_certificate = cert_file is not None  # type: ignore[attr-defined]
    return context
