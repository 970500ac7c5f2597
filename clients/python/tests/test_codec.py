"""The Python codec against docs/protocol.md: every hex example, the error code table, the framing rules."""

from __future__ import annotations

import json
import re
import unittest

import lockd
from lockd import _codec as wire

from helpers import REPO

DOC = (REPO / "docs" / "protocol.md").read_text(encoding="utf-8")

# JSON field names of the doc's examples → (class, attribute names).
_CLASSES = {
    "hello": wire.Hello,
    "welcome": wire.Welcome,
    "acquire": wire.Acquire,
    "queued": wire.Queued,
    "acquired": wire.Acquired,
    "release": wire.Release,
    "released": wire.Released,
    "heartbeat": wire.Heartbeat,
    "heartbeat_ack": wire.HeartbeatAck,
    "resume": wire.Resume,
    "resumed": wire.Resumed,
    "reclaim": wire.Reclaim,
    "goodbye": wire.Goodbye,
    "set_value": wire.SetValue,
    "value_set": wire.ValueSet,
    "query": wire.Query,
    "lock_state": wire.LockState,
    "watch": wire.Watch,
    "watching": wire.Watching,
    "unwatch": wire.Unwatch,
    "watch_ended": wire.WatchEnded,
    "downgrade": wire.Downgrade,
    "error": wire.Error,
}
_BYTES_FIELDS = {"ticket", "value"}  # b16 and bin: hex strings in the doc's JSON


def snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def from_doc_json(fields: dict) -> wire.Message:
    """The doc's JSON of a message as a codec dataclass (hex strings → bytes, holders → records)."""
    fields = dict(fields)
    cls = _CLASSES[fields.pop("type")]
    values = {}
    for key, value in fields.items():
        if key in _BYTES_FIELDS:
            value = bytes.fromhex(value)
            if key == "ticket" and not any(value):
                value = wire.EMPTY_TICKET
        elif key == "holders":
            value = tuple(from_doc_holder(holder) for holder in value)
        values[snake(key)] = value
    return cls(**values)


def from_doc_holder(fields: dict) -> wire.LockStateHolder:
    return wire.LockStateHolder(
        **{snake(k): bytes.fromhex(v) if k in _BYTES_FIELDS else v for k, v in fields.items()}
    )


def doc_examples() -> list[tuple[str, int, dict, bytes]]:
    """(message name, version, JSON, frame) of every hex example (docs/protocol.md)."""
    found = []
    pattern = re.compile(r"^Example\b[^`]*?:\s*`(\{[^`]*\})`\s*```hex\n(.*?)```", re.M | re.S)
    heading_pattern = re.compile(r"^### (\w+) \(0x([0-9a-f]{2})[^)\n]*\)(, version 2)?$", re.M)
    for match in pattern.finditer(DOC):
        heading = list(heading_pattern.finditer(DOC[: match.start()]))[-1]
        type_byte = int(heading.group(2), 16)
        version = 2 if heading.group(3) or wire.RESUME <= type_byte <= wire.DOWNGRADE else 1
        digits = "".join(re.sub(r"#.*", "", line).replace(" ", "") for line in match.group(2).splitlines())
        found.append((heading.group(1), version, json.loads(match.group(1)), bytes.fromhex(digits)))
    return found


