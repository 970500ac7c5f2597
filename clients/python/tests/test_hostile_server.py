"""The client against servers that lie (docs/reliability.md, hostile input): replies that do not
fit their request, WELCOMEs out of bounds, NOT_LEADERs naming no address or an address outside
the list. Each is a protocol error or a failed node: the connection closes, it is counted and
reported, and the client goes on; never a wrong grant, a bare ValueError, a dead reconnect task
or a heartbeat storm.

Most servers here are the TypeScript tests' own (tests/helpers/hostile_scenarios.ts, one deno
process, frames from the real codec); counts over time use the scripted Python peer.
"""

from __future__ import annotations

import asyncio
import ssl
import time
import unittest

import lockd
from lockd import _codec as wire

from helpers import TLS_DIR, FakeServer, HostileServers, LockdServer, eventually

TOKEN = 1_795_426_718_504_001


class SharedScenarios(unittest.IsolatedAsyncioTestCase):
    hostile: HostileServers

    @classmethod
    def setUpClass(cls) -> None:
        cls.hostile = HostileServers().start()

    @classmethod
    def tearDownClass(cls) -> None:
        cls.hostile.stop()

    async def test_a_reply_that_does_not_fit_its_request_is_a_protocol_error(self) -> None:
        self.assertGreaterEqual(len(self.hostile.misfits), 14)
        for i, misfit in enumerate(self.hostile.misfits):
            with self.subTest(misfit["name"]):
                addr = self.hostile.addrs[f"misfit-{i}"]
                reported: list[lockd.ServerProtocolError] = []
                client = await lockd.connect(addr, reconnect=False, on_protocol_error=reported.append)
                try:
                    owned = await client.acquire("own", lease_ms=60_000)
                    lock: lockd.Lock | None = None
                    try:
                        lock = await asyncio.wait_for(client.acquire("a"), 5)
                    except lockd.LockdConnectionError:
                        pass
                    if misfit["grantsFirst"]:
                        assert lock is not None
                        self.assertEqual((lock.name, lock.token), ("a", TOKEN), "the first, correct grant")
                        await asyncio.wait_for(lock.lost.wait(), 5)
                        self.assertEqual(lock.lost.reason, "disconnected")
                    else:
                        self.assertIsNone(lock, "no grant came of it")
                    await asyncio.wait_for(owned.lost.wait(), 5)
                    self.assertEqual(owned.lost.reason, "disconnected", "the session is over")
                    self.assertEqual(client.protocol_errors, 1)
                    self.assertEqual(len(reported), 1)
                    self.assertIsInstance(reported[0], lockd.ServerProtocolError)
                    self.assertIsInstance(reported[0], lockd.LockdConnectionError)
                    self.assertEqual(reported[0].addr, addr)
                    self.assertRegex(str(reported[0]), r"broke the protocol: .+; the connection was closed$")
                finally:
                    await client.close()

    async def test_a_grant_that_arrived_before_its_acquire_was_sent_is_not_taken_for_it(self) -> None:
        client = await lockd.connect(self.hostile.addrs["presend"], reconnect=False)
        try:
            with self.assertRaises(lockd.LockdConnectionError):
                await asyncio.wait_for(client.acquire("a"), 5)
            self.assertEqual(client.protocol_errors, 1)
        finally:
            await client.close()

    async def test_a_welcome_out_of_bounds_fails_connect(self) -> None:
        self.assertGreaterEqual(len(self.hostile.welcomes), 9)
        for i, welcome in enumerate(self.hostile.welcomes):
            with self.subTest(welcome["what"]):
                with self.assertRaises(lockd.ServerProtocolError) as raised:
                    await lockd.connect(self.hostile.addrs[f"welcome-{i}"], reconnect=False, connect_timeout_ms=2_000)
                self.assertRegex(str(raised.exception), welcome["pattern"])

    async def test_a_not_leader_at_hello_naming_no_address_is_a_typed_failure_of_that_node(self) -> None:
        self.assertGreaterEqual(len(self.hostile.leaders), 15)
        for i, name in enumerate(self.hostile.leaders):
            with self.subTest(name=name):
                with self.assertRaises(lockd.ServerProtocolError) as raised:
                    await lockd.connect(self.hostile.addrs[f"not-leader-{i}"], reconnect=False)
                message = str(raised.exception)
                self.assertIn("not a host:port address (that node counts as failed)", message)
                self.assertIsInstance(raised.exception.__cause__, lockd.NotLeaderError)
                self.assertNotIn("\u0000", message)
                self.assertNotIn("\u202e", message)

    async def test_with_a_bad_not_leader_at_hello_the_next_address_is_tried(self) -> None:
        for i in range(3):
            async with lockd.connect(
                addrs=[self.hostile.addrs[f"not-leader-{i}"], self.hostile.addrs["good"]], reconnect=False
            ) as client:
                lock = await asyncio.wait_for(client.acquire("x"), 5)
                self.assertEqual(lock.token, TOKEN)

    async def test_a_bad_not_leader_after_welcome_fails_over_and_the_reconnect_goes_on(self) -> None:
        reported: list[lockd.ServerProtocolError] = []
        client = await lockd.connect(
            addrs=[self.hostile.addrs["bad-after-welcome"], self.hostile.addrs["good-7"]],
            on_protocol_error=reported.append,
        )
        try:
            own = await client.acquire("own")
            # Answered by a NOT_LEADER naming "evil:99999"; the waiting acquire moves to the next node.
            lock = await asyncio.wait_for(client.acquire("x"), 10)
            self.assertEqual(own.lost.reason, "failover")
            self.assertEqual(lock.token, TOKEN + 7)
            self.assertEqual(client.addr, self.hostile.addrs["good-7"])
            self.assertEqual(client.protocol_errors, 1)
            self.assertIn('naming "evil:99999" as the leader', str(reported[0]))
        finally:
            await client.close()

    async def test_without_tls_a_redirect_outside_the_list_is_not_followed(self) -> None:
        with self.assertRaises(lockd.LockdConnectionError) as raised:
            await lockd.connect(addrs=[self.hostile.addrs["standby"]], reconnect=False)
        self.assertNotIsInstance(raised.exception, lockd.ServerProtocolError)
        self.assertIn("which is not in the address list; without TLS", str(raised.exception))
        # Listed, after a node that never answers: the redirect goes there at once.
        started = time.monotonic()
        async with lockd.connect(
            addrs=[self.hostile.addrs["standby"], self.hostile.addrs["silent"], self.hostile.addrs["good"]],
            reconnect=False,
        ) as client:
            self.assertEqual(client.addr, self.hostile.addrs["good"])
            self.assertLess(time.monotonic() - started, 4.0, "not after the silent node's connect timeout")


