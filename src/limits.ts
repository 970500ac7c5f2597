/**
 * Every bound and default of lockd in one place. Names end in the unit, then `_MIN`, `_MAX` or
 * `_DEFAULT` when the value bounds or defaults a setting (`LEASE_MS_MAX_DEFAULT` is the default
 * of the longest lease; `FRAME_BYTES_MAX_MAX` the largest allowed frame limit). Each has a
 * one-line reason. `tests/limits_test.ts` checks the relations between them (every default
 * within its bounds, the largest frame the server sends within the smallest frame limit, ...),
 * and `src/config.ts` maps each flag onto them.
 */

// ---- wire protocol: sizes ------------------------------------------------------------------

/** Lock names are 1..1024 UTF-8 bytes: long enough for paths, short enough to index cheaply. */
export const LOCK_NAME_BYTES_MAX = 1024;
/** Client names (HELLO) are informational; a longer one gets INVALID_ARGUMENT and the connection closes. */
export const CLIENT_NAME_BYTES_MAX = 256;
/** Error messages on the wire are cut to this many bytes (with "…"), so ERROR frames are bounded. */
export const ERROR_MESSAGE_BYTES_MAX = 1024;
/**
 * Largest frame (length prefix excluded) the server itself sends: an ERROR carrying a longest
 * lock name and a longest message (type 1 + request id 4 + code 1 + two strings with u16
 * lengths). An ERROR echoing a longer, invalid name is cut to fit (src/protocol/session.ts).
 */
export const SERVER_FRAME_BYTES_MAX = 1 + 4 + 1 + 2 + LOCK_NAME_BYTES_MAX + 2 +
  ERROR_MESSAGE_BYTES_MAX;
/**
 * Largest valid request (length prefix excluded): an ACQUIRE or RELEASE with a longest lock name
 * (type 1 + 12 bytes of fields + 2 + 1024). Longer frames are answered (INVALID_ARGUMENT for
 * the name), but a correct client never sends one, so their partial buffers are rationed
 * (PARTIAL_FRAME_BYTES_TOTAL_MAX).
 */
export const REQUEST_FRAME_BYTES_MAX = 1 + 4 + 4 + 4 + 2 + LOCK_NAME_BYTES_MAX;
/**
 * Largest frame a peer may send (length prefix excluded), checked before the body is read.
 * Flag `-max-frame-bytes`. The smallest allowed limit is what the server must be able to send
 * (and every valid request is smaller); the largest is what clients read (64 KiB): a lock name
 * is at most 1 KiB, so nothing larger is ever needed.
 */
export const FRAME_BYTES_MAX_DEFAULT = 64 * 1024;
export const FRAME_BYTES_MAX_MIN = SERVER_FRAME_BYTES_MAX;
export const FRAME_BYTES_MAX_MAX = 64 * 1024;
/**
 * Longest glob in UTF-8 bytes: `GET /api/locks?match=` and each glob of an ACL rule; longer ones
 * are refused (400, or `file:line` in the ACL file). A lock name is at most 1024 bytes, so a longer
 * glob adds matching work, not reach. Matching takes at most 2 × ceil((bytes + 1) / 32) + 12 steps
 * per code point of a name (`src/security/glob.ts`).
 */
export const GLOB_BYTES_MAX = 1024;

// ---- sessions and locks (flags; defaults sized for one server) -----------------------------

/** Open sessions at once; connections beyond are refused with LIMIT_EXCEEDED. Flag `-max-sessions`. */
export const SESSIONS_MAX_DEFAULT = 16_384;
/**
 * Cluster mode: requests one session may have waiting in its reader while the leader cannot prove
 * its leadership (a pause lasts at most TTL + margin): beyond it the session reads no more until
 * they are handled. A client that heartbeats every 100 ms sends 600 in a minute; reads still
 * decode up to READ_BUFFER_BYTES_MAX at a time, so at most this plus one read's worth is held.
 */
export const HELD_REQUESTS_PER_SESSION_MAX = 4_096;
/** Claims (owned or queued) one session may hold. Flag `-max-claims-per-session`. */
export const CLAIMS_PER_SESSION_MAX_DEFAULT = 1_024;
/** Waiters one lock may queue. Flag `-max-waiters-per-lock`. */
export const WAITERS_PER_LOCK_MAX_DEFAULT = 65_536;
/**
 * Claims (owned or queued) stored at once, server-wide; more get LIMIT_EXCEEDED. Sized for the
 * memory budget of docs/operations.md ("Memory and limits"): a stored claim costs 500 to 750
 * bytes with a 30-byte name and 2.3 KiB with a 1,024-byte one (`deno task memory`), so 262,144
 * claims take 130 MiB to 600 MiB. Without it, the per-session and per-lock limits allowed 16.7 million
 * claims (64 GiB). Flag `-max-claims`.
 */
