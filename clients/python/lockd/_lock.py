"""What the client keeps per claim and per connection: an owned ``Lock``, an acquire still waiting,
a session, and the claims a lost version-2 connection carries to the next one.

A ``Lock``'s phase (legal transitions, each made by the client in ``_client.py``):

- ``held`` → ``reclaiming``: its connection ended in a way that lets the claim be carried over
  (docs/cluster.md, "What clients see during a fail-over") while its local deadline had not
  passed; it still counts as held (no event);
- ``reclaiming`` → ``held``: the ACQUIRED answering its RECLAIM re-confirmed it (same token);
- ``reclaiming`` → ``suspended``: its local deadline passed first, and it was acquired with
  ``suspend=True`` (``held`` → ``suspended`` too, when the deadline passes on a silent connection,
  which is then given up to reclaim it);
- ``suspended`` → ``held``: re-confirmed as above (the suspend callbacks hear ``False``);
- any of them → lost (``lost`` set once, final) or released (``release()``, final).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from . import _codec as wire
from ._checks import ReplyLedger
from .errors import LockdError, LockLostError

if TYPE_CHECKING:
    from ._client import Client

logger = logging.getLogger("lockd")

Phase = Literal["held", "reclaiming", "suspended"]


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


def now_ms(loop: asyncio.AbstractEventLoop) -> float:
    return loop.time() * 1000


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

    def __init__(
        self,
        client: Client,
        session: Session,
        name: str,
        token: int,
        lease_ms: int,
        acquire_id: int,
        *,
        suspend: bool = False,
        grant: wire.Acquired | None = None,
        value: bytes = wire.EMPTY_VALUE,
    ) -> None:
        self._client = client
        #: The connection it was confirmed on last (while reclaiming: the one that was lost).
        self._session = session
        #: The lock's name.
        self.name = name
        #: The fencing token, larger than every token issued before (about 1.8e15); a lock
        #: carried over to a new leader keeps it.
        self.token = token
        #: The effective lease in ms, after the server's clamping (the new leader's, once carried over).
        self.lease_ms = lease_ms
        #: ``"exclusive"`` or ``"shared"`` (protocol version 2; version 1 has exclusive locks only).
        self.mode: str = str(grant.mode) if grant is not None else "exclusive"
        #: The lock's limit: N for a semaphore of N, else 1.
        self.limit: int = grant.limit if grant is not None else 1
        #: The semaphore slot this ownership holds, 0..limit-1 (0 for exclusive and shared locks):
        #: a resource that must reject stale holders of a slot keeps the last token per slot.
        self.slot: int = grant.slot if grant is not None else 0
        #: A shared grant: the token of the lock's last exclusive grant (0 = none known), so a
        #: reader can tell whether what it reads was written by the newest writer; else 0.
        self.write_generation: int = grant.write_generation if grant is not None else 0
        #: The holder's value as the server has it (the ACQUIRE's, then each ``set_value``'s).
        self.value: bytes = value
        self._lost = LostEvent(self._probe)
        #: Request id of the ACQUIRE (or RECLAIM) its ownership is keyed by on ``_session``.
        self._acquire_id = acquire_id
        self._released = False
        self._confirmed_send_ms = 0.0
        self._deadline_handle: asyncio.TimerHandle | None = None
        self._lost_callbacks: list[Callable[[str], None]] = []
        self._suspend_callbacks: list[Callable[[bool], None]] = []
        self._release_future: asyncio.Future[None] | None = None
        self._suspend = suspend
        self._phase: Phase = "held"
        #: The ticket of its last ACQUIRED (its connection's term and session id: its ``_carry``'s).
        self._ticket = wire.EMPTY_TICKET
        #: While reclaiming or suspended: the lost connection's claims it belongs to.
        self._carry: Carry | None = None
        #: An owned RECLAIM on its way: the connection it was sent on, its request id, its send time.
        self._reclaim_session: Session | None = None
        self._reclaim_id = 0
        self._reclaim_sent_ms = 0.0

    @property
    def lost(self) -> LostEvent:
        """Set when ownership ends without ``release()``; ``lost.reason`` says why. Reading it (and
        ``lost.is_set()``) checks the local lease deadline against the clock first."""
        self._probe()
        return self._lost

    @property
    def suspended(self) -> bool:
        """True while a lock acquired with ``suspend=True`` waits to be carried over to a new
        leader after its local deadline passed: do no unfenced work meanwhile (fenced writes stay
        safe). It becomes held again (``add_suspend_callback`` hears ``False``) or lost
        (``failover``)."""
        self._probe()
        return self._phase == "suspended" and self._lost.reason is None and not self._released

    @property
    def state(self) -> str:
        """``"held"``, ``"suspended"``, ``"releasing"`` (release() called, no answer yet),
        ``"released"`` or ``"lost"``; like ``lost``, checked against the local lease deadline when
        read. A lock being carried over to a new leader after a fail-over is ``"held"``."""
        self._probe()
        if self._lost._value:  # type: ignore[attr-defined]
            return "lost"
        if self._released:
            future = self._release_future
            return "releasing" if future is not None and not future.done() else "released"
        return "suspended" if self._phase == "suspended" else "held"

    @property
    def deadline_ms(self) -> float:
        """The local lease deadline on the event loop clock (ms); past it the lock counts as lost
        (or suspended, for ``suspend=True`` while it is being carried over)."""
        return local_deadline_ms(self._confirmed_send_ms, self.lease_ms, self._session.welcome.io_timeout_ms)

    def check(self) -> None:
        """Raises ``LockLostError`` when the lock was lost; call it before acting on the lock."""
        if self.lost.error is not None:
            raise self.lost.error
        if self._released:
            raise LockdError(f'Lock "{self.name}" was released')

    async def set_value(self, value: bytes | str) -> None:
        """Replaces the holder's value (SET_VALUE, protocol version 2): what ``query`` and
        ``observe`` show others, e.g. a leader's address. A ``str`` is sent as UTF-8. Raises
        ``LockLostError`` when the lock was lost, ``NotOwnerError`` when the server no longer has
        this ownership, ``InvalidArgumentError`` for a value longer than the server takes, and a
        retryable ``LockdConnectionError`` while the lock is being carried over to a new connection."""
        self.check()
        await self._client._set_value(self, value_bytes(value))

    async def downgrade(self) -> None:
        """Makes this exclusive ownership shared, in place (DOWNGRADE, protocol version 2): same
        token, no moment without the lock; readers waiting at the head of the queue are granted
        beside it. ``mode`` becomes ``"shared"`` and ``write_generation`` this lock's own token.
        Quiet when it is shared already. There is no upgrade (two readers upgrading at once would
        wait for each other forever): release, then acquire exclusive. Raises as ``set_value``
        (``InvalidArgumentError`` on a semaphore or a lock a server rule makes exclusive)."""
        self.check()
        if self.mode == "shared":
            return
        await self._client._downgrade(self)

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

    def add_suspend_callback(self, callback: Callable[[bool], None]) -> None:
        """Calls ``callback(True)`` on the event loop when the lock is suspended and
        ``callback(False)`` when it is held again (at once with ``True`` if it is suspended now).
        Only a lock acquired with ``suspend=True`` is ever suspended."""
        self._suspend_callbacks.append(callback)
        if self.suspended:
            self._call(callback, True)

    async def __aenter__(self) -> Lock:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.release()

    def __repr__(self) -> str:
        lost = self._lost
        state = (
            "released"
            if self._released
            else f"lost:{lost.reason}"
            if lost.reason is not None
            else "suspended"
            if self._phase == "suspended"
            else "owned"
        )
        kind = "" if (self.mode, self.limit) == ("exclusive", 1) else f" mode={self.mode} limit={self.limit} slot={self.slot}"
        return f"<Lock {self.name!r} token={self.token} lease_ms={self.lease_ms}{kind} {state}>"

    # -- internals ----------------------------------------------------------

    def _tracked(self) -> bool:
        """Whether the local deadline still decides something: held on its connection, or being
        carried over (not suspended: its deadline has passed already)."""
        if self._lost.reason is not None or self._phase == "suspended":
            return False
        if self._phase == "reclaiming":
            return self._carry is not None or self._reclaim_session is not None
        return self._session.owned.get(self._acquire_id) is self

    def _probe(self) -> None:
        """The deadline, read against the clock now (only on the client's own event loop)."""
        if self._tracked():
            self._client._check_deadline(self)

    def _arm_deadline(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._deadline_handle is not None:
            self._deadline_handle.cancel()
        delay_s = max(0.0, (self.deadline_ms - now_ms(loop)) / 1000)
        self._deadline_handle = loop.call_later(delay_s, self._client._deadline_passed, self)

    def _cancel_deadline(self) -> None:
        if self._deadline_handle is not None:
            self._deadline_handle.cancel()
            self._deadline_handle = None

    def _mark_lost(self, reason: str, cause: BaseException | None = None) -> None:
        self._cancel_deadline()
        lost = self._lost
        if self._released or lost.reason is not None:
            return
        lost.reason = reason
        lost.error = LockLostError(self.name, self.token, reason)
        lost.error.__cause__ = cause  # e.g. the ClaimVoidError a new leader answered
        lost.set()
        callbacks, self._lost_callbacks = self._lost_callbacks, []
        self._suspend_callbacks.clear()
        for callback in callbacks:
            self._call(callback, reason)

    def _set_suspended(self, suspended: bool) -> None:
        self._phase = "suspended" if suspended else "held"
        for callback in list(self._suspend_callbacks):
            self._call(callback, suspended)

    def _call(self, callback: Callable[..., None], argument: object) -> None:
        try:
            callback(argument)
        except Exception:  # a caller's callback must not break the client
            logger.exception("callback of lock %r failed", self.name)


def value_bytes(value: bytes | bytearray | memoryview | str) -> bytes:
    """A holder's value as bytes: bytes-like as is, a ``str`` as UTF-8."""
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"a lock value is bytes or str, not {type(value).__name__}")


@dataclass(eq=False)
class PendingAcquire:
    """An acquire the caller still waits for. Its request is an ACQUIRE, or a queued RECLAIM
    (``reclaim``) while it is being carried over; ``abandoned`` once the caller gave up."""

    name: str
    lease_ms: int
    deadline_ms: float | None  # loop clock; None = wait forever
    wait_ms: float | None
    future: asyncio.Future[Lock]
    suspend: bool = False
    #: What it asks for (protocol version 2): mode, limit (0: no opinion) and the holder's value.
    mode: str = "exclusive"
    limit: int = 1
    value: bytes = wire.EMPTY_VALUE
    request_id: int = 0
    sent_ms: float = 0.0
    abandoned: bool = False
    wait_handle: asyncio.TimerHandle | None = None
    reclaim: bool = False
    # Its place in the queue as a new leader checks it: the last QUEUED's ticket and order
    # fields, and that connection's session id (no ticket: it cannot be carried over).
    ticket: bytes = wire.EMPTY_TICKET
    ticket_session_id: int = 0
    order_term: int = 0
    order_seq: int = 0
    #: While it is being carried over: the lost connection's claims it belongs to.
    carry: Carry | None = None

    def forget_ticket(self) -> None:
        self.ticket = wire.EMPTY_TICKET
        self.ticket_session_id = self.order_term = self.order_seq = 0


@dataclass(eq=False)
class PendingQuery:
    """A ``query`` the caller waits for; sent again on the next connection if this one ends."""

    name: str
    future: asyncio.Future[Any]
    request_id: int = 0


@dataclass(eq=False)
class Session:
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
    pending: dict[int, PendingAcquire] = field(default_factory=dict)
    owned: dict[int, Lock] = field(default_factory=dict)
    releases: dict[int, Lock] = field(default_factory=dict)  # RELEASE request id -> lock
    #: Owned RECLAIMs waiting for their answer, by request id.
    reclaims: dict[int, Lock] = field(default_factory=dict)
    #: QUERYs waiting for their LOCK_STATE, by request id.
    queries: dict[int, PendingQuery] = field(default_factory=dict)
    #: DOWNGRADEs waiting for their ACQUIRED: the lock and the caller's future.
    downgrades: dict[int, tuple[Lock, asyncio.Future[None]]] = field(default_factory=dict)
    #: SET_VALUEs waiting for their VALUE_SET: the lock, the value, the caller's future.
    value_sets: dict[int, tuple[Lock, bytes, asyncio.Future[None]]] = field(default_factory=dict)
    #: WATCHes of this connection, by request id (each an ``Observer`` of ``_observe.py``).
    watches: dict[int, Any] = field(default_factory=dict)
    #: The RESUME waiting for its RESUMED (0: none).
    resume_id: int = 0
    heartbeats: dict[int, float] = field(default_factory=dict)  # request id -> send time
    last_acked_heartbeat_send_ms: float = 0.0
    last_heartbeat_sent_ms: float = 0.0
    last_frame_ms: float = 0.0
    heartbeat_handle: asyncio.TimerHandle | None = None
    silence_handle: asyncio.TimerHandle | None = None
    reader_task: asyncio.Task[None] | None = None
    close_code: int | None = None
    ended: bool = False
    #: Closed (or being closed) by ``Client._retire``: GOODBYE, end of stream, close.
    retired: bool = False

    def __post_init__(self) -> None:
        self.ledger = ReplyLedger(self.welcome)

    @property
    def version(self) -> int:
        return self.welcome.version

    @property
    def takes_reclaims(self) -> bool:
        """A version-2 session whose server takes reclaims (WELCOME's ``reclaimWindowMs`` > 0)."""
        return self.welcome.version == 2 and self.welcome.reclaim_window_ms > 0


@dataclass(eq=False)
class Carry:
    """The claims of one lost version-2 connection that the next connection reclaims (RESUME,
    then a RECLAIM each), until each is confirmed, void or given up, or ``window_end_ms`` passes
    (the lost connection's WELCOME ``reclaimWindowMs`` after the loss)."""

    term: int
    session_id: int
    lost_ms: float
    window_end_ms: float
    #: The lost connection when the client gave it up itself (its socket is kept open).
    kept: Session | None
    locks: list[Lock] = field(default_factory=list)
    queued: list[PendingAcquire] = field(default_factory=list)
    timer: asyncio.TimerHandle | None = None
    #: The window has passed: a suspended lock of it is lost (``failover``).
    window_over: bool = False

    def __len__(self) -> int:
        return len(self.locks) + len(self.queued)
