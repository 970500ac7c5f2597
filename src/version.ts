/**
 * The one place of the release's name and version: the server reports VERSION (WELCOME,
 * GET /api/info, `lockd version`), the TypeScript client sends it in its HELLO, and the npm
 * package of the client is built with this name and version (npm/build.ts). The Python client
 * keeps copies (clients/python: pyproject.toml, VERSION), checked by tests/clients/version_test.ts.
 */
export const VERSION = "0.1.0";

/** Name of the npm package of the TypeScript client (built by `deno task npm:pack`). */
export const NPM_PACKAGE_NAME = "lockd-client";
