/**
 * Issue 9.15: two SIGHUPs in quick succession could finish out of order (the first reload's
 * read of the ACL file finished last) and leave the older rules in force. Reloads are
 * serialized and the last signal wins: a reload asked for while one runs starts after it and
 * reads the file then; several asked for meanwhile are one reload.
 */

import assert from "node:assert/strict";
import { startTestServer } from "../helpers/start_server.ts";
import { writeAcl } from "../helpers/acl_file.ts";

/** A file reader whose reads of the ACL file can be held back, one by one, by the test. */
class GatedReader {
  readonly reads: { path: string; release: () => void }[] = [];
  gate = false;

  read = async (path: string): Promise<Uint8Array> => {
    // The content is taken when the read starts: a slow read returns the file as it was then.
    const bytes = await Deno.readFile(path);
    if (!this.gate) return bytes;
    const released = Promise.withResolvers<void>();
    this.reads.push({ path, release: released.resolve });
    await released.promise;
    return bytes;
  };
}

async function settle(): Promise<void> {
  for (let i = 0; i < 10; i++) await new Promise((resolve) => setTimeout(resolve, 0));
}

Deno.test("two reloads in quick succession: the first one's slow read cannot bring back the old rules; the last signal wins", async () => {
  const dir = await Deno.makeTempDir({ prefix: "lockd-reload-" });
  try {
    const path = await writeAcl(dir, "allow ** old/**\n");
    const reader = new GatedReader();
    await using t = await startTestServer({ aclFile: path }, { readFile: reader.read });
    const service = t.server.context.service;
    assert.equal(service.acl.decide("", "old/x").allowed, true);

    // The first SIGHUP's read is slow: it got the file before the operator's second edit.
    await writeAcl(dir, "allow ** middle/**\n");
    reader.gate = true;
    const first = t.server.reload();
    await settle();
    assert.equal(reader.reads.length, 1, "the first reload is reading");
    // The operator edits again (copy + mv) and sends a second SIGHUP, and a third.
    await writeAcl(dir, "allow ** new/**\nallow ** newer/**\n");
    reader.gate = false;
    const second = t.server.reload();
    const third = t.server.reload();
    await settle();
    // The first read finishes last, with the content it read.
    reader.reads[0].release();
    await Promise.all([first, second, third]);

    assert.equal(service.acl.ruleCount, 2, "the rules of the last file are in force");
    assert.equal(service.acl.decide("", "new/x").allowed, true);
    assert.equal(service.acl.decide("", "middle/x").allowed, false);
    assert.equal(service.acl.decide("", "old/x").allowed, false);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("reloads asked for while one runs become one more reload, which starts after it", async () => {
  const dir = await Deno.makeTempDir({ prefix: "lockd-reload-" });
  try {
    const path = await writeAcl(dir, "allow ** a/**\n");
    const reader = new GatedReader();
    await using t = await startTestServer({ aclFile: path }, { readFile: reader.read });
    reader.gate = true;
    const first = t.server.reload();
    await settle();
    const more = [t.server.reload(), t.server.reload(), t.server.reload()];
    await settle();
    assert.equal(reader.reads.length, 1, "no second read while the first runs");
    await writeAcl(dir, "allow ** b/**\n");
    reader.reads[0].release();
    await first;
    await settle();
    assert.equal(reader.reads.length, 2, "one more reload for the three signals");
    reader.reads[1].release();
    await Promise.all(more);
    assert.equal(t.server.context.service.acl.decide("", "b/x").allowed, true);
    assert.equal(t.server.context.service.acl.decide("", "a/x").allowed, false);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
