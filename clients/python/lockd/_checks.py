"""Every frame from a server is untrusted input: the checks the client applies to it.

The same rules as the TypeScript client (src/client/redirect.ts, reply_ledger.ts and
connection.ts), documented in docs/protocol.md ("Requests in flight", "Several nodes"):

- a WELCOME must lie within the documented bounds (the server's own flag bounds);
- a reply must fit the request it names: a request id this session sent and has not had its last
  answer to, a type that request can get, that request's lock name, a lease and token in bounds;
- a NOT_LEADER's name must be a plain ``host:port``, and is followed to an address outside the
  client's list only with TLS (where the node reached must present a certificate from the CA);
- version 2 (docs/protocol.md, "Version 2"): a WELCOME has the HELLO's version and a reclaim window
  in bounds; a QUEUED's order term is not above the session's term; an ACQUIRED grants what was
  asked (its mode; the limit asked for, any limit when the claim had no opinion, 1 for a shared
  lock; a slot below the limit; a write generation below the token of a shared grant, 0 else) and
  re-confirms an owned RECLAIM with the claim's own token, mode, limit and slot; RESUMED answers
  the RESUME only, with an outcome that names something; CLAIM_VOID answers an owned RECLAIM only;
  VALUE_SET answers a SET_VALUE; LOCK_STATE answers a QUERY (event 0, its name) or belongs to a
  WATCH (event 0 before WATCHING, events 1 to 4 after it, a name the pattern can match), and is
  consistent in itself (``lock_state_misfit``); WATCHING counts the snapshots sent; WATCH_ENDED
  "unwatched" answers an UNWATCH only.
"""

from __future__ import annotations

import ipaddress
import json
import re
from dataclasses import dataclass
from typing import Literal, Union

from . import _codec as wire

#: The server's flag bounds (src/limits.ts): a WELCOME outside them is a protocol error.
IO_TIMEOUT_MS_MIN = 100
IO_TIMEOUT_MS_MAX = 3_600_000
LEASE_MS_MIN = 50
LEASE_MS_MAX_MAX = 86_400_000
TOKEN_MAX = 2**53 - 1
LOCK_NAME_BYTES_MAX = 1024
#: Longest address a NOT_LEADER may name: a 253-byte DNS name, ":", a 5-digit port.
LEADER_ADDRESS_CHARS_MAX = 253 + 1 + 5

#: Longest reclaim window a version-2 WELCOME may announce: ten minutes, far above what a server
#: computes (about 1.5 × its cluster TTL, at most 60 s, + its HELLO hold, 4 s, + its reclaim
#: grace, at most 60 s). A client keeps suspended locks and the abandoned socket that long.
RECLAIM_WINDOW_MS_MAX = 600_000
#: A value is a ``bin``: at most 65,535 bytes.
VALUE_BYTES_MAX_MAX = 0xFFFF

LEASE_EXPIRED = 0x05
NOT_OWNER = 0x06
CLAIM_VOID = 0x12
WAIT_TIMEOUT = 0x07
DUPLICATE_CLAIM = 0x08
CANCELLED = 0x0F
_KNOWN_CODES = frozenset(range(0x01, 0x13))
#: Codes that belong to an ownership or a wait: never the answer to a QUERY, SET_VALUE or WATCH.
_NOT_LOOK_ANSWERS = frozenset((LEASE_EXPIRED, WAIT_TIMEOUT, DUPLICATE_CLAIM, CANCELLED, CLAIM_VOID))
_CLOSING_CODES = frozenset((0x01, 0x02, 0x03, 0x0A, 0x0D, 0x0E, 0x11))

_LABEL = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?\Z")
_ADDRESS = re.compile(r"(?:\[([0-9A-Fa-f:.]+)\]|([A-Za-z0-9_.-]+)):([0-9]{1,5})\Z")
_PRINTABLE_ASCII = re.compile(r"[\x21-\x7e]+\Z")


