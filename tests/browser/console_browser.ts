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
import { chromium, type Page } from "playwright-core";
import { startServerProc } from "../../bench/server_proc.ts";
import { connect, type Lock, LockLostError } from "../../mod.ts";

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
/** The bound for a change to show: "within a second without reloading". */
const LIVE_MS_MAX = 1_000;
const HOSTILE = "<img src=x onerror=alert(1)>";

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

/** How long until `selector`'s element is visible, after `action` ran; fails past `ms`. */
async function timeUntilVisible(page: Page, selector: string, ms: number): Promise<number> {
  const startedMs = performance.now();
  await page.locator(selector).first().waitFor({ state: "visible", timeout: ms });
  return performance.now() - startedMs;
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
  const server = await startServerProc({
    http: true,
    args: [
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
    page.on("console", (message) => {
      // The requests without a token or with the wrong one are 401s: the token test makes them.
      if (message.type() === "error" && !/status of 401 \(Unauthorized\)/.test(message.text())) {
        problems.push(`console error: ${message.text()}`);
      }
    });
    page.on("dialog", (dialog) => {
      problems.push(`a ${dialog.type()} dialog opened: ${dialog.message()}`);
      void dialog.dismiss();
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

    // 2. A lock appears without reloading, within a second.
    const holderClient = await client("billing-worker/1");
    const held = await holderClient.acquire("jobs/nightly", { leaseMs: 60_000 });
    const lost = new Promise<LockLostError>((resolve) =>
      held.lost.addEventListener("abort", () => resolve(held.lost.reason), { once: true })
    );
    const appearedMs = await timeUntilVisible(
      page,
      'button[aria-label="Show lock jobs/nightly"]',
      LIVE_MS_MAX,
    );
    console.log(`a new lock showed after ${appearedMs.toFixed(0)} ms`);

    // 3. The queue: a second client waits; the detail (opened with the keyboard) shows holder
    //    and waiter.
    const waiterClient = await client("billing-worker/2");
    const granted = waiterClient.acquire("jobs/nightly", { leaseMs: 60_000 });
    granted.catch(() => {});
    await page.getByRole("button", { name: "Show lock jobs/nightly" }).focus();
    await page.keyboard.press("Enter");
    const holder = page.locator("#holder");
    await holder.getByText("billing-worker/1").waitFor();
    const queuedMs = await timeUntilVisible(
      page,
      '#queue-body tr:has-text("billing-worker/2")',
      LIVE_MS_MAX,
    );
    console.log(`a new waiter showed after ${queuedMs.toFixed(0)} ms`);
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

    // Cluster mode, seen from a standby: /api/info says so (faked here in the browser), and the
    // page points at the leader's console instead of showing locks.
    await page.route("**/api/info", async (route) => {
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
    await page.unroute("**/api/info");
    await flip.release();
    await banner.waitFor({ state: "hidden" });
    await page.getByRole("button", { name: "Show lock jobs/nightly" }).waitFor();

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

    assert.deepEqual(problems, []);
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
