"""Client rules of docs/protocol.md ("Writing a client") that a real server shows only by chance,
checked against a scripted peer: replies matched by request id, frames after a closing ERROR
ignored, lost reasons by cause, the heartbeat cadence, back-off reset only after WELCOME."""

from __future__ import annotations

import asyncio
import unittest
from unittest import mock

import lockd
from lockd import _codec as wire

from helpers import FakeServer, eventually

TOKEN = 1795426718504001


def grant(message: wire.Acquire, token: int = TOKEN) -> wire.Acquired:
    return wire.Acquired(message.request_id, token, message.lease_ms or 15_000, message.name)


class RepliesByRequestId(unittest.IsolatedAsyncioTestCase):
    async def test_a_later_reply_may_come_first(self) -> None:
        held: list[wire.Acquire] = []

        def script(message: wire.Message, send) -> None:  # type: ignore[no-untyped-def]
            if isinstance(message, wire.Acquire):
                held.append(message)
                if len(held) == 2:  # answer the second ACQUIRE, then the first
                    send(wire.Error(held[1].request_id, 0x07, held[1].name, "held"))
                    send(grant(held[0]))

        async with FakeServer(script) as fake:
            async with lockd.connect(fake.addr) as client:
                first = asyncio.ensure_future(client.acquire("a"))
                await eventually(lambda: len(held) == 1, "first ACQUIRE")
                second = asyncio.ensure_future(client.acquire("b", wait_ms=0))
                lock = await asyncio.wait_for(first, 5)
                self.assertEqual((lock.name, lock.token), ("a", TOKEN))
                with self.assertRaises(lockd.WaitTimeoutError):
                    await second

    async def test_frames_after_a_closing_error_are_ignored(self) -> None:
        def script(message: wire.Message, send) -> None:  # type: ignore[no-untyped-def]
            if isinstance(message, wire.Acquire) and message.name == "owned":
                send(grant(message))
            elif isinstance(message, wire.Acquire):
                send(wire.Error(0, 0x0A, "", "shutting down"))
                send(grant(message))  # must not be delivered: the session is over

        async with FakeServer(script) as fake:
            async with lockd.connect(fake.addr, reconnect=False) as client:
                owned = await client.acquire("owned")
                with self.assertRaises(lockd.LockdConnectionError):
                    await asyncio.wait_for(client.acquire("late"), 5)
                self.assertEqual(owned.lost.reason, "disconnected")


    async def test_request_id_0_closes_the_session_unless_it_is_invalid_argument(self) -> None:
        def script(message: wire.Message, send) -> None:  # type: ignore[no-untyped-def]
            if isinstance(message, wire.Acquire):
                send(grant(message))
                send(wire.Error(0, 0x0B, "", "Request id 0 is reserved for the server"))

        async with FakeServer(script) as fake:
            async with lockd.connect(fake.addr, reconnect=False) as client:
                lock = await client.acquire("kept", lease_ms=60_000)
                await asyncio.sleep(0.05)
                self.assertFalse(lock.lost.is_set())
                self.assertTrue(client.connected)


class LostReasons(unittest.IsolatedAsyncioTestCase):
    async def lost_reason(self, after_grant: list[wire.Message]) -> lockd.Lock:
        def script(message: wire.Message, send) -> None:  # type: ignore[no-untyped-def]
            if isinstance(message, wire.Acquire):
                send(grant(message))
                for frame in after_grant:
                    if isinstance(frame, wire.Error) and frame.request_id == -1:
                        frame = wire.Error(message.request_id, frame.code, frame.name, frame.message)
                    send(frame)

        async with FakeServer(script) as fake:
            async with lockd.connect(fake.addr, reconnect=False) as client:
                lock = await client.acquire("x", lease_ms=60_000)
                await asyncio.wait_for(lock.lost.wait(), 5)
                return lock

    async def test_lease_expired_is_expired(self) -> None:
        lock = await self.lost_reason([wire.Error(-1, 0x05, "x", "expired")])
        self.assertEqual(lock.lost.reason, "expired")
        self.assertIn("its lease expired", str(lock.lost.error))

    async def test_closed_by_admin_is_force(self) -> None:
        lock = await self.lost_reason([wire.Error(0, 0x02, "x", "closed by administrator")])
        self.assertEqual(lock.lost.reason, "force")

    async def test_io_timeout_is_io_timeout(self) -> None:
        lock = await self.lost_reason([wire.Error(0, 0x0E, "", "no traffic")])
        self.assertEqual(lock.lost.reason, "io_timeout")

    async def test_a_plain_close_is_disconnected(self) -> None:
        lock = await self.lost_reason([None])  # type: ignore[list-item]
        self.assertEqual(lock.lost.reason, "disconnected")

    async def test_a_lease_expired_for_another_ownership_is_a_protocol_error(self) -> None:
        # An unknown request id, or another lock's name under the right one: the server is
        # confused or hostile, so the session ends (the lock is lost as disconnected), counted.
        for frame in (
            lambda m: wire.Error(m.request_id + 100, 0x05, "x", "not yours"),
            lambda m: wire.Error(m.request_id, 0x05, "other-name", "not yours either"),
        ):

            def script(message: wire.Message, send, frame=frame) -> None:  # type: ignore[no-untyped-def]
                if isinstance(message, wire.Acquire):
                    send(grant(message))
                    send(frame(message))

            async with FakeServer(script) as fake:
                async with lockd.connect(fake.addr, reconnect=False) as client:
                    lock = await client.acquire("x", lease_ms=60_000)
                    await asyncio.wait_for(lock.lost.wait(), 5)
                    self.assertEqual(lock.lost.reason, "disconnected")
                    self.assertEqual(client.protocol_errors, 1)


