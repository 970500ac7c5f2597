"""The README's examples run, as written, against a real server; its tables stay true."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

import lockd

from helpers import REPO, LockdServer

README = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")


def python_blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", README, re.M | re.S)


class ReadmeExamples(unittest.TestCase):
    server: LockdServer

    @classmethod
    def setUpClass(cls) -> None:
        cls.server = LockdServer().start()

    @classmethod
    def tearDownClass(cls) -> None:
        cls.server.stop()

    def test_every_python_example_runs_against_a_real_server(self) -> None:
        blocks = python_blocks()
        self.assertGreaterEqual(len(blocks), 2)
        # The examples import the same lockd these tests import (the installed copy in CI).
        package_root = str(Path(lockd.__file__).resolve().parents[1])
        for i, block in enumerate(blocks):
            with self.subTest(block=i), tempfile.TemporaryDirectory() as tmp:
                script = Path(tmp) / "example.py"
                script.write_text(block, encoding="utf-8")
                result = subprocess.run(
                    [sys.executable, str(script)],
                    cwd=tmp,
                    env={**os.environ, "LOCKD_ADDR": self.server.addr, "PYTHONPATH": package_root},
                    capture_output=True,
                    text=True,
                    timeout=60,
                )
                self.assertEqual(result.returncode, 0, result.stderr)
                self.assertRegex(result.stdout, r"token \d{15,}")

    def test_the_default_address_is_where_deno_task_start_listens(self) -> None:
        start = json.loads((REPO / "deno.json").read_text())["tasks"]["start"]
        listen = re.search(r"-listen (\S+)", start)
        assert listen is not None
        for block in python_blocks():
            self.assertIn(f'"LOCKD_ADDR", "{listen.group(1)}"', block)

    def test_the_error_table_matches_the_error_classes(self) -> None:
        rows = re.findall(r"^\| `(\w+Error)` +\| (0x[0-9a-f]{2}) \| (yes|no) ", README, re.M)
        self.assertGreaterEqual(len(rows), 8)
        for name, code, retryable in rows:
            cls = getattr(lockd, name)
            self.assertEqual((cls.code, cls.retryable), (int(code, 16), retryable == "yes"), name)


class InstalledPackage(unittest.TestCase):
    @unittest.skipUnless(os.environ.get("LOCKD_EXPECT_INSTALLED"), "only when CI installed the package")
    def test_the_tests_run_against_the_installed_package(self) -> None:
        self.assertIn("site-packages", lockd.__file__)
        self.assertNotIn(str(REPO), str(Path(lockd.__file__).resolve()))

    @unittest.skipUnless(os.environ.get("LOCKD_EXPECT_INSTALLED"), "only when CI installed the package")
    def test_the_installed_distribution_is_apache_2_0_and_ships_the_license(self) -> None:
        from importlib import metadata

        dist = metadata.distribution("lockd-client")
        self.assertEqual(dist.metadata["License"], "Apache-2.0")
        self.assertIn("License :: OSI Approved :: Apache Software License", dist.metadata.get_all("Classifier"))
        shipped = [f for f in dist.files or [] if f.name == "LICENSE"]
        self.assertEqual(len(shipped), 1, dist.files)
        self.assertEqual(shipped[0].read_text(), (REPO / "LICENSE").read_text())


if __name__ == "__main__":
    unittest.main()
