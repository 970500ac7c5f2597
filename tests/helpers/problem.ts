/**
 * The one check of an `application/problem+json` answer (RFC 9457) as lockd writes it, for the
 * admin API, the ops listener and the HTTP guard alike.
 */

import assert from "node:assert/strict";

const PROBLEM_TYPE_BASE = "https://lockd.dev/problems/";

/** The exact body of a problem answer, as the server writes it. */
export function problemText(slug: string, title: string, status: number, detail: string): string {
  return JSON.stringify({ type: `${PROBLEM_TYPE_BASE}${slug}`, title, status, detail });
}

/** An answer already read: fetch's through admin_helpers' `http`, or a raw socket's. */
export interface ReadAnswer {
  status: number;
  headers: { get(name: string): string | null | undefined };
  /** The body (`text` of an `HttpAnswer`, `body` of a `RawResponse`). */
  text?: string;
  body?: string;
}

/** What else the problem must say. */
export interface ProblemExpected {
  title?: string;
  /** The whole detail, or a pattern it matches. */
  detail?: string | RegExp;
  /** Said when the status is not the expected one (which request it was). */
  message?: string;
}

/** A problem's members, and the body it came in. */
export interface Problem {
  type: string;
  title: string;
  status: number;
  detail: string;
  text: string;
}

/**
 * Asserts a problem answer: the HTTP status, the content type `application/problem+json`, a
 * body of exactly `type`, `title`, `status` and `detail` (in that order, its `status` the HTTP
 * status), the type `https://lockd.dev/problems/<slug>` when a slug is given, and the title and
 * detail when given; with a title and a whole detail, the body byte for byte. Reads a `Response`
 * itself. Returns the problem.
 */
export async function assertProblem(
  answer: ReadAnswer | Response,
  status: number,
  slug?: string,
  expected: ProblemExpected = {},
): Promise<Problem> {
  const text = answer instanceof Response ? await answer.text() : answer.text ?? answer.body;
  assert.equal(answer.status, status, expected.message);
  assert.equal(answer.headers.get("content-type"), "application/problem+json");
  assert.ok(text !== undefined, "the answer has a body");
  const problem = JSON.parse(text);
  assert.deepEqual(Object.keys(problem), ["type", "title", "status", "detail"]);
  assert.equal(problem.status, status);
  if (slug !== undefined) assert.equal(problem.type, `${PROBLEM_TYPE_BASE}${slug}`);
  if (expected.title !== undefined) assert.equal(problem.title, expected.title);
  if (expected.detail instanceof RegExp) assert.match(problem.detail, expected.detail);
  else if (expected.detail !== undefined) assert.equal(problem.detail, expected.detail);
  if (slug !== undefined && expected.title !== undefined && typeof expected.detail === "string") {
    assert.equal(text, problemText(slug, expected.title, status, expected.detail));
  }
  return { ...problem, text };
}
