/**
 * The ACL: which identities may ACQUIRE which locks.
 *
 * File format, one rule per line:
 *
 * ```
 * # comment lines and blank lines are ignored; a '#' after whitespace starts a trailing comment
 * allow  spiffe://example.org/team-a/**   team-a/**
 * deny   **                               secrets/**
 * allow  ""                               public/*
 * allow  **                               shared/**
 * ```
 *
 * - `allow|deny <identity-glob> <lock-glob>`, fields separated by spaces or
 *   tabs. Both globs use the language of `glob.ts`.
 * - A field that starts with `"` is quoted: it may contain spaces and `#`, or
 *   be empty (`""` is the identity of a session without mTLS). Inside quotes
 *   `\"` and `\\` are escapes; any other backslash is kept for the glob.
 * - The first rule whose two globs match decides. When no rule matches the
 *   answer is deny — so a file without rules denies everything. Running
 *   without an ACL file at all is {@link ALLOW_ALL}, chosen by the caller.
 *
 * @module
 */

import { ACL_LINE_BYTES_MAX, ACL_RULES_MAX } from "../limits.ts";
import { compileGlob, type Glob, GlobError } from "./glob.ts";
import { firstInvalidUtf8 } from "./utf8.ts";
import { errorText } from "../error_text.ts";

/** One rule as written in the file. */
export interface AclRule {
  readonly verb: "allow" | "deny";
  /** The identity glob as written (quotes removed). */
  readonly identityGlob: string;
  /** The lock-name glob as written (quotes removed). */
  readonly lockGlob: string;
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
  /** Whether `identity` (`""` without mTLS) may acquire `lockName`. */
  decide(identity: string, lockName: string): AclDecision;
}

/** An ACL file that cannot be used; `message` is `${fileName}:${line}: ${reason}`. */
export class AclParseError extends Error {
  readonly fileName: string;
  /** 1-based line, or 0 when the file as a whole is at fault (cannot be read). */
  readonly line: number;
  readonly reason: string;

  constructor(fileName: string, line: number, reason: string) {
    super(`${fileName}:${line}: ${reason}`);
    this.name = "AclParseError";
    this.fileName = fileName;
    this.line = line;
    this.reason = reason;
  }
}

const ALLOWED_BY_DEFAULT: AclDecision = Object.freeze({ allowed: true, rule: null });
const DENIED_BY_DEFAULT: AclDecision = Object.freeze({ allowed: false, rule: null });

/** The ACL in force when the server runs without an ACL file: every identity may acquire every lock. */
export const ALLOW_ALL: Acl = Object.freeze({
  ruleCount: 0,
  decide: (_identity: string, _lockName: string): AclDecision => ALLOWED_BY_DEFAULT,
});

interface CompiledRule {
  readonly identity: Glob;
  readonly lock: Glob;
  readonly decision: AclDecision;
}

/**
 * Parses ACL text; `fileName` is used only in error messages. Throws
 * {@link AclParseError} for an unknown verb, a wrong number of fields, an
 * unterminated quote, text glued to a closing quote, a stray quote inside an
 * unquoted field, an invalid glob, more than {@link ACL_RULES_MAX} rules or a
 * line longer than {@link ACL_LINE_BYTES_MAX} bytes.
 */
