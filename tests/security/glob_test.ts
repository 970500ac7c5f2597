import assert from "node:assert/strict";
import fc from "fast-check";
import { GLOB_BYTES_MAX } from "../../src/limits.ts";
import { compileGlob, type Glob, GlobError } from "../../src/security/glob.ts";

const matchCases: { name: string; pattern: string; input: string; matches: boolean }[] = [
  {
    name: "a literal pattern matches only the same name",
    pattern: "jobs/a",
    input: "jobs/a",
    matches: true,
  },
  {
    name: "a literal pattern does not match a longer name",
    pattern: "jobs/a",
    input: "jobs/ab",
    matches: false,
  },
  {
    name: "a literal pattern does not match a prefix of itself",
    pattern: "jobs/ab",
    input: "jobs/a",
    matches: false,
  },
  { name: "matching is case-sensitive", pattern: "Jobs", input: "jobs", matches: false },
  { name: "the empty pattern matches the empty name", pattern: "", input: "", matches: true },
  {
    name: "the empty pattern does not match a non-empty name",
    pattern: "",
    input: "a",
    matches: false,
  },
  {
    name: "a star matches one path segment",
    pattern: "jobs/*",
    input: "jobs/nightly",
    matches: true,
  },
  { name: "a star matches an empty run", pattern: "jobs/*", input: "jobs/", matches: true },
  { name: "a star does not cross a slash", pattern: "jobs/*", input: "jobs/a/b", matches: false },
  { name: "a lone star matches the empty name", pattern: "*", input: "", matches: true },
  { name: "a lone star does not match a slash", pattern: "*", input: "/", matches: false },
  {
    name: "a star in the middle of a segment matches",
    pattern: "db-*-primary",
    input: "db-eu-primary",
    matches: true,
  },
  {
    name: "a star in the middle needs the suffix",
    pattern: "db-*-primary",
    input: "db-eu-replica",
    matches: false,
  },
  { name: "a double star crosses slashes", pattern: "jobs/**", input: "jobs/a/b/c", matches: true },
  { name: "a double star matches an empty run", pattern: "jobs/**", input: "jobs/", matches: true },
  {
    name: "a double star does not excuse the literal before it",
    pattern: "jobs/**",
    input: "jobs",
    matches: false,
  },
  { name: "a lone double star matches the empty name", pattern: "**", input: "", matches: true },
  {
    name: "a lone double star matches anything",
    pattern: "**",
    input: "spiffe://example.org/x",
    matches: true,
  },
  {
    name: "a double star in the middle spans segments",
    pattern: "a/**/z",
    input: "a/b/c/z",
    matches: true,
  },
  {
    name: "a double star in the middle needs both slashes",
    pattern: "a/**/z",
    input: "a/z",
    matches: false,
  },
  {
    name: "three stars behave like a double star",
    pattern: "a***z",
    input: "a/b/z",
    matches: true,
  },
  {
    name: "a question mark matches one character",
    pattern: "db/shard-?",
    input: "db/shard-7",
    matches: true,
  },
  {
    name: "a question mark does not match zero characters",
    pattern: "db/shard-?",
    input: "db/shard-",
    matches: false,
  },
  {
    name: "a question mark does not match two characters",
    pattern: "db/shard-?",
    input: "db/shard-10",
    matches: false,
  },
  { name: "a question mark does not match a slash", pattern: "a?b", input: "a/b", matches: false },
  { name: "a question mark matches one emoji", pattern: "?", input: "😀", matches: true },
  {
    name: "a question mark matches one astral CJK character",
    pattern: "x?y",
    input: "x𠀀y",
    matches: true,
  },
  { name: "two question marks do not match one emoji", pattern: "??", input: "😀", matches: false },
  {
    name: "a literal emoji matches itself",
    pattern: "lock-😀-*",
    input: "lock-😀-1",
    matches: true,
  },
  { name: "a class matches a listed character", pattern: "[abc]", input: "b", matches: true },
  {
    name: "a class does not match an unlisted character",
    pattern: "[abc]",
    input: "d",
    matches: false,
  },
  { name: "a range matches its low end", pattern: "[a-z]", input: "a", matches: true },
  { name: "a range matches its high end", pattern: "[a-z]", input: "z", matches: true },
  { name: "a range does not match outside it", pattern: "[a-z]", input: "A", matches: false },
  {
    name: "a class can hold ranges and single characters",
    pattern: "[a-c0-9_]",
    input: "7",
    matches: true,
  },
  {
    name: "a negated class with ! excludes its characters",
    pattern: "[!a]",
    input: "a",
    matches: false,
  },
  {
    name: "a negated class with ! matches other characters",
    pattern: "[!a]",
    input: "b",
    matches: true,
  },
  {
    name: "a negated class with ^ excludes its characters",
    pattern: "[^a]",
    input: "a",
    matches: false,
  },
  {
    name: "a negated class followed by a star matches names not starting with it",
    pattern: "[!a]*",
    input: "bcd",
    matches: true,
  },
  {
    name: "a negated class followed by a star rejects names starting with it",
    pattern: "[!a]*",
    input: "abc",
    matches: false,
  },
  { name: "a negated class never matches a slash", pattern: "[!a]", input: "/", matches: false },
  {
    name: "a class listing a slash still never matches a slash",
    pattern: "[/]",
    input: "/",
    matches: false,
  },
  { name: "a class matches one emoji", pattern: "[😀😁]", input: "😁", matches: true },
  {
    name: "a class range works over astral code points",
    pattern: "[😀-😏]",
    input: "😅",
    matches: true,
  },
  { name: "a dash first in a class is literal", pattern: "[-a]", input: "-", matches: true },
  { name: "a dash last in a class is literal", pattern: "[a-]", input: "-", matches: true },
  {
    name: "an escaped closing bracket is a class member",
    pattern: "[\\]]",
    input: "]",
    matches: true,
  },
  {
    name: "an opening bracket inside a class is literal",
    pattern: "[[]",
    input: "[",
    matches: true,
  },
  { name: "an escaped star is a literal star", pattern: "a\\*", input: "a*", matches: true },
  {
    name: "an escaped star does not act as a wildcard",
    pattern: "a\\*",
    input: "ab",
    matches: false,
  },
  { name: "an escaped question mark is literal", pattern: "a\\?", input: "ab", matches: false },
  { name: "an escaped bracket is literal", pattern: "\\[x]", input: "[x]", matches: true },
  {
    name: "an escaped backslash is a literal backslash",
    pattern: "a\\\\b",
    input: "a\\b",
    matches: true,
  },
  { name: "an escaped ordinary letter is that letter", pattern: "\\a", input: "a", matches: true },
  {
    name: "regex metacharacters are literal",
    pattern: "a.b+c(d)|e$^",
    input: "a.b+c(d)|e$^",
    matches: true,
  },
  { name: "a regex dot is not a wildcard", pattern: "a.b", input: "axb", matches: false },
  {
    name: "a closing bracket outside a class is literal",
    pattern: "a]",
    input: "a]",
    matches: true,
  },
  {
    name: "a star then a literal backtracks to find the last occurrence",
    pattern: "*.log",
    input: "a.log.log",
    matches: true,
  },
  {
    name: "a SPIFFE identity matches a double-star glob",
    pattern: "spiffe://example.org/team-a/**",
    input: "spiffe://example.org/team-a/svc/x",
    matches: true,
  },
  {
    name: "a SPIFFE identity does not match a star glob across slashes",
    pattern: "spiffe://example.org/*",
    input: "spiffe://example.org/team-a/svc",
    matches: false,
  },
  {
    name: "a lone surrogate in the name is one character",
    pattern: "?",
    input: "\ud800",
    matches: true,
  },
];

