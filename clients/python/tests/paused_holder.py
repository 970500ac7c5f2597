"""A lock holder for test_pause.py: acquires ``argv[2]`` at ``argv[1]`` with the lease ``argv[3]``
(ms), prints ``held``, then spins without yielding to the event loop (so no timer of the client can
run) until a gap in the clock shows that the process was paused (SIGSTOP ... SIGCONT). The first
thing it does after waking is to read ``lock.lost.is_set()`` and ``lock.state``, and it prints what
it read as one JSON line. Gives up after 30 s without a pause."""

from __future__ import annotations

import asyncio
import json
import sys
import time

import lockd


async def main(addr: str, name: str, lease_ms: int) -> None:
    async with lockd.connect(addr, reconnect=False) as client:
        lock = await client.acquire(name, lease_ms=lease_ms)
        pause_s = 2 * lease_ms / 1000
        give_up_at = time.monotonic() + 30
        # The clock is read before "held" goes out: a SIGSTOP that lands between the line and the
        # loop (a loaded machine can deschedule the process right there) still shows as a gap.
        last = time.monotonic()
        print("held", flush=True)
        while True:
            now = time.monotonic()
            if now - last > pause_s:
                # The first reading after the pause, before any timer had a chance to run.
                is_set = lock.lost.is_set()
                state = lock.state
                print(json.dumps({"paused_ms": round((now - last) * 1000), "is_set": is_set, "state": state,
                                  "reason": lock.lost.reason}), flush=True)
                break
            if now > give_up_at:
                print(json.dumps({"paused_ms": 0}), flush=True)
                break
            last = now


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
