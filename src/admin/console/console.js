// @ts-check
/// <reference lib="dom" />
/**
 * The lockd operator console: overview, charts, a paged and sorted locks
 * table, one lock's holder and queue, and the two operator actions. It reads
 * the admin API with the tab's token and looks again whenever the event
 * stream (`GET /api/events`) says the locks changed, so a change shows within
 * a second; durations tick in the page between answers.
 */

import { api, forgetToken, HttpError, lockPath, readEvents, savedToken, saveToken } from "./api.js";
import { Chart, CHARTS } from "./charts.js";
import { append, byId, el, fillPairs, formatDuration, formatNumber } from "./dom.js";

const PAGE_SIZE = 50;
/** Waiters shown in the detail: a queue of 20,000 would cost the server and the page too much. */
const QUEUE_SHOWN_MAX = 200;
const RECONNECT_MS = 2_000;
const HISTORY_MAX = 900;
/** Fields of GET /api/info that the spec defines; any other field is shown under "Cluster". */
const SPEC_INFO_FIELDS = new Set(["version", "uptime_ms", "config", "locks", "sessions"]);

const state = {
  /** @type {"name" | "held_for" | "waiters"} */
  sort: "name",
  descending: false,
  offset: 0,
  match: "",
  /** @type {string | null} the lock shown in the detail panel */
  selected: null,
  /** @type {any} */
  info: null,
  /** @type {any} cluster mode: `info.cluster` of a node that does not serve (locks are elsewhere) */
  standby: null,
  infoAtMs: 0,
  /** @type {any[]} */
  history: [],
  version: -1,
};

/** Duration cells that tick between answers: [node, milliseconds when fetched, fetched at]. */
/** @type {[HTMLElement, number, number][]} */
let ticking = [];

const charts = CHARTS.map((spec) => new Chart(spec));

// ---- refreshing -------------------------------------------------------------------------

/**
 * Refreshes start at least this far apart (the server's event check runs as often): while locks
 * change all the time, a console costs the server at most four refreshes a second (a page query
 * is 1 to 4 ms of CPU at 20,000 locks), and a change still shows within about half a second
 * (at most 250 ms until the event, at most 250 ms here, then the fetch).
 */
const REFRESH_GAP_MS = 250;

let refreshing = false;
let refreshAgain = false;
let lastRefreshMs = -Infinity;

/** Fetches what the page shows; one refresh at a time, one more if asked meanwhile. */
async function refresh() {
  if (refreshing) {
    refreshAgain = true;
    return;
  }
  refreshing = true;
  try {
    do {
      refreshAgain = false;
      const waitMs = lastRefreshMs + REFRESH_GAP_MS - performance.now();
      if (waitMs > 0) await new Promise((resolve) => setTimeout(resolve, waitMs));
      lastRefreshMs = performance.now();
      await loadInfo();
      if (state.standby === null) await Promise.all([loadLocks(), loadDetail()]);
    } while (refreshAgain);
    showError(null);
  } catch (error) {
    handleError(error);
  } finally {
    refreshing = false;
  }
}

async function loadInfo() {
  state.info = await api("/api/info");
  state.infoAtMs = performance.now();
  const cluster = state.info.cluster;
  state.standby = cluster !== undefined && cluster.serving === false ? cluster : null;
  renderInfo();
  renderStandby();
}

async function loadLocks() {
  const query = new URLSearchParams({
    sort: `${state.descending ? "-" : ""}${state.sort}`,
    offset: String(state.offset),
    limit: String(PAGE_SIZE),
    // The table shows queue lengths only: no waiter records.
    waiters_limit: "0",
  });
  if (state.match !== "") query.set("match", state.match);
  let page;
  try {
    page = await api(`/api/locks?${query}`);
  } catch (error) {
    if (error instanceof HttpError && error.slug === "invalid-glob") {
      showFilterError(error.message);
      renderLocks({ locks: [], total: 0 });
      return;
    }
    throw error;
  }
  showFilterError(null);
  if (state.offset > 0 && state.offset >= page.total) {
    // The page emptied (locks went idle): show the last page there is.
    state.offset = Math.max(0, Math.floor((page.total - 1) / PAGE_SIZE) * PAGE_SIZE);
    return loadLocks();
  }
  renderLocks(page);
}

async function loadDetail() {
  const name = state.selected;
  if (name === null) return;
  let lock = null;
  try {
    lock = await api(`${lockPath(name)}?waiters_limit=${QUEUE_SHOWN_MAX}`);
  } catch (error) {
    if (!(error instanceof HttpError && error.slug === "lock-not-found")) throw error;
  }
  if (state.selected === name) renderDetail(name, lock);
}

