/** The server and client version, reported in WELCOME and GET /api/info. */
export const VERSION = "0.1.0";