class Heartbeats(unittest.IsolatedAsyncioTestCase):
    async def test_the_cadence_is_a_third_of_the_shortest_lease_counting_waiting_claims(self) -> None:
        beats: list[float] = []
        loop = asyncio.get_running_loop()

        def script(message: wire.Message, send) -> None:  # type: ignore[no-untyped-def]
            if isinstance(message, wire.Heartbeat):
                beats.append(loop.time())
                send(wire.HeartbeatAck(message.request_id, 0))
            # ACQUIREs are never answered: the claim keeps waiting.

        async with FakeServer(script, io_timeout_ms=30_000) as fake:
            async with lockd.connect(fake.addr) as client:
                waiting = asyncio.ensure_future(client.acquire("slow", lease_ms=300))
                await asyncio.sleep(0.55)
                waiting.cancel()
        # 300 ms lease → a heartbeat every 100 ms while the claim waits (not every 10 s).
        self.assertGreaterEqual(len(beats), 4, beats)
        gaps = [b - a for a, b in zip(beats, beats[1:])]
        self.assertTrue(all(0.08 <= gap <= 0.2 for gap in gaps), gaps)

    async def test_the_deadline_moves_only_with_acknowledged_heartbeats(self) -> None:
        answer = asyncio.Event()
        answer.set()

        def script(message: wire.Message, send) -> None:  # type: ignore[no-untyped-def]
            if isinstance(message, wire.Acquire):
                send(grant(message))
            elif isinstance(message, wire.Heartbeat) and answer.is_set():
                send(wire.HeartbeatAck(message.request_id, 1))

        async with FakeServer(script) as fake:
            async with lockd.connect(fake.addr) as client:
                lock = await client.acquire("x", lease_ms=300)
                first_deadline = lock.deadline_ms
                await asyncio.sleep(0.25)
                self.assertFalse(lock.lost.is_set())
                self.assertGreater(lock.deadline_ms, first_deadline, "ACKs moved the deadline")
                answer.clear()  # the server keeps the connection but stops answering
                silenced_at = asyncio.get_running_loop().time() * 1000
                await asyncio.wait_for(lock.lost.wait(), 2)
                lost_after = asyncio.get_running_loop().time() * 1000 - silenced_at
                self.assertEqual(lock.lost.reason, "lease_unconfirmed")
                self.assertLessEqual(lost_after, 300)  # confirmed send ≤ silence start; minus margin


    async def test_an_io_timeout_shorter_than_the_lease_bounds_the_deadline(self) -> None:
        answer = asyncio.Event()
        answer.set()

        def script(message: wire.Message, send) -> None:  # type: ignore[no-untyped-def]
            if isinstance(message, wire.Acquire):
                send(grant(message))
            elif isinstance(message, wire.Heartbeat) and answer.is_set():
                send(wire.HeartbeatAck(message.request_id, 1))

        async with FakeServer(script, io_timeout_ms=300) as fake:
            async with lockd.connect(fake.addr) as client:
                lock = await client.acquire("x", lease_ms=60_000)  # the server would time us out first
                await asyncio.sleep(0.2)
                answer.clear()
                silenced_at = asyncio.get_running_loop().time() * 1000
                await asyncio.wait_for(lock.lost.wait(), 2)
                lost_after = asyncio.get_running_loop().time() * 1000 - silenced_at
                self.assertEqual(lock.lost.reason, "lease_unconfirmed")
                self.assertLessEqual(lost_after, 300 - 50 + 20)

    async def test_a_release_in_flight_is_done_when_the_deadline_passes_first(self) -> None:
        answer = asyncio.Event()
        answer.set()

        def script(message: wire.Message, send) -> None:  # type: ignore[no-untyped-def]
            if isinstance(message, wire.Acquire):
                send(grant(message))
            elif isinstance(message, wire.Heartbeat) and answer.is_set():
                send(wire.HeartbeatAck(message.request_id, 1))
            # RELEASE is never answered.

        async with FakeServer(script) as fake:
            async with lockd.connect(fake.addr) as client:
                lock = await client.acquire("x", lease_ms=300)
                answer.clear()
                await asyncio.wait_for(lock.release(), 2)
                self.assertFalse(lock.lost.is_set(), "released, not lost")

    async def test_a_grant_that_arrives_past_its_deadline_arrives_lost_and_is_given_back(self) -> None:
        pending: list[wire.Acquire] = []

        def script(message: wire.Message, send) -> None:  # type: ignore[no-untyped-def]
            if isinstance(message, wire.Acquire):
                pending.append(message)  # answered later; heartbeats get no ACK meanwhile

        async with FakeServer(script) as fake:
            async with lockd.connect(fake.addr) as client:
                waiting = asyncio.ensure_future(client.acquire("late", lease_ms=100))
                await eventually(lambda: len(pending) == 1, "ACQUIRE sent")
                await asyncio.sleep(0.2)  # longer than the lease, nothing acknowledged
                fake_send = fake.last_send
                fake_send(grant(pending[0]))
                lock = await asyncio.wait_for(waiting, 2)
                self.assertEqual(lock.lost.reason, "lease_unconfirmed")
                await eventually(
                    lambda: any(isinstance(m, wire.Release) and m.token == TOKEN for m in fake.received),
                    "the grant was given back",
                )