for (const c of matchCases) {
  Deno.test(`glob: ${c.name}`, () => {
    assert.equal(compileGlob(c.pattern).matches(c.input), c.matches);
  });
}

const prefixCases: { name: string; pattern: string; prefix: string }[] = [
  { name: "the prefix stops at a star", pattern: "jobs/*", prefix: "jobs/" },
  { name: "the prefix stops at a double star", pattern: "jobs/**", prefix: "jobs/" },
  { name: "the prefix stops at a question mark", pattern: "db/shard-?", prefix: "db/shard-" },
  { name: "the prefix stops at a class", pattern: "db/[ab]x", prefix: "db/" },
  { name: "a pattern starting with a wildcard has an empty prefix", pattern: "[!a]*", prefix: "" },
  { name: "a literal pattern is its own prefix", pattern: "jobs/nightly", prefix: "jobs/nightly" },
  { name: "escapes are resolved in the prefix", pattern: "a\\*b\\\\c*", prefix: "a*b\\c" },
  { name: "an astral character is kept whole in the prefix", pattern: "😀/*", prefix: "😀/" },
];

for (const c of prefixCases) {
  Deno.test(`glob literalPrefix: ${c.name}`, () => {
    const glob = compileGlob(c.pattern);
    assert.equal(glob.literalPrefix, c.prefix);
    assert.equal(glob.pattern, c.pattern);
  });
}

