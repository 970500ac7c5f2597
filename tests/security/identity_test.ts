/**
 * The identity rule and the DER reader behind it, as pure functions: real
 * certificates made by openssl (tests/fixtures/tls and its hostile/ set) and
 * certificate-shaped DER built here, including malformed DER.
 */
import assert from "node:assert/strict";
import { X509Certificate } from "node:crypto";
import fc from "fast-check";
import { DerError } from "../../src/security/der.ts";
import {
  canonicalUri,
  CertificateIdentityError,
  identityFromCertificate,
  readCertificateNames,
} from "../../src/security/identity.ts";
import {
  type CertName,
  certPem,
  type HostileCertName,
  hostileCertPath,
} from "../fixtures/tls/certs.ts";

// ---- a tiny DER writer for certificate-shaped test input ---------------------

function tlv(tag: number, ...parts: Uint8Array[]): Uint8Array {
  const body = concat(parts);
  const n = body.length;
  const length = n < 0x80
    ? [n]
    : n < 0x100
    ? [0x81, n]
    : n < 0x10000
    ? [0x82, n >> 8, n & 0xff]
    : [0x83, n >> 16, (n >> 8) & 0xff, n & 0xff];
  return concat([new Uint8Array([tag, ...length]), body]);
}

function concat(parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((sum, p) => sum + p.length, 0));
  let offset = 0;
  for (const p of parts) {
    out.set(p, offset);
    offset += p.length;
  }
  return out;
}

const bytes = (...b: number[]) => new Uint8Array(b);
const ascii = (text: string) => new TextEncoder().encode(text);
const seq = (...parts: Uint8Array[]) => tlv(0x30, ...parts);
const OID_CN = tlv(0x06, bytes(0x55, 0x04, 0x03));
const OID_O = tlv(0x06, bytes(0x55, 0x04, 0x0a));
const OID_SAN = tlv(0x06, bytes(0x55, 0x1d, 0x11));
const OID_EKU = tlv(0x06, bytes(0x55, 0x1d, 0x25));

/** A Name with one attribute per RDN; `[oid, tag, value]`. */
function name(...attributes: [Uint8Array, number, Uint8Array][]): Uint8Array {
  return seq(...attributes.map(([oid, tag, value]) => tlv(0x31, seq(oid, tlv(tag, value)))));
}

const cn = (text: string, tag = 0x0c): [Uint8Array, number, Uint8Array] => [
  OID_CN,
  tag,
  ascii(text),
];

/** A SAN entry: context tag and IA5 value. */
const dns = (value: string | Uint8Array) =>
  tlv(0x82, typeof value === "string" ? ascii(value) : value);
const uri = (value: string) => tlv(0x86, ascii(value));
const email = (value: string) => tlv(0x81, ascii(value));
const ip = (...octets: number[]) => tlv(0x87, bytes(...octets));

function sanExtension(...entries: Uint8Array[]): Uint8Array {
  return seq(OID_SAN, tlv(0x04, seq(...entries)));
}

/** A certificate-shaped structure: only what the identity reader walks is meaningful. */
function certificate(
  { subject = name(), extensions = [] as Uint8Array[] } = {},
): Uint8Array {
  const tbs = seq(
    tlv(0xa0, tlv(0x02, bytes(2))),
    tlv(0x02, bytes(1)),
    seq(tlv(0x06, bytes(0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02))),
    name(cn("test CA")),
    seq(tlv(0x17, ascii("250101000000Z")), tlv(0x17, ascii("350101000000Z"))),
    subject,
    seq(seq(tlv(0x06, bytes(0x2a))), tlv(0x03, bytes(0, 4))),
    ...(extensions.length > 0 ? [tlv(0xa3, seq(...extensions))] : []),
  );
  return seq(tbs, seq(tlv(0x06, bytes(0x2a))), tlv(0x03, bytes(0, 1, 2)));
}

const identityOf = (der: Uint8Array) => identityFromCertificate({ raw: der });

// ---- real certificates ---------------------------------------------------------

function derOf(pem: string): Uint8Array {
  return new Uint8Array(new X509Certificate(pem).raw);
}