export const CLAIMS_MAX_DEFAULT = 262_144;
/**
 * The largest semaphore limit N a claim or a rule may ask for. Owners are stored claims (bounded
 * by -max-claims) either way; this bound keeps a mistyped limit from meaning "no limit" and the
 * slot index within what one lock can have (as many as its queue may hold).
 */
export const SEMAPHORE_LIMIT_MAX = WAITERS_PER_LOCK_MAX_DEFAULT;
/**
 * A holder's value (issue 23: the leader's address, a small JSON document), 1 KiB by default:
 * every owner and waiter may carry one, so the memory budget of -max-claims grows by at most
 * this much per claim.
 */
export const LOCK_VALUE_BYTES_MAX_DEFAULT = 1024;
/**
 * The largest `-max-lock-value-bytes`: 16 KiB, so a value with the longest lock name, client
 * name and identity still fits in one LOCK_STATE within the 64 KiB frames clients read. 0 turns
 * values off (WELCOME says 0; a claim with a value is refused).
 */
export const LOCK_VALUE_BYTES_MAX_MAX = 16 * 1024;
/**
 * Largest `valueBytesMax` a version-2 WELCOME may announce (a value's length is a u16 on the
 * wire): a client takes a larger one for a protocol error.
 */
export const WELCOME_VALUE_BYTES_MAX = 0xffff;
/**
 * Connections that have not completed their HELLO, at once; a new one past it closes the
 * oldest (LIMIT_EXCEEDED). Correct clients send HELLO at once, so only a flood of silent or
 * slow connections fills it; each costs about 7 KiB. Counted apart from `-max-sessions`, so
 * such a flood cannot lock out clients that do complete their handshake. Flag `-max-handshakes`.
 */
export const HANDSHAKES_MAX_DEFAULT = 1_024;

/**
 * WATCHes one session may have at once (protocol version 2); one more is refused with
 * LIMIT_EXCEEDED. Each costs a little memory and a look at every change of the locks it matches.
 */
export const WATCHES_PER_SESSION_MAX = 16;
/**
 * Locks one WATCH may match at once (existing locks its glob matches, readable by the session):
 * a watch that would match more ends with WATCH_ENDED (too many locks). It bounds the snapshot
 * and the events that may wait for a slow reader: at most one per lock and watch.
 */
export const LOCKS_PER_WATCH_MAX = 1_024;
/**
 * Bytes of LOCK_STATE frames a session's watches hand to its connection at once: the next batch
 * follows once these are written (a slow reader gets fewer, later, coalesced events, never a
 * backlog), so a snapshot of many locks never fills the reply buffer (WRITE_BUFFER_BYTES_MAX).
 */
export const WATCH_BATCH_BYTES_MAX = 64 * 1024;
/**
 * The share of the server's time that sending watch events may take while changes come fast:
 * after a round that took t ms, the next waits until t / share ms after it began (the changes
 * meanwhile are coalesced). On 2 shared, loaded cores (bench/watch_fanout.ts) a lock handed off
 * as fast as one client goes kept 0.88-0.99 of its rate with 1,000 watchers at 0.07, each told
 * about 5 times a second (at 0.1: 0.77-0.86, 7 times); a quiet server sends each event at once.
 */
export const WATCH_FANOUT_TIME_SHARE = 0.07;
/**
 * Sessions told per turn of a watch fan-out, other work running between turns: a request waits
 * for about this many socket writes (10-20 µs each), not a thousand (fewer: more timers).
 */
export const WATCH_FANOUT_SESSIONS_PER_TURN = 32;

// ---- time: leases, timeouts, shutdown (flags) ----------------------------------------------

