"""A thin synchronous wrapper around the asyncio client, for threaded code and scripts.

    from lockd.sync import connect

    with connect("127.0.0.1:7400") as client:
        with client.lock("jobs/nightly", lease_ms=10_000, wait_ms=30_000) as lock:
            do_work(lock.token)        # lock.lost.is_set() turns true if ownership ends

The asyncio client runs on an event loop in a background thread (so heartbeats and the local
lease deadline keep running while the caller's thread is busy); every method blocks until the
loop has the answer. Exceptions are the same as the asyncio client's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

from ._client import Client, Lock
from ._observe import LockState, Observer
from .errors import LockLostError

__all__ = ["SyncClient", "SyncLock", "SyncLostEvent", "SyncObserver", "connect"]

T = TypeVar("T")

logger = logging.getLogger("lockd")


class SyncLostEvent(threading.Event):
    """``lock.lost`` of the synchronous API: a ``threading.Event`` plus ``reason``.

    ``is_set()`` first compares the lock's local lease deadline with the clock, on the caller's
    thread: the first look after a pause says lost even if the client's thread has not run yet.
    """

    def __init__(self, probe: Callable[[], None] | None = None) -> None:
        super().__init__()
        self.reason: str | None = None
        self.error: LockLostError | None = None
        self._probe = probe

    def is_set(self) -> bool:
        if not super().is_set() and self._probe is not None:
            self._probe()
        return super().is_set()


class SyncLock:
    """An owned lock (synchronous view). ``token`` is the fencing token."""

    def __init__(self, client: SyncClient, lock: Lock) -> None:
        self._client = client
        self._lock = lock
        self.name = lock.name
        self.token = lock.token
        self.lease_ms = lock.lease_ms
        #: As ``lockd.Lock``: ``"exclusive"`` or ``"shared"``, the lock's limit, the semaphore slot,
        #: the write generation of a shared grant.
        self.mode = lock.mode
        self.limit = lock.limit
        self.slot = lock.slot
        self.write_generation = lock.write_generation
        #: Set when ownership ends without ``release()`` (from the client's thread, or by a look at
        #: ``lost.is_set()`` past the local lease deadline).
        self.lost = SyncLostEvent(self._probe)
        lock.add_lost_callback(self._on_lost)
        self._suspend_callbacks: list[Callable[[bool], None]] = []
        lock.add_suspend_callback(self._on_suspend)

    def _on_lost(self, reason: str) -> None:
        if self.lost.reason is None:
            self.lost.reason = reason
            self.lost.error = self._lock._lost.error or LockLostError(self.name, self.token, reason)
        self.lost.set()

    def _on_suspend(self, suspended: bool) -> None:
        for callback in list(self._suspend_callbacks):
            try:
                callback(suspended)
            except Exception:  # a caller's callback must not break the client
                logger.exception("suspend callback of lock %r failed", self.name)

    @property
    def suspended(self) -> bool:
        """True while a lock acquired with ``suspend=True`` waits to be carried over to a new
        leader after its local deadline passed (see ``lockd.Lock.suspended``)."""
        lock = self._lock
        if self.lost.is_set() or lock._released:
            return False
        if lock._phase == "suspended":
            return True
        # Past the deadline by this thread's clock, before the client's thread has run.
        return self._defers_to_suspend() and time.monotonic() * 1000 >= lock.deadline_ms

    def _defers_to_suspend(self) -> bool:
        """A ``suspend=True`` lock that can be carried over: past its deadline it is suspended, not lost."""
        lock = self._lock
        return lock._suspend and lock._tracked()

    def add_suspend_callback(self, callback: Callable[[bool], None]) -> None:
        """Calls ``callback(True)`` when the lock is suspended and ``callback(False)`` when it is
        held again, on the client's thread (at once with ``True`` if it is suspended now)."""
        self._suspend_callbacks.append(callback)
        if self.suspended:
            callback(True)

    def _probe(self) -> None:
        """Past the local lease deadline by this thread's reading of the loop's clock (both are
        ``time.monotonic()``): lost now (or, being carried over with ``suspend=True``, left to the
        client's thread, which suspends it), and the client's thread follows."""
        lock = self._lock
        if not lock._tracked():
            return
        if time.monotonic() * 1000 < lock.deadline_ms:
            return
        if self._defers_to_suspend():
            return  # suspended, not lost: the client's thread decides at its deadline timer
        self._on_lost("lease_unconfirmed")
        with contextlib.suppress(RuntimeError):  # the loop is closed: nothing left to tell
            self._client._loop.call_soon_threadsafe(
                lambda: lock._client._deadline_passed(lock, final=True)
            )

    def check(self) -> None:
        """Raises ``LockLostError`` when the lock was lost."""
        if self.lost.is_set() and self.lost.error is not None:
            raise self.lost.error
        self._lock.check()

    @property
    def value(self) -> bytes:
        """The holder's value as the server has it."""
        return self._lock.value

    def set_value(self, value: bytes | str) -> None:
        """Replaces the holder's value (see ``lockd.Lock.set_value``)."""
        self._client._run(self._lock.set_value(value))

    def downgrade(self) -> None:
        """Makes the exclusive ownership shared, in place (see ``lockd.Lock.downgrade``)."""
        self._client._run(self._lock.downgrade())
        self.mode, self.write_generation = self._lock.mode, self._lock.write_generation

    def release(self) -> None:
        """Ends the ownership; quiet when it was already lost or released."""
        self._client._run(self._lock.release())

    def __enter__(self) -> SyncLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __repr__(self) -> str:
        return repr(self._lock).replace("<Lock", "<SyncLock", 1)