class DocExamples(unittest.TestCase):
    def test_every_hex_example_decodes_and_encodes_to_the_documented_bytes(self) -> None:
        examples = doc_examples()
        self.assertEqual({heading for heading, _, _, _ in examples}, {
            "HELLO", "WELCOME", "ACQUIRE", "QUEUED", "ACQUIRED", "RELEASE", "RELEASED", "HEARTBEAT",
            "HEARTBEAT_ACK", "ERROR", "RESUME", "RESUMED", "RECLAIM", "GOODBYE", "SET_VALUE",
            "VALUE_SET", "QUERY", "LOCK_STATE", "WATCH", "WATCHING", "UNWATCH", "WATCH_ENDED",
            "DOWNGRADE",
        })
        self.assertEqual(
            sorted(h for h, version, _, _ in examples if version == 2 and h in {"WELCOME", "ACQUIRE", "QUEUED", "ACQUIRED"}),
            ["ACQUIRE", "ACQUIRE", "ACQUIRED", "ACQUIRED", "QUEUED", "WELCOME"],
        )
        for heading, version, fields, frame in examples:
            with self.subTest(heading=heading, version=version, example=fields):
                expected = from_doc_json(fields)
                reader = wire.FrameReader()
                reader.version = version
                reader.push(frame)
                self.assertEqual(reader.next(), expected)
                self.assertIsNone(reader.next())
                self.assertEqual(wire.encode(expected, version), frame)

    def test_the_realistic_token_does_not_fit_32_bits(self) -> None:
        tokens = [fields["token"] for _, _, fields, _ in doc_examples() if fields.get("token")]
        self.assertTrue(tokens)
        for token in tokens:
            self.assertGreater(token, 2**32)

    def test_the_error_classes_match_the_doc_code_table(self) -> None:
        rows = {}
        for line in DOC.splitlines():
            cells = [cell.strip() for cell in line.split("|")[1:-1]]
            if len(cells) == 5 and re.fullmatch(r"0x[0-9a-f]{2}", cells[0]):
                rows[int(cells[0], 16)] = (cells[1], cells[2] == "yes")
        self.assertEqual(set(rows), set(lockd.ERROR_CLASSES))
        for code, cls in lockd.ERROR_CLASSES.items():
            with self.subTest(code=code):
                self.assertEqual((cls.code_name, cls.retryable), rows[code])
                error = lockd.LockdError.from_wire(code, "x", "m")
                self.assertIsInstance(error, cls)
                self.assertEqual((error.code, error.lock_name), (code, "x"))

    def test_the_lost_reasons_are_the_doc_ones(self) -> None:
        section = DOC[DOC.index("### Lost reasons") :]
        section = section[: section.index("\n### ", 5)]
        self.assertEqual(set(re.findall(r"^\| `(\w+)`", section, re.M)), set(lockd.LOST_REASONS))


class Framing(unittest.TestCase):
    def stream(self) -> tuple[bytes, list[wire.Message]]:
        messages: list[wire.Message] = [
            wire.Welcome(1, "0.1.0", 2**53 - 1, 30_000, 15_000, 300_000),
            wire.Acquired(7, 1795426718504001, 10_000, "verrou/é/锁/🔒"),
            wire.Error(0, 2, "jobs/nightly", "Closed"),
            wire.HeartbeatAck(9, 1),
        ]
        return b"".join(wire.encode(m) for m in messages), messages

    def test_a_stream_split_at_any_byte_decodes_the_same(self) -> None:
        data, messages = self.stream()
        for at in range(len(data) + 1):
            reader = wire.FrameReader()
            got = []
            for chunk in (data[:at], data[at:]):
                reader.push(chunk)
                while (message := reader.next()) is not None:
                    got.append(message)
            self.assertEqual(got, messages, f"split at {at}")

    def test_malformed_input_is_refused(self) -> None:
        cases = {
            "length 0": bytes([0, 0, 0, 0]),
            "above the limit": bytes([0, 1, 0, 1]),
            "unknown type": bytes([0, 0, 0, 1, 0x03]),
            "truncated field": bytes([0, 0, 0, 3, 0x15, 0, 0]),
            "trailing byte": bytes([0, 0, 0, 6, 0x15, 0, 0, 0, 1, 0xFF]),
            "invalid UTF-8": bytes([0, 0, 0, 9, 0x14, 0, 0, 0, 1, 0, 2, 0xFF, 0xFE]),
            "overlong UTF-8": bytes([0, 0, 0, 9, 0x14, 0, 0, 0, 1, 0, 2, 0xC0, 0xAF]),
            "encoded surrogate": bytes([0, 0, 0, 10, 0x14, 0, 0, 0, 1, 0, 3, 0xED, 0xA0, 0x80]),
            "u64 of 2^53": bytes([0, 0, 0, 16, 0x13, 0, 0, 0, 1, 0, 0x20, 0, 0, 0, 0, 0, 0, 0, 1, 0x61]),
        }
        for what, data in cases.items():
            with self.subTest(what):
                reader = wire.FrameReader()
                reader.push(data)
                with self.assertRaises(wire.MalformedFrame):
                    reader.next()

    def test_the_largest_u64_and_a_bom_are_kept(self) -> None:
        message = wire.Release(1, 2**53 - 1, "\ufeffbom")
        reader = wire.FrameReader()
        reader.push(wire.encode(message))
        self.assertEqual(reader.next(), message)

    def test_the_encoder_refuses_out_of_range_fields(self) -> None:
        for message in (
            wire.Heartbeat(2**32),
            wire.Heartbeat(-1),
            wire.Release(1, 2**53, "a"),
            wire.Released(1, "é" * 40_000),
        ):
            with self.subTest(message=repr(message)[:60]), self.assertRaises(ValueError):
                wire.encode(message)
        with self.assertRaises(UnicodeEncodeError):
            wire.encode(wire.Released(1, "a\ud800"))


