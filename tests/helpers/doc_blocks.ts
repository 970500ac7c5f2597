/**
 * Code blocks of the Markdown docs, for tests that run or type-check them as
 * written. A block is found by the HTML comment marker placed just before it
 * (`<!-- tls-recipe -->`), so rewording the prose around it never breaks a test.
 */

const ROOT = new URL("../../", import.meta.url);

/** Text of a file of the repository (`docs/operations.md`). */
export function readRepoFile(path: string): string {
  return Deno.readTextFileSync(new URL(path, ROOT));
}

/** A fenced code block: its language tag, body and 1-based line of the opening fence. */
export interface CodeBlock {
  readonly lang: string;
  readonly body: string;
  readonly line: number;
}

/** Every fenced code block of a Markdown text, in order. */
export function codeBlocks(markdown: string): CodeBlock[] {
  const blocks: CodeBlock[] = [];
  const lines = markdown.split("\n");
  for (let i = 0; i < lines.length; i++) {
    const open = /^(\s*)(```+)(\S*)\s*$/.exec(lines[i]);
    if (open === null) continue;
    const [, indent, fence, lang] = open;
    const body: string[] = [];
    let j = i + 1;
    while (j < lines.length && lines[j].trimEnd() !== `${indent}${fence}`) {
      body.push(lines[j].startsWith(indent) ? lines[j].slice(indent.length) : lines[j]);
      j++;
    }
    blocks.push({ lang, body: body.join("\n") + "\n", line: i + 1 });
    i = j;
  }
  return blocks;
}

/** The code block that follows `<!-- marker -->`; throws when there is none. */
export function markedBlock(markdown: string, marker: string): CodeBlock {
  const comment = `<!-- ${marker} -->`;
  const at = markdown.indexOf(comment);
  if (at < 0) throw new Error(`No ${comment} in the document`);
  const line = markdown.slice(0, at).split("\n").length;
  const block = codeBlocks(markdown).find((b) => b.line > line);
  if (block === undefined) throw new Error(`No code block after ${comment}`);
  return block;
}

/** Runs a shell script with bash -eu in `cwd`; resolves with its output, rejects on failure. */
export async function runBash(
  script: string,
  options: { cwd: string; env?: Record<string, string> },
): Promise<{ stdout: string; stderr: string }> {
  const output = await new Deno.Command("bash", {
    args: ["-euo", "pipefail", "-c", script],
    cwd: options.cwd,
    env: options.env,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).output();
  const stdout = new TextDecoder().decode(output.stdout);
  const stderr = new TextDecoder().decode(output.stderr);
  if (!output.success) {
    throw new Error(
      `script failed with status ${output.code}:\n${script}\n--- stdout\n${stdout}\n--- stderr\n${stderr}`,
    );
  }
  return { stdout, stderr };
}
