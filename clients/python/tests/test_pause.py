"""The GC-pause case that fencing literature warns about, with a real pause: a holder stopped with
SIGSTOP for more than three leases and resumed with SIGCONT must read ``lost`` (and ``state``) as
lost at its first look after waking, before the timer that sets ``lost`` has run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import unittest
from pathlib import Path

import lockd
from lockd.sync import connect as sync_connect

from helpers import LockdServer

HOLDER = Path(__file__).resolve().parent / "paused_holder.py"
LEASE_MS = 1_000


def read_line(proc: subprocess.Popen[str], timeout_s: float) -> str:
    line: list[str] = []
    reader = threading.Thread(target=lambda: line.append(proc.stdout.readline()), daemon=True)  # type: ignore[union-attr]
    reader.start()
    reader.join(timeout_s)
    if not line or not line[0]:
        raise AssertionError(f"no line from the holder within {timeout_s} s")
    return line[0].strip()


class ProcessPause(unittest.TestCase):
    server: LockdServer

    @classmethod
    def setUpClass(cls) -> None:
        cls.server = LockdServer().start()

    @classmethod
    def tearDownClass(cls) -> None:
        cls.server.stop()

    def test_a_holder_paused_with_sigstop_for_three_leases_reads_lost_at_its_first_look(self) -> None:
        package_root = str(Path(lockd.__file__).resolve().parents[1])
        holder = subprocess.Popen(
            [sys.executable, str(HOLDER), self.server.addr, "py/pause", str(LEASE_MS)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": package_root},
        )
        try:
            self.assertEqual(read_line(holder, 30), "held")
            os.kill(holder.pid, signal.SIGSTOP)
            time.sleep(3 * LEASE_MS / 1000 + 0.3)
            os.kill(holder.pid, signal.SIGCONT)
            reading = json.loads(read_line(holder, 10))
            self.assertGreater(reading["paused_ms"], 3 * LEASE_MS)
            self.assertEqual(
                (reading["is_set"], reading["state"], reading["reason"]), (True, "lost", "lease_unconfirmed")
            )
            self.assertEqual(holder.wait(10), 0)
        finally:
            if holder.poll() is None:
                holder.kill()  # by PID
            holder.wait(10)
            if holder.stdout is not None:
                holder.stdout.close()

    def test_the_sync_api_reads_lost_past_the_deadline_while_the_client_thread_is_held_up(self) -> None:
        with sync_connect(self.server.addr) as client:
            lock = client.acquire("py/pause-sync", lease_ms=LEASE_MS)
            self.assertFalse(lock.lost.is_set())
            # The client's thread stops (as if paused) for two leases: no timer, no heartbeat runs.
            blocked = threading.Event()
            client._loop.call_soon_threadsafe(lambda: (blocked.set(), time.sleep(2 * LEASE_MS / 1000)))
            blocked.wait(5)
            time.sleep(LEASE_MS / 1000)  # past the deadline, the client's thread still held up
            self.assertTrue(lock.lost.is_set(), "the look itself compares the deadline with the clock")
            self.assertEqual(lock.lost.reason, "lease_unconfirmed")
            with self.assertRaises(lockd.LockLostError):
                lock.check()
            deadline = time.monotonic() + 5
            while lock._lock._lost.reason is None and time.monotonic() < deadline:
                time.sleep(0.01)
            self.assertEqual(lock._lock.state, "lost", "the client's thread followed")


if __name__ == "__main__":
    unittest.main()
