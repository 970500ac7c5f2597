/**
 * `lockd admin` and its secrets and preconditions (issue 19, items 5 and 8): `release -token T`
 * sends the precondition `?token=T` (the server answers 409 when the holder changed), and the
 * bearer token goes only to the addresses of `-admin`: a 307 to any other host is refused,
 * naming its target, and that host gets no request at all. Fake admin APIs on 127.0.0.1 port 0
 * record what arrives.
 */
import assert from "node:assert/strict";
import { adminCommand } from "../../src/cli/admin.ts";
import { problemText } from "../helpers/problem.ts";

const TOKEN = "admin-token-of-the-redirect-test";

interface Seen {
  method: string;
  url: string;
  authorization: string | null;
}

/** A fake admin API on a loopback port: records every request, answers with `answer`. */
function fakeAdmin(answer: (request: Request) => Response) {
  const seen: Seen[] = [];
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen: () => {} },
    (request) => {
      seen.push({
        method: request.method,
        url: new URL(request.url).pathname + new URL(request.url).search,
        authorization: request.headers.get("authorization"),
      });
      return answer(request);
    },
  );
  return {
    seen,
    addr: `127.0.0.1:${server.addr.port}`,
    [Symbol.asyncDispose]: () => server.shutdown(),
  };
}

async function withTokenFile<T>(run: (path: string) => Promise<T>): Promise<T> {
  const dir = await Deno.makeTempDir({ prefix: "lockd-admin-token-" });
  try {
    await Deno.writeTextFile(`${dir}/token`, `${TOKEN}\n`);
    return await run(`${dir}/token`);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

async function run(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  let stdout = "";
  let stderr = "";
  const code = await adminCommand(args, {
    stdout: (text) => stdout += text,
    stderr: (text) => stderr += text,
  });
  return { code, stdout, stderr };
}

const RELEASED = {
  name: "jobs/a",
  holder: null,
  waiters: [],
};

Deno.test("lockd admin: a 307 to a host outside -admin is not followed, and the token never reaches it", async () => {
  await using elsewhere = fakeAdmin(() => Response.json(RELEASED));
  await using standby = fakeAdmin((request) =>
    new Response(null, {
      status: 307,
      headers: { location: `http://${elsewhere.addr}${new URL(request.url).pathname}` },
    })
  );
  await withTokenFile(async (tokenFile) => {
    for (const json of [false, true]) {
      const result = await run([
        "-admin",
        standby.addr,
        "-token-file",
        tokenFile,
        ...(json ? ["-json"] : []),
        "release",
        "jobs/a",
      ]);
      assert.equal(result.code, 1, result.stderr);
      assert.equal(result.stdout, "");
      const text = json ? JSON.parse(result.stderr).error : result.stderr;
      assert.equal(
        text,
        `${json ? "" : "lockd admin: "}the admin API at ${standby.addr} redirected (307) to ` +
          `${elsewhere.addr} ("http://${elsewhere.addr}/api/locks/jobs%2Fa/release"), which ` +
          `is not in -admin: not followed, so the admin token is not sent there. If ` +
          `${elsewhere.addr} is the admin API of a node of your cluster, add it: -admin ` +
          `${standby.addr},${elsewhere.addr}${json ? "" : "\n"}`,
      );
    }
  });
  // The standby got the token (it is in -admin); the other host got nothing at all.
  assert.equal(standby.seen.length, 2);
  assert.ok(standby.seen.every((s) => s.authorization === `Bearer ${TOKEN}`));
  assert.deepEqual(elsewhere.seen, []);
});

Deno.test("lockd admin: a 307 to another address of -admin is followed with the token", async () => {
  await using leader = fakeAdmin(() => Response.json(RELEASED));
  await using standby = fakeAdmin((request) =>
    new Response(null, {
      status: 307,
      headers: {
        location: `http://${leader.addr}${new URL(request.url).pathname}${
          new URL(request.url).search
        }`,
      },
    })
  );
  await withTokenFile(async (tokenFile) => {
    const result = await run([
      "-admin",
      `${standby.addr},${leader.addr}`,
      "-token-file",
      tokenFile,
      "release",
      "jobs/a",
      "-token",
      "1767261600000042",
    ]);
    assert.equal(result.code, 0, result.stderr);
    assert.equal(result.stdout, `released lock "jobs/a"; it is now idle\n`);
  });
  assert.deepEqual(leader.seen, [{
    method: "POST",
    url: "/api/locks/jobs%2Fa/release?token=1767261600000042",
    authorization: `Bearer ${TOKEN}`,
  }]);
});

Deno.test("lockd admin: a Location that is not a URL is refused in one line", async () => {
  await using standby = fakeAdmin(() =>
    new Response(null, { status: 307, headers: { location: "http://[::1" } })
  );
  const result = await run(["-admin", standby.addr, "info"]);
  assert.equal(result.code, 1);
  assert.equal(
    result.stderr,
    `lockd admin: the admin API at ${standby.addr} redirected (307) to "http://[::1", which is ` +
      `not a URL; not followed\n`,
  );
  assert.equal(standby.seen.length, 1);
});

Deno.test("lockd admin release -token T sends ?token=T and shows the server's 409 when the holder changed", async () => {
  await using admin = fakeAdmin(() =>
    new Response(
      problemText(
        "holder-changed",
        "Holder changed",
        409,
        'Lock "jobs/a" is held with token 8 now, not 7',
      ),
      { status: 409, headers: { "content-type": "application/problem+json" } },
    )
  );
  const result = await run(["-admin", admin.addr, "release", "-token", "7", "jobs/a"]);
  assert.equal(result.code, 1);
  assert.equal(
    result.stderr,
    `lockd admin: 409 Holder changed: Lock "jobs/a" is held with token 8 now, not 7\n`,
  );
  assert.deepEqual(admin.seen.map((s) => `${s.method} ${s.url}`), [
    "POST /api/locks/jobs%2Fa/release?token=7",
  ]);
  // Without -token: no precondition.
  await run(["-admin", admin.addr, "release", "jobs/a"]);
  assert.equal(admin.seen[1].url, "/api/locks/jobs%2Fa/release");
});

Deno.test("lockd admin -token is for release only, and only a fencing token", async () => {
  for (
    const [args, message] of [
      [["show", "x", "-token", "7"], "-token only applies to the release subcommand"],
      [
        ["release", "x", "-token", "seven"],
        '-token must be a fencing token (a positive integer), got "seven"',
      ],
      [
        ["release", "x", "-token", "0"],
        '-token must be a fencing token (a positive integer), got "0"',
      ],
      [
        ["release", "x", "-token", "7&force=1"],
        '-token must be a fencing token (a positive integer), got "7&force=1"',
      ],
    ] as const
  ) {
    const result = await run(["-admin", "127.0.0.1:1", ...args]);
    assert.equal(result.code, 2, args.join(" "));
    assert.ok(result.stderr.startsWith(`lockd admin: ${message}\n`), result.stderr);
  }
});
