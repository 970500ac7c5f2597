"""Protocol version 2 in the client, against scripted peers (tests/helpers.py ``FakeServer``): the
fallback to version 1, GOODBYE, the silence check on its own timer, the first connect over several
addresses, and the reclaim state machine of docs/cluster.md ("What clients see during a
fail-over"): which endings carry claims over, RESUME and RECLAIM before any new ACQUIRE, a
re-confirmation with the claim's own token, CLAIM_VOID, the local deadline while reclaiming,
``suspend``, the reclaim window, and the socket kept open until RESUMED.

A "leader" here is a FakeServer with a term above 0 that takes reclaims; killing it is leaving its
``async with`` (EOF on every connection, and refused from then on).
"""

from __future__ import annotations

import asyncio
import socket
import time
import unittest
from unittest import mock

import lockd
from lockd import _codec as wire
from lockd.sync import connect as sync_connect

from helpers import FakeServer, eventually

TOKEN = 1_795_426_718_504_001
TICKET_A = bytes(range(1, 17))
TICKET_B = bytes(range(101, 117))
TICKET_Q = bytes(range(201, 217))
TICKET_Q2 = bytes(range(221, 237))
WINDOW_MS = 5_000


def granted(message: wire.Acquire | wire.Reclaim, token: int = TOKEN, ticket: bytes = TICKET_A) -> wire.Acquired:
    return wire.Acquired(message.request_id, token, message.lease_ms or 15_000, message.name, ticket)


def queued(message: wire.Acquire | wire.Reclaim, order: tuple[int, int], ticket: bytes) -> wire.Queued:
    return wire.Queued(message.request_id, 1, message.name, order[0], order[1], ticket)


def acks(message: wire.Message, send) -> bool:  # type: ignore[no-untyped-def]
    """Answers a HEARTBEAT, and a RELEASE of an owned lock (True when it was one of them)."""
    if isinstance(message, wire.Heartbeat):
        send(wire.HeartbeatAck(message.request_id, 0))
        return True
    if isinstance(message, wire.Release) and message.token != 0:
        send(wire.Released(message.request_id, message.name))
        return True
    return False


def requests(fake: FakeServer, conn: int | None = None) -> list[wire.Message]:
    """What a fake received, HELLO and HEARTBEAT left out (of one connection, if given)."""
    return [
        m
        for c, m in fake.received_on
        if not isinstance(m, (wire.Hello, wire.Heartbeat)) and (conn is None or c == conn)
    ]


def assert_nothing_reclaimed(test: unittest.TestCase, fake: FakeServer) -> None:
    """No RECLAIM, and a RESUME (if any) announcing none: it only names the session that ended."""
    test.assertFalse(any(isinstance(m, wire.Reclaim) for m in fake.received))
    test.assertTrue(all(m.claims == 0 for m in fake.received if isinstance(m, wire.Resume)))


def dead_addr() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return "127.0.0.1:%d" % sock.getsockname()[1]


def leader_a(message: wire.Message, send) -> None:  # type: ignore[no-untyped-def]
    """Term 7: grants every lock but "y", which it queues (order 7/1042); version 1: no tickets."""
    if acks(message, send) or not isinstance(message, wire.Acquire):
        return
    if message.name == "y":
        send(queued(message, (7, 1042), TICKET_Q) if send.version == 2 else wire.Queued(message.request_id, 1, "y"))
    else:
        send(granted(message) if send.version == 2 else wire.Acquired(message.request_id, TOKEN, message.lease_ms or 15_000, message.name))


def background(test: unittest.IsolatedAsyncioTestCase, awaitable) -> asyncio.Future:  # type: ignore[no-untyped-def]
    """A request left running; its outcome (often "the client is closed") is collected at cleanup."""
    future = asyncio.ensure_future(awaitable)

    async def collect() -> None:
        future.cancel()
        await asyncio.gather(future, return_exceptions=True)

    test.addAsyncCleanup(collect)
    return future


async def kill(fake: FakeServer) -> None:
    """The leader dies: its connections end (EOF) and new ones are refused."""
    await fake.__aexit__(None, None, None)


class Versions(unittest.IsolatedAsyncioTestCase):
    async def test_hello_asks_for_version_2_and_falls_back_to_1_at_a_server_of_before_version_2(self) -> None:
        def script(message: wire.Message, send) -> None:  # type: ignore[no-untyped-def]
            if isinstance(message, wire.Acquire):
                send(wire.Acquired(message.request_id, TOKEN, 15_000, message.name))

        async with FakeServer(script, versions=(1,)) as fake:
            async with lockd.connect(fake.addr) as client:
                self.assertEqual(client.protocol_version, 1)
                lock = await asyncio.wait_for(client.acquire("x"), 5)
                self.assertEqual(lock.token, TOKEN)
                # The fallback is per connection: the next one asks for version 2 again.
                for writer in list(fake._writers):
                    writer.close()
                await eventually(lambda: client.sessions_opened == 2 and client.connected, "reconnected")
                self.assertEqual(client.protocol_version, 1)
            self.assertEqual(fake.hello_versions, [2, 1, 2, 1])
            self.assertEqual(lock.lost.reason, "disconnected", "no reclaim on a version-1 session")
            self.assertFalse(any(isinstance(m, wire.Goodbye) for m in fake.received))

    async def test_the_fallback_to_version_1_stays_within_the_connect_bound(self) -> None:
        # Each HELLO is answered after 0.4 s: the refusal of version 2, then the WELCOME of
        # version 1 would come 0.8 s after the start, past the 0.6 s bound of the one attempt.
        async with FakeServer(lambda m, s: None, versions=(1,), hold_hello_s=0.4) as fake:
            started = time.monotonic()
            with self.assertRaises(lockd.ConnectTimeoutError) as raised:
                await lockd.connect(fake.addr, connect_timeout_ms=600)
            self.assertLess(time.monotonic() - started, 0.75)
            self.assertIn("no WELCOME within 600 ms", str(raised.exception))
            self.assertEqual(fake.hello_versions, [2, 1])

    async def test_a_version_2_session_says_goodbye_at_close(self) -> None:
        def script(message: wire.Message, send) -> None:  # type: ignore[no-untyped-def]
            if isinstance(message, wire.Acquire):
                send(granted(message))

        async with FakeServer(script) as fake:
            client = await lockd.connect(fake.addr)
            self.assertEqual(client.protocol_version, 2)
            lock = await client.acquire("x")
            started = time.monotonic()
            await client.close()
            # The server closes at GOODBYE: close() does not wait out its grace.
            self.assertLess(time.monotonic() - started, 0.5)
            self.assertIsInstance(fake.received[-1], wire.Goodbye)
            self.assertEqual(lock.lost.reason, "disconnected")
            self.assertEqual(fake.hello_versions, [2])

    async def test_close_of_a_version_1_session_ends_the_stream_without_goodbye(self) -> None:
        async with FakeServer(lambda message, send: None, versions=(1,)) as fake:
            client = await lockd.connect(fake.addr)
            started = time.monotonic()
            await client.close()
            self.assertLess(time.monotonic() - started, 0.5, "the server saw the end of the stream")
            self.assertFalse(any(isinstance(m, wire.Goodbye) for m in fake.received))


