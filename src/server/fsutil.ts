import { open } from 'node:fs/promises';

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