class SharedScenariosV2(unittest.IsolatedAsyncioTestCase):
    """Protocol version 2 (tests/helpers/hostile_scenarios_v2.ts): the frames it adds, crafted wrong."""

    hostile: HostileServers

    @classmethod
    def setUpClass(cls) -> None:
        cls.hostile = HostileServers("tests/helpers/hostile_scenarios_v2.ts").start()

    @classmethod
    def tearDownClass(cls) -> None:
        cls.hostile.stop()

    async def test_a_version_2_reply_that_does_not_fit_its_request_is_a_protocol_error(self) -> None:
        self.assertGreaterEqual(len(self.hostile.misfits), 10)
        for i, name in enumerate(self.hostile.misfits):
            with self.subTest(name):
                addr = self.hostile.addrs[f"v2-misfit-{i}"]
                reported: list[lockd.ServerProtocolError] = []
                client = await lockd.connect(addr, reconnect=False, on_protocol_error=reported.append)
                try:
                    self.assertEqual(client.protocol_version, 2)
                    owned = await client.acquire("own", lease_ms=60_000)
                    with self.assertRaises(lockd.LockdConnectionError):
                        await asyncio.wait_for(client.acquire("a"), 5)  # never a wrong grant
                    await asyncio.wait_for(owned.lost.wait(), 5)
                    self.assertEqual(owned.lost.reason, "disconnected", "a protocol error is not carried over")
                    self.assertEqual(client.protocol_errors, 1)
                    self.assertRegex(str(reported[0]), r"broke the protocol: .+; the connection was closed$")
                finally:
                    await client.close()

    async def test_a_wrong_answer_to_resume_or_reclaim_is_a_protocol_error_and_no_wrong_grant(self) -> None:
        misfits = self.hostile.table["reclaimMisfits"]
        assert isinstance(misfits, list)
        self.assertGreaterEqual(len(misfits), 8)
        expected = {
            "an ACQUIRED re-confirming an owned RECLAIM with another token": f"with token {TOKEN + 6}, but that RECLAIM",
            "a QUEUED answering an owned RECLAIM": "which is not an ACQUIRE or queued RECLAIM",
            "a CLAIM_VOID answering a queued RECLAIM": "CLAIM_VOID answers an owned RECLAIM only",
            "a LEASE_EXPIRED for a queued RECLAIM still waiting": "for a RECLAIM still waiting",
            "a LEASE_EXPIRED answering RESUME": "a RESUME is answered RESUMED (or refused)",
            "a RESUMED whose outcome names nothing": "with outcome 7, which names nothing",
            "a second RESUMED": "never sent or had its last answer to already",
            "a RESUMED answering a RECLAIM": "which is not a RESUME",
        }
        for i, name in enumerate(misfits):
            with self.subTest(name):
                addrs = [self.hostile.addrs[f"reclaim-a-{i}"], self.hostile.addrs[f"reclaim-b-{i}"]]
                reported: list[lockd.ServerProtocolError] = []
                client = await lockd.connect(addrs=addrs, on_protocol_error=reported.append)
                try:
                    owned = await client.acquire("own", lease_ms=60_000)
                    waiting = asyncio.ensure_future(client.acquire("w", lease_ms=60_000))
                    await asyncio.sleep(0.1)  # "w" is queued at A
                    crash = asyncio.ensure_future(client.acquire("crash"))
                    self.addAsyncCleanup(asyncio.gather, waiting, crash, return_exceptions=True)
                    await eventually(lambda: client.protocol_errors >= 1, "a protocol error at B")
                    self.assertIn(expected[name], str(reported[0]))
                    self.assertEqual(str(reported[0]).count(addrs[1]), 1, "B broke the protocol")
                    self.assertEqual(owned.token, TOKEN)
                    self.assertFalse(waiting.done(), "no grant came of it")
                    waiting.cancel()
                    crash.cancel()
                finally:
                    await client.close()

    async def test_a_version_2_welcome_out_of_bounds_fails_connect(self) -> None:
        self.assertGreaterEqual(len(self.hostile.welcomes), 3)
        for i, welcome in enumerate(self.hostile.welcomes):
            with self.subTest(welcome["what"]):
                with self.assertRaises(lockd.ServerProtocolError) as raised:
                    await lockd.connect(self.hostile.addrs[f"v2-welcome-{i}"], reconnect=False, connect_timeout_ms=2_000)
                self.assertRegex(str(raised.exception), welcome["pattern"])


