"""The asyncio client against a real lockd server on port 0 (and a stalling proxy in front of it)."""

from __future__ import annotations

import asyncio
import os
import socket
import time
import unittest
from unittest import mock

import lockd

from helpers import TLS_DIR, LockdServer, StallProxy, eventually


def now_ms() -> float:
    return time.monotonic() * 1000


class RealServer(unittest.IsolatedAsyncioTestCase):
    """One server for the tests of this class; every test uses its own lock names."""

    server: LockdServer

    @classmethod
    def setUpClass(cls) -> None:
        cls.server = LockdServer().start()

    @classmethod
    def tearDownClass(cls) -> None:
        cls.server.stop()

    async def client(self, addr: str | None = None, **options: object) -> lockd.Client:
        client = await lockd.connect(addr or self.server.addr, **options)  # type: ignore[arg-type]
        self.addAsyncCleanup(client.close)
        return client

    async def test_acquire_gives_a_64_bit_token_and_release_frees_the_lock(self) -> None:
        client = await self.client()
        self.assertRegex(client.server_version, r"^\d+\.\d+\.\d+")
        async with client.lock("py/acquire", lease_ms=5_000) as lock:
            self.assertEqual(lock.name, "py/acquire")
            self.assertEqual(lock.lease_ms, 5_000)
            self.assertGreater(lock.token, 2**32, "tokens are about 1.8e15")
            first = lock.token
            status, body = await self.server.admin_async("GET", self.server.lock_path("py/acquire"))
            self.assertEqual(status, 200)
            self.assertEqual(body["holder"]["token"], first)  # type: ignore[index]
        status, _ = await self.server.admin_async("GET", self.server.lock_path("py/acquire"))
        self.assertEqual(status, 404, "released: an idle lock is not stored")
        again = await client.acquire("py/acquire")
        self.assertGreater(again.token, first)
        await again.release()
        self.assertFalse(again.lost.is_set())

    async def test_fifo_handoff_with_growing_tokens(self) -> None:
        owner, b, c = await self.client(), await self.client(), await self.client()
        held = await owner.acquire("py/fifo")
        wait_b = asyncio.ensure_future(b.acquire("py/fifo"))
        await eventually(lambda: self.queue_length("py/fifo") == 1, "B queued")
        wait_c = asyncio.ensure_future(c.acquire("py/fifo"))
        await eventually(lambda: self.queue_length("py/fifo") == 2, "C queued")
        await held.release()
        lock_b = await asyncio.wait_for(wait_b, 5)
        self.assertFalse(wait_c.done(), "C waits behind B")
        await lock_b.release()
        lock_c = await asyncio.wait_for(wait_c, 5)
        self.assertLess(held.token, lock_b.token)
        self.assertLess(lock_b.token, lock_c.token)
        await lock_c.release()

    def queue_length(self, name: str) -> int:
        status, body = self.server.admin("GET", self.server.lock_path(name))
        return len(body["waiters"]) if status == 200 else -1  # type: ignore[index]

    async def test_try_acquire_returns_none_when_held(self) -> None:
        a, b = await self.client(), await self.client()
        held = await a.try_acquire("py/try")
        self.assertIsNotNone(held)
        self.assertIsNone(await b.try_acquire("py/try"))
        assert held is not None
        await held.release()
        mine = await b.try_acquire("py/try")
        self.assertIsNotNone(mine)

    async def test_wait_bound_raises_a_retryable_wait_timeout_and_leaves_the_queue(self) -> None:
        a, b = await self.client(), await self.client()
        held = await a.acquire("py/wait")
        started = now_ms()
        with self.assertRaises(lockd.WaitTimeoutError) as raised:
            await b.acquire("py/wait", wait_ms=200)
        waited = now_ms() - started
        self.assertGreaterEqual(waited, 190)
        self.assertLess(waited, 2_000)
        self.assertEqual(raised.exception.code, 0x07)
        self.assertTrue(raised.exception.retryable)
        self.assertEqual(raised.exception.lock_name, "py/wait")
        await eventually(lambda: self.queue_length("py/wait") == 0, "B left the queue")
        await held.release()

    async def test_errors_carry_their_wire_code(self) -> None:
        client = await self.client()
        with self.assertRaises(lockd.InvalidArgumentError) as raised:
            await client.acquire("a\u0085b")  # a C1 control character
        self.assertEqual((raised.exception.code, raised.exception.retryable), (0x0B, False))
        with self.assertRaises(lockd.InvalidArgumentError):
            await client.acquire("e\u0301")  # not NFC (docs/protocol.md, "Lock names")
        nfc = await client.acquire("\u00e9")
        await nfc.release()
        held = await client.acquire("py/dup")
        with self.assertRaises(lockd.DuplicateClaimError):
            await client.acquire("py/dup", wait_ms=0)
        await held.release()

    async def test_a_paused_holder_loses_the_lock_before_the_next_owner_gets_it(self) -> None:
        # Lease expiry from the holder's side: its heartbeats stop reaching the server (the path
        # from it stalls), so the server expires the lease and grants the waiter. The holder's
        # local deadline fires first, by the margin.
        async with StallProxy(self.server.addr) as proxy:
            holder = await self.client(proxy.addr)
            waiter = await self.client()
            lock = await holder.acquire("py/expiry", lease_ms=300)
            waiting = asyncio.ensure_future(waiter.acquire("py/expiry"))
            await eventually(lambda: self.queue_length("py/expiry") == 1, "waiter queued")
            proxy.stall(upstream=True, downstream=False)
            await asyncio.wait_for(lock.lost.wait(), 5)
            lost_at = now_ms()
            granted = await asyncio.wait_for(waiting, 5)
            granted_at = now_ms()
            self.assertLess(lost_at, granted_at)
            self.assertIn(lock.lost.reason, ("lease_unconfirmed", "expired"))
            self.assertGreater(granted.token, lock.token)
            self.assertIsInstance(lock.lost.error, lockd.LockLostError)
            with self.assertRaises(lockd.LockLostError):
                lock.check()
            await granted.release()

    async def test_a_lease_the_server_expires_reports_lost_with_reason_expired(self) -> None:
        paused, waiter = await self.client(), await self.client()
        lock = await paused.acquire("py/expired", lease_ms=200)
        # A client whose timers stop (a process paused in a debugger): no heartbeat leaves and
        # no local deadline passes; the server's LEASE_EXPIRED is what ends the ownership.
        with (
            mock.patch.object(lockd.Client, "_schedule_heartbeat", lambda self, session: None),
            mock.patch.object(lockd.Lock, "_arm_deadline", lambda self, loop: None),
        ):
            if lock._deadline_handle is not None:
                lock._deadline_handle.cancel()
            session = paused._session
            assert session is not None and session.heartbeat_handle is not None
            session.heartbeat_handle.cancel()
            granted = await asyncio.wait_for(waiter.acquire("py/expired"), 5)
            await asyncio.wait_for(lock.lost.wait(), 5)
        self.assertEqual(lock.lost.reason, "expired")
        self.assertGreater(granted.token, lock.token)
        await granted.release()

    async def test_force_release_marks_the_lock_lost_and_the_waiting_claim_rejoins(self) -> None:
        a, b, c = await self.client(), await self.client(), await self.client()
        owned = await a.acquire("py/force/owned")
        other = await c.acquire("py/force/other")
        # A also waits for a lock C holds; B waits for A's lock.
        a_waits = asyncio.ensure_future(a.acquire("py/force/other"))
        b_waits = asyncio.ensure_future(b.acquire("py/force/owned"))
        await eventually(lambda: self.queue_length("py/force/other") == 1, "A queued")
        await eventually(lambda: self.queue_length("py/force/owned") == 1, "B queued")
        status, _ = await self.server.admin_async("POST", self.server.lock_path("py/force/owned") + "/release")
        self.assertEqual(status, 200)
        await asyncio.wait_for(owned.lost.wait(), 5)
        self.assertEqual(owned.lost.reason, "force")
        lock_b = await asyncio.wait_for(b_waits, 5)
        self.assertGreater(lock_b.token, owned.token)
        # A reconnects with back-off and its wait joins the tail of the queue again.
        await eventually(lambda: a.sessions_opened == 2 and self.queue_length("py/force/other") == 1, "A rejoined")
        self.assertFalse(a_waits.done())
        await other.release()
        lock_a = await asyncio.wait_for(a_waits, 5)
        self.assertGreater(lock_a.token, other.token)
        await lock_a.release()
        await lock_b.release()

    async def test_the_local_lease_deadline_fires_before_the_next_grant_over_a_stalled_path(self) -> None:
        lease_ms = 400
        for round_ in range(3):
            with self.subTest(round=round_):
                async with StallProxy(self.server.addr) as proxy:
                    holder = await self.client(proxy.addr)
                    waiter = await self.client()
                    name = f"py/stall/{round_}"
                    lock = await holder.acquire(name, lease_ms=lease_ms)
                    waiting = asyncio.ensure_future(waiter.acquire(name, lease_ms=lease_ms))
                    await eventually(lambda: self.queue_length(name) == 1, "waiter queued")
                    await asyncio.sleep(0.05 * round_)  # stall at different heartbeat phases
                    proxy.stall()  # both directions, connection kept open
                    stalled_at = now_ms()
                    await asyncio.wait_for(lock.lost.wait(), 5)
                    lost_at = now_ms()
                    granted = await asyncio.wait_for(waiting, 5)
                    granted_at = now_ms()
                    self.assertEqual(lock.lost.reason, "lease_unconfirmed")
                    self.assertLess(lost_at, granted_at, "lost before the server granted the next owner")
                    # The last acknowledged heartbeat was sent before the stall began.
                    self.assertLessEqual(lost_at - stalled_at, lease_ms + 100)
                    # Frames held by the stalled path arrive late and change nothing.
                    proxy.resume()
                    await asyncio.sleep(0.2)
                    self.assertEqual(lock.lost.reason, "lease_unconfirmed")
                    self.assertTrue(lock.lost.is_set())
                    await granted.release()

    async def test_the_client_side_wait_bound_holds_when_the_server_answers_late(self) -> None:
        async with StallProxy(self.server.addr) as proxy:
            client = await self.client(proxy.addr)
            proxy.stall(upstream=False, downstream=True)  # the server hears us; we hear nothing
            started = now_ms()
            with self.assertRaises(lockd.WaitTimeoutError):
                await client.acquire("py/late", wait_ms=300)
            waited = now_ms() - started
            self.assertGreaterEqual(waited, 290)
            self.assertLess(waited, 1_500)
            # The server granted it; the client cancels and hands back the late grant.
            proxy.resume()
            await eventually(lambda: self.queue_length("py/late") == -1, "the late grant was released")

    async def test_cancelling_an_acquire_leaves_the_queue(self) -> None:
        a, b = await self.client(), await self.client()
        held = await a.acquire("py/cancel")
        task = asyncio.ensure_future(b.acquire("py/cancel"))
        await eventually(lambda: self.queue_length("py/cancel") == 1, "B queued")
        task.cancel()
        with self.assertRaises(asyncio.CancelledError):
            await task
        await eventually(lambda: self.queue_length("py/cancel") == 0, "B left the queue")
        await held.release()

    async def test_heartbeats_keep_a_short_lease_alive(self) -> None:
        client = await self.client()
        lock = await client.acquire("py/heartbeat", lease_ms=150)
        await asyncio.sleep(0.6)  # four leases: only heartbeats keep it
        self.assertFalse(lock.lost.is_set(), lock.lost.reason)
        status, body = await self.server.admin_async("GET", self.server.lock_path("py/heartbeat"))
        self.assertEqual((status, body["holder"]["token"]), (200, lock.token))  # type: ignore[index]
        await lock.release()


    async def test_the_default_client_name_says_program_host_and_process(self) -> None:
        plain = await self.client()
        chosen = await self.client(client_name="x" * 300)
        async with plain.lock("py/name-default"), chosen.lock("py/name-chosen"):
            names = []
            for name in ("py/name-default", "py/name-chosen"):
                status, body = await self.server.admin_async("GET", self.server.lock_path(name))
                self.assertEqual(status, 200)
                names.append(body["holder"]["client_name"])  # type: ignore[index]
        expected = f"lockd-python/{lockd.VERSION}@{socket.gethostname()}:{os.getpid()}"
        self.assertEqual(names, [expected, "x" * 253 + "\u2026"])