class Silence(unittest.IsolatedAsyncioTestCase):
    async def test_the_silence_check_runs_on_its_own_timer(self) -> None:
        loop = asyncio.get_running_loop()
        heard: list[tuple[float, wire.Message]] = []

        def script(message: wire.Message, send) -> None:  # type: ignore[no-untyped-def]
            heard.append((loop.time(), message))  # answers nothing: a frozen leader

        # Heartbeats every 1 s (I/O timeout 3 s); the cluster silence bound, cut to 300 ms here,
        # ends the connection 300 ms after the unanswered heartbeat, not at the next one.
        with mock.patch("lockd._client.CLUSTER_SILENCE_MS", 300):
            async with FakeServer(script, io_timeout_ms=3_000) as fake:
                async with lockd.connect(addrs=[fake.addr, dead_addr()]) as client:
                    await eventually(lambda: fake.connections == 2, "reconnected after the silence", 5)
                    reconnected = loop.time()
                    self.assertTrue(client is not None)
        first_heartbeat = next(at for at, m in heard if isinstance(m, wire.Heartbeat))
        self.assertGreaterEqual(reconnected - first_heartbeat, 0.29)
        self.assertLess(reconnected - first_heartbeat, 0.75, "left before the next heartbeat was due")


class FirstConnect(unittest.IsolatedAsyncioTestCase):
    async def test_a_first_connect_over_several_addresses_goes_on_until_its_bound(self) -> None:
        started = time.monotonic()

        def standby(connection: int, version: int) -> wire.Message | None:
            # No leader for 0.8 s (an election after the leader died), then this node serves.
            if time.monotonic() - started < 0.8:
                return wire.Error(0, 0x11, "", "no leader yet")
            return None

        async with FakeServer(leader_a, hello_answer=standby) as fake:
            client = await lockd.connect(addrs=[dead_addr(), fake.addr], connect_timeout_ms=4_000)
            try:
                self.assertEqual(client.addr, fake.addr)
                self.assertGreaterEqual(time.monotonic() - started, 0.8)
                lock = await asyncio.wait_for(client.acquire("x"), 5)
                self.assertEqual(lock.token, TOKEN)
            finally:
                await client.close()
            self.assertGreater(fake.connections, 1, "asked again after NOT_LEADER")

    async def test_a_first_connect_starts_the_next_address_beside_a_silent_one(self) -> None:
        async with FakeServer(lambda m, s: None, welcome=False) as frozen, FakeServer(leader_a) as good:
            started = time.monotonic()
            async with lockd.connect(addrs=[frozen.addr, good.addr], connect_timeout_ms=5_000) as client:
                self.assertEqual(client.addr, good.addr)
                self.assertLess(time.monotonic() - started, 2.5)

    async def test_a_first_connect_fails_after_its_bound_when_no_node_serves(self) -> None:
        def standby(connection: int, version: int) -> wire.Message:
            return wire.Error(0, 0x11, "", "no leader yet")

        async with FakeServer(leader_a, hello_answer=standby) as fake:
            started = time.monotonic()
            with self.assertRaises(lockd.NotLeaderError):
                await lockd.connect(addrs=[dead_addr(), fake.addr], connect_timeout_ms=700)
            elapsed = time.monotonic() - started
            self.assertGreaterEqual(elapsed, 0.65)
            self.assertLess(elapsed, 2.0)
            self.assertGreater(fake.connections, 2)

    async def test_a_redirect_the_client_may_not_follow_fails_the_first_connect_at_once(self) -> None:
        # A configuration to fix, not a moment to wait out: a leader outside the list (no TLS).
        def standby(connection: int, version: int) -> wire.Message:
            return wire.Error(0, 0x11, "127.0.0.1:1", "not the leader")

        async with FakeServer(leader_a, hello_answer=standby) as fake:
            started = time.monotonic()
            with self.assertRaises(lockd.LockdConnectionError) as raised:
                await lockd.connect(addrs=[fake.addr, dead_addr()], connect_timeout_ms=5_000)
            self.assertLess(time.monotonic() - started, 1.0)
            self.assertIn("which is not in the address list", str(raised.exception))
            self.assertEqual(fake.connections, 1)


