/**
 * The ACL: which identities may ACQUIRE which locks, and which may read them (QUERY, WATCH).
 *
 * File format, one rule per line:
 *
 * ```
 * # comment lines and blank lines are ignored; a '#' after whitespace starts a trailing comment
 * allow  spiffe://example.org/team-a/**   team-a/**
 * deny   **                               secrets/**
 * allow  ""                               public/*
 * allow  **                               status/**   read
 * allow  **                               shared/**
 * ```
 *
 * - `allow|deny <identity-glob> <lock-glob> [<actions>]`, fields separated by spaces or tabs.
 *   Both globs use the language of `glob.ts`; quoting and comments are those of `rule_file.ts`
 *   (`""` is the identity of a session without mTLS).
 * - `<actions>` (issue 23) says what the rule is about: `acquire`, `read` (QUERY and WATCH), or
 *   both as `acquire,read`. Without it the rule is about every action, so every file written
 *   before actions existed keeps its meaning for ACQUIRE and decides reading the same way.
 * - The first rule whose two globs match and whose actions include the action decides. When no
 *   rule decides, the answer is deny, for reading too — so a file without rules denies
 *   everything. Running without an ACL file at all is {@link ALLOW_ALL}, chosen by the caller.
 *
 * @module
 */

import { ACL_LINE_BYTES_MAX, ACL_RULES_MAX } from "../limits.ts";
import { compileGlob, type Glob, GlobError } from "./glob.ts";
import { readRuleFile, RuleFileError, ruleLines } from "./rule_file.ts";

/** What a session asks to do with a lock: take it, or read its state (QUERY, WATCH). */
export type AclAction = "acquire" | "read";

/** Every action, in the order rules and messages name them. */
const ACL_ACTIONS: readonly AclAction[] = ["acquire", "read"];

/** One rule as written in the file. */
export interface AclRule {
  readonly verb: "allow" | "deny";
  /** The identity glob as written (quotes removed). */
  readonly identityGlob: string;
  /** The lock-name glob as written (quotes removed). */
  readonly lockGlob: string;
  /** The actions the rule names; absent when it names none (then it decides every action). */
  readonly actions?: readonly AclAction[];
  /** 1-based line of the rule in its file. */
  readonly line: number;
}

/** The outcome of {@link Acl.decide}: the verdict and the rule that gave it (null when none matched). */
export interface AclDecision {
  readonly allowed: boolean;
  readonly rule: AclRule | null;
}

/** A parsed ACL. */
export interface Acl {
  /** Number of rules; 0 for an empty file (which denies everything) and for {@link ALLOW_ALL}. */
  readonly ruleCount: number;
  /**
   * Whether `identity` (`""` without mTLS) may do `action` (default `acquire`) with
   * `lockName`.
   */
  decide(identity: string, lockName: string, action?: AclAction): AclDecision;
}

/** An ACL file that cannot be used; `message` is `${fileName}:${line}: ${reason}`. */
export class AclParseError extends RuleFileError {
  constructor(fileName: string, line: number, reason: string) {
    super(fileName, line, reason);
    this.name = "AclParseError";
  }
}

const ALLOWED_BY_DEFAULT: AclDecision = Object.freeze({ allowed: true, rule: null });
const DENIED_BY_DEFAULT: AclDecision = Object.freeze({ allowed: false, rule: null });

/** The ACL in force when the server runs without an ACL file: every identity may do everything. */
export const ALLOW_ALL: Acl = Object.freeze({
  ruleCount: 0,
  decide: (_identity: string, _lockName: string, _action?: AclAction): AclDecision =>
    ALLOWED_BY_DEFAULT,
});

interface CompiledRule {
  readonly identity: Glob;
  readonly lock: Glob;
  readonly acquire: boolean;
  readonly read: boolean;
  readonly decision: AclDecision;
}

/**
 * Parses ACL text; `fileName` is used only in error messages. Throws
 * {@link AclParseError} for an unknown verb or action, a wrong number of fields, an
 * unterminated quote, text glued to a closing quote, a stray quote inside an
 * unquoted field, an invalid glob, more than {@link ACL_RULES_MAX} rules or a
 * line longer than {@link ACL_LINE_BYTES_MAX} bytes.
 */
export function parseAcl(text: string, fileName: string): Acl {
  const rules: CompiledRule[] = [];
  for (
    const { line, fields, fail } of ruleLines(text, fileName, ACL_LINE_BYTES_MAX, AclParseError)
  ) {
    const verb = fields[0];
    if (verb !== "allow" && verb !== "deny") {
      fail(`unknown verb "${verb}" (expected allow or deny)`);
    }
    if (fields.length < 3) {
      fail(`expected 3 fields (allow|deny, identity glob, lock glob), found ${fields.length}`);
    }
    if (fields.length > 4) {
      fail(
        `expected at most 4 fields (allow|deny, identity glob, lock glob, actions), found ${fields.length}`,
      );
    }
    if (rules.length === ACL_RULES_MAX) fail(`more than ${ACL_RULES_MAX} rules`);
    const identity = compileField(fields[1], "identity", fail);
    const lock = compileField(fields[2], "lock", fail);
    const named = fields.length === 4 ? parseActions(fields[3], fail) : null;
    const actions = named ?? ACL_ACTIONS;
    const rule: AclRule = Object.freeze({
      verb: verb as "allow" | "deny",
      identityGlob: fields[1],
      lockGlob: fields[2],
      ...(named === null ? {} : { actions: named }),
      line,
    });
    rules.push({
      identity,
      lock,
      acquire: actions.includes("acquire"),
      read: actions.includes("read"),
      decision: Object.freeze({ allowed: verb === "allow", rule }),
    });
  }
  return new RuleList(rules);
}

/** `acquire`, `read` or `acquire,read` (either order, each once). */
function parseActions(text: string, fail: (reason: string) => never): readonly AclAction[] {
  const named = text.split(",");
  const actions = ACL_ACTIONS.filter((action) => named.includes(action));
  if (actions.length !== named.length) {
    fail(`unknown actions "${text}" (expected acquire, read or acquire,read)`);
  }
  return Object.freeze(actions);
}

/**
 * Reads and parses the ACL file at `path`. A file that cannot be read is an
 * {@link AclParseError} at line 0 (`path:0: cannot read: ...`); a file that
 * is not valid UTF-8 is refused at the line of its first bad byte, because a
 * lenient decode would turn the bytes into U+FFFD and change what the rules
 * match.
 */
export async function loadAclFile(
  path: string,
  readFile: (path: string) => Promise<Uint8Array> = Deno.readFile,
): Promise<Acl> {
  return parseAcl(await readRuleFile(path, readFile, AclParseError), path);
}

class RuleList implements Acl {
  readonly #rules: readonly CompiledRule[];

  constructor(rules: readonly CompiledRule[]) {
    this.#rules = rules;
  }

  get ruleCount(): number {
    return this.#rules.length;
  }

  decide(identity: string, lockName: string, action: AclAction = "acquire"): AclDecision {
    for (const rule of this.#rules) {
      if (!rule[action]) continue;
      if (rule.lock.matches(lockName) && rule.identity.matches(identity)) return rule.decision;
    }
    return DENIED_BY_DEFAULT;
  }
}

function compileField(
  pattern: string,
  which: "identity" | "lock",
  fail: (reason: string) => never,
): Glob {
  try {
    return compileGlob(pattern);
  } catch (err) {
    if (err instanceof GlobError) return fail(`bad ${which} glob: ${err.message}`);
    throw err;
  }
}
