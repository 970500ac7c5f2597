/**
 * Message shapes of the lockd wire protocol, version 1. Byte layouts are in
 * `docs/protocol.md`; the codec (`frame.ts`, `frame_reader.ts`) turns these
 * into frames and back.
 */

export const PROTOCOL_VERSION = 1;

/** ACQUIRE `waitMs` value meaning "wait as long as it takes". */
export const WAIT_FOREVER = 0xffff_ffff;

/** Type byte of each message. */
export const MessageType = {
  HELLO: 0x01,
  WELCOME: 0x02,
  ACQUIRE: 0x10,
  QUEUED: 0x11,
  ACQUIRED: 0x12,
  RELEASE: 0x13,
  RELEASED: 0x14,
  HEARTBEAT: 0x15,
  HEARTBEAT_ACK: 0x16,
  ERROR: 0x7f,
} as const;

/** Client → server: first frame of every connection. */
export interface Hello {
  type: "hello";
  version: number;
  clientName: string;
}
/** Server → client: answer to HELLO. */
export interface Welcome {
  type: "welcome";
  version: number;
  serverVersion: string;
  sessionId: number;
  ioTimeoutMs: number;
  leaseDefaultMs: number;
  leaseMaxMs: number;
}
/** Client → server: ask for a lock. `leaseMs` 0 = server default; `waitMs` 0 = try-lock, WAIT_FOREVER = no bound. */
export interface Acquire {
  type: "acquire";
  requestId: number;
  name: string;
  leaseMs: number;
  waitMs: number;
}
/** Server → client: the claim joined the queue at `position` (1 = next in line). */
export interface Queued {
  type: "queued";
  requestId: number;
  name: string;
  position: number;
}
/** Server → client: the claim is now the owner. */
export interface Acquired {
  type: "acquired";
  requestId: number;
  name: string;
  token: number;
  leaseMs: number;
}
/** Client → server: end an ownership (`token` of the grant) or cancel a queued claim (`token` 0). */
export interface Release {
  type: "release";
  requestId: number;
  name: string;
  token: number;
}
/** Server → client: the ownership ended (graceful) or the queued claim left the queue. */
export interface Released {
  type: "released";
  requestId: number;
  name: string;
}
/** Client → server: renews every ownership of the session and keeps the session alive. */
export interface Heartbeat {
  type: "heartbeat";
  requestId: number;
}
/** Server → client: answer to HEARTBEAT with the number of ownerships renewed. */
export interface HeartbeatAck {
  type: "heartbeat_ack";
  requestId: number;
  renewed: number;
}
/** Server → client: a request failed, or (request id 0 or the ACQUIRE's id) a server condition. */
export interface ErrorMessage {
  type: "error";
  requestId: number;
  code: number;
  name: string;
  message: string;
}

/** A client's frame after HELLO: each is one command of its session. */
export type ClientRequest = Acquire | Release | Heartbeat;
export type ClientMessage = Hello | ClientRequest;
export type ServerMessage =
  | Welcome
  | Queued
  | Acquired
  | Released
  | HeartbeatAck
  | ErrorMessage;
export type Message = ClientMessage | ServerMessage;
