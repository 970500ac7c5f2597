/**
 * A `Transport` over a node socket (the TLS listener's sessions).
 *
 * @module
 */

import type { Socket } from "node:net";
import type * as tls from "node:tls";
import { afterIoTurn, type Timer } from "../clock.ts";
import { TLS_READ_QUEUE_BYTES_MAX } from "../limits.ts";
import { log } from "../log/diagnostic.ts";
import type { Transport } from "./transport.ts";

const logger = log("tls");

/**
 * A `Transport` over a node socket. Reads are served from the chunks of
 * 'data' events. The socket is never paused: node:tls in Deno 2.9 keeps
 * reading the network while paused and buffers the bytes out of sight, so a
 * pause would hide memory instead of bounding it (measured: 256 MiB sent to a
 * paused socket all ended up buffered). Instead, a peer that is more than
 * `TLS_READ_QUEUE_BYTES_MAX` bytes ahead of its session at the end of an
 * event-loop turn is disconnected; sessions read eagerly, so a well-behaved
 * client never comes close. A write
 * resolves once the socket has passed the bytes on (its callback), which is
 * both the back-pressure and the guarantee that a final ERROR frame is out
 * before `close()`.
 */
export function nodeSocketTransport(
  socket: tls.TLSSocket | Socket,
  remoteAddr: string,
  identity: string,
): Transport {
  return new NodeSocketTransport(socket, remoteAddr, identity);
}

/** A read waiting for bytes. */
interface PendingRead {
  readonly buffer: Uint8Array;
  readonly resolve: (n: number | null) => void;
  readonly reject: (e: Error) => void;
}

class NodeSocketTransport implements Transport {
  readonly remoteAddr: string;
  readonly identity: string;
  readonly #socket: tls.TLSSocket | Socket;
  readonly #chunks: Uint8Array[] = [];
  #queuedBytes = 0;
  #ended = false;
  #failure: Error | null = null;
  #closedLocally = false;
  #pendingRead: PendingRead | null = null;
  readonly #pendingWrites = new Set<(error: Error) => void>();
  /**
   * Deno delivers up to a few MiB of 'data' events in one go, before the
   * session had a chance to read; so the limit is checked once the turn is
   * over: whatever is still queued then, the session did not want.
   */
  #overflowCheck: Timer | undefined;

  constructor(socket: tls.TLSSocket | Socket, remoteAddr: string, identity: string) {
    this.#socket = socket;
    this.remoteAddr = remoteAddr;
    this.identity = identity;
    socket.setNoDelay(true);
    socket.on("data", (chunk: Uint8Array) => {
      if (this.#failure !== null) return;
      this.#chunks.push(chunk);
      this.#queuedBytes += chunk.length;
      if (this.#queuedBytes > TLS_READ_QUEUE_BYTES_MAX && this.#overflowCheck === undefined) {
        this.#overflowCheck = afterIoTurn(() => this.#checkOverflow());
      }
      this.#settleRead();
    });
    socket.on("end", () => {
      this.#ended = true;
      this.#settleRead();
    });
    socket.on("error", (error: Error) => this.#fail(error));
    socket.on("close", () => {
      this.#ended = true;
      this.#overflowCheck?.cancel();
      for (const reject of this.#pendingWrites) {
        reject(this.#failure ?? new Error("Connection closed"));
      }
      this.#pendingWrites.clear();
      this.#settleRead();
    });
  }

  read(buffer: Uint8Array): Promise<number | null> {
    if (this.#pendingRead !== null) throw new Error("Only one read at a time");
    if (this.#queuedBytes > 0) return Promise.resolve(this.#copyInto(buffer));
    if (this.#failure !== null) return Promise.reject(this.#failure);
    if (this.#ended) return Promise.resolve(null);
    return new Promise((resolve, reject) => {
      this.#pendingRead = { buffer, resolve, reject };
    });
  }

  write(bytes: Uint8Array): Promise<number> {
    if (this.#failure !== null) return Promise.reject(this.#failure);
    const socket = this.#socket;
    if (this.#closedLocally || socket.destroyed) {
      return Promise.reject(new Error("Connection closed"));
    }
    return new Promise((resolve, reject) => {
      this.#pendingWrites.add(reject);
      socket.write(bytes, (error?: Error | null) => {
        if (!this.#pendingWrites.delete(reject)) return;
        if (error) reject(error);
        else resolve(bytes.length);
      });
    });
  }

  close(): void {
    if (this.#closedLocally) return;
    this.#closedLocally = true;
    this.#overflowCheck?.cancel();
    this.#fail(new Error("Connection closed"));
    this.#socket.destroy();
  }

  /** Moves queued bytes into `buffer`. */
  #copyInto(buffer: Uint8Array): number {
    const chunks = this.#chunks;
    let n = 0;
    while (n < buffer.length && chunks.length > 0) {
      const chunk = chunks[0];
      const take = Math.min(chunk.length, buffer.length - n);
      buffer.set(take === chunk.length ? chunk : chunk.subarray(0, take), n);
      n += take;
      if (take === chunk.length) chunks.shift();
      else chunks[0] = chunk.subarray(take);
    }
    this.#queuedBytes -= n;
    return n;
  }

  #settleRead(): void {
    const read = this.#pendingRead;
    if (read === null) return;
    if (this.#queuedBytes > 0) {
      this.#pendingRead = null;
      read.resolve(this.#copyInto(read.buffer));
    } else if (this.#failure !== null) {
      this.#pendingRead = null;
      read.reject(this.#failure);
    } else if (this.#ended) {
      this.#pendingRead = null;
      read.resolve(null);
    }
  }

  #fail(error: Error): void {
    this.#failure ??= error;
    for (const reject of this.#pendingWrites) reject(this.#failure);
    this.#pendingWrites.clear();
    this.#settleRead();
  }

  #checkOverflow(): void {
    this.#overflowCheck = undefined;
    if (this.#failure !== null || this.#queuedBytes <= TLS_READ_QUEUE_BYTES_MAX) return;
    logger.warn("client sent too far ahead of its session, closing", {
      remote_addr: this.remoteAddr,
      queued_bytes: this.#queuedBytes,
    });
    this.#chunks.length = 0;
    this.#queuedBytes = 0;
    this.#fail(new Error(`More than ${TLS_READ_QUEUE_BYTES_MAX} bytes received and not read`));
    this.#socket.destroy();
  }
}
