import { createHash, randomBytes } from 'node:crypto';
import { lstatSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { systemErrorText } from './syserr.js';

/** This host, in temporary names: a pid says nothing about a process of another host. */
export const HOST_TAG = createHash('sha256').update(hostname()).digest('hex').slice(0, 8);

/** A temporary name nobody owns (an older fshare's, another host's) is stale after a day. */
const UNOWNED_AGE_MS = 24 * 3600 * 1000;

/** `NAME.<pid>-<host tag>-<random>.tmp`: who writes it, so that others can tell it is dead. */
const OWNED = /\.(\d+)-([0-9a-f]{8})-[0-9a-f]{12}\.tmp$/;

/**
 * Whether a process with this id runs here (EPERM: it does, as another user). A zombie does not:
 * it was killed and only waits for its parent to reap it, which in a container whose first
 * process reaps nothing never happens. Found from outside: an upload killed and not yet reaped
 * counted as running, so running it again made a second share and `uploads clean` left the first.
 */
export function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EPERM') return false;
  }
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return true; // no /proc (not Linux), or gone this instant: as kill(0) said
  }
  // "PID (COMM) STATE …": COMM may hold spaces and parentheses; the state follows the last ")".
  const state = stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
  return state !== 'Z' && state !== 'X';
}

/** The temporary file a whole-file write of `path` goes through before its rename. */
export function ownedTempName(path: string): string {
  return `${path}.${process.pid}-${HOST_TAG}-${randomBytes(6).toString('hex')}.tmp`;
}

/**
 * Removes from `dir` the `*.tmp` files of writers that died before their rename (a kill, a
 * crash): those of a process no longer running on this host at once, unowned ones (older
 * fshares', another host's) once untouched for a day. A live writer's file is never touched.
 * With `only` (a directory that holds other things too), just the owned temporary names
 * (ownedTempName) of those files are looked at, nothing else.
 */
export function removeStaleTemps(dir: string, only?: readonly string[]): void {
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
    if (only && !(owner && only.includes(name.slice(0, owner.index)))) continue;
    let stale: boolean;
    if (owner && owner[2] === HOST_TAG) stale = !processAlive(Number(owner[1]));
    else {
      const st = (() => {
        try {
          return lstatSync(file, { bigint: true }); // bigint: see cli/main.ts, isRegularFile
        } catch {
          return undefined;
        }
      })();
      stale = st !== undefined && st.isFile() && Date.now() - Number(st.mtimeMs) > UNOWNED_AGE_MS;
    }
    if (stale) rmSync(file, { force: true });
  }
}

/** The private temporary directories fshare makes; a stale one of each kind is removed. */
const TEMP_DIR_KINDS = ['fshare-stdin-', 'fshare-push-', 'fshare-manifest-'];

/** The directories made by ownedTempDir and not yet removed: gone on exit, or on a signal. */
const liveTempDirs = new Set<string>();
let exitHooked = false;

/**
 * A new private directory under the system's temporary directory, `<prefix><pid>-<host>-XXXXXX`,
 * removed by removeOwnedTempDir, or at the latest when the process exits (removeLiveTempDirs on a
 * signal). Those a killed fshare of this user left (its pid no longer runs on this host; an
 * unowned older name once a day old) are removed first: nothing else ever would.
 */
/** Failures of mkdtemp that are about the temporary directory itself ($TMPDIR). */
const TEMP_ROOT_CODES = new Set([
  'ENOENT',
  'ENOTDIR',
  'EACCES',
  'EPERM',
  'EROFS',
  'ENOSPC',
  'EDQUOT',
  'ENAMETOOLONG',
  'ELOOP',
]);

export async function ownedTempDir(prefix: string): Promise<string> {
  removeStaleTempDirs();
  const root = tmpdir();
  const dir = await mkdtemp(join(root, `${prefix}${process.pid}-${HOST_TAG}-`)).catch(
    (err: NodeJS.ErrnoException) => {
      // Found from outside: TMPDIR naming a folder that is not there said only "no such file or
      // directory: /nonexistent/fshare-push-27409-5bce98f7-UvY2YI", a name of ours, not what to do.
      if (!err.code || !TEMP_ROOT_CODES.has(err.code)) throw err;
      const why = systemErrorText({ ...err, path: undefined }) ?? err.code;
      throw new Error(
        `cannot make a temporary directory in ${root} (${why}); set TMPDIR to a directory fshare can write`,
        { cause: err },
      );
    },
  );
  if (!exitHooked) process.on('exit', removeLiveTempDirs);
  exitHooked = true;
  liveTempDirs.add(dir);
  return dir;
}

export async function removeOwnedTempDir(dir: string): Promise<void> {
  await rm(dir, { recursive: true, force: true });
  liveTempDirs.delete(dir);
}

/**
 * Temporary files a command writes outside those directories (a pull's, beside each file of the
 * set), from their creation until they are renamed or removed: gone on exit or on a signal too.
 */
const liveTempFiles = new Set<string>();

export function trackTempFiles(...paths: string[]): void {
  if (!exitHooked) process.on('exit', removeLiveTempDirs);
  exitHooked = true;
  for (const path of paths) liveTempFiles.add(path);
}

export function untrackTempFiles(...paths: string[]): void {
  for (const path of paths) liveTempFiles.delete(path);
}

/**
 * Removes every directory of ownedTempDir and every tracked temporary file still there (on exit,
 * or a signal that ends fshare).
 */
export function removeLiveTempDirs(): void {
  for (const dir of liveTempDirs) rmSync(dir, { recursive: true, force: true });
  liveTempDirs.clear();
  for (const file of liveTempFiles) rmSync(file, { force: true });
  liveTempFiles.clear();
}

const OWNED_DIR = /^(\d+)-([0-9a-f]{8})-[A-Za-z0-9]{6}$/;

/** Removes this user's fshare temporary directories whose process is dead (see ownedTempDir). */
function removeStaleTempDirs(): void {
  const root = tmpdir();
  let names: string[];
  try {
    names = readdirSync(root);
  } catch {
    return;
  }
  for (const name of names) {
    const prefix = TEMP_DIR_KINDS.find((p) => name.startsWith(p));
    if (!prefix) continue;
    const dir = join(root, name);
    let st;
    try {
      st = lstatSync(dir, { bigint: true }); // bigint: see cli/main.ts, isRegularFile
    } catch {
      continue;
    }
    // Only a real directory of this user: never another user's, never through a link.
    if (!st.isDirectory() || (process.getuid && Number(st.uid) !== process.getuid())) continue;
    const owner = OWNED_DIR.exec(name.slice(prefix.length));
    const stale =
      owner && owner[2] === HOST_TAG
        ? !processAlive(Number(owner[1]))
        : Date.now() - Number(st.mtimeMs) > UNOWNED_AGE_MS;
    if (stale) rmSync(dir, { recursive: true, force: true });
  }
}
