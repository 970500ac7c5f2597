/**
 * The identity of an mTLS session, taken from the client certificate.
 *
 * Rule (documented in docs/operations.md, "TLS and identities"):
 *   1. the first URI subject alternative name (e.g. a SPIFFE ID
 *      `spiffe://example.org/worker`), else
 *   2. the first DNS subject alternative name, else
 *   3. the subject common name (CN), else
 *   4. "" — the same identity as a session without mTLS.
 *
 * URI comes first because it is the one SAN type designed to name a workload
 * (SPIFFE puts exactly one URI SAN in every SVID); DNS names come next because
 * certificates issued to hosts carry them; the CN is the legacy fallback.
 * Other SAN types (IP, email) are never used: they name a place or a person,
 * not a workload, and an IP identity would silently change with the network.
 *
 * The names are read from the certificate's DER structure (the raw bytes the
 * TLS stack verified), never from a text rendering: node's `subjectaltname`
 * string joins entries with ", " and Deno does not quote values, so a DNS
 * name whose value contains `, URI:spiffe://example.org/admin` would read as
 * a second, forged entry.
 *
 * Canonical form, applied here so the ACL and the logs see one spelling:
 * - DNS names are lower-cased (ASCII letters only: DNS is case-insensitive
 *   in ASCII, and a Unicode lower-casing could turn a non-ASCII letter into
 *   an ASCII one);
 * - URIs get their scheme and host lower-cased (RFC 3986 §6.2.2.1); the
 *   user info, port, path, query and fragment are kept as they are;
 * - the CN is free text (often a person's or an agent's name) with no
 *   case-insensitive syntax to rely on: its case is kept, and it is put in
 *   Unicode Normalization Form C, so that canonically equivalent spellings
 *   are one identity (ACL globs must be NFC too).
 *
 * A certificate this module cannot read (not DER, more than one SAN
 * extension, a DNS name or URI that is not 7-bit ASCII, an identity with a
 * control character) throws {@link CertificateIdentityError}: the session is
 * refused rather than given a guessed identity.
 *
 * @module
 */

import {
  children,
  contents,
  contentsEqual,
  DER_TAGS,
  type DerElement,
  DerError,
  expectTag,
  readWhole,
} from "./der.ts";

/** The type of one subjectAltName entry (RFC 5280 GeneralName), by its context tag 0..8. */
export type SubjectAltNameType =
  | "otherName"
  | "email"
  | "DNS"
  | "x400Address"
  | "directoryName"
  | "ediPartyName"
  | "URI"
  | "IP"
  | "registeredID";

const SAN_TYPES: readonly SubjectAltNameType[] = [
  "otherName",
  "email",
  "DNS",
  "x400Address",
  "directoryName",
  "ediPartyName",
  "URI",
  "IP",
  "registeredID",
];

/** Types whose value is an IA5String (7-bit ASCII) that this module decodes. */
const IA5_TYPES: ReadonlySet<SubjectAltNameType> = new Set(["email", "DNS", "URI"]);

/**
 * One entry of a subjectAltName as written in the certificate (not
 * canonicalized). `value` is the text of email, DNS and URI entries, and
 * null for the other types and for an IA5 value that is not 7-bit ASCII.
 */
export interface SubjectAltName {
  readonly type: SubjectAltNameType;
  readonly value: string | null;
}

/** What the identity rule reads from a certificate, in certificate order. */
export interface CertificateNames {
  readonly subjectAltNames: readonly SubjectAltName[];
  /** Every CN of the subject, in DER order, decoded (null when its string type is unreadable). */
  readonly commonNames: readonly (string | null)[];
}

/** The parts of a peer certificate (node:tls `getPeerCertificate()`) the identity rule reads. */
export interface PeerCertificateFields {
  /** The certificate in DER, as verified by the TLS stack. */
  readonly raw?: Uint8Array;
}

/** A client certificate from which no identity can be read safely. */
export class CertificateIdentityError extends Error {
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = "CertificateIdentityError";
  }
}

// OID contents (without tag and length).
const OID_SUBJECT_ALT_NAME = new Uint8Array([0x55, 0x1d, 0x11]); // 2.5.29.17
const OID_COMMON_NAME = new Uint8Array([0x55, 0x04, 0x03]); // 2.5.4.3

/**
 * Reads the subjectAltName entries and subject CNs of a DER certificate.
 * Throws {@link DerError} when the certificate is not the DER shape of an
 * X.509 certificate, or holds more than one subjectAltName extension.
 */