class ScriptedPeer(unittest.IsolatedAsyncioTestCase):
    async def test_a_second_heartbeat_ack_for_an_acknowledged_heartbeat_closes_the_connection(self) -> None:
        def script(message: wire.Message, send) -> None:  # type: ignore[no-untyped-def]
            if isinstance(message, wire.Heartbeat):
                send(wire.HeartbeatAck(message.request_id, 0))
                send(wire.HeartbeatAck(message.request_id, 0))

        async with FakeServer(script, io_timeout_ms=300) as fake:
            client = await lockd.connect(fake.addr, reconnect=False)
            try:
                await eventually(lambda: client.protocol_errors == 1, "the second ACK is refused")
                await eventually(lambda: not client.connected, "the connection closed")
            finally:
                await client.close()

    async def test_welcomes_with_io_timeout_0_on_reconnect_cause_no_heartbeat_or_reconnect_storm(self) -> None:
        async with FakeServer(lambda m, send: None) as fake:
            client = await lockd.connect(fake.addr)
            try:
                fake.io_timeout_ms = 0  # every later WELCOME is out of bounds
                for writer in list(fake._writers):
                    writer.close()  # the good session ends
                await asyncio.sleep(1.5)
                heartbeats = [m for m in fake.received if isinstance(m, wire.Heartbeat)]
                self.assertLessEqual(len(heartbeats), 1, "none after the first session")
                # Back-off: random(0, 50 × 2^n) ms between attempts: about 7 in 1.5 s, not hundreds.
                self.assertLess(fake.connections, 15, f"{fake.connections} connections in 1.5 s")
            finally:
                await client.close()

    async def test_a_node_that_welcomes_and_then_breaks_the_protocol_is_redialled_with_growing_back_off(self) -> None:
        def script(message: wire.Message, send) -> None:  # type: ignore[no-untyped-def]
            if isinstance(message, wire.Acquire):
                send(wire.Acquired(message.request_id, TOKEN, 15_000, "not-" + message.name))

        async with FakeServer(script) as fake:
            client = await lockd.connect(fake.addr)
            try:
                waiting = asyncio.ensure_future(client.acquire("a"))
                await asyncio.sleep(1.5)
                self.assertFalse(waiting.done(), "never granted another lock's grant")
                self.assertLess(fake.connections, 15, f"{fake.connections} connections in 1.5 s")
                self.assertEqual(client.protocol_errors, fake.connections)
                waiting.cancel()
            finally:
                await client.close()


