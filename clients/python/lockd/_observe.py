"""Looking at locks without queueing (protocol version 2, docs/protocol.md "QUERY" and "WATCH"):
the state of a lock as the client hands it out (``LockState``, ``Holder``) and ``Observer``, the
async iterator ``Client.observe`` returns.

An observer's watch lives on the client's connection; when the connection ends the client sends
the WATCH again on the next one and the server answers with a fresh snapshot (no revisions to
track). A lock the observer knew of that is not in the new snapshot (it ended meanwhile) is
reported with a state of kind ``"none"``, so the last state seen per lock is always the server's.

Like the server, an observer keeps at most one state per lock waiting for its reader: a slow
reader sees the latest state of each lock, never an unbounded backlog.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING

from . import _codec as wire

if TYPE_CHECKING:
    from ._client import Client
    from ._lock import Session

#: Most locks one observer keeps track of (each with its last kind and at most one waiting state):
#: far above what a server lets one watch match; a server that names more breaks the protocol.
OBSERVED_LOCKS_MAX = 65_536


@dataclass(frozen=True)
class Holder:
    """One owner of a lock, as QUERY and WATCH show it."""

    #: Its fencing token (the epoch of a leader).
    token: int
    #: How long it has owned the lock, in ms (at the time of the state).
    held_ms: int
    #: Its lease in ms.
    lease_ms: int
    #: ``"exclusive"`` or ``"shared"``.
    mode: str
    #: Its semaphore slot (0 for exclusive and shared locks).
    slot: int
    #: Its identity (the subject of its mutual-TLS certificate), or "".
    identity: str
    #: The client name its HELLO sent, e.g. ``lockd-python/0.1.0@host-1:4242``.
    client_name: str
    #: The value it published (b"" = none), e.g. a leader's address.
    value: bytes


@dataclass(frozen=True)
class LockState:
    """The state of one lock: the answer to ``Client.query``, or one item of ``Client.observe``."""

    #: The lock's name.
    name: str
    #: ``"none"`` (no owner and no waiter), ``"exclusive"``, ``"shared"`` or ``"semaphore"``.
    kind: str
    #: N for a semaphore of N, 1 for exclusive and shared locks, 0 for ``"none"``.
    limit: int
    #: Claims waiting in the lock's queue.
    queue_length: int
    #: Owners in all (``holders`` lists the oldest of them, as many as fit one frame).
    owners: int
    #: The owners, oldest first.
    holders: tuple[Holder, ...]
    #: What this state reports: ``"state"`` (a query's answer, a watch's snapshot), ``"granted"``,
    #: ``"ended"``, ``"value"`` (a holder's value changed) or ``"queue"`` (the queue changed).
    event: str = "state"
    #: ``"ended"`` only: how the ownership ended (``"graceful"``, ``"expired"``, ``"io_timeout"``,
    #: ``"force"``, ``"failover"``); None for the other events.
    reason: str | None = None

    @property
    def holder(self) -> Holder | None:
        """The oldest owner, or None when nobody holds the lock (for a leader election: the leader)."""
        return self.holders[0] if self.holders else None

    @staticmethod
    def from_wire(message: wire.LockState) -> LockState:
        """A checked LOCK_STATE (``_checks.lock_state_misfit`` found nothing) as a ``LockState``."""
        return LockState(
            name=message.name,
            kind=str(message.kind),
            limit=message.limit,
            queue_length=message.queue_length,
            owners=message.owners,
            holders=tuple(
                Holder(h.token, h.held_ms, h.lease_ms, str(h.mode), h.slot, h.identity, h.client_name, h.value)
                for h in message.holders
            ),
            event=str(message.event),
            reason=None if message.reason == "none" else str(message.reason),
        )


class Observer:
    """``client.observe(pattern)``: an async iterator of ``LockState``, first the current state of
    every lock the pattern matches, then one per change, until ``aclose()``, the client's
    ``close()``, or an error (the WATCH refused, or too many locks matched).

    Use it as ``async with client.observe(p) as states: async for state in states: ...``, or call
    ``await observer.aclose()`` when done: leaving an ``async for`` alone does not end the watch.
    """

    def __init__(self, client: Client, pattern: str) -> None:
        self._client = client
        #: The lock name or glob it watches.
        self.pattern = pattern
        #: States waiting for the reader, at most one per lock, oldest first.
        self._waiting: dict[str, LockState] = {}
        #: Locks whose last state had an owner or a waiter (kind other than "none").
        self._known: set[str] = set()
        #: Locks in the snapshot of the current WATCH, until its WATCHING.
        self._snapshot: set[str] = set()
        self._wake = asyncio.Event()
        self._error: BaseException | None = None
        self._closed = False
        #: The connection and request id of its current WATCH (None, 0 between connections).
        self._session: Session | None = None
        self._request_id = 0
        #: How many times its WATCH was sent (1 + one per reconnect it lived through).
        self.watches_sent = 0

    @property
    def watching(self) -> bool:
        """True from the server's WATCHING until the connection ends (then its state may be stale
        until the next connection's snapshot)."""
        return self._session is not None and self._session.watches.get(self._request_id) is self and self._live

    _live = False

    def __aiter__(self) -> Observer:
        return self

    async def __anext__(self) -> LockState:
        while True:
            if self._waiting:
                name = next(iter(self._waiting))
                return self._waiting.pop(name)
            if self._error is not None:
                error, self._error = self._error, None
                self._closed = True
                raise error
            if self._closed:
                raise StopAsyncIteration
            self._wake.clear()
            await self._wake.wait()

    async def aclose(self) -> None:
        """Ends the watch (UNWATCH); the iteration stops."""
        if self._closed:
            return
        self._closed = True
        self._waiting.clear()
        self._wake.set()
        self._client._unobserve(self)

    async def __aenter__(self) -> Observer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"<Observer {self.pattern!r} {'closed' if self._closed else 'watching' if self.watching else 'waiting'}>"

    # -- driven by the client ------------------------------------------------------------

    def _watch_sent(self, session: Session, request_id: int) -> None:
        self._session, self._request_id = session, request_id
        self._live = False
        self._snapshot = set()
        self.watches_sent += 1

    def _push(self, state: LockState) -> str | None:
        """A state from the server; what is wrong when it is one lock too many."""
        if self._closed:
            return None
        if not self._live:
            self._snapshot.add(state.name)
        if state.kind == "none":
            self._known.discard(state.name)
        else:
            self._known.add(state.name)
            if len(self._known) > OBSERVED_LOCKS_MAX:
                return f"LOCK_STATEs of more than {OBSERVED_LOCKS_MAX} locks for one WATCH"
        self._waiting[state.name] = state  # a waiting state of that lock is replaced in its place
        self._wake.set()
        return None

    def _on_watching(self) -> None:
        """The snapshot is complete: a lock known before and missing from it has ended."""
        self._live = True
        for name in sorted(self._known - self._snapshot):
            self._known.discard(name)
            self._push(LockState(name, "none", 0, 0, 0, ()))
        self._snapshot = set()

    def _connection_ended(self) -> None:
        self._session, self._request_id, self._live = None, 0, False

    def _fail(self, error: BaseException) -> None:
        if self._closed:
            return
        self._error = error
        self._session, self._request_id, self._live = None, 0, False
        self._wake.set()

    def _end(self) -> None:
        self._closed = True
        self._wake.set()
