import assert from "node:assert/strict";
import { PROBLEMS } from "../../src/http/problem.ts";
import { createRouter, route } from "../../src/http/router.ts";
import { assertProblem } from "../helpers/problem.ts";

const router = createRouter<string>([
  route(
    "GET",
    "/things/:id",
    (_request, { params, context }) => new Response(`${context}:${params.id}`),
  ),
  route("POST", "/things/:id", () => new Response("posted", { status: 201 })),
  route("GET", "/boom", () => {
    throw new Error("secret internal detail at /srv/lockd/src/x.ts:12");
  }),
  route("GET", "/async-boom", () => Promise.reject(new TypeError("also secret"))),
]);

function request(method: string, path: string): Request {
  return new Request(`http://lockd.test${path}`, { method });
}

Deno.test("router: groups stay percent-encoded and the context is passed through", async () => {
  const response = await router(request("GET", "/things/a%2Fb%20c"), "ctx");
  assert.equal(await response.text(), "ctx:a%2Fb%20c");
});

Deno.test("router: a handler that throws becomes a 500 problem that says internal error only", async () => {
  for (const path of ["/boom", "/async-boom"]) {
    const response = await router(request("GET", path), "");
    const { text } = await assertProblem(response, 500, "internal-error", {
      title: "Internal error",
      detail: "internal error",
    });
    assert.doesNotMatch(text, /secret|\/srv|\.ts/);
  }
});

Deno.test("router: 405 lists every method of the path, HEAD with GET, sorted", async () => {
  const response = await router(request("DELETE", "/things/1"), "");
  assert.equal(response.status, 405);
  assert.equal(response.headers.get("allow"), "GET, HEAD, POST");
  await response.body?.cancel();
});

Deno.test("router: HEAD runs the GET handler and drops the body", async () => {
  const response = await router(request("HEAD", "/things/7"), "x");
  assert.equal(response.status, 200);
  assert.equal(response.body, null);
});

Deno.test("every problem type has a 4xx or 5xx status, a title and a kebab-case slug", () => {
  for (const [slug, { status, title }] of Object.entries(PROBLEMS)) {
    assert.ok(status >= 400 && status <= 599, slug);
    assert.ok(title.length > 0, slug);
    assert.match(slug, /^[a-z]+(-[a-z]+)*$/);
  }
});
