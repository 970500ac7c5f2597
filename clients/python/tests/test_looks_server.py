"""Lock kinds, values, QUERY and WATCH against a real server (issues 22 and 23). Each test skips
while the server refuses the feature ("... is not supported by this server yet", docs/protocol.md
"Version 2"), so the suite runs on either side of the server's support landing."""

from __future__ import annotations

import asyncio
import unittest

import lockd

from helpers import LockdServer

LEADER = "service/leader"


class RealServer(unittest.IsolatedAsyncioTestCase):
    server: LockdServer

    @classmethod
    def setUpClass(cls) -> None:
        cls.server = LockdServer().start()

    @classmethod
    def tearDownClass(cls) -> None:
        cls.server.stop()

    def skip_if_not_served(self, error: lockd.LockdError) -> None:
        if isinstance(error, lockd.InvalidArgumentError) and (
            "not supported by this server" in error.message or "takes no lock values" in error.message
        ):
            self.skipTest(f"the server does not serve this yet: {error.message}")
        raise error

    async def test_a_follower_queries_and_observes_the_leader_and_its_published_address(self) -> None:
        async with lockd.connect(self.server.addr) as leader, lockd.connect(self.server.addr) as follower:
            try:
                lock = await leader.acquire(LEADER, lease_ms=5_000, value=b"127.0.0.1:8080")
            except lockd.LockdError as error:
                self.skip_if_not_served(error)
            state = await follower.query(LEADER)
            assert state.holder is not None
            self.assertEqual((state.holder.token, state.holder.value), (lock.token, b"127.0.0.1:8080"))
            async with follower.observe(LEADER) as states:
                snapshot = await asyncio.wait_for(states.__anext__(), 5)
                self.assertEqual(snapshot.holder.token if snapshot.holder else 0, lock.token)
                await lock.set_value("127.0.0.1:8081")
                changed = await asyncio.wait_for(states.__anext__(), 5)
                self.assertEqual((changed.event, changed.holder.value if changed.holder else b""), ("value", b"127.0.0.1:8081"))
                await lock.release()
                ended = await asyncio.wait_for(states.__anext__(), 5)
                self.assertEqual((ended.event, ended.reason, ended.holder), ("ended", "graceful", None))
            idle = await follower.query(LEADER)
            self.assertIsNone(idle.holder)

    async def test_a_semaphore_grants_slots_and_shared_grants_carry_the_write_generation(self) -> None:
        async with lockd.connect(self.server.addr) as one, lockd.connect(self.server.addr) as two:
            try:
                first = await one.acquire("jobs/render", limit=2, wait_ms=2_000)
            except lockd.LockdError as error:
                self.skip_if_not_served(error)
            second = await two.acquire("jobs/render", limit=2, wait_ms=2_000)
            self.assertEqual(sorted((first.slot, second.slot)), [0, 1])
            self.assertEqual((first.limit, second.limit), (2, 2))
            writer = await one.acquire("reports/daily", wait_ms=2_000)
            # The reader waits behind the writer (the lock exists throughout), then gets the writer's token.
            waiting = asyncio.ensure_future(two.acquire("reports/daily", mode="shared", wait_ms=5_000))
            await asyncio.sleep(0.1)
            self.assertFalse(waiting.done())
            await writer.release()
            reader = await waiting
            self.assertEqual((reader.mode, reader.write_generation), ("shared", writer.token))
            await reader.release()

    async def test_a_writer_downgrades_in_place_and_a_waiting_reader_is_granted_beside_it(self) -> None:
        async with lockd.connect(self.server.addr) as one, lockd.connect(self.server.addr) as two:
            try:
                writer = await one.acquire("reports/weekly", wait_ms=2_000)
                waiting = asyncio.ensure_future(two.acquire("reports/weekly", mode="shared", wait_ms=5_000))
                await asyncio.sleep(0.1)
                self.assertFalse(waiting.done())
                await writer.downgrade()
            except lockd.LockdError as error:
                self.skip_if_not_served(error)
            self.assertEqual((writer.mode, writer.write_generation, writer.state), ("shared", writer.token, "held"))
            reader = await asyncio.wait_for(waiting, 5)
            self.assertEqual((reader.mode, reader.write_generation), ("shared", writer.token))
            await writer.downgrade()  # shared already: nothing to do
            render = await one.acquire("jobs/render-x", limit=3)
            with self.assertRaises(lockd.InvalidArgumentError):
                await render.downgrade()  # a semaphore has no shared mode
            state = await two.query("reports/weekly")
            self.assertEqual((state.kind, state.owners), ("shared", 2))


if __name__ == "__main__":
    unittest.main()
