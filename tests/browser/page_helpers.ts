/**
 * Helpers of the console's browser test (console_browser.ts) that keep it honest on a loaded
 * machine: a live update timed against the product's promise, faked answers that are withdrawn
 * without racing the page's requests, and rejections nobody awaited turned into failures.
 */

import type { Page, Route } from "playwright-core";

/**
 * How long until `selector`'s element is visible; prints the time against `promisedMs` (and says
 * when it missed it), and fails only past `failMs` (console_browser.ts: LIVE_MS_FAIL says why).
 */
export async function timeUntilVisible(
  page: Page,
  what: string,
  selector: string,
  bounds: { promisedMs: number; failMs: number },
): Promise<number> {
  const startedMs = performance.now();
  try {
    await page.locator(selector).first().waitFor({ state: "visible", timeout: bounds.failMs });
  } catch (error) {
    throw new Error(
      `${what}: not shown after ${bounds.failMs} ms (promised: ${bounds.promisedMs} ms)`,
      { cause: error },
    );
  }
  const tookMs = performance.now() - startedMs;
  const missed = tookMs > bounds.promisedMs
    ? ` (over the promised ${bounds.promisedMs} ms: is the machine loaded? load average ${
      Deno.loadavg().map((n) => n.toFixed(1)).join(" ")
    })`
    : "";
  console.log(`${what} after ${tookMs.toFixed(0)} ms${missed}`);
  return tookMs;
}

/**
 * Rejections nobody awaited (a route handler's, a dialog's dismiss) from now on: recorded in the
 * list returned, and printed, instead of ending the whole test file with "error: (in promise)";
 * the test that checks the list fails with their messages.
 */
export function catchStrayRejections(): string[] {
  const stray: string[] = [];
  globalThis.addEventListener("unhandledrejection", (event) => {
    event.preventDefault();
    const reason = event.reason instanceof Error ? event.reason.stack : String(event.reason);
    stray.push(`unhandled rejection: ${reason}`);
    console.error(stray.at(-1));
  });
  return stray;
}

/**
 * Answers requests for `url` with `answer` until the returned `stop` is called; stop waits for the
 * answers in flight and only then removes the route. (Removing a route while its handler awaits,
 * say `route.fetch()` for a page that polls, makes Playwright let the request through, and the
 * handler's `fulfill` then fails with "Route is already handled!".) A handler that fails does not
 * become a stray rejection: its message goes to `problems`, and `stop` throws it.
 */
export async function fakeRoute(
  page: Page,
  url: string,
  problems: string[],
  answer: (route: Route) => Promise<void>,
): Promise<() => Promise<void>> {
  let stopping = false;
  const failures: string[] = [];
  const inFlight = new Set<Promise<void>>();
  const handler = (route: Route): Promise<void> => {
    const handled = (async () => {
      try {
        // Stopping: the request goes on to the server, as it will once the route is gone.
        await (stopping ? route.fallback() : answer(route));
      } catch (error) {
        failures.push(
          `the faked answer to ${route.request().method()} ${route.request().url()} failed: ${
            error instanceof Error ? error.message : String(error)
          }`,
        );
        problems.push(failures.at(-1)!);
      }
    })();
    inFlight.add(handled);
    void handled.finally(() => inFlight.delete(handled));
    return handled;
  };
  await page.route(url, handler);
  return async () => {
    stopping = true;
    while (inFlight.size > 0) await Promise.all(inFlight);
    await page.unroute(url, handler);
    if (failures.length > 0) throw new Error(failures.join("\n"));
  };
}

/**
 * Marks the table row around the element `elementJs` (a script expression, evaluated in the page)
 * and waits until the page has drawn that row again (a redraw drops the mark: the row is replaced
 * or its attributes are set anew), failing past `ms`.
 */
export async function waitForRowRedraw(page: Page, elementJs: string, ms = 5_000): Promise<void> {
  await page.evaluate(`(${elementJs}).closest("tr").dataset.redrawProbe = "drawn before"`);
  const untilMs = performance.now() + ms;
  while (await page.evaluate(`document.querySelector("[data-redraw-probe]") !== null`)) {
    if (performance.now() > untilMs) throw new Error(`the row was not drawn again in ${ms} ms`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}
