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
 * @module
 */

/** One entry of a subjectAltName, e.g. `{ type: "URI", value: "spiffe://example.org/w" }`. */
export interface SubjectAltName {
  readonly type: string;
  readonly value: string;
}

/** The parts of a peer certificate (node:tls `getPeerCertificate()`) the identity rule reads. */
export interface PeerCertificateFields {
  /** node:tls format: `URI:spiffe://example.org/w, DNS:w.example.org, IP Address:10.0.0.1`. */
  readonly subjectaltname?: string;
  /** Subject attributes; a repeated attribute comes as an array. */
  readonly subject?: { readonly CN?: string | readonly string[] } | null;
}

/**
 * Parses node's `subjectaltname` string. Entries are `TYPE:value` joined by
 * `", "`; node JSON-quotes a value that contains a separator or a quote
 * (`DNS:"a, b"`), which is undone here, so a crafted SAN cannot smuggle in a
 * second entry.
 */
export function parseSubjectAltNames(text: string): SubjectAltName[] {
  const names: SubjectAltName[] = [];
  let i = 0;
  while (i < text.length) {
    const colon = text.indexOf(":", i);
    if (colon < 0) break;
    const type = text.slice(i, colon).trim();
    let j = colon + 1;
    let value: string;
    if (text[j] === '"') {
      // A JSON string literal: find its closing quote, skipping escapes.
      let k = j + 1;
      while (k < text.length && text[k] !== '"') k += text[k] === "\\" ? 2 : 1;
      const literal = text.slice(j, k + 1);
      try {
        value = JSON.parse(literal);
      } catch {
        value = literal.slice(1, -1);
      }
      j = k + 1;
      const comma = text.indexOf(", ", j);
      j = comma < 0 ? text.length : comma + 2;
    } else {
      const comma = text.indexOf(", ", j);
      value = text.slice(j, comma < 0 ? text.length : comma);
      j = comma < 0 ? text.length : comma + 2;
    }
    names.push({ type, value });
    i = j;
  }
  return names;
}

/** The identity of a verified peer certificate by the rule above; "" when it names nothing. */
export function identityFromCertificate(cert: PeerCertificateFields | null | undefined): string {
  if (!cert) return "";
  const names = parseSubjectAltNames(cert.subjectaltname ?? "");
  const uri = names.find((name) => name.type === "URI" && name.value !== "");
  if (uri) return uri.value;
  const dns = names.find((name) => name.type === "DNS" && name.value !== "");
  if (dns) return dns.value;
  const cn = cert.subject?.CN;
  const first = Array.isArray(cn) ? cn[0] : cn;
  return typeof first === "string" ? first : "";
}
