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
    "error": wire.Error,
}


def snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def doc_examples() -> list[tuple[str, dict, bytes]]:
    found = []
    pattern = re.compile(r"^Example\b[^`]*?:\s*`(\{[^`]*\})`\s*```hex\n(.*?)```", re.M | re.S)
    for match in pattern.finditer(DOC):
        heading = re.findall(r"^### (\w+) \(0x", DOC[: match.start()], re.M)[-1]
        digits = "".join(re.sub(r"#.*", "", line).replace(" ", "") for line in match.group(2).splitlines())
        found.append((heading, json.loads(match.group(1)), bytes.fromhex(digits)))
    return found


class DocExamples(unittest.TestCase):
    def test_every_hex_example_decodes_and_encodes_to_the_documented_bytes(self) -> None:
        examples = doc_examples()
        self.assertEqual({heading for heading, _, _ in examples}, {
            "HELLO", "WELCOME", "ACQUIRE", "QUEUED", "ACQUIRED", "RELEASE", "RELEASED", "HEARTBEAT",
            "HEARTBEAT_ACK", "ERROR",
        })
        for heading, fields, frame in examples:
            with self.subTest(heading=heading, example=fields):
                kind = fields.pop("type")
                expected = _CLASSES[kind](**{snake(key): value for key, value in fields.items()})
                reader = wire.FrameReader()
                reader.push(frame)
                self.assertEqual(reader.next(), expected)
                self.assertIsNone(reader.next())
                self.assertEqual(wire.encode(expected), frame)

    def test_the_realistic_token_does_not_fit_32_bits(self) -> None:
        tokens = [fields["token"] for _, fields, _ in doc_examples() if fields.get("token")]
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
