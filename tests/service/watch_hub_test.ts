/**
 * The watch hub (src/service/watch_hub.ts) on its own, over a real engine and a port whose writes
 * complete only when the test says so (the test flushes, as the service's pacer would): coalescing (one waiting event per lock and watch, the
 * latest state), batches of at most WATCH_BATCH_BYTES_MAX, the bound on matched locks (at WATCH
 * and as a glob grows), silent ACL filtering of a glob, and a session's end. Also the LOCK_STATE
 * builder's frame bound.
 */

import assert from "node:assert/strict";
import type { Peer } from "../../src/core/types.ts";
import { WATCH_BATCH_BYTES_MAX } from "../../src/limits.ts";
import { lockChangeOf, lockStateOf } from "../../src/service/lock_state_frame.ts";
import type { SessionPort } from "../../src/service/session_registry.ts";
import { WatchHub } from "../../src/service/watch_hub.ts";
import type { ServerMessage } from "../../src/wire/messages.ts";
import { serviceHarness } from "./service_harness.ts";

/** A port whose observed frames count as written only when `write()` is called. */
class SlowPort implements SessionPort {
  readonly version = 2;
  readonly frames: ServerMessage[] = [];
  #written: (() => void)[] = [];

  send(message: ServerMessage): void {
    this.frames.push(message);
  }

  sendObserved(message: ServerMessage, written: () => void): void {
    this.frames.push(message);
    this.#written.push(written);
  }

  hold(): (message: ServerMessage | null) => void {
    return (message) => message && this.frames.push(message);
  }

  terminate(): void {}

