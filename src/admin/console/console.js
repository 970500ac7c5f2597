// @ts-check
/// <reference lib="dom" />
/**
 * The lockd operator console: overview, charts, a paged and sorted locks
 * table, one lock's holders and queue (every owner of a shared lock or a semaphore, with its mode
 * or slot and its value as text), and the two operator actions. It reads
 * the admin API with the tab's token and looks again whenever the event
 * stream (`GET /api/events`) says the locks changed, so a change shows within
 * a second; durations tick in the page between answers. When no stream can be
 * had (the server answers 503: too many streams), the page says why and polls.
 * Each lock has a URL (`#/locks/<name, percent-encoded>`) that opens its view.
 */

import { api, forgetToken, HttpError, lockPath, readEvents, savedToken, saveToken } from "./api.js";
import { Chart, CHARTS } from "./charts.js";
import {
  append,
  byId,
  el,
  fillPairs,
  formatDuration,
  formatNumber,
  patchRows,
  valueText,
} from "./dom.js";

const PAGE_SIZE = 50;
/** Waiters shown in the detail: a queue of 20,000 would cost the server and the page too much. */
const QUEUE_SHOWN_MAX = 200;
const RECONNECT_MS = 2_000;
/** Without an event stream: how often the page looks again, and tries the stream again. */
const POLL_MS = 2_000;
const STREAM_RETRY_MS = 30_000;
/** The fragment of a lock's URL: `#/locks/` and the name as one percent-encoded segment. */
const LOCK_HASH_PREFIX = "#/locks/";
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

/**
 * Duration cells that tick between answers: [node, milliseconds when fetched, fetched at]. Nodes
 * no longer in the page (drawn over) drop out at the next tick.
 */
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
  // Held and waiting come with the event stream; without one (polling), the newest snapshot.
  const newest = state.history[state.history.length - 1];
  if (newest !== undefined) renderCounts({ held: newest.locks_held, waiters: newest.waiters });
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
    ...Object.entries(info.config).map(([key, value]) => configPair(key, value)),
  ]);
  const extra = Object.entries(info).filter(([key]) => !SPEC_INFO_FIELDS.has(key));
  byId("cluster").hidden = extra.length === 0;
  fillPairs(
    byId("cluster-info"),
    extra.flatMap(([key, value]) =>
      key === "cluster" && value !== null && typeof value === "object"
        ? clusterPairs(value)
        : flatten(humanize(key), value)
    ),
  );
}

/**
 * The configuration block in words: a label (with the flag) and a value people read, per key
 * of `config` in GET /api/info. A key not listed here (a newer server) shows humanized.
 * @type {Record<string, [string, (value: any) => string]>}
 */
const CONFIG_LABELS = {
  listen: ["Lock listener (-listen)", (v) => String(v)],
  ops_listen: ["Metrics and health listener (-ops-listen)", (v) => v === "" ? "off" : String(v)],
  tls: ["TLS on the lock listener", (v) => v ? "on" : "off"],
  mtls: ["Client certificates (mutual TLS)", (v) => v ? "required" : "not required"],
  acl_file: [
    "ACL file (-acl-file)",
    (v) => v === "" ? "none: every client may take every lock" : String(v),
  ],
  audit_log: ["Audit log (-audit-log)", (v) => v === "-" ? "standard output" : String(v)],
  io_timeout_ms: ["I/O timeout (-io-timeout)", (v) => formatDuration(Number(v))],
};

/**
 * @param {string} key
 * @param {unknown} value
 * @returns {[string, string]}
 */
function configPair(key, value) {
  const known = CONFIG_LABELS[key];
  return known === undefined ? [humanize(key), String(value)] : [known[0], known[1](value)];
}

/**
 * `safe_until_ms` → `Safe until (ms)`: a field name for people when no label is known.
 * @param {string} key
 */
function humanize(key) {
  const words = key.split(/[_.]/).filter((w) => w !== "");
  const unit = words.length > 1 && words[words.length - 1] === "ms" ? words.pop() : null;
  const text = words.join(" ");
  return `${text.charAt(0).toUpperCase()}${text.slice(1)}${unit === null ? "" : ` (${unit})`}`;
}

