/**
 * Start-up checks of the server certificate: the mistakes that otherwise
 * show up only as every client's handshake failing, with a message on the
 * client side that names no file (`CaUsedAsEndEntity`, `UnknownIssuer`,
 * `NotValidForName`, "certificate expired").
 *
 * A finding is an error (the start stops, a SIGHUP reload keeps the old
 * certificates) when no client could ever accept the certificate, and a
 * warning when some could: a certificate that does not name the listen
 * address is fine for clients that dial a DNS name resolving to it.
 *
 * @module
 */

import { X509Certificate } from "node:crypto";
import {
  children,
  contents,
  contentsEqual,
  DER_TAGS,
  type DerElement,
  expectTag,
  readWhole,
} from "./der.ts";
import { CERT_EXPIRY_WARNING_MS } from "../limits.ts";
import { readCertificateNames } from "./identity.ts";

/** Where the recipe that makes a good set of certificates is. */
const TLS_RECIPE_REF = `docs/operations.md, "A TLS recipe"`;

/** What the checks found; each text names the file and says what to do. */
export interface CertificateFindings {
  readonly errors: string[];
  readonly warnings: string[];
}

/** What the checks need to know besides the certificate. */
export interface ServerCertificateContext {
  /** The `-tls-cert` path, for the messages. */
  readonly certPath: string;
  /** Host part of `-listen` (no brackets); wildcard addresses are not checked. */
  readonly listenHost?: string;
  readonly nowMs: number;
}

// OID contents (without tag and length).
const OID_BASIC_CONSTRAINTS = new Uint8Array([0x55, 0x1d, 0x13]); // 2.5.29.19
const OID_EXTENDED_KEY_USAGE = new Uint8Array([0x55, 0x1d, 0x25]); // 2.5.29.37
const OID_ANY_EXTENDED_KEY_USAGE = new Uint8Array([0x55, 0x1d, 0x25, 0x00]); // 2.5.29.37.0
const OID_SERVER_AUTH = new Uint8Array([0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x01]);
const OID_CLIENT_AUTH = new Uint8Array([0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x02]);

/** The parts of a certificate the checks read from its DER. */
export interface CertificateProfile {
  /** 1, 2 or 3 (the X.509 version, not the encoded 0..2). */
  readonly version: number;
  /** basicConstraints cA; false when the extension is absent. */
  readonly isCa: boolean;
  /** Extended key usages; null when the extension is absent (every use allowed). */
  readonly extendedKeyUsage: { serverAuth: boolean; clientAuth: boolean; any: boolean } | null;
}

/** Reads version, basicConstraints and extendedKeyUsage; throws DerError on bad DER. */
export function readCertificateProfile(der: Uint8Array): CertificateProfile {
  const certificate = expectTag(readWhole(der), DER_TAGS.SEQUENCE, "certificate");
  const tbs = expectTag(children(certificate)[0], DER_TAGS.SEQUENCE, "tbsCertificate");
  const fields = children(tbs);
  let version = 1;
  if (fields[0]?.tag === 0xa0) {
    const integer = expectTag(children(fields[0])[0], DER_TAGS.INTEGER, "version");
    version = (contents(integer)[0] ?? 0) + 1;
  }
  let isCa = false;
  let extendedKeyUsage: CertificateProfile["extendedKeyUsage"] = null;
  const explicit = fields.find((field) => field.tag === 0xa3);
  if (explicit !== undefined) {
    const list = expectTag(children(explicit)[0], DER_TAGS.SEQUENCE, "extensions");
    for (const extension of children(list)) {
      const parts = children(extension);
      const oid = expectTag(parts[0], DER_TAGS.OID, "extnID");
      const value = expectTag(parts.at(-1), DER_TAGS.OCTET_STRING, "extnValue");
      if (contentsEqual(oid, OID_BASIC_CONSTRAINTS)) {
        const sequence = expectTag(readWhole(contents(value)), DER_TAGS.SEQUENCE, "basic");
        const first: DerElement | undefined = children(sequence)[0];
        isCa = first?.tag === DER_TAGS.BOOLEAN && contents(first)[0] !== 0;
      } else if (contentsEqual(oid, OID_EXTENDED_KEY_USAGE)) {
        const sequence = expectTag(readWhole(contents(value)), DER_TAGS.SEQUENCE, "eku");
        const oids = children(sequence);
        extendedKeyUsage = {
          serverAuth: oids.some((o) => contentsEqual(o, OID_SERVER_AUTH)),
          clientAuth: oids.some((o) => contentsEqual(o, OID_CLIENT_AUTH)),
          any: oids.some((o) => contentsEqual(o, OID_ANY_EXTENDED_KEY_USAGE)),
        };
      }
    }
  }
  return { version, isCa, extendedKeyUsage };
}

const WILDCARD_HOSTS = new Set(["", "0.0.0.0", "::", "[::]"]);

