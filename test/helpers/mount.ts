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

/**
 * Mounts a `mib` MiB exFAT file system (a file on a loop device, through Debian's exfat-fuse): a
 * file system without hard links or permission bits (every file shows 0777 unless `options` say
 * `umask=…`), whose names ignore case and exclude `:` and `?`, such as a USB drive. A string is
 * the reason it cannot be done here.
 */
export async function mountExfat(mib: number, options: string[] = []): Promise<SmallDisk | string> {
  const dir = await mkdtemp(join(tmpdir(), 'fshare-exfat-'));
  const image = `${dir}.img`;
  const run = (cmd: string, args: string[]) =>
    execFileSync(cmd, args, { stdio: 'pipe' }).toString().trim();
  let loop: string | undefined;
  try {
    run('truncate', ['-s', `${mib}M`, image]);
    run('mkfs.exfat', [image]);
    loop = run('losetup', ['-f', '--show', image]);
    run('mount.exfat-fuse', [...options.flatMap((o) => ['-o', o]), loop, dir]);
  } catch (err) {
    if (loop) execFileSync('losetup', ['-d', loop], { stdio: 'pipe' });
    await rm(dir, { recursive: true, force: true });
    await rm(image, { force: true });
    const why = (err as { stderr?: Buffer }).stderr?.toString().trim() || String(err);
    return `cannot mount an exFAT file system here (${why}); run the tests as root, with exfat-fuse and exfatprogs`;
  }
  return {
    dir,
    async unmount() {
      try {
        execFileSync('umount', ['-l', dir], { stdio: 'pipe' });
        execFileSync('losetup', ['-d', loop!], { stdio: 'pipe' });
      } finally {
        await rm(dir, { recursive: true, force: true });
        await rm(image, { force: true });
      }
    },
  };
}
