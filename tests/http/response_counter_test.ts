/**
 * The response counter of the HTTP guard (src/http/response_counter.ts): when is every response
 * of a connection delivered? Bytes as `Deno.serve` writes them, whole and one byte at a time.
 */

import assert from "node:assert/strict";
import { ResponseCounter } from "../../src/http/response_counter.ts";

const encoder = new TextEncoder();
const DATE = "date: Wed, 25 Nov 2026 16:45:03 GMT\r\n";

interface Case {
  name: string;
  methods: string[];
  bytes: string;
  /** Responses complete after all bytes. */
  complete: number;
  idle: boolean;
}

const CASES: Case[] = [
  {
    name: "a content-length response",
    methods: ["GET"],
    bytes: `HTTP/1.1 200 OK\r\ncontent-length: 5\r\n${DATE}\r\nhello`,
    complete: 1,
    idle: true,
  },
  {
    name: "a content-length response missing its last byte",
    methods: ["GET"],
    bytes: `HTTP/1.1 200 OK\r\ncontent-length: 5\r\n${DATE}\r\nhell`,
    complete: 0,
    idle: false,
  },
  {
    name: "HEAD: a content-length but no body",
    methods: ["HEAD"],
    bytes: `HTTP/1.1 200 OK\r\ncontent-length: 5\r\n${DATE}\r\n`,
    complete: 1,
    idle: true,
  },
  {
    name: "204 and 304 have no body",
    methods: ["GET", "GET"],
    bytes: `HTTP/1.1 204 No Content\r\n${DATE}\r\nHTTP/1.1 304 Not Modified\r\n${DATE}\r\n`,
    complete: 2,
    idle: true,
  },
  {
    name: "a chunked response with an extension and a trailer",
    methods: ["GET"],
    bytes: `HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n${DATE}\r\n` +
      "12\r\ndata: x\n\ndata: x\n\n\r\n3;x=y\r\nabc\r\n0\r\nx-t: 1\r\n\r\n",
    complete: 1,
    idle: true,
  },
  {
    name: "an event stream still open",
    methods: ["GET"],
    bytes: `HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n${DATE}\r\n9\r\ndata: x\n\n\r\n`,
    complete: 0,
    idle: false,
  },
  {
    name: "100 Continue, then the response",
    methods: ["POST"],
    bytes: "HTTP/1.1 100 Continue\r\n\r\n" +
      `HTTP/1.1 200 OK\r\ncontent-length: 2\r\n${DATE}\r\nok`,
    complete: 1,
    idle: true,
  },
  {
    name: "pipelined: two answered of three",
    methods: ["GET", "GET", "GET"],
    bytes: `HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\na` +
      `HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n`,
    complete: 2,
    idle: false,
  },
  {
    name: "a body delimited by the end of the connection is never idle",
    methods: ["GET"],
    bytes: "HTTP/1.0 200 OK\r\n\r\nuntil close",
    complete: 0,
    idle: false,
  },
  {
    name: "a response nobody asked for stops the counting",
    methods: [],
    bytes: `HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n`,
    complete: 0,
    idle: false,
  },
  {
    name: "a malformed chunk size stops the counting",
    methods: ["GET", "GET"],
    bytes: `HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n` +
      `HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n`,
    complete: 0,
    idle: false,
  },
];

for (const c of CASES) {
  for (const split of [false, true]) {
    Deno.test(`response counter: ${c.name}${split ? ", a byte at a time" : ""}`, () => {
      const counter = new ResponseCounter();
      for (const method of c.methods) counter.requestSent(method);
      const bytes = encoder.encode(c.bytes);
      if (split) { for (const byte of bytes) counter.push(new Uint8Array([byte])); }
      else counter.push(bytes);
      assert.equal(counter.complete, c.complete);
      assert.equal(counter.idle, c.idle);
    });
  }
}

Deno.test("response counter: a head longer than any the server writes stops the counting", () => {
  const counter = new ResponseCounter();
  counter.requestSent("GET");
  counter.push(encoder.encode(`HTTP/1.1 200 OK\r\nx: ${"a".repeat(20_000)}\r\n\r\n`));
  assert.equal(counter.idle, false);
  assert.equal(counter.complete, 0);
});

Deno.test("response counter: no request sent is idle", () => {
  assert.equal(new ResponseCounter().idle, true);
});