  /** The connection takes what was sent. */
  write(): void {
    for (const written of this.#written.splice(0)) written();
  }

  get waiting(): number {
    return this.#written.length;
  }

  take(): string[] {
    return this.frames.splice(0).map((frame) =>
      frame.type === "lock_state"
        ? `${frame.requestId}:${frame.name}:${frame.event}:${frame.owners}`
        : frame.type === "watching"
        ? `${frame.requestId}:watching:${frame.locks}`
        : frame.type === "watch_ended"
        ? `${frame.requestId}:ended:${frame.reason}`
        : frame.type
    );
  }
}

function setup(options: { locksPerWatchMax?: number; denied?: string } = {}) {
  const h = serviceHarness();
  const port = new SlowPort();
  const watcher: Peer = { sessionId: 999, identity: "", remoteAddr: "w", clientName: "" };
  const hub = new WatchHub({
    view: h.engine.view,
    port: (sessionId) => sessionId === watcher.sessionId ? port : undefined,
    stateOf: (name, requestId, event, reason) =>
      lockStateOf(h.engine.view, name, 0, 64 * 1024, requestId, event, reason),
    mayRead: (_peer, name) => options.denied === undefined || !name.startsWith(options.denied),
    locksPerWatchMax: options.locksPerWatchMax,
  });
  const holder = h.open("", "", 2);
  return { h, hub, port, watcher, holder };
}

Deno.test("watch hub: changes while a batch is on its way wait as one per lock, showing the latest state", async () => {
  const { h, hub, port, watcher, holder } = setup();
  h.acquire(holder, 1, "co/a");
  h.acquire(holder, 2, "co/b");
  assert.equal(hub.watch(watcher, 7, "co/*"), null);
  hub.flush();
  assert.deepEqual(port.take(), ["7:co/a:state:1", "7:co/b:state:1", "7:watching:2"]);
  port.write();
  hub.changed({ name: "co/a", event: "value", reason: "none" });
  hub.flush();
  assert.deepEqual(port.take(), ["7:co/a:value:1"], "sent at once: nothing on its way");
  hub.changed({ name: "co/a", event: "queue", reason: "none" });
  hub.flush();
  hub.changed({ name: "co/b", event: "value", reason: "none" });
  hub.flush();
  hub.changed({ name: "co/a", event: "ended", reason: "graceful" });
  hub.flush();
  assert.deepEqual(port.take(), [], "the first is not written yet: the rest wait");
  port.write();
  assert.deepEqual(port.take(), ["7:co/a:ended:1", "7:co/b:value:1"], "one per lock, the latest");
  port.write();
  assert.equal(port.waiting, 0);
  await using _ = h;
});

Deno.test("watch hub: a snapshot larger than one batch goes out in batches as they are written", async () => {
  const { h, hub, port, watcher } = setup();
  const value = new Uint8Array(1000);
  const clients = Array.from({ length: 100 }, () => h.open("", "", 2));
  clients.forEach((c, i) => h.acquire(c, 1, `big/${String(i).padStart(3, "0")}`, { value }));
  assert.equal(hub.watch(watcher, 3, "big/*"), null);
  hub.flush();
  let batches = 0;
  let states = 0;
  for (;;) {
    const frames = port.take();
    states += frames.filter((f) => f.includes(":state:")).length;
    if (frames.at(-1) === "3:watching:100") break;
    assert.ok(frames.length > 0 && frames.length * 1000 <= WATCH_BATCH_BYTES_MAX + 2100);
    batches++;
    port.write();
  }
  assert.equal(states, 100);
  assert.ok(batches >= 1, "more than one batch");
  await using _ = h;
});

Deno.test("watch hub: a glob over the bound ends at once, or when it comes to match too many; unreadable locks are left out", async () => {
  const { h, hub, port, watcher, holder } = setup({ locksPerWatchMax: 2, denied: "m/secret" });
  h.acquire(holder, 1, "m/a");
  h.acquire(holder, 2, "m/secret1");
  h.acquire(holder, 3, "m/secret2");
  assert.equal(hub.watch(watcher, 1, "m/*"), null, "two matches, but only one readable");
  hub.flush();
  assert.deepEqual(port.take(), ["1:m/a:state:1", "1:watching:1"]);
  port.write();
  h.acquire(holder, 4, "m/b");
  hub.changed({ name: "m/b", event: "granted", reason: "none" });
  hub.flush();
  hub.changed({ name: "m/secret1", event: "value", reason: "none" });
  hub.flush();
  assert.deepEqual(port.take(), ["1:m/b:granted:1"]);
  port.write();
  h.acquire(holder, 5, "m/c");
  hub.changed({ name: "m/c", event: "granted", reason: "none" });
  hub.flush();
  assert.deepEqual(port.take(), ["1:ended:too_many_locks"]);
  hub.changed({ name: "m/a", event: "value", reason: "none" });
  hub.flush();
  assert.deepEqual(port.take(), [], "the watch is over");
  assert.equal(hub.watch(watcher, 2, "m/*"), null);
  hub.flush();
  assert.deepEqual(port.take(), ["2:ended:too_many_locks"], "three readable now: over at once");
  assert.equal(hub.size, 0);
  await using _ = h;
});

Deno.test("watch hub: a session's end drops its watches; UNWATCH answers WATCH_ENDED even for no watch", async () => {
  const { h, hub, port, watcher } = setup();
  assert.equal(hub.watch(watcher, 1, "x/one"), null);
  hub.flush();
  assert.equal(hub.watch(watcher, 2, "x/*"), null);
  hub.flush();
  assert.equal(hub.size, 2);
  hub.unwatch(watcher, 1);
  hub.unwatch(watcher, 9);
  assert.deepEqual(port.take().slice(-2), ["1:ended:unwatched", "9:ended:unwatched"]);
  hub.sessionEnded(watcher.sessionId);
  assert.equal(hub.size, 0);
  await using _ = h;
});

Deno.test("engine events map onto watch events; a LOCK_STATE lists the holders that fit its frame", async () => {
  const { h, holder } = setup();
  const others = [h.open("", "", 2), h.open("", "", 2), h.open("", "", 2)];
  const value = new Uint8Array(300);
  h.acquire(holder, 1, "sem", { limit: 4, value });
  others.forEach((c, i) => h.acquire(c, 1 + i, "sem", { limit: 4, value }));
  const all = lockStateOf(h.engine.view, "sem", 0, 64 * 1024, 1, "state", "none");
  assert.deepEqual([all.owners, all.holders.length, all.kind, all.limit], [4, 4, "semaphore", 4]);
  const cut = lockStateOf(h.engine.view, "sem", 0, 800, 1, "state", "none");
  assert.deepEqual([cut.owners, cut.holders.length], [4, 2], "owners counts all, holders fit");
  const token = h.engine.view.holderOf("sem")!.token;
  const events = h.engine.release(h.service.now(), {
    sessionId: holder.peer.sessionId,
    requestId: 9,
    name: "sem",
    token,
  });
  assert.deepEqual(events.map(lockChangeOf), [{ name: "sem", event: "ended", reason: "graceful" }]);
  await using _ = h;
});

Deno.test("watch hub: changes wait as one per lock until the flush hands them over; a watch opened after a change does not hear of it", async () => {
  const { h, hub, port, watcher, holder } = setup();
  h.acquire(holder, 1, "co/a");
  assert.equal(hub.watch(watcher, 7, "co/*"), null);
  hub.flush();
  assert.deepEqual(port.take(), ["7:co/a:state:1", "7:watching:1"]);
  port.write();
  hub.changed({ name: "co/a", event: "queue", reason: "none" });
  hub.changed({ name: "co/a", event: "value", reason: "none" });
  // A lock that came and went before the next WATCH: its change is the first watch's alone.
  hub.changed({ name: "co/gone", event: "ended", reason: "graceful" });
  assert.equal(hub.pending, true, "noted, not sent");
  assert.deepEqual(port.take(), []);
  assert.equal(hub.watch(watcher, 8, "co/*"), null);
  hub.flush();
  assert.deepEqual(
    port.take(),
    ["7:co/a:value:1", "7:co/gone:ended:0", "8:co/a:state:1", "8:watching:1"],
    "the older watch hears the latest change of each lock; the new one only its snapshot",
  );
  assert.equal(hub.pending, false);
  port.write();
  await using _ = h;
});

Deno.test("watch hub: a round is handed out a few sessions at a time; a change during it goes to the next round", async () => {
  const h = serviceHarness();
  const ports = [new SlowPort(), new SlowPort(), new SlowPort()];
  const peers: Peer[] = ports.map((_, i) => ({
    sessionId: 900 + i,
    identity: "",
    remoteAddr: "w",
    clientName: "",
  }));
  const hub = new WatchHub({
    view: h.engine.view,
    port: (sessionId) => ports[sessionId - 900],
    stateOf: (name, requestId, event, reason) =>
      lockStateOf(h.engine.view, name, 0, 64 * 1024, requestId, event, reason),
    mayRead: () => true,
  });
  const holder = h.open("", "", 2);
  h.acquire(holder, 1, "one");
  peers.forEach((peer, i) => assert.equal(hub.watch(peer, 10 + i, "one"), null));
  hub.flush();
  for (const port of ports) {
    assert.equal(port.take().length, 2, "snapshot and WATCHING");
    port.write();
  }
  hub.changed({ name: "one", event: "value", reason: "none" });
  assert.equal(hub.pending, true);
  hub.flush(2);
  assert.equal(hub.midRound, true);
  assert.deepEqual(ports.map((port) => port.take()), [["10:one:value:1"], ["11:one:value:1"], []]);
  hub.changed({ name: "one", event: "ended", reason: "graceful" });
  hub.flush(2);
  assert.equal(hub.midRound, false, "the round is over");
  assert.deepEqual(ports.map((port) => port.take()), [[], [], ["12:one:value:1"]]);
  assert.equal(hub.pending, true, "the change during the round waits for the next");
  ports.forEach((port) => port.write());
  hub.flush();
  assert.deepEqual(
    ports.map((port) => port.take()),
    [["10:one:ended:1"], ["11:one:ended:1"], ["12:one:ended:1"]],
  );
  assert.equal(hub.pending, false);
  await using _ = h;
});
