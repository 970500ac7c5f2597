/**
 * The rooms of docs/architecture.md as data, and the module graph checked against them: the
 * tidy test (tests/tidy_test.ts) parses the table, places every file in the room whose path
 * matches it most closely, and finds the imports that point down the table and the cycles.
 */

/** One row of the rooms table: its paths (a directory ends in `/`) and its place. */
export interface Room {
  /** The first cell as written, for messages. */
  readonly name: string;
  readonly paths: readonly string[];
  /** 0 for the first row: a file may import its own room's files and those of rooms above. */
  readonly rank: number;
}

/**
 * Parses the first table under the heading `## The rooms`: each row's first cell names the
 * room's paths as code spans, in their order.
 */
export function parseRooms(markdown: string): Room[] {
  const section = markdown.split(/^## /m).find((part) => part.startsWith("The rooms"));
  if (section === undefined) throw new Error('docs/architecture.md has no "## The rooms"');
  const rows = section.split("\n").filter((line) => line.startsWith("|")).slice(2);
  const rooms: Room[] = [];
  for (const row of rows) {
    const first = row.split("|")[1].trim();
    const paths = [...first.matchAll(/`([^`]+)`/g)].map((m) => m[1]);
    if (paths.length === 0) throw new Error(`a room without paths: ${row}`);
    rooms.push({ name: first, paths, rank: rooms.length });
  }
  return rooms;
}

/** The room of a file: the one with the longest path that is the file or a directory of it. */
export function roomOf(rooms: readonly Room[], file: string): Room | undefined {
  let best: Room | undefined;
  let bestLength = -1;
  for (const room of rooms) {
    for (const path of room.paths) {
      const matches = path.endsWith("/") ? file.startsWith(path) : file === path;
      if (matches && path.length > bestLength) {
        best = room;
        bestLength = path.length;
      }
    }
  }
  return best;
}

/** An import from one file of the tree to another. */
export interface Edge {
  readonly from: string;
  readonly to: string;
  readonly line: number;
}

/** The edges that point to a room below the importer's, as `from:line -> to`. */
export function upwardViolations(rooms: readonly Room[], edges: readonly Edge[]): string[] {
  const found: string[] = [];
  for (const edge of edges) {
    const from = roomOf(rooms, edge.from);
    const to = roomOf(rooms, edge.to);
    if (from === undefined || to === undefined) continue;
    if (to.rank > from.rank) found.push(`${edge.from} -> ${edge.to}`);
  }
  return found;
}

/**
 * The import cycles of a graph (Tarjan's strongly connected components with more than one
 * file, or a file importing itself), each as its files sorted and joined by " <-> ".
 */
export function cycles(edges: readonly Edge[]): string[] {
  const next = new Map<string, string[]>();
  for (const { from, to } of edges) {
    if (!next.has(from)) next.set(from, []);
    if (!next.has(to)) next.set(to, []);
    next.get(from)!.push(to);
  }
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const found: string[] = [];
  const visit = (file: string) => {
    index.set(file, index.size);
    low.set(file, index.get(file)!);
    stack.push(file);
    onStack.add(file);
    for (const to of next.get(file)!) {
      if (!index.has(to)) {
        visit(to);
        low.set(file, Math.min(low.get(file)!, low.get(to)!));
      } else if (onStack.has(to)) {
        low.set(file, Math.min(low.get(file)!, index.get(to)!));
      }
    }
    if (low.get(file) !== index.get(file)) return;
    const component: string[] = [];
    let member: string;
    do {
      member = stack.pop()!;
      onStack.delete(member);
      component.push(member);
    } while (member !== file);
    if (component.length > 1 || next.get(file)!.includes(file)) {
      found.push(component.sort().join(" <-> "));
    }
  };
  for (const file of next.keys()) if (!index.has(file)) visit(file);
  return found.sort();
}

/**
 * Checks an allow-list against what a rule found: every finding must be listed, and every
 * entry must still be found (a stale entry fails: the lists only shrink). Returns the
 * problems, each a line.
 */
export function allowListProblems(
  allowed: Readonly<Record<string, unknown>>,
  found: readonly string[],
): string[] {
  const problems = found.filter((key) => !(key in allowed)).map((key) => `not allowed: ${key}`);
  const seen = new Set(found);
  for (const key of Object.keys(allowed)) {
    if (!seen.has(key)) problems.push(`stale allow-list entry (remove it): ${key}`);
  }
  return problems;
}
