"""Lock kinds, holders' values, QUERY and WATCH in the client (issues 22 and 23), against scripted
peers (tests/helpers.py ``FakeServer``): what the client sends, what it makes of the answers, how
``observe`` re-watches after a reconnect and coalesces for a slow reader, and that every frame of
these exchanges is checked (a misfit closes the connection as a protocol error, never a crash).
"""

from __future__ import annotations

import asyncio
import unittest

import lockd
from lockd import _codec as wire
from lockd.sync import connect as sync_connect

from helpers import FakeServer, eventually

TOKEN = 1_795_426_718_504_001
LEADER = "service/leader"
ADDRESS = b"10.0.0.7:8080"


def holder(token: int = TOKEN, value: bytes = ADDRESS, mode: str = "exclusive", slot: int = 0) -> wire.LockStateHolder:
    return wire.LockStateHolder(token, 42_000, 10_000, mode, slot, "CN=api-1", "api@host-1:4242", value)


def held(request_id: int, name: str = LEADER, event: str = "state", value: bytes = ADDRESS, token: int = TOKEN) -> wire.LockState:
    return wire.LockState(request_id, event, "none", "exclusive", 1, 0, 1, name, (holder(token, value),))


def idle(request_id: int, name: str = LEADER, event: str = "state", reason: str = "none") -> wire.LockState:
    return wire.LockState(request_id, event, reason, "none", 0, 0, 0, name, ())


def acks(message: wire.Message, send) -> bool:  # type: ignore[no-untyped-def]
    if isinstance(message, wire.Heartbeat):
        send(wire.HeartbeatAck(message.request_id, 0))
        return True
    if isinstance(message, wire.Release):
        send(wire.Released(message.request_id, message.name))
        return True
    return False


def grant_as_asked(message: wire.Message, send) -> None:  # type: ignore[no-untyped-def]
    """Grants every ACQUIRE what it asked for (slot 3 of a semaphore, a write generation for shared)."""
    if acks(message, send):
        return
    if isinstance(message, wire.Acquire):
        limit = message.limit or 1
        slot = 3 if limit > 3 else 0
        generation = TOKEN - 5 if message.mode == "shared" else 0
        send(wire.Acquired(message.request_id, TOKEN, 10_000, message.name, b"", message.mode, limit, slot, generation))
    elif isinstance(message, wire.SetValue):
        if message.token == TOKEN:
            send(wire.ValueSet(message.request_id, message.name))
        else:
            send(wire.Error(message.request_id, 0x06, message.name, "not the owner"))


class ProtocolErrors:
    def __init__(self) -> None:
        self.errors: list[lockd.ServerProtocolError] = []

    def __call__(self, error: lockd.ServerProtocolError) -> None:
        self.errors.append(error)