class TlsRedirect(unittest.IsolatedAsyncioTestCase):
    async def test_with_tls_a_redirect_outside_the_list_is_followed_to_a_node_of_the_same_ca(self) -> None:
        with LockdServer("-tls-cert", str(TLS_DIR / "server.pem"), "-tls-key", str(TLS_DIR / "server-key.pem")) as real:
            port = real.addr.rpartition(":")[2]
            standby = await _tls_not_leader(f"127.0.0.1:{port}", "server")
            try:
                context = lockd.tls_context(ca_file=str(TLS_DIR / "ca.pem"))
                async with lockd.connect(addrs=[standby.addr], ssl_context=context, reconnect=False) as client:
                    self.assertEqual(client.addr, f"127.0.0.1:{port}")
                    async with client.lock("py/tls-redirect") as lock:
                        status, body = await real.admin_async("GET", real.lock_path("py/tls-redirect"))
                        self.assertEqual((status, body["holder"]["token"]), (200, lock.token))  # type: ignore[index]
            finally:
                await standby.close()
            # A node named by the standby whose certificate is not from the client's CA is refused.
            impostor = await _tls_not_leader("", "other-client")
            liar = await _tls_not_leader(impostor.addr, "server")
            try:
                with self.assertRaises(lockd.LockdConnectionError):
                    await lockd.connect(addrs=[liar.addr], ssl_context=context, reconnect=False, connect_timeout_ms=3_000)
                self.assertEqual(impostor.hellos, 0, "no HELLO reached the impostor")
            finally:
                await liar.close()
                await impostor.close()


class _TlsPeer:
    def __init__(self, server: asyncio.AbstractServer, leader: str) -> None:
        self.server = server
        self.addr = "127.0.0.1:%d" % server.sockets[0].getsockname()[1]
        self.leader = leader
        self.hellos = 0

    async def close(self) -> None:
        self.server.close()
        await self.server.wait_closed()