async function loadHistory() {
  const answer = await api("/api/history");
  state.history = answer.snapshots;
  renderCharts();
}

// ---- rendering ----------------------------------------------------------------------------

function renderInfo() {
  const info = state.info;
  byId("server-name").textContent = `version ${info.version} · listen ${info.config.listen}`;
  renderCounts({ locks: info.locks, sessions: info.sessions });
  const uptime = el("span", {}, formatDuration(info.uptime_ms));
  ticking.push([uptime, info.uptime_ms, state.infoAtMs]);
  fillPairs(byId("info"), [
    ["Version", info.version],
    ["Uptime", uptime],
    ...Object.entries(info.config).map(
      ([key, value]) => /** @type {[string, string]} */ ([key, String(value)]),
    ),
  ]);
  const extra = Object.entries(info).filter(([key]) => !SPEC_INFO_FIELDS.has(key));
  byId("cluster").hidden = extra.length === 0;
  fillPairs(byId("cluster-info"), extra.flatMap(([key, value]) => flatten(key, value)));
}

/**
 * Fields added to /api/info (cluster mode: role, term, leader, nodes) as [name, text] pairs.
 * @param {string} key
 * @param {unknown} value
 * @returns {[string, string][]}
 */
function flatten(key, value) {
  if (Array.isArray(value)) {
    return [[
      key,
      value.map((item) => typeof item === "object" ? JSON.stringify(item) : String(item)).join(
        ", ",
      ),
    ]];
  }
  if (value !== null && typeof value === "object") {
    return Object.entries(value).flatMap(([k, v]) => flatten(`${key}.${k}`, v));
  }
  return [[key, String(value)]];
}

/** The live counts, in the order shown. */
const COUNTS = [["locks", "Locks"], ["held", "Held"], ["waiters", "Waiters"], [
  "sessions",
  "Sessions",
]];

/** @param {Record<string, number>} counts */
function renderCounts(counts) {
  const list = byId("counts");
  if (list.childElementCount === 0) {
    append(
      list,
      COUNTS.map(([id, label]) =>
        el("div", { "data-count": id }, el("dt", {}, label), el("dd", {}, "–"))
      ),
    );
  }
  for (const [id, value] of Object.entries(counts)) {
    const dd = list.querySelector(`[data-count="${id}"] dd`);
    if (dd !== null) dd.textContent = formatNumber(value);
  }
}

/** @param {{ locks: any[], total: number }} page */
function renderLocks(page) {
  const now = performance.now();
  ticking = ticking.filter(([node]) => !byId("locks-body").contains(node));
  const rows = page.locks.map((lock) => {
    const holder = lock.holder;
    const heldFor = el("span", {}, holder === null ? "–" : formatDuration(holder.held_for_ms));
    if (holder !== null) ticking.push([heldFor, holder.held_for_ms, now]);
    const open = el("button", {
      type: "button",
      class: "name",
      "aria-label": `Show lock ${lock.name}`,
    }, lock.name);
    open.addEventListener("click", () => select(lock.name));
    return el(
      "tr",
      { class: lock.name === state.selected ? "selected" : null },
      el("td", {}, open),
      el("td", { class: "mono" }, holder === null ? "(no owner)" : holder.remote_addr),
      el("td", {}, holder === null ? "" : holder.client_name),
      el("td", { class: "number" }, heldFor),
      el("td", { class: "number" }, lock.waiters_total),
      el("td", { class: "number mono" }, holder === null ? "" : holder.token),
    );
  });
  byId("locks-body").replaceChildren(...rows);
  const first = page.total === 0 ? 0 : state.offset + 1;
  const last = state.offset + page.locks.length;
  byId("page-status").textContent = page.total === 0
    ? state.match === "" ? "No locks are held or waited for." : "No lock matches the filter."
    : `${formatNumber(first)}–${formatNumber(last)} of ${formatNumber(page.total)}`;
  /** @type {HTMLButtonElement} */ (byId("prev-page")).disabled = state.offset === 0;
  /** @type {HTMLButtonElement} */ (byId("next-page")).disabled = last >= page.total;
  for (const th of document.querySelectorAll("th[data-sort]")) {
    const key = th.getAttribute("data-sort");
    if (key === state.sort) {
      th.setAttribute("aria-sort", state.descending ? "descending" : "ascending");
    } else th.removeAttribute("aria-sort");
  }
}

