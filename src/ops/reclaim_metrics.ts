/**
 * The metric families of reclaims (protocol version 2, cluster milestone 2, design §3.7), read
 * from the lock service's counters and the engine's: exposed in cluster mode only, where a
 * fail-over is what a reclaim carries claims across. Every label value has a sample from the
 * start.
 *
 * @module
 */

import type { ServerView } from "../server/view.ts";
import { RECLAIM_VOID_REASONS } from "../service/void_reasons.ts";
import type { MetricFamily } from "./prometheus.ts";

const CLAIM_KINDS = ["owned", "queued"] as const;
const OUTCOMES = ["kept", "void"] as const;

export function reclaimFamilies(server: ServerView): MetricFamily[] {
  const reclaims = server.reclaims;
  return [
    {
      name: "lockd_cluster_reclaims_total",
      help: "RECLAIMs decided, by claim kind (owned, queued) and outcome (kept, void).",
      type: "counter",
      samples: CLAIM_KINDS.flatMap((kind) =>
        OUTCOMES.map((outcome) => ({
          labels: { kind, outcome },
          value: reclaims.reclaims[kind][outcome],
        }))
      ),
    },
    {
      name: "lockd_cluster_reclaim_void_total",
      help: "RECLAIMs whose claim was not carried over, by the first rule it failed.",
      type: "counter",
      samples: RECLAIM_VOID_REASONS.map((reason) => ({
        labels: { reason },
        value: reclaims.voids[reason],
      })),
    },
    {
      name: "lockd_cluster_reclaim_conflicts_total",
      help: "Reinstated ownerships ended because a valid reclaim with a higher token came.",
      type: "counter",
      samples: [{ value: reclaims.conflicts }],
    },
    {
      name: "lockd_reclaims_total",
      help: "Ownerships reinstated with their own token by a reclaim (not new grants).",
      type: "counter",
      samples: [{ value: server.engine.stats.reclaimsTotal }],
    },
  ];
}