class Reclaim(unittest.IsolatedAsyncioTestCase):
    """A crashed leader A (term 7) and its successor B (term 8)."""

    async def test_after_a_leader_crash_an_owned_lock_stays_held_and_is_reclaimed_with_its_token(self) -> None:
        def leader_b(message: wire.Message, send) -> None:  # type: ignore[no-untyped-def]
            if acks(message, send):
                return
            if isinstance(message, wire.Resume):
                send(wire.Resumed(message.request_id, "reclaim", 4_000))
            elif isinstance(message, wire.Reclaim) and message.kind == "owned":
                send(wire.Acquired(message.request_id, message.token, 12_000, message.name, TICKET_B))
            elif isinstance(message, wire.Reclaim):
                send(queued(message, (message.order_term, message.order_seq), TICKET_Q2))
                send(granted(message, TOKEN + 9, TICKET_B))
            elif isinstance(message, wire.Acquire):
                send(granted(message, TOKEN + 10, TICKET_B))

        async with (
            FakeServer(leader_a, term=7, reclaim_window_ms=WINDOW_MS) as a,
            FakeServer(leader_b, term=8, reclaim_window_ms=WINDOW_MS) as b,
        ):
            async with lockd.connect(addrs=[a.addr, b.addr]) as client:
                lock = await client.acquire("x", lease_ms=10_000)
                waiting = asyncio.ensure_future(client.acquire("y", lease_ms=10_000, wait_ms=60_000))
                await eventually(lambda: any(isinstance(m, wire.Acquire) and m.name == "y" for m in a.received), "y sent")
                await asyncio.sleep(0.05)  # its QUEUED arrives
                lost: list[str] = []
                lock.add_lost_callback(lost.append)
                await kill(a)
                await eventually(lambda: not client.connected, "connection lost")
                self.assertEqual(lock.state, "held", "held while it is carried over (no event)")
                new = asyncio.ensure_future(client.acquire("z"))
                late = await asyncio.wait_for(new, 5)
                y = await asyncio.wait_for(waiting, 5)
                self.assertEqual(client.addr, b.addr)
                self.assertEqual((lock.token, lock.state, lost, lock.lease_ms), (TOKEN, "held", [], 12_000))
                self.assertEqual((y.name, y.token, late.token), ("y", TOKEN + 9, TOKEN + 10))
            sent = requests(b, 1)
            resume, owned, waits, acquire = sent[:4]
            self.assertEqual(resume, wire.Resume(resume.request_id, 7, 1, 2))
            self.assertEqual(
                owned,
                wire.Reclaim(
                    owned.request_id, "owned", TOKEN, 0, 0, 10_000, 0, TICKET_A, "exclusive", 1, 0, "x", b""
                ),
            )
            self.assertEqual(waits.kind, "queued")
            self.assertEqual((waits.name, waits.token, waits.order_term, waits.order_seq), ("y", 0, 7, 1042))
            self.assertEqual((waits.ticket, waits.lease_ms, waits.limit), (TICKET_Q, 10_000, 1))
            self.assertTrue(50_000 < waits.wait_ms <= 60_000, waits.wait_ms)
            self.assertEqual((type(acquire), acquire.name), (wire.Acquire, "z"), "new ACQUIREs come after")
            self.assertIsInstance(sent[-1], wire.Goodbye)

    async def test_a_value_longer_than_the_new_leader_takes_is_left_behind_not_the_lock(self) -> None:
        """The RECLAIMs go without it, on_value_dropped and the log say so, the lock's value reads
        empty; a shorter value travels (the TypeScript test's twin)."""
        long = b"v" * 40

        def leader_b(message: wire.Message, send) -> None:  # type: ignore[no-untyped-def]
            if acks(message, send):
                return
            if isinstance(message, wire.Resume):
                send(wire.Resumed(message.request_id, "reclaim", 4_000))
            elif isinstance(message, wire.Reclaim) and len(message.value) > 16:
                # What lockd answers a value over its limit: the claim would be lost for its value.
                send(wire.Error(message.request_id, 0x0B, message.name, "value too long"))
            elif isinstance(message, wire.Reclaim) and message.kind == "owned":
                send(wire.Acquired(message.request_id, message.token, 10_000, message.name, TICKET_B))
            elif isinstance(message, wire.Reclaim):
                send(queued(message, (message.order_term, message.order_seq), TICKET_Q2))
                send(granted(message, TOKEN + 9, TICKET_B))

        dropped: list[tuple[str, int, int]] = []

        def on_value_dropped(name: str, value_bytes: int, value_bytes_max: int) -> None:
            dropped.append((name, value_bytes, value_bytes_max))
            raise RuntimeError("an application's callback that raises is logged, not raised")

        async with (
            FakeServer(leader_a, term=7, reclaim_window_ms=WINDOW_MS, value_bytes_max=64) as a,
            FakeServer(leader_b, term=8, reclaim_window_ms=WINDOW_MS, value_bytes_max=16) as b,
        ):
            async with lockd.connect(addrs=[a.addr, b.addr], on_value_dropped=on_value_dropped) as client:
                lock = await client.acquire("x", lease_ms=10_000, value=long)
                short = await client.acquire("s", lease_ms=10_000, value="addr:1")
                waiting = asyncio.ensure_future(client.acquire("y", lease_ms=10_000, wait_ms=60_000, value=long))
                await eventually(lambda: any(isinstance(m, wire.Acquire) and m.name == "y" for m in a.received), "y sent")
                await asyncio.sleep(0.05)  # its QUEUED arrives
                self.assertEqual(lock.value, long)
                with self.assertLogs("lockd", "WARNING") as logs:
                    await kill(a)
                    y = await asyncio.wait_for(waiting, 5)
                    await eventually(lambda: len([m for m in b.received if isinstance(m, wire.Reclaim)]) == 3, "3 RECLAIMs")
                    await asyncio.sleep(0.05)  # B's answers arrive
                values = [(m.name, m.value) for m in b.received if isinstance(m, wire.Reclaim)]
                self.assertEqual(values, [("x", b""), ("s", b"addr:1"), ("y", b"")])
                self.assertEqual(dropped, [("x", 40, 16), ("y", 40, 16)])
                self.assertTrue(any("'x' carried over" in line and "without its value" in line for line in logs.output))
                self.assertEqual((lock.state, lock.token, lock.value), ("held", TOKEN, b""))
                self.assertEqual((short.state, short.value), ("held", b"addr:1"))
                self.assertEqual((y.token, y.value), (TOKEN + 9, b""))

    async def test_a_double_fail_over_reclaims_with_the_tickets_of_the_second_leader(self) -> None:
        def leader(term: int, ticket: bytes):  # type: ignore[no-untyped-def]
            def script(message: wire.Message, send) -> None:  # type: ignore[no-untyped-def]
                if acks(message, send):
                    return
                if isinstance(message, wire.Resume):
                    send(wire.Resumed(message.request_id, "reclaim", 4_000))
                elif isinstance(message, wire.Reclaim):
                    send(wire.Acquired(message.request_id, message.token, 10_000, message.name, ticket))

            return script

        async with (
            FakeServer(leader_a, term=7, reclaim_window_ms=WINDOW_MS) as a,
            FakeServer(leader(8, TICKET_B), term=8, reclaim_window_ms=WINDOW_MS) as b,
            FakeServer(leader(9, TICKET_Q), term=9, reclaim_window_ms=WINDOW_MS) as c,
        ):
            async with lockd.connect(addrs=[a.addr, b.addr, c.addr]) as client:
                lock = await client.acquire("x", lease_ms=10_000)
                await kill(a)
                await eventually(lambda: any(isinstance(m, wire.Reclaim) for m in b.received), "reclaimed at B")
                await asyncio.sleep(0.05)  # B's ACQUIRED arrives
                await kill(b)
                await eventually(lambda: client.addr == c.addr and client.connected, "at C")
                await eventually(lambda: any(isinstance(m, wire.Reclaim) for m in c.received), "reclaimed at C")
                await asyncio.sleep(0.05)
                self.assertEqual((lock.state, lock.token), ("held", TOKEN))
            resume, reclaim = requests(c, 1)[:2]
            self.assertEqual((resume.prev_term, resume.prev_session_id, resume.claims), (8, 1, 1))
            self.assertEqual((reclaim.token, reclaim.ticket), (TOKEN, TICKET_B))

    async def test_claims_no_resume_can_carry_rejoin_the_tail_after_the_reclaims(self) -> None:
        def leader_b(message: wire.Message, send) -> None:  # type: ignore[no-untyped-def]
            # Takes the RESUME, never answers the queued RECLAIM of "y", grants "z".
            if acks(message, send):
                return
            if isinstance(message, wire.Resume):
                send(wire.Resumed(message.request_id, "reclaim", 4_000))
            elif isinstance(message, wire.Acquire):
                send(granted(message, TOKEN + 3, TICKET_B))

        def leader_c(message: wire.Message, send) -> None:  # type: ignore[no-untyped-def]
            acks(message, send)

        async with (
            FakeServer(leader_a, term=7, reclaim_window_ms=WINDOW_MS) as a,
            FakeServer(leader_b, term=8, reclaim_window_ms=WINDOW_MS) as b,
            FakeServer(leader_c, term=9, reclaim_window_ms=WINDOW_MS) as c,
        ):
            async with lockd.connect(addrs=[a.addr, b.addr, c.addr]) as client:
                background(self, client.acquire("y", lease_ms=10_000))
                await eventually(lambda: any(isinstance(m, wire.Acquire) for m in a.received), "y queued at A")
                await asyncio.sleep(0.05)
                await kill(a)
                await eventually(lambda: any(isinstance(m, wire.Reclaim) for m in b.received), "y reclaimed at B")
                z = await asyncio.wait_for(client.acquire("z", lease_ms=10_000), 5)
                await kill(b)
                await eventually(lambda: len(requests(c, 1)) >= 3, "at C")
                self.assertEqual(z.state, "held")
            # One RESUME per connection: the newest lost connection's ("z", ticket of B); the claim
            # still waiting on A's ticket joins the tail, after the RECLAIMs.
            resume, reclaim, acquire = requests(c, 1)[:3]
            self.assertEqual((resume.prev_term, resume.claims), (8, 1))
            self.assertEqual((reclaim.kind, reclaim.name, reclaim.ticket), ("owned", "z", TICKET_B))
            self.assertEqual((type(acquire), acquire.name), (wire.Acquire, "y"))

    async def test_a_reconnect_with_nothing_to_carry_over_still_resumes_the_session_that_ended(self) -> None:
        # A new leader after a planned hand-over ends its window early once every session it
        # lists has come back: a client holding nothing still says which session it was.
        async with (
            FakeServer(leader_a, term=7, reclaim_window_ms=WINDOW_MS) as a,
            FakeServer(leader_a, term=8, reclaim_window_ms=WINDOW_MS) as b,
        ):
            async with lockd.connect(addrs=[a.addr, b.addr]) as client:
                await kill(a)
                await eventually(lambda: client.connected and client.addr == b.addr, "at B")
                lock = await asyncio.wait_for(client.acquire("z"), 5)
                self.assertEqual(lock.token, TOKEN)
            resume, acquire = requests(b, 1)[:2]
            self.assertEqual(resume, wire.Resume(resume.request_id, 7, 1, 0))
            self.assertEqual((type(acquire), acquire.name), (wire.Acquire, "z"))

    async def test_claim_void_loses_the_lock_with_reason_failover(self) -> None:
        def leader_b(message: wire.Message, send) -> None:  # type: ignore[no-untyped-def]
            if acks(message, send):
                return
            if isinstance(message, wire.Resume):
                send(wire.Resumed(message.request_id, "none", 0))
            elif isinstance(message, wire.Reclaim):
                send(wire.Error(message.request_id, 0x12, message.name, "the lock went to another holder"))

        async with (
            FakeServer(leader_a, term=7, reclaim_window_ms=WINDOW_MS) as a,
            FakeServer(leader_b, term=8, reclaim_window_ms=WINDOW_MS) as b,
        ):
            async with lockd.connect(addrs=[a.addr, b.addr]) as client:
                lock = await client.acquire("x", lease_ms=10_000)
                await kill(a)
                await asyncio.wait_for(lock.lost.wait(), 5)
                self.assertEqual(lock.lost.reason, "failover")
                self.assertIsInstance(lock.lost.error, lockd.LockLostError)
                self.assertIn("could not be carried over", str(lock.lost.error))
                cause = lock.lost.error.__cause__  # type: ignore[union-attr]
                self.assertIsInstance(cause, lockd.ClaimVoidError)
                self.assertEqual((cause.code, cause.retryable, cause.lock_name), (0x12, False, "x"))  # type: ignore[union-attr]
                self.assertIn("another holder", str(cause))
                self.assertTrue(client.connected, "CLAIM_VOID keeps the session")
                self.assertEqual(client.protocol_errors, 0)

    async def test_an_acquired_with_another_token_for_an_owned_reclaim_is_a_protocol_error(self) -> None:
        reported: list[lockd.ServerProtocolError] = []

        def leader_b(message: wire.Message, send) -> None:  # type: ignore[no-untyped-def]
            if acks(message, send):
                return
            if isinstance(message, wire.Resume):
                send(wire.Resumed(message.request_id, "reclaim", 4_000))
            elif isinstance(message, wire.Reclaim):
                send(wire.Acquired(message.request_id, message.token + 6, 10_000, message.name, TICKET_B))

        async with (
            FakeServer(leader_a, term=7, reclaim_window_ms=WINDOW_MS) as a,
            FakeServer(leader_b, term=8, reclaim_window_ms=WINDOW_MS) as b,
        ):
            async with lockd.connect(addrs=[a.addr, b.addr], on_protocol_error=reported.append) as client:
                lock = await client.acquire("x", lease_ms=10_000)
                await kill(a)
                await eventually(lambda: client.protocol_errors >= 1, "a protocol error")
                self.assertIn(f"with token {TOKEN + 6}, but that RECLAIM carried the claim's token {TOKEN}", str(reported[0]))
                self.assertEqual(lock.token, TOKEN, "never a token the claim did not have")

    async def test_a_lock_whose_deadline_passes_before_the_reclaim_answer_is_lost_and_a_late_grant_is_handed_back(
        self,
    ) -> None:
        answers: list[tuple[wire.Reclaim, object]] = []

        def leader_b(message: wire.Message, send) -> None:  # type: ignore[no-untyped-def]
            if acks(message, send):
                return
            if isinstance(message, wire.Resume):
                send(wire.Resumed(message.request_id, "reclaim", 4_000))
            elif isinstance(message, wire.Reclaim):
                answers.append((message, send))  # answered late, below

        async with (
            FakeServer(leader_a, term=7, reclaim_window_ms=WINDOW_MS) as a,
            FakeServer(leader_b, term=8, reclaim_window_ms=WINDOW_MS) as b,
        ):
            async with lockd.connect(addrs=[a.addr, b.addr]) as client:
                lock = await client.acquire("x", lease_ms=400)
                await kill(a)
                await asyncio.wait_for(lock.lost.wait(), 5)
                self.assertEqual(lock.lost.reason, "lease_unconfirmed")
                await eventually(lambda: bool(answers), "the RECLAIM went out before the deadline")
                reclaim, send = answers[0]
                send(wire.Acquired(reclaim.request_id, reclaim.token, 400, "x", TICKET_B))  # type: ignore[operator]
                await eventually(
                    lambda: any(isinstance(m, wire.Release) and m.token == TOKEN for m in b.received),
                    "the late re-confirmation was handed back",
                )
                self.assertEqual(lock.lost.reason, "lease_unconfirmed", "never revived")

    async def test_a_lock_lost_before_the_next_connection_is_not_reclaimed(self) -> None:
        async with (
            FakeServer(leader_a, term=7, reclaim_window_ms=WINDOW_MS) as a,
            FakeServer(lambda m, s: acks(m, s), term=8, reclaim_window_ms=WINDOW_MS, hold_hello_s=0.6) as b,
        ):
            async with lockd.connect(addrs=[a.addr, b.addr]) as client:
                lock = await client.acquire("x", lease_ms=300)
                await kill(a)
                await asyncio.wait_for(lock.lost.wait(), 5)  # before B answers the HELLO
                self.assertEqual(lock.lost.reason, "lease_unconfirmed")
                await eventually(lambda: client.connected, "at B")
                await asyncio.sleep(0.05)
            assert_nothing_reclaimed(self, b)

    async def test_a_suspend_lock_is_suspended_past_its_deadline_and_held_again_when_reclaimed(self) -> None:
        answers: list[tuple[wire.Reclaim, object]] = []

        def leader_b(message: wire.Message, send) -> None:  # type: ignore[no-untyped-def]
            if acks(message, send):
                return
            if isinstance(message, wire.Resume):
                send(wire.Resumed(message.request_id, "reclaim", 4_000))
            elif isinstance(message, wire.Reclaim):
                answers.append((message, send))

        async with (
            FakeServer(leader_a, term=7, reclaim_window_ms=WINDOW_MS) as a,
            FakeServer(leader_b, term=8, reclaim_window_ms=WINDOW_MS) as b,
        ):
            async with lockd.connect(addrs=[a.addr, b.addr]) as client:
                lock = await client.acquire("x", lease_ms=400, suspend=True)
                heard: list[bool] = []
                lock.add_suspend_callback(heard.append)
                self.assertFalse(lock.suspended)
                await kill(a)
                await eventually(lambda: lock.suspended, "suspended at its deadline")
                self.assertEqual((heard, lock.state, lock.lost.is_set()), ([True], "suspended", False))
                await eventually(lambda: bool(answers), "RECLAIM sent")
                reclaim, send = answers[0]
                self.assertEqual((reclaim.kind, reclaim.token), ("owned", TOKEN))
                send(wire.Acquired(reclaim.request_id, reclaim.token, 400, "x", TICKET_B))  # type: ignore[operator]
                await eventually(lambda: not lock.suspended, "held again")
                self.assertEqual((heard, lock.state, lock.token), ([True, False], "held", TOKEN))
                self.assertGreater(lock.deadline_ms, asyncio.get_running_loop().time() * 1000)
                # Held as any lock: heartbeats keep it; a release ends it.
                await asyncio.sleep(0.6)
                self.assertEqual(lock.state, "held")
                await lock.release()

    async def test_a_suspended_lock_is_lost_with_failover_on_claim_void(self) -> None:
        answers: list[tuple[wire.Reclaim, object]] = []

        def leader_b(message: wire.Message, send) -> None:  # type: ignore[no-untyped-def]
            if acks(message, send):
                return
            if isinstance(message, wire.Resume):
                send(wire.Resumed(message.request_id, "reclaim", 4_000))
            elif isinstance(message, wire.Reclaim):
                answers.append((message, send))

        async with (
            FakeServer(leader_a, term=7, reclaim_window_ms=WINDOW_MS) as a,
            FakeServer(leader_b, term=8, reclaim_window_ms=WINDOW_MS) as b,
        ):
            async with lockd.connect(addrs=[a.addr, b.addr]) as client:
                lock = await client.acquire("x", lease_ms=300, suspend=True)
                await kill(a)
                await eventually(lambda: lock.suspended and bool(answers), "suspended, RECLAIM sent")
                reclaim, send = answers[0]
                send(wire.Error(reclaim.request_id, 0x12, "x", "floor"))  # type: ignore[operator]
                await asyncio.wait_for(lock.lost.wait(), 5)
                self.assertEqual((lock.lost.reason, lock.suspended, lock.state), ("failover", False, "lost"))

    async def test_a_suspended_lock_is_lost_with_failover_when_the_reclaim_window_ends(self) -> None:
        loop = asyncio.get_running_loop()
        async with (
            FakeServer(leader_a, term=7, reclaim_window_ms=900) as a,
            FakeServer(lambda m, s: acks(m, s), term=8, reclaim_window_ms=WINDOW_MS) as b,
        ):
            async with lockd.connect(addrs=[a.addr, b.addr]) as client:
                lock = await client.acquire("x", lease_ms=300, suspend=True)
                await kill(a)
                killed = loop.time()
                await eventually(lambda: lock.suspended, "suspended")
                await asyncio.wait_for(lock.lost.wait(), 5)
                self.assertEqual(lock.lost.reason, "failover")
                self.assertGreaterEqual(loop.time() - killed, 0.85, "not before A's reclaimWindowMs")
                self.assertTrue(any(isinstance(m, wire.Reclaim) for m in b.received))

    async def test_a_claim_whose_release_was_sent_is_never_reclaimed(self) -> None:
        def leader(message: wire.Message, send) -> None:  # type: ignore[no-untyped-def]
            if not isinstance(message, wire.Release):  # RELEASE: no answer, the leader dies first
                leader_a(message, send)

        async with (
            FakeServer(leader, term=7, reclaim_window_ms=WINDOW_MS) as a,
            FakeServer(lambda m, s: acks(m, s), term=8, reclaim_window_ms=WINDOW_MS) as b,
        ):
            async with lockd.connect(addrs=[a.addr, b.addr]) as client:
                kept = await client.acquire("kept", lease_ms=10_000)
                gone = await client.acquire("gone", lease_ms=10_000)
                releasing = asyncio.ensure_future(gone.release())
                await eventually(lambda: any(isinstance(m, wire.Release) for m in a.received), "RELEASE sent")
                self.assertEqual(gone.state, "releasing")
                await kill(a)
                await asyncio.wait_for(releasing, 5)  # the session is gone, and so is the ownership
                self.assertEqual(gone.state, "released")
                await eventually(lambda: any(isinstance(m, wire.Reclaim) for m in b.received), "reclaims sent")
                await asyncio.sleep(0.05)
                self.assertEqual(kept.state, "held")
            reclaims = [m for m in b.received if isinstance(m, wire.Reclaim)]
            self.assertEqual([m.name for m in reclaims], ["kept"])
            self.assertEqual(next(m for m in b.received if isinstance(m, wire.Resume)).claims, 1)

    async def test_a_lock_released_while_carried_over_is_reclaimed_and_handed_back(self) -> None:
        def leader_b(message: wire.Message, send) -> None:  # type: ignore[no-untyped-def]
            if acks(message, send):
                return
            if isinstance(message, wire.Resume):
                send(wire.Resumed(message.request_id, "reclaim", 4_000))
            elif isinstance(message, wire.Reclaim):
                send(wire.Acquired(message.request_id, message.token, 10_000, message.name, TICKET_B))

        async with (
            FakeServer(leader_a, term=7, reclaim_window_ms=WINDOW_MS) as a,
            FakeServer(leader_b, term=8, reclaim_window_ms=WINDOW_MS, hold_hello_s=0.3) as b,
        ):
            async with lockd.connect(addrs=[a.addr, b.addr]) as client:
                gone = await client.acquire("gone", lease_ms=10_000)
                await kill(a)
                await eventually(lambda: not client.connected, "connection lost")
                # No connection to send RELEASE on: done at once; the new leader frees the lock
                # when its RECLAIM comes, instead of holding it back until its window's end.
                await asyncio.wait_for(gone.release(), 1)
                self.assertEqual((gone.state, gone.lost.is_set()), ("released", False))
                await eventually(
                    lambda: any(isinstance(m, wire.Release) and m.token == TOKEN for m in b.received),
                    "reclaimed, then released",
                )
            self.assertEqual([m.name for m in b.received if isinstance(m, wire.Reclaim)], ["gone"])

    async def test_a_lock_released_while_carried_over_and_acquired_again_waits_for_the_hand_back(self) -> None:
        # B owns what it keeps, as the server does: an ACQUIRE of a lock the session owns gets
        # DUPLICATE_CLAIM; a RELEASE ends the ownership. "v" gets CLAIM_VOID instead.
        owned: set[str] = set()

        def leader_b(message: wire.Message, send) -> None:  # type: ignore[no-untyped-def]
            if isinstance(message, wire.Release) and message.token != 0:
                owned.discard(message.name)
            if acks(message, send):
                return
            if isinstance(message, wire.Resume):
                send(wire.Resumed(message.request_id, "reclaim", 4_000))
            elif isinstance(message, wire.Reclaim) and message.name == "v":
                send(wire.Error(message.request_id, 0x12, message.name, "void"))
            elif isinstance(message, wire.Reclaim):
                owned.add(message.name)
                send(wire.Acquired(message.request_id, message.token, 10_000, message.name, TICKET_B))
            elif isinstance(message, wire.Acquire) and message.name in owned:
                send(wire.Error(message.request_id, 0x08, message.name, "this session already owns it"))
            elif isinstance(message, wire.Acquire):
                owned.add(message.name)
                send(granted(message, TOKEN + 10, TICKET_B))

        async with (
            FakeServer(leader_a, term=7, reclaim_window_ms=WINDOW_MS) as a,
            FakeServer(leader_b, term=8, reclaim_window_ms=WINDOW_MS, hold_hello_s=0.3) as b,
        ):
            async with lockd.connect(addrs=[a.addr, b.addr]) as client:
                x = await client.acquire("x", lease_ms=10_000)
                v = await client.acquire("v", lease_ms=10_000)
                await kill(a)
                await eventually(lambda: not client.connected, "connection lost")
                await asyncio.wait_for(x.release(), 1)  # done at once: its RECLAIM hands it back
                await asyncio.wait_for(v.release(), 1)
                again = await asyncio.wait_for(
                    asyncio.gather(*(client.acquire(n, lease_ms=10_000) for n in ("x", "v", "w"))), 5
                )
                self.assertEqual([lock.state for lock in again], ["held"] * 3)
            order = [
                f"release {m.name}" if isinstance(m, wire.Release) else f"{type(m).__name__} {getattr(m, 'name', '')}"
                for m in requests(b, 1)
                if not isinstance(m, wire.Goodbye)
            ]
            # "w" goes out with the RECLAIMs; "x" after the RELEASE that hands it back; "v" after
            # the CLAIM_VOID of its RECLAIM.
            self.assertEqual(
                sorted(order[:3]) + order[3:4],
                sorted(["Resume ", "Reclaim x", "Reclaim v"]) + ["Acquire w"],
            )
            self.assertLess(order.index("release x"), order.index("Acquire x"))
            self.assertIn("Acquire v", order)
            self.assertEqual(client.protocol_errors, 0)

    async def test_not_leader_after_welcome_keeps_the_locks_and_follows_the_leader_at_once(self) -> None:
        def leader_b(message: wire.Message, send) -> None:  # type: ignore[no-untyped-def]
            if acks(message, send):
                return
            if isinstance(message, wire.Resume):
                send(wire.Resumed(message.request_id, "reclaim", 4_000))
            elif isinstance(message, wire.Reclaim):
                send(wire.Acquired(message.request_id, message.token, 10_000, message.name, TICKET_B))

        async with FakeServer(leader_b, term=8, reclaim_window_ms=WINDOW_MS) as b:

            def stepping_down(message: wire.Message, send) -> None:  # type: ignore[no-untyped-def]
                if isinstance(message, wire.Acquire) and message.name == "x":
                    send(granted(message))
                elif isinstance(message, wire.Acquire):
                    send(wire.Error(0, 0x11, b.addr, "this node hands over"))

            async with FakeServer(stepping_down, term=7, reclaim_window_ms=WINDOW_MS) as a:
                async with lockd.connect(addrs=[a.addr, b.addr]) as client:
                    lock = await client.acquire("x", lease_ms=10_000)
                    background(self, client.acquire("hand-over"))
                    await eventually(lambda: any(isinstance(m, wire.Reclaim) for m in b.received), "reclaimed")
                    await asyncio.sleep(0.05)
                    self.assertEqual((lock.state, client.addr), ("held", b.addr))
                    self.assertFalse(lock.lost.is_set())

    async def test_closed_by_admin_and_io_timeout_end_the_locks_without_reclaim(self) -> None:
        for code, reason in ((0x02, "force"), (0x0E, "io_timeout")):
            with self.subTest(reason):

                def ending(message: wire.Message, send, code=code) -> None:  # type: ignore[no-untyped-def]
                    if isinstance(message, wire.Acquire) and message.name == "x":
                        send(granted(message))
                    elif isinstance(message, wire.Acquire) and message.name == "end":
                        send(wire.Error(0, code, "x", "ended by the server"))

                async with (
                    FakeServer(ending, term=7, reclaim_window_ms=WINDOW_MS) as a,
                    FakeServer(leader_a, term=8, reclaim_window_ms=WINDOW_MS) as b,
                ):
                    async with lockd.connect(addrs=[a.addr, b.addr]) as client:
                        lock = await client.acquire("x", lease_ms=10_000)
                        background(self, client.acquire("end"))
                        await asyncio.wait_for(lock.lost.wait(), 5)
                        self.assertEqual(lock.lost.reason, reason)
                        await eventually(lambda: client.connected, "reconnected")
                        await asyncio.sleep(0.05)
                    assert_nothing_reclaimed(self, b)

    async def test_without_reclaim_a_fail_over_loses_the_locks(self) -> None:
        async with (
            FakeServer(leader_a, term=7, reclaim_window_ms=WINDOW_MS) as a,
            FakeServer(leader_a, term=8, reclaim_window_ms=WINDOW_MS) as b,
        ):
            async with lockd.connect(addrs=[a.addr, b.addr], reclaim=False) as client:
                self.assertEqual(client.protocol_version, 2)
                lock = await client.acquire("x", lease_ms=10_000)
                waiting = background(self, client.acquire("y", lease_ms=10_000))
                await eventually(lambda: any(isinstance(m, wire.Acquire) and m.name == "y" for m in a.received), "y")
                await asyncio.sleep(0.05)
                await kill(a)
                await asyncio.wait_for(lock.lost.wait(), 5)
                self.assertEqual(lock.lost.reason, "disconnected")
                await eventually(lambda: any(isinstance(m, wire.Acquire) and m.name == "y" for m in b.received), "y")
                waiting.cancel()
            assert_nothing_reclaimed(self, b)

    async def test_release_while_the_locks_reclaim_is_in_flight_waits_for_its_answer_then_releases(self) -> None:
        answers: list[tuple[wire.Reclaim, object]] = []

        def leader_b(message: wire.Message, send) -> None:  # type: ignore[no-untyped-def]
            if acks(message, send):
                return
            if isinstance(message, wire.Resume):
                send(wire.Resumed(message.request_id, "reclaim", 4_000))
            elif isinstance(message, wire.Reclaim):
                answers.append((message, send))

        async with (
            FakeServer(leader_a, term=7, reclaim_window_ms=WINDOW_MS) as a,
            FakeServer(leader_b, term=8, reclaim_window_ms=WINDOW_MS) as b,
        ):
            async with lockd.connect(addrs=[a.addr, b.addr]) as client:
                lock = await client.acquire("x", lease_ms=10_000)
                await kill(a)
                await eventually(lambda: bool(answers), "RECLAIM sent")
                releasing = asyncio.ensure_future(lock.release())
                await asyncio.sleep(0.05)
                self.assertFalse(releasing.done(), "waits for the RECLAIM's answer")
                self.assertEqual(lock.state, "releasing")
                self.assertFalse(any(isinstance(m, wire.Release) for m in b.received), "no RELEASE before it")
                reclaim, send = answers[0]
                send(wire.Acquired(reclaim.request_id, reclaim.token, 10_000, "x", TICKET_B))  # type: ignore[operator]
                await asyncio.wait_for(releasing, 5)  # on RELEASED
                self.assertEqual(lock.state, "released")
                self.assertEqual([(m.name, m.token) for m in b.received if isinstance(m, wire.Release)], [("x", TOKEN)])
                self.assertEqual((client.protocol_errors, lock.lost.is_set()), (0, False))

    async def test_a_new_leader_of_before_version_2_gets_no_reclaims(self) -> None:
        async with (
            FakeServer(leader_a, term=7, reclaim_window_ms=WINDOW_MS) as a,
            FakeServer(leader_a, versions=(1,)) as b,
        ):
            async with lockd.connect(addrs=[a.addr, b.addr]) as client:
                lock = await client.acquire("x", lease_ms=10_000)
                waiting = background(self, client.acquire("y", lease_ms=10_000))
                await eventually(lambda: any(isinstance(m, wire.Acquire) and m.name == "y" for m in a.received), "y")
                await asyncio.sleep(0.05)
                await kill(a)
                await asyncio.wait_for(lock.lost.wait(), 5)
                self.assertEqual((lock.lost.reason, client.protocol_version), ("failover", 1))
                await eventually(lambda: any(isinstance(m, wire.Acquire) and m.name == "y" for m in b.received), "y")
                waiting.cancel()
            self.assertEqual(b.hello_versions, [2, 1])
            assert_nothing_reclaimed(self, b)


