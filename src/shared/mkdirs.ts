import { mkdirSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import { dirname } from 'node:path';

/*
 * `mkdir -p` that reports why it failed. Node's recursive mkdir answers ENOENT ("no such file or
 * directory") when a directory could not be made for another reason: a full disk or one out of
 * inodes (ENOSPC), a read-only file system (EROFS), on Node 20 (nodejs/node#42808, #47098). fshare
 * said "no such file or directory: DIR" for a config or data directory on such a disk. On that
 * ENOENT, the directories are made again one level at a time, which meets the real error.
 */

const isEnoent = (err: unknown) => (err as NodeJS.ErrnoException | null)?.code === 'ENOENT';
const isEexist = (err: unknown) => (err as NodeJS.ErrnoException | null)?.code === 'EEXIST';

/** Makes `path` and its missing parents; an error names the real cause. */
export async function makeDirs(path: string, mode = 0o700): Promise<void> {
  try {
    await mkdir(path, { recursive: true, mode });
  } catch (err) {
    if (!isEnoent(err)) throw err;
    await oneByOne(path, mode);
  }
}

async function oneByOne(path: string, mode: number): Promise<void> {
  try {
    await mkdir(path, { mode });
  } catch (err) {
    if (isEexist(err)) return; // made meanwhile, or a file: what is made in it then fails, named
    if (!isEnoent(err) || dirname(path) === path) throw err;
    await oneByOne(dirname(path), mode);
    await mkdir(path, { mode }).catch((again: unknown) => {
      if (!isEexist(again)) throw again;
    });
  }
}

/** makeDirs, synchronously. */
export function makeDirsSync(path: string, mode = 0o700): void {
  try {
    mkdirSync(path, { recursive: true, mode });
  } catch (err) {
    if (!isEnoent(err)) throw err;
    oneByOneSync(path, mode);
  }
}

function oneByOneSync(path: string, mode: number): void {
  try {
    mkdirSync(path, { mode });
  } catch (err) {
    if (isEexist(err)) return;
    if (!isEnoent(err) || dirname(path) === path) throw err;
    oneByOneSync(dirname(path), mode);
    try {
      mkdirSync(path, { mode });
    } catch (again) {
      if (!isEexist(again)) throw again;
    }
  }
}
