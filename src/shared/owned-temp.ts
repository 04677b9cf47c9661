import { createHash, randomBytes } from 'node:crypto';
import { lstatSync, readdirSync, rmSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';

/** This host, in temporary names: a pid says nothing about a process of another host. */
export const HOST_TAG = createHash('sha256').update(hostname()).digest('hex').slice(0, 8);

/** A temporary name nobody owns (an older fshare's, another host's) is stale after a day. */
const UNOWNED_AGE_MS = 24 * 3600 * 1000;

/** `NAME.<pid>-<host tag>-<random>.tmp`: who writes it, so that others can tell it is dead. */
const OWNED = /\.(\d+)-([0-9a-f]{8})-[0-9a-f]{12}\.tmp$/;

/** Whether a process with this id runs here (EPERM: it does, as another user). */
export function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** The temporary file a whole-file write of `path` goes through before its rename. */
export function ownedTempName(path: string): string {
  return `${path}.${process.pid}-${HOST_TAG}-${randomBytes(6).toString('hex')}.tmp`;
}

/**
 * Removes from `dir` the `*.tmp` files of writers that died before their rename (a kill, a
 * crash): those of a process no longer running on this host at once, unowned ones (older
 * fshares', another host's) once untouched for a day. A live writer's file is never touched.
 */
export function removeStaleTemps(dir: string): void {
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return;
  }
  for (const name of names) {
    if (!name.endsWith('.tmp')) continue;
    const file = join(dir, name);
    const owner = OWNED.exec(name);
    let stale: boolean;
    if (owner && owner[2] === HOST_TAG) stale = !processAlive(Number(owner[1]));
    else {
      const st = (() => {
        try {
          return lstatSync(file);
        } catch {
          return undefined;
        }
      })();
      stale = st !== undefined && st.isFile() && Date.now() - st.mtimeMs > UNOWNED_AGE_MS;
    }
    if (stale) rmSync(file, { force: true });
  }
}
