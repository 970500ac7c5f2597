"""The lockd wire codec, protocol version 1 (docs/protocol.md, "Framing" and "Messages").

Every frame is ``length: u32 | type: u8 | payload``; integers are unsigned big-endian; a
``str`` is a u16 byte length and that many bytes of UTF-8; a ``u64`` is at most 2^53-1.
Messages are plain dataclasses; ``encode`` turns one into a frame and ``FrameReader``
turns a byte stream back into messages.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Union

PROTOCOL_VERSION = 1
#: ACQUIRE ``wait_ms`` meaning "wait as long as it takes".
WAIT_FOREVER = 0xFFFF_FFFF
#: The largest finite wait bound (``WAIT_FOREVER`` - 1).
WAIT_MS_MAX = 0xFFFF_FFFE
#: Largest frame (length prefix excluded) this client reads; the server's own default limit.
FRAME_BYTES_MAX = 64 * 1024
#: u64 fields stay exact in a JavaScript number: the high word is below 2^21.
U64_MAX = 2**53 - 1
STR_BYTES_MAX = 0xFFFF

HELLO = 0x01
WELCOME = 0x02
ACQUIRE = 0x10
QUEUED = 0x11
ACQUIRED = 0x12
RELEASE = 0x13
RELEASED = 0x14
HEARTBEAT = 0x15
HEARTBEAT_ACK = 0x16
ERROR = 0x7F


class MalformedFrame(Exception):
    """Bytes from the peer that break the framing rules (docs/protocol.md, "Framing")."""


@dataclass(frozen=True)
class Hello:
    version: int
    client_name: str


@dataclass(frozen=True)
class Welcome:
    version: int
    server_version: str
    session_id: int
    io_timeout_ms: int
    lease_default_ms: int
    lease_max_ms: int


@dataclass(frozen=True)
class Acquire:
    request_id: int
    lease_ms: int
    wait_ms: int
    name: str


@dataclass(frozen=True)
class Queued:
    request_id: int
    position: int
    name: str


@dataclass(frozen=True)
class Acquired:
    request_id: int
    token: int
    lease_ms: int
    name: str


@dataclass(frozen=True)
class Release:
    request_id: int
    token: int
    name: str


@dataclass(frozen=True)
class Released:
    request_id: int
    name: str


@dataclass(frozen=True)
class Heartbeat:
    request_id: int


@dataclass(frozen=True)
class HeartbeatAck:
    request_id: int
    renewed: int


@dataclass(frozen=True)
class Error:
    request_id: int
    code: int
    name: str
    message: str


Message = Union[
    Hello, Welcome, Acquire, Queued, Acquired, Release, Released, Heartbeat, HeartbeatAck, Error
]

# Field layout of each message type, in wire order: (attribute, kind).
_LAYOUTS: dict[type, tuple[int, tuple[tuple[str, str], ...]]] = {
    Hello: (HELLO, (("version", "u16"), ("client_name", "str"))),
    Welcome: (
        WELCOME,
        (
            ("version", "u16"),
            ("server_version", "str"),
            ("session_id", "u64"),
            ("io_timeout_ms", "u32"),
            ("lease_default_ms", "u32"),
            ("lease_max_ms", "u32"),
        ),
    ),
    Acquire: (
        ACQUIRE,
        (("request_id", "u32"), ("lease_ms", "u32"), ("wait_ms", "u32"), ("name", "str")),
    ),
    Queued: (QUEUED, (("request_id", "u32"), ("position", "u32"), ("name", "str"))),
    Acquired: (
        ACQUIRED,
        (("request_id", "u32"), ("token", "u64"), ("lease_ms", "u32"), ("name", "str")),
    ),
    Release: (RELEASE, (("request_id", "u32"), ("token", "u64"), ("name", "str"))),
    Released: (RELEASED, (("request_id", "u32"), ("name", "str"))),
    Heartbeat: (HEARTBEAT, (("request_id", "u32"),)),
    HeartbeatAck: (HEARTBEAT_ACK, (("request_id", "u32"), ("renewed", "u32"))),
    Error: (
        ERROR,
        (("request_id", "u32"), ("code", "u8"), ("name", "str"), ("message", "str")),
    ),
}
_BY_TYPE_BYTE = {type_byte: (cls, fields) for cls, (type_byte, fields) in _LAYOUTS.items()}

_U8 = struct.Struct(">B")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_LIMITS = {"u8": 0xFF, "u16": 0xFFFF, "u32": 0xFFFF_FFFF, "u64": U64_MAX}


def encode(message: Message) -> bytes:
    """One frame, length prefix included. Out-of-range fields raise ``ValueError``."""
    type_byte, fields = _LAYOUTS[type(message)]
    body = bytearray(_U8.pack(type_byte))
    for attribute, kind in fields:
        value = getattr(message, attribute)
        if kind == "str":
            data = value.encode("utf-8")  # a lone surrogate raises UnicodeEncodeError
            if len(data) > STR_BYTES_MAX:
                raise ValueError(f'field "{attribute}" is {len(data)} bytes, above {STR_BYTES_MAX}')
            body += _U16.pack(len(data)) + data
            continue
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= _LIMITS[kind]:
            raise ValueError(f'field "{attribute}": {value!r} is not a {kind}')
        if kind == "u8":
            body += _U8.pack(value)
        elif kind == "u16":
            body += _U16.pack(value)
        elif kind == "u32":
            body += _U32.pack(value)
        else:  # u64: two u32, high word first
            body += _U32.pack(value >> 32) + _U32.pack(value & 0xFFFF_FFFF)
    return _U32.pack(len(body)) + bytes(body)


def decode_body(type_byte: int, body: bytes | memoryview) -> Message:
    """Decodes a frame body (the bytes after the type byte). Raises ``MalformedFrame``."""
    entry = _BY_TYPE_BYTE.get(type_byte)
    if entry is None:
        raise MalformedFrame(f"unknown message type 0x{type_byte:02x}")
    cls, fields = entry
    view = memoryview(body)
    at = 0
    values = {}
    for attribute, kind in fields:
        size = {"u8": 1, "u16": 2, "u32": 4, "u64": 8, "str": 2}[kind]
        if len(view) - at < size:
            raise MalformedFrame(f'{cls.__name__}: field "{attribute}" is truncated')
        if kind == "u8":
            values[attribute] = view[at]
        elif kind == "u16":
            values[attribute] = _U16.unpack_from(view, at)[0]
        elif kind == "u32":
            values[attribute] = _U32.unpack_from(view, at)[0]
        elif kind == "u64":
            high, low = _U32.unpack_from(view, at)[0], _U32.unpack_from(view, at + 4)[0]
            if high >= 1 << 21:
                raise MalformedFrame(f'{cls.__name__}: field "{attribute}" is above 2^53-1')
            values[attribute] = (high << 32) | low
        else:
            length = _U16.unpack_from(view, at)[0]
            if len(view) - at - 2 < length:
                raise MalformedFrame(f'{cls.__name__}: field "{attribute}" is truncated')
            try:
                # Python's UTF-8 decoder refuses surrogates and overlong forms, as the doc asks.
                values[attribute] = bytes(view[at + 2 : at + 2 + length]).decode("utf-8")
            except UnicodeDecodeError as error:
                raise MalformedFrame(
                    f'{cls.__name__}: field "{attribute}" is not valid UTF-8'
                ) from error
            at += length
        at += size
    if at != len(view):
        raise MalformedFrame(f"{cls.__name__}: {len(view) - at} trailing bytes")
    return cls(**values)


class FrameReader:
    """Turns a byte stream, cut anywhere, into messages. The limit is checked from the prefix."""

    def __init__(self, max_frame_bytes: int = FRAME_BYTES_MAX) -> None:
        self._buffer = bytearray()
        self._max_frame_bytes = max_frame_bytes

    def push(self, data: bytes) -> None:
        self._buffer += data

    def next(self) -> Message | None:
        """The next whole message, or None until more bytes arrive."""
        if len(self._buffer) < 4:
            return None
        length = _U32.unpack_from(self._buffer, 0)[0]
        if length == 0:
            raise MalformedFrame("frame length 0")
        if length > self._max_frame_bytes:
            raise MalformedFrame(f"frame length {length} exceeds the limit of {self._max_frame_bytes}")
        if len(self._buffer) < 4 + length:
            return None
        type_byte = self._buffer[4]
        body = bytes(self._buffer[5 : 4 + length])
        del self._buffer[: 4 + length]
        return decode_body(type_byte, body)