class SuspendOnALiveConnection(unittest.IsolatedAsyncioTestCase):
    async def test_a_suspend_lock_past_its_deadline_is_held_again_at_an_acknowledged_heartbeat(self) -> None:
        loop = asyncio.get_running_loop()
        mute_until = [0.0]

        def script(message: wire.Message, send) -> None:  # type: ignore[no-untyped-def]
            if isinstance(message, wire.Acquire):
                send(granted(message))
                mute_until[0] = loop.time() + 0.6  # heartbeats unanswered for 0.6 s (a GC pause)
            elif isinstance(message, wire.Heartbeat) and loop.time() >= mute_until[0]:
                send(wire.HeartbeatAck(message.request_id, 1))

        async with FakeServer(script, reclaim_window_ms=WINDOW_MS) as fake:
            async with lockd.connect(fake.addr) as client:
                lock = await client.acquire("x", lease_ms=300, suspend=True)
                heard: list[bool] = []
                lock.add_suspend_callback(heard.append)
                await eventually(lambda: heard == [True], "suspended at its deadline")
                self.assertEqual((lock.state, lock.suspended, lock.lost.is_set()), ("suspended", True, False))
                # No LEASE_EXPIRED before the ACK: the lease ran on, renewed by that heartbeat.
                await eventually(lambda: heard == [True, False], "held again at an acknowledged heartbeat")
                self.assertEqual((lock.state, lock.token, client.sessions_opened), ("held", TOKEN, 1))

    async def test_a_suspended_lock_is_lost_at_lease_expired(self) -> None:
        def script(message: wire.Message, send) -> None:  # type: ignore[no-untyped-def]
            if isinstance(message, wire.Acquire):
                send(granted(message))
                fake.grant = message  # type: ignore[attr-defined]
            # heartbeats: no answer

        async with FakeServer(script) as fake:
            async with lockd.connect(fake.addr) as client:
                lock = await client.acquire("x", lease_ms=300, suspend=True)
                await eventually(lambda: lock.suspended, "suspended")
                fake.last_send(wire.Error(fake.grant.request_id, 0x05, "x", "lease expired"))  # type: ignore[attr-defined]
                await asyncio.wait_for(lock.lost.wait(), 5)
                self.assertEqual((lock.lost.reason, lock.suspended), ("expired", False))
                self.assertTrue(client.connected)