class KindsAndValues(unittest.IsolatedAsyncioTestCase):
    async def test_acquire_sends_mode_limit_and_value_and_the_lock_carries_slot_and_write_generation(self) -> None:
        async with FakeServer(grant_as_asked, value_bytes_max=1024) as fake:
            async with lockd.connect(fake.addr) as client:
                render = await client.acquire("jobs/render", limit=8, value="worker-1")
                self.assertEqual((render.mode, render.limit, render.slot, render.write_generation), ("exclusive", 8, 3, 0))
                self.assertEqual(render.value, b"worker-1")
                report = await client.acquire("reports/daily", mode="shared")
                self.assertEqual((report.mode, report.limit, report.slot), ("shared", 1, 0))
                self.assertEqual(report.write_generation, TOKEN - 5)
                plain = await client.acquire("jobs/nightly")
                self.assertEqual((plain.mode, plain.limit), ("exclusive", 1))
                sent = [m for m in fake.received if isinstance(m, wire.Acquire)]
                self.assertEqual(
                    [(m.name, m.mode, m.limit, m.value) for m in sent],
                    [
                        ("jobs/render", "exclusive", 8, b"worker-1"),
                        ("reports/daily", "shared", 1, b""),
                        ("jobs/nightly", "exclusive", 1, b""),
                    ],
                )

    async def test_set_value_replaces_the_value_and_a_stale_token_gets_not_owner(self) -> None:
        async with FakeServer(grant_as_asked, value_bytes_max=16) as fake:
            async with lockd.connect(fake.addr) as client:
                lock = await client.acquire(LEADER, value=ADDRESS)
                await lock.set_value(b"10.0.0.8:8080")
                self.assertEqual(lock.value, b"10.0.0.8:8080")
                sets = [m for m in fake.received if isinstance(m, wire.SetValue)]
                self.assertEqual([(m.token, m.name, m.value) for m in sets], [(TOKEN, LEADER, b"10.0.0.8:8080")])
                with self.assertRaises(lockd.InvalidArgumentError):  # longer than valueBytesMax: never sent
                    await lock.set_value(b"x" * 17)
                self.assertEqual(len([m for m in fake.received if isinstance(m, wire.SetValue)]), 1)
                lock.token = TOKEN + 1  # as if the grant were another one
                with self.assertRaises(lockd.NotOwnerError):
                    await lock.set_value(b"stale")
                self.assertEqual(lock.value, b"10.0.0.8:8080")

    async def test_a_server_that_takes_no_values_or_speaks_version_1_refuses_kinds_and_looks_locally(self) -> None:
        async with FakeServer(grant_as_asked) as fake:  # valueBytesMax 0
            async with lockd.connect(fake.addr) as client:
                with self.assertRaisesRegex(lockd.InvalidArgumentError, "takes no lock values"):
                    await client.acquire(LEADER, value=ADDRESS)
        async with FakeServer(grant_as_asked, versions=(1,)) as fake:
            async with lockd.connect(fake.addr) as client:
                self.assertEqual(client.protocol_version, 1)
                with self.assertRaisesRegex(lockd.InvalidArgumentError, "shared lock needs protocol version 2"):
                    await client.acquire("reports/daily", mode="shared")
                with self.assertRaisesRegex(lockd.InvalidArgumentError, "semaphore needs protocol version 2"):
                    await client.acquire("jobs/render", limit=8)
                with self.assertRaisesRegex(lockd.InvalidArgumentError, "version 1"):
                    await client.query(LEADER)
                with self.assertRaisesRegex(lockd.InvalidArgumentError, "version 1"):
                    async with client.observe(LEADER) as states:
                        await states.__anext__()
                lock = await client.acquire("jobs/nightly")  # a plain lock still works
                self.assertEqual((lock.mode, lock.limit), ("exclusive", 1))
                self.assertEqual([m for m in fake.received if isinstance(m, wire.Acquire)][0].limit, 0)

    async def test_arguments_are_checked_before_anything_is_sent(self) -> None:
        async with FakeServer(grant_as_asked, value_bytes_max=1024) as fake:
            async with lockd.connect(fake.addr) as client:
                for kind in ({"mode": "read"}, {"limit": -1}, {"limit": 2**32}, {"limit": True}, {"value": b"x" * 70_000}):
                    with self.subTest(kind=kind), self.assertRaises(ValueError):
                        await client.acquire(LEADER, **kind)
                with self.assertRaises(TypeError):
                    await client.acquire(LEADER, value=7)  # type: ignore[arg-type]
                # A name or pattern the wire cannot carry: refused when asked, not at a reconnect.
                with self.assertRaises(ValueError):
                    await client.query("x" * 70_000)
                with self.assertRaises(ValueError):
                    client.observe("\udc00")
                self.assertFalse([m for m in fake.received if isinstance(m, wire.Acquire)])

    async def test_a_grant_of_another_kind_than_asked_is_a_protocol_error(self) -> None:
        cases = {
            "another mode": ("exclusive", 1, 0, 0, {"mode": "exclusive"}, "shared"),
            "another limit": ("exclusive", 4, 0, 0, {"limit": 8}, "exclusive"),
            "slot past the limit": ("exclusive", 8, 8, 0, {"limit": 8}, "exclusive"),
            "a shared semaphore": ("shared", 2, 0, 0, {"mode": "shared", "limit": 0}, "shared"),
            "an exclusive write generation": ("exclusive", 1, 0, 7, {}, "exclusive"),
            "a write generation above the token": ("shared", 1, 0, TOKEN + 1, {"mode": "shared"}, "shared"),
        }
        for what, (mode, limit, slot, generation, asked, sent_mode) in cases.items():
            with self.subTest(what):

                def script(message: wire.Message, send, mode=mode, limit=limit, slot=slot, generation=generation) -> None:  # type: ignore[no-untyped-def]
                    if acks(message, send):
                        return
                    if isinstance(message, wire.Acquire):
                        send(wire.Acquired(message.request_id, TOKEN, 10_000, message.name, b"", mode, limit, slot, generation))

                if sent_mode != mode:
                    asked = {"mode": sent_mode}
                errors = ProtocolErrors()
                async with FakeServer(script) as fake:
                    async with lockd.connect(fake.addr, reconnect=False, on_protocol_error=errors) as client:
                        with self.assertRaises(lockd.LockdConnectionError):
                            await client.acquire("jobs/render", wait_ms=2_000, **asked)
                self.assertEqual(len(errors.errors), 1, errors.errors)


