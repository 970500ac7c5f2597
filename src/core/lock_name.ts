import { LOCK_NAME_BYTES_MAX } from "../limits.ts";

const encoder = new TextEncoder();
// C0 controls and DEL, plus C1 controls.
// deno-lint-ignore no-control-regex
const CONTROL_CHARACTERS = /[\u0000-\u001f\u007f-\u009f]/;
// Invisible characters that change how the text around them is shown, or that show nothing: every
// format character (Unicode category Cf: the bidirectional controls U+061C, U+200E, U+200F,
// U+202A–U+202E and U+2066–U+2069, the zero-width U+200B–U+200D, U+2060–U+2064 and U+FEFF,
// U+00AD, U+180E, tags...). The line and paragraph separators U+2028/U+2029 (Zl, Zp) stay
// allowed, as before: they are visible breaks, and logs and JSON escape them.
const INVISIBLE = /\p{Cf}/u;
const BIDI_CONTROLS = /[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/;
// Below U+0300 every code point is its own NFC and none combines with a neighbour, so
// text made only of them is NFC without running the normalizer.
// deno-lint-ignore no-control-regex
const BELOW_COMBINING_MARKS = /^[\u0000-\u02ff]*$/;

/** Why a name that is not NFC is refused (the wire, the admin API and the docs use this text). */
export const NOT_NFC_REASON = "not in Unicode Normalization Form C (NFC)";

/**
 * The first invisible format character of `text` (a bidirectional control, a zero-width or other
 * Unicode format character: category Cf) and what it is, or null. Lock names
 * and globs must not contain one: `jobs/\u202Egol` shows as `jobs/log` reversed, and a name with
 * a zero-width space looks like the name without it.
 */
export function invisibleCharacter(
  text: string,
): { readonly codePoint: number; readonly index: number; readonly what: string } | null {
  const match = INVISIBLE.exec(text);
  if (match === null) return null;
  const codePoint = match[0].codePointAt(0)!;
  const what = BIDI_CONTROLS.test(match[0])
    ? "a bidirectional control character"
    : "an invisible format character";
  return { codePoint, index: match.index, what: `${what} (${codePointText(codePoint)})` };
}

/**
 * `text` with every control and invisible format character written as an escape (`\u202E`), for
 * error messages that quote a refused name or pattern: quoted raw, a bidirectional control would
 * reorder the message around it.
 */
export function escapeInvisible(text: string): string {
  return text.replace(
    /[\p{Cc}\p{Cf}\u2028\u2029]/gu,
    (c) => {
      const hex = c.codePointAt(0)!.toString(16).toUpperCase();
      return hex.length <= 4 ? `\\u${hex.padStart(4, "0")}` : `\\u{${hex}}`;
    },
  );
}

/** `U+202E` style. */
function codePointText(codePoint: number): string {
  return "U+" + codePoint.toString(16).toUpperCase().padStart(4, "0");
}

/**
 * Whether `text` is in Unicode Normalization Form C. Lock names and globs
 * must be: one spelling per name, so a look-alike spelling (`e` + U+0301 for
 * `é`) can neither hold a second lock of the "same" name nor slip past an
 * ACL rule written in the usual spelling.
 */
export function isNfc(text: string): boolean {
  return BELOW_COMBINING_MARKS.test(text) || text.normalize("NFC") === text;
}

/**
 * Checks a lock name: 1..1024 UTF-8 bytes, well-formed Unicode in NFC, no
 * control characters, no invisible format characters (`invisibleCharacter`),
 * not "." or ".." (URL paths of the admin API cannot carry those). Returns the
 * reason it is refused, or null when it is fine.
 */
export function lockNameProblem(name: string): string | null {
  if (name.length === 0) return "lock name is empty";
  const bytes = name.length <= LOCK_NAME_BYTES_MAX / 3 ? name.length : encoder.encode(name).length;
  if (bytes > LOCK_NAME_BYTES_MAX) {
    return `lock name is ${bytes} bytes, the limit is ${LOCK_NAME_BYTES_MAX}`;
  }
  if (CONTROL_CHARACTERS.test(name)) return "lock name contains a control character";
  if (name === "." || name === "..") return `lock name "${name}" is reserved`;
  if (name.isWellFormed && !name.isWellFormed()) return "lock name is not valid Unicode";
  if (!isNfc(name)) return `lock name is ${NOT_NFC_REASON}`;
  const invisible = invisibleCharacter(name);
  if (invisible !== null) return `lock name contains ${invisible.what}`;
  return null;
}