class SingleNode(unittest.IsolatedAsyncioTestCase):
    """Term 0: a server that closed the connection has ended its ownerships; only a connection
    the client gave up itself (silent) may still hold them, and is reclaimed (RESUME ``moved``)."""

    async def test_on_a_single_node_an_end_of_stream_loses_the_locks(self) -> None:
        def script(message: wire.Message, send) -> None:  # type: ignore[no-untyped-def]
            if acks(message, send):
                return
            if isinstance(message, wire.Acquire) and message.name == "x":
                send(granted(message))
            elif isinstance(message, wire.Acquire):
                send(None)  # the server closes the connection

        async with FakeServer(script, reclaim_window_ms=WINDOW_MS) as fake:
            async with lockd.connect(fake.addr) as client:
                lock = await client.acquire("x", lease_ms=10_000)
                background(self, client.acquire("close"))
                await asyncio.wait_for(lock.lost.wait(), 5)
                self.assertEqual(lock.lost.reason, "disconnected")
                await eventually(lambda: client.connected, "reconnected")
                await asyncio.sleep(0.05)
            assert_nothing_reclaimed(self, fake)

    async def test_a_silent_connection_is_given_up_kept_open_until_resumed_and_its_suspend_lock_moves(self) -> None:
        def script(message: wire.Message, send) -> None:  # type: ignore[no-untyped-def]
            if fake.conn == 1:
                if isinstance(message, wire.Acquire):
                    send(granted(message))  # then nothing more: a connection that went silent
                return
            if acks(message, send):
                return
            if isinstance(message, wire.Resume):
                send(wire.Resumed(message.request_id, "moved", 4_000))
            elif isinstance(message, wire.Reclaim):
                send(wire.Acquired(message.request_id, message.token, message.lease_ms, message.name, TICKET_B))

        async with FakeServer(script, io_timeout_ms=600, reclaim_window_ms=WINDOW_MS) as fake:
            async with lockd.connect(fake.addr) as client:
                lock = await client.acquire("x", lease_ms=10_000, suspend=True)
                heard: list[bool] = []
                lock.add_suspend_callback(heard.append)
                await eventually(lambda: heard == [True, False], "suspended, then moved and held again", 5)
                self.assertEqual((lock.state, lock.token), ("held", TOKEN))
                await eventually(lambda: (1, "end") in fake.timeline, "the old connection closed")
            timeline = [event for event in fake.timeline if event[1] not in ("Hello", "Heartbeat")]
            # Kept open (unread) while the new connection resumed; then GOODBYE and closed.
            self.assertLess(timeline.index((2, "Reclaim")), timeline.index((1, "Goodbye")))
            self.assertLess(timeline.index((1, "Goodbye")), timeline.index((1, "end")))
            resume = next(m for c, m in fake.received_on if isinstance(m, wire.Resume))
            self.assertEqual((resume.prev_term, resume.prev_session_id, resume.claims), (0, 1, 1))