const FIXTURES: [CertName, string][] = [
  ["client-uri", "spiffe://example.org/worker"],
  ["client-team-a", "spiffe://example.org/team-a/batch"],
  ["client-dns", "worker.example.org"],
  ["client-cn", "cn-only-client"],
  ["server", "localhost"],
];

for (const [cert, identity] of FIXTURES) {
  Deno.test(`identity: the test certificate ${cert} gives "${identity}"`, () => {
    assert.equal(identityOf(derOf(certPem(cert))), identity);
  });
}

const HOSTILE: [HostileCertName, string][] = [
  ["forged-dns", "evil.example.org, uri:spiffe://example.org/admin"],
  ["forged-email", "mallory.example.org"],
  ["forged-quoted", '"evil", uri:spiffe://example.org/admin'],
  ["upper-uri", "spiffe://example.org/admin"],
  ["upper-dns", "worker.example.org"],
  ["path-case-uri", "spiffe://example.org/Admin"],
];

for (const [cert, identity] of HOSTILE) {
  Deno.test(`identity: the hostile certificate ${cert} gives "${identity}"`, () => {
    assert.equal(identityOf(derOf(Deno.readTextFileSync(hostileCertPath(cert)))), identity);
  });
}

Deno.test("identity: the DER walk sees each hostile SAN value as one entry of its type", () => {
  const sans = (cert: HostileCertName) =>
    readCertificateNames(derOf(Deno.readTextFileSync(hostileCertPath(cert)))).subjectAltNames;
  assert.deepEqual(sans("forged-dns"), [
    { type: "DNS", value: "evil.example.org, URI:spiffe://example.org/admin" },
  ]);
  assert.deepEqual(sans("forged-email"), [
    { type: "email", value: '"x", URI:spiffe://example.org/admin' },
    { type: "DNS", value: "mallory.example.org" },
  ]);
  assert.deepEqual(sans("forged-quoted"), [
    { type: "DNS", value: '"evil", URI:spiffe://example.org/admin' },
    { type: "DNS", value: 'a"b:c' },
  ]);
  assert.deepEqual(sans("utf8-dns"), [{ type: "DNS", value: null }]);
});

Deno.test("identity: the hostile certificates really hold the hostile text in one DER string", () => {
  // Independent of the reader under test: the tag, the length and the bytes of the whole value.
  const holds = (cert: HostileCertName, tag: number, value: string) => {
    const der = derOf(Deno.readTextFileSync(hostileCertPath(cert)));
    const needle = [tag, value.length, ...ascii(value)];
    return der.some((_, i) => needle.every((b, k) => der[i + k] === b));
  };
  assert.ok(holds("forged-dns", 0x82, "evil.example.org, URI:spiffe://example.org/admin"));
  assert.ok(holds("forged-email", 0x81, '"x", URI:spiffe://example.org/admin'));
  assert.ok(holds("forged-quoted", 0x82, '"evil", URI:spiffe://example.org/admin'));
  assert.ok(holds("forged-quoted", 0x82, 'a"b:c'));
  assert.ok(!holds("forged-dns", 0x86, "spiffe://example.org/admin"), "no URI entry at all");
});

// ---- the rule, on certificate-shaped DER ------------------------------------------

