/**
 * SIGHUP: reloads the TLS certificates, the ACL file and the lock rules file. A broken file keeps
 * the old ones in force (each file on its own: a broken ACL does not stop new lock rules). Reloads
 * run one at a time, and the last signal wins.
 *
 * @module
 */

import type { ServerConfig } from "../config.ts";
import { log } from "../log/diagnostic.ts";
import { reloadCertificates, type TlsProtocolListener } from "../protocol/tls_listener.ts";
import { loadAclFile } from "../security/acl.ts";
import { loadLockRulesFile } from "../security/lock_rules.ts";
import type { LockService } from "../service/lock_service.ts";
import { errorText } from "../error_text.ts";

const logger = log("server");

export interface ReloadTargets {
  readonly config: ServerConfig;
  /** The protocol listener when it speaks TLS, else null. */
  readonly tls: TlsProtocolListener | null;
  /** Takes the new ACL and lock rules. */
  readonly service: LockService;
  /** Reads the ACL and lock rules files (tests make a read slow). */
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
  if (tls === null && config.aclFile === null && config.lockRulesFile === null) {
    // Say so, or an operator who sent SIGHUP after editing a file lockd does not use waits
    // for a line that never comes.
    logger.info(
      "SIGHUP: nothing to reload (no -acl-file, no -lock-rules-file and no TLS certificates)",
    );
    return;
  }
  if (tls !== null) await reloadCertificates(tls, config);
  if (config.aclFile !== null) await reloadAcl(config.aclFile, service, readFile);
  if (config.lockRulesFile !== null) await reloadLockRules(config.lockRulesFile, service, readFile);
}

async function reloadAcl(
  path: string,
  service: LockService,
  readFile: ReloadTargets["readFile"],
): Promise<void> {
  try {
    service.setAcl(await loadAclFile(path, readFile));
    logger.info("ACL reloaded", { acl_file: path, rules: service.acl.ruleCount });
  } catch (error) {
    logger.error("ACL reload failed; keeping the old rules", {
      acl_file: path,
      error: errorText(error),
    });
  }
}

async function reloadLockRules(
  path: string,
  service: LockService,
  readFile: ReloadTargets["readFile"],
): Promise<void> {
  try {
    service.setLockRules(await loadLockRulesFile(path, readFile));
    logger.info("lock rules reloaded", {
      lock_rules_file: path,
      rules: service.lockRules.ruleCount,
    });
  } catch (error) {
    logger.error("lock rules reload failed; keeping the old rules", {
      lock_rules_file: path,
      error: errorText(error),
    });
  }
}