export function readCertificateNames(der: Uint8Array): CertificateNames {
  const certificate = expectTag(readWhole(der), DER_TAGS.SEQUENCE, "certificate");
  const [tbs, algorithm, signature, extra] = children(certificate);
  expectTag(tbs, DER_TAGS.SEQUENCE, "tbsCertificate");
  expectTag(algorithm, DER_TAGS.SEQUENCE, "signatureAlgorithm");
  expectTag(signature, DER_TAGS.BIT_STRING, "signatureValue");
  if (extra !== undefined) throw new DerError("certificate has more than three elements");

  const fields = children(tbs);
  let i = 0;
  if (fields[i]?.tag === 0xa0) i++; // [0] EXPLICIT version
  expectTag(fields[i++], DER_TAGS.INTEGER, "serialNumber");
  expectTag(fields[i++], DER_TAGS.SEQUENCE, "signature");
  expectTag(fields[i++], DER_TAGS.SEQUENCE, "issuer");
  expectTag(fields[i++], DER_TAGS.SEQUENCE, "validity");
  const subject = expectTag(fields[i++], DER_TAGS.SEQUENCE, "subject");
  expectTag(fields[i++], DER_TAGS.SEQUENCE, "subjectPublicKeyInfo");
  // [1] issuerUniqueID and [2] subjectUniqueID (IMPLICIT BIT STRINGs), then [3] EXPLICIT extensions.
  if (fields[i]?.tag === 0x81 || fields[i]?.tag === 0xa1) i++;
  if (fields[i]?.tag === 0x82 || fields[i]?.tag === 0xa2) i++;
  let subjectAltNames: SubjectAltName[] = [];
  if (fields[i]?.tag === 0xa3) {
    subjectAltNames = readExtensions(fields[i++]);
  }
  if (i !== fields.length) throw new DerError("unexpected element after the extensions");
  return { subjectAltNames, commonNames: readCommonNames(subject) };
}

function readExtensions(explicit: DerElement): SubjectAltName[] {
  const [list, extra] = children(explicit);
  expectTag(list, DER_TAGS.SEQUENCE, "extensions");
  if (extra !== undefined) throw new DerError("more than one element in [3] extensions");
  let names: SubjectAltName[] | null = null;
  for (const extension of children(list)) {
    expectTag(extension, DER_TAGS.SEQUENCE, "extension");
    const parts = children(extension);
    const oid = expectTag(parts[0], DER_TAGS.OID, "extnID");
    let k = 1;
    if (parts[k]?.tag === DER_TAGS.BOOLEAN) k++; // critical
    const value = expectTag(parts[k++], DER_TAGS.OCTET_STRING, "extnValue");
    if (k !== parts.length) throw new DerError("unexpected element in an extension");
    if (!contentsEqual(oid, OID_SUBJECT_ALT_NAME)) continue;
    // RFC 5280 §4.2: at most one instance of an extension. Two would leave the
    // identity up to which one a reader picks.
    if (names !== null) throw new DerError("more than one subjectAltName extension");
    names = readGeneralNames(contents(value));
  }
  return names ?? [];
}

function readGeneralNames(bytes: Uint8Array): SubjectAltName[] {
  const sequence = expectTag(readWhole(bytes), DER_TAGS.SEQUENCE, "subjectAltName");
  return children(sequence).map((entry) => {
    const number = entry.tag & 0x1f;
    const type = SAN_TYPES[number];
    // Context-specific class; IA5 entries are primitive, [0] [3] [4] [5] constructed.
    const constructed = number === 0 || number === 3 || number === 4 || number === 5;
    const expected = 0x80 | (constructed ? 0x20 : 0) | number;
    if (type === undefined || entry.tag !== expected) {
      throw new DerError(`subjectAltName entry with tag 0x${entry.tag.toString(16)}`);
    }
    return { type, value: IA5_TYPES.has(type) ? decodeAscii(contents(entry)) : null };
  });
}

function readCommonNames(subject: DerElement): (string | null)[] {
  const names: (string | null)[] = [];
  for (const rdn of children(subject)) {
    expectTag(rdn, DER_TAGS.SET, "relative distinguished name");
    for (const attribute of children(rdn)) {
      expectTag(attribute, DER_TAGS.SEQUENCE, "attribute");
      const [type, value, extra] = children(attribute);
      expectTag(type, DER_TAGS.OID, "attribute type");
      if (value === undefined || extra !== undefined) {
        throw new DerError("an attribute must hold one type and one value");
      }
      if (contentsEqual(type, OID_COMMON_NAME)) names.push(decodeDirectoryString(value));
    }
  }
  return names;
}

const utf8 = new TextDecoder("utf-8", { fatal: true });