class ClientNames(unittest.TestCase):
    def test_a_long_host_is_cut_between_two_characters_and_the_pid_stays(self) -> None:
        name = lockd.compose_client_name("lockd-python/1.2.3", "\u00fc" * 200, 4242)
        self.assertLessEqual(len(name.encode()), 256)
        self.assertTrue(name.startswith("lockd-python/1.2.3@\u00fc\u00fc"))
        self.assertTrue(name.endswith("\u2026:4242"), name)
        self.assertEqual(lockd.compose_client_name("p", "", 7), "p:7")

    def test_any_name_is_cut_to_256_bytes_never_inside_a_character(self) -> None:
        for unit in ("a", "\u00e9", "\u20ac", "\U0001f600"):
            for count in range(60, 301, 7):
                name = unit * count
                bounded = lockd.bound_client_name(name)
                self.assertLessEqual(len(bounded.encode()), 256)
                if len(name.encode()) <= 256:
                    self.assertEqual(bounded, name)
                else:
                    self.assertTrue(bounded.endswith("\u2026"))
                    self.assertTrue(name.startswith(bounded[:-1]))
        self.assertEqual(lockd.bound_client_name("a\ud800b"), "a\ufffdb")


class ConnectTimeout(unittest.IsolatedAsyncioTestCase):
    async def test_a_server_that_never_answers_hello_times_out(self) -> None:
        accepted: list[asyncio.StreamWriter] = []

        async def silent(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            accepted.append(writer)

        server = await asyncio.start_server(silent, "127.0.0.1", 0)
        addr = "127.0.0.1:%d" % server.sockets[0].getsockname()[1]
        try:
            started = now_ms()
            with self.assertRaises(lockd.ConnectTimeoutError) as raised:
                await lockd.connect(addr, connect_timeout_ms=200)
            self.assertGreaterEqual(now_ms() - started, 190)
            self.assertLess(now_ms() - started, 2_000)
            self.assertIsInstance(raised.exception, TimeoutError)
            self.assertTrue(raised.exception.retryable)
            self.assertEqual(len(accepted), 1)
        finally:
            for writer in accepted:
                writer.close()
            server.close()
            await server.wait_closed()

    async def test_a_refused_connection_is_a_connection_error(self) -> None:
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        addr = "127.0.0.1:%d" % server.sockets[0].getsockname()[1]
        server.close()
        await server.wait_closed()
        with self.assertRaises(lockd.LockdConnectionError):
            await lockd.connect(addr, connect_timeout_ms=2_000)


class ServerTls(unittest.IsolatedAsyncioTestCase):
    async def test_tls_without_client_certificates_verifies_the_server_by_name(self) -> None:
        with LockdServer("-tls-cert", str(TLS_DIR / "server.pem"), "-tls-key", str(TLS_DIR / "server-key.pem")) as server:
            context = lockd.tls_context(ca_file=str(TLS_DIR / "ca.pem"))
            port = server.addr.rpartition(":")[2]
            # The certificate names localhost, 127.0.0.1 and ::1; the address's host is checked.
            async with lockd.connect(f"localhost:{port}", ssl_context=context) as client:
                lock = await client.acquire("py/tls-only")
                self.assertGreater(lock.token, 2**32)
                await lock.release()
            with self.assertRaises(lockd.LockdConnectionError):
                await lockd.connect(server.addr, ssl_context=context, server_hostname="lockd.example.org")


class WrongProtocol(unittest.IsolatedAsyncioTestCase):
    """A plaintext client on a TLS listener and a TLS client on a plaintext one are told so."""

    async def test_a_plaintext_client_on_the_tls_listener_is_told_the_server_expects_tls(self) -> None:
        with LockdServer("-tls-cert", str(TLS_DIR / "server.pem"), "-tls-key", str(TLS_DIR / "server-key.pem")) as server:
            with self.assertRaises(lockd.LockdError) as raised:
                await lockd.connect(server.addr, reconnect=False, connect_timeout_ms=3_000)
            self.assertIn("expects TLS", str(raised.exception))

    async def test_a_tls_record_answering_a_plaintext_hello_reads_as_expects_tls(self) -> None:
        async def tls_alert(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write(bytes([0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x46]))  # a fatal TLS alert record
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(tls_alert, "127.0.0.1", 0)
        addr = "127.0.0.1:%d" % server.sockets[0].getsockname()[1]
        try:
            with self.assertRaises(lockd.LockdConnectionError) as raised:
                await lockd.connect(addr, reconnect=False, connect_timeout_ms=3_000)
            self.assertIn("the server expects TLS", str(raised.exception))
            self.assertNotIn("exceeds", str(raised.exception))
        finally:
            server.close()
            await server.wait_closed()

    async def test_a_tls_client_on_a_plaintext_listener_is_told_the_server_does_not_speak_tls(self) -> None:
        with LockdServer() as server:
            context = lockd.tls_context(ca_file=str(TLS_DIR / "ca.pem"))
            with self.assertRaises(lockd.LockdConnectionError) as raised:
                await lockd.connect(server.addr, ssl_context=context, reconnect=False, connect_timeout_ms=3_000)
            self.assertIn("does not speak TLS", str(raised.exception))


class MutualTls(unittest.IsolatedAsyncioTestCase):
    server: LockdServer

    @classmethod
    def setUpClass(cls) -> None:
        cls.server = LockdServer(
            "-tls-cert",
            str(TLS_DIR / "server.pem"),
            "-tls-key",
            str(TLS_DIR / "server-key.pem"),
            "-tls-client-ca",
            str(TLS_DIR / "ca.pem"),
        ).start()

    @classmethod
    def tearDownClass(cls) -> None:
        cls.server.stop()

    async def test_a_client_certificate_gets_a_session_and_its_identity(self) -> None:
        context = lockd.tls_context(
            ca_file=str(TLS_DIR / "ca.pem"),
            cert_file=str(TLS_DIR / "client-uri.pem"),
            key_file=str(TLS_DIR / "client-uri-key.pem"),
        )
        async with lockd.connect(self.server.addr, ssl_context=context) as client:
            async with client.lock("py/tls") as lock:
                self.assertGreater(lock.token, 2**32)
                status, body = await self.server.admin_async("GET", self.server.lock_path("py/tls"))
                self.assertEqual(status, 200)
                self.assertEqual(body["holder"]["identity"], "spiffe://example.org/worker")  # type: ignore[index]

    async def test_without_a_client_certificate_the_tls_handshake_fails(self) -> None:
        context = lockd.tls_context(ca_file=str(TLS_DIR / "ca.pem"))
        with self.assertRaises(lockd.LockdConnectionError):
            await lockd.connect(self.server.addr, ssl_context=context, reconnect=False, connect_timeout_ms=3_000)

    async def test_a_missing_client_certificate_is_named(self) -> None:
        context = lockd.tls_context(ca_file=str(TLS_DIR / "ca.pem"))
        with self.assertRaises(lockd.LockdConnectionError) as raised:
            await lockd.connect(self.server.addr, ssl_context=context, reconnect=False, connect_timeout_ms=3_000)
        self.assertRegex(
            str(raised.exception),
            r"the server requires a client certificate \(mutual TLS\): give lockd\.tls_context\(cert_file=",
        )

    async def test_a_client_certificate_from_another_ca_or_expired_is_named_as_not_accepted(self) -> None:
        for cert in ("other-client", "client-expired"):
            with self.subTest(cert=cert):
                context = lockd.tls_context(
                    ca_file=str(TLS_DIR / "ca.pem"),
                    cert_file=str(TLS_DIR / f"{cert}.pem"),
                    key_file=str(TLS_DIR / f"{cert}-key.pem"),
                )
                with self.assertRaises(lockd.LockdConnectionError) as raised:
                    await lockd.connect(self.server.addr, ssl_context=context, reconnect=False, connect_timeout_ms=3_000)
                self.assertRegex(
                    str(raised.exception),
                    r"the server did not accept the client certificate(?: \(TLS alert: [A-Z_]+\))?: is it signed "
                    r"by a CA the server trusts \(its -tls-client-ca\)",
                )

    async def test_a_server_from_an_untrusted_ca_is_refused(self) -> None:
        context = lockd.tls_context(
            ca_file=str(TLS_DIR / "other-ca.pem"),
            cert_file=str(TLS_DIR / "client-uri.pem"),
            key_file=str(TLS_DIR / "client-uri-key.pem"),
        )
        with self.assertRaises(lockd.LockdConnectionError):
            await lockd.connect(self.server.addr, ssl_context=context, connect_timeout_ms=3_000)


if __name__ == "__main__":
    unittest.main()