class Version2(unittest.TestCase):
    TICKET = bytes(range(0xA0, 0xB0))

    def examples(self) -> list[wire.Message]:
        holder = wire.LockStateHolder(1795426718504001, 12_000, 10_000, "shared", 0, "CN=r", "r@h:1", b"10.0.0.7")
        return [
            wire.Welcome(2, "0.2.0", 42, 30_000, 15_000, 300_000, 7, 8_000, 1_024),
            wire.Acquire(7, 10_000, wire.WAIT_FOREVER, "reports/daily", "shared", 0, b"\x00\xff\xfe"),
            wire.Queued(7, 1, "jobs/nightly", 7, 2**40 + 3, self.TICKET),
            wire.Acquired(7, 1795426718504001, 10_000, "jobs/render", self.TICKET, "exclusive", 8, 5, 0),
            wire.Resume(1, 6, 2**40 + 1, 0xFFFF),
            wire.Resumed(1, "reclaim", 7_250),
            wire.Resumed(1, 9, 0),
            wire.Reclaim(2, "owned", 1795426718504001, 0, 0, 10_000, 0, self.TICKET, "exclusive", 8, 5, "jobs/render", b""),
            wire.Reclaim(3, 0, 0, 6, 12, 0, wire.WAIT_FOREVER, b"", 2, 0, 0, "é/锁", b""),
            wire.Goodbye(4),
            wire.SetValue(5, 1795426718504001, "service/leader", b"10.0.0.8:8080"),
            wire.ValueSet(5, "service/leader"),
            wire.Query(6, "service/leader"),
            wire.LockState(6, "state", "none", "none", 0, 0, 0, "x", ()),
            wire.LockState(6, "ended", "io_timeout", "shared", 1, 3, 2, "r", (holder, holder)),
            wire.LockState(6, 5, 6, 4, 0, 0, 0, "x", ()),
            wire.Watch(7, "service/**"),
            wire.Watching(7, 3),
            wire.Unwatch(7),
            wire.WatchEnded(7, "too_many_locks"),
            wire.WatchEnded(7, 0xFF),
            wire.Downgrade(14, 1795426718504007, "reports/daily"),
            wire.Heartbeat(9),
            wire.Error(12, 0x12, "jobs/nightly", "void"),
        ]

    def test_every_message_round_trips_in_version_2_split_at_any_byte(self) -> None:
        messages = [wire.Hello(2, "p")] + self.examples()
        data = b"".join(wire.encode(m, 2) for m in messages)
        for at in range(0, len(data) + 1, 7):
            reader = wire.FrameReader()  # the HELLO fixes version 2 for what follows
            got = []
            for chunk in (data[:at], data[at:]):
                reader.push(chunk)
                while (message := reader.next()) is not None:
                    got.append(message)
            self.assertEqual(got, messages, f"split at {at}")
            self.assertEqual(reader.version, 2)

    def test_version_1_frames_are_unchanged_and_decode_with_neutral_fields(self) -> None:
        acquire = wire.Acquire(7, 10_000, 5_000, "jobs/nightly")
        self.assertEqual(wire.encode(acquire).hex(), "0000001b10000000070000271000001388000c6a6f62732f6e696768746c79")
        self.assertEqual(wire.encode(wire.Queued(7, 1, "a", ticket=bytes(16))), wire.encode(wire.Queued(7, 1, "a")))
        reader = wire.FrameReader()
        reader.push(wire.encode(wire.Acquired(7, 5, 50, "a")))
        acquired = reader.next()
        self.assertEqual(
            (acquired.ticket, acquired.mode, acquired.limit, acquired.slot, acquired.write_generation),
            (b"", "exclusive", 1, 0, 0),
        )
        self.assertEqual(reader.version, 1)

    def test_a_version_1_session_cannot_carry_version_2(self) -> None:
        for message in (
            wire.Acquire(1, 0, 0, "a", mode="shared"),
            wire.Acquire(1, 0, 0, "a", limit=1),
            wire.Acquire(1, 0, 0, "a", value=b"\x00"),
            wire.Queued(1, 1, "a", ticket=self.TICKET),
            wire.Acquired(1, 1, 50, "a", slot=1),
            wire.Welcome(1, "", 1, 1, 1, 1, term=3),
            wire.Query(1, "a"),
            wire.Goodbye(1),
        ):
            with self.subTest(message=message), self.assertRaises(ValueError):
                wire.encode(message, 1)
        for message in self.examples():
            if type(message) in (wire.Resume, wire.Query, wire.Goodbye, wire.LockState):
                data = wire.encode(message, 2)
                with self.subTest(message=message), self.assertRaises(wire.MalformedFrame):
                    wire.decode_body(data[4], data[5:], 1)

    def test_the_encoder_refuses_bad_version_2_fields(self) -> None:
        for message in (
            wire.Queued(1, 1, "a", ticket=bytes(15)),
            wire.SetValue(1, 1, "a", bytes(0x1_0000)),
            wire.Acquire(1, 0, 0, "a", mode="upgrade"),
            wire.Acquire(1, 0, 0, "a", mode=1),
            wire.WatchEnded(1, 256),
        ):
            with self.subTest(message=repr(message)[:60]), self.assertRaises(ValueError):
                wire.encode(message, 2)
        with self.assertRaises(ValueError):
            wire.encode(wire.Heartbeat(1), 3)

    def test_malformed_version_2_frames_are_refused(self) -> None:
        ticket_cut = bytes([0x11, 0, 0, 0, 1, 0, 0, 0, 1]) + bytes(16) + bytes([1, 2, 3])
        cases = {
            "unknown type after the last": (2, bytes([0x23, 0, 0, 0, 1])),
            "ticket cut short": (2, ticket_cut),
            "value longer than the frame": (2, bytes([0x1B, 0, 0, 0, 1]) + bytes(8) + bytes([0, 1, 0x61, 0, 5, 1, 2])),
            "holder count past the frame": (2, bytes([0x1E, 0, 0, 0, 1, 0, 0, 1]) + bytes(12) + bytes([0, 1, 0x61, 0, 1])),
            "WELCOME version 2 without its tail": (1, wire.encode(wire.Welcome(1, "", 1, 1, 1, 1))[4:5] + b"\x00\x02" + wire.encode(wire.Welcome(1, "", 1, 1, 1, 1))[7:]),
        }
        for what, (version, frame) in cases.items():
            with self.subTest(what), self.assertRaises(wire.MalformedFrame):
                wire.decode_body(frame[0], frame[1:], version)

    def test_only_the_first_hello_or_welcome_fixes_the_version(self) -> None:
        reader = wire.FrameReader()
        reader.push(wire.encode(wire.Hello(9, "")) + wire.encode(wire.Hello(2, "")))
        reader.next()
        reader.next()
        self.assertEqual(reader.version, 1)


