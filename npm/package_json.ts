/**
 * The `package.json` of the npm package (npm/build.ts writes it into the package directory;
 * tests/clients/packages_test.ts checks it without building). Name and version come from
 * src/version.ts; the license is the repository's (LICENSE, Apache-2.0), which is shipped in
 * the package too.
 *
 * @module
 */

import { NPM_PACKAGE_NAME, VERSION } from "../src/version.ts";

/** The SPDX identifier of LICENSE; the npm and the Python package metadata say the same. */
export const LICENSE_SPDX = "Apache-2.0";

/** The package's `package.json` object. */
export function npmPackageJson(): Record<string, unknown> {
  return {
    name: NPM_PACKAGE_NAME,
    version: VERSION,
    description:
      "Client for lockd, a network lock server with FIFO queues, leases and fencing tokens (Node, Bun, Deno)",
    license: LICENSE_SPDX,
    type: "module",
    exports: { ".": { types: "./mod.d.ts", default: "./mod.js" } },
    main: "./mod.js",
    types: "./mod.d.ts",
    files: ["mod.js", "mod.d.ts", "src/", "README.md", "LICENSE"],
    engines: { node: ">=20" },
    sideEffects: false,
    keywords: ["lock", "distributed-lock", "mutex", "lease", "fencing-token", "lockd"],
  };
}