class Downgrade(unittest.IsolatedAsyncioTestCase):
    async def test_a_downgrade_answered_for_another_token_or_not_shared_is_a_protocol_error(self) -> None:
        for what, answer in {
            "another token": lambda m: wire.Acquired(m.request_id, TOKEN + 1, 10_000, m.name, b"", "shared", 1, 0, TOKEN + 1),
            "still exclusive": lambda m: wire.Acquired(m.request_id, TOKEN, 10_000, m.name, b"", "exclusive", 1, 0, 0),
            "a write generation above the token": lambda m: wire.Acquired(m.request_id, TOKEN, 10_000, m.name, b"", "shared", 1, 0, TOKEN + 9),
        }.items():
            with self.subTest(what):

                def script(message: wire.Message, send, answer=answer) -> None:  # type: ignore[no-untyped-def]
                    if isinstance(message, wire.Downgrade):
                        send(answer(message))
                    else:
                        grant_as_asked(message, send)

                errors = ProtocolErrors()
                async with FakeServer(script) as fake:
                    async with lockd.connect(fake.addr, reconnect=False, on_protocol_error=errors) as client:
                        lock = await client.acquire("reports/daily")
                        with self.assertRaises(lockd.LockdConnectionError):
                            await asyncio.wait_for(lock.downgrade(), 5)
                self.assertEqual(len(errors.errors), 1, errors.errors)
                self.assertEqual(lock.mode, "exclusive")

    async def test_a_downgrade_makes_the_lock_shared_with_its_own_token_as_write_generation(self) -> None:
        def script(message: wire.Message, send) -> None:  # type: ignore[no-untyped-def]
            if isinstance(message, wire.Downgrade):
                send(wire.Acquired(message.request_id, message.token, 10_000, message.name, b"", "shared", 1, 0, message.token))
            else:
                grant_as_asked(message, send)

        async with FakeServer(script) as fake:
            async with lockd.connect(fake.addr) as client:
                lock = await client.acquire("reports/daily")
                await lock.downgrade()
                self.assertEqual((lock.mode, lock.write_generation), ("shared", TOKEN))
                await lock.downgrade()  # shared already: nothing sent
                self.assertEqual(len([m for m in fake.received if isinstance(m, wire.Downgrade)]), 1)
                self.assertEqual(client.protocol_errors, 0)


