/**
 * A binary min-heap of deadlines whose nodes know their own index, so a node
 * can be removed or re-keyed in O(log n). One heap drives every lease, wait
 * bound and I/O timeout, with one re-armed timer outside (see DENO-NOTES:
 * a timer per lease costs far more).
 */
export interface DeadlineNode {
  /** Monotonic milliseconds at which the node is due. */
  atMs: number;
  /** Position in the heap, -1 when not in it. Owned by the heap. */
  heapIndex: number;
}

export class DeadlineHeap<T extends DeadlineNode> {
  #nodes: T[] = [];

  get size(): number {
    return this.#nodes.length;
  }

  /** The earliest node, or undefined when empty. */
  peek(): T | undefined {
    return this.#nodes[0];
  }

  insert(node: T): void {
    if (node.heapIndex !== -1) throw new Error("Cannot insert a node that is already in the heap");
    node.heapIndex = this.#nodes.length;
    this.#nodes.push(node);
    this.#siftUp(node.heapIndex);
  }

  /** Removes a node if present; a node not in the heap is ignored. */
  remove(node: T): void {
    const index = node.heapIndex;
    if (index === -1) return;
    const last = this.#nodes.pop()!;
    node.heapIndex = -1;
    if (last !== node) {
      this.#nodes[index] = last;
      last.heapIndex = index;
      this.#siftDown(index);
      this.#siftUp(last.heapIndex);
    }
  }

  /** Moves a node to a new deadline (inserting it when absent). */
  update(node: T, atMs: number): void {
    node.atMs = atMs;
    if (node.heapIndex === -1) {
      this.insert(node);
      return;
    }
    this.#siftDown(node.heapIndex);
    this.#siftUp(node.heapIndex);
  }

  #siftUp(index: number): void {
    const nodes = this.#nodes;
    const node = nodes[index];
    while (index > 0) {
      const parentIndex = (index - 1) >> 1;
      const parent = nodes[parentIndex];
      if (parent.atMs <= node.atMs) break;
      nodes[index] = parent;
      parent.heapIndex = index;
      index = parentIndex;
    }
    nodes[index] = node;
    node.heapIndex = index;
  }

  #siftDown(index: number): void {
    const nodes = this.#nodes;
    const length = nodes.length;
    const node = nodes[index];
    for (;;) {
      const left = 2 * index + 1;
      if (left >= length) break;
      const right = left + 1;
      const child = right < length && nodes[right].atMs < nodes[left].atMs ? right : left;
      if (nodes[child].atMs >= node.atMs) break;
      nodes[index] = nodes[child];
      nodes[index].heapIndex = index;
      index = child;
    }
    nodes[index] = node;
    node.heapIndex = index;
  }
}
