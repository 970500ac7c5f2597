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
 * Patterns are compiled to a token list and matched by a bit-parallel
 * simulation of the nondeterministic automaton ({@link Matcher}), never by a
 * backtracking RegExp: the work is bounded by name length × pattern length /
 * 32, whatever the pattern. Patterns are at most {@link GLOB_BYTES_MAX}
 * bytes, so one match of a 1024-byte name takes a bounded, small amount of
 * work (`GET /api/locks?match=` runs it once per stored lock, an ACQUIRE once
 * per ACL rule it reaches).
 *
 * @module
 */

import { escapeInvisible, invisibleCharacter, isNfc, NOT_NFC_REASON } from "../core/lock_name.ts";
import { GLOB_BYTES_MAX } from "../limits.ts";

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
  /**
   * The most automaton steps {@link matches} takes per code point of a name
   * (one step updates 32 states): a match of a name of n code points takes
   * at most n × this many steps. 0 when the pattern needs no automaton (a
   * literal, or a literal prefix followed by one star).
   */
  readonly stepsPerCodePointMax: number;
  /** Steps taken by every {@link matches} call so far; for tests and benchmarks. */
  readonly steps: number;
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
 * {@link GLOB_BYTES_MAX} bytes, one that is not in Unicode
 * Normalization Form C (lock names must be NFC, and identities are made
 * canonical, so a glob in another form would silently match less than it
 * says), or one with an invisible format character (a bidirectional control,
 * a zero-width character: no lock name has one, and it hides what the pattern
 * says).
 */
export function compileGlob(pattern: string): Glob {
  const bytes = patternBytes(pattern);
  if (bytes > GLOB_BYTES_MAX) {
    throw new GlobError(
      pattern,
      `pattern is ${bytes} bytes long, more than the limit of ${GLOB_BYTES_MAX}`,
      0,
    );
  }
  if (!isNfc(pattern)) throw new GlobError(pattern, `pattern is ${NOT_NFC_REASON}`, 0);
  const invisible = invisibleCharacter(pattern);
  if (invisible !== null) {
    // No lock name can contain one, and it would hide what the pattern says.
    throw new GlobError(
      pattern,
      `pattern contains ${invisible.what}`,
      [...pattern.slice(0, invisible.index)].length + 1,
    );
  }
  const tokens = parse(pattern);
  let prefixLength = 0;
  while (prefixLength < tokens.length && tokens[prefixLength].kind === "literal") prefixLength++;
  const literalPrefix = literalText(tokens.slice(0, prefixLength));
  const rest = tokens.slice(prefixLength);
  if (rest.length === 0) {
    return simpleGlob(pattern, literalPrefix, (name) => name === literalPrefix);
  }
  if (rest.length === 1 && rest[0].kind === "globstar") {
    return simpleGlob(pattern, literalPrefix, (name) => name.startsWith(literalPrefix));
  }
  if (rest.length === 1 && rest[0].kind === "star") {
    return simpleGlob(
      pattern,
      literalPrefix,
      (name) => name.startsWith(literalPrefix) && name.indexOf("/", literalPrefix.length) < 0,
    );
  }
  // Every matching name also ends with the literal tokens after the last wildcard: a cheap
  // test that turns most non-matching names away before the automaton runs.
  let suffixStart = rest.length;
  while (suffixStart > 0 && rest[suffixStart - 1].kind === "literal") suffixStart--;
  const literalSuffix = literalText(rest.slice(suffixStart));
  const matcher = new Matcher(rest);
  return {
    pattern,
    literalPrefix,
    stepsPerCodePointMax: matcher.stepsPerCodePointMax,
    get steps() {
      return matcher.steps;
    },
    matches: (name) =>
      name.startsWith(literalPrefix) && name.endsWith(literalSuffix) &&
      matcher.run(name, literalPrefix.length),
  };
}

function simpleGlob(
  pattern: string,
  literalPrefix: string,
  matches: (name: string) => boolean,
): Glob {
  return { pattern, literalPrefix, matches, stepsPerCodePointMax: 0, steps: 0 };
}

