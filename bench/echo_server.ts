/**
 * The floor's trivial server: echoes every byte back (one write per read), prints its port. Its
 * read buffer is 1 KiB, lockd's smallest session read buffer (READ_BUFFER_BYTES_MIN), so that its
 * memory per connection is the runtime's floor for the same frames, not a larger buffer's.
 */
const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
console.log((listener.addr as Deno.NetAddr).port);
for await (const conn of listener) {
  conn.setNoDelay(true);
  (async () => {
    const buf = new Uint8Array(1024);
    try {
      for (;;) {
        const n = await conn.read(buf);
        if (n === null) break;
        let off = 0;
        while (off < n) off += await conn.write(buf.subarray(off, n));
      }
    } catch { /* peer gone */ }
    try {
      conn.close();
    } catch { /* closed */ }
  })();
}