/** Checks the leaf certificate of `-tls-cert` for what makes clients refuse it. */
export function checkServerCertificate(
  leaf: X509Certificate,
  context: ServerCertificateContext,
): CertificateFindings {
  const errors: string[] = [];
  const warnings: string[] = [];
  const file = `"${context.certPath}" (-tls-cert)`;
  const der = new Uint8Array(leaf.raw);
  const profile = readCertificateProfile(der);

  if (profile.version < 3) {
    errors.push(
      `The certificate in ${file} is an X.509 v${profile.version} certificate; TLS clients ` +
        `(rustls, used by Deno) accept only v3 certificates with a subjectAltName. Issue a v3 ` +
        `certificate: ${TLS_RECIPE_REF}`,
    );
  }
  if (profile.isCa) {
    errors.push(
      `The certificate in ${file} is a CA certificate (basicConstraints CA:TRUE), which clients ` +
        `refuse as a server certificate (rustls: CaUsedAsEndEntity). A self-signed certificate ` +
        `made with "openssl req -x509" is one. Sign a server certificate with ` +
        `basicConstraints=critical,CA:FALSE by a CA instead: ${TLS_RECIPE_REF}`,
    );
  }
  checkValidity(leaf, context.nowMs, file, { errors, warnings });
  const eku = profile.extendedKeyUsage;
  if (eku !== null && !eku.serverAuth && !eku.any) {
    errors.push(
      `The certificate in ${file} has an extendedKeyUsage without serverAuth, so clients refuse ` +
        `it as a server certificate. Issue it with extendedKeyUsage=serverAuth: ${TLS_RECIPE_REF}`,
    );
  }
  checkServerNames(leaf, der, context, { errors, warnings });
  return { errors, warnings };
}

/** The server certificate's validity window against the time now: expired, early, expiring. */
function checkValidity(
  leaf: X509Certificate,
  nowMs: number,
  file: string,
  { errors, warnings }: CertificateFindings,
): void {
  const notBeforeMs = Date.parse(leaf.validFrom);
  const notAfterMs = Date.parse(leaf.validTo);
  const now = new Date(nowMs).toISOString();
  if (nowMs > notAfterMs) {
    errors.push(
      `The certificate in ${file} expired at ${leaf.validTo} (now ${now}); clients refuse it. ` +
        `Put a renewed certificate at the same path (see "Rotating TLS certificates" in ` +
        `docs/operations.md).`,
    );
  } else if (nowMs < notBeforeMs) {
    errors.push(
      `The certificate in ${file} is not valid before ${leaf.validFrom} (now ${now}); clients ` +
        `refuse it. Check this host's clock (timedatectl), or use a certificate that is ` +
        `valid now.`,
    );
  } else if (notAfterMs - nowMs < CERT_EXPIRY_WARNING_MS) {
    const days = Math.floor((notAfterMs - nowMs) / 86_400_000);
    warnings.push(
      `The certificate in ${file} expires at ${leaf.validTo} (in ${days} days); renew it and ` +
        `reload (systemctl reload lockd).`,
    );
  }
}

/** The server certificate's names: some DNS or IP name, and the listen address among them. */
function checkServerNames(
  leaf: X509Certificate,
  der: Uint8Array,
  context: ServerCertificateContext,
  { errors, warnings }: CertificateFindings,
): void {
  const file = `"${context.certPath}" (-tls-cert)`;
  const names = readCertificateNames(der).subjectAltNames;
  const dnsNames = names.filter((n) => n.type === "DNS").map((n) => `DNS:${n.value}`);
  const ipCount = names.filter((n) => n.type === "IP").length;
  if (dnsNames.length === 0 && ipCount === 0) {
    errors.push(
      `The certificate in ${file} has no DNS or IP subjectAltName; clients check the name they ` +
        `dial against these only (never the CN), so every client refuses it. Issue it with ` +
        `subjectAltName=DNS:<name clients dial>,IP:<address>: ${TLS_RECIPE_REF}`,
    );
  } else if (context.listenHost !== undefined && !WILDCARD_HOSTS.has(context.listenHost)) {
    const host = context.listenHost;
    const isIp = /^[0-9.]+$/.test(host) || host.includes(":");
    const covered = isIp ? leaf.checkIP(host) !== undefined : leaf.checkHost(host) !== undefined;
    if (!covered) {
      warnings.push(
        `The certificate in ${file} does not name the listen address ${host} ` +
          `(its names: ${leaf.subjectAltName ?? "none"}); clients that dial ${host} will refuse ` +
          `it, clients that dial one of its names will not.`,
      );
    }
  }
}

/** Checks that every certificate of `-tls-client-ca` is a CA that can sign client certificates. */
export function checkClientCaCertificates(
  certificates: readonly X509Certificate[],
  caPath: string,
  nowMs: number,
): CertificateFindings {
  const errors: string[] = [];
  const warnings: string[] = [];
  certificates.forEach((certificate, i) => {
    const which = certificates.length === 1 ? "The certificate" : `Certificate ${i + 1}`;
    const file = `"${caPath}" (-tls-client-ca)`;
    const profile = readCertificateProfile(new Uint8Array(certificate.raw));
    if (!profile.isCa) {
      errors.push(
        `${which} in ${file} is not a CA certificate (no basicConstraints CA:TRUE), so no ` +
          `client certificate can be verified against it. Give the CA that signed the client ` +
          `certificates: ${TLS_RECIPE_REF}`,
      );
    }
    if (nowMs > Date.parse(certificate.validTo)) {
      errors.push(
        `${which} in ${file} expired at ${certificate.validTo}; every client certificate it ` +
          `signed is refused. Renew the CA and the client certificates.`,
      );
    }
  });
  return { errors, warnings };
}
