"""Test helpers: a real lockd server on port 0, a stalling TCP proxy, a scripted fake server.

The server is started the way an operator would (``deno run ... main.ts serve``) with every
listener on 127.0.0.1 port 0; the bound addresses are read from its JSON diagnostic log on
stderr. ``LOCKD_DENO`` names the deno binary (default ``deno``), ``LOCKD_REPO`` the checkout
(default: three levels above this file).
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import inspect
import json
import os
import shlex
import subprocess
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from urllib.parse import quote

from lockd import _codec as wire

REPO = Path(os.environ.get("LOCKD_REPO", Path(__file__).resolve().parents[3]))
TLS_DIR = REPO / "tests" / "fixtures" / "tls"
START_TIMEOUT_S = 60.0


def deno_command() -> list[str]:
    return shlex.split(os.environ.get("LOCKD_DENO", "deno"))


class LockdServer:
    """``with LockdServer("-io-timeout", "2s") as server:`` — a real server; ``server.addr``, ``server.admin_addr``."""

    def __init__(self, *flags: str) -> None:
        self.flags = list(flags)
        self.addr = ""
        self.admin_addr = ""
        self.log_lines: list[str] = []
        self._proc: subprocess.Popen[str] | None = None
        self._tmp = tempfile.TemporaryDirectory(prefix="lockd-py-")
        self.audit_log = Path(self._tmp.name) / "audit.jsonl"

    def start(self) -> LockdServer:
        command = [
            *deno_command(),
            "run",
            "--allow-net",
            "--allow-read",
            "--allow-write",
            "main.ts",
            "serve",
            "-listen",
            "127.0.0.1:0",
            "-admin-listen",
            "127.0.0.1:0",
            "-log-format",
            "json",
            "-audit-log",
            str(self.audit_log),
            # Durable tokens as by default, but not in a lockd-data/ of the repository.
            "-data-dir",
            str(Path(self._tmp.name) / "data"),
            *self.flags,
        ]
        self._proc = subprocess.Popen(
            command,
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "NO_COLOR": "1"},
        )
        started = threading.Event()

        def read_log() -> None:  # drains stderr for the server's whole life
            assert self._proc is not None and self._proc.stderr is not None
            for line in self._proc.stderr:
                self.log_lines.append(line)
                with contextlib.suppress(ValueError):
                    record = json.loads(line)
                    if record.get("message") == "lockd started":
                        self.addr = record["listen"]
                        self.admin_addr = record["admin_listen"]
                        started.set()
            started.set()  # exited: let start() see it

        self._log_thread = threading.Thread(target=read_log, daemon=True)
        self._log_thread.start()
        if not started.wait(START_TIMEOUT_S) or not self.addr:
            self.stop()
            raise RuntimeError("lockd did not start:\n" + "".join(self.log_lines[-20:]))
        return self

    def kill(self) -> None:
        """SIGKILL by PID (a crash: no hand-over, no shutdown); ``stop()`` cleans up after it."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait(10)

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.poll() is None:
                proc.terminate()  # by PID: SIGTERM runs the ordered shutdown
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(5)
            self._log_thread.join(5)  # EOF once the process is gone
            if proc.stderr is not None:
                proc.stderr.close()
        self._tmp.cleanup()

    def __enter__(self) -> LockdServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def admin(self, method: str, path: str) -> tuple[int, object]:
        """One admin API request; (status, parsed JSON body or None)."""
        host, _, port = self.admin_addr.rpartition(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        try:
            conn.request(method, path)
            response = conn.getresponse()
            body = response.read()
            return response.status, json.loads(body) if body else None
        finally:
            conn.close()

    async def admin_async(self, method: str, path: str) -> tuple[int, object]:
        return await asyncio.to_thread(self.admin, method, path)

    def lock_path(self, name: str) -> str:
        return "/api/locks/" + quote(name, safe="")


class HostileServers:
    """``with HostileServers() as hostile:`` — servers that lie, shared with the TypeScript tests
    (``HostileServers("tests/helpers/hostile_scenarios_v2.ts")``: those of protocol version 2).

    One deno process runs tests/helpers/hostile_scenarios.ts: every scenario on its own
    127.0.0.1 port 0, frames encoded by the real codec (src/wire/frame.ts). ``addrs`` maps a
    scenario to its address; ``misfits``, ``welcomes`` and ``leaders`` are the tables it serves.
    The process stops when its standard input closes (killed by PID if it does not).
    """

    def __init__(self, script: str = "tests/helpers/hostile_scenarios.ts") -> None:
        self.script = script
        self.addrs: dict[str, str] = {}
        self.misfits: list[dict[str, object]] = []
        self.welcomes: list[dict[str, str]] = []
        self.leaders: list[str] = []
        #: Everything the scenario file printed (tables of version 2: ``reclaimMisfits`` ...).
        self.table: dict[str, object] = {}
        self._proc: subprocess.Popen[str] | None = None

    def start(self) -> HostileServers:
        self._proc = subprocess.Popen(
            [*deno_command(), "run", "--allow-net", self.script],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env={**os.environ, "NO_COLOR": "1"},
        )
        first: list[str] = []
        reader = threading.Thread(target=lambda: first.append(self._proc.stdout.readline()), daemon=True)  # type: ignore[union-attr]
        reader.start()
        reader.join(START_TIMEOUT_S)
        if not first or not first[0]:
            self.stop()
            raise RuntimeError("the hostile scenario server did not start")
        table = json.loads(first[0])
        self.table = table
        self.addrs, self.misfits = table["addrs"], table["misfits"]
        self.welcomes, self.leaders = table["welcomes"], table.get("leaders", [])
        return self

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        with contextlib.suppress(OSError):
            proc.stdin.close()  # type: ignore[union-attr]
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()  # by PID
            proc.wait(5)
        if proc.stdout is not None:
            proc.stdout.close()

    def __enter__(self) -> HostileServers:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class StallProxy:
    """A TCP proxy on 127.0.0.1 port 0 that can hold back bytes in either direction without closing.

    Held bytes are kept, not dropped, and flow again (late) when the stall ends — a middlebox
    whose path froze, not one that corrupts the stream.
    """

    def __init__(self, target: str) -> None:
        self.target = target
        self.addr = ""
        self._upstream_open = asyncio.Event()
        self._downstream_open = asyncio.Event()
        self._upstream_open.set()
        self._downstream_open.set()
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        #: Each open connection's own gates (upstream, downstream), for ``stall_open``.
        self._connection_gates: list[tuple[asyncio.Event, asyncio.Event]] = []

    async def start(self) -> StallProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.addr = "127.0.0.1:%d" % self._server.sockets[0].getsockname()[1]
        return self

    def stall(self, upstream: bool = True, downstream: bool = True) -> None:
        """Stops forwarding client → server (upstream) and/or server → client (downstream)."""
        if upstream:
            self._upstream_open.clear()
        if downstream:
            self._downstream_open.clear()

    def stall_open(self) -> None:
        """Stalls the connections open now, both ways, and lets later ones pass: a client's old
        path dies silently while its reconnect gets through."""
        for upstream, downstream in self._connection_gates:
            upstream.clear()
            downstream.clear()

    def resume(self) -> None:
        self._upstream_open.set()
        self._downstream_open.set()
        for upstream, downstream in self._connection_gates:
            upstream.set()
            downstream.set()

    async def _accept(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        host, _, port = self.target.rpartition(":")
        server_reader, server_writer = await asyncio.open_connection(host, int(port))
        self._writers.update((client_writer, server_writer))
        gates = (asyncio.Event(), asyncio.Event())
        for gate in gates:
            gate.set()
        self._connection_gates.append(gates)
        for pump in (
            self._pump(client_reader, server_writer, (self._upstream_open, gates[0])),
            self._pump(server_reader, client_writer, (self._downstream_open, gates[1])),
        ):
            task = asyncio.get_running_loop().create_task(pump)
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, gates: tuple[asyncio.Event, ...]
    ) -> None:
        held = bytearray()
        try:
            while True:
                data = await reader.read(64 * 1024)
                if not data:
                    break
                held += data
                for gate in gates:
                    await gate.wait()  # a stalled direction keeps what it read
                writer.write(bytes(held))
                held.clear()
                await writer.drain()
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in self._writers:
            with contextlib.suppress(Exception):
                writer.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def __aenter__(self) -> StallProxy:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


Script = Callable[[wire.Message, Callable[[wire.Message], None]], Awaitable[None] | None]


class FakeServer:
    """A scripted lockd peer for client behaviour a real server shows only by chance.

    Answers HELLO with WELCOME of the HELLO's version when that is one of ``versions`` (else ERROR
    UNSUPPORTED_VERSION and a close, as a server of before version 2 does), then calls
    ``script(message, send)`` for every request; ``send`` queues a frame in the layout of the
    connection's version (``send(None)`` closes the connection). A version-2 WELCOME carries
    ``term``, ``reclaim_window_ms`` (0 by default: a server that takes no reclaims) and
    ``value_bytes_max`` (0 by default: a server that takes no lock values). GOODBYE
    closes the connection, as a server does. ``self.conn`` is the connection of the last frame.
    ``hello_answer(connection, version)``, when given, answers a HELLO the server would welcome:
    a frame to send instead of WELCOME (an ERROR then closes the connection), or None for the
    WELCOME; ``hold_hello_s`` delays every answer to HELLO (a standby holding it for an election).
    """

    def __init__(
        self,
        script: Script,
        *,
        io_timeout_ms: int = 30_000,
        welcome: bool = True,
        versions: tuple[int, ...] = (1, 2),
        term: int = 0,
        reclaim_window_ms: int = 0,
        hello_answer: Callable[[int, int], wire.Message | None] | None = None,
        hold_hello_s: float = 0.0,
        value_bytes_max: int = 0,
    ) -> None:
        self.script = script
        self.value_bytes_max = value_bytes_max
        self.hello_answer = hello_answer
        self.hold_hello_s = hold_hello_s
        self.io_timeout_ms = io_timeout_ms
        self.welcome = welcome
        self.versions = versions
        self.term = term
        self.reclaim_window_ms = reclaim_window_ms
        self.addr = ""
        self.connections = 0
        self.received: list[wire.Message] = []
        #: Every frame received, with the number of its connection (1, 2, ...).
        self.received_on: list[tuple[int, wire.Message]] = []
        #: (connection, message type name or "end") in the order the server saw them.
        self.timeline: list[tuple[int, str]] = []
        #: The protocol version each connection's HELLO asked for, in order.
        self.hello_versions: list[int] = []
        self.conn = 0
        self._server: asyncio.AbstractServer | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def __aenter__(self) -> FakeServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.addr = "127.0.0.1:%d" % self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for writer in self._writers:
            with contextlib.suppress(Exception):
                writer.close()
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        index = self.connections
        self._writers.add(writer)
        frames = wire.FrameReader()
        version = 1

        def send(message: wire.Message | None) -> None:
            if message is None:
                writer.close()
            else:
                writer.write(wire.encode(message, version))

        send.version = 1  # type: ignore[attr-defined]  # the connection's, once its HELLO fixed it

        self.last_send = send  # for tests that answer later, outside the script

        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    return
                frames.push(data)
                while (message := frames.next()) is not None:
                    self.received.append(message)
                    self.received_on.append((index, message))
                    self.timeline.append((index, type(message).__name__))
                    self.conn = index
                    if isinstance(message, wire.Hello):
                        self.hello_versions.append(message.version)
                        if self.hold_hello_s:
                            await asyncio.sleep(self.hold_hello_s)
                        if message.version not in self.versions:
                            send(wire.Error(0, 0x03, "", f"protocol version {message.version} is not supported"))
                            send(None)
                            return
                        version = message.version
                        send.version = version  # type: ignore[attr-defined]
                        answer = self.hello_answer(index, version) if self.hello_answer is not None else None
                        if answer is not None:
                            send(answer)
                            if isinstance(answer, wire.Error):
                                send(None)
                                return
                        elif self.welcome:
                            send(self.welcome_for(version, index))
                        continue
                    if isinstance(message, wire.Goodbye):
                        send(None)
                        return
                    result = self.script(message, send)
                    if inspect.isawaitable(result):
                        await result
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            self.timeline.append((index, "end"))
            with contextlib.suppress(Exception):
                writer.close()

    def welcome_for(self, version: int, session_id: int) -> wire.Welcome:
        if version == 1:
            return wire.Welcome(1, "fake", session_id, self.io_timeout_ms, 15_000, 300_000)
        return wire.Welcome(
            2, "fake", session_id, self.io_timeout_ms, 15_000, 300_000, self.term, self.reclaim_window_ms,
            self.value_bytes_max,
        )


async def eventually(check: Callable[[], bool], what: str, timeout_s: float = 5.0) -> None:
    """Polls ``check`` until it holds; fails after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for: {what}")
        await asyncio.sleep(0.005)


def etcd_available() -> bool:
    """Whether an ``etcd`` binary runs here (cluster tests need one; CI installs etcd-server)."""
    try:
        return subprocess.run(["etcd", "--version"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


#: Cluster tests are skipped without etcd, unless LOCKD_REQUIRE_ETCD is set (as in CI).
SKIP_WITHOUT_ETCD = not etcd_available() and not os.environ.get("LOCKD_REQUIRE_ETCD")


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class EtcdServer:
    """``with EtcdServer() as etcd:`` — a one-member etcd on loopback; ``etcd.url`` for -cluster-etcd."""

    def __init__(self) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="lockd-py-etcd-")
        self.url = f"http://127.0.0.1:{_free_port()}"
        self._peer = f"http://127.0.0.1:{_free_port()}"
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> EtcdServer:
        self._proc = subprocess.Popen(
            [
                "etcd", "--name", "e1", "--data-dir", str(Path(self._tmp.name) / "data"),
                "--listen-client-urls", self.url, "--advertise-client-urls", self.url,
                "--listen-peer-urls", self._peer, "--initial-advertise-peer-urls", self._peer,
                "--initial-cluster", f"e1={self._peer}", "--logger", "zap",
                "--log-outputs", str(Path(self._tmp.name) / "etcd.log"),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        host, _, port = self.url.removeprefix("http://").rpartition(":")
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError, ValueError):
                conn = http.client.HTTPConnection(host, int(port), timeout=1)
                try:
                    conn.request("GET", "/health")
                    if json.loads(conn.getresponse().read()).get("health") == "true":
                        return self
                finally:
                    conn.close()
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("etcd did not start")

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            proc.kill()  # by PID
            proc.wait(10)
        self._tmp.cleanup()

    def __enter__(self) -> EtcdServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