def cut_utf8(text: str, max_bytes: int) -> str:
    """``text`` cut to at most ``max_bytes`` UTF-8 bytes between two characters, ending with "…" when cut."""
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= max_bytes:
        return text
    end = max(0, max_bytes - 3)
    while end > 0 and data[end] & 0xC0 == 0x80:  # back to the start of a character
        end -= 1
    return data[:end].decode("utf-8", "surrogatepass") + "\u2026"


def quote_untrusted(text: str) -> str:
    """A server's string for an error message: cut to 80 characters, quoted, with control, format
    (bidirectional overrides, zero-width) and line-separator characters escaped as ``\\uXXXX``."""
    cut = text[:80] + "\u2026" if len(text) > 80 else text
    out = []
    for char in json.dumps(cut, ensure_ascii=False):
        code = ord(char)
        if code < 0x20 or 0x7F <= code <= 0x9F or _is_format(char):
            out.append(f"\\u{code:04x}")
        else:
            out.append(char)
    return "".join(out)


def _is_format(char: str) -> bool:
    import unicodedata

    return unicodedata.category(char) in ("Cf", "Zl", "Zp", "Cs")


def parse_leader_address(value: str) -> str | None:
    """The canonical ``host:port`` of a leader address (lower-case host, IPv6 in brackets), or None
    when it is not one: a DNS name, an IPv4 address or a bracketed IPv6 address (no zone), and a
    decimal port 1..65535, at most 259 printable ASCII characters."""
    if not value or len(value) > LEADER_ADDRESS_CHARS_MAX + 2 or not _PRINTABLE_ASCII.match(value):
        return None
    match = _ADDRESS.match(value)
    if match is None:
        return None
    port = int(match.group(3))
    if not 1 <= port <= 65_535:
        return None
    if match.group(1) is not None:
        try:
            ipaddress.IPv6Address(match.group(1))
        except ValueError:
            return None
        return f"[{match.group(1).lower()}]:{port}"
    host = match.group(2).lower()
    if len(host) > 253:
        return None
    labels = host.split(".")
    if labels[-1].isdigit():  # an all-digit top label: an IPv4 address
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            return None
        return f"{host}:{port}"
    return f"{host}:{port}" if all(_LABEL.match(label) for label in labels) else None


def node_key(addr: str) -> str:
    """``host:port`` as nodes are compared: lower-case host, same port."""
    return parse_leader_address(addr) or addr.lower()


Why = Literal["no_leader", "invalid", "outside_list"]


def redirect_verdict(name: str, addrs: list[str], tls: bool) -> tuple[str | None, Why | None]:
    """``(address to follow, None)`` or ``(None, why not)``: "" names no leader; an invalid name is
    a failed node; an address outside ``addrs`` is followed only with TLS."""
    if not name:
        return None, "no_leader"
    addr = parse_leader_address(name)
    if addr is None:
        return None, "invalid"
    for listed in addrs:
        if node_key(listed) == addr:
            return listed, None
    return (addr, None) if tls else (None, "outside_list")


def refused_redirect_text(addr: str, name: str, why: Why) -> str:
    """Why a NOT_LEADER was not followed (``invalid`` as what the node did wrong)."""
    if why == "invalid":
        return (
            f"it answered NOT_LEADER naming {quote_untrusted(name)} as the leader, which is not a "
            "host:port address (that node counts as failed)"
        )
    return (
        f"lockd at {addr} is not the leader and named {name} as the leader, which is not in the "
        "address list; without TLS a redirect is followed only to a listed address (add it to the "
        "list, or use TLS, where the new node must present a certificate from your CA)"
    )


