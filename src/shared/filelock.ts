import { closeSync, openSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { createRequire } from 'node:module';

/**
 * Turns for processes that read, change and write back one file (the client's config.json and
 * credentials.json): each takes an exclusive kernel lock on a lock file beside it first, so two
 * commands run at once (two logins, a login beside a CI job) no longer lose each other's changes.
 * The lock is an open-file-description lock through fs-native-extensions, as for the server's
 * data directory (store/dirlock.ts): the kernel drops it when its holder ends in any way.
 */
interface Locks {
  tryLock(fd: number): boolean;
  waitForLock(fd: number): Promise<void>;
  waitForLockSync(fd: number): void;
}
let locks: Locks | undefined;
/** The addon, loaded when first needed: commands that only read never load it. */
export const loadLocks = (): Locks =>
  (locks ??= createRequire(import.meta.url)('fs-native-extensions') as Locks);

/**
 * Runs `task` holding the lock on `lockPath` (created 0600 when missing). Where no lock can be
 * had (the file cannot be created, a file system without locks) the task runs unguarded, as it
 * did before: a lost change there is better than a command that cannot work.
 */
export function withFileLockSync<T>(lockPath: string, task: () => T): T {
  let fd: number;
  try {
    fd = openSync(lockPath, 'a', 0o600);
  } catch {
    return task();
  }
  try {
    try {
      loadLocks().waitForLockSync(fd);
    } catch {
      // no locking here: go on unguarded
    }
    return task();
  } finally {
    closeSync(fd); // closing the descriptor releases the lock
  }
}

/** The same, for a task that awaits. */
export async function withFileLock<T>(lockPath: string, task: () => Promise<T>): Promise<T> {
  let handle;
  try {
    handle = await open(lockPath, 'a', 0o600);
  } catch {
    return task();
  }
  try {
    try {
      await loadLocks().waitForLock(handle.fd);
    } catch {
      // no locking here: go on unguarded
    }
    return await task();
  } finally {
    await handle.close();
  }
}
