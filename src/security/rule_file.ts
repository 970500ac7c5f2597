/**
 * What the server's rule files share (the ACL, `acl.ts`, and the lock rules, `lock_rules.ts`):
 * strict UTF-8, one rule per line, fields separated by blanks, quoting, comments, a line-length
 * bound, and errors reported as `file:line: reason`.
 *
 * - A field that starts with `"` is quoted: it may contain spaces and `#`, or be empty. Inside
 *   quotes `\"` and `\\` are escapes; any other backslash is kept (for the glob).
 * - A `#` at the start of a field (start of line or after whitespace) comments out the rest.
 * - A leading BOM and CRLF line ends are accepted.
 *
 * @module
 */

import { errorText } from "../error_text.ts";
import { firstInvalidUtf8 } from "./utf8.ts";

/** A rule file that cannot be used; `message` is `${fileName}:${line}: ${reason}`. */
export class RuleFileError extends Error {
  readonly fileName: string;
  /** 1-based line, or 0 when the file as a whole is at fault (cannot be read). */
  readonly line: number;
  readonly reason: string;

  constructor(fileName: string, line: number, reason: string) {
    super(`${fileName}:${line}: ${reason}`);
    this.name = "RuleFileError";
    this.fileName = fileName;
    this.line = line;
    this.reason = reason;
  }
}

/** Builds the error class of one kind of rule file. */
export type RuleFileErrorClass = new (fileName: string, line: number, reason: string) => Error;

/** One line that holds a rule: its 1-based number, its fields, and how to refuse it. */
export interface RuleLine {
  readonly line: number;
  readonly fields: readonly string[];
  readonly fail: (reason: string) => never;
}

/**
 * The lines of a rule file that hold a rule (blank and comment lines dropped), with their fields.
 * Throws `ErrorClass` for a line longer than `lineBytesMax` UTF-8 bytes or a quoting error.
 */
export function ruleLines(
  text: string,
  fileName: string,
  lineBytesMax: number,
  ErrorClass: RuleFileErrorClass,
): RuleLine[] {
  const result: RuleLine[] = [];
  const lines = text.split("\n");
  // A trailing newline does not start another line.
  if (lines.length > 1 && lines[lines.length - 1] === "") lines.pop();
  for (let index = 0; index < lines.length; index++) {
    const lineNumber = index + 1;
    let line = lines[index];
    if (line.endsWith("\r")) line = line.slice(0, -1);
    if (index === 0 && line.startsWith("\uFEFF")) line = line.slice(1);
    const fail = (reason: string): never => {
      throw new ErrorClass(fileName, lineNumber, reason);
    };
    const bytes = lineBytes(line, lineBytesMax);
    if (bytes > lineBytesMax) {
      fail(`line is ${bytes} bytes long, more than the limit of ${lineBytesMax}`);
    }
    const fields = splitFields(line, fail);
    if (fields.length > 0) result.push({ line: lineNumber, fields, fail });
  }
  return result;
}

/**
 * Reads a whole rule file as UTF-8. A file that cannot be read is an error at line 0
 * (`path:0: cannot read: ...`); a file that is not valid UTF-8 is refused at the line of its
 * first bad byte, because a lenient decode would turn the bytes into U+FFFD and change what the
 * rules match.
 */
export async function readRuleFile(
  path: string,
  readFile: (path: string) => Promise<Uint8Array>,
  ErrorClass: RuleFileErrorClass,
): Promise<string> {
  let bytes: Uint8Array;
  try {
    bytes = await readFile(path);
  } catch (err) {
    throw new ErrorClass(path, 0, `cannot read: ${errorText(err)}`);
  }
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
    throw new ErrorClass(
      path,
      line,
      `invalid UTF-8: byte 0x${byte} at byte ${bad - lineStart + 1} of the line`,
    );
  }
  return new TextDecoder("utf-8", { fatal: true }).decode(bytes);
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

function lineBytes(line: string, lineBytesMax: number): number {
  // Every UTF-16 unit is at most 3 UTF-8 bytes; skip the encode when it cannot matter.
  if (line.length * 3 <= lineBytesMax) return line.length;
  return new TextEncoder().encode(line).length;
}
