/**
 * The glob language shared by the admin API (`GET /api/locks?match=GLOB`) and
 * the ACL rules (identity globs and lock-name globs).
 *
 * | syntax   | matches                                                    |
 * |----------|------------------------------------------------------------|
 * | `*`      | any run of characters except `/`, possibly empty           |
 * | `**`     | any run of characters including `/`, possibly empty        |
 * | `?`      | exactly one character except `/`                           |
 * | `[abc]`  | one character of the class (`[a-z]` ranges, `[!a]`/`[^a]`)  |
 * | `\x`     | the character `x` literally (`\*` is a star)               |
 * | other    | itself                                                     |
 *
 * Matching is anchored (the whole name must match) and works on Unicode code
 * points, so `?` matches one emoji. Character classes never match `/`.
 *
 * Patterns are compiled to a token list and matched by simulating the
 * nondeterministic automaton (a set of live positions per character), not by
 * a backtracking RegExp: `**a**a**a**b` against a long name would take
 * exponential-ish time in V8's backtracking engine, while this is bounded by
 * name length × pattern length.
 *
 * @module
 */

import { isNfc, NOT_NFC_REASON } from "../core/lock_name.ts";

/**
 * Longest accepted pattern in UTF-8 bytes. Patterns come from query strings
 * and ACL files; 4 KiB is far beyond any useful glob and bounds matching work
 * (pattern length × name length). Kept here rather than in `src/limits.ts`
 * because this module owns the only check; move it if a flag ever sets it.
 */
export const GLOB_PATTERN_BYTES_MAX = 4096;

/** One-line summary of the glob syntax, for error messages and help texts. */
export const GLOB_SYNTAX_HELP =
  "glob syntax: * any characters except '/', ** any characters, ? one character except '/', " +
  "[abc] [a-z] [!a] one character of a class, \\ escapes the next character; the whole name must match";

/** A pattern that is not valid glob syntax. */
export class GlobError extends Error {
  /** The pattern as given. */
  readonly pattern: string;
  /** 1-based code-point position of the offending character (0 when the whole pattern is at fault). */
  readonly position: number;
  /** What is wrong, without the pattern and position. */
  readonly reason: string;

  constructor(pattern: string, reason: string, position: number) {
    const where = position > 0 ? ` at position ${position}` : "";
    super(`Invalid glob "${quotable(pattern)}": ${reason}${where}`);
    this.name = "GlobError";
    this.pattern = pattern;
    this.position = position;
    this.reason = reason;
  }
}

/** A compiled glob. */
export interface Glob {
  /** The pattern it was compiled from. */
  readonly pattern: string;
  /**
   * The longest literal text every matching name starts with (escapes
   * resolved), i.e. everything before the first wildcard or class. A sorted
   * lock table can start a range scan here and stop once names no longer
   * start with it.
   */
  readonly literalPrefix: string;
  /** Whether the whole of `name` matches the pattern. */
  matches(name: string): boolean;
}

const SLASH = 0x2f;

/** Matcher tokens, one per pattern element. */
type Token =
  | { readonly kind: "literal"; readonly codePoint: number }
  | { readonly kind: "one" }
  | { readonly kind: "class"; readonly negated: boolean; readonly ranges: readonly number[] }
  | { readonly kind: "star" }
  | { readonly kind: "globstar" };

/**
 * Compiles `pattern`; throws {@link GlobError} for an unterminated or empty
 * class, a reversed range, a trailing lone `\`, a pattern longer than
 * {@link GLOB_PATTERN_BYTES_MAX} bytes, or one that is not in Unicode
 * Normalization Form C (lock names must be NFC, and identities are made
 * canonical, so a glob in another form would silently match less than it
 * says).
 */
export function compileGlob(pattern: string): Glob {
  const bytes = patternBytes(pattern);
  if (bytes > GLOB_PATTERN_BYTES_MAX) {
    throw new GlobError(
      pattern,
      `pattern is ${bytes} bytes long, more than the limit of ${GLOB_PATTERN_BYTES_MAX}`,
      0,
    );
  }
  if (!isNfc(pattern)) throw new GlobError(pattern, `pattern is ${NOT_NFC_REASON}`, 0);
  const tokens = parse(pattern);
  let prefixLength = 0;
  while (prefixLength < tokens.length && tokens[prefixLength].kind === "literal") prefixLength++;
  const literalPrefix = String.fromCodePoint(
    ...tokens.slice(0, prefixLength).map((t) => (t as { codePoint: number }).codePoint),
  );
  if (prefixLength === tokens.length) {
    return { pattern, literalPrefix, matches: (name) => name === literalPrefix };
  }
  const rest = tokens.slice(prefixLength);
  const nfa = new Matcher(rest);
  return {
    pattern,
    literalPrefix,
    matches: (name) => name.startsWith(literalPrefix) && nfa.run(name, literalPrefix.length),
  };
}

function parse(pattern: string): Token[] {
  const chars = Array.from(pattern);
  const tokens: Token[] = [];
  let i = 0;
  while (i < chars.length) {
    const ch = chars[i];
    if (ch === "*") {
      let run = 0;
      while (i < chars.length && chars[i] === "*") {
        run++;
        i++;
      }
      tokens.push(run === 1 ? { kind: "star" } : { kind: "globstar" });
      continue;
    }
    if (ch === "?") {
      tokens.push({ kind: "one" });
      i++;
      continue;
    }
    if (ch === "\\") {
      if (i + 1 >= chars.length) throw new GlobError(pattern, "trailing lone '\\'", i + 1);
      tokens.push({ kind: "literal", codePoint: chars[i + 1].codePointAt(0)! });
      i += 2;
      continue;
    }
    if (ch === "[") {
      i = parseClass(pattern, chars, i, tokens);
      continue;
    }
    tokens.push({ kind: "literal", codePoint: ch.codePointAt(0)! });
    i++;
  }
  return tokens;
}