/**
 * @param {string} name
 * @param {any} lock the Lock object, or null when the lock is idle
 */
function renderDetail(name, lock) {
  const now = performance.now();
  const detail = byId("detail");
  detail.hidden = false;
  byId("detail-name").textContent = name;
  byId("detail-idle").hidden = lock !== null;
  ticking = ticking.filter(([node]) => !detail.contains(node));
  const holder = lock?.holder ?? null;
  byId("detail-holder").hidden = lock === null;
  /** @type {HTMLButtonElement} */ (byId("force-release")).disabled = holder === null;
  if (holder === null) {
    fillPairs(byId("holder"), [["Owner", lock === null ? "none" : "none (grants are paused)"]]);
  } else {
    const heldFor = el("span", {}, formatDuration(holder.held_for_ms));
    ticking.push([heldFor, holder.held_for_ms, now]);
    fillPairs(byId("holder"), [
      ["Identity", holder.identity === "" ? "(none: no mutual TLS)" : holder.identity],
      ["Client name", holder.client_name === "" ? "(none)" : holder.client_name],
      ["Remote address", el("span", { class: "mono" }, holder.remote_addr)],
      ["Session", holder.session],
      ["Since", holder.since],
      ["Held for", heldFor],
      ["Lease", formatDuration(holder.lease_ms)],
      ["Fencing token", el("span", { class: "mono" }, holder.token)],
    ]);
  }
  /** @type {any[]} */
  const waiters = lock?.waiters ?? [];
  const total = lock?.waiters_total ?? 0;
  byId("queue-empty").hidden = waiters.length > 0;
  const more = byId("queue-more");
  more.hidden = total <= waiters.length;
  more.textContent = `The first ${formatNumber(waiters.length)} of ${
    formatNumber(total)
  } waiters are shown.`;
  byId("queue-body").replaceChildren(...waiters.map((waiter, index) => {
    const waitingFor = el("span", {}, formatDuration(waiter.waiting_for_ms));
    ticking.push([waitingFor, waiter.waiting_for_ms, now]);
    const kick = el("button", {
      type: "button",
      "aria-label": `Remove waiter ${waiter.remote_addr}`,
    }, "Remove…");
    kick.addEventListener("click", () => kickWaiter(name, waiter, lock));
    return el(
      "tr",
      { "data-remote-addr": waiter.remote_addr },
      el("td", { class: "number" }, index + 1),
      el("td", { class: "mono" }, waiter.remote_addr),
      el("td", {}, waiter.client_name),
      el("td", {}, waiter.identity),
      el("td", {}, waiter.queued_at),
      el("td", { class: "number" }, waitingFor),
      el("td", {}, kick),
    );
  }));
  const release = byId("force-release");
  release.onclick = () => forceRelease(name, lock);
}

/**
 * Cluster mode, on a node that does not serve: locks, actions and events are the leader's, so
 * say where they are (a link to the leader's console) instead of showing an empty table.
 */
function renderStandby() {
  const banner = byId("cluster-banner");
  const standby = state.standby;
  banner.hidden = standby === null;
  if (standby === null) return;
  const leader = standby.leader;
  const self = leader !== null && leader.node === standby.node;
  if (leader === null || self || leader.admin === null) {
    banner.replaceChildren(
      self
        ? `This node (${standby.node}) leads term ${leader.term} but is ${standby.role}: it serves nothing until its etcd lease is confirmed.`
        : `This node (${standby.node}) is ${standby.role}; ${
          leader === null
            ? "no leader is known yet."
            : `the leader ${leader.node} advertises no admin address.`
        }`,
    );
  } else {
    let href = "";
    try {
      const url = new URL(`http://${leader.admin}/`);
      href = url.protocol === "http:" ? url.href : "";
    } catch {
      href = "";
    }
    banner.replaceChildren(
      `This node (${standby.node}) is ${standby.role}: locks are served by the leader ${leader.node} (term ${leader.term}). `,
      href === "" ? leader.admin : el("a", { href }, `Open the leader's console (${leader.admin})`),
    );
  }
  byId("locks-body").replaceChildren();
  byId("page-status").textContent = "This node does not serve locks (see above).";
  byId("detail").hidden = true;
}

function renderCharts() {
  if (byId("charts").childElementCount === 0) {
    append(byId("charts"), charts.map((chart) => chart.element));
  }
  for (const chart of charts) chart.update(state.history);
}

