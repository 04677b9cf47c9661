import { open, type FileHandle } from 'node:fs/promises';

/**
 * Writes every byte or throws: a short write (a disk filling up) is continued, and one that
 * makes no progress is an error, never a silent loss. `position` null appends at the file's end.
 */
export async function writeFully(
  handle: FileHandle,
  bytes: Uint8Array,
  position: number | null,
): Promise<void> {
  let done = 0;
  while (done < bytes.length) {
    const { bytesWritten } = await handle.write(
      bytes,
      done,
      bytes.length - done,
      position === null ? null : position + done,
    );
    if (bytesWritten <= 0)
      throw Object.assign(new Error('write made no progress'), { code: 'EIO' });
    done += bytesWritten;
  }
}

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
