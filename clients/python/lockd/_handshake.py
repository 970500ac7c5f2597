"""One connection attempt: dial, TLS, HELLO, WELCOME, within one time bound (docs/protocol.md,
"Connection states" and "Versioning").

HELLO asks for protocol version 2. A server of before version 2 answers UNSUPPORTED_VERSION and
closes: the same node is asked again at once with version 1, within the same bound, and that
connection speaks version 1 (no reclaim after a fail-over). The next connection asks for 2 again
(in a rolling upgrade the node may speak it by then).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import socket
import ssl
from dataclasses import dataclass

from . import _codec as wire
from ._checks import welcome_out_of_bounds
from .errors import ConnectTimeoutError, LockdConnectionError, LockdError, ServerProtocolError, UnsupportedVersionError

#: The version HELLO asks for first, and the one it falls back to.
HELLO_VERSION = 2
HELLO_VERSION_FALLBACK = 1

logger = logging.getLogger("lockd")


@dataclass(eq=False)
class Opened:
    """A connection after its WELCOME; ``frames`` holds whatever came after the WELCOME."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    welcome: wire.Welcome
    frames: wire.FrameReader
    addr: str


@dataclass(frozen=True)
class Dialer:
    """How to reach a node: the client's name, TLS settings and connect bound."""

    client_name: str
    ssl_context: ssl.SSLContext | None
    server_hostname: str | None
    connect_timeout_ms: float

    async def open(self, addr: str, bound_ms: float | None = None) -> Opened:
        """Dial, TLS, HELLO/WELCOME at ``addr`` within ``bound_ms`` (default: the connect timeout),
        version 2 first and version 1 when the server does not speak 2."""
        loop = asyncio.get_running_loop()
        bound_ms = self.connect_timeout_ms if bound_ms is None else min(bound_ms, self.connect_timeout_ms)
        end_ms = loop.time() * 1000 + bound_ms
        try:
            return await self._open_version(addr, HELLO_VERSION, end_ms, bound_ms)
        except UnsupportedVersionError:
            logger.info("lockd at %s does not speak protocol version 2; asking for version 1", addr)
        return await self._open_version(addr, HELLO_VERSION_FALLBACK, end_ms, bound_ms)

    async def _open_version(self, addr: str, version: int, end_ms: float, bound_ms: float) -> Opened:
        writer: asyncio.StreamWriter | None = None
        first_bytes_seen = False
        try:
            host, port = _parse(addr)
            async with asyncio.timeout_at(end_ms / 1000):
                reader, writer = await asyncio.open_connection(
                    host,
                    port,
                    ssl=self.ssl_context,
                    server_hostname=(self.server_hostname or host) if self.ssl_context else None,
                )
                sock = writer.get_extra_info("socket")
                if sock is not None:
                    with contextlib.suppress(OSError):
                        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                writer.write(wire.encode(wire.Hello(version, self.client_name)))
                frames = wire.FrameReader()
                while True:
                    message = frames.next()
                    if message is None:
                        data = await reader.read(64 * 1024)
                        if not data:
                            cause = None if first_bytes_seen else self._handshake_close_cause(None)
                            if cause is not None:
                                raise _final(LockdConnectionError(f"Cannot connect to lockd at {addr}: {cause}"))
                            raise LockdConnectionError(f"{addr}: the server closed the connection before WELCOME")
                        if not first_bytes_seen:
                            first_bytes_seen = True
                            if self.ssl_context is None and _is_tls_record(data):
                                raise _final(
                                    LockdConnectionError(
                                        f"Cannot connect to lockd at {addr}: the server expects TLS (it answered "
                                        "with a TLS record); connect with ssl_context=lockd.tls_context(ca_file=...)"
                                    )
                                )
                        frames.push(data)
                        continue
                    if isinstance(message, wire.Welcome):
                        out_of_bounds = welcome_out_of_bounds(message, version)
                        if out_of_bounds is not None:
                            raise ServerProtocolError(addr, out_of_bounds)
                        break
                    if isinstance(message, wire.Error):
                        raise LockdError.from_wire(message.code, message.name, message.message)
                    raise ServerProtocolError(addr, f"it sent {type(message).__name__.upper()} before WELCOME")
        except BaseException as error:
            # Every failure, a cancelled connect included, closes what was opened.
            if writer is not None:
                writer.close()
            if isinstance(error, (LockdError, LockdConnectionError)):
                raise
            if isinstance(error, TimeoutError):
                raise ConnectTimeoutError(
                    f"Cannot connect to lockd at {addr}: no WELCOME within {bound_ms:g} ms"
                ) from error
            if isinstance(error, ssl.SSLError) and _is_not_tls(error):
                raise _final(
                    LockdConnectionError(
                        f"Cannot connect to lockd at {addr}: the server does not speak TLS (its answer is not "
                        f"a TLS record: {error}); it listens without -tls-cert, so connect without "
                        "ssl_context, or point at the TLS listener"
                    )
                ) from error
            if isinstance(error, wire.MalformedFrame):
                raise ServerProtocolError(addr, f"a malformed frame: {error}") from error
            if isinstance(error, (OSError, ssl.SSLError)) and writer is not None and not first_bytes_seen:
                # The TLS handshake was done, and the server closed before any lockd byte.
                cause = self._handshake_close_cause(error)
                if cause is not None:
                    raise _final(LockdConnectionError(f"Cannot connect to lockd at {addr}: {cause}")) from error
            if isinstance(error, ssl.SSLCertVerificationError):
                raise _final(LockdConnectionError(f"Cannot connect to lockd at {addr}: {error}")) from error
            if isinstance(error, (OSError, ssl.SSLError, ValueError)):
                raise LockdConnectionError(f"Cannot connect to lockd at {addr}: {error}") from error
            raise
        return Opened(reader=reader, writer=writer, welcome=message, frames=frames, addr=addr)

    def _handshake_close_cause(self, error: BaseException | None) -> str | None:
        """Why a TLS server closed the connection after the TLS handshake and before any lockd byte
        (with TLS 1.3 a refused client certificate shows up only then), or None without TLS."""
        if self.ssl_context is None:
            return None
        text = f"{getattr(error, 'reason', '') or ''} {error or ''}"
        if "CERTIFICATE_REQUIRED" in text.upper():
            return (
                "the server requires a client certificate (mutual TLS): give "
                "lockd.tls_context(cert_file=..., key_file=...), signed by a CA the server trusts "
                "(its -tls-client-ca)"
            )
        alert = re.search(r"ALERT_[A-Z_]+", text.upper())
        alert_text = f" (TLS alert: {alert.group(0)})" if alert else ""
        has_cert = getattr(self.ssl_context, "lockd_client_certificate", None)
        if has_cert:
            return (
                f"the server did not accept the client certificate{alert_text}: is it signed by a CA "
                "the server trusts (its -tls-client-ca), still valid, and made for client authentication?"
            )
        if has_cert is False:
            return (
                f"the server closed the connection right after the TLS handshake{alert_text}; it probably "
                "requires a client certificate (mutual TLS): give lockd.tls_context(cert_file=..., key_file=...)"
            )
        return (
            f"the server closed the connection right after the TLS handshake{alert_text}: it probably "
            "requires a client certificate (mutual TLS), or did not accept the one given (is it signed by "
            "a CA the server trusts, its -tls-client-ca, and still valid?)"
        )


def _final(error: LockdConnectionError) -> LockdConnectionError:
    """Marks a failure no retry mends (another protocol on that port, a TLS certificate refused):
    a first connect over several addresses ends with it at once instead of going round again."""
    error.lockd_final = True  # type: ignore[attr-defined]
    return error


def _parse(addr: str) -> tuple[str, int]:
    from ._client import parse_addr  # one parser for the whole package

    return parse_addr(addr)


def _is_tls_record(data: bytes) -> bool:
    """A TLS server answers a plaintext HELLO with a TLS record (alert 0x15 or handshake 0x16, then
    version 0x03 ..); a lockd frame starts with 0x00 (lengths below 16 MiB)."""
    return len(data) >= 2 and data[0] in (0x15, 0x16) and data[1] == 0x03


def _is_not_tls(error: ssl.SSLError) -> bool:
    """What OpenSSL says when the peer's bytes are not a TLS record (a plaintext server)."""
    text = f"{getattr(error, 'reason', '')} {error}"
    return any(mark in text.upper() for mark in ("WRONG_VERSION_NUMBER", "PACKET_LENGTH_TOO_LONG", "RECORD_LAYER_FAILURE"))