/** Lease used when ACQUIRE asks for 0. Flag `-default-lease`. */
export const LEASE_MS_DEFAULT = 15_000;
/** Shortest lease granted; shorter requests are clamped up so heartbeats (every lease/3) keep up. */
export const LEASE_MS_MIN = 50;
/** Longest lease granted; longer requests are clamped. Flag `-max-lease`. */
export const LEASE_MS_MAX_DEFAULT = 300_000;
/** One day: a holder that cannot renew for a day is gone, and a dead holder blocks a lock this long. */
export const LEASE_MS_MAX_MAX = 86_400_000;
/** A session that sends nothing for this long is closed (reason io_timeout). Flag `-io-timeout`. */
export const IO_TIMEOUT_MS_DEFAULT = 30_000;
/** Clients heartbeat every io_timeout/3: shorter would be a heartbeat storm. */
export const IO_TIMEOUT_MS_MIN = 100;
/** One hour: a half-open connection keeps its claims at most this long. */
export const IO_TIMEOUT_MS_MAX = 3_600_000;
/** A connection that has not sent HELLO by then is closed. Flag `-handshake-timeout`. */
export const HANDSHAKE_TIMEOUT_MS_DEFAULT = 5_000;
/** Shorter than a TLS handshake over a slow link. */
export const HANDSHAKE_TIMEOUT_MS_MIN = 10;
/** Five minutes: a HELLO follows the connect at once; longer only shelters idle sockets. */
export const HANDSHAKE_TIMEOUT_MS_MAX = 300_000;
/** Window in which probes answer 503 and /metrics stays up during shutdown. Flag `-shutdown-grace`. */
export const SHUTDOWN_GRACE_MS_DEFAULT = 5_000;
/** Ten minutes: the service manager's stop timeout (systemd, Kubernetes) must exceed it. */
export const SHUTDOWN_GRACE_MS_MAX = 600_000;
/** At shutdown, sessions get this long to write their last frames before their sockets are closed. */
export const SESSIONS_CLOSE_MS_MAX = 2_000;

// ---- the server shell ------------------------------------------------------------------------

/** Most deadlines handled in one engine tick; the rest wait for the next (bounded work per sweep). */
export const DEADLINES_PER_TICK_MAX = 10_000;
/**
 * Replies buffered for one session (written and not yet taken by the socket, or held back
 * behind a frame that waits for its audit record) before it counts as a slow reader and is
 * closed.
 */
export const WRITE_BUFFER_BYTES_MAX = 1024 * 1024;
/**
 * First size of a session's reusable read buffer. Small, because every idle session keeps
 * one in its pending read; a read that fills it moves the session to a buffer four times
 * larger, up to READ_BUFFER_BYTES_MAX.
 */
export const READ_BUFFER_BYTES_MIN = 1024;
/** Largest read buffer of a busy (pipelining) session. */
export const READ_BUFFER_BYTES_MAX = 64 * 1024;
/** First size of a session's reply buffer: a handful of small frames. */
export const SESSION_WRITER_BYTES_MIN = 256;
/** First size of a frame writer outside sessions (clients, tests). */
export const FRAME_WRITER_BYTES_DEFAULT = 512;
/** A frame writer grown past this by a burst is dropped at `take()`, so idle sessions stay small. */
export const FRAME_WRITER_RETAINED_BYTES_MAX = 64 * 1024;
/**
 * A session's reply buffer grown past this by a burst is dropped at `take()`: a burst of replies
 * with long names (60 ACQUIRED of 1 KiB) must not stay pinned by a session that then idles.
 * A handful of small replies, the common batch, fit.
 */
export const SESSION_WRITER_RETAINED_BYTES_MAX = 4 * 1024;
/**
 * Reply buffers kept for reuse between batches (per frame limit): an idle session holds none, a
 * session borrows one for the frames of a batch. Enough for the sessions that write in one turn
 * under load (64 clients); at most 64 × SESSION_WRITER_RETAINED_BYTES_MAX = 256 KiB stay.
 */
export const SESSION_WRITERS_POOLED_MAX = 64;
/**
 * The audit encoder's arena: lines are encoded one after the other into it, and views of it are
 * queued (no buffer per line). Large enough for a turn's records under load; a full one stays
 * alive only while lines of it wait to be written.
 */
export const AUDIT_ARENA_BYTES = 64 * 1024;
/**
 * A connection that sent part of a frame and then nothing for this long has stalled: the
 * frame's buffer is cut down to the bytes that arrived (a legitimate frame's rest follows within
 * round trips; frames are sent in one write).
 */
export const PARTIAL_FRAME_STALL_MS = 1_000;
/** A frame reader's buffer grown past the largest valid request is dropped once empty. */
export const FRAME_READER_RETAINED_BYTES_MAX = 4 + REQUEST_FRAME_BYTES_MAX;
/**
 * Bytes all connections together may hold in unfinished frames larger than any valid request
 * (REQUEST_FRAME_BYTES_MAX); a connection whose such frame needs more is closed with
 * LIMIT_EXCEEDED. Without it 16,384 sessions each stalled in a 64 KiB frame pinned 1 GiB; this
 * is a thousand frames of the largest size at once.
 */
