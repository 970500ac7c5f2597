// The client's lock contract under Node (`node --test`) or Bun (`bun test`), against the npm
// package as a user installs it and real lockd servers.

import { test } from "node:test";
import * as lockd from "lockd-client";
import { lockContract } from "./contract.mjs";
import { fixture, startServer } from "./lockd_server.mjs";

lockContract({
  test,
  lockd,
  startServer,
  tls: {
    ca: fixture("ca.pem"),
    cert: fixture("client-uri.pem"),
    key: fixture("client-uri-key.pem"),
  },
});
