import { LOCK_NAME_BYTES_MAX } from "../limits.ts";

const encoder = new TextEncoder();
// C0 controls and DEL, plus C1 controls.
// deno-lint-ignore no-control-regex
const CONTROL_CHARACTERS = /[\u0000-\u001f\u007f-\u009f]/;
// Below U+0300 every code point is its own NFC and none combines with a neighbour, so
// text made only of them is NFC without running the normalizer.
// deno-lint-ignore no-control-regex
const BELOW_COMBINING_MARKS = /^[\u0000-\u02ff]*$/;

/** Why a name that is not NFC is refused (the wire, the admin API and the docs use this text). */
export const NOT_NFC_REASON = "not in Unicode Normalization Form C (NFC)";

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
 * control characters, not "." or ".." (URL paths of the admin API cannot
 * carry those). Returns the reason it is refused, or null when it is fine.
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
  return null;
}