export const PARTIAL_FRAME_BYTES_TOTAL_MAX = 64 * 1024 * 1024;
/** Smallest buffer a frame reader keeps a partial frame in. */
export const FRAME_READER_PARTIAL_BYTES_MIN = 256;
/** The stall watchdog looks at writes in flight every io_timeout/4, within these bounds. */
export const STALL_CHECK_MS_MIN = 50;
export const STALL_CHECK_MS_MAX = 1_000;
/**
 * TLS handshakes started per second at most (0: no limit). A handshake costs the server's one
 * JavaScript thread about 0.4 ms at the ClientHello and 0.85 ms for a whole mutual-TLS session
 * open with an ECDSA P-256 key (RSA-2048 about 2 ms, RSA-4096 several ms); a flood of
 * ClientHellos, a few recorded bytes each for the client, would otherwise queue more work than
 * the thread can do and starve the heartbeats of established sessions. 500/s keeps handshakes
 * below about half of a core with P-256 or RSA-2048 keys; lower it for RSA-4096. A reconnect
 * storm of 10,000 clients takes 20 s at this rate. Flag `-max-tls-handshake-rate`.
 */
export const TLS_HANDSHAKE_RATE_PER_S_DEFAULT = 500;
export const TLS_HANDSHAKE_RATE_PER_S_MAX = 1_000_000;
/**
 * Accepted TLS connections waiting for their handshake to start; a new one past it drops the
 * oldest waiting (likely a client that gave up). One second of a 1,000/s flood; a descriptor each.
 */
export const TLS_PENDING_CONNECTIONS_MAX = 1_024;
/**
 * `TLS handshake failed` log lines per second at most; the rest are summarised in one line per
 * second (all are counted in lockd_tls_handshake_errors_total). A flood of bad handshakes must not
 * turn into a flood of log lines.
 */
export const TLS_FAILURE_LOG_LINES_PER_S = 20;

/**
 * Received bytes a TLS connection may have queued that its session has not read by the end of an
 * event-loop turn; past it the connection is closed. Sessions read eagerly, so only a peer that
 * floods a session that stopped reading gets there. (`pause()` cannot bound this: node:tls in
 * Deno 2.9 keeps reading the socket into a hidden buffer while paused.)
 */
export const TLS_READ_QUEUE_BYTES_MAX = 1024 * 1024;
/**
 * How often the TLS listener's watchdog checks an idle listener (node's accept loop can stop for
 * good after EMFILE), and how long it waits for its probe connection.
 */
export const ACCEPT_PROBE_INTERVAL_MS = 1_000;
export const ACCEPT_PROBE_TIMEOUT_MS = 2_000;
/** First and last delay of the acceptor's back-off after a failed accept (descriptor exhaustion). */
export const ACCEPT_BACKOFF_MS_MIN = 5;
export const ACCEPT_BACKOFF_MS_MAX = 1_000;
/**
 * How often the event-loop lag probe of /metrics wakes: one tiny callback twice a second, often
 * enough to catch pauses of the length that matter for leases (hundreds of milliseconds).
 */
export const EVENT_LOOP_PROBE_INTERVAL_MS = 500;

// ---- fencing tokens ----------------------------------------------------------------------------

/** Tokens are reserved in blocks this large; a restart skips at most one block. */
export const TOKENS_PER_BLOCK = 65_536;
/** Tokens stay exact in a JavaScript number and in JSON. */
export const TOKEN_MAX = Number.MAX_SAFE_INTEGER;
/**
 * First and last delay between retries of a token store that failed to reserve a block: soon
 * enough that a waiter gets its lock shortly after the disk recovers, rare enough not to spin.
 */
export const TOKEN_RETRY_MS_MIN = 100;
export const TOKEN_RETRY_MS_MAX = 5_000;

// ---- ACL and certificates ----------------------------------------------------------------------

/**
 * Most rules one ACL file may hold. Every ACQUIRE walks the rules in order, so an unbounded file
 * would make each acquire arbitrarily slow.
 */
export const ACL_RULES_MAX = 10_000;
/**
 * Longest line of an ACL file in UTF-8 bytes (newline excluded): two globs of the longest length
 * (`GLOB_BYTES_MAX`), quoted and escaped, with room for a comment.
 */
