/**
 * Counters kept by the adapters (the engine keeps its own, see EngineStats).
 * `/metrics` reads both at scrape time, so every value is exact.
 */
export class ServerCounters {
  connectionsAccepted = 0;
  acceptErrors = 0;
  tlsHandshakeErrors = 0;
  aclDenials = 0;
  /** ERROR frames sent, by wire code. */
  readonly protocolErrors = new Map<number, number>();

  countError(code: number): void {
    this.protocolErrors.set(code, (this.protocolErrors.get(code) ?? 0) + 1);
  }
}
