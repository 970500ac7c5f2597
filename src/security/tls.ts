/**
 * TLS material: reading and checking PEM files for the server (`-tls-cert`,
 * `-tls-key`, `-tls-client-ca`) and for the CLI clients (`-ca`, `-cert`,
 * `-key`).
 *
 * The files are checked here, before they reach a TLS stack, because
 * `node:tls` in Deno accepts a certificate that does not parse, or a key that
 * does not belong to the certificate, without a word, and then fails every
 * handshake. A start with such files fails with the file named; a SIGHUP
 * reload with them keeps the old certificates.
 *
 * @module
 */

import { createPrivateKey, X509Certificate } from "node:crypto";
import type { ClientTlsOptions } from "../client/connection.ts";
import { systemScheduler } from "../clock.ts";
import { parseHostPort } from "../host_port.ts";
import { log } from "../log/diagnostic.ts";
import { checkClientCaCertificates, checkServerCertificate } from "./cert_checks.ts";
import { DerError } from "./der.ts";
import { errorText } from "../error_text.ts";

const logger = log("tls");

/** PEM text the TLS listener serves with. */
export interface ServerTlsMaterial {
  /** Server certificate, optionally followed by its intermediates. */
  readonly cert: string;
  readonly key: string;
  /** CA bundle that must sign client certificates; present = mutual TLS. */
  readonly ca?: string;
  /** When the server certificate stops being valid (ms since the epoch). */
  readonly notAfterMs: number;
  /** Findings that do not stop the start (logged at warn), e.g. an expiry within 14 days. */
  readonly warnings: readonly string[];
}

/** Paths of the server's TLS files, as given by the flags. */
export interface ServerTlsPaths {
  cert: string;
  key: string;
  clientCa?: string | null;
  /** Host of `-listen`: a certificate that does not name it gets a warning. */
  listenHost?: string;
  /** "Now" for the validity checks (tests); the wall clock by default. */
  nowMs?: number;
}

/** A TLS file that cannot be used; the message names the file and the reason. */
export class TlsConfigError extends Error {
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = "TlsConfigError";
  }
}

/**
 * Loads the server's TLS files named by the configuration: null when TLS is
 * off, else the checked material. Throws TlsConfigError on a half-given pair
 * (`-tls-cert` without `-tls-key`, `-tls-client-ca` without both) or a file
 * that cannot be used.
 */
export async function loadServerTlsFromConfig(
  config: {
    tlsCert: string | null;
    tlsKey: string | null;
    tlsClientCa: string | null;
    listen?: string;
  },
): Promise<ServerTlsMaterial | null> {
  if ((config.tlsCert === null) !== (config.tlsKey === null)) {
    throw new TlsConfigError("-tls-cert and -tls-key go together");
  }
  if (config.tlsCert === null) {
    if (config.tlsClientCa !== null) {
      throw new TlsConfigError("-tls-client-ca needs -tls-cert and -tls-key");
    }
    return null;
  }
  const material = await loadServerTls({
    cert: config.tlsCert,
    key: config.tlsKey!,
    clientCa: config.tlsClientCa,
    listenHost: config.listen === undefined ? undefined : listenHostOf(config.listen),
  });
  for (const warning of material.warnings) {
    logger.warn("TLS certificate warning", { tls_cert: config.tlsCert, warning });
  }
  return material;
}

function listenHostOf(listen: string): string | undefined {
  try {
    return parseHostPort(listen).hostname;
  } catch {
    return undefined; // the flag check reports a bad address
  }
}

const PEM_CERTIFICATE = /-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g;

