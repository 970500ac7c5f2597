import { LOCK_NAME_BYTES_MAX } from "../limits.ts";

const encoder = new TextEncoder();
// C0 controls and DEL, plus C1 controls.
// deno-lint-ignore no-control-regex
const CONTROL_CHARACTERS = /[\u0000-\u001f\u007f-\u009f]/;

/**
 * Checks a lock name: 1..1024 UTF-8 bytes, no control characters, not "." or
 * ".." (URL paths of the admin API cannot carry those). Returns the reason it
 * is refused, or null when it is fine.
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
  return null;
}
