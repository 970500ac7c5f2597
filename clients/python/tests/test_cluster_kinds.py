"""Lock kinds, values and watches across a leader SIGKILL, in cluster mode (docs/cluster.md, "Lock
kinds, values and watches across a fail-over"): two nodes on a one-member etcd. The TypeScript
client's tests/cluster/cluster_kinds_client_test.ts has the same case.

A semaphore of 3 with 3 holders and a waiter, and a shared lock with 2 readers and a queued writer:
every holder keeps its token, slot, mode, write generation and value (one set just before the
kill), no lost callback; the waiters keep their places. An observer watches again at the new leader
and sees its snapshot with the holders and waiters."""

from __future__ import annotations

import asyncio
import unittest

import lockd

from helpers import SKIP_WITHOUT_ETCD, eventually
from test_cluster import TwoNodes, carries_locks_over


def tokens(state: lockd.LockState | None) -> list[int]:
    return [] if state is None else [h.token for h in state.holders]


@unittest.skipIf(SKIP_WITHOUT_ETCD, "no etcd here (CI sets LOCKD_REQUIRE_ETCD)")
class ClusterKinds(TwoNodes):

    async def test_a_semaphore_a_shared_lock_values_and_an_observer_survive_a_leader_kill(self) -> None:
        if not carries_locks_over(self.leader):
            self.skipTest("this server's cluster mode does not carry locks over yet (milestone 2)")
        addrs = [self.leader.addr, self.standby.addr]

        async def client() -> lockd.Client:
            c = await lockd.connect(addrs=addrs)
            self.addAsyncCleanup(c.close)
            return c

        lease = 10_000
        sem = [await (await client()).acquire("k/sem", limit=3, lease_ms=lease, value=v) for v in "abc"]
        self.assertEqual([lock.slot for lock in sem], [0, 1, 2])
        sem_waiter = asyncio.ensure_future((await client()).acquire("k/sem", limit=3, lease_ms=lease))
        self.addAsyncCleanup(asyncio.gather, sem_waiter, return_exceptions=True)
        # The readers queue behind a writer, so they get its token as their write generation.
        writer0 = await (await client()).acquire("k/doc", lease_ms=lease)
        reading = [
            asyncio.ensure_future((await client()).acquire("k/doc", mode="shared", lease_ms=lease, value=v))
            for v in ("r1", "r2")
        ]
        await asyncio.sleep(0.2)
        await writer0.release()
        readers = [await asyncio.wait_for(r, 5) for r in reading]
        self.assertEqual([r.write_generation for r in readers], [writer0.token] * 2)
        writer = asyncio.ensure_future((await client()).acquire("k/doc", lease_ms=lease))
        self.addAsyncCleanup(asyncio.gather, writer, return_exceptions=True)
        observer = await client()
        latest: dict[str, lockd.LockState] = {}
        seen: dict[str, lockd.LockState] = {}
        since_kill = False

        async def watch(states: lockd.Observer) -> None:
            async for state in states:
                latest[state.name] = state
                if since_kill:
                    seen[state.name] = state

        async with observer.observe("k/*") as states:
            reader = asyncio.ensure_future(watch(states))
            self.addAsyncCleanup(asyncio.gather, reader, return_exceptions=True)
            await eventually(lambda: len(latest) == 2, "the observer's snapshot")
            await sem[0].set_value("a2")
            await eventually(
                lambda: latest["k/sem"].holders[0].value == b"a2", "the observer saw the value"
            )
            lost: list[str] = []
            for lock in [*sem, *readers]:
                lock.add_lost_callback(lost.append)
            before = [(lock.token, lock.slot, lock.mode, lock.write_generation, lock.value) for lock in [*sem, *readers]]

            since_kill = True
            await asyncio.to_thread(self.leader.kill)  # SIGKILL: no hand-over
            await eventually(
                lambda: states.watches_sent == 2
                and tokens(seen.get("k/sem")) == [lock.token for lock in sem]
                and tokens(seen.get("k/doc")) == [r.token for r in readers]
                and seen["k/sem"].queue_length == 1
                and seen["k/doc"].queue_length == 1,
                "the observer watched again at the new leader and sees every holder and waiter",
                20,
            )
            sem_state, doc_state = seen["k/sem"], seen["k/doc"]
            self.assertEqual((sem_state.kind, sem_state.limit), ("semaphore", 3))
            self.assertEqual(
                [(h.token, h.slot, h.value) for h in sem_state.holders],
                [(sem[0].token, 0, b"a2"), (sem[1].token, 1, b"b"), (sem[2].token, 2, b"c")],
            )
            self.assertEqual((doc_state.kind, [h.mode for h in doc_state.holders]), ("shared", ["shared"] * 2))
            self.assertEqual((await observer.query("k/sem")).holder.value, b"a2")
            after = [(lock.token, lock.slot, lock.mode, lock.write_generation, lock.value) for lock in [*sem, *readers]]
            self.assertEqual(after, before)
            self.assertEqual([lock.state for lock in [*sem, *readers]], ["held"] * 5)
            self.assertEqual(lost, [])
            self.assertFalse(sem_waiter.done() or writer.done(), "the waiters wait at their places")

            await sem[1].release()
            granted = await asyncio.wait_for(sem_waiter, 10)
            self.assertEqual(granted.slot, 1)
            self.assertGreater(granted.token, sem[2].token)
            for r in readers:
                await r.release()
            wrote = await asyncio.wait_for(writer, 20)  # after the window: a reader may still come
            self.assertGreater(wrote.token, readers[1].token)
            for lock in (granted, wrote, sem[0], sem[2]):
                await lock.release()


if __name__ == "__main__":
    unittest.main()