def welcome_out_of_bounds(welcome: wire.Welcome, version: int = wire.PROTOCOL_VERSION) -> str | None:
    """What is wrong with a WELCOME outside the documented bounds, or None; ``version`` is the
    version the HELLO asked for (a server answers with that one or refuses)."""
    if welcome.version != version:
        return f"WELCOME for protocol version {welcome.version}; this client asked for {version}"
    for field, value, low, high in (
        ("ioTimeoutMs", welcome.io_timeout_ms, IO_TIMEOUT_MS_MIN, IO_TIMEOUT_MS_MAX),
        ("leaseMaxMs", welcome.lease_max_ms, LEASE_MS_MIN, LEASE_MS_MAX_MAX),
        ("leaseDefaultMs", welcome.lease_default_ms, LEASE_MS_MIN, welcome.lease_max_ms),
        ("sessionId", welcome.session_id, 1, TOKEN_MAX),
        ("reclaimWindowMs", welcome.reclaim_window_ms, 0, RECLAIM_WINDOW_MS_MAX),
        ("valueBytesMax", welcome.value_bytes_max, 0, VALUE_BYTES_MAX_MAX),
    ):
        if not low <= value <= high:
            return f"WELCOME with {field} {value}, outside {low}..{high}"
    return None


def grant_misfit(message: wire.Acquired, asked: _Acquire) -> str | None:
    """What is wrong with the kind of an ACQUIRED for what the claim asked, or None."""
    mode, limit, slot, generation = message.mode, message.limit, message.slot, message.write_generation
    if mode != asked.mode:
        return f"with mode {mode}, but the claim asked for mode {asked.mode}"
    if limit < 1 or (asked.limit >= 1 and limit != asked.limit):
        return f"with limit {limit}, but the claim asked for limit {asked.limit or 'any'}"
    if mode == "shared" and limit != 1:
        return f"with limit {limit} for a shared grant (a shared lock has limit 1)"
    if slot >= limit or (asked.reclaim == "owned" and slot != asked.slot):
        return f"with slot {slot}, outside the lock's slots 0..{limit - 1} or not the claim's slot {asked.slot}"
    if mode == "exclusive" and generation != 0:
        return f"with write generation {generation} for an exclusive grant (only shared grants carry one)"
    # An owned RECLAIM's answer may carry the token itself: a downgraded owner's generation.
    if mode == "shared" and (generation > message.token or (generation == message.token and asked.reclaim != "owned")):
        return f"with write generation {generation}, not below its own token {message.token}"
    return None


def pattern_may_match(pattern: str, name: str) -> bool:
    """Whether a WATCH's pattern (a name or a glob, docs/protocol.md "WATCH") can match ``name``:
    the literal text before its first wildcard, class or escape must start the name, and a pattern
    without any of them must equal it. (A full glob match is the server's; this catches a LOCK_STATE
    of another lock.)"""
    cut = min((i for i, char in enumerate(pattern) if char in "*?[\\"), default=-1)
    if cut < 0:
        return name == pattern
    return name.startswith(pattern[:cut])


_HOLDER_KINDS = {"exclusive": ("exclusive",), "shared": ("shared", "exclusive"), "semaphore": ("exclusive",)}


def lock_state_misfit(message: wire.LockState, welcome: wire.Welcome) -> str | None:
    """What is inconsistent in a LOCK_STATE (docs/protocol.md, "LOCK_STATE"), or None: known
    event, reason and kind; a reason with an end only; a kind "none" lock with nothing in it; a
    limit that fits the kind; no more holder records than owners, nor owners than the limit; each
    holder with a token and lease in bounds, a mode its lock admits, a slot below the limit."""
    event, reason, kind, limit = message.event, message.reason, message.kind, message.limit
    for field, value in (("event", event), ("reason", reason), ("kind", kind)):
        if not isinstance(value, str):
            return f"{field} {value} names nothing"
    if (event == "ended") != (reason != "none"):
        return f"event {event} with reason {reason} (only an end has a reason)"
    holders = message.holders
    if kind == "none":
        if limit or message.owners or message.queue_length or holders:
            return "kind none (no owner, no waiter), but it has a limit, owners, waiters or holders"
        return None
    if (limit != 1) if kind in ("exclusive", "shared") else (limit < 1):
        return f"kind {kind} with limit {limit}"
    if len(holders) > message.owners:
        return f"{len(holders)} holder records for {message.owners} owner(s)"
    if kind != "shared" and message.owners > limit:
        return f"{message.owners} owners of a {kind} lock of limit {limit}"
    for holder in holders:
        if not 1 <= holder.token <= TOKEN_MAX:
            return f"a holder with token {holder.token}"
        if not LEASE_MS_MIN <= holder.lease_ms <= welcome.lease_max_ms:
            return f"a holder with a lease of {holder.lease_ms} ms"
        if holder.mode not in _HOLDER_KINDS[kind]:
            return f"a holder in mode {holder.mode} of a {kind} lock"
        if holder.slot >= limit or (kind != "semaphore" and holder.slot != 0):
            return f"a holder in slot {holder.slot} of a {kind} lock of limit {limit}"
    if kind == "shared" and any(h.mode == "exclusive" for h in holders) and message.owners != 1:
        return "an exclusive holder beside other owners"
    return None