class Query(unittest.IsolatedAsyncioTestCase):
    async def test_query_answers_the_holder_with_identity_client_name_value_and_token_and_none_when_idle(self) -> None:
        def script(message: wire.Message, send) -> None:  # type: ignore[no-untyped-def]
            if acks(message, send):
                return
            if isinstance(message, wire.Query):
                send(held(message.request_id) if message.name == LEADER else idle(message.request_id, message.name))

        async with FakeServer(script) as fake:
            async with lockd.connect(fake.addr) as client:
                state = await client.query(LEADER)
                self.assertEqual((state.name, state.kind, state.limit, state.owners, state.queue_length), (LEADER, "exclusive", 1, 1, 0))
                leader = state.holder
                assert leader is not None
                self.assertEqual(
                    (leader.token, leader.identity, leader.client_name, leader.value, leader.held_ms),
                    (TOKEN, "CN=api-1", "api@host-1:4242", ADDRESS, 42_000),
                )
                self.assertEqual((state.event, state.reason), ("state", None))
                empty = await client.query("nobody/here")
                self.assertIsNone(empty.holder)
                self.assertEqual(empty.kind, "none")

    async def test_a_refused_query_raises_and_the_session_goes_on(self) -> None:
        def script(message: wire.Message, send) -> None:  # type: ignore[no-untyped-def]
            if acks(message, send):
                return
            if isinstance(message, wire.Query):
                send(wire.Error(message.request_id, 0x04, message.name, "denied"))

        async with FakeServer(script) as fake:
            async with lockd.connect(fake.addr) as client:
                with self.assertRaises(lockd.AclDeniedError):
                    await client.query("secret/lock")
                self.assertTrue(client.connected)

    async def test_a_query_whose_connection_ends_is_asked_again_on_the_next(self) -> None:
        def script(message: wire.Message, send) -> None:  # type: ignore[no-untyped-def]
            if acks(message, send):
                return
            if isinstance(message, wire.Query):
                if fake.conn == 1:
                    send(None)  # the connection drops before the answer
                else:
                    send(held(message.request_id))

        async with FakeServer(script) as fake:
            async with lockd.connect(fake.addr) as client:
                state = await asyncio.wait_for(client.query(LEADER), 5)
                self.assertEqual(state.holder.token if state.holder else 0, TOKEN)
                self.assertEqual(fake.connections, 2)

    async def test_a_lock_state_that_does_not_fit_the_query_is_a_protocol_error(self) -> None:
        bad = {
            "another lock": lambda rid: held(rid, name="other/lock"),
            "an event of a watch": lambda rid: held(rid, event="granted"),
            "kind none with a holder": lambda rid: wire.LockState(rid, "state", "none", "none", 0, 0, 1, LEADER, (holder(),)),
            "more holders than owners": lambda rid: wire.LockState(rid, "state", "none", "exclusive", 1, 0, 0, LEADER, (holder(),)),
            "an exclusive lock of limit 2": lambda rid: wire.LockState(rid, "state", "none", "exclusive", 2, 0, 1, LEADER, (holder(),)),
            "a slot of a plain lock": lambda rid: wire.LockState(rid, "state", "none", "exclusive", 1, 0, 1, LEADER, (holder(slot=1),)),
            "a token of 0": lambda rid: wire.LockState(rid, "state", "none", "exclusive", 1, 0, 1, LEADER, (holder(token=0),)),
            "an unknown kind": lambda rid: wire.LockState(rid, "state", "none", 9, 1, 0, 1, LEADER, ()),
            "a reason without an end": lambda rid: wire.LockState(rid, "state", "expired", "none", 0, 0, 0, LEADER, ()),
        }
        for what, answer in bad.items():
            with self.subTest(what):

                def script(message: wire.Message, send, answer=answer) -> None:  # type: ignore[no-untyped-def]
                    if acks(message, send):
                        return
                    if isinstance(message, wire.Query):
                        send(answer(message.request_id))

                errors = ProtocolErrors()
                async with FakeServer(script) as fake:
                    async with lockd.connect(fake.addr, reconnect=False, on_protocol_error=errors) as client:
                        with self.assertRaises(lockd.LockdConnectionError):
                            await asyncio.wait_for(client.query(LEADER), 5)
                self.assertEqual(len(errors.errors), 1, errors.errors)