const errorCases: { name: string; pattern: string; message: string; position: number }[] = [
  {
    name: "an unterminated class names the position of its bracket",
    pattern: "jobs/[a",
    message: 'Invalid glob "jobs/[a": unterminated character class at position 6',
    position: 6,
  },
  {
    name: "a class with only a negation is unterminated without a bracket",
    pattern: "[!",
    message: 'Invalid glob "[!": unterminated character class at position 1',
    position: 1,
  },
  {
    name: "a class ending in an escape is unterminated",
    pattern: "x[a\\",
    message: 'Invalid glob "x[a\\": unterminated character class at position 2',
    position: 2,
  },
  {
    name: "an escaped closing bracket does not terminate a class",
    pattern: "[\\]",
    message: 'Invalid glob "[\\]": unterminated character class at position 1',
    position: 1,
  },
  {
    name: "an empty class is rejected",
    pattern: "a[]",
    message: 'Invalid glob "a[]": empty character class at position 2',
    position: 2,
  },
  {
    name: "an empty negated class is rejected",
    pattern: "[!]",
    message: 'Invalid glob "[!]": empty character class at position 1',
    position: 1,
  },
  {
    name: "a reversed range names the position of its start",
    pattern: "[z-a]",
    message: 'Invalid glob "[z-a]": reversed range "z-a" in character class at position 2',
    position: 2,
  },
  {
    name: "a trailing lone backslash is rejected",
    pattern: "jobs\\",
    message: "Invalid glob \"jobs\\\": trailing lone '\\' at position 5",
    position: 5,
  },
  {
    name: "positions count code points, not UTF-16 units",
    pattern: "😀😀[",
    message: 'Invalid glob "😀😀[": unterminated character class at position 3',
    position: 3,
  },
];

for (const c of errorCases) {
  Deno.test(`glob error: ${c.name}`, () => {
    assert.throws(() => compileGlob(c.pattern), (err: unknown) => {
      assert.ok(err instanceof GlobError);
      assert.equal(err.message, c.message);
      assert.equal(err.name, "GlobError");
      assert.equal(err.pattern, c.pattern);
      assert.equal(err.position, c.position);
      return true;
    });
  });
}

Deno.test("glob: a pattern of exactly the byte limit compiles", () => {
  // ASCII bytes + one 3-byte character = exactly the limit.
  const pattern = "a".repeat(GLOB_BYTES_MAX - 3) + "€";
  assert.equal(new TextEncoder().encode(pattern).length, GLOB_BYTES_MAX);
  assert.ok(compileGlob(pattern).matches(pattern));
});

Deno.test("glob: a pattern one byte over the limit is rejected, counting UTF-8 bytes", () => {
  const pattern = "a".repeat(GLOB_BYTES_MAX - 2) + "€";
  assert.throws(() => compileGlob(pattern), (err: unknown) => {
    assert.ok(err instanceof GlobError);
    assert.match(
      err.message,
      new RegExp(
        `^Invalid glob "a{77}\\.\\.\\.": pattern is ${GLOB_BYTES_MAX + 1} bytes long, ` +
          `more than the limit of ${GLOB_BYTES_MAX}$`,
      ),
    );
    return true;
  });
});

/** Code points of `text`. */
function codePoints(text: string): number {
  let n = 0;
  for (const _ of text) n++;
  return n;
}

/**
 * The work bound of the matcher as a function of the pattern's length alone: W words of states
 * (tokens <= bytes), twice for a non-ASCII code point (its row is built), plus the binary search
 * over the class intervals (at most 2 per class range, ranges <= bytes).
 */
