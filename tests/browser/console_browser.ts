/**
 * The operator console in a real browser against a real server (issue 15):
 * headless Chromium from Debian (`apt-get install chromium`) driven by
 * playwright-core, `lockd serve` as a subprocess with an admin token, and
 * clients of the TypeScript library.
 *
 * Not part of `deno task test` (it needs Chromium): `.ci/run` installs
 * Chromium and runs it with
 *
 *   deno test -A tests/browser/console_browser.ts
 *
 * Screenshots go to $LOCKD_SCREENSHOT_DIR (else a new temporary directory);
 * the path is printed. With $LOCKD_DOCS_SCREENSHOT set, the overview is also
 * written there (docs/console.png is made this way).
 */

import assert from "node:assert/strict";
import { chromium } from "playwright-core";
import { spawnLockd } from "../../bench/lockd_proc.ts";
import { connect, type Lock, LockLostError } from "../../mod.ts";
import { startServer } from "../../src/server/start.ts";
import { MemorySink } from "../helpers/memory_sink.ts";
import { FramePort } from "../service/service_harness.ts";
import { problemText } from "../helpers/problem.ts";
import { RawClient } from "../helpers/raw_client.ts";
import {
  catchStrayRejections,
  fakeRoute,
  timeUntilVisible,
  waitForRowRedraw,
} from "./page_helpers.ts";

const CHROMIUM = Deno.env.get("LOCKD_CHROMIUM") ?? "/usr/bin/chromium";
/** Chromium's flags for this machine: as root, headless, and no calls home (they are refused here). */
const CHROMIUM_ARGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];
const TOKEN = "console-test-token";
/**
 * The product's promise for a change to show (issue 15, docs/operations.md, console): "within a
 * second without reloading". Each run prints the measured time against it.
 */
const LIVE_MS_PROMISED = 1_000;
/**
 * The test fails only past this. On a CI machine under heavy load (a load average of 15 on 2
 * cores was seen) the page, Chromium, the server and the test share the cores, and a change took
 * over a second to show without the console being at fault; 5 s still catches a console that
 * stops updating live (without the stream it would take the 2 s poll, or never show).
 */
const LIVE_MS_FAIL = 5_000;
/** Without the event stream the page polls every 2 s (docs/operations.md): promised and failing. */
const POLLED_MS_PROMISED = 2_000 + LIVE_MS_PROMISED;
const POLLED_MS_FAIL = 10_000;
const HOSTILE = "<img src=x onerror=alert(1)>";
/** Rejections nobody awaited: failed (with their message) where each test checks its problems. */
const strayRejections = catchStrayRejections();

/** Resolves with the value, or fails after `ms` with `what`. */
async function within<T>(ms: number, what: string, promise: Promise<T>): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    return await Promise.race([
      promise,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`Timed out after ${ms} ms: ${what}`)), ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

