import { type Route, route } from "../http/router.ts";
import {
  type AdminContext,
  forceRelease,
  getEvents,
  getHistory,
  getInfo,
  getLock,
  kickWaiter,
  liftReservation,
  listLocks,
} from "./handlers.ts";

/**
 * The admin API. Path groups match one segment (`[^/]+`) and stay
 * percent-encoded: `/api/locks/jobs%2Fnightly` is lock `jobs/nightly`, while
 * `/api/locks/jobs/nightly` matches no route.
 */
export const ADMIN_ROUTES: readonly Route<AdminContext>[] = [
  route("GET", "/api/info", getInfo),
  route("GET", "/api/history", getHistory),
  route("GET", "/api/events", getEvents),
  route("GET", "/api/locks", listLocks),
  route("GET", "/api/locks/:name", getLock),
  route("POST", "/api/locks/:name/release", forceRelease),
  route("POST", "/api/locks/:name/lift-reservation", liftReservation),
  route("DELETE", "/api/locks/:name/waiters/:remote_addr", kickWaiter),
];