@dataclass
class _Acquire:
    """An ACQUIRE, or a RECLAIM (``reclaim`` is its kind): both are answered the same way."""

    name: str
    phase: Literal["waiting", "owned"] = "waiting"
    queued: bool = False
    reclaim: Literal["owned", "queued"] | None = None
    #: An owned RECLAIM: the claim's token, which its ACQUIRED must carry again.
    token: int = 0
    #: What the claim asked for: its mode and limit (0: no opinion); an owned RECLAIM: its slot.
    mode: str = "exclusive"
    limit: int = 1
    slot: int = 0


@dataclass
class _Query:
    name: str


@dataclass
class _SetValue:
    name: str


@dataclass
class _Downgrade:
    name: str
    token: int


@dataclass
class _Watch:
    """A WATCH: snapshots (event 0) until WATCHING, events after it, until WATCH_ENDED."""

    pattern: str
    snapshots: int = 0
    watching: bool = False
    unwatch_sent: bool = False


@dataclass
class _Release:
    name: str
    acquire_request_id: int  # the ownership it ends (0: a token-0 cancel)


@dataclass
class _Heartbeat:
    pass


@dataclass
class _Resume:
    name: str = ""  # an ERROR answering it names no lock


_Expected = Union[_Acquire, _Release, _Heartbeat, _Resume, _Query, _SetValue, _Watch, _Downgrade]

_TYPE_NAMES = {
    wire.Queued: "QUEUED",
    wire.Acquired: "ACQUIRED",
    wire.Released: "RELEASED",
    wire.HeartbeatAck: "HEARTBEAT_ACK",
    wire.Error: "ERROR",
    wire.Resumed: "RESUMED",
    wire.ValueSet: "VALUE_SET",
    wire.LockState: "LOCK_STATE",
    wire.Watching: "WATCHING",
    wire.WatchEnded: "WATCH_ENDED",
}


