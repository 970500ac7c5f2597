/**
 * The TLS test fixtures (tests/fixtures/tls/) as the bench's scenario 7 uses them: the server's
 * flags for TLS or mutual TLS, and the client side of either.
 *
 * @module
 */

import type { BenchTls } from "./bench_client.ts";

const ROOT = new URL("../", import.meta.url).pathname;
const TLS_FIXTURES = `${ROOT}tests/fixtures/tls/`;

export function tlsServerArgs(mtls: boolean): string[] {
  return [
    "-tls-cert",
    `${TLS_FIXTURES}server.pem`,
    "-tls-key",
    `${TLS_FIXTURES}server-key.pem`,
    ...(mtls ? ["-tls-client-ca", `${TLS_FIXTURES}ca.pem`] : []),
  ];
}

export function clientTls(mtls: boolean): BenchTls {
  return {
    ca: Deno.readTextFileSync(`${TLS_FIXTURES}ca.pem`),
    ...(mtls
      ? {
        cert: Deno.readTextFileSync(`${TLS_FIXTURES}client-uri.pem`),
        key: Deno.readTextFileSync(`${TLS_FIXTURES}client-uri-key.pem`),
      }
      : {}),
  };
}