/** Parses the class opening at `open`; returns the index after its `]`. */
function parseClass(pattern: string, chars: string[], open: number, tokens: Token[]): number {
  let i = open + 1;
  let negated = false;
  if (chars[i] === "!" || chars[i] === "^") {
    negated = true;
    i++;
  }
  const ranges: number[] = [];
  for (;;) {
    if (i >= chars.length) {
      throw new GlobError(pattern, "unterminated character class", open + 1);
    }
    if (chars[i] === "]") break;
    const start = i;
    let low: number;
    [low, i] = classChar(pattern, chars, i, open);
    let high = low;
    // A '-' between two members is a range; a '-' first or last is literal.
    if (chars[i] === "-" && i + 1 < chars.length && chars[i + 1] !== "]") {
      [high, i] = classChar(pattern, chars, i + 1, open);
      if (high < low) {
        throw new GlobError(
          pattern,
          `reversed range "${chars.slice(start, i).join("")}" in character class`,
          start + 1,
        );
      }
    }
    ranges.push(low, high);
  }
  if (ranges.length === 0) throw new GlobError(pattern, "empty character class", open + 1);
  tokens.push({ kind: "class", negated, ranges });
  return i + 1;
}

/** Reads one (possibly escaped) class member; returns its code point and the next index. */
function classChar(pattern: string, chars: string[], i: number, open: number): [number, number] {
  if (chars[i] === "\\") {
    if (i + 1 >= chars.length) {
      throw new GlobError(pattern, "unterminated character class", open + 1);
    }
    return [chars[i + 1].codePointAt(0)!, i + 2];
  }
  return [chars[i].codePointAt(0)!, i + 1];
}

/**
 * Thompson-style simulation: state `s` means "tokens before `s` have matched".
 * Each input code point advances every live state at once, so the work is
 * O(name length × token count) whatever the pattern.
 */
class Matcher {
  readonly #tokens: readonly Token[];
  // Reused between runs; matching is synchronous so nothing can interleave.
  #current: Int32Array;
  #next: Int32Array;
  #seenAt: Int32Array;
  #stamp = 0;

  constructor(tokens: readonly Token[]) {
    this.#tokens = tokens;
    this.#current = new Int32Array(tokens.length + 1);
    this.#next = new Int32Array(tokens.length + 1);
    this.#seenAt = new Int32Array(tokens.length + 1);
  }

  run(name: string, from: number): boolean {
    const tokens = this.#tokens;
    const accept = tokens.length;
    let current = this.#current;
    let next = this.#next;
    this.#newStep();
    let count = this.#add(current, 0, 0);
    for (let i = from; i < name.length;) {
      const cp = name.codePointAt(i)!;
      i += cp > 0xffff ? 2 : 1;
      let nextCount = 0;
      this.#newStep();
      for (let k = 0; k < count; k++) {
        const s = current[k];
        if (s === accept) continue;
        const token = tokens[s];
        switch (token.kind) {
          case "literal":
            if (token.codePoint === cp) nextCount = this.#add(next, nextCount, s + 1);
            break;
          case "one":
            if (cp !== SLASH) nextCount = this.#add(next, nextCount, s + 1);
            break;
          case "class":
            if (cp !== SLASH && inRanges(token.ranges, cp) !== token.negated) {
              nextCount = this.#add(next, nextCount, s + 1);
            }
            break;
          case "star":
            if (cp !== SLASH) nextCount = this.#add(next, nextCount, s);
            break;
          case "globstar":
            nextCount = this.#add(next, nextCount, s);
            break;
        }
      }
      if (nextCount === 0) return false;
      [current, next] = [next, current];
      count = nextCount;
    }
    for (let k = 0; k < count; k++) if (current[k] === accept) return true;
    return false;
  }

  #newStep(): void {
    this.#stamp++;
    if (this.#stamp === 0x7fffffff) {
      this.#seenAt.fill(0);
      this.#stamp = 1;
    }
  }

  /** Adds state `s` and, through empty matches of stars, the states after it. */
  #add(set: Int32Array, count: number, s: number): number {
    for (;;) {
      if (this.#seenAt[s] === this.#stamp) return count;
      this.#seenAt[s] = this.#stamp;
      set[count++] = s;
      const token = this.#tokens[s];
      if (token === undefined || (token.kind !== "star" && token.kind !== "globstar")) {
        return count;
      }
      s++;
    }
  }
}

function inRanges(ranges: readonly number[], cp: number): boolean {
  for (let i = 0; i < ranges.length; i += 2) {
    if (cp >= ranges[i] && cp <= ranges[i + 1]) return true;
  }
  return false;
}

/** UTF-8 length of `text`, or a lower bound when that is certainly within the limit. */
function patternBytes(text: string): number {
  // Every UTF-16 unit is at most 3 UTF-8 bytes; skip the encode when it cannot matter.
  if (text.length * 3 <= GLOB_PATTERN_BYTES_MAX) return text.length;
  return new TextEncoder().encode(text).length;
}

/** Shortens an oversized pattern so the error message stays readable. */
function quotable(pattern: string): string {
  return pattern.length > 80 ? `${pattern.slice(0, 77)}...` : pattern;
}