class Reconnects(unittest.IsolatedAsyncioTestCase):
    async def test_back_off_grows_until_a_welcome_and_waiting_acquires_are_resent(self) -> None:
        connections: list[float] = []
        loop = asyncio.get_running_loop()
        state = {"refuse": 0}

        def script(message: wire.Message, send) -> None:  # type: ignore[no-untyped-def]
            if isinstance(message, wire.Acquire):
                if fake.connections == 1:
                    send(wire.Error(0, 0x02, message.name, "closed by administrator"))
                else:
                    send(grant(message))

        class Refusing(FakeServer):
            async def _serve(self, reader, writer):  # type: ignore[no-untyped-def]
                connections.append(loop.time())
                if 1 <= state["refuse"] <= 4:  # accepted, then refused before WELCOME
                    state["refuse"] += 1
                    writer.write(wire.encode(wire.Error(0, 0x09, "", "session limit")))
                    writer.close()
                    self.connections += 1
                    return
                if state["refuse"] == 0:
                    state["refuse"] = 1
                await super()._serve(reader, writer)

        # Every delay at the top of its window, so the windows show in the connection times.
        with mock.patch("lockd._client.random.random", return_value=0.999):
            async with Refusing(script) as fake:
                async with lockd.connect(fake.addr) as client:
                    lock = await asyncio.wait_for(client.acquire("rejoin"), 10)
                    self.assertEqual(client.sessions_opened, 2)
                    self.assertEqual(lock.name, "rejoin")
        # 1 session, 4 attempts refused after TCP accepted them, 1 session.
        self.assertEqual(len(connections), 6)
        gaps_ms = [(b - a) * 1000 for a, b in zip(connections[1:], connections[2:])]
        # Accepted-then-refused attempts do not reset the back-off: 100, 200, 400, 800 ms.
        for gap, window in zip(gaps_ms, [100, 200, 400, 800]):
            self.assertGreaterEqual(gap, window * 0.95, gaps_ms)
        acquires = [m for m in fake.received if isinstance(m, wire.Acquire)]
        self.assertEqual(len(acquires), 2, "the waiting ACQUIRE was sent again after the WELCOME")


    async def test_a_connection_unanswered_for_the_io_timeout_is_dropped_and_the_wait_moves(self) -> None:
        def script(message: wire.Message, send) -> None:  # type: ignore[no-untyped-def]
            # The first connection hears everything and answers nothing; the second grants.
            if fake.connections >= 2 and isinstance(message, wire.Acquire):
                send(grant(message))

        async with FakeServer(script, io_timeout_ms=300) as fake:
            async with lockd.connect(fake.addr) as client:
                lock = await asyncio.wait_for(client.acquire("moved"), 5)
                self.assertEqual(fake.connections, 2)
                self.assertEqual(lock.name, "moved")

    async def test_a_hundred_clients_cut_off_together_spread_their_reconnects(self) -> None:
        reconnected = 0
        cut = asyncio.Event()
        delays_ms: list[float] = []
        real_delay = lockd.backoff_delay_ms

        def recorded_delay(attempt: int, rng=None) -> float:  # type: ignore[no-untyped-def]
            delay = real_delay(attempt, rng)
            delays_ms.append(delay)
            return delay

        class Cutting(FakeServer):
            async def _serve(self, reader, writer):  # type: ignore[no-untyped-def]
                nonlocal reconnected
                if cut.is_set():
                    reconnected += 1
                await super()._serve(reader, writer)

        with mock.patch("lockd._client.backoff_delay_ms", recorded_delay):
            async with Cutting(lambda message, send: None) as fake:
                clients = [await lockd.connect(fake.addr) for _ in range(100)]
                try:
                    cut.set()
                    for writer in list(fake._writers):
                        writer.close()  # the server drops everyone at once
                    await eventually(lambda: reconnected >= 100, "every client reconnected", 10)
                finally:
                    for client in clients:
                        await client.close()
        # Each client draws its own delay over the whole first window (0..50 ms).
        self.assertEqual(len(delays_ms), 100)
        self.assertTrue(all(0 <= d < 50 for d in delays_ms), delays_ms)
        self.assertGreater(max(delays_ms) - min(delays_ms), 35)
        busiest = max(sum(1 for d in delays_ms if start <= d < start + 5) for start in delays_ms)
        self.assertLess(busiest, 30, sorted(delays_ms))

    async def test_cancelling_connect_stops_it_and_closes_the_socket(self) -> None:
        accepted: list[asyncio.StreamWriter] = []
        closed = asyncio.Event()

        async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            accepted.append(writer)
            await reader.read()  # EOF once the client closes
            closed.set()

        server = await asyncio.start_server(silent, "127.0.0.1", 0)
        addr = "127.0.0.1:%d" % server.sockets[0].getsockname()[1]
        try:
            task = asyncio.ensure_future(lockd.connect(addr, connect_timeout_ms=60_000))
            await eventually(lambda: len(accepted) == 1, "connected")
            task.cancel()
            with self.assertRaises(asyncio.CancelledError):
                await task
            await asyncio.wait_for(closed.wait(), 2)
        finally:
            for writer in accepted:
                writer.close()
            server.close()
            await server.wait_closed()


