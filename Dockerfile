# lockd container image.
#
#   docker build -t lockd .
#   docker run -d --name lockd -p 7400:7400 -p 7402:7402 -v lockd-data:/var/lib/lockd lockd
#
# Ports: 7400 lock protocol, 7401 admin API (bound to the container's loopback by the default
# CMD: use `docker exec lockd /usr/local/bin/lockd admin ...`), 7402 ops (/metrics, /healthz).
# Keep /var/lib/lockd on a volume that outlives the container: it holds the fencing-token
# high-water mark. Audit log on stdout, diagnostic log (JSON) on stderr. See docs/operations.md.

# ---- build --------------------------------------------------------------------------------
FROM denoland/deno:2.9.6 AS build
WORKDIR /src

# Dependencies first (cached while the lockfile does not change); --frozen fails the build
# if deno.lock does not match deno.json.
COPY deno.json deno.lock ./
RUN deno install --frozen

COPY main.ts mod.ts ./
COPY src/ ./src/

# Permissions baked into the binary: network, and reading/writing the files named by flags
# (TLS certificate/key/CA, ACL, admin token, -data-dir, -audit-log). No --allow-env (lockd reads
# no environment variables) and no --allow-sys (the runtime metrics use Deno.memoryUsage() and
# timers, which need none). --allow-run is for `lockd run` alone: every other command (serve
# above all) revokes it at start (src/cli/permissions.ts). No --allow-ffi, --allow-import.
RUN deno compile --frozen \
      --allow-net --allow-read --allow-write --allow-run \
      --output /out/lockd main.ts \
 && /out/lockd version \
 && mkdir -p /out/data

# ---- runtime ------------------------------------------------------------------------------
# glibc + libgcc, no shell, no package manager; runs as uid/gid 65532 ("nonroot").
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/lockd /usr/local/bin/lockd
# An empty data directory owned by the runtime user, so a fresh named volume inherits it.
COPY --from=build --chown=65532:65532 /out/data /var/lib/lockd
USER 65532:65532
EXPOSE 7400 7401 7402
VOLUME ["/var/lib/lockd"]
# SIGTERM: probes answer 503 at once, sessions get SHUTTING_DOWN, the ops server stays up for
# -shutdown-grace (5s) and lockd exits 0. `docker stop` waits 10s before SIGKILL: keep
# -shutdown-grace below that, or raise it with `docker stop -t` / `--stop-timeout`.
STOPSIGNAL SIGTERM
# The image has no shell or curl: `lockd health` GETs http://ADDR/healthz and exits 0 on 200.
# It goes over the container's loopback on purpose: the ops listener (on all interfaces, for
# Prometheus) keeps room for loopback connections that no remote client can take or close, so a
# flood of connections to 7402 from outside cannot fail the check and get a healthy container
# restarted (docs/operations.md, "HTTP limits").
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
  CMD ["/usr/local/bin/lockd", "health", "-ops", "127.0.0.1:7402"]
ENTRYPOINT ["/usr/local/bin/lockd"]
# -data-dir is the volume: the default (lockd-data/ in the working directory) would live and die
# with the container, and tokens would start over from the clock floor.
CMD ["serve", "-listen", "0.0.0.0:7400", "-admin-listen", "127.0.0.1:7401", "-ops-listen", "0.0.0.0:7402", "-data-dir", "/var/lib/lockd", "-log-format", "json"]