class Observe(unittest.IsolatedAsyncioTestCase):
    async def test_observe_yields_the_snapshot_then_each_change_and_aclose_unwatches(self) -> None:
        watch_ids: list[int] = []

        def script(message: wire.Message, send) -> None:  # type: ignore[no-untyped-def]
            if acks(message, send):
                return
            if isinstance(message, wire.Watch):
                watch_ids.append(message.request_id)
                send(held(message.request_id))
                send(wire.Watching(message.request_id, 1))
            elif isinstance(message, wire.Unwatch):
                send(wire.WatchEnded(message.request_id, "unwatched"))

        async with FakeServer(script) as fake:
            async with lockd.connect(fake.addr) as client:
                seen = []
                async with client.observe(LEADER) as states:
                    async for state in states:
                        seen.append((state.event, state.reason, state.holder.token if state.holder else None))
                        if state.event == "state":
                            await eventually(lambda: states.watching, "WATCHING")
                            fake.last_send(idle(watch_ids[0], event="ended", reason="expired"))
                        elif state.event == "ended":
                            fake.last_send(held(watch_ids[0], event="granted", token=TOKEN + 1, value=b"10.0.0.8:8080"))
                        else:
                            break
                self.assertEqual(
                    seen, [("state", None, TOKEN), ("ended", "expired", None), ("granted", None, TOKEN + 1)]
                )
                await eventually(lambda: any(isinstance(m, wire.Unwatch) for m in fake.received), "UNWATCH sent")
                await asyncio.sleep(0.05)
                self.assertTrue(client.connected)  # WATCH_ENDED fitted the UNWATCH
                self.assertEqual(client.protocol_errors, 0)

    async def test_a_slow_reader_gets_the_latest_state_of_each_lock_not_a_backlog(self) -> None:
        def script(message: wire.Message, send) -> None:  # type: ignore[no-untyped-def]
            if acks(message, send):
                return
            if isinstance(message, wire.Watch):
                send(wire.Watching(message.request_id, 0))
                for token in range(TOKEN, TOKEN + 50):
                    send(held(message.request_id, name="service/a", event="granted", token=token))
                    send(held(message.request_id, name="service/b", event="granted", token=token))

        async with FakeServer(script) as fake:
            async with lockd.connect(fake.addr) as client:
                observer = client.observe("service/*")
                await eventually(lambda: len(observer._waiting) == 2 and observer._waiting["service/b"].holders[0].token == TOKEN + 49, "all 100 events read")
                first = await observer.__anext__()
                second = await observer.__anext__()
                self.assertEqual([(s.name, s.holder.token if s.holder else 0) for s in (first, second)], [("service/a", TOKEN + 49), ("service/b", TOKEN + 49)])
                await observer.aclose()
                with self.assertRaises(StopAsyncIteration):
                    await observer.__anext__()

    async def test_after_a_reconnect_observe_watches_again_and_a_lock_gone_meanwhile_reads_none(self) -> None:
        def script(message: wire.Message, send) -> None:  # type: ignore[no-untyped-def]
            if acks(message, send):
                return
            if isinstance(message, wire.Watch):
                if fake.conn == 1:
                    send(held(message.request_id, name="service/a"))
                    send(held(message.request_id, name="service/b"))
                    send(wire.Watching(message.request_id, 2))
                else:
                    send(held(message.request_id, name="service/a", token=TOKEN + 7))
                    send(wire.Watching(message.request_id, 1))

        async with FakeServer(script) as fake:
            async with lockd.connect(fake.addr) as client:
                async with client.observe("service/*") as states:
                    first = [await states.__anext__(), await states.__anext__()]
                    self.assertEqual([s.name for s in first], ["service/a", "service/b"])
                    await eventually(lambda: states.watching, "WATCHING")
                    fake.last_send(None)  # the connection drops
                    after = [await asyncio.wait_for(states.__anext__(), 5), await asyncio.wait_for(states.__anext__(), 5)]
                    self.assertEqual(
                        [(s.name, s.kind, s.holder.token if s.holder else None) for s in after],
                        [("service/a", "exclusive", TOKEN + 7), ("service/b", "none", None)],
                    )
                    self.assertEqual(states.watches_sent, 2)
                    self.assertEqual(fake.connections, 2)

    async def test_a_refused_or_overfull_watch_raises_in_the_iterator(self) -> None:
        def script(message: wire.Message, send) -> None:  # type: ignore[no-untyped-def]
            if acks(message, send):
                return
            if isinstance(message, wire.Watch):
                if message.pattern == "secret/**":
                    send(wire.Error(message.request_id, 0x04, "", "denied"))
                else:
                    send(wire.WatchEnded(message.request_id, "too_many_locks"))

        async with FakeServer(script) as fake:
            async with lockd.connect(fake.addr) as client:
                with self.assertRaises(lockd.AclDeniedError):
                    async for _ in client.observe("secret/**"):
                        pass
                with self.assertRaises(lockd.LimitExceededError):
                    async for _ in client.observe("**"):
                        pass
                self.assertTrue(client.connected)

    async def test_close_ends_every_observer(self) -> None:
        def script(message: wire.Message, send) -> None:  # type: ignore[no-untyped-def]
            if acks(message, send):
                return
            if isinstance(message, wire.Watch):
                send(wire.Watching(message.request_id, 0))

        async with FakeServer(script) as fake:
            client = await lockd.connect(fake.addr)
            observer = client.observe(LEADER)
            reader = asyncio.ensure_future(observer.__anext__())
            await asyncio.sleep(0.05)
            await client.close()
            with self.assertRaises(StopAsyncIteration):
                await asyncio.wait_for(reader, 2)

    async def test_watch_frames_that_do_not_fit_are_protocol_errors(self) -> None:
        bad = {
            "a lock the pattern cannot match": lambda rid: [held(rid, name="other/a"), wire.Watching(rid, 1)],
            "WATCHING with the wrong count": lambda rid: [held(rid), wire.Watching(rid, 2)],
            "an event before WATCHING": lambda rid: [held(rid, event="granted")],
            "a snapshot after WATCHING": lambda rid: [wire.Watching(rid, 0), held(rid)],
            "unwatched without UNWATCH": lambda rid: [wire.WatchEnded(rid, "unwatched")],
            "WATCHING twice": lambda rid: [wire.Watching(rid, 0), wire.Watching(rid, 0)],
            "a WATCH refused after WATCHING": lambda rid: [wire.Watching(rid, 0), wire.Error(rid, 0x0B, "", "no")],
            "VALUE_SET for nothing": lambda rid: [wire.ValueSet(rid + 100, LEADER)],
            "an unknown event": lambda rid: [wire.Watching(rid, 0), wire.LockState(rid, 9, "none", "none", 0, 0, 0, "service/x", ())],
        }
        for what, frames in bad.items():
            with self.subTest(what):

                def script(message: wire.Message, send, frames=frames) -> None:  # type: ignore[no-untyped-def]
                    if acks(message, send):
                        return
                    if isinstance(message, wire.Watch):
                        for frame in frames(message.request_id):
                            send(frame)

                errors = ProtocolErrors()
                async with FakeServer(script) as fake:
                    async with lockd.connect(fake.addr, reconnect=False, on_protocol_error=errors) as client:
                        observer = client.observe("service/*")
                        with self.assertRaises((lockd.LockdConnectionError, StopAsyncIteration)):
                            while True:
                                await asyncio.wait_for(observer.__anext__(), 5)
                self.assertEqual(len(errors.errors), 1, errors.errors)