export const ACL_LINE_BYTES_MAX = 8 * 1024;
/**
 * Most rules one lock rules file (`-lock-rules-file`) may hold. A lock's first claim and every
 * non-graceful end walk the rules in order, like an ACQUIRE walks the ACL.
 */
export const LOCK_RULES_MAX = 10_000;
/** Longest line of a lock rules file: one glob of the longest length, a limit and a delay. */
export const LOCK_RULE_LINE_BYTES_MAX = ACL_LINE_BYTES_MAX;
/**
 * Longest lock-delay a rule may give. A lock-delay keeps a lock from everyone after a holder
 * vanished, so a mistyped `5m` for `5s` would stall its users for minutes; Consul caps its
 * session lock-delay at 60 s too. A resource that needs longer should check fencing tokens.
 */
export const LOCK_DELAY_MS_MAX = 60_000;
/** A certificate that is about to expire gets a warning this long before. */
export const CERT_EXPIRY_WARNING_MS = 14 * 86_400_000;

// ---- HTTP listeners (admin API, ops server): src/http/listen.ts -----------------------------

/**
 * The first request of an HTTP connection must be complete (head and body) this long after the
 * accept, every later one this long after its first byte: ends slowloris heads and connections
 * that send nothing. Probes, scrapers and `lockd admin` send a request in one write. Flag
 * `-http-header-timeout`.
 */
export const HTTP_HEADER_TIMEOUT_MS_DEFAULT = 10_000;
export const HTTP_HEADER_TIMEOUT_MS_MIN = 100;
/** Longer is no protection any more. */
export const HTTP_HEADER_TIMEOUT_MS_MAX = 600_000;
/**
 * An HTTP connection with no byte in either direction this long is closed. Above Prometheus'
 * default 1-minute scrape interval (its keep-alive connection is reused, not raced against the
 * close) and far above the 15 s comments of a server-sent event stream. Flag
 * `-http-idle-timeout`.
 */
export const HTTP_IDLE_TIMEOUT_MS_DEFAULT = 90_000;
export const HTTP_IDLE_TIMEOUT_MS_MIN = 1_000;
/** One hour: an idle connection is a descriptor; nobody needs one open longer without a byte. */
export const HTTP_IDLE_TIMEOUT_MS_MAX = 3_600_000;
/**
 * Open connections per HTTP listener (each listener has its own budget, so a flood of the admin
 * port leaves probes on the ops port alone). Far above what probes, a scraper and operators
 * open; each costs up to three descriptors (client, guard-to-server, server side) and about
 * 80 KiB while a request is served. Flag `-max-http-connections`.
 */
export const HTTP_CONNECTIONS_MAX_DEFAULT = 128;
export const HTTP_CONNECTIONS_MAX_MAX = 65_536;
/**
 * Longest request head (request line and headers). Fits a `?match=` glob at its 4 KiB limit
 * fully percent-encoded (12 KiB) plus ordinary headers; longer heads get 431.
 */
export const HTTP_HEAD_BYTES_MAX = 32 * 1024;
/**
 * At shutdown, how long an HTTP listener keeps passing the last bytes of answers to their
 * clients after its server has written them (the end of an event stream, a large answer);
 * a client that does not read is cut off then.
 */
export const HTTP_CLOSE_DRAIN_MS = 1_000;
/**
 * Largest request body. No admin or ops route reads a body; a small one (a client that sends
 * `{}`) is tolerated, a larger one gets 413 and chunked bodies get 411.
 */
export const HTTP_BODY_BYTES_MAX = 1024;
/**
 * Connections an HTTP listener takes above `-max-http-connections` when every connection is
 * serving a request, for probes only: a connection from a loopback address (a container's
 * health check) or one whose first request is a probe (`/healthz`, `/readyz`, an admin
 * request with the token); any other gets 503. A few are enough: probes are answered at once.
 */
export const HTTP_PROBE_CONNECTIONS_RESERVED = 8;
/**
 * After the guard answers a connection itself (503 at the cap, 4xx for a refused head), it
 * shuts its side and reads what the client still sends for at most this long before closing:
 * a socket closed with unread bytes resets the connection, and the client's kernel then drops
 * the answer it had received. A client reads the answer and closes in a round trip.
 */
export const HTTP_REFUSAL_LINGER_MS = 2_000;
/**
 * Lingering closes in progress per listener at most (a descriptor each, for at most
 * HTTP_REFUSAL_LINGER_MS); past it, a refused connection is closed right after its answer.
 * Covers a burst of several hundred connections at the default cap (400 concurrent scrapes).
 */