function stepsPerCodePointBound(patternBytes: number): number {
  return 2 * Math.ceil((patternBytes + 1) / 32) + Math.ceil(Math.log2(2 * patternBytes + 2));
}

Deno.test("glob: the documented bound of steps per code point holds for the longest pattern", () => {
  // src/limits.ts promises 2 × ceil((bytes + 1) / 32) + 12 for GLOB_BYTES_MAX.
  assert.ok(
    stepsPerCodePointBound(GLOB_BYTES_MAX) <= 2 * Math.ceil((GLOB_BYTES_MAX + 1) / 32) + 12,
  );
});

/** Patterns of the longest length that keep many automaton states alive on long names. */
const WORST_PATTERNS: { what: string; pattern: string; names: (i: number) => string }[] = [
  {
    what: "stars and literals (the 4 KB pattern of the report, cut to the limit)",
    pattern: "*a".repeat(GLOB_BYTES_MAX / 2 - 1) + "*b",
    // Ends with the pattern's literal suffix, so the cheap suffix test lets every name through.
    names: (i) => "a".repeat(1019) + String(i).padStart(4, "0") + "b",
  },
  {
    what: "double stars",
    pattern: "**a".repeat(Math.floor(GLOB_BYTES_MAX / 3)),
    names: (i) => "a".repeat(1019) + String(i).padStart(4, "0") + "a",
  },
  {
    what: "stars and question marks",
    pattern: "*?".repeat(GLOB_BYTES_MAX / 2),
    names: (i) => "a".repeat(1020) + String(i).padStart(4, "0"),
  },
  {
    what: "a periodic literal after a double star",
    pattern: "**" + "/a".repeat(GLOB_BYTES_MAX / 2 - 2) + "/*",
    names: (i) => "/a".repeat(255) + "/" + String(i % 10) + "/a".repeat(255),
  },
  {
    what: "classes against non-ASCII names",
    pattern: "*[a]".repeat(GLOB_BYTES_MAX / 4),
    names: (i) => "鍵".repeat(340) + String(i % 10),
  },
  {
    what: "many distinct non-ASCII classes against non-ASCII names",
    pattern: Array.from(
      { length: GLOB_BYTES_MAX / 6 },
      (_, k) => `*[${String.fromCodePoint(0x4e00 + k)}]`,
    ).join(""),
    names: (i) =>
      Array.from({ length: 340 }, (_, k) => String.fromCodePoint(0x4e00 + ((i + k) % 200))).join(
        "",
      ),
  },
];

for (const c of WORST_PATTERNS) {
  Deno.test(`glob: the longest patterns of ${c.what} over 1,000 names of 1 KiB stay within the work bound`, () => {
    const bytes = new TextEncoder().encode(c.pattern).length;
    assert.ok(bytes <= GLOB_BYTES_MAX && bytes > GLOB_BYTES_MAX - 8, `${bytes} bytes`);
    const glob: Glob = compileGlob(c.pattern);
    assert.ok(glob.stepsPerCodePointMax <= stepsPerCodePointBound(bytes));
    let bound = 0;
    for (let i = 0; i < 1000; i++) {
      const name = c.names(i);
      assert.ok(new TextEncoder().encode(name).length <= 1024);
      glob.matches(name);
      bound += codePoints(name) * glob.stepsPerCodePointMax;
    }
    assert.ok(glob.steps > 0, "the automaton ran");
    assert.ok(glob.steps <= bound, `${glob.steps} steps > bound ${bound}`);
    // The budget this gives a listing of 1,000 such locks: well under 10^8 steps of 32 states.
    assert.ok(bound <= 1000 * 1024 * stepsPerCodePointBound(GLOB_BYTES_MAX));
    assert.ok(1000 * 1024 * stepsPerCodePointBound(GLOB_BYTES_MAX) < 1e8);
  });
}

