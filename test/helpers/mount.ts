// A small file system of its own, for disk-full tests: a tmpfs mount (CI runs as root). Where
// mounting is impossible the tests that need it are skipped with the reason printed.
import { execFileSync } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface SmallDisk {
  dir: string;
  unmount(): Promise<void>;
}

/**
 * Mounts a tmpfs of `mib` MiB (and at most `inodes` files, when given); returns a string (the
 * reason) when that cannot be done here.
 */
export async function mountSmallDisk(mib: number, inodes?: number): Promise<SmallDisk | string> {
  const dir = await mkdtemp(join(tmpdir(), 'fshare-small-'));
  const options = `size=${mib}m,mode=0700${inodes ? `,nr_inodes=${inodes}` : ''}`;
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', options, 'tmpfs', dir], {
      stdio: 'pipe',
    });
  } catch (err) {
    await rm(dir, { recursive: true, force: true });
    const why = (err as { stderr?: Buffer }).stderr?.toString().trim() || String(err);
    return `cannot mount a ${mib} MiB tmpfs here (${why}); run the tests as root to include them`;
  }
  return {
    dir,
    async unmount() {
      try {
        execFileSync('umount', ['-l', dir], { stdio: 'pipe' });
      } finally {
        await rm(dir, { recursive: true, force: true });
      }
    },
  };
}
