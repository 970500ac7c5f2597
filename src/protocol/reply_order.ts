/**
 * The reply order of one session: frames leave in the order the service decided them, and a
 * place reserved for a frame that waits (for its audit record, or for the leadership gate) holds
 * back every frame decided after it (docs/architecture.md, "Reply order"). `Session` keeps its
 * replies in one, and so does the contract suite's socketless transport, so the order a test
 * sees without sockets is the order the server keeps.
 *
 * @module
 */

/** What a reply order does with its frames, and how much it lets wait. */
export interface ReplyOrderOptions<T> {
  /** A frame whose turn came: every frame decided before it has been delivered (or dropped). */
  deliver(frame: T): void;
  /** Every place has been filled and delivered: nothing waits any more. */
  drained?(): void;
  /** Rough bytes of a waiting frame (null: a place not filled yet), to bound what may wait. */
  weigh?(frame: T | null): number;
  /** Bytes that may wait (by `weigh`); past it every waiting frame is dropped. */
  bytesMax?: number;
  /** What waited passed `bytesMax` and was dropped (`bytes`: what it came to). */
  overflowed?(bytes: number): void;
}

/** A place in the order: a frame decided at once (ready), or one reserved by `hold`. */
interface Place<T> {
  frame: T | null;
  ready: boolean;
}

/**
 * A queue of frames in decision order. A frame sent while nothing waits is delivered at once (the
 * common case costs no allocation); otherwise it waits behind the first unfilled place.
 */
export class ReplyOrder<T> {
  readonly #options: ReplyOrderOptions<T>;
  /** Places in decision order; `#head` is the first not yet delivered. */
  #places: Place<T>[] = [];
  #head = 0;
  #bytes = 0;

  constructor(options: ReplyOrderOptions<T>) {
    this.#options = options;
  }

  /** Whether nothing waits: a frame sent now is delivered at once. */
  get idle(): boolean {
    return this.#head === this.#places.length;
  }

  /** A frame decided now: delivered after every frame decided before it. */
  send(frame: T): void {
    if (this.idle) this.#options.deliver(frame);
    else this.#push({ frame, ready: true });
  }

  /**
   * Reserves the next place; every frame decided later waits until it is filled. The returned
   * function fills it, once (later calls do nothing), with the frame for that place or null
   * (nothing to send there: only the wait mattered).
   */
  hold(): (frame: T | null) => void {
    const place: Place<T> = { frame: null, ready: false };
    this.#push(place);
    return (frame) => {
      if (place.ready) return;
      place.ready = true;
      place.frame = frame;
      this.#drain();
    };
  }

  /** Forgets every waiting frame and place (the session closed); filling one later does nothing. */
  clear(): void {
    this.#places = [];
    this.#head = 0;
    this.#bytes = 0;
  }

  #push(place: Place<T>): void {
    this.#places.push(place);
    this.#bytes += this.#options.weigh?.(place.frame) ?? 0;
    const bytesMax = this.#options.bytesMax;
    if (bytesMax !== undefined && this.#bytes > bytesMax) {
      const bytes = this.#bytes;
      this.clear();
      this.#options.overflowed?.(bytes);
    }
  }

  /** Delivers the ready prefix. `deliver` may clear the order (the session closed): so be it. */
  #drain(): void {
    while (this.#head < this.#places.length && this.#places[this.#head].ready) {
      const place = this.#places[this.#head++];
      this.#bytes -= this.#options.weigh?.(place.frame) ?? 0;
      if (place.frame !== null) this.#options.deliver(place.frame);
    }
    if (this.idle) {
      this.clear();
      this.#options.drained?.();
    }
  }
}
