"""The lockd wire codec, protocol versions 1 and 2 (docs/protocol.md, "Framing", "Messages" and
"Version 2").

Every frame is ``length: u32 | type: u8 | payload``; integers are unsigned big-endian; a
``str`` is a u16 byte length and that many bytes of UTF-8; a ``u64`` is at most 2^53-1.
Version 2 adds ``b16`` (16 raw bytes, a reclaim ticket) and ``bin`` (a u16 byte length and that
many raw bytes, a holder's value; not UTF-8 checked).
Messages are plain dataclasses; ``encode`` turns one into a frame and ``FrameReader``
turns a byte stream back into messages.

The version-2 fields of WELCOME, ACQUIRE, QUEUED and ACQUIRED come last in their dataclasses,
with their neutral values as defaults: a version-1 frame decodes with them neutral, so code above
the codec reads them whatever the session's version. Encoding a version-2 type, or a non-neutral
version-2 field, for a version-1 session raises ``ValueError`` (a programmer error). Enum fields
(``mode``, ``kind``, ``outcome``, ``event``, ``reason``) decode to their names; a byte that names
nothing stays an ``int``, for the layer above to refuse (it is not a framing error).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, fields as dataclass_fields
from typing import Union

#: The version this client puts into HELLO: the newest it speaks (version-2 sessions land later).
PROTOCOL_VERSION = 1
#: Every version this codec encodes and decodes.
PROTOCOL_VERSIONS = (1, 2)
#: ACQUIRE ``wait_ms`` meaning "wait as long as it takes".
WAIT_FOREVER = 0xFFFF_FFFF
#: The largest finite wait bound (``WAIT_FOREVER`` - 1).
WAIT_MS_MAX = 0xFFFF_FFFE
#: Largest frame (length prefix excluded) this client reads; the server's own default limit.
FRAME_BYTES_MAX = 64 * 1024
#: u64 fields stay exact in a JavaScript number: the high word is below 2^21.
U64_MAX = 2**53 - 1
STR_BYTES_MAX = 0xFFFF
TICKET_BYTES = 16
#: "No ticket" (a version-1 frame, or 16 zero bytes on the wire) and "no value".
EMPTY_TICKET = b""
EMPTY_VALUE = b""

HELLO = 0x01
WELCOME = 0x02
ACQUIRE = 0x10
QUEUED = 0x11
ACQUIRED = 0x12
RELEASE = 0x13
RELEASED = 0x14
HEARTBEAT = 0x15
HEARTBEAT_ACK = 0x16
RESUME = 0x17
RESUMED = 0x18
RECLAIM = 0x19
GOODBYE = 0x1A
SET_VALUE = 0x1B
VALUE_SET = 0x1C
QUERY = 0x1D
LOCK_STATE = 0x1E
WATCH = 0x1F
WATCHING = 0x20
UNWATCH = 0x21
WATCH_ENDED = 0x22
DOWNGRADE = 0x23
ERROR = 0x7F

# The names of each enum field's byte values (None: the byte names nothing).
LOCK_MODES = ("exclusive", "shared")
CLAIM_KINDS = (None, "owned", "queued")
RESUME_OUTCOMES = ("moved", "reclaim", "none")
LOCK_EVENTS = ("state", "granted", "ended", "value", "queue")
END_REASONS = ("none", "graceful", "expired", "io_timeout", "force", "failover")
LOCK_KINDS = ("none", "exclusive", "shared", "semaphore")
WATCH_END_REASONS = ("unwatched", "too_many_locks")


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
    # Version 2 (on the wire iff ``version`` is 2).
    term: int = 0
    reclaim_window_ms: int = 0
    value_bytes_max: int = 0


@dataclass(frozen=True)
class Acquire:
    request_id: int
    lease_ms: int
    wait_ms: int
    name: str
    # Version 2.
    mode: Union[str, int] = "exclusive"
    limit: int = 0
    value: bytes = EMPTY_VALUE


@dataclass(frozen=True)
class Queued:
    request_id: int
    position: int
    name: str
    # Version 2.
    order_term: int = 0
    order_seq: int = 0
    ticket: bytes = EMPTY_TICKET


@dataclass(frozen=True)
class Acquired:
    request_id: int
    token: int
    lease_ms: int
    name: str
    # Version 2.
    ticket: bytes = EMPTY_TICKET
    mode: Union[str, int] = "exclusive"
    limit: int = 1
    slot: int = 0
    write_generation: int = 0


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


# ---- version 2 only ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Resume:
    request_id: int
    prev_term: int
    prev_session_id: int
    claims: int


@dataclass(frozen=True)
class Resumed:
    request_id: int
    outcome: Union[str, int]
    window_left_ms: int


@dataclass(frozen=True)
class Reclaim:
    request_id: int
    kind: Union[str, int]
    token: int
    order_term: int
    order_seq: int
    lease_ms: int
    wait_ms: int
    ticket: bytes
    mode: Union[str, int]
    limit: int
    slot: int
    name: str
    value: bytes
    #: Owned shared claims: the ACQUIRED's write generation (its ticket binds it); else 0.
    write_generation: int = 0


@dataclass(frozen=True)
class Goodbye:
    request_id: int


@dataclass(frozen=True)
class SetValue:
    request_id: int
    token: int
    name: str
    value: bytes


@dataclass(frozen=True)
class ValueSet:
    request_id: int
    name: str


@dataclass(frozen=True)
class Query:
    request_id: int
    name: str


@dataclass(frozen=True)
class LockStateHolder:
    token: int
    held_ms: int
    lease_ms: int
    mode: Union[str, int]
    slot: int
    identity: str
    client_name: str
    value: bytes


@dataclass(frozen=True)
class LockState:
    request_id: int
    event: Union[str, int]
    reason: Union[str, int]
    kind: Union[str, int]
    limit: int
    queue_length: int
    owners: int
    name: str
    holders: tuple[LockStateHolder, ...]


@dataclass(frozen=True)
class Watch:
    request_id: int
    pattern: str


@dataclass(frozen=True)
class Watching:
    request_id: int
    locks: int


@dataclass(frozen=True)
class Unwatch:
    request_id: int


@dataclass(frozen=True)
class WatchEnded:
    request_id: int
    reason: Union[str, int]


@dataclass(frozen=True)
class Downgrade:
    """Make the exclusive ownership with ``token`` shared, in place; answered by ACQUIRED."""

    request_id: int
    token: int
    name: str


Message = Union[
    Hello, Welcome, Acquire, Queued, Acquired, Release, Released, Heartbeat, HeartbeatAck, Error,
    Resume, Resumed, Reclaim, Goodbye, SetValue, ValueSet, Query, LockState, Watch, Watching,
    Unwatch, WatchEnded, Downgrade,
]

# Field layout of each message type, in wire order: (attribute, kind). A kind is a type of
# docs/protocol.md, or a tuple of names (an enum, one u8), or "holders" (LOCK_STATE's records).
_Layout = tuple[tuple[str, object], ...]
_V1: dict[type, tuple[int, _Layout]] = {
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
_HOLDER: _Layout = (
    ("token", "u64"),
    ("held_ms", "u32"),
    ("lease_ms", "u32"),
    ("mode", LOCK_MODES),
    ("slot", "u32"),
    ("identity", "str"),
    ("client_name", "str"),
    ("value", "bin"),
)
_V2: dict[type, tuple[int, _Layout]] = {
    **_V1,
    Welcome: (
        WELCOME,
        _V1[Welcome][1] + (("term", "u64"), ("reclaim_window_ms", "u32"), ("value_bytes_max", "u32")),
    ),
    Acquire: (
        ACQUIRE,
        (
            ("request_id", "u32"),
            ("lease_ms", "u32"),
            ("wait_ms", "u32"),
            ("mode", LOCK_MODES),
            ("limit", "u32"),
            ("name", "str"),
            ("value", "bin"),
        ),
    ),
    Queued: (
        QUEUED,
        (
            ("request_id", "u32"),
            ("position", "u32"),
            ("order_term", "u64"),
            ("order_seq", "u64"),
            ("ticket", "b16"),
            ("name", "str"),
        ),
    ),
    Acquired: (
        ACQUIRED,
        (
            ("request_id", "u32"),
            ("token", "u64"),
            ("lease_ms", "u32"),
            ("ticket", "b16"),
            ("mode", LOCK_MODES),
            ("limit", "u32"),
            ("slot", "u32"),
            ("write_generation", "u64"),
            ("name", "str"),
        ),
    ),
    Resume: (
        RESUME,
        (("request_id", "u32"), ("prev_term", "u64"), ("prev_session_id", "u64"), ("claims", "u16")),
    ),
    Resumed: (
        RESUMED,
        (("request_id", "u32"), ("outcome", RESUME_OUTCOMES), ("window_left_ms", "u32")),
    ),
    Reclaim: (
        RECLAIM,
        (
            ("request_id", "u32"),
            ("kind", CLAIM_KINDS),
            ("token", "u64"),
            ("order_term", "u64"),
            ("order_seq", "u64"),
            ("lease_ms", "u32"),
            ("wait_ms", "u32"),
            ("ticket", "b16"),
            ("mode", LOCK_MODES),
            ("limit", "u32"),
            ("slot", "u32"),
            ("name", "str"),
            ("value", "bin"),
            ("write_generation", "u64"),
        ),
    ),
    Goodbye: (GOODBYE, (("request_id", "u32"),)),
    SetValue: (
        SET_VALUE,
        (("request_id", "u32"), ("token", "u64"), ("name", "str"), ("value", "bin")),
    ),
    ValueSet: (VALUE_SET, (("request_id", "u32"), ("name", "str"))),
    Query: (QUERY, (("request_id", "u32"), ("name", "str"))),
    LockState: (
        LOCK_STATE,
        (
            ("request_id", "u32"),
            ("event", LOCK_EVENTS),
            ("reason", END_REASONS),
            ("kind", LOCK_KINDS),
            ("limit", "u32"),
            ("queue_length", "u32"),
            ("owners", "u32"),
            ("name", "str"),
            ("holders", "holders"),
        ),
    ),
    Watch: (WATCH, (("request_id", "u32"), ("pattern", "str"))),
    Watching: (WATCHING, (("request_id", "u32"), ("locks", "u32"))),
    Unwatch: (UNWATCH, (("request_id", "u32"),)),
    WatchEnded: (WATCH_ENDED, (("request_id", "u32"), ("reason", WATCH_END_REASONS))),
    Downgrade: (DOWNGRADE, (("request_id", "u32"), ("token", "u64"), ("name", "str"))),
}
_LAYOUTS = {1: _V1, 2: _V2}
_BY_TYPE_BYTE = {
    version: {type_byte: (cls, fields) for cls, (type_byte, fields) in layouts.items()}
    for version, layouts in _LAYOUTS.items()
}
#: The version-2 fields of the messages version 2 changed, with their neutral values.
NEUTRAL: dict[type, dict[str, object]] = {
    cls: {f.name: f.default for f in dataclass_fields(cls) if f.name not in dict(_V1[cls][1])}
    for cls in (Welcome, Acquire, Queued, Acquired)
}

_U8 = struct.Struct(">B")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_LIMITS = {"u8": 0xFF, "u16": 0xFFFF, "u32": 0xFFFF_FFFF, "u64": U64_MAX}


def _check_version(version: int) -> int:
    if version not in PROTOCOL_VERSIONS:
        raise ValueError(f"protocol version {version}: this codec speaks 1 and 2")
    return version


def _neutral(attribute: str, value: object, neutral: object) -> bool:
    if attribute == "ticket" and isinstance(value, (bytes, bytearray)):
        return not any(value)  # 16 zero bytes are no ticket either
    return value == neutral


def _layout(message: Message, version: int) -> tuple[int, _Layout]:
    cls = type(message)
    if cls is Welcome:
        # WELCOME's tail is there iff its own version field is 2.
        if message.version == 2:  # type: ignore[union-attr]
            return _V2[Welcome]
        version = 1
    entry = _LAYOUTS[_check_version(version)].get(cls)
    if entry is None:
        raise ValueError(f"{cls.__name__} is version 2 only: not on a version-{version} session")
    if version == 1 and cls in NEUTRAL:
        for attribute, neutral in NEUTRAL[cls].items():
            if not _neutral(attribute, getattr(message, attribute), neutral):
                raise ValueError(
                    f'{cls.__name__} field "{attribute}" is version 2: only its neutral value '
                    f"{neutral!r} on a version-1 session"
                )
    return entry


def encode(message: Message, version: int = 1) -> bytes:
    """One frame, length prefix included, in the layout of ``version``. Out-of-range fields raise ``ValueError``."""
    type_byte, fields = _layout(message, version)
    body = bytearray(_U8.pack(type_byte))
    _encode_fields(body, message, fields)
    return _U32.pack(len(body)) + bytes(body)


def _encode_fields(body: bytearray, message: object, fields: _Layout) -> None:
    for attribute, kind in fields:
        value = getattr(message, attribute)
        if isinstance(kind, tuple):
            if isinstance(value, str):
                if value not in kind:
                    raise ValueError(f'field "{attribute}": {value!r} is not one of {kind}')
                value = kind.index(value)
            elif isinstance(value, int) and 0 <= value < len(kind) and kind[value] is not None:
                raise ValueError(f'field "{attribute}": {value} has a name, {kind[value]!r}')
            kind = "u8"
        if kind == "holders":
            if len(value) > 0xFFFF:
                raise ValueError(f'field "{attribute}": {len(value)} records exceed 65535')
            body += _U16.pack(len(value))
            for holder in value:
                _encode_fields(body, holder, _HOLDER)
            continue
        if kind == "str":
            data = value.encode("utf-8")  # a lone surrogate raises UnicodeEncodeError
            if len(data) > STR_BYTES_MAX:
                raise ValueError(f'field "{attribute}" is {len(data)} bytes, above {STR_BYTES_MAX}')
            body += _U16.pack(len(data)) + data
            continue
        if kind == "bin":
            if len(value) > STR_BYTES_MAX:
                raise ValueError(f'field "{attribute}" is {len(value)} bytes, above {STR_BYTES_MAX}')
            body += _U16.pack(len(value)) + bytes(value)
            continue
        if kind == "b16":
            if len(value) not in (0, TICKET_BYTES):
                raise ValueError(f'field "{attribute}" is {len(value)} bytes, not {TICKET_BYTES} (or none)')
            body += bytes(value) if value else bytes(TICKET_BYTES)
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


class _Cursor:
    def __init__(self, view: memoryview, what: str) -> None:
        self.view = view
        self.at = 0
        self.what = what

    def need(self, size: int, attribute: str) -> None:
        if len(self.view) - self.at < size:
            raise MalformedFrame(f'{self.what}: field "{attribute}" is truncated')

    def fields(self, fields: _Layout, prefix: str = "") -> dict[str, object]:
        values: dict[str, object] = {}
        for attribute, kind in fields:
            values[attribute] = self.field(prefix + attribute, kind)
        return values

    def field(self, attribute: str, kind: object) -> object:
        view = self.view
        if isinstance(kind, tuple):
            self.need(1, attribute)
            byte = view[self.at]
            self.at += 1
            name = kind[byte] if byte < len(kind) else None
            return byte if name is None else name
        if kind == "holders":
            count = self.field(attribute, "u16")
            return tuple(
                LockStateHolder(**self.fields(_HOLDER, "holders[].")) for _ in range(count)  # type: ignore[arg-type]
            )
        size = {"u8": 1, "u16": 2, "u32": 4, "u64": 8, "str": 2, "bin": 2, "b16": TICKET_BYTES}[kind]  # type: ignore[index]
        self.need(size, attribute)
        at = self.at
        self.at += size
        if kind == "u8":
            return view[at]
        if kind == "u16":
            return _U16.unpack_from(view, at)[0]
        if kind == "u32":
            return _U32.unpack_from(view, at)[0]
        if kind == "u64":
            high, low = _U32.unpack_from(view, at)[0], _U32.unpack_from(view, at + 4)[0]
            if high >= 1 << 21:
                raise MalformedFrame(f'{self.what}: field "{attribute}" is above 2^53-1')
            return (high << 32) | low
        if kind == "b16":
            ticket = bytes(view[at : at + TICKET_BYTES])
            return EMPTY_TICKET if not any(ticket) else ticket
        length = _U16.unpack_from(view, at)[0]
        self.need(length, attribute)
        data = bytes(view[self.at : self.at + length])
        self.at += length
        if kind == "bin":
            return data
        try:
            # Python's UTF-8 decoder refuses surrogates and overlong forms, as the doc asks.
            return data.decode("utf-8")
        except UnicodeDecodeError as error:
            raise MalformedFrame(f'{self.what}: field "{attribute}" is not valid UTF-8') from error


def decode_body(type_byte: int, body: bytes | memoryview, version: int = 1) -> Message:
    """Decodes a frame body (the bytes after the type byte) of a session of ``version``. Raises ``MalformedFrame``."""
    entry = _BY_TYPE_BYTE[_check_version(version)].get(type_byte)
    if entry is None:
        raise MalformedFrame(f"unknown message type 0x{type_byte:02x}")
    cls, fields = entry
    cursor = _Cursor(memoryview(body), cls.__name__)
    if cls is Welcome:
        values = cursor.fields(_V1[Welcome][1])
        if values["version"] == 2:  # the tail is there iff the version field is 2
            values.update(cursor.fields(_V2[Welcome][1][len(_V1[Welcome][1]) :]))
    else:
        values = cursor.fields(fields)
    if cursor.at != len(cursor.view):
        raise MalformedFrame(f"{cls.__name__}: {len(cursor.view) - cursor.at} trailing bytes")
    return cls(**values)


class FrameReader:
    """Turns a byte stream, cut anywhere, into messages. The limit is checked from the prefix.

    Frames decode in the layout of ``version``: 1 until the first HELLO or WELCOME decoded fixes
    it (when its version is one this codec speaks), or as set.
    """

    def __init__(self, max_frame_bytes: int = FRAME_BYTES_MAX) -> None:
        self._buffer = bytearray()
        self._max_frame_bytes = max_frame_bytes
        self._version = 1
        self._version_fixed = False

    @property
    def version(self) -> int:
        return self._version

    @version.setter
    def version(self, version: int) -> None:
        self._version = _check_version(version)
        self._version_fixed = True

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
        message = decode_body(type_byte, body, self._version)
        if isinstance(message, (Hello, Welcome)) and not self._version_fixed:
            self._version_fixed = True
            if message.version in PROTOCOL_VERSIONS:
                self._version = message.version
        return message