async def _tls_not_leader(leader: str, cert: str) -> _TlsPeer:
    """A TLS peer with certificate ``cert`` that answers HELLO with NOT_LEADER naming ``leader``."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(str(TLS_DIR / f"{cert}.pem"), str(TLS_DIR / f"{cert}-key.pem"))
    peer: list[_TlsPeer] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            frames = wire.FrameReader()
            while (message := frames.next()) is None:
                data = await reader.read(4096)
                if not data:
                    return
                frames.push(data)
            if isinstance(message, wire.Hello):
                peer[0].hellos += 1
                writer.write(wire.encode(wire.Error(0, 0x11, peer[0].leader, "not the leader")))
                await writer.drain()
        except (OSError, ssl.SSLError, wire.MalformedFrame):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=context)
    peer.append(_TlsPeer(server, leader))
    return peer[0]


class Parsing(unittest.TestCase):
    def test_a_leader_address_is_a_host_port_of_a_dns_name_ipv4_or_bracketed_ipv6(self) -> None:
        from lockd._checks import parse_leader_address, redirect_verdict

        for bad in ("evil", "evil:99999", "[::1", ":7400", "x" * 300 + ":1", "a b:1", "\u202e.example:1"):
            self.assertIsNone(parse_leader_address(bad), bad)
        self.assertEqual(parse_leader_address("Node-2.Example.org:7400"), "node-2.example.org:7400")
        self.assertEqual(parse_leader_address("[2001:DB8::7]:7400"), "[2001:db8::7]:7400")
        listed = ["10.0.0.7:7400", "Node-2.example.org:7400"]
        self.assertEqual(redirect_verdict("node-2.EXAMPLE.org:7400", listed, False), ("Node-2.example.org:7400", None))
        self.assertEqual(redirect_verdict("10.0.0.8:7400", listed, False), (None, "outside_list"))
        self.assertEqual(redirect_verdict("10.0.0.8:7400", listed, True), ("10.0.0.8:7400", None))
        self.assertEqual(redirect_verdict("", listed, True), (None, "no_leader"))
        self.assertEqual(redirect_verdict("evil", listed, True), (None, "invalid"))


class VersionTwoLooks(unittest.IsolatedAsyncioTestCase):
    """QUERY, WATCH and DOWNGRADE answered wrong (tests/helpers/hostile_scenarios_looks.ts, the
    same frames the TypeScript client meets): a protocol error, and the client goes on."""

    hostile: HostileServers

    @classmethod
    def setUpClass(cls) -> None:
        cls.hostile = HostileServers("tests/helpers/hostile_scenarios_looks.ts").start()

    @classmethod
    def tearDownClass(cls) -> None:
        cls.hostile.stop()

    async def test_a_look_answered_wrong_is_a_protocol_error_and_the_client_goes_on(self) -> None:
        self.assertGreaterEqual(len(self.hostile.misfits), 15)
        for i, misfit in enumerate(self.hostile.misfits):
            with self.subTest(misfit["name"]):
                addr = self.hostile.addrs[f"look-misfit-{i}"]
                reported: list[lockd.ServerProtocolError] = []
                client = await lockd.connect(addr, on_protocol_error=reported.append)
                try:
                    if misfit["answers"] == "watch":
                        async with client.observe("service/*") as states:
                            await eventually(lambda: states.watches_sent == 2 and states.watching, "watching again")
                    elif misfit["answers"] == "query":
                        state = await asyncio.wait_for(client.query("service/leader"), 5)  # asked again
                        self.assertEqual(state.holder.token if state.holder else 0, TOKEN)
                    else:
                        lock = await client.acquire("reports/daily")
                        with self.assertRaises(lockd.LockdConnectionError):
                            await asyncio.wait_for(lock.downgrade(), 5)
                        self.assertEqual((lock.mode, lock.state), ("exclusive", "lost"))
                    self.assertEqual(client.protocol_errors, 1)
                    self.assertRegex(str(reported[0]), r"broke the protocol: .+; the connection was closed$")
                finally:
                    await client.close()


if __name__ == "__main__":
    unittest.main()