class SyncWrapper(unittest.IsolatedAsyncioTestCase):
    async def test_the_sync_wrapper_reports_suspend_and_resume(self) -> None:
        answers: list[tuple[wire.Reclaim, object]] = []

        def leader_b(message: wire.Message, send) -> None:  # type: ignore[no-untyped-def]
            if acks(message, send):
                return
            if isinstance(message, wire.Resume):
                send(wire.Resumed(message.request_id, "reclaim", 4_000))
            elif isinstance(message, wire.Reclaim):
                answers.append((message, send))

        async with (
            FakeServer(leader_a, term=7, reclaim_window_ms=WINDOW_MS) as a,
            FakeServer(leader_b, term=8, reclaim_window_ms=WINDOW_MS) as b,
        ):
            client = await asyncio.to_thread(sync_connect, addrs=[a.addr, b.addr], reclaim=True)
            try:
                lock = await asyncio.to_thread(client.acquire, "x", lease_ms=300, suspend=True)
                heard: list[bool] = []
                lock.add_suspend_callback(heard.append)
                await kill(a)
                await eventually(lambda: lock.suspended, "suspended")
                self.assertFalse(lock.lost.is_set())
                await eventually(lambda: bool(answers), "RECLAIM sent")
                reclaim, send = answers[0]
                send(wire.Acquired(reclaim.request_id, reclaim.token, 300, "x", TICKET_B))  # type: ignore[operator]
                await eventually(lambda: heard == [True, False] and not lock.suspended, "held again")
            finally:
                await asyncio.to_thread(client.close)


if __name__ == "__main__":
    unittest.main()