class Arithmetic(unittest.TestCase):
    def test_full_jitter_back_off_stays_within_its_window(self) -> None:
        self.assertEqual(lockd.backoff_delay_ms(0, lambda: 0.999999) // 1, 49)
        for attempt, cap in [(0, 50), (1, 100), (3, 400), (6, 3200), (7, 5000), (40, 5000)]:
            self.assertEqual(lockd.backoff_delay_ms(attempt, lambda: 0.0), 0)
            self.assertAlmostEqual(lockd.backoff_delay_ms(attempt, lambda: 1.0), cap)
        import random

        rng = random.Random(7)
        delays = [lockd.backoff_delay_ms(5, rng.random) for _ in range(1000)]
        self.assertTrue(all(0 <= d <= 1600 for d in delays))
        # Full jitter spreads a crowd over the whole window, not near its top.
        self.assertLess(min(delays), 100)
        self.assertGreater(max(delays), 1500)

    def test_the_lease_margin_follows_the_doc_formula(self) -> None:
        for lease, margin in [(50, 12.5), (100, 25), (200, 50), (500, 50), (1000, 100), (15_000, 1500)]:
            self.assertEqual(lockd.lease_margin_ms(lease), margin)

    def test_the_local_deadline_takes_the_shorter_of_lease_and_io_timeout(self) -> None:
        self.assertEqual(lockd.local_deadline_ms(1_000, 15_000, 30_000), 1_000 + 15_000 - 1_500)
        self.assertEqual(lockd.local_deadline_ms(1_000, 60_000, 30_000), 1_000 + 30_000 - 3_000)
        self.assertEqual(lockd.local_deadline_ms(0, 50, 30_000), 50 - 12.5)

    def test_addresses_parse_like_the_server_prints_them(self) -> None:
        self.assertEqual(lockd.parse_addr("127.0.0.1:7400"), ("127.0.0.1", 7400))
        self.assertEqual(lockd.parse_addr("[::1]:7400"), ("::1", 7400))
        self.assertEqual(lockd.parse_addr("lockd.internal:1"), ("lockd.internal", 1))
        for bad in ("7400", "::1:7400", "host:", "host:0", "host:70000", "[::1]7400"):
            with self.subTest(bad), self.assertRaises(ValueError):
                lockd.parse_addr(bad)


if __name__ == "__main__":
    unittest.main()
