/**
 * A small scanner for the tidy test (tests/tidy_test.ts): TypeScript text with its comments and
 * the insides of its strings, templates and regular expressions blanked (lengths and line breaks
 * kept, so offsets and line numbers still point into the file), and from that the imports, the
 * functions with their lengths, and the exported values of a module.
 *
 * It reads the code deno fmt writes, not every program the grammar allows; where it guesses (a
 * `/` that starts a regular expression, a return type before a body), the guess is the one that
 * holds for this tree, and tests/tidy/scan_test.ts pins the cases.
 */

/** One file's text two ways, of the same length: comments blanked, and strings blanked too. */
export interface Lexed {
  /** Comments blanked; strings, templates and regular expressions as written. */
  readonly text: string;
  /** Comments and the insides of strings, templates and regular expressions blanked. */
  readonly code: string;
}

/** Words after which a `/` starts a regular expression rather than dividing. */
const REGEX_AFTER_WORDS = new Set([
  "return",
  "typeof",
  "case",
  "do",
  "else",
  "in",
  "of",
  "new",
  "delete",
  "void",
  "throw",
  "instanceof",
  "yield",
  "await",
]);

const blank = (s: string) => s.replace(/[^\n]/g, " ");

/** Blanks comments (both outputs) and the insides of literals (`code` only). */
export function lex(source: string): Lexed {
  let text = "";
  let code = "";
  /** What each open `{` of code belongs to: a block, or a template's `${`. */
  const braces: ("block" | "template")[] = [];
  let i = 0;
  const n = source.length;
  const isWord = (c: string | undefined) => c !== undefined && /[\w$#]/.test(c);
  /** The last significant character of code written so far, and the word it ends. */
  const previous = (): { char: string; word: string } => {
    let j = code.length - 1;
    while (j >= 0 && /\s/.test(code[j])) j--;
    let k = j;
    while (k >= 0 && /[\w$]/.test(code[k])) k--;
    return { char: j >= 0 ? code[j] : "", word: code.slice(k + 1, j + 1) };
  };
  const emit = (written: string, asCode: string) => {
    text += written;
    code += asCode;
  };
  /** Reads a template's text from i (after the backquote) up to its end or a `${`. */
  const templateText = () => {
    let j = i;
    while (j < n && source[j] !== "`" && !(source[j] === "$" && source[j + 1] === "{")) {
      j += source[j] === "\\" ? 2 : 1;
    }
    const body = source.slice(i, j);
    emit(body, blank(body));
    i = j;
    if (source[i] === "`") {
      emit("`", "`");
      i++;
    } else if (i < n) {
      emit("${", "  ");
      braces.push("template");
      i += 2;
    }
  };
  while (i < n) {
    const c = source[i];
    const next = source[i + 1];
    if (c === "/" && next === "/") {
      const end = source.indexOf("\n", i);
      const stop = end === -1 ? n : end;
      const comment = blank(source.slice(i, stop));
      emit(comment, comment);
      i = stop;
    } else if (c === "/" && next === "*") {
      const end = source.indexOf("*/", i + 2);
      const stop = end === -1 ? n : end + 2;
      const comment = blank(source.slice(i, stop));
      emit(comment, comment);
      i = stop;
    } else if (c === '"' || c === "'") {
      let j = i + 1;
      while (j < n && source[j] !== c && source[j] !== "\n") j += source[j] === "\\" ? 2 : 1;
      const literal = source.slice(i, j + 1);
      emit(literal, c + blank(literal.slice(1, -1)) + (source[j] === c ? c : ""));
      i = j + 1;
    } else if (c === "`") {
      emit("`", "`");
      i++;
      templateText();
    } else if (c === "{") {
      braces.push("block");
      emit(c, c);
      i++;
    } else if (c === "}") {
      if (braces.pop() === "template") {
        emit("}", " ");
        i++;
        templateText();
      } else {
        emit(c, c);
        i++;
      }
    } else if (c === "/") {
      const { char, word } = previous();
      const startsRegex = char === "" || /[(,=:[!&|?{};+\-*%<>~^]/.test(char) ||
        (isWord(char) && REGEX_AFTER_WORDS.has(word));
      if (!startsRegex) {
        emit(c, c);
        i++;
        continue;
      }
      let j = i + 1;
      let inClass = false;
      while (j < n && source[j] !== "\n") {
        const d = source[j];
        if (d === "\\") j++;
        else if (d === "[") inClass = true;
        else if (d === "]") inClass = false;
        else if (d === "/" && !inClass) break;
        j++;
      }
      while (j + 1 < n && /[a-z]/.test(source[j + 1])) j++;
      const literal = source.slice(i, j + 1);
      emit(literal, "/" + blank(literal.slice(1)));
      i = j + 1;
    } else {
      emit(c, c);
      i++;
    }
  }
  return { text, code };
}

/** The 1-based line of an offset. */
export function lineAt(text: string, offset: number): number {
  let line = 1;
  for (let i = text.indexOf("\n"); i !== -1 && i < offset; i = text.indexOf("\n", i + 1)) line++;
  return line;
}

/** One import or re-export of a module. */
export interface Import {
  readonly specifier: string;
  readonly line: number;
  /** `import(...)`: a dynamic import (or `typeof import(...)` in a type). */
  readonly dynamic: boolean;
  /** `export ... from`: names passed on rather than used here. */
  readonly reexport: boolean;
  /** Imported name → local name (`*` for a namespace or `export *`). */
  readonly names: ReadonlyMap<string, string>;
}

/** The names of an import or export clause: `{ a, type b, c as d }`, `* as ns`, `x`. */
function clauseNames(clause: string): Map<string, string> {
  const names = new Map<string, string>();
  const namespace = /\*\s*(?:as\s+([\w$]+))?/.exec(clause);
  if (namespace) names.set("*", namespace[1] ?? "*");
  const braced = /\{([^}]*)\}/.exec(clause);
  if (braced) {
    for (const part of braced[1].split(",")) {
      const m = /^\s*(?:type\s+)?([\w$]+)(?:\s+as\s+([\w$]+))?\s*$/.exec(part);
      if (m) names.set(m[1], m[2] ?? m[1]);
    }
  }
  const initial = /^\s*(?:type\s+)?([\w$]+)\s*(?:,|$)/.exec(clause.replace(/\{[^}]*\}/, ""));
  if (initial && initial[1] !== "type") names.set("default", initial[1]);
  return names;
}

/** Every import, `export ... from` and dynamic import of a file, `import type` included. */
export function importsOf(lexed: Lexed): Import[] {
  const { text, code } = lexed;
  const found: Import[] = [];
  const statement =
    /(?<![\w$.])(import|export)(\s+type)?\s*([\w$*{}\s,]*?)\s*\bfrom\s*(["'])|(?<![\w$.])import\s*(["'])|(?<![\w$.])import\s*\(\s*(["'`])/g;
  for (const m of code.matchAll(statement)) {
    const quoteAt = m.index + m[0].length - 1;
    const end = text.indexOf(text[quoteAt], quoteAt + 1);
    const specifier = text.slice(quoteAt + 1, end);
    const dynamic = m[6] !== undefined;
    found.push({
      specifier,
      line: lineAt(text, m.index),
      dynamic,
      reexport: m[1] === "export",
      names: m[3] !== undefined ? clauseNames(m[3]) : new Map(),
    });
  }
  return found;
}

/** A function, method or arrow function with a block body. */
export interface FunctionSpan {
  readonly name: string;
  /** The line its header starts on. */
  readonly line: number;
  /** Lines from the header's first to the closing brace, both included. */
  readonly lines: number;
}

const CLOSERS: Record<string, string> = { "(": ")", "[": "]", "{": "}", "<": ">" };

/** The offset just after the bracket that closes the one at `open`, or -1. */
function closing(code: string, open: number): number {
  const stack: string[] = [];
  for (let i = open; i < code.length; i++) {
    const c = code[i];
    if (c === "=" && code[i + 1] === ">") {
      i++;
      continue;
    }
    if (c in CLOSERS && (c !== "<" || code[open] === "<")) stack.push(CLOSERS[c]);
    else if (c === stack.at(-1)) {
      stack.pop();
      if (stack.length === 0) return i + 1;
    }
  }
  return -1;
}

/**
 * The offset of the `{` that opens a body after a parameter list ending at `at`, past an
 * optional return type; -1 when what follows is no body (an overload, a signature, a call).
 */
function bodyAfter(code: string, at: number): number {
  let i = at;
  const skipSpace = () => {
    while (i < code.length && /\s/.test(code[i])) i++;
  };
  skipSpace();
  if (code[i] === "{") return i;
  if (code[i] !== ":") return -1;
  i++;
  let expectType = true;
  for (;;) {
    skipSpace();
    const c = code[i];
    if (c === undefined) return -1;
    if (c === "{" && !expectType) return i;
    if (c === "{" || c === "(" || c === "[" || c === "<") {
      const end = closing(code, i);
      if (end === -1) return -1;
      i = end;
      expectType = false;
    } else if (/[\w$."'`]/.test(c)) {
      while (i < code.length && /[\w$."'`\s]/.test(code[i]) && !/\s/.test(code[i])) i++;
      expectType = false;
    } else if (c === "|" || c === "&" || c === "?" || c === ":") {
      i++;
      expectType = true;
    } else if (c === "=" && code[i + 1] === ">") {
      i += 2;
      expectType = true;
    } else return -1;
  }
}

/** Words that look like a method header at a line's start but are not one. */
const NOT_METHODS = new Set([
  "if",
  "for",
  "while",
  "switch",
  "catch",
  "function",
  "return",
  "await",
  "typeof",
  "new",
  "super",
  "with",
  "throw",
  "yield",
  "void",
  "delete",
]);

/** Every function, method and arrow function with a block body, with its length in lines. */
export function functionsOf(lexed: Lexed): FunctionSpan[] {
  const { code } = lexed;
  const spans: FunctionSpan[] = [];
  const add = (name: string, start: number, body: number) => {
    const end = closing(code, body);
    if (end === -1) return;
    const line = lineAt(code, start);
    spans.push({ name, line, lines: lineAt(code, end - 1) - line + 1 });
  };
  const headers = [
    /(?<![\w$.])function\b\s*\*?\s*([\w$]*)\s*(?:<[^(]*?>)?\s*\(/g,
    /^[ \t]*(?:(?:public|private|protected|static|async|override|readonly|get|set|abstract)\s+)*\*?\s*(#?[\w$]+)\s*(?:<[^(\n]*?>)?\s*\(/gm,
  ];
  for (const [kind, header] of headers.entries()) {
    for (const m of code.matchAll(header)) {
      if (kind === 1 && NOT_METHODS.has(m[1])) continue;
      const paramsEnd = closing(code, m.index + m[0].length - 1);
      if (paramsEnd === -1) continue;
      const body = bodyAfter(code, paramsEnd);
      if (body !== -1) add(m[1] || "function", m.index + m[0].search(/\S/), body);
    }
  }
  for (const m of code.matchAll(/=>\s*\{/g)) {
    let start = m.index;
    while (start > 0 && /\s/.test(code[start - 1])) start--;
    if (code[start - 1] === ")") {
      for (let depth = 0, j = start - 1; j >= 0; j--) {
        if (code[j] === ")") depth++;
        else if (code[j] === "(" && --depth === 0) {
          start = j;
          break;
        }
      }
    }
    const lineStart = code.lastIndexOf("\n", start) + 1;
    const before = code.slice(lineStart, start);
    const name = /(?:const|let|var)\s+([\w$]+)/.exec(before)?.[1] ??
      /(#?[\w$]+)\s*[:=]\s*(?:async\s*)?$/.exec(before)?.[1] ?? "(arrow)";
    add(name, start, m.index + m[0].length - 1);
  }
  return spans.sort((a, b) => a.line - b.line);
}

/** The values a module exports by name (functions, classes, consts, lets, enums). */
export function exportedValues(lexed: Lexed): { name: string; line: number }[] {
  const { code } = lexed;
  const found: { name: string; line: number }[] = [];
  const declared =
    /^export\s+(?:declare\s+)?(?:async\s+)?(?:abstract\s+)?(?:function\s*\*?|class|const|let|var|enum)\s+([\w$]+)/gm;
  for (const m of code.matchAll(declared)) found.push({ name: m[1], line: lineAt(code, m.index) });
  const listed = /^export\s*\{([^}]*)\}\s*(?!\s*from)[;\n]/gm;
  for (const m of code.matchAll(listed)) {
    for (const part of m[1].split(",")) {
      const name = /^\s*([\w$]+)(?:\s+as\s+([\w$]+))?\s*$/.exec(part);
      if (name && !part.trim().startsWith("type ")) {
        found.push({ name: name[2] ?? name[1], line: lineAt(code, m.index) });
      }
    }
  }
  return found;
}