export const HTTP_LINGERING_CONNECTIONS_MAX = 1_024;

// ---- admin API additions for the console: src/admin/ ---------------------------------------

/**
 * Largest page of `GET /api/locks?limit=`: a page is built and serialized in one turn of the
 * event loop; 1,000 locks with short queues is a few hundred KiB of JSON.
 */
export const ADMIN_LOCKS_LIMIT_MAX = 1_000;
/**
 * How often the admin API takes a snapshot of the engine's counters for `GET /api/history`
 * (the console's charts), and how many it keeps: 900 × 1 s = the last 15 minutes, ~150 KiB.
 */
export const ADMIN_HISTORY_INTERVAL_MS = 1_000;
export const ADMIN_HISTORY_SNAPSHOTS_MAX = 900;
/**
 * How often `GET /api/events` looks for a change of the locks or sessions to report: the
 * console shows a change within this long, and a stream costs one comparison per check.
 */
export const ADMIN_EVENTS_CHECK_MS = 250;
/**
 * Longest silence of an event stream: a comment line is sent after this long without an
 * event (or a third of `-http-idle-timeout` when that is shorter), so the idle timeout never
 * closes a stream that is still read.
 */
export const ADMIN_EVENTS_KEEPALIVE_MS_MAX = 15_000;
/**
 * Event streams open at once on the admin listener (also at most half of
 * `-max-http-connections`): each is a connection of the cap that never ends by itself, so
 * requests keep the other half.
 */
export const ADMIN_EVENT_STREAMS_MAX = 16;
/**
 * Bytes of events one stream may have waiting for a reader that does not read; past it the
 * stream is closed (the console reconnects and reloads). About a minute of events.
 */
export const ADMIN_EVENT_BUFFER_BYTES_MAX = 64 * 1024;

// ---- audit log: src/log/audit.ts -----------------------------------------------------------

/** Audit records kept in memory while the sink cannot be written; past it records are dropped (counted). */
export const AUDIT_PENDING_RECORDS_MAX = 100_000;
/** Bytes of those records: a record can be ~7 KiB (escaped 1 KiB name and identity), so records alone do not bound memory. */
export const AUDIT_PENDING_BYTES_MAX = 64 * 1024 * 1024;
/** How often a failed audit write is retried. */
export const AUDIT_RETRY_MS = 500;
/**
 * An audit write that has not completed after this long (a pipe nobody reads, a hung disk) counts
 * as a failed sink: grants pause. Longer than any healthy write of one pipe buffer, short enough
 * that clients see AUDIT_UNAVAILABLE instead of silence. Flag `-audit-write-timeout`.
 */
export const AUDIT_WRITE_TIMEOUT_MS_DEFAULT = 1_000;
export const AUDIT_WRITE_TIMEOUT_MS_MIN = 1;
/** Ten minutes: longer would hide a dead sink from clients and monitoring. */
export const AUDIT_WRITE_TIMEOUT_MS_MAX = 600_000;
/** Largest single audit write: one pipe buffer, so a slow reader's progress shows within the timeout. */
export const AUDIT_WRITE_BYTES_MAX = 64 * 1024;
/** At shutdown, how long the audit log keeps writing its backlog before counting the rest lost. */
export const AUDIT_CLOSE_TIMEOUT_MS = 2_000;

// ---- diagnostic log: src/log/diagnostic.ts --------------------------------------------------

/**
 * Diagnostic log lines waiting for standard error (a reader that stopped, a full pipe): about
 * 5,000 lines of 200 bytes. Lines past it are dropped and counted (lockd_log_lines_dropped_total)
 * and one line says how many once standard error takes lines again; the server never waits.
 */
export const DIAGNOSTIC_LOG_BUFFER_BYTES_MAX = 1024 * 1024;
/** Largest single write to standard error: one pipe buffer. */
export const DIAGNOSTIC_LOG_WRITE_BYTES_MAX = 64 * 1024;
/**
 * At exit, how long the buffered lines may take to be written: the last lines (the shutdown
 * story, a start-up error) usually go at once; a reader that stopped does not keep the process.
 */
export const DIAGNOSTIC_LOG_FLUSH_MS = 1_000;

// ---- command-line clients -----------------------------------------------------------------