const RULE_CASES: [string, Uint8Array, string][] = [
  [
    "a URI SAN wins over DNS SANs and the CN, wherever it stands",
    certificate({
      subject: name(cn("worker")),
      extensions: [sanExtension(dns("worker.example.org"), uri("spiffe://example.org/worker"))],
    }),
    "spiffe://example.org/worker",
  ],
  [
    "the first of several URI SANs is used",
    certificate({
      extensions: [sanExtension(uri("spiffe://example.org/a"), uri("spiffe://example.org/b"))],
    }),
    "spiffe://example.org/a",
  ],
  [
    "the first DNS SAN is used when there is no URI SAN",
    certificate({
      subject: name(cn("a")),
      extensions: [sanExtension(dns("a.example.org"), dns("b.example.org"))],
    }),
    "a.example.org",
  ],
  [
    "an IP or e-mail SAN is never an identity: the CN is used",
    certificate({
      subject: name(cn("build-agent")),
      extensions: [sanExtension(ip(10, 0, 0, 1), email("ops@example.org"))],
    }),
    "build-agent",
  ],
  [
    "an empty URI SAN is skipped",
    certificate({ extensions: [sanExtension(uri(""), dns("w.example.org"))] }),
    "w.example.org",
  ],
  ["the CN is used when there is no SAN", certificate({ subject: name(cn("cn-only")) }), "cn-only"],
  [
    "the first CN in certificate order is used",
    certificate({ subject: name(cn("first"), [OID_O, 0x0c, ascii("org")], cn("second")) }),
    "first",
  ],
  ["a certificate that names nothing gives the empty identity", certificate(), ""],
  [
    "other extensions around the SAN are skipped, a critical flag is read",
    certificate({
      extensions: [
        seq(OID_EKU, tlv(0x01, bytes(0xff)), tlv(0x04, seq(tlv(0x06, bytes(1))))),
        seq(OID_SAN, tlv(0x01, bytes(0xff)), tlv(0x04, seq(dns("x.example.org")))),
      ],
    }),
    "x.example.org",
  ],
  [
    "DNS names are lower-cased",
    certificate({ extensions: [sanExtension(dns("WORKER.Example.ORG"))] }),
    "worker.example.org",
  ],
  [
    "a URI keeps the case of its path",
    certificate({ extensions: [sanExtension(uri("SPIFFE://EXAMPLE.org/Team-A/Batch"))] }),
    "spiffe://example.org/Team-A/Batch",
  ],
  [
    "the CN keeps its case and is put in NFC",
    certificate({ subject: name(cn("Cafe\u0301 Agent")) }),
    "Caf\u00e9 Agent",
  ],
  [
    "a PrintableString CN",
    certificate({ subject: name(cn("Build Agent", 0x13)) }),
    "Build Agent",
  ],
  [
    "a BMPString CN",
    certificate({ subject: name([OID_CN, 0x1e, bytes(0x00, 0x41, 0x00, 0xe9, 0x26, 0x03)]) }),
    "A\u00e9\u2603",
  ],
  [
    "a UniversalString CN",
    certificate({ subject: name([OID_CN, 0x1c, bytes(0, 1, 0xf6, 0x00, 0, 0, 0, 0x42)]) }),
    "\u{1f600}B",
  ],
];

for (const [what, der, identity] of RULE_CASES) {
  Deno.test(`identity rule: ${what}`, () => {
    assert.equal(identityOf(der), identity);
  });
}

Deno.test("identity rule: no certificate gives the empty identity", () => {
  assert.equal(identityFromCertificate(null), "");
  assert.equal(identityFromCertificate(undefined), "");
  // node:tls gives {} when the peer sent no certificate.
  assert.equal(identityFromCertificate({}), "");
});

const REFUSED_CASES: [string, Uint8Array, RegExp][] = [
  [
    "a DNS SAN with a control character",
    certificate({ extensions: [sanExtension(dns("a\nCN=admin"))] }),
    /contains a control character/,
  ],
  [
    "a CN with a newline",
    certificate({ subject: name(cn("x\nidentity=spiffe://example.org/admin")) }),
    /contains a control character/,
  ],
  [
    "a URI SAN that is not 7-bit ASCII",
    certificate({ extensions: [sanExtension(tlv(0x86, bytes(0x68, 0xc3, 0xa9)))] }),
    /URI subject alternative name that is not 7-bit ASCII/,
  ],
  [
    "a DNS SAN that is not 7-bit ASCII",
    certificate({ extensions: [sanExtension(dns(bytes(0x61, 0xff)))] }),
    /DNS subject alternative name that is not 7-bit ASCII/,
  ],
  [
    "a CN that is not valid UTF-8",
    certificate({ subject: name([OID_CN, 0x0c, bytes(0x61, 0xc3)]) }),
    /CN is not a valid string/,
  ],
  [
    "a CN of an unknown string type",
    certificate({ subject: name([OID_CN, 0x04, ascii("x")]) }),
    /CN is not a valid string/,
  ],
  [
    "two subjectAltName extensions",
    certificate({ extensions: [sanExtension(dns("a.org")), sanExtension(uri("spiffe://b"))] }),
    /more than one subjectAltName extension/,
  ],
  [
    "a SAN entry with a universal tag",
    certificate({ extensions: [sanExtension(tlv(0x16, ascii("x")))] }),
    /subjectAltName entry with tag 0x16/,
  ],
  [
    "a primitive tag for a constructed SAN type",
    certificate({ extensions: [sanExtension(tlv(0x84, ascii("x")))] }),
    /subjectAltName entry with tag 0x84/,
  ],
  [
    "bytes after the certificate",
    concat([certificate(), bytes(0)]),
    /1 bytes after the outermost element/,
  ],
  ["an indefinite length", bytes(0x30, 0x80, 0, 0), /indefinite length/],
  ["a length not in its shortest form", bytes(0x30, 0x81, 0x01, 0x05), /shortest form/],
  ["a length past the end", bytes(0x30, 0x05, 0x02, 0x01), /runs past its container/],
  ["a multi-byte tag", bytes(0x1f, 0x81, 0x01, 0x00), /multi-byte tag/],
  ["not a certificate at all", ascii("-----BEGIN CERTIFICATE-----"), /cannot be read/],
  ["a certificate without its signature", seq(seq()), /tbsCertificate|missing/],
];