/** @param {number | null | undefined} ms */
function durationOrNone(ms) {
  return typeof ms === "number" ? formatDuration(ms) : "none";
}

/**
 * Cluster mode's block of GET /api/info (`cluster`) in words; fields not known here are shown
 * humanized after the known ones.
 * @param {any} cluster
 * @returns {[string, string][]}
 */
function clusterPairs(cluster) {
  /** @type {Record<string, [string, (value: any) => string]>} */
  const labels = {
    status_text: ["Status of this node", String],
    status: ["Phase", String],
    name: ["Cluster", String],
    node: ["This node", String],
    advertise: ["This node's lock address", String],
    role: ["Role of this node", String],
    serving: ["Serves locks", (v) => v ? "yes" : "no"],
    term: ["Term this node leads", (v) => v === 0 ? "none" : String(v)],
    leader: [
      "Leader",
      (v) =>
        v === null
          ? "none known"
          : `${v.node} at ${v.advertise} (term ${v.term}; admin ${v.admin ?? "not advertised"})`,
    ],
    safe_until_ms: ["etcd lease left", (v) => v === null ? "no lease" : durationOrNone(v)],
    ttl_ms: ["etcd lease TTL", durationOrNone],
    token_high_water: ["Fencing tokens reserved up to", String],
    lease_horizon_ms: ["Longest lease promised past the etcd lease", durationOrNone],
    records: ["Ownership records in etcd (as this node knows them)", String],
    reserved_locks: ["Locks kept for reclaims on this node", String],
    window_ends_in_ms: [
      "Reclaim window ends in",
      (v) => v === null ? "no window open" : durationOrNone(v),
    ],
    etcd: [
      "etcd",
      (v) =>
        Array.isArray(v)
          ? v.map((e) =>
            `${e.endpoint}: ${e.healthy ? "healthy" : `unhealthy (${e.error ?? "no answer"})`}, ${
              formatDuration(e.took_ms)
            }`
          ).join("; ")
          : String(v),
    ],
  };
  /** @type {[string, string][]} */
  const pairs = [];
  for (const [key, [label, show]] of Object.entries(labels)) {
    if (key in cluster) pairs.push([label, show(cluster[key])]);
  }
  for (const [key, value] of Object.entries(cluster)) {
    if (!(key in labels)) pairs.push(...flatten(humanize(key), value));
  }
  return pairs;
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
  // A standby's figures are its own (it serves nothing): labelled so, never read as the cluster's.
  const own = state.standby === null ? "" : " (this node)";
  for (const [id, label] of COUNTS) {
    const dt = list.querySelector(`[data-count="${id}"] dt`);
    if (dt !== null) dt.textContent = `${label}${own}`;
  }
}