class SyncWrapper(unittest.TestCase):
    def test_lock_try_acquire_and_lost_from_ordinary_code(self) -> None:
        from lockd.sync import connect

        holders: set[str] = set()

        async def script(message: wire.Message, send) -> None:  # type: ignore[no-untyped-def]
            if isinstance(message, wire.Acquire):
                if message.name in holders:
                    send(wire.Error(message.request_id, 0x07, message.name, "held"))
                else:
                    holders.add(message.name)
                    send(grant(message))
                    if message.name == "doomed":
                        send(wire.Error(message.request_id, 0x05, message.name, "expired"))
            elif isinstance(message, wire.Release):
                holders.discard(message.name)
                send(wire.Released(message.request_id, message.name))

        loop = asyncio.new_event_loop()
        ready = loop.run_until_complete(FakeServer(script).__aenter__())
        import threading

        thread = threading.Thread(target=loop.run_forever, daemon=True)
        thread.start()
        try:
            with connect(ready.addr) as client:
                with client.lock("jobs/nightly", lease_ms=10_000, wait_ms=1_000) as lock:
                    self.assertEqual(lock.token, TOKEN)
                    self.assertIsNone(client.try_acquire("jobs/nightly"))
                    self.assertFalse(lock.lost.is_set())
                self.assertNotIn("jobs/nightly", holders)
                doomed = client.acquire("doomed")
                self.assertTrue(doomed.lost.wait(5))
                self.assertEqual(doomed.lost.reason, "expired")
                with self.assertRaises(lockd.LockLostError):
                    doomed.check()
                doomed.release()  # quiet: already lost
        finally:
            asyncio.run_coroutine_threadsafe(ready.__aexit__(None, None, None), loop).result(5)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(5)
            loop.close()


if __name__ == "__main__":
    unittest.main()
