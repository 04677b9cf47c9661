import { open, type FileHandle } from 'node:fs/promises';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { loadLocks } from '../../shared/filelock.js';

/**
 * The embedded store belongs to one process at a time: a second `fshare serve` on the same data
 * directory (by mistake, or a team pointing two hosts at one shared folder) would append to the
 * same journal and lose changes both had acknowledged.
 *
 * The guard is a lock the kernel holds for us on `<data-dir>/lock`: an open-file-description
 * lock (fcntl F_OFD_SETLK on Linux, flock elsewhere), through fs-native-extensions. The kernel
 * drops it when the process ends in any way, SIGKILL included, so a crash never leaves a stale
 * lock behind; over NFS it is a POSIX lock that the server arbitrates between hosts.
 */

/** Another process holds the data directory. Nothing was read or changed. */
export class DataDirInUseError extends Error {
  override readonly name = 'DataDirInUseError';
}

/** A held lock on a data directory; `release()` lets the next process have it. */
export interface DataDirLock {
  release(): Promise<void>;
}

/**
 * Takes the data directory's lock, or throws DataDirInUseError naming who holds it. A file
 * system that cannot lock at all (ENOLCK, EOPNOTSUPP and the like) is said in one line through
 * `log` and the store opens unguarded, as it did before the lock existed.
 */
export async function lockDataDir(
  dataDir: string,
  log: (line: string) => void,
): Promise<DataDirLock> {
  const file = join(dataDir, 'lock');
  // Opened without truncating: the holder's note stays readable until we own the lock.
  const handle = await open(file, 'a+', 0o600);
  let held: boolean;
  try {
    held = loadLocks().tryLock(handle.fd);
  } catch (err) {
    log(
      `data: cannot lock ${file} (${(err as Error).message}); make sure no other fshare serve uses ${dataDir}`,
    );
    held = true;
  }
  if (!held) {
    const holder = await handle.readFile('utf8').catch(() => '');
    await handle.close();
    throw new DataDirInUseError(
      `${dataDir} is in use by another fshare serve${describeHolder(holder)}. One data directory ` +
        `serves one server: stop the other one, give this one its own --data-dir, or run ` +
        `several servers on PostgreSQL and S3 (--database, --storage).`,
    );
  }
  const note = `${JSON.stringify({ pid: process.pid, host: hostname(), since: new Date().toISOString() })}\n`;
  await writeNote(handle, note).catch(() => undefined); // only ever read for the message above
  return { release: () => handle.close() };
}

async function writeNote(handle: FileHandle, note: string): Promise<void> {
  await handle.truncate(0);
  await handle.write(note, 0);
}

function describeHolder(text: string): string {
  try {
    const { pid, host, since } = JSON.parse(text) as {
      pid?: unknown;
      host?: unknown;
      since?: unknown;
    };
    if (typeof pid !== 'number' || typeof host !== 'string') return '';
    return ` (process ${pid} on ${host}${typeof since === 'string' ? `, since ${since}` : ''})`;
  } catch {
    return '';
  }
}
