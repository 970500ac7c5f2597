/**
 * A small Go-style flag parser: `-name value`, `-name=value`, `--name value`,
 * `--name=value`; boolean flags take no value (`-json`, or `-json=false`);
 * `--` ends the flags; a repeated flag keeps its last value. `node:util`
 * parseArgs refuses single-dash long names, hence this file.
 */

import { parseDurationMs } from "../duration.ts";

export type FlagKind = "string" | "duration" | "int" | "bool";

export interface FlagSpec {
  readonly name: string;
  readonly kind: FlagKind;
  readonly help: string;
  /** Shown in usage; for durations, write it as a duration ("30s"). */
  readonly defaultText?: string;
}

export type FlagValue = string | number | boolean;

export interface ParsedFlags {
  /** Values by flag name; durations in milliseconds. */
  readonly values: Map<string, FlagValue>;
  /** Arguments that are not flags, in order (everything after `--` included). */
  readonly positionals: string[];
  /** Arguments after `--`, when `--` was given. */
  readonly afterDoubleDash: string[] | null;
}

/** A bad command line: the message is one line, fit for `lockd: <message>`. */
export class FlagError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "FlagError";
  }
}

/**
 * Parses `args` against `specs`. With `interspersed`, flags may follow
 * positional arguments (as in `lockd run NAME -wait 5s -- cmd`).
 */
export function parseFlags(
  args: readonly string[],
  specs: readonly FlagSpec[],
  { interspersed = true }: { interspersed?: boolean } = {},
): ParsedFlags {
  const byName = new Map(specs.map((spec) => [spec.name, spec]));
  const values = new Map<string, FlagValue>();
  const positionals: string[] = [];
  let afterDoubleDash: string[] | null = null;
  for (let i = 0; i < args.length; i++) {
    const arg = args[i];
    if (arg === "--") {
      afterDoubleDash = args.slice(i + 1);
      break;
    }
    if (!arg.startsWith("-") || arg === "-" || (!interspersed && positionals.length > 0)) {
      positionals.push(arg);
      continue;
    }
    const body = arg.replace(/^--?/, "");
    const eq = body.indexOf("=");
    const name = eq === -1 ? body : body.slice(0, eq);
    const spec = byName.get(name);
    if (spec === undefined) {
      if (name === "h" || name === "help") throw new HelpRequested();
      throw new FlagError(`flag provided but not defined: -${name}`);
    }
    let text: string;
    if (eq !== -1) {
      text = body.slice(eq + 1);
    } else if (spec.kind === "bool") {
      text = "true";
    } else {
      if (i + 1 >= args.length) throw new FlagError(`flag needs an argument: -${name}`);
      text = args[++i];
    }
    values.set(name, convert(spec, text));
  }
  return { values, positionals, afterDoubleDash };
}

/** Thrown for `-h` / `-help` when not defined as a flag: print usage, exit 0. */
export class HelpRequested extends Error {
  constructor() {
    super("help requested");
    this.name = "HelpRequested";
  }
}

function convert(spec: FlagSpec, text: string): FlagValue {
  switch (spec.kind) {
    case "string":
      return text;
    case "bool":
      if (text === "true" || text === "1") return true;
      if (text === "false" || text === "0") return false;
      throw new FlagError(`invalid boolean value "${text}" for flag -${spec.name}`);
    case "int": {
      const value = /^\d+$/.test(text) ? Number(text) : NaN;
      if (!Number.isSafeInteger(value)) {
        throw new FlagError(`invalid value "${text}" for flag -${spec.name}: want a whole number`);
      }
      return value;
    }
    case "duration": {
      const ms = parseDurationMs(text);
      if (ms === null) {
        throw new FlagError(
          `invalid value "${text}" for flag -${spec.name}: want a duration like 500ms, 30s, 5m`,
        );
      }
      return ms;
    }
  }
}

/** Usage lines for a set of flags, aligned. */
export function formatFlagHelp(specs: readonly FlagSpec[]): string {
  const lefts = specs.map((spec) =>
    `  -${spec.name}${
      spec.kind === "bool"
        ? ""
        : ` ${spec.kind === "duration" ? "duration" : spec.kind === "int" ? "n" : "value"}`
    }`
  );
  const width = Math.max(...lefts.map((left) => left.length)) + 2;
  return specs.map((spec, i) =>
    `${lefts[i].padEnd(width)}${spec.help}${
      spec.defaultText ? ` (default ${spec.defaultText})` : ""
    }`
  ).join("\n");
}