/** Reads and checks the server's certificate, key and (for mTLS) client CA bundle. */
export async function loadServerTls(paths: ServerTlsPaths): Promise<ServerTlsMaterial> {
  const [cert, key, ca] = await Promise.all([
    readPem(paths.cert, "-tls-cert"),
    readPem(paths.key, "-tls-key"),
    paths.clientCa ? readPem(paths.clientCa, "-tls-client-ca") : Promise.resolve(undefined),
  ]);
  const leaf = parseCertificates(cert, paths.cert)[0];
  checkKeyMatches(leaf, key, paths.key, paths.cert);
  // The real wall clock by default, never a server's scheduler: the TLS library judges the
  // certificates' validity by it, and this check must agree with the library.
  const nowMs = paths.nowMs ?? systemScheduler.wallMs();
  const errors: string[] = [];
  const warnings: string[] = [];
  const collect = (check: () => { errors: string[]; warnings: string[] }) => {
    try {
      const found = check();
      errors.push(...found.errors);
      warnings.push(...found.warnings);
    } catch (error) {
      if (!(error instanceof DerError)) throw error;
      errors.push(`A certificate in "${paths.cert}" is not valid DER: ${error.message}`);
    }
  };
  collect(() =>
    checkServerCertificate(leaf, { certPath: paths.cert, listenHost: paths.listenHost, nowMs })
  );
  if (ca !== undefined) {
    const authorities = parseCertificates(ca, paths.clientCa!);
    collect(() => checkClientCaCertificates(authorities, paths.clientCa!, nowMs));
  }
  if (errors.length > 0) throw new TlsConfigError(errors.join("\n"));
  return { cert, key, ca, notAfterMs: Date.parse(leaf.validTo), warnings };
}

/**
 * Reads the CLI's client TLS files (`-ca`, `-cert`, `-key`) into the options
 * of `connect()`. Undefined when none is given (plain TCP). `-cert` and
 * `-key` go together; `-ca` alone is TLS with a private CA and no client
 * certificate.
 */
export async function loadClientTls(
  { ca, cert, key }: { ca?: string; cert?: string; key?: string },
): Promise<ClientTlsOptions | undefined> {
  if (!ca && !cert && !key) return undefined;
  if (!cert !== !key) {
    throw new TlsConfigError("-cert and -key go together (the client certificate and its key)");
  }
  const [caPem, certPem, keyPem] = await Promise.all([
    ca ? readPem(ca, "-ca") : Promise.resolve(undefined),
    cert ? readPem(cert, "-cert") : Promise.resolve(undefined),
    key ? readPem(key, "-key") : Promise.resolve(undefined),
  ]);
  if (caPem !== undefined) parseCertificates(caPem, ca!);
  if (certPem !== undefined && keyPem !== undefined) {
    checkKeyMatches(parseCertificates(certPem, cert!)[0], keyPem, key!, cert!);
  }
  const options: ClientTlsOptions = {};
  if (caPem !== undefined) options.ca = caPem;
  if (certPem !== undefined) options.cert = certPem;
  if (keyPem !== undefined) options.key = keyPem;
  return options;
}

async function readPem(path: string, flag: string): Promise<string> {
  try {
    return await Deno.readTextFile(path);
  } catch (error) {
    throw new TlsConfigError(`Cannot read ${flag} file "${path}": ${errorText(error)}`, {
      cause: error,
    });
  }
}

/** Every certificate of a PEM bundle, parsed; throws when there is none or one is broken. */
function parseCertificates(pem: string, path: string): X509Certificate[] {
  const blocks = pem.match(PEM_CERTIFICATE) ?? [];
  if (blocks.length === 0) {
    throw new TlsConfigError(`"${path}" holds no PEM certificate (BEGIN CERTIFICATE)`);
  }
  return blocks.map((block, i) => {
    try {
      return new X509Certificate(block);
    } catch (error) {
      throw new TlsConfigError(
        `Certificate ${i + 1} in "${path}" cannot be parsed: ${errorText(error)}`,
        { cause: error },
      );
    }
  });
}

function checkKeyMatches(
  leaf: X509Certificate,
  keyPem: string,
  keyPath: string,
  certPath: string,
): void {
  let key;
  try {
    key = createPrivateKey(keyPem);
  } catch (error) {
    throw new TlsConfigError(`"${keyPath}" holds no usable private key: ${errorText(error)}`, {
      cause: error,
    });
  }
  if (!leaf.checkPrivateKey(key)) {
    throw new TlsConfigError(
      `The key in "${keyPath}" does not belong to the certificate in "${certPath}": give the ` +
        `key the certificate was issued for (openssl x509 -noout -pubkey -in CERT and ` +
        `openssl pkey -pubout -in KEY print the same public key for a matching pair)`,
    );
  }
}