Deno.test("glob: random patterns stay within the work bound computed from their length", () => {
  const part = fc.constantFrom("a", "b", "/", "*", "**", "?", "[ab]", "[!a]", "[é-ü]", "é", "😀");
  const namePart = fc.constantFrom("a", "b", "/", "é", "ü", "😀", "x");
  fc.assert(
    fc.property(
      fc.array(part, { maxLength: 120 }),
      fc.array(fc.array(namePart, { maxLength: 200 }), { minLength: 1, maxLength: 5 }),
      (parts, names) => {
        const pattern = parts.join("");
        const glob = compileGlob(pattern);
        const bytes = new TextEncoder().encode(pattern).length;
        assert.ok(glob.stepsPerCodePointMax <= stepsPerCodePointBound(bytes));
        let bound = 0;
        for (const nameParts of names) {
          const name = nameParts.join("");
          glob.matches(name);
          bound += codePoints(name) * glob.stepsPerCodePointMax;
        }
        assert.ok(glob.steps <= bound, `${glob.steps} > ${bound} for ${pattern}`);
      },
    ),
    { numRuns: 1000 },
  );
});

Deno.test("glob: a compiled glob gives the same answers when reused", () => {
  const glob = compileGlob("a*/**/?c");
  const inputs = ["ab/x/yc", "a/x", "ab/x/y/zc", "b/x/yc", "a//xc"];
  const first = inputs.map((n) => glob.matches(n));
  const second = inputs.map((n) => glob.matches(n));
  assert.deepEqual(first, [true, false, true, false, true]);
  assert.deepEqual(second, first);
});

/** A backtracking reference built on RegExp; fine for the tiny inputs of the property test. */
function referenceMatches(pattern: string, name: string): boolean {
  let source = "";
  const chars = Array.from(pattern);
  for (let i = 0; i < chars.length; i++) {
    const ch = chars[i];
    if (ch === "*") {
      if (chars[i + 1] === "*") {
        while (chars[i + 1] === "*") i++;
        source += "[^]*";
      } else {
        source += "[^/]*";
      }
    } else if (ch === "?") {
      source += "[^/]";
    } else if (ch === "[") {
      const end = chars.indexOf("]", i + 1);
      let body = chars.slice(i + 1, end).join("");
      const negated = body.startsWith("!");
      if (negated) body = body.slice(1);
      source += negated ? `(?![${body}])[^/]` : `(?!/)[${body}]`;
      i = end;
    } else {
      source += ch.replace(/[\\^$.*+?()[\]{}|\/-]/g, "\\$&");
    }
  }
  return new RegExp(`^(?:${source})$`, "u").test(name);
}

Deno.test("glob: random patterns agree with a regular-expression reference", () => {
  const patternPart = fc.constantFrom("a", "b", "/", "*", "**", "?", "[ab]", "[!a]", "[a-b]", "😀");
  const namePart = fc.constantFrom("a", "b", "c", "/", "😀");
  fc.assert(
    fc.property(
      fc.array(patternPart, { maxLength: 8 }),
      fc.array(namePart, { maxLength: 10 }),
      (patternParts, nameParts) => {
        const pattern = patternParts.join("");
        const name = nameParts.join("");
        return compileGlob(pattern).matches(name) === referenceMatches(pattern, name);
      },
    ),
    { numRuns: 2000 },
  );
});

/**
 * A second, independent reference: dynamic programming over (token, position), O(n × m) and
 * free of RegExp, for patterns and names too long for the backtracking reference above.
 */
function dpMatches(pattern: string, name: string): boolean {
  type T = { kind: "lit"; cp: string } | { kind: "one" } | { kind: "star"; slash: boolean } | {
    kind: "class";
    test: (ch: string) => boolean;
  };
  const p = Array.from(pattern);
  const tokens: T[] = [];
  for (let i = 0; i < p.length; i++) {
    if (p[i] === "*") {
      let run = 1;
      while (p[i + 1] === "*") {
        run++;
        i++;
      }
      tokens.push({ kind: "star", slash: run > 1 });
    } else if (p[i] === "?") {
      tokens.push({ kind: "one" });
    } else if (p[i] === "[") {
      const end = p.indexOf("]", i + 2);
      let body = p.slice(i + 1, end);
      const negated = body[0] === "!";
      if (negated) body = body.slice(1);
      const ranges: [number, number][] = [];
      for (let k = 0; k < body.length; k++) {
        if (body[k + 1] === "-" && k + 2 < body.length) {
          ranges.push([body[k].codePointAt(0)!, body[k + 2].codePointAt(0)!]);
          k += 2;
        } else {
          ranges.push([body[k].codePointAt(0)!, body[k].codePointAt(0)!]);
        }
      }
      tokens.push({
        kind: "class",
        test: (ch) =>
          ch !== "/" &&
          ranges.some(([lo, hi]) => ch.codePointAt(0)! >= lo && ch.codePointAt(0)! <= hi) !==
            negated,
      });
      i = end;
    } else {
      tokens.push({ kind: "lit", cp: p[i] });
    }
  }
  const s = Array.from(name);
  // ok[j] = tokens[0..i) can match s[0..j)
  let ok = new Array<boolean>(s.length + 1).fill(false);
  ok[0] = true;
  for (const token of tokens) {
    const next = new Array<boolean>(s.length + 1).fill(false);
    for (let j = 0; j <= s.length; j++) {
      if (token.kind === "star") {
        next[j] = ok[j] || (j > 0 && next[j - 1] && (token.slash || s[j - 1] !== "/"));
      } else if (j > 0 && ok[j - 1]) {
        const ch = s[j - 1];
        next[j] = token.kind === "lit"
          ? ch === token.cp
          : token.kind === "one"
          ? ch !== "/"
          : token.test(ch);
      }
    }
    ok = next;
  }
  return ok[s.length];
}