for (const [what, der, message] of REFUSED_CASES) {
  Deno.test(`identity rule: refuses ${what}`, () => {
    assert.throws(() => identityOf(der), (error: unknown) => {
      assert.ok(error instanceof CertificateIdentityError, String(error));
      assert.match(error.message, message);
      return true;
    });
  });
}

Deno.test("identity rule: a certificate object without DER is refused, not read as nameless", () => {
  assert.throws(
    () => identityFromCertificate({ subject: { CN: "x" } } as never),
    CertificateIdentityError,
  );
});

Deno.test("canonicalUri lower-cases the scheme and the host only", () => {
  const cases: [string, string][] = [
    ["SPIFFE://EXAMPLE.ORG/Path/X", "spiffe://example.org/Path/X"],
    ["HTTPS://User:Pw@Host.Example:8443/A?Q=B#F", "https://User:Pw@host.example:8443/A?Q=B#F"],
    ["spiffe://EXAMPLE.org", "spiffe://example.org"],
    ["spiffe://EXAMPLE.org?Q", "spiffe://example.org?Q"],
    ["URN:UUID:ABC", "urn:UUID:ABC"],
    ["no scheme HERE", "no scheme HERE"],
    ["HTTP://[FE80::1]/A", "http://[fe80::1]/A"],
  ];
  for (const [input, expected] of cases) assert.equal(canonicalUri(input), expected, input);
});

// ---- robustness ----------------------------------------------------------------

Deno.test("identity: damaged certificates give an identity or a CertificateIdentityError, never another exception", () => {
  const originals = [
    derOf(certPem("client-uri")),
    derOf(Deno.readTextFileSync(hostileCertPath("forged-email"))),
    certificate({ subject: name(cn("x")), extensions: [sanExtension(dns("a"), uri("b"))] }),
  ];
  fc.assert(
    fc.property(
      fc.constantFrom(...originals),
      fc.array(fc.tuple(fc.nat(), fc.integer({ min: 0, max: 255 })), { maxLength: 4 }),
      fc.nat(),
      (original, flips, cut) => {
        const der = original.slice(0, original.length - (cut % 8));
        for (const [at, value] of flips) der[at % der.length] = value;
        try {
          identityOf(der);
        } catch (error) {
          if (!(error instanceof CertificateIdentityError)) throw error;
          assert.ok(
            error.cause === undefined || error.cause instanceof DerError,
            String(error.cause),
          );
        }
      },
    ),
    { numRuns: 3000 },
  );
});

Deno.test("identity: random bytes are refused with a CertificateIdentityError", () => {
  fc.assert(
    fc.property(fc.uint8Array({ maxLength: 64 }), (der) => {
      try {
        identityOf(der);
      } catch (error) {
        if (!(error instanceof CertificateIdentityError)) throw error;
      }
    }),
    { numRuns: 2000 },
  );
});