class Sync(unittest.IsolatedAsyncioTestCase):
    async def test_the_sync_wrapper_queries_observes_and_sets_values(self) -> None:
        def script(message: wire.Message, send) -> None:  # type: ignore[no-untyped-def]
            if isinstance(message, wire.Query):
                send(held(message.request_id))
            elif isinstance(message, wire.Watch):
                send(held(message.request_id))
                send(wire.Watching(message.request_id, 1))
            elif isinstance(message, wire.Unwatch):
                send(wire.WatchEnded(message.request_id, "unwatched"))
            else:
                grant_as_asked(message, send)

        async with FakeServer(script, value_bytes_max=64) as fake:

            def run() -> tuple[object, ...]:
                with sync_connect(fake.addr) as client:
                    lock = client.acquire("jobs/render", limit=8, value=b"a")
                    lock.set_value("b")
                    state = client.query(LEADER)
                    with client.observe(LEADER) as states:
                        first = states.next_state(timeout_s=5)
                        with self.assertRaises(TimeoutError):
                            states.next_state(timeout_s=0.1)
                    return (lock.slot, lock.limit, lock.value, state.holder.value if state.holder else None, first.name)

            self.assertEqual(await asyncio.to_thread(run), (3, 8, b"b", ADDRESS, LEADER))


if __name__ == "__main__":
    unittest.main()