Deno.test({
  name:
    "the console in Chromium: token, live locks and queue, force-release, kick, hostile names as text",
  // playwright-core keeps pipes and timers of its own; every process here is ended by the test.
  sanitizeOps: false,
  sanitizeResources: false,
}, async () => {
  try {
    await Deno.stat(CHROMIUM);
  } catch {
    throw new Error(
      `No Chromium at ${CHROMIUM}: apt-get install -y chromium (or set LOCKD_CHROMIUM)`,
    );
  }
  const shots = Deno.env.get("LOCKD_SCREENSHOT_DIR") ??
    await Deno.makeTempDir({ prefix: "lockd-console-screenshots-" });
  await Deno.mkdir(shots, { recursive: true });
  console.log(`console screenshots: ${shots}`);
  const work = await Deno.makeTempDir({ prefix: "lockd-console-test-" });
  await Deno.writeTextFile(`${work}/token`, `${TOKEN}\n`);
  const server = await spawnLockd({
    http: true,
    flags: [
      "-admin-token-file",
      `${work}/token`,
      "-audit-log",
      `${work}/audit.log`,
      // Stop at once: the stop below times the admin API's shutdown, not the ops grace window.
      "-shutdown-grace",
      "0s",
    ],
  });
  const browser = await chromium.launchPersistentContext(`${work}/profile`, {
    executablePath: CHROMIUM,
    args: CHROMIUM_ARGS,
    viewport: { width: 1280, height: 1000 },
  });
  const clients: { close(): Promise<void> }[] = [];
  const client = async (clientName: string) => {
    const c = await connect({ addr: server.addr, clientName });
    clients.push(c);
    return c;
  };
  const problems: string[] = [];
  let churning = true;
  let churn: Promise<void> = Promise.resolve();
  try {
    const page = browser.pages()[0] ?? await browser.newPage();
    page.setDefaultTimeout(10_000);
    page.on("pageerror", (error) => problems.push(`page error: ${error.message}`));
    // Answers the test provokes, which Chromium reports on the console: the requests without a
    // token or with the wrong one (401, all along), a refused release (409) and a refused event
    // stream (503) while those steps run.
    const expectedStatuses = new Set(["401 (Unauthorized)"]);
    page.on("console", (message) => {
      const status = /status of (\d{3} \([^)]*\))/.exec(message.text())?.[1];
      if (message.type() === "error" && !(status !== undefined && expectedStatuses.has(status))) {
        problems.push(`console error: ${message.text()}`);
      }
    });
    page.on("dialog", (dialog) => {
      problems.push(`a ${dialog.type()} dialog opened: ${dialog.message()}`);
      dialog.dismiss().catch((error) => problems.push(`dismissing the dialog: ${error}`));
    });
    // The force-releases the page sends (path and query): each must carry its precondition.
    const releases: string[] = [];
    page.on("request", (request) => {
      const url = new URL(request.url());
      if (request.method() === "POST" && url.pathname.endsWith("/release")) {
        releases.push(url.pathname + url.search);
      }
    });

    // Some traffic for the charts: two clients take turns on one lock (hand-offs).
    const churnA = await client("churn-a");
    const churnB = await client("churn-b");
    churn = (async () => {
      const turn = async (c: typeof churnA) => {
        while (churning) {
          const lock = await c.acquire("churn/shared", { leaseMs: 10_000 });
          await new Promise((resolve) => setTimeout(resolve, 40));
          await lock.release();
        }
      };
      await Promise.all([turn(churnA), turn(churnB)]);
    })();
    // Closing the clients at the end of a failed run ends the loop with an error: expected then.
    churn.catch(() => {});

    // 1. The token: asked for, a wrong one refused, the right one kept for the tab.
    await page.goto(`http://${server.adminAddr}/`);
    const tokenDialog = page.getByRole("dialog", { name: "Admin token" });
    await tokenDialog.waitFor();
    await page.getByLabel("Token", { exact: true }).fill("wrong-token");
    await page.getByRole("button", { name: "Use token" }).click();
    await page.getByText("The admin API refused this token.").waitFor();
    await page.screenshot({ path: `${shots}/01-token.png` });
    await page.getByLabel("Token", { exact: true }).fill(TOKEN);
    await page.getByRole("button", { name: "Use token" }).click();
    await tokenDialog.waitFor({ state: "hidden" });
    await page.locator('#connection[data-state="live"]').waitFor();
    assert.equal(await page.evaluate(() => sessionStorage.getItem("lockd-admin-token")), TOKEN);

    // The configuration block reads as labels with the flags, and values people read.
    const info = page.locator("#info");
    await info.getByText("Lock listener (-listen)").waitFor();
    const infoText = await info.innerText();
    assert.match(infoText, new RegExp(`Lock listener \\(-listen\\)\\s+${server.addr}`));
    assert.match(infoText, /Audit log \(-audit-log\)\s+\S*audit\.log/);
    assert.match(infoText, /ACL file \(-acl-file\)\s+none: every client may take every lock/);
    assert.match(infoText, /I\/O timeout \(-io-timeout\)\s+30\.0s/);
    assert.match(infoText, /Client certificates \(mutual TLS\)\s+not required/);
    assert.doesNotMatch(infoText, /io_timeout_ms|ops_listen|acl_file|audit_log|\bmtls\b/);

    // 2. A lock appears without reloading, within a second (the promise; LIVE_MS_FAIL fails).
    const holderClient = await client("billing-worker/1");
    const held = await holderClient.acquire("jobs/nightly", { leaseMs: 60_000 });
    const lost = new Promise<LockLostError>((resolve) =>
      held.lost.addEventListener("abort", () => resolve(held.lost.reason), { once: true })
    );
    await timeUntilVisible(
      page,
      "a new lock showed",
      'button[aria-label="Show lock jobs/nightly"]',
      { promisedMs: LIVE_MS_PROMISED, failMs: LIVE_MS_FAIL },
    );

    // 3. The queue: a second client waits; the detail (opened with the keyboard) shows holder
    //    and waiter.
    const waiterClient = await client("billing-worker/2");
    const granted = waiterClient.acquire("jobs/nightly", { leaseMs: 60_000 });
    granted.catch(() => {});
    await page.getByRole("button", { name: "Show lock jobs/nightly" }).focus();
    // The table is drawn again on every change (the churn makes several a second): the focus
    // stays on the lock's button, or a keyboard user's Enter would open nothing.
    await waitForRowRedraw(page, "document.activeElement");
    assert.equal(
      await page.evaluate(`document.activeElement.getAttribute("aria-label")`),
      "Show lock jobs/nightly",
      "the focus survives the table's redraw",
    );
    await page.keyboard.press("Enter");
    const holder = page.locator("#holder");
    await holder.getByText("billing-worker/1").waitFor();
    await timeUntilVisible(
      page,
      "a new waiter showed",
      '#queue-body tr:has-text("billing-worker/2")',
      { promisedMs: LIVE_MS_PROMISED, failMs: LIVE_MS_FAIL },
    );
    await holder.getByText(String(held.token)).waitFor();
    // A few more locks (of another client: a force-release ends every lock of the holder's
    // session) and a longer queue, for the pictures.
    const otherClient = await client("deployer");
    const others: Lock[] = [];
    for (const name of ["deploy/prod", "reports/weekly", "jobs/hourly"]) {
      others.push(await otherClient.acquire(name, { leaseMs: 60_000 }));
    }
    const queued: Promise<Lock>[] = [];
    for (const name of ["report-runner", "audit-exporter"]) {
      const wait = (await client(name)).acquire("jobs/nightly", { leaseMs: 60_000 });
      wait.catch(() => {});
      queued.push(wait);
      await page.locator(`#queue-body tr:has-text("${name}")`).waitFor();
    }
    await page.screenshot({ path: `${shots}/02-detail.png`, fullPage: true });

    // 4. Force-release: the confirmation says what the client sees; Escape cancels it; confirmed,
    //    the holder's client reports lost (force) and the waiter becomes the holder.
    const confirm = page.getByRole("dialog", { name: 'Force-release "jobs/nightly"?' });
    await page.getByRole("button", { name: "Force-release…" }).click();
    await confirm.waitFor();
    await page.keyboard.press("Escape");
    await confirm.waitFor({ state: "hidden" });
    assert.equal(held.lost.aborted, false, "cancelled: nothing happened");
    await page.getByRole("button", { name: "Force-release…" }).click();
    await confirm.waitFor();
    const text = await confirm.innerText();
    assert.match(text, /ERROR 0x02/);
    assert.match(text, /billing-worker\/2.*gets the lock at once/s);
    assert.match(text, /joins the tail of the queue/);
    await page.screenshot({ path: `${shots}/03-confirm-force-release.png` });
    await confirm.getByRole("button", { name: "Force-release" }).click();
    const reason = await within(5_000, "the holder reports lost", lost);
    assert.ok(reason instanceof LockLostError);
    assert.equal(reason.reason, "force");
    const next = await within(5_000, "the waiter is granted", granted);
    assert.ok(next.token > held.token);
    await holder.getByText("billing-worker/2").waitFor();
    await holder.getByText(String(next.token)).waitFor();
    // The release carried the holder's token the dialog was opened on: the precondition.
    assert.deepEqual(releases, [`/api/locks/jobs%2Fnightly/release?token=${held.token}`]);

    // 5. Kick a waiter: it is removed, and the standard client rejoins the tail from a new address.
    const row = page.locator('#queue-body tr:has-text("report-runner")');
    const kickedAddr = (await row.getAttribute("data-remote-addr"))!;
    await row.getByRole("button", { name: `Remove waiter ${kickedAddr}` }).click();
    const kickDialog = page.getByRole("dialog", { name: `Remove waiter ${kickedAddr}?` });
    assert.match(
      await kickDialog.innerText(),
      /ERROR 0x02[\s\S]*joins the tail of the queue again/,
    );
    await kickDialog.getByRole("button", { name: "Remove waiter" }).click();
    await page.locator(`#queue-body tr[data-remote-addr="${kickedAddr}"]`).waitFor({
      state: "detached",
    });
    const rejoined = page.locator('#queue-body tr:has-text("report-runner")');
    await rejoined.waitFor();
    assert.notEqual(await rejoined.getAttribute("data-remote-addr"), kickedAddr);

    // 5b. A dialog opened on one holder never releases the next one: the server answers 409 when
    //     the holder changed (simulated here: the answer the server gives then), and the page
    //     says so in a dialog; nothing is released.
    expectedStatuses.add("409 (Conflict)");
    const stopRefusing = await fakeRoute(
      page,
      "**/api/locks/*/release*",
      problems,
      (route) =>
        route.fulfill({
          status: 409,
          contentType: "application/problem+json",
          body: problemText(
            "holder-changed",
            "Holder changed",
            409,
            `Lock "jobs/nightly" is held with token ${next.token + 1} now, not ${next.token}`,
          ),
        }),
    );
    await page.getByRole("button", { name: "Force-release…" }).click();
    await confirm.waitFor();
    await confirm.getByRole("button", { name: "Force-release" }).click();
    const notice = page.getByRole("dialog", { name: 'Not released: "jobs/nightly"' });
    await notice.waitFor();
    const noticeText = await notice.innerText();
    assert.match(noticeText, /409 Holder changed/);
    assert.match(noticeText, new RegExp(`held with token ${next.token + 1} now`));
    assert.match(
      noticeText,
      new RegExp(`opened on the holder .* with fencing token ${next.token}, and the lock is no`),
    );
    await page.screenshot({ path: `${shots}/04-release-409.png` });
    await notice.getByRole("button", { name: "Close" }).click();
    await notice.waitFor({ state: "hidden" });
    await stopRefusing();
    expectedStatuses.delete("409 (Conflict)");
    assert.equal(releases.at(-1), `/api/locks/jobs%2Fnightly/release?token=${next.token}`);
    assert.equal(next.lost.aborted, false, "nothing was released");

    // 5c. While a waiter waits, the wait chart's headline is the longest current wait, not the
    //     last finished one.
    const waitChart = page.locator('[data-chart="wait"]');
    await waitChart.locator(".note", { hasText: "longest waiting now" }).waitFor();
    assert.notEqual(await waitChart.locator(".value").textContent(), "–");

    // 6. A hostile lock name is text, never markup.
    const hostile = await otherClient.acquire(HOSTILE, { leaseMs: 60_000 });
    const hostileButton = page.getByRole("button", { name: `Show lock ${HOSTILE}` });
    await hostileButton.waitFor();
    assert.equal(await hostileButton.textContent(), HOSTILE);
    assert.equal(await page.locator("img").count(), 0, "no image element anywhere");
    await hostileButton.click();
    await page.locator("#detail-name", { hasText: HOSTILE }).waitFor();
    assert.equal(await page.locator("#detail-name").textContent(), HOSTILE);
    // And the page could not do otherwise: its CSP makes assigning markup to innerHTML throw.
    assert.equal(
      await page.evaluate(`(() => {
        try {
          document.createElement("div").innerHTML = "<b>x</b>";
          return "assigned";
        } catch (error) {
          return error.name;
        }
      })()`),
      "TypeError",
    );
    // Chromium reports the blocked assignment on the console: that one is expected.
    const blocked = () => problems.findIndex((p) => p.includes("requires 'TrustedHTML'"));
    await within(
      5_000,
      "the violation reported",
      (async () => {
        while (blocked() < 0) await new Promise((resolve) => setTimeout(resolve, 20));
      })(),
    );
    problems.splice(blocked(), 1);

    // 6b. Each lock has a URL: opening it shows that lock (the hostile name round-trips), the
    //     table's selection moves the URL along, and Back returns to the lock before.
    const hostileUrl = `http://${server.adminAddr}/#/locks/${encodeURIComponent(HOSTILE)}`;
    assert.equal(page.url(), hostileUrl, "selecting a lock puts its URL in the address bar");
    assert.equal(
      await page.locator("#detail-link").getAttribute("href"),
      `#/locks/${encodeURIComponent(HOSTILE)}`,
    );
    await page.goto("about:blank");
    await page.goto(hostileUrl); // a fresh load, as from a pasted link (the tab keeps its token)
    await page.locator("#detail-name", { hasText: HOSTILE }).waitFor();
    assert.equal(await page.locator("#detail").isVisible(), true);
    assert.equal(await page.locator("img").count(), 0);
    // A click whose mouse-down and mouse-up straddle a redraw of the table (the churn makes
    // several a second) still opens the lock: the row is drawn over, its button stays.
    const nightlyBox = (await page.getByRole("button", { name: "Show lock jobs/nightly" })
      .boundingBox())!;
    await page.mouse.move(
      nightlyBox.x + nightlyBox.width / 2,
      nightlyBox.y + nightlyBox.height / 2,
    );
    await page.mouse.down();
    await waitForRowRedraw(page, `document.querySelector('[aria-label="Show lock jobs/nightly"]')`);
    await page.mouse.up();
    await holder.getByText("billing-worker/2").waitFor();
    assert.equal(page.url(), `http://${server.adminAddr}/#/locks/jobs%2Fnightly`);
    await page.goBack();
    await page.locator("#detail-name", { hasText: HOSTILE }).waitFor();
    await page.screenshot({ path: `${shots}/05-lock-url.png`, fullPage: true });

    // 7. Sorting and filtering go to the server (jobs/nightly has the longest queue: 2).
    await page.getByRole("button", { name: "Waiters" }).click();
    await page.locator('th[data-sort="waiters"][aria-sort="descending"]').waitFor();
    await within(
      5_000,
      "the longest queue first",
      (async () => {
        while (
          (await page.locator("#locks-body tr").first().innerText()).indexOf("jobs/nightly") < 0
        ) {
          await new Promise((resolve) => setTimeout(resolve, 50));
        }
      })(),
    );
    await page.getByLabel(/Filter by name/).fill("jobs/**");
    await page.getByRole("button", { name: "Apply" }).click();
    await page.getByText("1–2 of 2").waitFor();

    // The picture for docs/operations.md: the charts have had a few seconds of traffic.
    await page.getByLabel(/Filter by name/).fill("");
    await page.getByRole("button", { name: "Apply" }).click();
    await page.getByRole("button", { name: "Show lock jobs/nightly" }).click();
    await holder.getByText("billing-worker/2").waitFor();
    await page.locator('[data-chart="acquires"] .value:not(:text("–"))').waitFor();
    const docsShot = Deno.env.get("LOCKD_DOCS_SCREENSHOT");
    if (docsShot !== undefined) {
      // A picture with some history in the charts: half a minute of the churn first.
      await new Promise((resolve) => setTimeout(resolve, 30_000));
      await page.screenshot({ path: docsShot, fullPage: true });
    }
    await page.screenshot({ path: `${shots}/00-console.png`, fullPage: true });

    // 7b. An orphaned holder (protocol version 2): its connection ends without GOODBYE, it keeps
    //     its lock until the lease ends, and the console marks it "disconnected", in the table
    //     and by its session, as text.
    const orphan = await RawClient.connect(server.addr);
    await orphan.hello("orphan-worker", 2);
    await orphan.send({
      type: "acquire",
      requestId: 1,
      name: "orphan/kept",
      leaseMs: 60_000,
      waitMs: 0,
    });
    assert.equal((await orphan.next())?.type, "acquired");
    await page.getByRole("button", { name: "Show lock orphan/kept" }).click();
    await holder.getByText("orphan-worker").waitFor();
    const orphanRow = page.locator('#locks-body tr:has-text("orphan/kept")');
    assert.equal(await orphanRow.locator(".badge-disconnected").count(), 0, "connected: no badge");
    assert.doesNotMatch(await holder.innerText(), /disconnected/);
    await orphan[Symbol.asyncDispose](); // a FIN without GOODBYE: the session is orphaned
    await orphanRow.locator(".badge-disconnected", { hasText: /^disconnected$/ }).waitFor();
    await holder.locator(".badge-disconnected").waitFor();
    assert.match(
      await holder.innerText(),
      /Session\s+\d+\s*disconnected\s*kept until its lease ends or its client resumes/,
    );
    assert.match(await holder.innerText(), /Client name\s+orphan-worker/, "still the holder");
    await page.screenshot({ path: `${shots}/07b-orphaned-holder.png`, fullPage: true });

    // Cluster mode, seen from a standby: /api/info says so (faked here in the browser), and the
    // page points at the leader's console instead of showing locks.
    // (The standby page asks for /api/info every 2 s: one may be in flight when this stops.)
    const stopStandby = await fakeRoute(page, "**/api/info", problems, async (route) => {
      const info = await (await route.fetch()).json();
      await route.fulfill({
        json: {
          ...info,
          cluster: {
            name: "prod",
            node: "b",
            role: "standby",
            serving: false,
            term: 0,
            leader: { node: "a", advertise: "10.0.0.1:7400", admin: "10.0.0.1:7401", term: 7 },
          },
        },
      });
    });
    const flip = await otherClient.acquire("cluster/flip");
    const banner = page.locator("#cluster-banner");
    await banner.getByText("locks are served by the leader a (term 7)").waitFor();
    assert.equal(
      await banner.getByRole("link", { name: "Open the leader's console (10.0.0.1:7401)" })
        .getAttribute("href"),
      "http://10.0.0.1:7401/",
    );
    await page.locator("#cluster-info").getByText("standby").waitFor();
    // Its own figures say they are this node's, not the cluster's.
    await page.locator("#overview-title", { hasText: "Overview of this node (b)" }).waitFor();
    assert.match(await page.locator("#node-note").innerText(), /this node's own \(b, standby\)/);
    assert.equal(
      await page.locator('[data-count="sessions"] dt').textContent(),
      "Sessions (this node)",
    );
    assert.equal(await page.locator("#charts").isVisible(), false);
    assert.match(await page.locator("#charts-note").innerText(), /leader's console has the charts/);
    assert.match(await page.locator("#cluster-info").innerText(), /Leader\s+a at 10\.0\.0\.1:7400/);
    await page.screenshot({ path: `${shots}/06-standby.png`, fullPage: true });
    // Waits for a handler still fetching the real answer before removing the route: unroute()
    // alone lets it fulfil a request the fallback has answered meanwhile ("Route is already
    // handled!", uncaught). fakeRoute's stop does so for this route alone.
    await stopStandby();
    await flip.release();
    await banner.waitFor({ state: "hidden" });
    await page.locator("#overview-title", { hasText: /^Overview$/ }).waitFor();
    assert.equal(await page.locator('[data-count="sessions"] dt').textContent(), "Sessions");
    assert.equal(await page.locator("#node-note").isVisible(), false);
    await page.getByRole("button", { name: "Show lock jobs/nightly" }).waitFor();

    // No event stream to be had (the server's stream cap: 503 too-many-streams, as it answers
    // then): the page says why and polls; a new lock still shows. The history here has one wait
    // and one hold in a quiet minute: each chart draws it as a dot (no line has two points).
    expectedStatuses.add("503 (Service Unavailable)");
    const stopNoStream = await fakeRoute(page, "**/api/events", problems, (route) =>
      route.fulfill({
        status: 503,
        contentType: "application/problem+json",
        body: problemText(
          "too-many-streams",
          "Too many event streams",
          503,
          "The admin API has 16 event streams open; close one or poll",
        ),
      }));
    const quiet = (at: number, ended: number) => ({
      at: new Date(Date.UTC(2026, 0, 1, 10, 0, at)).toISOString(),
      uptime_ms: at * 1_000,
      acquires_total: ended,
      handoffs_total: 0,
      wait_seconds_sum: ended * 2.5,
      wait_seconds_count: ended,
      hold_seconds_sum: ended * 40,
      hold_seconds_count: ended,
      locks_held: 0,
      waiters: 0,
      oldest_waiter_ms: 0,
      sessions: 0,
    });
    const stopQuiet = await fakeRoute(page, "**/api/history", problems, (route) =>
      route.fulfill({
        json: {
          interval_ms: 1000,
          snapshots: [quiet(0, 0), quiet(1, 0), quiet(2, 1), quiet(3, 1), quiet(4, 1), quiet(5, 1)],
        },
      }));
    await page.reload();
    const connection = page.locator('#connection[data-state="polling"]');
    await connection.waitFor();
    assert.match(
      await connection.innerText(),
      /^No live updates: the server gives no event stream \(503 Too many event streams: The admin API has 16 event streams open; close one or poll\)\. Polling every 2 s instead\.$/,
    );
    const polled = await otherClient.acquire("polled/new-lock");
    await timeUntilVisible(
      page,
      "without a stream, a new lock showed",
      'button[aria-label="Show lock polled/new-lock"]',
      { promisedMs: POLLED_MS_PROMISED, failMs: POLLED_MS_FAIL },
    );
    // Held and waiting, which the stream would carry, come from the newest snapshot.
    assert.equal(await page.locator('[data-count="held"] dd').textContent(), "0");
    await polled.release();
    for (const id of ["wait", "hold"]) {
      const chart = page.locator(`[data-chart="${id}"]`);
      await chart.locator(".value", { hasText: id === "wait" ? "2.50s" : "40.0s" }).waitFor();
      const line = await chart.locator("path.line").getAttribute("d");
      assert.match(line ?? "", /^M[\d.]+,[\d.]+$/, `${id}: one point, no line`);
      const dots = chart.locator("path.dots");
      assert.match((await dots.getAttribute("d")) ?? "", /^M[\d.]+,[\d.]+ h1$/, id);
      // Painted: the point under the dot's centre is the dots path itself (its round-capped
      // stroke), not the empty chart behind it.
      const hit = await page.evaluate(`(() => {
        const dots = document.querySelector('[data-chart="${id}"] path.dots');
        const box = dots.getBoundingClientRect();
        const under = document.elementFromPoint(box.x + box.width / 2, box.y + box.height / 2);
        return under === dots ? "dots" : String(under && under.outerHTML.slice(0, 60));
      })()`);
      assert.equal(hit, "dots", `${id}: the isolated sample is drawn`);
    }
    await page.screenshot({ path: `${shots}/07-polling-and-dots.png`, fullPage: true });
    await stopNoStream();
    await stopQuiet();
    await page.reload();
    await page.locator('#connection[data-state="live"]').waitFor();
    expectedStatuses.delete("503 (Service Unavailable)");

    // Every control has a name a screen reader can say, every field a label.
    // (A string: the test is type-checked without the DOM's types.)
    const unnamed = await page.evaluate(`[
      ...[...document.querySelectorAll("button")]
        .filter((b) => (b.getAttribute("aria-label") ?? b.textContent ?? "").trim() === "")
        .map((b) => "button " + b.outerHTML.slice(0, 80)),
      ...[...document.querySelectorAll("input")]
        .filter((i) => i.labels.length === 0)
        .map((i) => "input #" + i.id),
    ]`);
    assert.deepEqual(unnamed, []);

    assert.deepEqual([...problems, ...strayRejections.splice(0)], []);
    await hostile.release();
    for (const lock of others) await lock.release();
    await next.release();
    churning = false;
    await churn;

    // 8. The server stops while the page still reads its event stream: the stream does not hold
    //    the shutdown up, and the page says it is reconnecting.
    const stopStartedMs = performance.now();
    const status = await within(15_000, "the server stops", server.stop("SIGTERM"));
    assert.equal(status.code, 0);
    console.log(`server stopped in ${(performance.now() - stopStartedMs).toFixed(0)} ms`);
    await page.locator('#connection[data-state="down"]').waitFor();
  } catch (error) {
    const page = browser.pages()[0];
    if (page !== undefined) {
      await page.screenshot({ path: `${shots}/failure.png`, fullPage: true }).catch(() => {});
    }
    console.error(`failed; page problems: ${JSON.stringify(problems)}`);
    console.error(`server log:\n${server.logLines.slice(-30).join("\n")}`);
    throw error;
  } finally {
    churning = false;
    for (const c of clients) await c.close().catch(() => {});
    await churn.catch(() => {});
    await browser.close();
    await server.stop("SIGKILL");
    await Deno.remove(work, { recursive: true });
  }
});

Deno.test({
  name:
    "the console in Chromium: kinds and values: badges, every holder with its slot or mode, values as text, one owner released by its token, a lock-delay",
  sanitizeOps: false,
  sanitizeResources: false,
}, async () => {
  await Deno.stat(CHROMIUM);
  const shots = Deno.env.get("LOCKD_SCREENSHOT_DIR") ??
    await Deno.makeTempDir({ prefix: "lockd-console-screenshots-" });
  await Deno.mkdir(shots, { recursive: true });
  const work = await Deno.makeTempDir({ prefix: "lockd-console-kinds-" });
  await Deno.writeTextFile(`${work}/token`, `${TOKEN}\n`);
  await Deno.writeTextFile(`${work}/lock.rules`, "exclusive pay/** lock-delay=1m\n");
  // In-process: protocol version 2 is not on the wire yet, so the test asks the server's own
  // service for shared claims, semaphore slots and values (what a v2 ACQUIRE will ask for).
  const audit = new MemorySink();
  const server = await startServer({
    listen: "127.0.0.1:0",
    adminListen: "127.0.0.1:0",
    adminTokenFile: `${work}/token`,
    lockRulesFile: `${work}/lock.rules`,
    dataDir: null,
    shutdownGraceMs: 0,
  }, { auditSink: audit });
  const service = server.context.service;
  let port = 48_000;
  const open = (clientName: string) => {
    const framePort = new FramePort();
    const peer = service.openSession("", `127.0.0.1:${port++}`, framePort, clientName);
    if ("code" in peer) throw new Error(peer.message);
    return { peer, port: framePort };
  };
  const claim = (
    mode: "exclusive" | "shared",
    limit: number,
    value: string | Uint8Array | null,
  ) => ({
    mode,
    limit,
    value: typeof value === "string" ? new TextEncoder().encode(value) : value,
  });
  const browser = await chromium.launchPersistentContext(`${work}/profile`, {
    executablePath: CHROMIUM,
    args: CHROMIUM_ARGS,
    viewport: { width: 1280, height: 1000 },
  });
  const problems: string[] = [];
  try {
    const renderers = [open("render-1"), open("render-2"), open("render-3")];
    service.acquire(
      renderers[0].peer,
      1,
      "jobs/render",
      60_000,
      null,
      claim("exclusive", 3, HOSTILE),
    );
    service.acquire(
      renderers[1].peer,
      1,
      "jobs/render",
      60_000,
      null,
      claim("exclusive", 3, "frame 7\u202e"),
    );
    service.acquire(
      renderers[2].peer,
      1,
      "jobs/render",
      60_000,
      null,
      claim("exclusive", 3, new Uint8Array([0xff])),
    );
    const readers = [open("reader-1"), open("reader-2")];
    for (const r of readers) {
      service.acquire(r.peer, 1, "reports/q1", 60_000, null, claim("shared", 1, null));
    }
    const payer = open("payer");
    service.acquire(payer.peer, 1, "pay/eu", 60_000, null, claim("exclusive", 1, null));
    service.acquire(open("payer-2").peer, 1, "pay/eu", 60_000, null, claim("exclusive", 1, null));
    assert.equal(
      service.forceRelease("pay/eu", { remote_addr: "127.0.0.1:1", auth: "token" }).status,
      "released",
    );

    const page = browser.pages()[0] ?? await browser.newPage();
    page.setDefaultTimeout(10_000);
    page.on("pageerror", (error) => problems.push(`page error: ${error.message}`));
    page.on("dialog", (dialog) => {
      problems.push(`a ${dialog.type()} dialog opened: ${dialog.message()}`);
      dialog.dismiss().catch((error) => problems.push(`dismissing the dialog: ${error}`));
    });
    await page.goto(`http://${server.adminAddr}/`);
    // The dialog opens once the page's script runs: filling it before would submit nothing.
    await page.getByRole("dialog", { name: "Admin token" }).waitFor();
    await page.getByLabel("Token", { exact: true }).fill(TOKEN);
    await page.getByRole("button", { name: "Use token" }).click();
    await page.locator('#connection[data-state="live"]').waitFor();

    // The table: a kind badge with owners and limit, the oldest holder and +N, a lock-delay badge.
    const renderRow = page.locator('#locks-body tr:has-text("jobs/render")');
    await renderRow.locator(".badge-kind", { hasText: "semaphore 3/3" }).waitFor();
    assert.match(await renderRow.innerText(), /\+2/);
    await page.locator('#locks-body tr:has-text("reports/q1") .badge-kind', { hasText: "shared 2" })
      .waitFor();
    await page.locator('#locks-body tr:has-text("pay/eu") .badge-delay').waitFor();

    // The detail: every holder with its slot and value; values are text, never markup.
    await page.getByRole("button", { name: "Show lock jobs/render" }).click();
    const holders = page.locator("#holders-body tr");
    await page.locator("#holders-place", { hasText: "Slot" }).waitFor();
    await within(
      5_000,
      "three holders",
      (async () => {
        while ((await holders.count()) !== 3) {
          await new Promise((resolve) => setTimeout(resolve, 20));
        }
      })(),
    );
    const cells = await holders.evaluateAll((rows) =>
      rows.map((row) => [...row.querySelectorAll("td")].slice(1, 7).map((td) => td.textContent))
    );
    const tokens = server.context.engine.holdersOf("jobs/render").map((h) => String(h.token));
    assert.deepEqual(cells.map((row) => [row[0], row[2], row[3], row[5]]), [
      ["0", "render-1", tokens[0], HOSTILE],
      ["1", "render-2", tokens[1], "frame 7\\u202E"],
      ["2", "render-3", tokens[2], "(1 bytes, not UTF-8) base64: /w=="],
    ]);
    assert.equal(await page.locator("img").count(), 0, "a value is text, never markup");
    await page.locator("#holder-title", { hasText: "Oldest holder" }).waitFor();
    assert.match(await page.locator("#holder").innerText(), /Slot\s+0/);
    await page.getByRole("button", { name: "Force-release all owners…" }).waitFor();
    await page.screenshot({ path: `${shots}/08-semaphore.png`, fullPage: true });

    // One owner released by its token: the others keep the lock.
    await page.getByRole("button", {
      name: `Release owner ${renderers[1].peer.remoteAddr} (token ${tokens[1]})`,
    })
      .click();
    const dialog = page.getByRole("dialog", {
      name: `Release owner ${renderers[1].peer.remoteAddr}?`,
    });
    assert.match(await dialog.innerText(), /The other owners keep the lock/);
    await dialog.getByRole("button", { name: "Release owner" }).click();
    await page.locator(`#holders-body tr[data-token="${tokens[1]}"]`).waitFor({
      state: "detached",
    });
    assert.ok(renderers[1].port.closed);
    assert.ok(!renderers[0].port.closed && !renderers[2].port.closed);

    // A shared lock: the readers' mode; a delayed lock: why nobody owns it.
    await page.getByRole("button", { name: "Show lock reports/q1" }).click();
    await page.locator("#holders-place", { hasText: "Mode" }).waitFor();
    await page.locator("#holders-body tr", { hasText: "reader-2" }).getByText("shared").waitFor();
    await page.getByRole("button", { name: "Show lock pay/eu" }).click();
    await page.locator("#holder", { hasText: "a lock-delay after a non-graceful end" }).waitFor();
    await page.locator("#detail-badges .badge-delay").waitFor();
    await page.screenshot({ path: `${shots}/09-lock-delay.png`, fullPage: true });
    assert.deepEqual([...problems, ...strayRejections.splice(0)], []);
  } catch (error) {
    const page = browser.pages()[0];
    if (page !== undefined) {
      await page.screenshot({ path: `${shots}/failure-kinds.png`, fullPage: true }).catch(() => {});
      console.error(
        `connection: ${await page.locator("#connection").innerText().catch(() => "?")}`,
      );
    }
    console.error(`failed; page problems: ${JSON.stringify(problems)}; screenshots in ${shots}`);
    throw error;
  } finally {
    await browser.close();
    await server.shutdown();
    await Deno.remove(work, { recursive: true });
  }
});
