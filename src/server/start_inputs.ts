/**
 * What a start reads before anything listens or opens: the addresses, the admin token, the ACL,
 * the lock rules and the TLS material. A bad address or an unusable file fails here, with the flag to fix.
 *
 * @module
 */

import { type AdminToken, readAdminToken } from "../admin/auth.ts";
import type { ServerConfig } from "../config.ts";
import { type HostPort, parseHostPort } from "../host_port.ts";
import { parseAllowedHosts } from "../http/host_policy.ts";
import { type Acl, ALLOW_ALL, loadAclFile } from "../security/acl.ts";
import { loadLockRulesFile, type LockRules, NO_LOCK_RULES } from "../security/lock_rules.ts";
import { loadServerTlsFromConfig, type ServerTlsMaterial } from "../security/tls.ts";
import { pathError, StartError } from "./start_errors.ts";

export interface StartInputs {
  readonly listenAt: HostPort;
  readonly adminAt: HostPort | null;
  readonly opsAt: HostPort | null;
  /** Canonical entries of `-admin-allowed-hosts`. */
  readonly adminAllowedHosts: readonly string[];
  readonly adminToken: AdminToken | null;
  readonly acl: Acl;
  /** The lock rules of `-lock-rules-file` (none without it). */
  readonly lockRules: LockRules;
  /** Null without `-tls-cert` (plain TCP). */
  readonly tlsMaterial: ServerTlsMaterial | null;
}

/** Reads and checks every input of a start, in the order their errors are reported. */
export async function readStartInputs(
  config: ServerConfig,
  readFile: ((path: string) => Promise<Uint8Array>) | undefined,
): Promise<StartInputs> {
  const listenAt = parseHostPort(config.listen);
  const adminAt = config.adminListen === null ? null : parseHostPort(config.adminListen);
  const opsAt = config.opsListen === null ? null : parseHostPort(config.opsListen);
  const adminAllowedHosts = parseAllowedHosts(config.adminAllowedHosts.join(","));
  const adminToken = config.adminTokenFile === null
    ? null
    : await readAdminToken(config.adminTokenFile).catch((error) => {
      throw adminTokenError(error, config.adminTokenFile!);
    });
  const acl = config.aclFile === null
    ? ALLOW_ALL
    : await loadAclFile(config.aclFile, readFile).catch((error) => {
      throw new StartError(
        `Cannot use the ACL file (-acl-file): ${error.message}. Fix the line named ` +
          `(docs/operations.md, "ACL"), or give -acl-file the right path.`,
        { cause: error },
      );
    });
  const lockRules = config.lockRulesFile === null
    ? NO_LOCK_RULES
    : await loadLockRulesFile(config.lockRulesFile, readFile).catch((error) => {
      throw new StartError(
        `Cannot use the lock rules file (-lock-rules-file): ${error.message}. Fix the line ` +
          `named (docs/operations.md, "Lock rules"), or give -lock-rules-file the right path.`,
        { cause: error },
      );
    });
  const tlsMaterial = await loadServerTlsFromConfig(config);
  return { listenAt, adminAt, opsAt, adminAllowedHosts, adminToken, acl, lockRules, tlsMaterial };
}

function adminTokenError(error: Error, path: string): StartError {
  const reason = error.message.replace(/^Cannot (?:read|use) admin token file "[^"]*": /, "");
  return pathError(
    reason,
    "-admin-token-file",
    path,
    "the admin token file",
    'Create it (docs/operations.md, "Deploying with systemd", step 4), let lockd read it, ' +
      "or give -admin-token-file the right path.",
  );
}