/**
 * Locks one `client.observe` keeps track of (each with its last kind and at most one state
 * waiting for the reader): far above what a server lets one WATCH match (LOCKS_PER_WATCH_MAX
 * here, and a client may talk to another server); a server that names more breaks the protocol.
 */
export const CLIENT_OBSERVED_LOCKS_MAX = 65_536;
/** How long one request of `lockd admin` may take before it gives up. */
export const ADMIN_REQUEST_TIMEOUT_MS = 10_000;
/** `lockd admin -watch`: time between two requests, by default and at least (no busy polling). */
export const WATCH_INTERVAL_MS_DEFAULT = 2_000;
/**
 * `lockd admin -wait`'s default with several `-admin` addresses (a cluster): while no node answers
 * for the leader (a fail-over), a request is asked again until this has passed, as the clients'
 * first connect does (CONNECT_TIMEOUT_MS_CLUSTER_DEFAULT). With one address: 0, one try.
 */
export const ADMIN_WAIT_MS_CLUSTER_DEFAULT = 10_000;
/** Pause between two tries of `lockd admin` while its `-wait` lasts. */
export const ADMIN_WAIT_RETRY_MS = 500;
export const WATCH_INTERVAL_MS_MIN = 100;
/** How long `lockd health` waits for one answer. */
export const HEALTH_TIMEOUT_MS = 2_000;
/** With `lockd health -wait`, how long between two probes. */
export const HEALTH_RETRY_MS = 250;
/** `lockd run`: time between SIGTERM and SIGKILL to the command's group when the lock is lost. Flag `-kill-grace`. */
export const KILL_GRACE_MS_DEFAULT = 5_000;
/**
 * `lockd run` and `lockd observe`: while no node answers (the client reconnects), one line this
 * often on standard error saying what it tries: often enough that a person at the terminal or a log reader sees it
 * is not frozen, seldom enough for a log (6 lines a minute).
 */
export const RECONNECT_PROGRESS_INTERVAL_MS = 10_000;
/**
 * Pause between `lockd run`'s first connects while its `-wait` lasts (a cluster in the middle of
 * a fail-over, a server restarting): each connect already goes round every address.
 */
export const RUN_CONNECT_RETRY_MS = 1_000;

// ---- the client library -------------------------------------------------------------------

/**
 * Client reconnect back-off with full jitter: attempt n waits random(0, min(MAX, MIN * 2^n)) ms,
 * so clients cut off together come back spread out; n restarts at 0 only after a WELCOME.
 */
export const RECONNECT_BACKOFF_MS_MIN = 50;
export const RECONNECT_BACKOFF_MS_MAX = 5_000;
/**
 * After the client's FIN, how long close() keeps reading for the server's: closing with unread
 * bytes would reset the connection (the server then ends ownerships as io_timeout, not graceful).
 */
export const CLIENT_CLOSE_GRACE_MS = 1_000;
/** Client dial + TLS + HELLO/WELCOME bound (option `connectTimeoutMs`): a mute server cannot hang connect(). */
export const CONNECT_TIMEOUT_MS_DEFAULT = 5_000;
/**
 * Floor of the client's safety margin before its local lease deadline (the margin is
 * max(lease / 10, min(50 ms, lease / 4))): covers timer lateness and clock-rate drift; a quarter
 * of the lease at most, so the 50 ms shortest lease keeps a usable deadline.
 */
export const LEASE_MARGIN_MS_MIN = 50;

// ---- Cluster mode (etcd) ----------------------------------------------------------------

/** Lease TTL of every node in etcd. Flag `-cluster-ttl`. Whole seconds (etcd counts in seconds). */
export const CLUSTER_TTL_MS_DEFAULT = 2_000;
/** etcd raises shorter TTLs to 1.5 × its election timeout (1 s by default), i.e. 2 s. */
export const CLUSTER_TTL_MS_MIN = 2_000;
/** Past a minute a dead leader keeps its clients waiting too long to be useful. */
export const CLUSTER_TTL_MS_MAX = 60_000;
/**
 * The leader pauses this share of the TTL before `safeUntil` (200 ms at TTL 2 s): room for clock
 * rates that differ between the node and etcd and for the time a frame takes to leave.
 */
