"""grant_misfit's write-generation rule (lockd/_checks.py), the twin of the TypeScript client's
tests/client/grant_misfit_test.ts: a shared grant's generation is below its token, but an owned
RECLAIM's answer may carry the token itself (a downgraded owner's generation is its own token)."""

from __future__ import annotations

import unittest

from lockd import _codec as wire
from lockd._checks import _Acquire, grant_misfit


def shared(token: int, generation: int) -> wire.Acquired:
    return wire.Acquired(1, token, 1_000, "doc", mode="shared", limit=1, slot=0, write_generation=generation)


class GrantMisfit(unittest.TestCase):

    def test_an_owned_reclaims_answer_may_carry_the_token_as_its_write_generation(self) -> None:
        acquire = _Acquire("doc", mode="shared", limit=0)
        reclaim = _Acquire("doc", reclaim="owned", token=9, mode="shared", limit=1, slot=0)
        self.assertIsNone(grant_misfit(shared(9, 7), acquire))
        self.assertIn("not below its own token 9", grant_misfit(shared(9, 9), acquire) or "")
        self.assertIsNone(grant_misfit(shared(9, 9), reclaim), "a downgraded owner's reclaim")
        self.assertIn("not below its own token 9", grant_misfit(shared(9, 10), reclaim) or "")


if __name__ == "__main__":
    unittest.main()