/** Pattern pieces, each with names pieces it matches (so that long patterns do match now and then). */
const PIECES: [string, string[]][] = [
  ["a", ["a"]],
  ["b", ["b"]],
  ["/", ["/"]],
  ["é", ["é"]],
  ["😀", ["😀"]],
  ["*", ["", "a", "ab", "é😀"]],
  ["**", ["", "/", "a/b", "é/"]],
  ["?", ["a", "é", "😀"]],
  ["[ab]", ["a", "b"]],
  ["[!a]", ["b", "é"]],
  ["[a-b]", ["a", "b"]],
  ["[é-ü]", ["é", "ü"]],
  ["[!é]", ["a", "😀"]],
];

Deno.test("glob: long random patterns (many words of states) agree with a dynamic-programming reference", () => {
  const piece = fc.integer({ min: 0, max: PIECES.length - 1 }).chain((k) =>
    fc.tuple(fc.constant(PIECES[k][0]), fc.constantFrom(...PIECES[k][1]))
  );
  fc.assert(
    fc.property(
      fc.array(piece, { minLength: 20, maxLength: 100 }),
      fc.option(fc.tuple(fc.nat(), fc.constantFrom("", "a", "/", "é", "xy")), { nil: undefined }),
      (pieces, damage) => {
        const pattern = pieces.map(([p]) => p).join("");
        const chars = Array.from(pieces.map(([, n]) => n).join(""));
        if (damage !== undefined && chars.length > 0) {
          chars.splice(damage[0] % chars.length, 1, damage[1]);
        }
        const name = chars.join("");
        return compileGlob(pattern).matches(name) === dpMatches(pattern, name);
      },
    ),
    { numRuns: 4000 },
  );
});

Deno.test("glob: live states that fall by words and then climb again do not revive stale ones", () => {
  // 97 states in 4 words. The name first fills words 2-3 with live star states, then a '/' kills
  // everything but the two '**' (states 0-1 and 30-31), and the next 'c' carries state 31 into
  // word 1 at once: the matcher must not read word 2 as it was before the fall.
  const pattern = "**" + "a".repeat(29) + "**c" + "*a".repeat(32);
  const before = "a".repeat(29) + "c" + "a".repeat(40) + "/c";
  for (const tail of [5, 31, 32, 40]) {
    const name = before + "a".repeat(tail);
    assert.equal(compileGlob(pattern).matches(name), tail >= 32, `${tail} a's after the fall`);
    assert.equal(dpMatches(pattern, name), tail >= 32);
  }
});

Deno.test("glob: the two references agree with each other on short inputs", () => {
  const part = fc.constantFrom("a", "b", "/", "*", "**", "?", "[ab]", "[!a]", "[a-b]", "😀");
  const namePart = fc.constantFrom("a", "b", "c", "/", "😀");
  fc.assert(
    fc.property(
      fc.array(part, { maxLength: 8 }),
      fc.array(namePart, { maxLength: 10 }),
      (patternParts, nameParts) => {
        const pattern = patternParts.join("");
        const name = nameParts.join("");
        return dpMatches(pattern, name) === referenceMatches(pattern, name);
      },
    ),
    { numRuns: 2000 },
  );
});
