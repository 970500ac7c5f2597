/**
 * What an error says, for a log field or a message that quotes it: the `message` of an `Error`,
 * anything else (a thrown string, a rejection reason) as text. A leaf: the client, the server
 * and the CLI share it (the core keeps its own, as it imports nothing but `limits.ts`).
 */

/** The message of an `Error`, or any other thrown value as text. */
export function errorText(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** Like `errorText`, with the stack where there is one: for failures that are bugs. */
export function errorStackText(error: unknown): string {
  return error instanceof Error ? (error.stack ?? error.message) : String(error);
}
