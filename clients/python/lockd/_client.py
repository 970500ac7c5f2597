"""The asyncio lockd client, built from docs/protocol.md ("Writing a client").

One ``Client`` holds one connection (a session) at a time. Requests in flight are kept by
request id, because replies do not come in request order. Each owned lock has a local lease
deadline on the event loop's monotonic clock; heartbeats keep it moving. HELLO asks for protocol
version 2 and falls back to version 1 at a server that does not speak it.

When a connection ends, waiting acquires go to the next connection, which is dialled after a
full-jitter back-off. Owned locks are lost, except on a version-2 connection to a cluster leader
that ended without a word about the ownerships (EOF, reset, NOT_LEADER, a silent leader): then
they stay held while their local deadlines run, and the next connection carries them over to the
new leader (RESUME, then a RECLAIM per claim, before any new ACQUIRE), waiting acquires keeping
their place in the queue (docs/cluster.md, "What clients see during a fail-over").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import socket
import ssl
from collections.abc import AsyncIterator, Callable
from typing import Any

from . import _codec as wire
from ._checks import cut_utf8, node_key, redirect_verdict, refused_redirect_text
from ._handshake import Dialer
from ._lock import (
    Carry,
    Lock,
    LostEvent,
    PendingAcquire,
    PendingQuery,
    Session,
    lease_margin_ms,
    local_deadline_ms,
    now_ms,
    value_bytes,
)
from ._observe import Holder, LockState, Observer
from .errors import (
    ClosedByAdminError,
    ConnectTimeoutError,
    InvalidArgumentError,
    IoTimeoutError,
    LeaseExpiredError,
    LimitExceededError,
    LockdConnectionError,
    LockdError,
    NotLeaderError,
    ServerProtocolError,
    ShuttingDownError,
    UnsupportedVersionError,
    WaitTimeoutError,
)

__all__ = [
    "Client",
    "Holder",
    "Lock",
    "LockState",
    "Observer",
    "LostEvent",
    "backoff_delay_ms",
    "bound_client_name",
    "connect",
    "default_client_name",
    "lease_margin_ms",
    "local_deadline_ms",
    "parse_addr",
]

VERSION = "0.1.0"
#: Dial + TLS + HELLO/WELCOME bound (docs/protocol.md, "Connection states").
CONNECT_TIMEOUT_MS_DEFAULT = 5_000
#: The same bound with several addresses (a cluster): a first connect goes round the list again
#: with back-off until it passes, so that a client started during a fail-over is held rather than
#: refused. A killed leader's successor serves about TTL + 0.5 s later (2.5 s at the default 2 s
#: TTL) and a standby holds a HELLO up to 4 s meanwhile: twice that leaves room for a frozen first
#: node (1 s before the next is tried) and a slow election. The TypeScript client's too.
CONNECT_TIMEOUT_MS_CLUSTER_DEFAULT = 10_000
#: Full-jitter back-off bounds (docs/protocol.md, "Reconnecting").
RECONNECT_BACKOFF_MS_MIN = 50
RECONNECT_BACKOFF_MS_MAX = 5_000
#: The server's shortest lease (leases are clamped to [50, leaseMaxMs]).
LEASE_MS_MIN = 50
#: With several cluster nodes, a connection silent this long after an unanswered heartbeat is left.
CLUSTER_SILENCE_MS = 3_000
#: The server refuses a HELLO whose client name is longer (docs/protocol.md, "Lock names").
CLIENT_NAME_BYTES_MAX = 256
#: With several addresses, how long a silent connect attempt runs alone before the next address
#: is tried beside it: a live node answers (or refuses) within milliseconds, a node holding the
#: HELLO for an election answers in seconds, a frozen one never.
NEXT_NODE_AFTER_MS = 1_000
#: How many NOT_LEADER redirects one round over the addresses follows.
REDIRECTS_PER_ROUND_MAX = 3
#: After the client's GOODBYE or FIN, how long it keeps reading for the server's end of the
#: stream: closing with unread bytes would reset the connection, which the server counts as a
#: failure instead of a graceful end. A stalled path never answers, so it is dropped after this.
CLOSE_GRACE_MS = 1_000
#: RESUME's ``claims`` is a u16.
RECLAIMS_PER_RESUME_MAX = 0xFFFF

#: Codes that always end the session (docs/protocol.md, "Error codes": "closes connection").
_CLOSING = frozenset((0x01, 0x02, 0x03, 0x0A, 0x0D, 0x0E, 0x11))
#: Closing ERRORs of a leader that stopped leading: its claims are carried over to the next one.
_LEADER_GONE = frozenset((NotLeaderError.code, ShuttingDownError.code))

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


def _check_wire_str(what: str, text: object) -> None:
    """A name or pattern the wire can carry (the server judges the rest): a ``str`` of at most
    65,535 UTF-8 bytes, without lone surrogates. Checked when asked, as it is sent again on
    every reconnect."""
    if not isinstance(text, str):
        raise TypeError(f"{what} is a str, not {type(text).__name__}")
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise ValueError(f"{what} cannot be sent: it has a lone surrogate") from None
    if size > wire.STR_BYTES_MAX:
        raise ValueError(f"{what} cannot be sent: {size} bytes, above {wire.STR_BYTES_MAX}")


def _value_too_long(action: str, name: str, length: int, welcome: wire.Welcome) -> str:
    if welcome.value_bytes_max == 0:
        return f'Cannot {action} lock "{name}": this server takes no lock values (protocol version 2 with values)'
    return f'Cannot {action} lock "{name}": a value of {length} bytes is longer than the server\'s {welcome.value_bytes_max}'


def backoff_delay_ms(attempt: int, rng: Callable[[], float] | None = None) -> float:
    """Full jitter: ``random(0, min(5000, 50 * 2^attempt))``; ``attempt`` counts failures since the last WELCOME."""
    cap = min(RECONNECT_BACKOFF_MS_MAX, RECONNECT_BACKOFF_MS_MIN * 2 ** min(attempt, 16))
    return (rng or random.random)() * cap



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
        connect_timeout_ms: float | None = None,
        reconnect: bool = True,
        reclaim: bool = True,
        on_protocol_error: Callable[[ServerProtocolError], None] | None = None,
        on_value_dropped: Callable[[str, int, int], None] | None = None,
    ) -> None:
        #: Every address to try (several: the nodes of a lockd cluster, docs/cluster.md).
        self.addrs = list(addrs) if addrs else [addr]
        for each in self.addrs:
            parse_addr(each)
        if connect_timeout_ms is None:
            several = len(self.addrs) > 1
            connect_timeout_ms = CONNECT_TIMEOUT_MS_CLUSTER_DEFAULT if several else CONNECT_TIMEOUT_MS_DEFAULT
        if not connect_timeout_ms > 0:
            raise ValueError(f"connect_timeout_ms must be above 0, not {connect_timeout_ms!r}")
        #: The address of the current (or last) session.
        self.addr = self.addrs[0]
        #: Where the next connect starts: the node that served last, or the leader it named.
        self._preferred: str | None = None
        #: A node that went silent (frozen, cut off): tried last by the next connect.
        self._avoid: str | None = None
        self._dialer = Dialer(
            client_name=bound_client_name(client_name if client_name is not None else default_client_name()),
            ssl_context=ssl_context,
            server_hostname=server_hostname,
            connect_timeout_ms=connect_timeout_ms,
        )
        self._ssl = ssl_context
        self._connect_timeout_ms = connect_timeout_ms
        self._reconnect = reconnect
        #: Carry owned locks and waiting claims over to a new leader after a fail-over.
        self._reclaim = reclaim
        self._session: Session | None = None
        self._unsent: list[PendingAcquire] = []
        #: QUERYs waiting for a connection (sent after the next WELCOME).
        self._unsent_queries: list[PendingQuery] = []
        #: Every open ``observe``: its WATCH is sent on each new connection.
        self._observers: list[Observer] = []
        #: While RESUME and the RECLAIMs go out: new ACQUIREs wait in ``_unsent``.
        self._holding_acquires = False
        #: Claims of lost connections, oldest first, for the next connection to reclaim.
        self._carries: list[Carry] = []
        #: (term, session id) of the version-2 session that ended last: the next one resumes it.
        self._previous: tuple[int, int] | None = None
        self._next_request_id = 1
        self._closed = False
        #: The connection ended and ``reconnect`` is off: the client is of no more use.
        self._failed = False
        self._reconnect_task: asyncio.Task[None] | None = None
        self._reconnect_attempt = 0
        self._retiring: set[asyncio.Task[None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        #: Sessions opened so far (1 after connect, +1 per reconnect).
        self.sessions_opened = 0
        #: How many times a server broke the protocol on this client's connections (each closed it).
        self.protocol_errors = 0
        self._on_protocol_error = on_protocol_error
        self._on_value_dropped = on_value_dropped
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
    def protocol_version(self) -> int:
        """The protocol version of the current session (2, or 1 with a server of before version 2); 0 when disconnected."""
        return self._session.welcome.version if self._session is not None else 0

    @property
    def connected(self) -> bool:
        return self._session is not None and not self._session.ended

    async def connect(self) -> Client:
        """Opens the first session; raises on failure. With several addresses, rounds over them
        go on (with back-off) until ``connect_timeout_ms`` has passed: a cluster in the middle of
        a fail-over answers within it."""
        if self._closed:
            raise LockdConnectionError("The client is closed", retryable=False)
        self._loop = asyncio.get_running_loop()
        self._attach(await self._first_session())
        return self

    async def acquire(
        self,
        name: str,
        *,
        lease_ms: int = 0,
        wait_ms: float | None = None,
        suspend: bool = False,
        mode: str = "exclusive",
        limit: int = 1,
        value: bytes | str = b"",
    ) -> Lock:
        """Waits for the lock and returns it once owned.

        Protocol version 2 (issue 22 and 23): ``mode="shared"`` asks for a shared (read) lock:
        shared claims are granted together, an exclusive claim waits for them and stops later
        shared ones from passing it (``lock.write_generation`` is the token of the last exclusive
        grant). ``limit=N`` asks for one of N slots of a semaphore (``lock.slot``); the default 1 is
        a plain lock, 0 takes whatever the lock (or a server rule) has. ``value`` is published to
        ``query`` and ``observe`` while the lock is owned (a ``str`` is sent as UTF-8). A server
        of version 1 takes plain locks only: anything else raises ``InvalidArgumentError``.

        ``lease_ms`` 0 asks for the server's default lease. ``wait_ms`` None waits without bound;
        otherwise ``WaitTimeoutError`` is raised when ``wait_ms`` has passed on this client's
        clock, and the claim is cancelled on the server. Cancelling the awaiting task leaves the
        queue too. ``suspend=True``: when the lock's local deadline passes while it is being
        carried over to a new leader, it is ``suspended`` instead of lost, until it is confirmed
        again or the reclaim window ends (see ``Lock.suspended``).
        """
        if self._closed:
            raise LockdConnectionError("The client is closed", retryable=False)
        if self._failed:
            raise LockdConnectionError(f"The connection to lockd at {self.addr} was lost", retryable=False)
        if not isinstance(lease_ms, int) or not 0 <= lease_ms <= 0xFFFF_FFFF:
            raise ValueError(f"lease_ms must be an integer in 0..2^32-1, not {lease_ms!r}")
        if wait_ms is not None and not 0 <= wait_ms <= wire.WAIT_MS_MAX:
            raise ValueError(f"wait_ms must be in 0..{wire.WAIT_MS_MAX} or None, not {wait_ms!r}")
        if mode not in wire.LOCK_MODES:
            raise ValueError(f'mode must be "exclusive" or "shared", not {mode!r}')
        if isinstance(limit, bool) or not isinstance(limit, int) or not 0 <= limit <= 0xFFFF_FFFF:
            raise ValueError(f"limit must be an integer in 0..2^32-1, not {limit!r}")
        data = value_bytes(value)
        if len(data) > wire.STR_BYTES_MAX:
            raise ValueError(f"a lock value is at most {wire.STR_BYTES_MAX} bytes, not {len(data)}")
        loop = self._running_loop()
        pending = PendingAcquire(
            name=name,
            lease_ms=lease_ms,
            deadline_ms=None if wait_ms is None else now_ms(loop) + wait_ms,
            wait_ms=wait_ms,
            future=loop.create_future(),
            suspend=bool(suspend),
            mode=mode,
            limit=limit,
            value=data,
        )
        if wait_ms is not None and wait_ms > 0:
            pending.wait_handle = loop.call_later(wait_ms / 1000, self._wait_bound_passed, pending)
        self._send_acquire(pending)
        try:
            return await asyncio.shield(pending.future)
        except asyncio.CancelledError:
            self._abandon(pending, None)
            raise

    async def try_acquire(self, name: str, *, lease_ms: int = 0, suspend: bool = False, **kind: Any) -> Lock | None:
        """Takes the lock if it is free right now; None when it is held. ``mode``, ``limit`` and
        ``value`` as in ``acquire``."""
        try:
            return await self.acquire(name, lease_ms=lease_ms, wait_ms=0, suspend=suspend, **kind)
        except WaitTimeoutError:
            return None

    @contextlib.asynccontextmanager
    async def lock(
        self, name: str, *, lease_ms: int = 0, wait_ms: float | None = None, suspend: bool = False, **kind: Any
    ) -> AsyncIterator[Lock]:
        """``async with client.lock(name, ...) as lock:`` acquires, and releases on exit. ``mode``,
        ``limit`` and ``value`` as in ``acquire``."""
        held = await self.acquire(name, lease_ms=lease_ms, wait_ms=wait_ms, suspend=suspend, **kind)
        try:
            yield held
        finally:
            await held.release()

    async def query(self, name: str) -> LockState:
        """The state of lock ``name`` now, without queueing (QUERY, protocol version 2): its kind,
        holders (identity, client name, value, token, held for), queue length;
        ``state.holder`` is None when nobody holds it. Asked again on the next connection if this
        one ends first. Raises ``InvalidArgumentError`` (a bad name, or a server of version 1)
        or ``AclDeniedError``."""
        self._usable()
        _check_wire_str("a lock name", name)
        query = PendingQuery(name, self._running_loop().create_future())
        self._send_query(query)
        try:
            return await asyncio.shield(query.future)
        except asyncio.CancelledError:
            if query in self._unsent_queries:
                self._unsent_queries.remove(query)
            query.future.cancel()
            raise

    def observe(self, pattern: str) -> Observer:
        """Observes lock ``pattern``, or every lock a glob in the ACL's language matches (WATCH,
        protocol version 2): an async iterator of ``LockState``, first the current state of each
        matching lock, then one per change (granted, ended with its reason, value or queue
        changed), the latest state per lock when the reader is slow. After a reconnect or a
        fail-over it watches again and starts over with a fresh snapshot. End it with
        ``await observer.aclose()`` or ``async with client.observe(...) as states:``."""
        self._usable()
        _check_wire_str("a pattern", pattern)
        self._running_loop()
        observer = Observer(self, pattern)
        self._observers.append(observer)
        session = self._session
        if session is not None and not session.ended and not self._holding_acquires:
            self._send_watch(session, observer)
        return observer
    def _usable(self) -> None:
        if self._closed:
            raise LockdConnectionError("The client is closed", retryable=False)
        if self._failed:
            raise LockdConnectionError(f"The connection to lockd at {self.addr} was lost", retryable=False)

    async def close(self) -> None:
        """Closes the session: GOODBYE (version 2) tells the server to end it gracefully, so owned
        locks go to their next waiters at once; waits fail; observers end; nothing is carried over
        any more."""
        if self._closed:
            return
        self._closed = True
        for observer in self._observers:
            observer._end()
        self._observers.clear()
        if self._reconnect_task is not None:
            self._reconnect_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reconnect_task
        for carry in list(self._carries):
            self._give_up_carry(carry, "disconnected")
        session = self._session
        if session is not None:
            self._end_session(session, None, close_socket=False)
            self._retire(session)
        if self._retiring:
            await asyncio.gather(*self._retiring, return_exceptions=True)
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

    async def _first_session(self) -> Session:
        """The first connect. One address: one attempt. Several (a cluster, maybe in the middle of
        a fail-over, its standbys answering NOT_LEADER or nothing yet): rounds over them with
        back-off until ``connect_timeout_ms`` has passed, each attempt bounded by the time left."""
        if len(self.addrs) == 1:
            return await self._open_round()
        loop = self._running_loop()
        end_ms = now_ms(loop) + self._connect_timeout_ms
        attempt = 0
        informative: BaseException | None = None
        while True:
            try:
                return await self._open_round(end_ms - now_ms(loop))
            except (LockdError, LockdConnectionError) as error:
                if not isinstance(error, ConnectTimeoutError):
                    informative = error
                if not error.retryable or getattr(error, "lockd_final", False):
                    raise  # no retry mends it
                delay_ms = min(backoff_delay_ms(attempt), end_ms - now_ms(loop))
                attempt += 1
                if delay_ms > 0:
                    logger.info("lockd connect: no node serves yet (%s); trying again", error)
                    await asyncio.sleep(delay_ms / 1000)
                if now_ms(loop) >= end_ms - 1:
                    # What the nodes said is worth more than "no WELCOME in time".
                    raise (informative or error) from None

    async def _open_round(self, bound_ms: float | None = None) -> Session:
        """One round over the addresses, the preferred one first: the first WELCOME wins.

        A NOT_LEADER naming the leader (cluster mode) is followed at once, a few times a round. An
        attempt that stays silent for ``NEXT_NODE_AFTER_MS`` gets the next address started
        beside it (a frozen node accepts and never answers).
        """
        avoid = self._avoid
        order = [a for a in self.addrs if a not in (self._preferred, avoid)]
        if self._preferred is not None:
            order.insert(0, self._preferred)
        if avoid is not None and avoid != self._preferred and avoid in self.addrs:
            order.append(avoid)  # a node that went silent is tried last
        loop = self._running_loop()
        tried: set[str] = set()
        attempts: dict[asyncio.Task[object], str] = {}
        redirects = 0
        last: BaseException | None = None
        #: A NOT_LEADER of this round that was not followed: the round fails with it.
        refused: BaseException | None = None

        def start_next() -> None:
            while order and node_key(order[0]) in tried:
                order.pop(0)
            if order:
                addr = order.pop(0)
                tried.add(node_key(addr))
                attempts[loop.create_task(self._dialer.open(addr, bound_ms))] = addr

        start_next()
        try:
            while attempts:
                stagger_s = NEXT_NODE_AFTER_MS / 1000 if order else None
                done, _ = await asyncio.wait(attempts, timeout=stagger_s, return_when=asyncio.FIRST_COMPLETED)
                if not done:
                    start_next()
                    continue
                for task in done:
                    addr = attempts.pop(task)
                    try:
                        opened = task.result()
                    except NotLeaderError as error:
                        last = error
                        follow, why = redirect_verdict(error.leader, self.addrs, self._ssl is not None)
                        if follow is not None:
                            if node_key(follow) not in tried and redirects < REDIRECTS_PER_ROUND_MAX:
                                redirects += 1
                                order.insert(0, follow)
                        elif why is not None and why != "no_leader":
                            # A redirect that is not followed: that node failed; the list goes on.
                            # A configuration to fix, not a moment: a first connect ends with it.
                            refused = (
                                ServerProtocolError(addr, refused_redirect_text(addr, error.leader, "invalid"))
                                if why == "invalid"
                                else LockdConnectionError(
                                    "Cannot connect to lockd: "
                                    + refused_redirect_text(addr, error.leader, "outside_list")
                                )
                            )
                            refused.__cause__ = error
                            refused.lockd_final = True  # type: ignore[attr-defined]
                            last = refused
                        continue
                    except (LockdError, LockdConnectionError) as error:
                        last = error
                        continue
                    session = Session(
                        reader=opened.reader,
                        writer=opened.writer,
                        welcome=opened.welcome,
                        frames=opened.frames,
                        addr=opened.addr,
                    )
                    self.addr = addr
                    self._preferred = addr
                    self._avoid = None
                    return session
                start_next()
        finally:
            for task in attempts:
                task.cancel()
            for task in attempts:
                with contextlib.suppress(BaseException):
                    late = await task
                    late.writer.close()  # type: ignore[attr-defined]
        assert last is not None
        raise refused or last

    def _attach(self, session: Session) -> None:
        loop = self._running_loop()
        self._session = session
        self.sessions_opened += 1
        # Reset only after a WELCOME (and not below the count of misbehaving nodes in a row).
        self._reconnect_attempt = self._violations_in_a_row
        now = now_ms(loop)
        session.last_heartbeat_sent_ms = now
        session.last_frame_ms = now
        # Frames that came with WELCOME answer nothing this session sent: they are handled before
        # any request goes out, so none of them can be taken for the answer to a later one.
        self._drain_buffered(session)
        if session.ended:
            return
        session.reader_task = loop.create_task(self._read_loop(session))
        self._schedule_heartbeat(session)
        # Claims carried over first (RESUME, then every RECLAIM), before any new ACQUIRE.
        self._resume(session)
        unsent, self._unsent = self._unsent, []
        for pending in unsent:
            self._send_acquire(pending)
        queries, self._unsent_queries = self._unsent_queries, []
        for query in queries:
            self._send_query(query)
        for observer in list(self._observers):
            self._send_watch(session, observer)

    def _drain_buffered(self, session: Session) -> None:
        try:
            while not session.ended and (message := session.frames.next()) is not None:
                self._on_message(session, message)
        except wire.MalformedFrame as error:
            self._violation(session, f"a malformed frame: {error}")

    def _schedule_reconnect(self, *, at_once: bool = False) -> None:
        if self._closed or self._reconnect_task is not None:
            return
        self._reconnect_task = self._running_loop().create_task(self._reconnect_loop(at_once))

    async def _reconnect_loop(self, at_once: bool) -> None:
        try:
            while not self._closed:
                delay_ms = 0.0 if at_once else backoff_delay_ms(self._reconnect_attempt)
                at_once = False
                self._reconnect_attempt += 1
                await asyncio.sleep(delay_ms / 1000)
                if self._closed:
                    return
                try:
                    session = await self._open_round()
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

    # -- carrying claims over (protocol version 2) -------------------------------------------

    def _takes_reclaims(self, session: Session) -> bool:
        """Claims of ``session`` can be carried over (this client reclaims, its server takes them)."""
        return self._reclaim and self._reconnect and session.takes_reclaims

    def _carries_over(self, session: Session, close_code: int | None, abandoned: bool) -> bool:
        """Whether the claims of ``session``, which just ended, are carried over to the next
        connection: only when the server that had them may not have ended them on purpose. The
        client gave the connection up as silent (a frozen or cut-off server, a stalled path: the
        server may still hold the session, and a single node moves it); or, in cluster mode (a
        term above 0), it closed without an ERROR (a leader that died, a reset) or with
        NOT_LEADER or SHUTTING_DOWN (a leader that stopped leading). Not after CLOSED_BY_ADMIN,
        IO_TIMEOUT or another closing ERROR, a protocol error, or on a single node whose
        connection closed: a server that still serves has ended those ownerships (and may grant
        the locks again at once), and a restarted one remembers none."""
        if self._closed or session.violated or not self._takes_reclaims(session):
            return False
        if abandoned:
            return True
        return session.welcome.term > 0 and (close_code is None or close_code in _LEADER_GONE)

    def _resume(self, session: Session) -> None:
        """After WELCOME: RESUME and a RECLAIM per claim of one carry; the others, and all of them
        when this server takes no reclaims, are given up. With nothing to carry over, a RESUME of
        no claims still names the version-2 session that ended: a new leader after a planned
        hand-over ends its reclaim window early once every session it lists is back."""
        previous, self._previous = self._previous, None
        resumed = False
        if self._carries:
            # Claims given up here go out after the RECLAIMs, with the new ACQUIREs.
            self._holding_acquires = True
            try:
                resumed = self._resume_carry(session)
            finally:
                self._holding_acquires = False
        if not resumed and previous is not None and session.takes_reclaims:
            request_id = self._new_request_id(session)
            session.resume_id = request_id
            session.ledger.resume_sent(request_id)
            self._send(session, wire.Resume(request_id, previous[0], previous[1], 0))

    def _resume_carry(self, session: Session) -> bool:
        """RESUME and the RECLAIMs of the carry chosen; False when none was sent."""
        # One RESUME names one earlier session: the one most claims were made on (an owned lock
        # counts double: losing it costs more than a place in a queue), the newest on a tie.
        chosen = (
            max(self._carries, key=lambda c: (2 * len(c.locks) + len(c.queued), c.term, c.lost_ms))
            if self._takes_reclaims(session)
            else None
        )
        for carry in list(self._carries):
            if carry is not chosen:
                self._give_up_carry(carry, "failover")
        if chosen is None:
            return False
        locks = [lock for lock in chosen.locks if lock._reclaim_session is None]
        queued = [p for p in chosen.queued if not p.abandoned and not p.future.done()]
        for lock in locks[RECLAIMS_PER_RESUME_MAX:]:
            self._carried_lost(lock, "failover")
        locks = locks[:RECLAIMS_PER_RESUME_MAX]
        for pending in queued[RECLAIMS_PER_RESUME_MAX - len(locks) :]:
            self._uncarry(pending)
        queued = queued[: RECLAIMS_PER_RESUME_MAX - len(locks)]
        if not locks and not queued:
            self._give_up_carry(chosen, "failover")
            return False
        request_id = self._new_request_id(session)
        session.resume_id = request_id
        session.ledger.resume_sent(request_id)
        self._send(session, wire.Resume(request_id, chosen.term, chosen.session_id, len(locks) + len(queued)))
        logger.info(
            "lockd: reclaiming %d lock(s) and %d waiting claim(s) of session %d (term %d) at %s",
            len(locks),
            len(queued),
            chosen.session_id,
            chosen.term,
            session.addr,
        )
        for lock in locks:
            self._send_owned_reclaim(session, lock)
        for pending in queued:
            self._send_queued_reclaim(session, pending)
        return True

    def _send_owned_reclaim(self, session: Session, lock: Lock) -> None:
        request_id = self._new_request_id(session)
        lock._reclaim_session = session
        lock._reclaim_id = request_id
        lock._reclaim_sent_ms = now_ms(self._running_loop())
        session.reclaims[request_id] = lock
        session.ledger.reclaim_sent(
            request_id, lock.name, "owned", lock.token, mode=lock.mode, limit=lock.limit, slot=lock.slot
        )
        self._schedule_heartbeat(session)  # its lease counts for the cadence: an ACK confirms it too
        # The value travels with the claim (what the old leader last confirmed), unless it is longer
        # than this leader takes: then the lock goes without it rather than be refused for it.
        if self._value_dropped(session, lock.name, lock.value):
            lock.value = wire.EMPTY_VALUE
        self._send(
            session,
            wire.Reclaim(
                request_id, "owned", lock.token, 0, 0, lock.lease_ms, 0, lock._ticket,
                lock.mode, lock.limit, lock.slot, lock.name, lock.value, lock.write_generation,
            ),
        )

    def _send_queued_reclaim(self, session: Session, pending: PendingAcquire) -> None:
        self._register_request(session, pending, reclaim=True)
        if self._value_dropped(session, pending.name, pending.value):
            pending.value = wire.EMPTY_VALUE
        self._send(
            session,
            wire.Reclaim(
                pending.request_id, "queued", 0, pending.order_term, pending.order_seq, pending.lease_ms,
                self._wait_left(pending), pending.ticket, pending.mode, pending.limit, 0, pending.name,
                pending.value,
            ),
        )

    def _value_dropped(self, session: Session, name: str, value: bytes) -> bool:
        """Whether a claim's value is longer than this leader takes (WELCOME's ``valueBytesMax``): a
        RECLAIM with it would be refused (INVALID_ARGUMENT) and the lock lost for its value, so it
        is carried over without it; logged, and ``on_value_dropped(name, bytes, max)`` is called."""
        value_bytes_max = session.welcome.value_bytes_max
        if len(value) <= value_bytes_max:
            return False
        logger.warning(
            "lockd lock %r carried over to %s without its value: %d bytes, the server takes at most %d",
            name, session.addr, len(value), value_bytes_max,
        )
        if self._on_value_dropped is not None:
            try:
                self._on_value_dropped(name, len(value), value_bytes_max)
            except Exception:
                logger.exception("on_value_dropped callback failed")
        return True

    def _out_of_carry(self, claim: Lock | PendingAcquire) -> None:
        """A claim leaves its carry (confirmed, void, released, abandoned); a carry left empty is done."""
        if isinstance(claim, Lock):
            carry, claim._carry = claim._carry, None
            if carry is not None and claim in carry.locks:
                carry.locks.remove(claim)
        else:
            carry, claim.carry = claim.carry, None
            if carry is not None and claim in carry.queued:
                carry.queued.remove(claim)
        if carry is not None and not len(carry) and carry in self._carries:
            self._carries.remove(carry)
            if carry.timer is not None:
                carry.timer.cancel()
                carry.timer = None
            if carry.kept is not None:
                self._retire(carry.kept)
                carry.kept = None

    def _carry_window_ended(self, carry: Carry) -> None:
        """The lost connection's reclaim window has passed: its suspended locks are lost
        (``failover``) and its kept socket is closed. Held locks still being carried over go on
        until their deadlines (the new leader holds their locks back at least that long), waiting
        claims until the server says where they stand."""
        carry.timer = None
        carry.window_over = True
        for lock in list(carry.locks):
            if lock._phase == "suspended":
                logger.warning("lockd lock %r lost: not carried over within the reclaim window", lock.name)
                self._carried_lost(lock, "failover")
        if carry.kept is not None:
            self._retire(carry.kept)
            carry.kept = None

    def _give_up_carry(self, carry: Carry, reason: str) -> None:
        """Nothing more of ``carry`` is reclaimed: its locks are lost with ``reason`` (one whose
        RECLAIM is on its way is handed back if it is kept), its waiting claims rejoin the tail."""
        if carry in self._carries:
            self._carries.remove(carry)
        if carry.timer is not None:
            carry.timer.cancel()
            carry.timer = None
        for lock in list(carry.locks):
            self._carried_lost(lock, reason)
        for pending in list(carry.queued):
            self._uncarry(pending)
        if carry.kept is not None:
            self._retire(carry.kept)
            carry.kept = None

    def _carried_lost(self, lock: Lock, reason: str, cause: BaseException | None = None) -> None:
        """A lock being carried over is lost (or, released meanwhile, done)."""
        self._out_of_carry(lock)
        if lock._released:
            self._release_done(lock)
        else:
            lock._mark_lost(reason, cause)

    def _uncarry(self, pending: PendingAcquire) -> None:
        """A waiting claim leaves its carry: it joins the tail with a new ACQUIRE (unless its queued
        RECLAIM is on its way: then it is in that queue already)."""
        self._out_of_carry(pending)
        pending.forget_ticket()
        if pending.abandoned or pending.future.done():
            return
        session = self._session
        if session is not None and session.pending.get(pending.request_id) is pending:
            return
        self._send_acquire(pending)

    def _retire(self, session: Session) -> None:
        """Closes a connection gracefully, in the background: GOODBYE (version 2), the end of the
        stream, and reading until the server's end (``CLOSE_GRACE_MS`` at most)."""
        if session.retired:
            return
        session.retired = True
        task = self._running_loop().create_task(self._retire_now(session))
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    async def _retire_now(self, session: Session) -> None:
        writer = session.writer
        said_goodbye = False
        reader_task = session.reader_task
        if reader_task is not None and reader_task is not asyncio.current_task():
            reader_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reader_task
        with contextlib.suppress(Exception):
            if not writer.is_closing():
                if session.version == 2:
                    request_id = self._new_request_id(None)
                    writer.write(wire.encode(wire.Goodbye(request_id), 2))
                    said_goodbye = True
                if writer.can_write_eof():
                    writer.write_eof()
                    said_goodbye = True
        if said_goodbye:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(CLOSE_GRACE_MS / 1000):
                    while await session.reader.read(64 * 1024):
                        pass
        with contextlib.suppress(Exception):
            writer.close()
        with contextlib.suppress(Exception):
            async with asyncio.timeout(CLOSE_GRACE_MS / 1000):
                await writer.wait_closed()

    # -- requests -------------------------------------------------------------------

    def _new_request_id(self, session: Session | None) -> int:
        """Counts from 1, wraps from 2^32-1 to 1, skips ids still in use."""
        while True:
            request_id = self._next_request_id
            self._next_request_id = 1 if request_id >= 0xFFFF_FFFF else request_id + 1
            if session is None or not (
                request_id in session.pending
                or request_id in session.owned
                or request_id in session.releases
                or request_id in session.heartbeats
                or request_id in session.reclaims
                or request_id in session.ledger
            ):
                return request_id

    def _send(self, session: Session, message: wire.Message) -> None:
        if session.ended:
            return
        try:
            session.writer.write(wire.encode(message, session.version))
        except (OSError, RuntimeError) as error:  # the transport is closing
            logger.debug("lockd write failed: %s", error)

    def _wait_left(self, pending: PendingAcquire) -> int:
        if pending.deadline_ms is None:
            return wire.WAIT_FOREVER
        return max(0, min(wire.WAIT_MS_MAX, round(pending.deadline_ms - now_ms(self._running_loop()))))

    def _register_request(self, session: Session, pending: PendingAcquire, *, reclaim: bool) -> None:
        pending.request_id = self._new_request_id(session)
        pending.sent_ms = now_ms(self._running_loop())
        pending.reclaim = reclaim
        session.pending[pending.request_id] = pending
        limit = pending.limit if session.version == 2 else 0
        if reclaim:
            session.ledger.reclaim_sent(pending.request_id, pending.name, "queued", mode=pending.mode, limit=limit)
        else:
            session.ledger.acquire_sent(pending.request_id, pending.name, pending.mode, limit)
        self._schedule_heartbeat(session)  # a waiting claim's lease counts for the cadence

    @staticmethod
    def _handing_back(session: Session, name: str) -> bool:
        """Whether an owned RECLAIM of ``name`` is on its way for a lock let go of meanwhile (released
        while it was carried over, or lost): its answer hands the lock back with a RELEASE, and until
        then the session owns it, so an ACQUIRE of that name would get DUPLICATE_CLAIM. Such an
        ACQUIRE waits in ``_unsent`` until the RECLAIM is answered."""
        let_go = (lock for lock in session.reclaims.values() if lock._released or lock._lost.reason is not None)
        return any(lock.name == name for lock in let_go)

    def _send_held_back(self) -> None:
        """An owned RECLAIM was answered: the ACQUIREs held back for it go out (``_handing_back``)."""
        for pending in list(self._unsent):
            self._unsent.remove(pending)
            self._send_acquire(pending)  # back in ``_unsent`` while it is still held

    def _send_acquire(self, pending: PendingAcquire) -> None:
        if pending.future.done() or pending.abandoned:
            return
        session = self._session
        if session is None or session.ended or self._holding_acquires or self._handing_back(session, pending.name):
            if pending not in self._unsent:
                # Sent after the next WELCOME (and its RECLAIMs), or once a hand-back is done.
                self._unsent.append(pending)
            return
        refusal = self._claim_refusal(session, pending)
        if refusal is not None:
            if pending.wait_handle is not None:
                pending.wait_handle.cancel()
                pending.wait_handle = None
            pending.future.set_exception(refusal)
            return
        wait_ms = self._wait_left(pending)
        pending.forget_ticket()  # a new place at the tail
        self._register_request(session, pending, reclaim=False)
        if session.version == 2:
            message = wire.Acquire(
                pending.request_id, pending.lease_ms, wait_ms, pending.name, pending.mode, pending.limit, pending.value
            )
        else:  # limit 0 is version 1's neutral field: a plain lock
            message = wire.Acquire(pending.request_id, pending.lease_ms, wait_ms, pending.name)
        self._send(session, message)

    @staticmethod
    def _claim_refusal(session: Session, pending: PendingAcquire) -> InvalidArgumentError | None:
        """Why this connection's server cannot take the claim (a kind or value it does not know), or None."""
        welcome = session.welcome
        if session.version == 1 and (pending.mode != "exclusive" or pending.limit > 1 or pending.value):
            what = "a shared lock" if pending.mode != "exclusive" else "a semaphore" if pending.limit > 1 else "a value"
            return InvalidArgumentError(
                f'Cannot acquire lock "{pending.name}": {what} needs protocol version 2, and lockd at '
                f"{session.addr} speaks version 1",
                lock_name=pending.name,
            )
        if len(pending.value) > welcome.value_bytes_max:
            return InvalidArgumentError(_value_too_long("acquire", pending.name, len(pending.value), welcome), lock_name=pending.name)
        return None

    def _wait_bound_passed(self, pending: PendingAcquire) -> None:
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

    def _abandon(self, pending: PendingAcquire, error: BaseException | None) -> None:
        """The caller gave up (wait bound, cancellation): cancel the claim; a racing grant is released."""
        if pending.abandoned:
            return
        pending.abandoned = True
        if pending.wait_handle is not None:
            pending.wait_handle.cancel()
            pending.wait_handle = None
        if pending in self._unsent:
            self._unsent.remove(pending)
        self._out_of_carry(pending)
        if error is not None and not pending.future.done():
            pending.future.set_exception(error)
        elif not pending.future.done():
            pending.future.cancel()
        session = self._session
        if session is not None and session.pending.get(pending.request_id) is pending:
            # Keep it in the table: its CANCELLED / WAIT_TIMEOUT / ACQUIRED still arrives.
            self._send_release(session, 0, pending.name, 0)

    async def _release(self, lock: Lock) -> None:
        """Sends RELEASE; the lock stays owned (heartbeats, deadline) until the answer comes. A lock
        whose RECLAIM is on its way is released once that is answered (kept; done if void); one
        waiting to be carried over is done at once, and what its RECLAIM confirms is released."""
        future: asyncio.Future[None]
        if lock._phase != "held" or lock._reclaim_session is not None:
            reclaim_session = lock._reclaim_session
            if reclaim_session is not None and not reclaim_session.ended:
                future = self._running_loop().create_future()
                lock._release_future = future
                await future
                return
            # Being carried over (no RELEASE can be sent): done at once. Its RECLAIM still goes
            # out while its deadline runs, and what it confirms is released, so the lock is free
            # at once rather than held back by the new leader until the window's end.
            if lock._phase == "suspended":
                self._out_of_carry(lock)
            return
        session = lock._session
        if session.owned.get(lock._acquire_id) is not lock:
            return
        if session.ended:
            del session.owned[lock._acquire_id]
            return  # the session that held it is gone, and so is the ownership
        future = self._running_loop().create_future()
        lock._release_future = future
        request_id = self._send_release(session, lock.token, lock.name, lock._acquire_id)
        session.releases[request_id] = lock
        await future

    def _release_done(self, lock: Lock, error: BaseException | None = None) -> None:
        future = lock._release_future
        if future is not None and not future.done():
            if error is None:
                future.set_result(None)
            else:
                future.set_exception(error)

    def _send_release(self, session: Session, token: int, name: str, acquire_id: int) -> int:
        """Sends RELEASE; the ledger expects its answer, which also ends what may come for the
        ACQUIRE ``acquire_id`` (0: a token-0 cancel)."""
        request_id = self._new_request_id(session)
        session.ledger.release_sent(request_id, name, acquire_id)
        self._send(session, wire.Release(request_id, token, name))
        return request_id

    def _ownership_over(self, session: Session, lock: Lock, reason: str, error: BaseException | None = None) -> None:
        """The ownership ended for this client: a held lock reports lost, a lock being released is done."""
        if session.owned.get(lock._acquire_id) is lock:
            del session.owned[lock._acquire_id]
        lock._cancel_deadline()
        if lock._release_future is not None:
            for request_id in [rid for rid, held in session.releases.items() if held is lock]:
                del session.releases[request_id]
            self._release_done(lock, error)
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
        if running is not loop or not lock._tracked():
            return
        if now_ms(loop) >= lock.deadline_ms:
            self._deadline_passed(lock)

    def _deadline_passed(self, lock: Lock, *, final: bool = False) -> None:
        """The local lease deadline passed with no newer confirmation: the lock is lost, or, made
        with ``suspend=True`` where it can still be carried over, suspended.

        ``final``: another thread saw the deadline pass (lockd.sync); a confirmation that came
        after that cannot revive the ownership.
        """
        lock._cancel_deadline()
        if not lock._tracked():
            return
        loop = self._running_loop()
        if not final and now_ms(loop) < lock.deadline_ms:  # a late ACK moved it
            lock._arm_deadline(loop)
            return
        if lock._phase == "reclaiming":
            carry = lock._carry
            if lock._suspend and not lock._released and not (carry is not None and carry.window_over):
                logger.warning("lockd lock %r suspended: not confirmed by a new leader in time", lock.name)
                lock._set_suspended(True)
            else:
                if not lock._released:
                    logger.warning("lockd lock %r lost: not carried over before its local deadline", lock.name)
                self._carried_lost(lock, "failover" if lock._suspend else "lease_unconfirmed")
            return
        session = lock._session
        releasing = lock._release_future is not None
        if not releasing and lock._suspend and not final:
            # Suspended, not lost: an acknowledged heartbeat (no LEASE_EXPIRED before it) or a
            # kept reclaim confirms it again.
            logger.warning("lockd lock %r suspended: lease not confirmed by the server in time", lock.name)
            lock._set_suspended(True)
            return
        if not releasing:
            logger.warning("lockd lock %r lost: lease not confirmed by the server in time", lock.name)
        self._ownership_over(session, lock, "lease_unconfirmed")
        if not releasing:
            # Best effort: if the server still counts it as ours, let the next waiter have it.
            self._send_release(session, lock.token, lock.name, lock._acquire_id)
        self._schedule_heartbeat(session)

    # -- heartbeats and silence ----------------------------------------------------------

    def _heartbeat_interval_ms(self, session: Session) -> float:
        welcome = session.welcome
        shortest = float(welcome.io_timeout_ms)
        for lock in (*session.owned.values(), *session.reclaims.values()):
            shortest = min(shortest, lock.lease_ms)
        for pending in session.pending.values():
            if pending.abandoned:
                continue
            asked = pending.lease_ms or welcome.lease_default_ms
            shortest = min(shortest, max(LEASE_MS_MIN, min(asked, welcome.lease_max_ms)))
        return max(1.0, shortest / 3)

    def _schedule_heartbeat(self, session: Session) -> None:
        if session.ended or self._closed:
            return
        loop = self._running_loop()
        if session.heartbeat_handle is not None:
            session.heartbeat_handle.cancel()
        due_ms = session.last_heartbeat_sent_ms + self._heartbeat_interval_ms(session)
        delay_s = max(0.0, (due_ms - now_ms(loop)) / 1000)
        session.heartbeat_handle = loop.call_later(delay_s, self._heartbeat_due, session)

    def _heartbeat_due(self, session: Session) -> None:
        session.heartbeat_handle = None
        if session.ended or self._closed:
            return
        now = now_ms(self._running_loop())
        request_id = self._new_request_id(session)
        session.heartbeats[request_id] = now
        session.ledger.heartbeat_sent(request_id)
        session.last_heartbeat_sent_ms = now
        self._send(session, wire.Heartbeat(request_id))
        self._arm_silence(session)
        self._schedule_heartbeat(session)

    def _silence_ms(self, session: Session) -> float:
        silence_ms = float(session.welcome.io_timeout_ms)
        if len(self.addrs) > 1 or self._takes_reclaims(session):
            # A frozen or cut-off cluster leader: another node takes over meanwhile; and claims
            # are carried over to a new connection (a single node moves them) well before the
            # deadlines of long leases.
            silence_ms = min(silence_ms, CLUSTER_SILENCE_MS)
        return silence_ms

    def _arm_silence(self, session: Session) -> None:
        """The silence check runs on its own timer: ``_silence_ms`` after the oldest unanswered
        heartbeat (and after the last frame heard), not at the next heartbeat."""
        if session.ended or session.silence_handle is not None or not session.heartbeats:
            return
        loop = self._running_loop()
        due_ms = max(min(session.heartbeats.values()), session.last_frame_ms) + self._silence_ms(session)
        session.silence_handle = loop.call_later(max(0.0, (due_ms - now_ms(loop)) / 1000), self._silence_due, session)

    def _silence_due(self, session: Session) -> None:
        session.silence_handle = None
        if session.ended or self._closed or not session.heartbeats:
            return
        now = now_ms(self._running_loop())
        oldest = min(session.heartbeats.values())
        silence_ms = self._silence_ms(session)
        if now - oldest >= silence_ms and now - session.last_frame_ms >= silence_ms:
            # No answer for that long: the server closed its side by now, or the path is dead, or
            # (cluster) the leader froze or was cut off.
            logger.warning("lockd connection to %s unanswered for %d ms; reconnecting", session.addr, now - oldest)
            self._leave_silent(session)
            return
        self._arm_silence(session)

    def _leave_silent(self, session: Session) -> None:
        if len(self.addrs) > 1:
            # That node may be frozen: a new connection to it would wait out the connect timeout.
            self._avoid, self._preferred = session.addr, None
        self._end_session(session, None, abandoned=True)

    # -- reading --------------------------------------------------------------------------

    async def _read_loop(self, session: Session) -> None:
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
            logger.info("lockd connection to %s failed: %s", session.addr, error)
        except asyncio.CancelledError:
            return  # the client stopped reading (the connection is given up or closing)
        self._end_session(session, None)

    def _on_message(self, session: Session, message: wire.Message) -> None:
        if session.ended:
            return  # frames after a closing ERROR are ignored
        loop = self._running_loop()
        session.last_frame_ms = now_ms(loop)
        if not isinstance(
            message,
            (
                wire.Acquired, wire.HeartbeatAck, wire.Released, wire.Error, wire.Queued, wire.Resumed,
                wire.ValueSet, wire.LockState, wire.Watching, wire.WatchEnded,
            ),
        ):
            self._violation(session, f"it sent {type(message).__name__.upper()} after WELCOME")
            return
        closing = isinstance(message, wire.Error) and message.request_id != 0 and message.code in _CLOSING
        if message.request_id != 0 and not closing:
            misfit = session.ledger.accept(message)
            if misfit is not None:
                self._violation(session, misfit)
                return
        if isinstance(message, wire.Acquired):
            if message.request_id in session.downgrades:
                self._on_downgraded(session, message)
            elif message.request_id in session.reclaims:
                self._on_reclaim_kept(session, message)
                self._send_held_back()  # after the RELEASE that hands a lock let go of back
            else:
                self._on_acquired(session, message)
        elif isinstance(message, wire.HeartbeatAck):
            self._on_heartbeat_ack(session, message)
        elif isinstance(message, wire.Released):
            lock = session.releases.get(message.request_id)
            if lock is not None:
                self._ownership_over(session, lock, "")
                self._schedule_heartbeat(session)
        elif isinstance(message, wire.Error):
            self._on_error(session, message)
        elif isinstance(message, wire.Resumed):
            self._on_resumed(session, message)
        elif isinstance(message, wire.Queued):
            self._on_queued(session, message)
        else:
            self._on_look(session, message)

    def _on_acquired(self, session: Session, message: wire.Acquired) -> None:
        loop = self._running_loop()
        pending = session.pending.pop(message.request_id, None)
        if pending is None:
            return
        if pending.wait_handle is not None:
            pending.wait_handle.cancel()
            pending.wait_handle = None
        self._out_of_carry(pending)
        if pending.abandoned or pending.future.done():
            # The caller gave up while the grant was on its way: hand it back at once.
            self._send_release(session, message.token, message.name, message.request_id)
            return
        lock = Lock(
            self,
            session,
            message.name,
            message.token,
            message.lease_ms,
            message.request_id,
            suspend=pending.suspend,
            grant=message,
            value=pending.value,
        )
        self._take_grant(session, lock, message)
        lock._confirmed_send_ms = max(pending.sent_ms, session.last_acked_heartbeat_send_ms)
        session.owned[message.request_id] = lock
        if now_ms(loop) >= lock.deadline_ms:
            # Granted too late to be confirmed (a long wait without acknowledged heartbeats):
            # it arrives lost, and goes back to the server at once.
            self._ownership_over(session, lock, "lease_unconfirmed")
            self._send_release(session, lock.token, lock.name, lock._acquire_id)
        else:
            lock._arm_deadline(loop)
        pending.future.set_result(lock)
        self._schedule_heartbeat(session)

    @staticmethod
    def _take_grant(session: Session, lock: Lock, message: wire.Acquired) -> None:
        """What a new leader checks when the claim is carried over: this grant's ticket (for this
        connection's term and session, which its carry names; none: not carried over)."""
        lock._ticket = message.ticket if session.takes_reclaims else wire.EMPTY_TICKET

    def _on_reclaim_kept(self, session: Session, message: wire.Acquired) -> None:
        """ACQUIRED answering an owned RECLAIM (same token, checked): the lock is confirmed on this
        connection, its deadline counted from the RECLAIM's send time."""
        loop = self._running_loop()
        lock = session.reclaims.pop(message.request_id)
        sent_ms = lock._reclaim_sent_ms
        lock._reclaim_session, lock._reclaim_id = None, 0
        self._out_of_carry(lock)
        if lock._lost.reason is not None or lock._released:
            # Reported lost meanwhile (never revived), or released while carried over: hand it back.
            request_id = self._send_release(session, message.token, message.name, message.request_id)
            future = lock._release_future
            if lock._released and future is not None and not future.done():
                # release() waits for this: it resolves on RELEASED.
                lock._session, lock._acquire_id = session, message.request_id
                session.owned[message.request_id] = lock
                session.releases[request_id] = lock
            return
        lock._session = session
        lock._acquire_id = message.request_id
        session.owned[message.request_id] = lock
        self._take_grant(session, lock, message)
        lock.lease_ms = message.lease_ms
        lock._confirmed_send_ms = max(sent_ms, session.last_acked_heartbeat_send_ms)
        was_suspended = lock._phase == "suspended"
        lock._phase = "suspended" if was_suspended else "held"
        logger.info("lockd lock %r carried over to %s (token %d)", lock.name, session.addr, lock.token)
        if now_ms(loop) < lock.deadline_ms:
            lock._phase = "held"
            lock._arm_deadline(loop)
            if was_suspended:
                lock._set_suspended(False)
        elif lock._suspend:
            # Kept, but confirmed too late to count as held: suspended until a heartbeat confirms it.
            if not was_suspended:
                lock._set_suspended(True)
        else:
            self._ownership_over(session, lock, "lease_unconfirmed")
            self._send_release(session, lock.token, lock.name, lock._acquire_id)
        self._schedule_heartbeat(session)

    def _on_queued(self, session: Session, message: wire.Queued) -> None:
        """QUEUED: its ticket and order fields are what a new leader needs to keep the claim's place."""
        pending = session.pending.get(message.request_id)
        if pending is None or pending.abandoned:
            return
        self._out_of_carry(pending)
        if message.ticket:
            pending.ticket = message.ticket
            pending.ticket_session_id = session.welcome.session_id
            pending.order_term = message.order_term
            pending.order_seq = message.order_seq
        else:
            pending.forget_ticket()

    def _on_heartbeat_ack(self, session: Session, message: wire.HeartbeatAck) -> None:
        loop = self._running_loop()
        sent_ms = session.heartbeats.pop(message.request_id, None)
        if sent_ms is None:
            return
        # Older heartbeats answered out of order? They cannot be: the ACKs keep send order.
        for request_id in [rid for rid, at in session.heartbeats.items() if at < sent_ms]:
            del session.heartbeats[request_id]
        session.last_acked_heartbeat_send_ms = max(session.last_acked_heartbeat_send_ms, sent_ms)
        now = now_ms(loop)
        for lock in list(session.owned.values()):
            if sent_ms <= lock._confirmed_send_ms:
                continue
            lock._confirmed_send_ms = sent_ms
            if lock._phase != "suspended":
                lock._arm_deadline(loop)
            elif now < lock.deadline_ms and lock._lost.reason is None and not lock._released:
                # No LEASE_EXPIRED came before this ACK (reply order): the lease ran on without a
                # break, and this heartbeat renewed it in time.
                lock._set_suspended(False)
                lock._arm_deadline(loop)

    def _on_resumed(self, session: Session, message: wire.Resumed) -> None:
        if message.request_id != session.resume_id:
            return
        session.resume_id = 0
        logger.info("lockd at %s: RESUMED %s (%d ms of its window left)", session.addr, message.outcome, message.window_left_ms)
        # The new server has decided about the old session: its socket is closed now.
        for carry in self._carries:
            if carry.kept is not None:
                self._retire(carry.kept)
                carry.kept = None

    def _on_error(self, session: Session, message: wire.Error) -> None:
        if message.request_id == 0 or message.code in _CLOSING:
            # After WELCOME, request id 0 closes the session unless it answers a request whose
            # own id was 0 (INVALID_ARGUMENT), which this client never sends; so does a code that
            # always closes the connection, whatever its request id.
            if message.request_id == 0 and message.code == InvalidArgumentError.code:
                logger.warning("lockd server %s: %s", session.addr, message.message)
            else:
                logger.info("lockd server %s closes the session: %s", session.addr, message.message)
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
        if message.request_id == session.resume_id and session.resume_id != 0:
            # RESUME refused (INVALID_ARGUMENT): nothing is moved; each RECLAIM gets its own answer.
            logger.warning("lockd at %s refused RESUME: %s", session.addr, message.message)
            self._on_resumed(session, wire.Resumed(message.request_id, "none", 0))
            return
        reclaimed = session.reclaims.pop(message.request_id, None)
        if reclaimed is not None:
            # CLAIM_VOID (or another refusal): the lock could not be carried over.
            reclaimed._reclaim_session, reclaimed._reclaim_id = None, 0
            logger.warning("lockd lock %r not carried over: %s", reclaimed.name, message.message)
            self._carried_lost(reclaimed, "failover", error)
            self._send_held_back()
            self._schedule_heartbeat(session)
            return
        if self._on_look_error(session, message.request_id, error):
            return
        pending = session.pending.pop(message.request_id, None)
        if pending is not None:
            if pending.wait_handle is not None:
                pending.wait_handle.cancel()
                pending.wait_handle = None
            self._out_of_carry(pending)
            if not pending.abandoned and not pending.future.done():
                pending.future.set_exception(error)
            self._schedule_heartbeat(session)
            return
        lock = session.releases.get(message.request_id)
        if lock is not None:  # NOT_OWNER: the server had no such ownership
            self._ownership_over(session, lock, "", error)
            self._schedule_heartbeat(session)

    # -- looking at locks: QUERY, WATCH, SET_VALUE (protocol version 2) ------------------

    def _version_1_refusal(self, session: Session, what: str, name: str) -> InvalidArgumentError:
        return InvalidArgumentError(
            f"Cannot {what}: it needs protocol version 2, and lockd at {session.addr} speaks version 1",
            lock_name=name,
        )

    def _send_query(self, query: PendingQuery) -> None:
        if query.future.done():
            return
        session = self._session
        if session is None or session.ended or self._holding_acquires:
            self._unsent_queries.append(query)
            return
        if session.version == 1:
            query.future.set_exception(self._version_1_refusal(session, f'query lock "{query.name}"', query.name))
            return
        query.request_id = self._new_request_id(session)
        session.queries[query.request_id] = query
        session.ledger.query_sent(query.request_id, query.name)
        self._send(session, wire.Query(query.request_id, query.name))

    def _send_watch(self, session: Session, observer: Observer) -> None:
        if observer._closed:
            return
        if session.version == 1:
            if observer in self._observers:
                self._observers.remove(observer)
            observer._fail(self._version_1_refusal(session, f'observe "{observer.pattern}"', observer.pattern))
            return
        request_id = self._new_request_id(session)
        session.watches[request_id] = observer
        session.ledger.watch_sent(request_id, observer.pattern)
        observer._watch_sent(session, request_id)
        self._send(session, wire.Watch(request_id, observer.pattern))

    def _unobserve(self, observer: Observer) -> None:
        """The reader ended the observer: UNWATCH; what still comes for it is checked and dropped."""
        if observer in self._observers:
            self._observers.remove(observer)
        session, request_id = observer._session, observer._request_id
        observer._connection_ended()
        if session is not None and not session.ended and session.watches.get(request_id) is observer:
            session.ledger.unwatch_sent(request_id)
            self._send(session, wire.Unwatch(request_id))

    def _confirmed_session(self, lock: Lock, what: str) -> Session:
        """The connection ``lock`` is confirmed on, for a request about it; raises when there is none."""
        session = lock._session
        if (
            lock._phase != "held"
            or lock._reclaim_session is not None
            or session.ended
            or session.owned.get(lock._acquire_id) is not lock
        ):
            raise LockdConnectionError(
                f'Cannot {what} lock "{lock.name}": it is being carried over to a new connection; try again'
            )
        if lock._released:
            raise LockdError(f'Cannot {what} lock "{lock.name}": it was released', lock_name=lock.name)
        if session.version == 1:
            raise self._version_1_refusal(session, f'{what} lock "{lock.name}"', lock.name)
        return session

    async def _downgrade(self, lock: Lock) -> None:
        session = self._confirmed_session(lock, "downgrade")
        future: asyncio.Future[None] = self._running_loop().create_future()
        request_id = self._new_request_id(session)
        session.downgrades[request_id] = (lock, future)
        session.ledger.downgrade_sent(request_id, lock.name, lock.token)
        self._send(session, wire.Downgrade(request_id, lock.token, lock.name))
        await future

    def _on_downgraded(self, session: Session, message: wire.Acquired) -> None:
        lock, future = session.downgrades.pop(message.request_id)
        lock.mode, lock.write_generation = "shared", message.write_generation
        self._take_grant(session, lock, message)  # a ticket names the mode: the new one counts
        if not future.done():
            future.set_result(None)

    async def _set_value(self, lock: Lock, value: bytes) -> None:
        session = self._confirmed_session(lock, "set the value of")
        if len(value) > session.welcome.value_bytes_max:
            raise InvalidArgumentError(
                _value_too_long("set the value of", lock.name, len(value), session.welcome), lock_name=lock.name
            )
        future: asyncio.Future[None] = self._running_loop().create_future()
        request_id = self._new_request_id(session)
        session.value_sets[request_id] = (lock, value, future)
        session.ledger.set_value_sent(request_id, lock.name)
        self._send(session, wire.SetValue(request_id, lock.token, lock.name, value))
        await future

    def _on_look(
        self, session: Session, message: wire.ValueSet | wire.LockState | wire.Watching | wire.WatchEnded
    ) -> None:
        """VALUE_SET, LOCK_STATE, WATCHING, WATCH_ENDED (each checked by the ledger already)."""
        request_id = message.request_id
        if isinstance(message, wire.ValueSet):
            lock, value, future = session.value_sets.pop(request_id)
            lock.value = value
            if not future.done():
                future.set_result(None)
        elif isinstance(message, wire.LockState):
            query = session.queries.pop(request_id, None)
            if query is not None:
                if not query.future.done():
                    query.future.set_result(LockState.from_wire(message))
                return
            observer = session.watches.get(request_id)
            if observer is not None:
                too_many = observer._push(LockState.from_wire(message))
                if too_many is not None:
                    self._violation(session, too_many)
        elif isinstance(message, wire.Watching):
            observer = session.watches.get(request_id)
            if observer is not None and observer._request_id == request_id:
                observer._on_watching()
        else:
            observer = session.watches.pop(request_id, None)
            if observer is not None and observer._request_id == request_id and observer in self._observers:
                self._observers.remove(observer)
                pattern = observer.pattern
                if message.reason == "too_many_locks":
                    observer._fail(
                        LimitExceededError(f'Cannot observe "{pattern}": it matches too many locks', lock_name=pattern)
                    )
                else:
                    observer._fail(
                        LockdError(f'Cannot observe "{pattern}": the server ended the watch ({message.reason})', lock_name=pattern)
                    )

    def _on_look_error(self, session: Session, request_id: int, error: LockdError) -> bool:
        """An ERROR answering a QUERY, WATCH or SET_VALUE: handed to its caller; False for another request."""
        query = session.queries.pop(request_id, None)
        if query is not None:
            if not query.future.done():
                query.future.set_exception(error)
            return True
        observer = session.watches.pop(request_id, None)
        if observer is not None:
            if observer in self._observers:
                self._observers.remove(observer)
            observer._fail(error)
            return True
        value_set = session.value_sets.pop(request_id, None)
        if value_set is not None:
            if not value_set[2].done():
                value_set[2].set_exception(error)
            return True
        downgrade = session.downgrades.pop(request_id, None)
        if downgrade is not None:
            if not downgrade[1].done():
                downgrade[1].set_exception(error)
            return True
        return False

    def _looks_ended(self, session: Session) -> None:
        """The connection ended: queries go to the next one, observers watch again there; a value
        being set is unknown (retryable error)."""
        for query in session.queries.values():
            if not query.future.done():
                self._unsent_queries.append(query)
        session.queries.clear()
        for observer in session.watches.values():
            if observer._session is session:
                observer._connection_ended()
        session.watches.clear()
        for lock, _value, future in session.value_sets.values():
            if not future.done():
                future.set_exception(
                    LockdConnectionError(f'Cannot set the value of lock "{lock.name}": the connection ended first')
                )
        session.value_sets.clear()
        for lock, future in session.downgrades.values():
            if not future.done():
                future.set_exception(
                    LockdConnectionError(f'Cannot downgrade lock "{lock.name}": the connection ended first')
                )
        session.downgrades.clear()

    # -- the end of a connection --------------------------------------------------------

    def _end_session(
        self, session: Session, close_code: int | None, *, abandoned: bool = False, close_socket: bool = True
    ) -> None:
        """The connection ended. Owned locks are lost, or carried over (``_carries_over``);
        waiting acquires wait for the next session, carried over with their place or at the tail.

        ``abandoned``: the client gave it up (silent); with claims to carry its socket stays open.
        """
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
        for handle in (session.heartbeat_handle, session.silence_handle):
            if handle is not None:
                handle.cancel()
        if self._session is session:
            self._session = None
        loop = self._running_loop()
        now = now_ms(loop)
        welcome = session.welcome
        if session.version == 2 and not session.violated:
            self._previous = (welcome.term, welcome.session_id)
        carry: Carry | None = None
        if self._carries_over(session, close_code, abandoned):
            carry = Carry(
                term=welcome.term,
                session_id=welcome.session_id,
                lost_ms=now,
                window_end_ms=now + welcome.reclaim_window_ms,
                kept=session if abandoned else None,
            )
        if carry is not None and carry.kept is not None:
            if session.reader_task is not None and session.reader_task is not asyncio.current_task():
                session.reader_task.cancel()  # unread from now on
        elif close_socket:
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
        # Owned RECLAIMs on their way stay with their own carry (sent again next time); a lock
        # released meanwhile is done.
        for lock in session.reclaims.values():
            lock._reclaim_session, lock._reclaim_id = None, 0
            if lock._released:
                self._release_done(lock)
        session.reclaims.clear()
        # Locks being released are done (the session is gone, and so is the ownership); the
        # others are lost, or carried over while their deadlines run.
        for lock in list(session.owned.values()):
            if carry is not None and lock._release_future is None and lock._ticket and lock._lost.reason is None:
                del session.owned[lock._acquire_id]
                if lock._phase != "suspended":
                    lock._phase = "reclaiming"
                lock._carry = carry
                carry.locks.append(lock)
                if now >= lock.deadline_ms:
                    self._deadline_passed(lock)
            else:
                self._ownership_over(session, lock, reason)
        session.owned.clear()
        session.releases.clear()
        self._looks_ended(session)
        waiting = [p for p in session.pending.values() if not p.abandoned and not p.future.done()]
        session.pending.clear()
        if self._closed:
            self._fail_unsent(LockdConnectionError("The client is closed", retryable=False), waiting)
            return
        if not self._reconnect:
            self._failed = True
            self._fail_unsent(LockdConnectionError(f"The connection to lockd at {self.addr} was lost"), waiting)
            return
        for pending in waiting:
            pending.reclaim = False
            if pending.carry is not None:
                continue  # a queued RECLAIM of an older carry: sent again with it
            if carry is not None and pending.ticket and pending.ticket_session_id == welcome.session_id:
                pending.carry = carry
                carry.queued.append(pending)
            else:
                # Waiting claims rejoin the tail of their queues on the next session.
                pending.forget_ticket()
                self._unsent.append(pending)
        if carry is not None:
            if len(carry):
                self._carries.append(carry)
                delay_s = max(0.0, (carry.window_end_ms - now) / 1000)
                carry.timer = loop.call_later(delay_s, self._carry_window_ended, carry)
            elif carry.kept is not None:
                self._retire(carry.kept)
                carry.kept = None
        # A fail-over with the new leader named: follow it at once, without back-off.
        self._schedule_reconnect(at_once=close_code == NotLeaderError.code and self._preferred is not None)

    def _violation(self, session: Session, what: str) -> None:
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

    def _fail_unsent(self, error: BaseException, extra: list[PendingAcquire] | None = None) -> None:
        queries, self._unsent_queries = self._unsent_queries, []
        for query in queries:
            if not query.future.done():
                query.future.set_exception(error)
        if self._failed or self._closed:
            for observer in self._observers:
                observer._fail(error) if self._failed else observer._end()
            self._observers.clear()
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
    connect_timeout_ms: float | None = None,
    reconnect: bool = True,
    reclaim: bool = True,
    on_protocol_error: Callable[[ServerProtocolError], None] | None = None,
    on_value_dropped: Callable[[str, int, int], None] | None = None,
) -> _Connecting:
    """Connects to a lockd server: ``client = await connect(...)`` or ``async with connect(...) as client``.

    ``ssl_context`` turns TLS on (see ``lockd.tls_context`` for mutual TLS). ``connect_timeout_ms``
    bounds dial + TLS + HELLO/WELCOME, here and on every reconnect (default 5000 ms; 10000 ms with
    several addresses). With ``reconnect`` (default),
    a lost connection is re-dialled with full-jitter back-off and waiting acquires are re-sent.
    ``addrs`` lists the nodes of a lockd cluster (docs/cluster.md): they are tried in order, a
    NOT_LEADER naming the leader is followed at once, and the first connect goes on over the list
    until ``connect_timeout_ms`` has passed (a fail-over in progress). With ``reclaim`` (default)
    and a server that speaks protocol version 2, locks and waiting claims are carried over to a
    new leader after a fail-over (docs/cluster.md); without it, or with a server of before version
    2, a session the leader ends with NOT_LEADER loses its locks with reason ``failover``. A claim
    carried over to a leader that takes shorter values than its value goes without it (kept, not
    lost for its value; its ``value`` reads empty from then on): logged as a warning, and
    ``on_value_dropped(name, value_bytes, value_bytes_max)`` is called if given.
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
            reclaim=reclaim,
            on_protocol_error=on_protocol_error,
            on_value_dropped=on_value_dropped,
        )
    )



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