class ReplyLedger:
    """What one session still expects to hear, by request id, and whether a reply fits it.

    Legal transitions: an acquire (ACQUIRE or RECLAIM) ``waiting`` -> ``owned`` (ACQUIRED) -> gone
    (LEASE_EXPIRED, or the answer to the RELEASE of that ownership); ``waiting`` -> gone (an ERROR
    that ends the wait); a release, heartbeat or resume -> gone (its answer).
    """

    def __init__(self, welcome: wire.Welcome) -> None:
        self._welcome = welcome
        self._expected: dict[int, _Expected] = {}

    def __contains__(self, request_id: int) -> bool:
        return request_id in self._expected

    def __len__(self) -> int:
        return len(self._expected)

    def acquire_sent(self, request_id: int, name: str, mode: str = "exclusive", limit: int = 1) -> None:
        self._expected[request_id] = _Acquire(name, mode=mode, limit=limit)

    def reclaim_sent(
        self,
        request_id: int,
        name: str,
        kind: Literal["owned", "queued"],
        token: int = 0,
        *,
        mode: str = "exclusive",
        limit: int = 1,
        slot: int = 0,
    ) -> None:
        self._expected[request_id] = _Acquire(name, reclaim=kind, token=token, mode=mode, limit=limit, slot=slot)

    def downgrade_sent(self, request_id: int, name: str, token: int) -> None:
        self._expected[request_id] = _Downgrade(name, token)

    def query_sent(self, request_id: int, name: str) -> None:
        self._expected[request_id] = _Query(name)

    def set_value_sent(self, request_id: int, name: str) -> None:
        self._expected[request_id] = _SetValue(name)

    def watch_sent(self, request_id: int, pattern: str) -> None:
        self._expected[request_id] = _Watch(pattern)

    def unwatch_sent(self, request_id: int) -> None:
        expected = self._expected.get(request_id)
        if isinstance(expected, _Watch):
            expected.unwatch_sent = True

    def resume_sent(self, request_id: int) -> None:
        self._expected[request_id] = _Resume()

    def release_sent(self, request_id: int, name: str, acquire_request_id: int) -> None:
        self._expected[request_id] = _Release(name, acquire_request_id)

    def heartbeat_sent(self, request_id: int) -> None:
        self._expected[request_id] = _Heartbeat()

    def accept(self, message: wire.Message) -> str | None:
        """Checks a reply (request id other than 0) and books it: None when it fits, else what is wrong."""
        request_id = getattr(message, "request_id", 0)
        expected = self._expected.get(request_id)
        what = f"{_TYPE_NAMES.get(type(message), type(message).__name__)} for request {request_id}"
        if expected is None:
            return f"{what}, which this session never sent or had its last answer to already"
        if isinstance(message, wire.Queued):
            return self._queued(what, message, expected)
        if isinstance(message, wire.Acquired):
            return self._acquired(what, message, expected)
        if isinstance(message, wire.Released):
            if not isinstance(expected, _Release):
                return f"{what}, which is not a RELEASE"
            if message.name != expected.name:
                return self._wrong_name(what, message.name, "RELEASE", expected.name)
            self._release_answered(request_id, expected.acquire_request_id)
            return None
        if isinstance(message, wire.HeartbeatAck):
            if not isinstance(expected, _Heartbeat):
                return f"{what}, which is not a HEARTBEAT"
            # Replies keep request order: an older heartbeat without its ACK by now never gets one.
            for rid in list(self._expected):
                if isinstance(self._expected[rid], _Heartbeat):
                    del self._expected[rid]
                if rid == request_id:
                    break
            return None
        if isinstance(message, wire.Resumed):
            if not isinstance(expected, _Resume):
                return f"{what}, which is not a RESUME"
            if not isinstance(message.outcome, str):
                return f"{what} with outcome {message.outcome}, which names nothing"
            del self._expected[request_id]
            return None
        if isinstance(message, wire.Error):
            return self._error(what, message, expected)
        if isinstance(message, wire.ValueSet):
            if not isinstance(expected, _SetValue):
                return f"{what}, which is not a SET_VALUE"
            if message.name != expected.name:
                return self._wrong_name(what, message.name, "SET_VALUE", expected.name)
            del self._expected[request_id]
            return None
        if isinstance(message, wire.LockState):
            return self._lock_state(what, message, expected)
        if isinstance(message, wire.Watching):
            if not isinstance(expected, _Watch) or expected.watching:
                return f"{what}, which is not a WATCH waiting for its WATCHING"
            if message.locks != expected.snapshots:
                return f"{what} counting {message.locks} snapshot(s), but {expected.snapshots} came"
            expected.watching = True
            return None
        if isinstance(message, wire.WatchEnded):
            if not isinstance(expected, _Watch):
                return f"{what}, which is not a WATCH"
            if message.reason == "unwatched" and not expected.unwatch_sent:
                return f"{what} with reason unwatched, but this session sent no UNWATCH for it"
            del self._expected[request_id]
            return None
        return f"{what}: not a reply"

    def _downgraded(self, what: str, message: wire.Acquired, expected: _Downgrade) -> str | None:
        """The ACQUIRED answering a DOWNGRADE: the same ownership (name, token), now shared."""
        if message.name != expected.name:
            return self._wrong_name(what, message.name, "DOWNGRADE", expected.name)
        lease_max_ms = self._welcome.lease_max_ms
        if not LEASE_MS_MIN <= message.lease_ms <= lease_max_ms:
            return f"{what} with a lease of {message.lease_ms} ms, outside {LEASE_MS_MIN}..{lease_max_ms} ms"
        asked = _Acquire(expected.name, mode="shared", limit=1)
        misfit = (
            f"with token {message.token}, but the DOWNGRADE named token {expected.token}"
            if message.token != expected.token
            else grant_misfit(message, asked)
            if message.write_generation != message.token
            else None  # a downgraded writer is its own write generation
        )
        if misfit is None and (message.mode, message.limit, message.slot) != ("shared", 1, 0):
            misfit = f"with mode {message.mode}, limit {message.limit}, slot {message.slot}, not a shared grant"
        if misfit is not None:
            return f"{what} {misfit}"
        del self._expected[message.request_id]
        return None

    def _lock_state(self, what: str, message: wire.LockState, expected: _Expected) -> str | None:
        if isinstance(expected, _Query):
            if message.event != "state":
                return f"{what} with event {message.event}, but a QUERY is answered with event 0 (state)"
            if message.name != expected.name:
                return self._wrong_name(what, message.name, "QUERY", expected.name)
            misfit = lock_state_misfit(message, self._welcome)
            if misfit is None:
                del self._expected[message.request_id]
            return None if misfit is None else f"{what}: {misfit}"
        if not isinstance(expected, _Watch):
            return f"{what}, which is not a QUERY or WATCH"
        if (message.event == "state") == expected.watching:
            when = "after" if expected.watching else "before"
            return f"{what} with event {message.event} {when} WATCHING"
        if not pattern_may_match(expected.pattern, message.name):
            return f"{what} names lock {quote_untrusted(message.name)}, which pattern {quote_untrusted(expected.pattern)} cannot match"
        misfit = lock_state_misfit(message, self._welcome)
        if misfit is not None:
            return f"{what}: {misfit}"
        if not expected.watching:
            expected.snapshots += 1
        return None

    def _queued(self, what: str, message: wire.Queued, expected: _Expected) -> str | None:
        if (
            not isinstance(expected, _Acquire)
            or expected.phase != "waiting"
            or expected.queued
            or expected.reclaim == "owned"
        ):
            return f"{what}, which is not an ACQUIRE or queued RECLAIM waiting for its first QUEUED"
        if message.name != expected.name:
            return self._wrong_name(what, message.name, self._kind(expected), expected.name)
        if message.order_term > self._welcome.term:
            return f"{what} with orderTerm {message.order_term}, above the session's term {self._welcome.term}"
        expected.queued = True
        return None

    def _acquired(self, what: str, message: wire.Acquired, expected: _Expected) -> str | None:
        if isinstance(expected, _Downgrade):
            return self._downgraded(what, message, expected)
        if not isinstance(expected, _Acquire) or expected.phase != "waiting":
            return f"{what}, which is not an ACQUIRE or RECLAIM waiting for its grant"
        if message.name != expected.name:
            return self._wrong_name(what, message.name, self._kind(expected), expected.name)
        lease_max_ms = self._welcome.lease_max_ms
        if not LEASE_MS_MIN <= message.lease_ms <= lease_max_ms:
            return f"{what} with a lease of {message.lease_ms} ms, outside {LEASE_MS_MIN}..{lease_max_ms} ms"
        if not 1 <= message.token <= TOKEN_MAX:
            return f"{what} with token {message.token}"
        if expected.reclaim == "owned" and message.token != expected.token:
            return f"{what} with token {message.token}, but that RECLAIM carried the claim's token {expected.token}"
        misfit = grant_misfit(message, expected)
        if misfit is not None:
            return f"{what} {misfit}"
        expected.phase = "owned"
        return None

    def _error(self, what: str, message: wire.Error, expected: _Expected) -> str | None:
        code = message.code
        code_text = f"{what} with code 0x{code:02x}"
        request_id = message.request_id
        if isinstance(expected, _Heartbeat):
            return f"{code_text}: a HEARTBEAT has no error answer"
        if code == CLAIM_VOID and not (isinstance(expected, _Acquire) and expected.reclaim == "owned"):
            return f"{code_text}: CLAIM_VOID answers an owned RECLAIM only"
        if isinstance(expected, _Resume):
            # RESUMED, or a refusal of the request (INVALID_ARGUMENT: not the first request).
            if code in (LEASE_EXPIRED, NOT_OWNER) or code in _CLOSING_CODES:
                return f"{code_text}: a RESUME is answered RESUMED (or refused)"
            if message.name != "":
                return self._wrong_name(what, message.name, "RESUME", "")
            del self._expected[message.request_id]
            return None
        if isinstance(expected, (_Query, _SetValue, _Watch, _Downgrade)):
            return self._look_error(code_text, message, expected)
        if not self._name_fits(message.name, expected.name):
            kind = "RELEASE" if isinstance(expected, _Release) else self._kind(expected)
            return self._wrong_name(what, message.name, kind, expected.name)
        if isinstance(expected, _Release):
            if code not in (NOT_OWNER,) and code in _KNOWN_CODES:
                return f"{code_text}: a RELEASE is answered RELEASED or NOT_OWNER"
            self._release_answered(request_id, expected.acquire_request_id)
            return None
        if expected.phase == "owned":
            if code != LEASE_EXPIRED:
                return f"{code_text} for {self._a(expected)} that owns its lock"
            del self._expected[request_id]
            return None
        if code in (LEASE_EXPIRED, NOT_OWNER) or code in _CLOSING_CODES:
            return f"{code_text} for {self._a(expected)} still waiting"
        del self._expected[request_id]
        return None

    def _look_error(
        self, code_text: str, message: wire.Error, expected: _Query | _SetValue | _Watch | _Downgrade
    ) -> str | None:
        """An ERROR answering a QUERY, SET_VALUE or WATCH: a refusal of the request (a WATCH's only
        before WATCHING), never an answer that belongs to an ownership or a wait."""
        kind = {_Query: "QUERY", _SetValue: "SET_VALUE", _Watch: "WATCH", _Downgrade: "DOWNGRADE"}[type(expected)]
        if message.code in _NOT_LOOK_ANSWERS or (message.code == NOT_OWNER and kind in ("QUERY", "WATCH")):
            return f"{code_text}: not an answer to a {kind}"
        if isinstance(expected, _Watch):
            if expected.watching:
                return f"{code_text} for a WATCH after its WATCHING"
            if message.name not in ("", expected.pattern) and not self._name_fits(message.name, expected.pattern):
                return self._wrong_name(code_text, message.name, "WATCH", expected.pattern)
        elif not self._name_fits(message.name, expected.name):
            return self._wrong_name(code_text, message.name, kind, expected.name)
        del self._expected[message.request_id]
        return None

    def _release_answered(self, request_id: int, acquire_request_id: int) -> None:
        del self._expected[request_id]
        # After the answer to the RELEASE of an ownership, nothing more comes for its ACQUIRE.
        acquire = self._expected.get(acquire_request_id)
        if isinstance(acquire, _Acquire) and acquire.phase == "owned":
            del self._expected[acquire_request_id]

    @staticmethod
    def _kind(expected: _Acquire) -> str:
        return "ACQUIRE" if expected.reclaim is None else "RECLAIM"

    @staticmethod
    def _a(expected: _Acquire) -> str:
        return "an ACQUIRE" if expected.reclaim is None else "a RECLAIM"

    @staticmethod
    def _name_fits(name: str, asked: str) -> bool:
        """An ERROR echoes the request's name, cut to 1,024 bytes when it was longer (an invalid one)."""
        return name == asked or (name != "" and name == cut_utf8(asked, LOCK_NAME_BYTES_MAX))

    @staticmethod
    def _wrong_name(what: str, name: str, kind: str, asked: str) -> str:
        return f"{what} names lock {quote_untrusted(name)}, but that {kind} was for {quote_untrusted(asked)}"
