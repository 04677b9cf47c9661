import { mkdtempSync } from 'node:fs';
import { chmod, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll } from 'vitest';

/**
 * Every test file gets a temporary directory of its own, removed once the file is done, and
 * TMPDIR names it, so that whatever the file and the processes it starts make below the OS temp
 * directory (data directories, CLI configurations, files to upload, browser profiles) goes with
 * it. Before this, `npm test` left a few GB in /tmp on each run. Like /tmp it is open to every
 * user (sticky): the PostgreSQL helpers run as `postgres` below it.
 */
const dir = mkdtempSync(join(tmpdir(), 'fshare-tests-'));
await chmod(dir, 0o1777);
process.env.TMPDIR = dir;

afterAll(async () => {
  // Registered before the file's own hooks: with vitest's default order ('stack') it runs after
  // them, once their servers have stopped and their mounts are gone. Whatever cannot be
  // removed (a mount still in place) is left: a test's own hook failed and says why.
  await rm(dir, { recursive: true, force: true, maxRetries: 3 }).catch(() => undefined);
});
