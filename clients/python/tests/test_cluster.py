"""The client against lockd in cluster mode (docs/cluster.md): two nodes on a one-member etcd."""

from __future__ import annotations

import asyncio
import socket
import unittest

import lockd

from helpers import SKIP_WITHOUT_ETCD, EtcdServer, LockdServer, eventually


def dead_addr() -> str:
    """A loopback address nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return "127.0.0.1:%d" % sock.getsockname()[1]


def serving(server: LockdServer) -> bool:
    status, info = server.admin("GET", "/api/info")
    return status == 200 and isinstance(info, dict) and bool(info["cluster"]["serving"])


@unittest.skipIf(SKIP_WITHOUT_ETCD, "no etcd here (CI sets LOCKD_REQUIRE_ETCD)")
class Cluster(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self) -> None:
        self.etcd = EtcdServer().start()
        self.addCleanup(self.etcd.stop)
        flags = ("-cluster-etcd", self.etcd.url, "-cluster", "py")
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
        addrs = [self.leader.addr, self.standby.addr]
        holder = await lockd.connect(addrs=addrs)
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


if __name__ == "__main__":
    unittest.main()