export function parseAcl(text: string, fileName: string): Acl {
  const rules: CompiledRule[] = [];
  const lines = text.split("\n");
  // A trailing newline does not start another line.
  if (lines.length > 1 && lines[lines.length - 1] === "") lines.pop();
  for (let index = 0; index < lines.length; index++) {
    const lineNumber = index + 1;
    let line = lines[index];
    if (line.endsWith("\r")) line = line.slice(0, -1);
    if (index === 0 && line.startsWith("\uFEFF")) line = line.slice(1);
    const fail = (reason: string): never => {
      throw new AclParseError(fileName, lineNumber, reason);
    };
    const bytes = lineBytes(line);
    if (bytes > ACL_LINE_BYTES_MAX) {
      fail(`line is ${bytes} bytes long, more than the limit of ${ACL_LINE_BYTES_MAX}`);
    }
    const fields = splitFields(line, fail);
    if (fields.length === 0) continue;
    const verb = fields[0];
    if (verb !== "allow" && verb !== "deny") {
      fail(`unknown verb "${verb}" (expected allow or deny)`);
    }
    if (fields.length !== 3) {
      fail(
        `expected 3 fields (allow|deny, identity glob, lock glob), found ${fields.length}`,
      );
    }
    if (rules.length === ACL_RULES_MAX) fail(`more than ${ACL_RULES_MAX} rules`);
    const identity = compileField(fields[1], "identity", fail);
    const lock = compileField(fields[2], "lock", fail);
    const rule: AclRule = Object.freeze({
      verb: verb as "allow" | "deny",
      identityGlob: fields[1],
      lockGlob: fields[2],
      line: lineNumber,
    });
    rules.push({ identity, lock, decision: Object.freeze({ allowed: verb === "allow", rule }) });
  }
  return new RuleList(rules);
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
  let bytes: Uint8Array;
  try {
    bytes = await readFile(path);
  } catch (err) {
    throw new AclParseError(path, 0, `cannot read: ${errorText(err)}`);
  }
  return parseAcl(decodeAclBytes(bytes, path), path);
}

/** Decodes a whole ACL file as UTF-8 (a leading BOM is dropped); throws AclParseError at the first bad byte. */
function decodeAclBytes(bytes: Uint8Array, fileName: string): string {
  const bad = firstInvalidUtf8(bytes);
  if (bad >= 0) {
    let line = 1;
    let lineStart = 0;
    for (let i = 0; i < bad; i++) {
      if (bytes[i] === 0x0a) {
        line++;
        lineStart = i + 1;
      }
    }
    const byte = bytes[bad].toString(16).padStart(2, "0");
    throw new AclParseError(
      fileName,
      line,
      `invalid UTF-8: byte 0x${byte} at byte ${bad - lineStart + 1} of the line`,
    );
  }
  return new TextDecoder("utf-8", { fatal: true }).decode(bytes);
}

class RuleList implements Acl {
  readonly #rules: readonly CompiledRule[];

  constructor(rules: readonly CompiledRule[]) {
    this.#rules = rules;
  }

  get ruleCount(): number {
    return this.#rules.length;
  }

  decide(identity: string, lockName: string): AclDecision {
    for (const rule of this.#rules) {
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

function isBlank(ch: string | undefined): boolean {
  return ch === " " || ch === "\t";
}

/** Splits one line into fields, resolving quotes and dropping comments. */
function splitFields(line: string, fail: (reason: string) => never): string[] {
  const fields: string[] = [];
  let i = 0;
  for (;;) {
    while (isBlank(line[i])) i++;
    // A '#' at the start of a field (start of line or after whitespace) comments out the rest.
    if (i >= line.length || line[i] === "#") return fields;
    const fieldNumber = fields.length + 1;
    if (line[i] === '"') {
      let value = "";
      i++;
      for (;;) {
        if (i >= line.length) fail(`unterminated quote in field ${fieldNumber}`);
        const ch = line[i];
        if (ch === '"') break;
        if (ch === "\\" && (line[i + 1] === '"' || line[i + 1] === "\\")) {
          value += line[i + 1];
          i += 2;
          continue;
        }
        value += ch;
        i++;
      }
      i++;
      if (i < line.length && !isBlank(line[i])) {
        fail(`unexpected text after the closing quote of field ${fieldNumber}`);
      }
      fields.push(value);
    } else {
      const start = i;
      while (i < line.length && !isBlank(line[i])) {
        if (line[i] === '"') fail(`unexpected '"' inside unquoted field ${fieldNumber}`);
        i++;
      }
      fields.push(line.slice(start, i));
    }
  }
}

function lineBytes(line: string): number {
  // Every UTF-16 unit is at most 3 UTF-8 bytes; skip the encode when it cannot matter.
  if (line.length * 3 <= ACL_LINE_BYTES_MAX) return line.length;
  return new TextEncoder().encode(line).length;
}
