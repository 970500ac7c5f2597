// Starts a real lockd server for the Node and Bun runs of the contract: `deno run main.ts
// serve` on port 0, with the bound addresses read from its JSON log. Environment:
//   LOCKD_DENO   the deno binary (default "deno")
//   LOCKD_REPO   the lockd checkout (main.ts, tests/fixtures/tls/)

import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import process from "node:process";
import { createInterface } from "node:readline";

const DENO = process.env.LOCKD_DENO ?? "deno";
const REPO = process.env.LOCKD_REPO;
if (!REPO) throw new Error("set LOCKD_REPO to the lockd checkout");
const FIXTURES = join(REPO, "tests", "fixtures", "tls");

/** PEM text of a test certificate or key (tests/fixtures/tls). */
export function fixture(name) {
  return readFileSync(join(FIXTURES, name), "utf8");
}

/**
 * Starts `lockd serve` on 127.0.0.1 port 0 with the admin API; `mtls` adds TLS with client
 * certificates. Resolves once it logged "lockd started"; `close()` sends SIGTERM and waits.
 */
export function startServer({ mtls = false } = {}) {
  const args = [
    "run",
    "--allow-all",
    join(REPO, "main.ts"),
    "serve",
    "-listen",
    "127.0.0.1:0",
    "-admin-listen",
    "127.0.0.1:0",
    "-log-format",
    "json",
    // No lockd-data/ left in the working directory.
    "-data-dir",
    "",
  ];
  if (mtls) {
    args.push(
      "-tls-cert",
      join(FIXTURES, "server.pem"),
      "-tls-key",
      join(FIXTURES, "server-key.pem"),
      "-tls-client-ca",
      join(FIXTURES, "ca.pem"),
    );
  }
  const child = spawn(DENO, args, { stdio: ["ignore", "ignore", "pipe"] });
  const exited = new Promise((resolve) => child.once("exit", resolve));
  const log = [];
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`lockd did not start within 30 s:\n${log.join("\n")}`));
    }, 30_000);
    child.once("error", (error) => {
      clearTimeout(timer);
      reject(error);
    });
    child.once("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`lockd exited with ${code} before it started:\n${log.join("\n")}`));
    });
    createInterface({ input: child.stderr }).on("line", (line) => {
      if (log.length < 100) log.push(line);
      let entry;
      try {
        entry = JSON.parse(line);
      } catch {
        return;
      }
      if (entry.message !== "lockd started") return;
      clearTimeout(timer);
      resolve({
        addr: entry.listen,
        adminAddr: entry.admin_listen,
        async close() {
          child.kill("SIGTERM");
          await exited;
        },
      });
    });
  });
}
