"""The client against lockd in cluster mode (docs/cluster.md): two nodes on a one-member etcd.

Cluster milestone 2 (protocol version 2): a holder keeps its lock and its token across a leader
kill (RESUME and RECLAIM at the new leader), and a client started during a fail-over is held until
the new leader serves rather than refused."""

from __future__ import annotations

import asyncio
import socket
import time
import unittest

import lockd

from helpers import SKIP_WITHOUT_ETCD, EtcdServer, LockdServer, eventually


def dead_addr() -> str:
    """A loopback address nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return "127.0.0.1:%d" % sock.getsockname()[1]


def holder(server: LockdServer, name: str) -> dict[str, object]:
    status, body = server.admin("GET", server.lock_path(name))
    if status != 200 or not isinstance(body, dict) or not isinstance(body.get("holder"), dict):
        return {}
    return body["holder"]


def carries_locks_over(server: LockdServer) -> bool:
    """Whether the server's cluster mode carries locks over a fail-over (its /api/info reports the
    ownership records of milestone 2)."""
    status, info = server.admin("GET", "/api/info")
    return status == 200 and isinstance(info, dict) and "records" in (info.get("cluster") or {})


def serving(server: LockdServer) -> bool:
    status, info = server.admin("GET", "/api/info")
    return status == 200 and isinstance(info, dict) and bool(info["cluster"]["serving"])


class TwoNodes(unittest.IsolatedAsyncioTestCase):
    """A leader and a standby on a one-member etcd, with ``flags`` more."""

    flags: tuple[str, ...] = ()

    async def asyncSetUp(self) -> None:
        self.etcd = EtcdServer().start()
        self.addCleanup(self.etcd.stop)
        flags = ("-cluster-etcd", self.etcd.url, "-cluster", "py", *self.flags)
        # The first node starts alone, so it is the leader; the second one stands by.
        self.leader = LockdServer(*flags).start()
        self.addCleanup(self.leader.stop)
        await eventually(lambda: serving(self.leader), "the first node serves")
        self.standby = LockdServer(*flags).start()
        self.addCleanup(self.standby.stop)
        await eventually(
            lambda: self.standby.admin("GET", "/api/info")[1]["cluster"]["leader"] is not None,  # type: ignore[index]
            "the standby knows the leader",
        )


@unittest.skipIf(SKIP_WITHOUT_ETCD, "no etcd here (CI sets LOCKD_REQUIRE_ETCD)")
class Cluster(TwoNodes):

    async def test_an_address_list_with_a_dead_first_entry_reaches_the_leader_through_not_leader(self) -> None:
        # Without TLS a NOT_LEADER is followed to a listed address only (docs/protocol.md).
        client = await lockd.connect(addrs=[dead_addr(), self.standby.addr, self.leader.addr])
        self.addAsyncCleanup(client.close)
        self.assertEqual(client.addr, self.leader.addr)
        async with client.lock("py/cluster", lease_ms=1_000) as lock:
            self.assertGreater(lock.token, 2**32)

    async def test_without_tls_a_leader_outside_the_address_list_is_not_followed(self) -> None:
        with self.assertRaises(lockd.LockdConnectionError) as raised:
            await lockd.connect(addrs=[dead_addr(), self.standby.addr], reconnect=False)
        self.assertIn(f"named {self.leader.addr} as the leader, which is not in the address list", str(raised.exception))

    async def test_a_hand_over_loses_the_lock_with_failover_and_the_waiter_moves_to_the_new_leader(self) -> None:
        # A holder that does not carry its lock over (reclaim=False) loses it, as in cluster
        # milestone 1; by default it keeps it (the test below).
        addrs = [self.leader.addr, self.standby.addr]
        holder = await lockd.connect(addrs=addrs, reclaim=False)
        self.addAsyncCleanup(holder.close)
        waiter = await lockd.connect(addrs=addrs)
        self.addAsyncCleanup(waiter.close)
        lock = await holder.acquire("py/handover", lease_ms=1_000)
        waiting = asyncio.create_task(waiter.acquire("py/handover", lease_ms=1_000))
        await asyncio.sleep(0.2)
        await asyncio.to_thread(self.leader.stop)  # SIGTERM: a planned hand-over
        await asyncio.wait_for(lock.lost.wait(), 10)
        self.assertEqual(lock.lost.reason, "failover")
        granted = await asyncio.wait_for(waiting, 10)
        self.assertGreater(granted.token, lock.token)
        self.assertEqual(waiter.addr, self.standby.addr)
        await granted.release()

    async def test_a_hand_over_keeps_the_lock_and_the_waiter_its_place(self) -> None:
        if not carries_locks_over(self.leader):
            self.skipTest("this server's cluster mode does not carry locks over yet (milestone 2)")
        addrs = [self.leader.addr, self.standby.addr]
        holder_client = await lockd.connect(addrs=addrs)
        self.addAsyncCleanup(holder_client.close)
        waiter = await lockd.connect(addrs=addrs)
        self.addAsyncCleanup(waiter.close)
        lock = await holder_client.acquire("py/handover", lease_ms=2_000)
        lost: list[str] = []
        lock.add_lost_callback(lost.append)
        waiting = asyncio.ensure_future(waiter.acquire("py/handover", lease_ms=2_000))
        self.addAsyncCleanup(asyncio.gather, waiting, return_exceptions=True)
        await asyncio.sleep(0.2)
        await asyncio.to_thread(self.leader.stop)  # SIGTERM: a planned hand-over
        await eventually(
            lambda: holder(self.standby, "py/handover").get("token") == lock.token, "carried over to the new leader", 10
        )
        self.assertEqual((lock.state, lost, holder_client.addr), ("held", [], self.standby.addr))
        self.assertFalse(waiting.done(), "still waiting, at its place")
        await lock.release()
        granted = await asyncio.wait_for(waiting, 10)
        self.assertGreater(granted.token, lock.token)
        self.assertEqual(waiter.addr, self.standby.addr)
        await granted.release()

    async def test_a_rider_keeps_its_lock_and_its_token_across_a_leader_kill(self) -> None:
        if not carries_locks_over(self.leader):
            self.skipTest("this server's cluster mode does not carry locks over yet (milestone 2)")
        client = await lockd.connect(addrs=[self.leader.addr, self.standby.addr])
        self.addAsyncCleanup(client.close)
        lock = await client.acquire("py/rider", lease_ms=10_000)
        lost: list[str] = []
        lock.add_lost_callback(lost.append)
        await asyncio.to_thread(self.leader.kill)  # SIGKILL: no hand-over
        await eventually(lambda: client.addr == self.standby.addr and client.connected, "at the new leader", 15)
        await eventually(
            lambda: holder(self.standby, "py/rider").get("token") == lock.token, "carried over to the new leader", 15
        )
        self.assertEqual((lock.state, lost), ("held", []))
        self.assertEqual(holder(self.standby, "py/rider").get("session"), client.session_id)
        other = await lockd.connect(addrs=[self.standby.addr])
        self.addAsyncCleanup(other.close)
        self.assertIsNone(await other.try_acquire("py/rider"), "still held: by the rider")
        await lock.release()
        self.assertEqual(lost, [])


    async def test_an_observer_watches_again_at_the_new_leader_and_the_value_travels_with_the_lock(self) -> None:
        if not carries_locks_over(self.leader):
            self.skipTest("this server's cluster mode does not carry locks over yet (milestone 2)")
        addrs = [self.leader.addr, self.standby.addr]
        candidate = await lockd.connect(addrs=addrs)
        self.addAsyncCleanup(candidate.close)
        follower = await lockd.connect(addrs=addrs)
        self.addAsyncCleanup(follower.close)
        lock = await candidate.acquire("py/leader", lease_ms=5_000, value="10.0.0.7:8080")
        async with follower.observe("py/leader") as states:
            first = await asyncio.wait_for(anext(states), 5)
            self.assertEqual((first.holder.token, first.holder.value), (lock.token, b"10.0.0.7:8080"))
            await asyncio.to_thread(self.leader.stop)  # SIGTERM: a planned hand-over
            # The WATCH is sent again at the new leader, which answers with a fresh snapshot; the
            # old leader may first report the ownership ended (failover), and the new one may show
            # the lock free until the holder's RECLAIM lands (then "granted"). The holder comes back
            # with its token and its value, carried over with the lock.
            seen = []
            state = await asyncio.wait_for(anext(states), 15)
            while state.holder is None or state.holder.token != lock.token:
                seen.append((state.event, state.reason, state.kind))
                state = await asyncio.wait_for(anext(states), 15)
            self.assertEqual(state.holder.value, b"10.0.0.7:8080", seen)
            self.assertEqual((follower.addr, states.watches_sent), (self.standby.addr, 2))
            # The new leader takes SET_VALUE for it once the holder's client has the RECLAIM's
            # answer; until then set_value fails, retryable (the lock is being carried over).
            for _ in range(100):
                try:
                    await lock.set_value("10.0.0.7:9090")
                    break
                except lockd.LockdConnectionError as error:
                    self.assertTrue(error.retryable)
                    await asyncio.sleep(0.05)
            changed = await asyncio.wait_for(anext(states), 5)
            self.assertEqual((changed.event, changed.holder.value), ("value", b"10.0.0.7:9090"))
        await lock.release()

@unittest.skipIf(SKIP_WITHOUT_ETCD, "no etcd here (CI sets LOCKD_REQUIRE_ETCD)")
class SlowElection(TwoNodes):
    """TTL 6 s: a successor serves about 6.5 s after a leader dies, longer than a standby holds a
    HELLO (4 s at most), so a first round over the list ends in refusals."""

    flags = ("-cluster-ttl", "6s")

    async def test_a_client_started_half_a_second_after_a_leader_kill_gets_its_lock(self) -> None:
        await asyncio.to_thread(self.leader.kill)  # SIGKILL: the successor waits out the TTL
        await asyncio.sleep(0.5)
        started = time.monotonic()
        # The killed node refuses, the standby holds the HELLO, then answers NOT_LEADER naming no
        # leader: the first connect goes on over the list until its bound (10 s with several).
        client = await lockd.connect(addrs=[self.leader.addr, self.standby.addr])
        self.addAsyncCleanup(client.close)
        lock = await client.acquire("py/new-client", lease_ms=2_000, wait_ms=10_000)
        self.assertEqual(client.addr, self.standby.addr)
        self.assertGreater(lock.token, 2**32)
        self.assertLess(time.monotonic() - started, 10)
        await lock.release()


if __name__ == "__main__":
    unittest.main()