function tick() {
  const now = performance.now();
  ticking = ticking.filter(([node]) => node.isConnected);
  for (const [node, baseMs, atMs] of ticking) {
    node.textContent = formatDuration(baseMs + now - atMs);
  }
}

// ---- actions ----------------------------------------------------------------------------

/** @param {string} name */
function select(name) {
  state.selected = name;
  for (const row of byId("locks-body").querySelectorAll("tr")) {
    row.classList.toggle("selected", row.querySelector("button")?.textContent === name);
  }
  loadDetail().then(() => byId("detail").scrollIntoView({ block: "nearest" })).catch(handleError);
}

/**
 * @param {string} name
 * @param {any} lock
 */
async function forceRelease(name, lock) {
  const holder = lock.holder;
  const next = lock.waiters[0];
  const confirmed = await confirmAction(`Force-release "${name}"?`, [
    `The holder ${holder.remote_addr}${
      clientText(holder.client_name)
    } (fencing token ${holder.token}) receives ERROR 0x02 (closed by administrator) and its connection is closed: every other lock it holds is released too, and its waits end.`,
    next === undefined
      ? "Nobody waits: the lock becomes idle."
      : `The first waiter, ${next.remote_addr}${
        clientText(next.client_name)
      }, gets the lock at once with a larger fencing token.`,
    "A standard client reports the lock as lost (reason force), reconnects with back-off and joins the tail of the queue if it asks again.",
  ], "Force-release");
  if (!confirmed) return;
  try {
    const after = await api(`${lockPath(name)}/release`, { method: "POST" });
    announce(
      after.holder === null
        ? `Released "${name}"; nobody was waiting.`
        : `Released "${name}"; ${after.holder.remote_addr} holds it now (token ${after.holder.token}).`,
    );
  } catch (error) {
    handleError(error);
  }
  await refresh();
}

/**
 * @param {string} name
 * @param {any} waiter
 * @param {any} lock
 */
async function kickWaiter(name, waiter, lock) {
  const position = lock.waiters.indexOf(waiter) + 1;
  const confirmed = await confirmAction(`Remove waiter ${waiter.remote_addr}?`, [
    `The waiter ${waiter.remote_addr}${
      clientText(waiter.client_name)
    }, number ${position} in the queue of "${name}", receives ERROR 0x02 (closed by administrator) and its connection is closed: its other locks and waits end too. The rest of the queue keeps its order.`,
    "A standard client reconnects with back-off and joins the tail of the queue again, from a new address.",
  ], "Remove waiter");
  if (!confirmed) return;
  try {
    await api(`${lockPath(name)}/waiters/${encodeURIComponent(waiter.remote_addr)}`, {
      method: "DELETE",
    });
    announce(`Removed waiter ${waiter.remote_addr} from "${name}".`);
  } catch (error) {
    handleError(error);
  }
  await refresh();
}

/** @param {string} clientName */
function clientText(clientName) {
  return clientName === "" ? "" : ` (${clientName})`;
}

/**
 * Asks in a modal dialog; resolves true when the operator confirms.
 * @param {string} title
 * @param {string[]} paragraphs
 * @param {string} confirmLabel
 * @returns {Promise<boolean>}
 */
function confirmAction(title, paragraphs, confirmLabel) {
  const dialog = /** @type {HTMLDialogElement} */ (byId("confirm-dialog"));
  byId("confirm-title").textContent = title;
  byId("confirm-text").replaceChildren(...paragraphs.map((text) => el("p", {}, text)));
  byId("confirm-ok").textContent = confirmLabel;
  dialog.returnValue = "";
  dialog.showModal();
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "confirm"), {
      once: true,
    });
  });
}

/** @param {string} text */
function announce(text) {
  byId("announce").textContent = text;
}

// ---- errors and the token -----------------------------------------------------------------

/** @param {string | null} text */
function showError(text) {
  const box = byId("error");
  box.hidden = text === null;
  box.textContent = text ?? "";
}

/** @param {string | null} text */
function showFilterError(text) {
  const box = byId("filter-error");
  box.hidden = text === null;
  box.textContent = text ?? "";
}

/** @param {unknown} error */
function handleError(error) {
  if (error instanceof HttpError && error.status === 401) {
    askToken(savedToken() === null ? null : "The admin API refused this token.");
    return;
  }
  if (error instanceof HttpError) {
    showError(`${error.status} ${error.problem?.title ?? ""}: ${error.message}`);
  } else showError(`Cannot reach the admin API: ${error instanceof Error ? error.message : error}`);
}

/** @type {Promise<void> | null} */
let tokenAsked = null;

