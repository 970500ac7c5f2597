/**
 * The client's lock contract (npm/test/contract.mjs) under Deno, against mod.ts and real
 * servers on port 0. CI runs the same file under Node and Bun against the npm package.
 */
import * as lockd from "../../mod.ts";
import { lockContract } from "../../npm/test/contract.mjs";
import { certPem, keyPem, serverTlsConfig } from "../fixtures/tls/certs.ts";
import { startTestServer } from "../helpers/start_server.ts";

lockContract({
  test: (name: string, fn: () => Promise<void>) => Deno.test(`contract: ${name}`, fn),
  lockd,
  startServer: async ({ mtls = false }: { mtls?: boolean } = {}) => {
    const t = await startTestServer({
      adminListen: "127.0.0.1:0",
      ...(mtls ? serverTlsConfig(true) : {}),
    });
    return {
      addr: t.addr,
      adminAddr: t.server.adminAddr!,
      close: async () => await t[Symbol.asyncDispose](),
    };
  },
  tls: { ca: certPem("ca"), cert: certPem("client-uri"), key: keyPem("client-uri") },
});
