/**
 * The lock rules file (`-lock-rules-file`, issue 22): the kind and limit of lock names, and the
 * lock-delay after a non-graceful end, fixed by the server instead of by each lock's first claim.
 *
 * File format, one rule per line (quoting and comments as in the ACL, `rule_file.ts`):
 *
 * ```
 * semaphore   jobs/render-*   8                  # at most 8 renders at once
 * semaphore   jobs/encode-*   4   lock-delay=2s
 * shared      reports/**                         # a read/write lock
 * exclusive   payments/**         lock-delay=5s  # refuses shared claims
 * lock-delay  leases/**       10s                # kind left to the first claim
 * ```
 *
 * - `semaphore <lock-glob> <limit> [lock-delay=D]`: a semaphore of `limit` (2 or more) owners;
 *   `shared <lock-glob> [lock-delay=D]`: a read/write lock (exclusive and shared claims);
 *   `exclusive <lock-glob> [lock-delay=D]`: one owner, shared claims refused;
 *   `lock-delay <lock-glob> <D>`: only a lock-delay; the first claim decides the kind, as
 *   without a rule. `D` is a duration as the flags write them (`500ms`, `5s`, `1m`), at most
 *   `LOCK_DELAY_MS_MAX`; `0` gives none.
 * - The first rule whose glob matches the name decides everything about it (kind, limit and
 *   delay): combine them on one line. A rule `lock-delay x/** 0` exempts names from the broader
 *   rules below it.
 * - A lock takes its kind from the rules when it gets its first claim, and keeps it while it has
 *   owners or waiters; the lock-delay is looked up when an ownership ends non-gracefully.
 *
 * @module
 */

import type { KindRule, KindRuleLookup, LockKind } from "../core/types.ts";
import { durationText, parseDurationMs } from "../duration.ts";
import {
  LOCK_DELAY_MS_MAX,
  LOCK_RULE_LINE_BYTES_MAX,
  LOCK_RULES_MAX,
  SEMAPHORE_LIMIT_MAX,
} from "../limits.ts";
import { compileGlob, type Glob, GlobError } from "./glob.ts";
import { readRuleFile, RuleFileError, ruleLines } from "./rule_file.ts";

/** One rule as written in the file: what the engine reads (`KindRule`), and where it came from. */
export interface LockRule extends KindRule {
  /** The lock-name glob as written (quotes removed). */
  readonly lockGlob: string;
  /** 1-based line of the rule in its file. */
  readonly line: number;
}

/** A parsed rules file. */
export interface LockRules {
  /** Number of rules (0: no file, or a file without rules). */
  readonly ruleCount: number;
  /** The first rule whose glob matches `name`, or null. */
  ruleFor(name: string): LockRule | null;
  /** `ruleFor` as the engine's hook (`LockEngine.setKindRule`); null when there are no rules. */
  readonly lookup: KindRuleLookup | null;
}

/** A lock rules file that cannot be used; `message` is `${fileName}:${line}: ${reason}`. */
export class LockRulesParseError extends RuleFileError {
  constructor(fileName: string, line: number, reason: string) {
    super(fileName, line, reason);
    this.name = "LockRulesParseError";
  }
}

/** The rules in force without `-lock-rules-file`: none (every lock's first claim decides). */
export const NO_LOCK_RULES: LockRules = Object.freeze({
  ruleCount: 0,
  ruleFor: (_name: string): LockRule | null => null,
  lookup: null,
});

const VERBS = ["semaphore", "shared", "exclusive", "lock-delay"] as const;
type Verb = typeof VERBS[number];

/** What each verb takes after its glob, for messages. */
const SHAPES: Readonly<Record<Verb, string>> = {
  semaphore: "semaphore, lock glob, limit, [lock-delay=DURATION]",
  shared: "shared, lock glob, [lock-delay=DURATION]",
  exclusive: "exclusive, lock glob, [lock-delay=DURATION]",
  "lock-delay": "lock-delay, lock glob, DURATION",
};

/**
 * Parses rules text; `fileName` is used only in error messages. Throws
 * {@link LockRulesParseError} (`file:line: reason`) for an unknown verb or option, a wrong number
 * of fields, a bad limit or duration, a quoting error, an invalid glob, more than
 * {@link LOCK_RULES_MAX} rules or a line longer than {@link LOCK_RULE_LINE_BYTES_MAX} bytes.
 */