/** @param {{ locks: any[], total: number }} page */
function renderLocks(page) {
  const now = performance.now();
  const rows = page.locks.map((lock) => {
    const holder = lock.holder;
    const heldFor = el("span", {}, holder === null ? "–" : formatDuration(holder.held_for_ms));
    if (holder !== null) ticking.push([heldFor, holder.held_for_ms, now]);
    const open = el("button", {
      type: "button",
      class: "name",
      "aria-label": `Show lock ${lock.name}`,
    }, lock.name);
    // A property, not a listener: patchRows hands it to a row it keeps.
    open.onclick = () => select(lock.name);
    return el(
      "tr",
      { class: lock.name === state.selected ? "selected" : null },
      el("td", {}, open, ...lockBadges(lock)),
      el("td", { class: "mono" }, holderCell(lock), ...disconnectedBadges(lock)),
      el("td", {}, holder === null ? "" : holder.client_name),
      el("td", { class: "number" }, heldFor),
      el("td", { class: "number" }, lock.waiters_total),
      el("td", { class: "number mono" }, holder === null ? "" : holder.token),
    );
  });
  patchRows(byId("locks-body"), rows);
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
 * The badges of a lock: its kind with owners (and limit) for shared locks and semaphores, and a
 * lock-delay or reservation holding grants back.
 * @param {any} lock
 * @returns {HTMLElement[]}
 */
function lockBadges(lock) {
  const badges = [];
  const owners = lock.holders?.length ?? 0;
  if (lock.kind === "semaphore") {
    badges.push(
      badge("kind", `semaphore ${owners}/${lock.limit}`, `${owners} of ${lock.limit} slots taken`),
    );
  } else if (lock.kind === "shared") {
    badges.push(badge("kind", `shared ${owners}`, `read/write lock with ${owners} owner(s)`));
  }
  if (lock.delayed_until !== undefined) {
    badges.push(badge("delay", "lock-delay", `nothing is granted until ${lock.delayed_until}`));
  }
  if (lock.reserved_until !== undefined) {
    badges.push(badge("reserved", "reserved", `held for reclaims until ${lock.reserved_until}`));
  }
  return badges;
}

/**
 * @param {string} kind
 * @param {string} text
 * @param {string} title
 */
function badge(kind, text, title) {
  return el("span", { class: `badge badge-${kind}`, title }, text);
}

/**
 * A "disconnected" badge when an owner of the lock is orphaned (protocol version 2): its
 * connection ended without GOODBYE, and it keeps the lock until its lease ends or its client
 * resumes the session (the admin API's `connected: false`).
 * @param {any} lock
 * @returns {HTMLElement[]}
 */
function disconnectedBadges(lock) {
  /** @type {any[]} */
  const owners = lock.holders ?? (lock.holder === null ? [] : [lock.holder]);
  const orphaned = owners.filter((holder) => holder.connected === false).length;
  if (orphaned === 0) return [];
  const text = owners.length > 1 ? `${orphaned} disconnected` : "disconnected";
  return [badge("disconnected", text, DISCONNECTED_TITLE)];
}

/** What the "disconnected" badge means, as its tooltip. */
const DISCONNECTED_TITLE =
  "connection ended without GOODBYE: the lock is kept until its lease ends or its client resumes";

/** The badge of one holder, when its session is orphaned. @param {any} holder */
function holderDisconnected(holder) {
  return holder.connected === false
    ? badge("disconnected", "disconnected", DISCONNECTED_TITLE)
    : null;
}

/** The holder column: the oldest owner, `+N` for the others. @param {any} lock */
function holderCell(lock) {
  if (lock.holder === null) return "(no owner)";
  const others = (lock.holders?.length ?? 1) - 1;
  return others > 0 ? `${lock.holder.remote_addr} +${others}` : lock.holder.remote_addr;
}

/**
 * Why a stored lock has no owner, for the holder block.
 * @param {any} lock
 */
function ownerlessText(lock) {
  if (lock.delayed_until !== undefined) {
    return `none: a lock-delay after a non-graceful end holds grants back until ${lock.delayed_until}`;
  }
  if (lock.reserved_until !== undefined) {
    return `none: reserved for reclaims after a fail-over until ${lock.reserved_until}`;
  }
  return "none (grants are paused)";
}

/**
 * The kind, mode, slot, write generation and value pairs of a holder, where they apply.
 * @param {any} holder
 * @returns {[string, Node | string | number][]}
 */
function holderExtras(holder) {
  /** @type {[string, Node | string | number][]} */
  const pairs = [];
  if (holder.mode !== undefined) pairs.push(["Mode", holder.mode]);
  if (holder.slot !== undefined) pairs.push(["Slot", holder.slot]);
  if (holder.write_generation !== undefined) {
    pairs.push(["Write generation", el("span", { class: "mono" }, holder.write_generation)]);
  }
  const value = valueText(holder);
  if (value !== null) pairs.push(["Value", el("span", { class: "mono value" }, value)]);
  return pairs;
}

/**
 * A holder's session, and when its connection is gone, that it keeps the lock until its lease
 * ends (as `lockd admin show` says it).
 * @param {any} holder
 */
function sessionText(holder) {
  if (holder.connected !== false) return String(holder.session);
  return el(
    "span",
    {},
    String(holder.session),
    holderDisconnected(holder),
    " kept until its lease ends or its client resumes",
  );
}

/**
 * Every owner of a shared lock or a semaphore, oldest first, each with its own release.
 * @param {string} name
 * @param {any} lock
 * @param {number} now
 */
function renderHolders(name, lock, now) {
  /** @type {any[]} */
  const holders = lock?.holders ?? [];
  byId("detail-holders").hidden = holders.length === 0;
  byId("holders-place").textContent = lock?.kind === "semaphore" ? "Slot" : "Mode";
  const rows = holders.map((holder, index) => {
    const heldFor = el("span", {}, formatDuration(holder.held_for_ms));
    ticking.push([heldFor, holder.held_for_ms, now]);
    const release = el("button", {
      type: "button",
      class: "danger",
      "aria-label": `Release owner ${holder.remote_addr} (token ${holder.token})`,
    }, "Release…");
    release.onclick = () => releaseOwner(name, holder);
    return el(
      "tr",
      { "data-token": holder.token },
      el("td", { class: "number" }, index + 1),
      el("td", {}, lock.kind === "semaphore" ? holder.slot : holder.mode),
      el("td", { class: "mono" }, holder.remote_addr, holderDisconnected(holder)),
      el("td", {}, holder.client_name),
      el("td", { class: "number mono" }, holder.token),
      el("td", { class: "number" }, heldFor),
      el("td", { class: "mono value" }, valueText(holder) ?? ""),
      el("td", {}, release),
    );
  });
  patchRows(byId("holders-body"), rows);
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
  byId("detail-link").setAttribute("href", lockHash(name));
  byId("copy-link").onclick = () => copyLink(name);
  byId("detail-idle").hidden = lock !== null;
  const holder = lock?.holder ?? null;
  byId("detail-holder").hidden = lock === null;
  /** @type {HTMLButtonElement} */ (byId("force-release")).disabled = holder === null;
  byId("detail-badges").replaceChildren(...(lock === null ? [] : lockBadges(lock)));
  const several = (lock?.holders?.length ?? 0) > 1;
  byId("force-release").textContent = several ? "Force-release all owners…" : "Force-release…";
  byId("holder-title").textContent = lock?.holders === undefined ? "Holder" : "Oldest holder";
  renderHolders(name, lock, now);
  if (holder === null) {
    fillPairs(byId("holder"), [["Owner", lock === null ? "none" : ownerlessText(lock)]]);
  } else {
    const heldFor = el("span", {}, formatDuration(holder.held_for_ms));
    ticking.push([heldFor, holder.held_for_ms, now]);
    fillPairs(byId("holder"), [
      ["Identity", holder.identity === "" ? "(none: no mutual TLS)" : holder.identity],
      ["Client name", holder.client_name === "" ? "(none)" : holder.client_name],
      ["Remote address", el("span", { class: "mono" }, holder.remote_addr)],
      ["Session", sessionText(holder)],
      ["Since", holder.since],
      ["Held for", heldFor],
      ["Lease", formatDuration(holder.lease_ms)],
      ["Fencing token", el("span", { class: "mono" }, holder.token)],
      ...holderExtras(holder),
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
  const rows = waiters.map((waiter, index) => {
    const waitingFor = el("span", {}, formatDuration(waiter.waiting_for_ms));
    ticking.push([waitingFor, waiter.waiting_for_ms, now]);
    const kick = el("button", {
      type: "button",
      "aria-label": `Remove waiter ${waiter.remote_addr}`,
    }, "Remove…");
    kick.onclick = () => kickWaiter(name, waiter, lock);
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
  });
  patchRows(byId("queue-body"), rows);
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
  const cluster = state.info.cluster;
  // The serving leader in its reclaim window says so too, in the server's words.
  const reclaiming = standby === null && cluster !== undefined && cluster.status === "reclaiming";
  banner.hidden = standby === null && !reclaiming;
  labelOwnFigures(standby);
  if (reclaiming) {
    banner.replaceChildren(
      `This node (${cluster.node}) is ${cluster.status_text}. Locks held before the fail-over are kept for their holders until then (marked "reserved").`,
    );
    return;
  }
  if (standby === null) return;
  const leader = standby.leader;
  const self = leader !== null && leader.node === standby.node;
  if (leader === null || self || leader.admin === null) {
    // The server's status line (electing, taking over, paused), when it has one.
    const status = typeof standby.status_text === "string" ? standby.status_text : null;
    banner.replaceChildren(
      status !== null
        ? `This node (${standby.node}) is ${status}${
          leader !== null && !self && leader.admin === null
            ? `; the leader ${leader.node} advertises no admin address.`
            : "."
        }`
        : self
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

/**
 * On a standby the overview's figures are this node's own, and it has no lock history: say so
 * next to them (and hide charts drawn while it led), so nobody reads them as the cluster's.
 * @param {any} standby `info.cluster` of a node that does not serve, or null
 */
function labelOwnFigures(standby) {
  const nodeNote = byId("node-note");
  const chartsNote = byId("charts-note");
  nodeNote.hidden = standby === null;
  chartsNote.hidden = standby === null;
  byId("charts").hidden = standby !== null;
  byId("overview-title").textContent = standby === null
    ? "Overview"
    : `Overview of this node (${standby.node})`;
  if (standby === null) return;
  nodeNote.textContent =
    `These figures are this node's own (${standby.node}, ${standby.role}): it serves no locks, so its counts say nothing about the cluster's locks. The leader's console shows those.`;
  chartsNote.textContent =
    `This node (${standby.node}) serves no locks and keeps no lock history: the leader's console has the charts.`;
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

/**
 * Shows one lock's detail; its URL (`#/locks/...`) goes into the address bar and the history.
 * @param {string} name
 * @param {boolean} [fromUrl] the address bar named it already (a pasted link, Back)
 */
function select(name, fromUrl = false) {
  state.selected = name;
  if (!fromUrl && location.hash !== lockHash(name)) history.pushState(null, "", lockHash(name));
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
  if ((lock.holders?.length ?? 1) > 1) return forceReleaseAll(name, lock);
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
    // The precondition: only the holder this dialog was opened on (its fencing token) is
    // released; if the lock changed hands meanwhile, the server answers 409 and nothing happens.
    const after = await api(
      `${lockPath(name)}/release?token=${encodeURIComponent(String(holder.token))}`,
      { method: "POST" },
    );
    announce(
      after.holder === null
        ? `Released "${name}"; nobody was waiting.`
        : `Released "${name}"; ${after.holder.remote_addr} holds it now (token ${after.holder.token}).`,
    );
  } catch (error) {
    if (error instanceof HttpError && error.status === 409) {
      await showNotice(`Not released: "${name}"`, [
        `The server refused (409 ${error.problem?.title ?? "Conflict"}): ${error.message}`,
        error.slug === "lock-has-no-owner"
          ? "Nothing was released."
          : `Nothing was released: this dialog was opened on the holder ${holder.remote_addr} with fencing token ${holder.token}, and the lock is no longer theirs. Look at the lock again before you decide.`,
      ]);
    } else handleError(error);
  }
  await refresh();
}

/**
 * A lock with several owners (a shared lock's readers, a semaphore's slots): every owner it has
 * when the operator confirms is ended, each with ERROR 0x02.
 * @param {string} name
 * @param {any} lock
 */
async function forceReleaseAll(name, lock) {
  const owners = lock.holders.length;
  const confirmed = await confirmAction(`Force-release every owner of "${name}"?`, [
    `Each of its ${owners} owners (${
      lock.holders.map((/** @type {any} */ h) => `${h.remote_addr}, token ${h.token}`).join("; ")
    }), and any that joined since, receives ERROR 0x02 (closed by administrator) and its connection is closed: every other lock it holds is released too, and its waits end.`,
    "To end one owner only, use its own Release button in the Holders table.",
  ], "Force-release all");
  if (!confirmed) return;
  try {
    const after = await api(`${lockPath(name)}/release`, { method: "POST" });
    announce(`Released every owner of "${name}"; ${after.holders?.length ?? 0} own it now.`);
  } catch (error) {
    handleError(error);
  }
  await refresh();
}

/**
 * Ends one owner of a shared lock or semaphore: only the ownership with this fencing token
 * (the server answers 409 if it ended meanwhile).
 * @param {string} name
 * @param {any} holder
 */
async function releaseOwner(name, holder) {
  const confirmed = await confirmAction(`Release owner ${holder.remote_addr}?`, [
    `The owner ${holder.remote_addr}${
      clientText(holder.client_name)
    } (fencing token ${holder.token}) of "${name}" receives ERROR 0x02 (closed by administrator) and its connection is closed: every other lock it holds is released too, and its waits end. The other owners keep the lock.`,
  ], "Release owner");
  if (!confirmed) return;
  try {
    await api(`${lockPath(name)}/release?token=${encodeURIComponent(String(holder.token))}`, {
      method: "POST",
    });
    announce(`Released owner ${holder.remote_addr} (token ${holder.token}) of "${name}".`);
  } catch (error) {
    if (error instanceof HttpError && error.status === 409) {
      await showNotice(`Not released: "${name}"`, [
        `The server refused (409 ${error.problem?.title ?? "Conflict"}): ${error.message}`,
        "Nothing was released. Look at the lock again before you decide.",
      ]);
    } else handleError(error);
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

/**
 * Tells the operator something that needs reading (an action the server refused) in a modal
 * dialog; resolves when it is closed.
 * @param {string} title
 * @param {string[]} paragraphs
 * @returns {Promise<void>}
 */
function showNotice(title, paragraphs) {
  const dialog = /** @type {HTMLDialogElement} */ (byId("notice-dialog"));
  byId("notice-title").textContent = title;
  byId("notice-text").replaceChildren(...paragraphs.map((text) => el("p", {}, text)));
  dialog.showModal();
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(), { once: true });
  });
}

/**
 * `#/locks/<name>`: the fragment of a lock's URL (never sent to the server).
 * @param {string} name
 */
function lockHash(name) {
  return `${LOCK_HASH_PREFIX}${encodeURIComponent(name)}`;
}

/**
 * The lock the address bar names, or null (another fragment, or a malformed escape).
 * @returns {string | null}
 */
function lockFromUrl() {
  if (!location.hash.startsWith(LOCK_HASH_PREFIX)) return null;
  try {
    const name = decodeURIComponent(location.hash.slice(LOCK_HASH_PREFIX.length));
    return name === "" ? null : name;
  } catch {
    return null;
  }
}

/** @param {string} name */
function copyLink(name) {
  const url = new URL(lockHash(name), location.href).href;
  navigator.clipboard.writeText(url).then(
    () => announce(`Copied the link to "${name}": ${url}`),
    () => announce(`Cannot copy here; the link to "${name}" is ${url}`),
  );
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
    // Opened from a lock's URL: its view is what the reader came for.
    if (state.selected !== null && !byId("detail").hidden) {
      byId("detail").scrollIntoView({ block: "start" });
    }
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
      if (error instanceof HttpError) {
        // The admin API answers, but gives no stream (503 too-many-streams): poll instead.
        await poll(error, signal);
        continue;
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
 * No event stream: says why, then looks again every POLL_MS for STREAM_RETRY_MS (the locks,
 * the detail, the charts), after which the caller tries the stream again.
 * @param {HttpError} why the stream's refusal
 * @param {AbortSignal} signal
 */
async function poll(why, signal) {
  setConnection(
    "polling",
    `No live updates: the server gives no event stream (${why.status} ${
      why.problem?.title ?? ""
    }: ${why.message}). Polling every ${POLL_MS / 1_000} s instead.`,
  );
  const untilMs = performance.now() + STREAM_RETRY_MS;
  while (!signal.aborted && performance.now() < untilMs) {
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
    if (signal.aborted) return;
    await refresh();
    if (state.standby === null) await loadHistory().catch(() => {});
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
 * @param {"live" | "down" | "polling"} kind
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
  // A lock's URL opens its view; Back and Forward move between the locks looked at.
  state.selected = lockFromUrl();
  const followUrl = () => {
    const name = lockFromUrl();
    if (name !== null && name !== state.selected) select(name, true);
  };
  addEventListener("hashchange", followUrl);
  addEventListener("popstate", followUrl);
  byId("forget-token").hidden = savedToken() === null;
  byId("forget-token").addEventListener("click", () => {
    streamAbort.abort();
    askToken(null);
  });
  setInterval(tick, 1_000);
}

wire();
void start();