/** Decodes the string types a CN may use; null when the bytes are not valid for the type. */
function decodeDirectoryString(element: DerElement): string | null {
  const bytes = contents(element);
  switch (element.tag) {
    case DER_TAGS.UTF8_STRING:
      try {
        return utf8.decode(bytes);
      } catch {
        return null;
      }
    case DER_TAGS.PRINTABLE_STRING:
    case DER_TAGS.IA5_STRING:
      return decodeAscii(bytes);
    case DER_TAGS.TELETEX_STRING:
      // T.61 in theory; Latin-1 in every certificate that uses it in practice.
      return String.fromCharCode(...bytes);
    case DER_TAGS.BMP_STRING: {
      if (bytes.length % 2 !== 0) return null;
      let text = "";
      for (let i = 0; i < bytes.length; i += 2) {
        text += String.fromCharCode((bytes[i] << 8) | bytes[i + 1]);
      }
      return text.isWellFormed() ? text : null;
    }
    case DER_TAGS.UNIVERSAL_STRING: {
      if (bytes.length % 4 !== 0) return null;
      let text = "";
      for (let i = 0; i < bytes.length; i += 4) {
        const cp =
          ((bytes[i] << 24) | (bytes[i + 1] << 16) | (bytes[i + 2] << 8) | bytes[i + 3]) >>>
          0;
        if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return null;
        text += String.fromCodePoint(cp);
      }
      return text;
    }
    default:
      return null;
  }
}

/** 7-bit ASCII text, or null when a byte is 0x80 or above. */
function decodeAscii(bytes: Uint8Array): string | null {
  let text = "";
  for (const byte of bytes) {
    if (byte > 0x7f) return null;
    text += String.fromCharCode(byte);
  }
  return text;
}

/** DNS names are case-insensitive in ASCII only; other characters are kept. */
function canonicalDnsName(name: string): string {
  return asciiLowerCase(name);
}

const URI_SCHEME = /^[A-Za-z][A-Za-z0-9+.-]*:/;

/**
 * Lower-cases the scheme and the host of a URI (RFC 3986 §6.2.2.1); user
 * info, port, path, query and fragment keep their case. A value without a
 * scheme is returned as it is.
 */
export function canonicalUri(uri: string): string {
  const scheme = URI_SCHEME.exec(uri);
  if (scheme === null) return uri;
  let out = asciiLowerCase(scheme[0]);
  let rest = uri.slice(scheme[0].length);
  if (rest.startsWith("//")) {
    let authorityEnd = rest.slice(2).search(/[/?#]/);
    authorityEnd = authorityEnd < 0 ? rest.length : authorityEnd + 2;
    const authority = rest.slice(2, authorityEnd);
    const at = authority.lastIndexOf("@");
    const userInfo = at < 0 ? "" : authority.slice(0, at + 1);
    out += "//" + userInfo + asciiLowerCase(authority.slice(at + 1));
    rest = rest.slice(authorityEnd);
  }
  return out + rest;
}

/** The CN is free text: only its Unicode normalization is made canonical (NFC). */
function canonicalCommonName(cn: string): string {
  return cn.normalize("NFC");
}

function asciiLowerCase(text: string): string {
  return text.replace(/[A-Z]+/g, (upper) => upper.toLowerCase());
}

// C0 controls, DEL and C1 controls: no DNS name, URI or sensible CN holds one,
// and they would let an identity forge lines in a text log.
// deno-lint-ignore no-control-regex
const CONTROL_CHARACTERS = /[\u0000-\u001f\u007f-\u009f]/;

/**
 * The canonical identity of certificate names by the rule above; "" when
 * they name nothing. Throws {@link CertificateIdentityError} when the entry
 * the rule picks cannot be decoded or holds a control character.
 */
function identityFromNames(names: CertificateNames): string {
  const identity = pickIdentity(names);
  if (CONTROL_CHARACTERS.test(identity)) {
    throw new CertificateIdentityError(
      `client certificate identity ${JSON.stringify(identity)} contains a control character`,
    );
  }
  return identity;
}

function pickIdentity({ subjectAltNames, commonNames }: CertificateNames): string {
  for (const type of ["URI", "DNS"] as const) {
    for (const name of subjectAltNames) {
      if (name.type !== type) continue;
      if (name.value === null) {
        throw new CertificateIdentityError(
          `client certificate has a ${type} subject alternative name that is not 7-bit ASCII`,
        );
      }
      if (name.value === "") continue;
      return type === "URI" ? canonicalUri(name.value) : canonicalDnsName(name.value);
    }
  }
  if (commonNames.length === 0) return "";
  const cn = commonNames[0];
  if (cn === null) {
    throw new CertificateIdentityError(
      "client certificate subject CN is not a valid string of its type",
    );
  }
  return canonicalCommonName(cn);
}

/**
 * The identity of a verified peer certificate (node:tls
 * `getPeerCertificate()`, whose `raw` is the DER); "" without a certificate.
 * Throws {@link CertificateIdentityError} when the certificate cannot be read.
 */
export function identityFromCertificate(cert: PeerCertificateFields | null | undefined): string {
  if (!cert || cert.raw === undefined || cert.raw.length === 0) {
    if (cert && Object.keys(cert).length > 0) {
      throw new CertificateIdentityError("the TLS stack gave the client certificate without DER");
    }
    return "";
  }
  let names: CertificateNames;
  try {
    names = readCertificateNames(cert.raw);
  } catch (error) {
    if (error instanceof DerError) {
      throw new CertificateIdentityError(`client certificate cannot be read: ${error.message}`, {
        cause: error,
      });
    }
    throw error;
  }
  return identityFromNames(names);
}