export const CLUSTER_MARGIN_TTL_SHARE = 0.1;
/** Keep-alive cadence of a paused leader (and after a failed keep-alive), so it resumes quickly. */
export const CLUSTER_RECHECK_MS = 100;
/** Delay before retrying a failed lease grant, read, campaign, watch or token reservation. */
export const CLUSTER_RETRY_MS = 250;
/**
 * Longest a standby (or a leader not serving yet) holds a HELLO while no live leader is known,
 * before it answers NOT_LEADER anyway: below the clients' 5 s connect timeout, and long enough
 * to cover an election (the TTL plus etcd's expiry check) and the new leader's takeover so
 * clients are answered the moment a leader serves instead of backing off. The hold is 1.5 × TTL,
 * and 2 × TTL while an election or a takeover is still under way.
 */
export const CLUSTER_HELLO_HOLD_MS_MAX = 4_000;
/** A leader that does not answer a standby's probe within this is taken for dead. */
export const CLUSTER_PROBE_TIMEOUT_MS = 300;
/** A standby reuses a probe's verdict this long (a burst of HELLOs makes one probe). */
export const CLUSTER_PROBE_CACHE_MS = 250;
/**
 * A client with several cluster nodes (`addrs`) gives up a connection whose heartbeats have gone
 * unanswered this long with nothing else heard: a frozen or cut-off leader. Longer than the
 * pauses an etcd leader election causes (up to about 2 s), so those do not move clients.
 */
export const CLUSTER_CLIENT_SILENCE_MS = 3_000;
/**
 * Largest `reclaimWindowMs` a version-2 WELCOME may announce (ten minutes: 1.5 × the longest TTL
 * plus the HELLO hold and the grace stays far below): a client takes a larger one for a protocol
 * error rather than keep claims and sockets that long.
 */
export const RECLAIM_WINDOW_MS_MAX = 600_000;
/**
 * A client's first connect with several addresses (a cluster) goes round the list again, with
 * back-off, until this bound (option `connectTimeoutMs`), so a client started during a fail-over
 * is held rather than refused: a killed leader's successor serves about TTL + 0.5 s later and a
 * standby holds a HELLO up to CLUSTER_HELLO_HOLD_MS_MAX meanwhile.
 */
export const CONNECT_TIMEOUT_MS_CLUSTER_DEFAULT = 10_000;

// ---- Cluster mode, milestone 2: ownership records (src/cluster/ownership_records.ts) --------

/** Operations per records transaction: etcd's `--max-txn-ops` default; larger sets split. */
export const CLUSTER_RECORD_TXN_OPS_MAX = 128;
/**
 * Records read per page at takeover: a page of longest names (about 1.4 KiB each in the JSON
 * gateway's base64) is under 3 MiB, and 10,000 records take 5 round trips (about 0.2 s on three
 * local members; pages of 1,000 took 0.3 s, of 5,000 0.18 s).
 */
export const CLUSTER_RECORDS_PAGE_KEYS = 2_000;
/**
 * Longest record value accepted from etcd (characters of JSON): room for a floor per slot of
 * about 3,000 slots; a longer value is refused as invalid rather than parsed (it comes from etcd,
 * which anyone with write access to the cluster's keys can change).
 */
export const CLUSTER_RECORD_VALUE_BYTES_MAX = 65_536;
/** Idle locks whose linger ended examined per timer run; the rest wait for the next run (0 ms). */
export const CLUSTER_RECORD_SWEEP_MAX = 1_024;
/**
 * How long an idle lock's record stays in etcd before it is deleted (W3). Flag
 * `-cluster-record-linger`. A lock reused within it costs no etcd write; 0 deletes at once (every
 * reuse then pays a commit).
 */
export const CLUSTER_RECORD_LINGER_MS_DEFAULT = 2_000;
export const CLUSTER_RECORD_LINGER_MS_MIN = 0;
/** Past a minute idle records only fill etcd: a lock idle that long is not "reused". */
export const CLUSTER_RECORD_LINGER_MS_MAX = 60_000;
/**
 * The shortest reclaim window of a new leader (flag `-cluster-reclaim-grace`): from the moment
 * it serves, locks that may be held stay reserved for their holders' RECLAIMs at least this long
 * (longer when the last term published a longer lease horizon). Clients reconnect within about
 * a second of a leader being elected; 5 s leaves room for jitter, TLS and a loaded machine.
 */
export const CLUSTER_RECLAIM_GRACE_MS_DEFAULT = 5_000;
/** Below a second clients racing a loaded machine lose their locks. */
export const CLUSTER_RECLAIM_GRACE_MS_MIN = 1_000;
/** Past a minute a dead holder's lock is kept from everyone too long after a fail-over. */
export const CLUSTER_RECLAIM_GRACE_MS_MAX = 60_000;
