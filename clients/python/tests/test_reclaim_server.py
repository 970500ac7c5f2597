"""Protocol version 2 against a real single node (``main.ts serve`` on port 0): GOODBYE makes the
end of a session graceful, a version-2 connection that just ends is not (its ownership stays with
its client until its lease ends, then ends as expired); a connection the client
gives up on as silent (its path stalled) is resumed on the same server (RESUME ``moved``), the lock
keeping its token without a moment of being lost."""

from __future__ import annotations

import asyncio
import contextlib
import json
import unittest

import lockd

from helpers import LockdServer, StallProxy, eventually


class SingleNodeVersion2(unittest.IsolatedAsyncioTestCase):
    server: LockdServer

    @classmethod
    def setUpClass(cls) -> None:
        cls.server = LockdServer().start()

    @classmethod
    def tearDownClass(cls) -> None:
        cls.server.stop()

    def releases(self, token: int) -> list[dict[str, object]]:
        if not self.server.audit_log.exists():
            return []
        records = [json.loads(line) for line in self.server.audit_log.read_text().splitlines() if line]
        return [r for r in records if r.get("event") == "release" and r.get("token") == token]

    async def test_close_says_goodbye_and_the_server_ends_the_ownership_gracefully(self) -> None:
        client = await lockd.connect(self.server.addr)
        self.assertEqual(client.protocol_version, 2)
        lock = await client.acquire("py/v2/goodbye")
        await client.close()
        await eventually(lambda: bool(self.releases(lock.token)), "the release record")
        self.assertEqual(self.releases(lock.token)[0]["reason"], "graceful")

        # Without GOODBYE (the socket just ends), the server cannot tell a client that let go from
        # one that vanished and may still count on its lock (and carry it over with RESUME): it
        # keeps the ownership, orphaned, until its lease ends (expired); nobody else gets the lock
        # before (docs/protocol.md, "End of a connection").
        client = await lockd.connect(self.server.addr)
        lock = await client.acquire("py/v2/goodbye", lease_ms=2_000)
        session = client._session
        assert session is not None
        session.writer.transport.abort()
        other = await lockd.connect(self.server.addr)
        try:
            with self.assertRaises(lockd.WaitTimeoutError):
                await other.acquire("py/v2/goodbye", wait_ms=1_000)
            self.assertEqual(self.releases(lock.token), [])
            successor = await other.acquire("py/v2/goodbye", wait_ms=5_000)
            self.assertGreater(successor.token, lock.token)
        finally:
            await other.close()
        self.assertEqual(self.releases(lock.token)[0]["reason"], "expired")
        await client.close()

    async def test_a_silent_connection_is_resumed_on_the_same_server_and_the_lock_moves(self) -> None:
        async with StallProxy(self.server.addr) as proxy, contextlib.AsyncExitStack() as stack:
            logs = stack.enter_context(self.assertLogs("lockd", "INFO"))
            async with lockd.connect(proxy.addr) as client:
                # Lease 8 s: heartbeats every 2.7 s, the silence check 3 s after an unanswered one,
                # the local deadline 7.2 s after the last acknowledged one.
                lock = await client.acquire("py/v2/moved", lease_ms=8_000)
                first_session = client.session_id
                lost: list[str] = []
                lock.add_lost_callback(lost.append)
                proxy.stall_open()  # the old path goes silent; a new connection gets through
                await eventually(lambda: client.sessions_opened == 2 and client.connected, "reconnected", 10)
                await eventually(
                    lambda: self.holder("py/v2/moved").get("session") == client.session_id,
                    "the ownership moved to the new session",
                )
                self.assertNotEqual(client.session_id, first_session)
                self.assertEqual((lock.state, lock.token, lost), ("held", lock.token, []))
                self.assertEqual(self.holder("py/v2/moved")["token"], lock.token)
                await eventually(lambda: any("RESUMED moved" in line for line in logs.output), "RESUMED moved")
                await eventually(lambda: any("carried over" in line for line in logs.output), "re-confirmed")
                await lock.release()
            proxy.resume()

    def holder(self, name: str) -> dict[str, object]:
        status, body = self.server.admin("GET", self.server.lock_path(name))
        if status != 200 or not isinstance(body, dict) or not isinstance(body.get("holder"), dict):
            return {}
        return body["holder"]


if __name__ == "__main__":
    unittest.main()
