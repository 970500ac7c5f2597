/**
 * `lockd_connections_open` (issue 13.6): protocol connections open now in any
 * state, the descriptor figure available without --allow-all. Counted from
 * the accept to the close, for plain TCP and for TLS (the handshake included).
 */
import assert from "node:assert/strict";
import { connect } from "../../mod.ts";
import { parseHostPort } from "../../src/host_port.ts";
import { clientTls, serverTlsConfig } from "../fixtures/tls/certs.ts";
import { eventually, startTestServer } from "../helpers/start_server.ts";

for (const mode of ["tcp", "tls"] as const) {
  Deno.test(`lockd_connections_open (${mode}): counts connections before HELLO and sessions, and drops to 0 when they close`, async () => {
    await using t = await startTestServer({
      opsListen: "127.0.0.1:0",
      ...(mode === "tls" ? serverTlsConfig(true) : {}),
    });
    const counters = t.server.context.counters;
    const opened = () => counters.protocolConnectionsOpen;
    const at = parseHostPort(t.addr);
    // A connection that sends nothing yet (no HELLO, no ClientHello).
    const idle = await Deno.connect({ hostname: at.hostname, port: at.port });
    try {
      await eventually(() => opened() === 1, "the idle connection counted");
      {
        await using client = await connect({
          addr: t.addr,
          tls: mode === "tls" ? clientTls("client-uri") : undefined,
          reconnect: false,
        });
        await eventually(() => opened() === 2, "the session counted too");
        assert.equal(t.server.context.engine.stats.sessionsOpen, 1);
        const scrape = await fetchMetrics(t.server.opsAddr!);
        assert.match(scrape, /^lockd_connections_open 2$/m);
        assert.ok(client);
      }
      await eventually(() => opened() === 1, "the session's connection no longer counted");
    } finally {
      idle.close();
    }
    await eventually(() => opened() === 0, "nothing open");
  });
}

async function fetchMetrics(ops: string): Promise<string> {
  const response = await fetch(`http://${ops}/metrics`);
  return await response.text();
}