/**
 * Shows the token dialog until a token is entered; resolves then.
 * @param {string | null} problem
 * @returns {Promise<void>}
 */
function askToken(problem) {
  forgetToken();
  const error = byId("token-error");
  if (problem !== null || tokenAsked === null) {
    error.hidden = problem === null;
    error.textContent = problem ?? "";
  }
  tokenAsked ??= new Promise((resolve) => {
    const dialog = /** @type {HTMLDialogElement} */ (byId("token-dialog"));
    const input = /** @type {HTMLInputElement} */ (byId("token"));
    input.value = "";
    byId("token-form").addEventListener("submit", () => {
      saveToken(input.value.trim());
      byId("forget-token").hidden = false;
      tokenAsked = null;
      resolve();
      void start();
    }, { once: true });
    // Without a token nothing works: Escape does not close this dialog.
    dialog.addEventListener("cancel", (event) => event.preventDefault());
    if (!dialog.open) dialog.showModal();
    input.focus();
  });
  return tokenAsked;
}

// ---- the event stream ---------------------------------------------------------------------

let streamAbort = new AbortController();

/** (Re)starts everything: history, a refresh, and the event stream. */
async function start() {
  streamAbort.abort();
  streamAbort = new AbortController();
  const signal = streamAbort.signal;
  state.version = -1;
  try {
    await refresh();
    if (state.standby === null) await loadHistory();
  } catch (error) {
    handleError(error);
  }
  while (!signal.aborted) {
    if (state.standby !== null) {
      // A standby has no lock events (they would redirect to the leader): look again now and then.
      setConnection("live", "Standby");
      await new Promise((resolve) => setTimeout(resolve, RECONNECT_MS));
      if (signal.aborted) return;
      await refresh();
      if (state.standby === null) await loadHistory().catch(handleError);
      continue;
    }
    try {
      await readEvents(onEvent, signal);
      setConnection("down", "The server ended the event stream; reconnecting…");
    } catch (error) {
      if (signal.aborted) return;
      if (error instanceof HttpError && error.status === 401) {
        handleError(error);
        return; // start() runs again once a token is entered.
      }
      setConnection("down", "Disconnected; reconnecting…");
    }
    await new Promise((resolve) => setTimeout(resolve, RECONNECT_MS));
    if (signal.aborted) return;
    try {
      await loadHistory();
    } catch {
      // The stream's own error says what is wrong.
    }
  }
}

/**
 * @param {string} name
 * @param {any} data
 */
function onEvent(name, data) {
  if (name === "state") {
    setConnection("live", "Live");
    renderCounts({
      locks: data.locks,
      held: data.held,
      waiters: data.waiters,
      sessions: data.sessions,
    });
    if (data.version !== state.version) {
      state.version = data.version;
      void refresh();
    }
  } else if (name === "snapshot") {
    state.history.push(data);
    if (state.history.length > HISTORY_MAX) state.history.shift();
    renderCharts();
  }
}

/**
 * @param {"live" | "down"} kind
 * @param {string} text
 */
function setConnection(kind, text) {
  const status = byId("connection");
  if (status.getAttribute("data-state") === kind && status.textContent === text) return;
  status.setAttribute("data-state", kind);
  status.textContent = text;
}

// ---- wiring -------------------------------------------------------------------------------

function wire() {
  byId("filter-form").addEventListener("submit", (event) => {
    event.preventDefault();
    state.match = /** @type {HTMLInputElement} */ (byId("filter")).value.trim();
    state.offset = 0;
    void refresh();
  });
  for (const button of document.querySelectorAll("th button[data-sort]")) {
    button.addEventListener("click", () => {
      const key = /** @type {"name" | "held_for" | "waiters"} */ (button.getAttribute("data-sort"));
      if (state.sort === key) state.descending = !state.descending;
      else {
        state.sort = key;
        // Longest held and longest queues first: what an operator looks for.
        state.descending = key !== "name";
      }
      state.offset = 0;
      void refresh();
    });
  }
  byId("prev-page").addEventListener("click", () => {
    state.offset = Math.max(0, state.offset - PAGE_SIZE);
    void refresh();
  });
  byId("next-page").addEventListener("click", () => {
    state.offset += PAGE_SIZE;
    void refresh();
  });
  byId("forget-token").hidden = savedToken() === null;
  byId("forget-token").addEventListener("click", () => {
    streamAbort.abort();
    askToken(null);
  });
  setInterval(tick, 1_000);
}

wire();
void start();