export function parseLockRules(text: string, fileName: string): LockRules {
  const rules: { glob: Glob; rule: LockRule }[] = [];
  const lines = ruleLines(text, fileName, LOCK_RULE_LINE_BYTES_MAX, LockRulesParseError);
  for (const { line, fields, fail } of lines) {
    const verb = fields[0] as Verb;
    if (!VERBS.includes(verb)) {
      fail(`unknown verb "${fields[0]}" (expected semaphore, shared, exclusive or lock-delay)`);
    }
    // The fields a verb must have (with its glob), and at most one option after them.
    const needed = verb === "semaphore" || verb === "lock-delay" ? 3 : 2;
    const most = verb === "lock-delay" ? 3 : needed + 1;
    if (fields.length < needed || fields.length > most) {
      fail(`expected ${SHAPES[verb]}, found ${fields.length} fields`);
    }
    if (rules.length === LOCK_RULES_MAX) fail(`more than ${LOCK_RULES_MAX} rules`);
    const glob = compileLockGlob(fields[1], fail);
    const limit = verb === "semaphore" ? semaphoreLimit(fields[2], fail) : 1;
    let lockDelayMs = 0;
    if (verb === "lock-delay") {
      lockDelayMs = lockDelay(fields[2], fail);
    } else if (fields.length === most) {
      const option = fields[most - 1];
      if (!option.startsWith("lock-delay=")) {
        fail(`unknown option "${option}" (expected lock-delay=DURATION)`);
      }
      lockDelayMs = lockDelay(option.slice("lock-delay=".length), fail);
    }
    const kind: LockKind | null = verb === "lock-delay" ? null : verb;
    const rule: LockRule = Object.freeze({ kind, limit, lockDelayMs, lockGlob: fields[1], line });
    rules.push({ glob, rule });
  }
  return new RuleList(rules);
}

/**
 * Reads and parses the rules file at `path`: errors as the ACL's (`path:0: cannot read: ...`,
 * invalid UTF-8 at its line).
 */
export async function loadLockRulesFile(
  path: string,
  readFile: (path: string) => Promise<Uint8Array> = Deno.readFile,
): Promise<LockRules> {
  return parseLockRules(await readRuleFile(path, readFile, LockRulesParseError), path);
}

class RuleList implements LockRules {
  readonly #rules: readonly { glob: Glob; rule: LockRule }[];
  readonly lookup: KindRuleLookup | null;

  constructor(rules: readonly { glob: Glob; rule: LockRule }[]) {
    this.#rules = rules;
    this.lookup = rules.length === 0 ? null : (name) => this.ruleFor(name);
  }

  get ruleCount(): number {
    return this.#rules.length;
  }

  ruleFor(name: string): LockRule | null {
    for (const { glob, rule } of this.#rules) {
      if (glob.matches(name)) return rule;
    }
    return null;
  }
}

function compileLockGlob(pattern: string, fail: (reason: string) => never): Glob {
  try {
    return compileGlob(pattern);
  } catch (err) {
    if (err instanceof GlobError) return fail(`bad lock glob: ${err.message}`);
    throw err;
  }
}

function semaphoreLimit(text: string, fail: (reason: string) => never): number {
  const limit = /^\d{1,16}$/.test(text) ? Number(text) : NaN;
  if (limit >= 2 && limit <= SEMAPHORE_LIMIT_MAX) return limit;
  const hint = limit === 1 ? " (a semaphore of 1 is an exclusive lock: write exclusive)" : "";
  return fail(`limit "${text}" is not a whole number from 2 to ${SEMAPHORE_LIMIT_MAX}${hint}`);
}

function lockDelay(text: string, fail: (reason: string) => never): number {
  const ms = parseDurationMs(text);
  if (ms === null) return fail(`lock-delay "${text}" is not a duration like 500ms, 5s or 1m`);
  if (ms > LOCK_DELAY_MS_MAX) {
    fail(`lock-delay ${text} is longer than the limit of ${durationText(LOCK_DELAY_MS_MAX)}`);
  }
  return ms;
}