class SyncClient:
    """A lockd client driven from ordinary (non-async) code."""

    def __init__(self, client: Client) -> None:
        self._client = client
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="lockd-client", daemon=True)
        self._thread.start()
        self._closed = False

    def _run(self, coroutine: Coroutine[Any, Any, T], timeout_s: float | None = None) -> T:
        future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        try:
            return future.result(timeout_s)
        except BaseException:
            future.cancel()  # e.g. KeyboardInterrupt while waiting: leave the queue
            raise

    @property
    def session_id(self) -> int:
        return self._client.session_id

    @property
    def server_version(self) -> str:
        return self._client.server_version

    @property
    def protocol_version(self) -> int:
        return self._client.protocol_version

    def acquire(
        self, name: str, *, lease_ms: int = 0, wait_ms: float | None = None, suspend: bool = False, **kind: Any
    ) -> SyncLock:
        """Blocks until the lock is owned (``wait_ms`` None = no bound; ``WaitTimeoutError`` after
        it); ``suspend``, ``mode``, ``limit`` and ``value`` as in ``lockd.Client.acquire``."""

        async def acquire() -> SyncLock:
            # Built on the loop's thread, so no loss can slip between the grant and the callback.
            lock = await self._client.acquire(name, lease_ms=lease_ms, wait_ms=wait_ms, suspend=suspend, **kind)
            return SyncLock(self, lock)

        return self._run(acquire())

    def try_acquire(self, name: str, *, lease_ms: int = 0, suspend: bool = False, **kind: Any) -> SyncLock | None:
        """The lock if it is free right now, else None."""

        async def try_acquire() -> SyncLock | None:
            lock = await self._client.try_acquire(name, lease_ms=lease_ms, suspend=suspend, **kind)
            return None if lock is None else SyncLock(self, lock)

        return self._run(try_acquire())

    def query(self, name: str, *, timeout_s: float | None = None) -> LockState:
        """The state of lock ``name`` now (see ``lockd.Client.query``)."""
        return self._run(self._client.query(name), timeout_s)

    def observe(self, pattern: str) -> SyncObserver:
        """Observes ``pattern`` (see ``lockd.Client.observe``): an iterator of ``LockState`` that
        blocks for the next one; ``with client.observe(p) as states: for state in states: ...``."""

        async def observe() -> Observer:
            return self._client.observe(pattern)

        return SyncObserver(self, self._run(observe()))

    @contextlib.contextmanager
    def lock(
        self, name: str, *, lease_ms: int = 0, wait_ms: float | None = None, suspend: bool = False, **kind: Any
    ) -> Iterator[SyncLock]:
        """``with client.lock(name, ...) as lock:`` acquires, and releases on exit."""
        held = self.acquire(name, lease_ms=lease_ms, wait_ms=wait_ms, suspend=suspend, **kind)
        try:
            yield held
        finally:
            held.release()

    def close(self) -> None:
        """Closes the session and stops the background thread."""
        if self._closed:
            return
        self._closed = True
        try:
            self._run(self._client.close())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
            self._loop.close()

    def __enter__(self) -> SyncClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SyncObserver:
    """``SyncClient.observe``: iterate for the next ``LockState`` (blocking); ``next_state(timeout_s)``
    waits at most that long (``TimeoutError``); ``close()`` ends the watch."""

    def __init__(self, client: SyncClient, observer: Observer) -> None:
        self._client = client
        self._observer = observer
        self.pattern = observer.pattern

    def next_state(self, timeout_s: float | None = None) -> LockState:
        """The next state; ``StopIteration`` once the observer is closed."""
        try:
            return self._client._run(self._observer.__anext__(), timeout_s)
        except StopAsyncIteration:
            raise StopIteration from None

    def __iter__(self) -> SyncObserver:
        return self

    def __next__(self) -> LockState:
        return self.next_state()

    def close(self) -> None:
        if not self._client._closed:
            self._client._run(self._observer.aclose())

    def __enter__(self) -> SyncObserver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect(
    addr: str = "127.0.0.1:7400",
    *,
    connect_timeout_ms: float | None = None,
    **options: Any,
) -> SyncClient:
    """Connects (blocking) and returns a ``SyncClient``; options as ``lockd.connect``."""
    client = Client(addr, connect_timeout_ms=connect_timeout_ms, **options)
    sync = SyncClient(client)
    try:
        sync._run(client.connect())
    except BaseException:
        sync._closed = True
        sync._loop.call_soon_threadsafe(sync._loop.stop)
        sync._thread.join()
        sync._loop.close()
        raise
    return sync