function literalText(tokens: readonly Token[]): string {
  return String.fromCodePoint(...tokens.map((t) => (t as { codePoint: number }).codePoint));
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

const WORD_BITS = 32;

/**
 * Bit-parallel simulation of the glob's automaton (Shift-And, extended with
 * stars). State `s` means "the first `s` tokens have matched"; the states
 * 0..T live as bits of W = ceil((T + 1) / 32) words. For each code point `c`
 * of the name, in one pass over the words:
 *
 *     next = ((current & accepts[c]) << 1) | (current & loops[c])
 *     next |= (next & stars) << 1
 *
 * `accepts[c]` holds the states whose token (literal, `?`, class) takes `c`,
 * `loops[c]` the star states that take `c` and stay (a `*` loops on anything
 * but `/`, a `**` on anything), and the last line lets a star match nothing.
 * The parser never emits two stars in a row, so one pass closes the set.
 *
 * Work per code point is one step per word in use: at most W steps for an
 * ASCII code point (its `accepts` row is precomputed) and 2W + K for any
 * other (the row is built from the literal masks, the `?` mask and the K
 * classes). A match therefore takes at most n × (2W + K) steps for a name of
 * n code points, whatever the pattern: no backtracking, and 32 states per
 * step where a set-of-states simulation takes one.
 */
class Matcher {
  readonly #tokenCount: number;
  readonly #words: number;
  /** Star states (either kind): they also match nothing, so each implies the next state. */
  readonly #stars: Int32Array;
  /** Star states that loop on any code point except `/` (both kinds). */
  readonly #loopOther: Int32Array;
  /** Star states that loop on `/` (`**` only). */
  readonly #loopSlash: Int32Array;
  /** `accepts` rows of the ASCII code points, 128 × W words. */
  readonly #asciiRows: Int32Array;
  /** States of `?`, which takes any code point but `/`. */
  readonly #one: Int32Array;
  /** Literal states by non-ASCII code point. */
  readonly #literals = new Map<number, Int32Array>();
  /**
   * Classes on non-ASCII code points: the class ranges cut the code points
   * from 128 up into intervals on which every class answers the same; for
   * each interval (by its first code point) the states of the classes that
   * take it, W words each.
   */
  readonly #intervalStarts: Int32Array;
  readonly #intervalRows: Int32Array;
  /** Steps of the binary search over the intervals. */
  readonly #searchSteps: number;
  /** Most steps one code point can take (see above). */
  readonly stepsPerCodePointMax: number;
  /** Steps taken by every run so far. */
  steps = 0;
  // Reused between runs; matching is synchronous so nothing can interleave.
  #current: Int32Array;
  #next: Int32Array;
  readonly #row: Int32Array;

  constructor(tokens: readonly Token[]) {
    const count = tokens.length;
    const words = Math.ceil((count + 1) / WORD_BITS);
    this.#tokenCount = count;
    this.#words = words;
    this.#stars = new Int32Array(words);
    this.#loopOther = new Int32Array(words);
    this.#loopSlash = new Int32Array(words);
    this.#one = new Int32Array(words);
    this.#asciiRows = new Int32Array(128 * words);
    this.#current = new Int32Array(words);
    this.#next = new Int32Array(words);
    this.#row = new Int32Array(words);
    const set = (mask: Int32Array, at: number, state: number) => {
      mask[at + (state >>> 5)] |= 1 << (state & 31);
    };
    const classes: { state: number; negated: boolean; ranges: readonly number[] }[] = [];
    tokens.forEach((token, state) => {
      switch (token.kind) {
        case "literal": {
          if (token.codePoint < 128) {
            set(this.#asciiRows, token.codePoint * words, state);
          } else {
            let mask = this.#literals.get(token.codePoint);
            if (mask === undefined) {
              this.#literals.set(token.codePoint, mask = new Int32Array(words));
            }
            set(mask, 0, state);
          }
          break;
        }
        case "one":
          set(this.#one, 0, state);
          break;
        case "class":
          classes.push({ state, negated: token.negated, ranges: token.ranges });
          for (let cp = 0; cp < 128; cp++) {
            if (cp !== SLASH && inRanges(token.ranges, cp) !== token.negated) {
              set(this.#asciiRows, cp * words, state);
            }
          }
          break;
        case "star":
          set(this.#stars, 0, state);
          set(this.#loopOther, 0, state);
          break;
        case "globstar":
          set(this.#stars, 0, state);
          set(this.#loopOther, 0, state);
          set(this.#loopSlash, 0, state);
          break;
      }
    });
    for (let cp = 0; cp < 128; cp++) {
      if (cp === SLASH) continue;
      for (let w = 0; w < words; w++) this.#asciiRows[cp * words + w] |= this.#one[w];
    }
    [this.#intervalStarts, this.#intervalRows] = classIntervals(classes, words);
    this.#searchSteps = Math.ceil(Math.log2(this.#intervalStarts.length + 1));
    this.stepsPerCodePointMax = 2 * words + this.#searchSteps;
  }

  /** Whether `name` from UTF-16 index `from` to its end matches the tokens. */
  run(name: string, from: number): boolean {
    const words = this.#words;
    const stars = this.#stars;
    let current = this.#current;
    let next = this.#next;
    // Start: state 0, and state 1 if token 0 is a star. Words [low, high] may be non-zero;
    // everything above high up to high + 1 is kept zero so a carry can grow into it.
    current[0] = 1 | ((stars[0] & 1) << 1);
    if (words > 1) current[1] = 0;
    let low = 0;
    let high = 0;
    let steps = 0;
    for (let i = from; i < name.length;) {
      const cp = name.codePointAt(i)!;
      i += cp > 0xffff ? 2 : 1;
      let accepts: Int32Array;
      let base = 0;
      if (cp < 128) {
        accepts = this.#asciiRows;
        base = cp * words;
      } else {
        accepts = this.#rowOf(cp);
        steps += words + this.#searchSteps;
      }
      const loops = cp === SLASH ? this.#loopSlash : this.#loopOther;
      const top = high + 1 < words ? high + 1 : words - 1;
      let shiftCarry = 0;
      let starCarry = 0;
      let newLow = -1;
      let newHigh = -1;
      for (let w = low; w <= top; w++) {
        const d = current[w];
        const moved = d & accepts[base + w];
        let n = (moved << 1) | shiftCarry | (d & loops[w]);
        shiftCarry = moved >>> 31;
        const e = n & stars[w];
        n |= (e << 1) | starCarry;
        starCarry = e >>> 31;
        next[w] = n;
        if (n !== 0) {
          if (newLow < 0) newLow = w;
          newHigh = w;
        }
      }
      steps += top - low + 1;
      if (newLow < 0) {
        this.steps += steps;
        return false;
      }
      if (top + 1 < words) next[top + 1] = 0;
      low = newLow;
      high = newHigh;
      [current, next] = [next, current];
    }
    this.steps += steps;
    this.#current = current;
    this.#next = next;
    const acceptWord = this.#tokenCount >>> 5;
    return acceptWord >= low && acceptWord <= high &&
      (current[acceptWord] & (1 << (this.#tokenCount & 31))) !== 0;
  }

  /** The `accepts` row of a non-ASCII code point (never `/`), built in the scratch row. */
  #rowOf(cp: number): Int32Array {
    const row = this.#row;
    const words = row.length;
    const literal = this.#literals.get(cp);
    const starts = this.#intervalStarts;
    // The last interval whose start is <= cp (starts[0] is 128 <= cp).
    let lo = 0;
    let hi = starts.length - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >>> 1;
      if (starts[mid] <= cp) lo = mid;
      else hi = mid - 1;
    }
    const base = lo * words;
    for (let w = 0; w < words; w++) {
      row[w] = this.#one[w] | this.#intervalRows[base + w] | (literal?.[w] ?? 0);
    }
    return row;
  }
}

/**
 * Splits the code points from 128 up into intervals on which every class
 * gives the same answer, and returns the interval starts with the states of
 * the classes that take each interval (W words per interval). Neighbours with
 * the same states are merged. At most two intervals per class range.
 */
function classIntervals(
  classes: readonly { state: number; negated: boolean; ranges: readonly number[] }[],
  words: number,
): [Int32Array, Int32Array] {
  const cuts = new Set<number>([128]);
  for (const { ranges } of classes) {
    for (let i = 0; i < ranges.length; i += 2) {
      if (ranges[i + 1] < 128) continue;
      cuts.add(Math.max(128, ranges[i]));
      if (ranges[i + 1] < 0x10ffff) cuts.add(ranges[i + 1] + 1);
    }
  }
  const sorted = [...cuts].sort((a, b) => a - b);
  const starts: number[] = [];
  const rows: number[] = [];
  const row = new Int32Array(words);
  for (const start of sorted) {
    row.fill(0);
    for (const { state, negated, ranges } of classes) {
      if (inRanges(ranges, start) !== negated) row[state >>> 5] |= 1 << (state & 31);
    }
    const previous = rows.length - words;
    if (previous >= 0 && row.every((value, w) => rows[previous + w] === value)) continue;
    starts.push(start);
    rows.push(...row);
  }
  return [Int32Array.from(starts), Int32Array.from(rows)];
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
  if (text.length * 3 <= GLOB_BYTES_MAX) return text.length;
  return new TextEncoder().encode(text).length;
}

/** Shortens an oversized pattern so the error message stays readable. */
function quotable(pattern: string): string {
  return escapeInvisible(pattern.length > 80 ? `${pattern.slice(0, 77)}...` : pattern);
}
