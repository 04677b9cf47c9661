import { open, rename, rm } from 'node:fs/promises';
import { dirname } from 'node:path';
import { writeFully } from '../shared/copy.js';

/** Makes a directory's entries (a rename, a new or removed file) durable. */
export async function fsyncDir(dir: string): Promise<void> {
  const handle = await open(dir, 'r');
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

/** True for the errors a full disk (or a quota) gives. */
export function isOutOfSpace(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return code === 'ENOSPC' || code === 'EDQUOT';
}

/**
 * Replaces `file` with `text`, whole or not at all, durably: a temporary file (0600) written in
 * full and fsynced, renamed over `file`, then the directory fsynced. On any failure (a full disk)
 * the temporary file is removed and `file` is as it was.
 */
export async function writeFileDurably(file: string, text: string): Promise<void> {
  const tmp = `${file}.tmp`;
  try {
    const handle = await open(tmp, 'w', 0o600);
    try {
      await writeFully(handle, Buffer.from(text), 0);
      await handle.sync();
    } finally {
      await handle.close();
    }
    await rename(tmp, file);
  } catch (err) {
    await rm(tmp, { force: true }).catch(() => undefined);
    throw err;
  }
  await fsyncDir(dirname(file));
}
