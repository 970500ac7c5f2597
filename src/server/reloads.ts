/**
 * SIGHUP: reloads the TLS certificates and the ACL file. A broken file keeps the old ones in
 * force. Reloads run one at a time, and the last signal wins.
 *
 * @module
 */

import type { ServerConfig } from "../config.ts";
import { log } from "../log/diagnostic.ts";
import { reloadCertificates, type TlsProtocolListener } from "../protocol/tls_listener.ts";
import { loadAclFile } from "../security/acl.ts";
import type { LockService } from "../service/lock_service.ts";
import { errorText } from "../error_text.ts";

const logger = log("server");

export interface ReloadTargets {
  readonly config: ServerConfig;
  /** The protocol listener when it speaks TLS, else null. */
  readonly tls: TlsProtocolListener | null;
  /** Takes the new ACL. */
  readonly service: LockService;
  /** Reads the ACL file (tests make a read slow). */
  readonly readFile?: (path: string) => Promise<Uint8Array>;
}

/**
 * The reload of a running server. Reloads run one at a time and the last signal wins: two
 * overlapping reloads could finish out of order (the first one's read last) and leave older
 * files in force. A reload asked for while one runs starts after it (and reads the files then);
 * any number asked for meanwhile are that one reload.
 */
export function serializedReloads(targets: ReloadTargets): () => Promise<void> {
  let running: Promise<void> | null = null;
  let next: Promise<void> | null = null;
  const reload = (): Promise<void> => {
    if (running === null) {
      running = reloadOnce(targets)
        .catch((error) => logger.error("reload failed", { error: String(error) }))
        .finally(() => running = null);
      return running;
    }
    next ??= running.then(() => {
      next = null;
      return reload();
    });
    return next;
  };
  return reload;
}

async function reloadOnce({ config, tls, service, readFile }: ReloadTargets): Promise<void> {
  if (tls === null && config.aclFile === null) {
    // Say so, or an operator who sent SIGHUP after editing a file lockd does not use waits
    // for a line that never comes.
    logger.info("SIGHUP: nothing to reload (no -acl-file and no TLS certificates)");
    return;
  }
  if (tls !== null) await reloadCertificates(tls, config);
  if (config.aclFile === null) return;
  try {
    service.setAcl(await loadAclFile(config.aclFile, readFile));
    logger.info("ACL reloaded", { acl_file: config.aclFile, rules: service.acl.ruleCount });
  } catch (error) {
    logger.error("ACL reload failed; keeping the old rules", {
      acl_file: config.aclFile,
      error: errorText(error),
    });
  }
}
