import { chmod, readdir, stat } from 'node:fs/promises';
import { makeDirs } from '../shared/mkdirs.js';

/** What a data directory holds (of any fshare version): one of them makes a directory one. */
const DATA_DIR_NAMES =
  /^(db\.json|db\.journal|lock|secret|content-owner|content|uploads|incoming|orphans|removing|reserve|admin-password)(\.|$)/;

/**
 * Found from outside: `fshare serve --data-dir ~` (or `.` in a project) made the directory
 * private (0700) and wrote fshare's files among the user's. A directory that holds files, none of
 * them fshare's, is refused before anything is changed. A new volume's `lost+found` and hidden
 * entries (`.snapshot`) do not count.
 */
async function refuseOthersDirectory(dataDir: string): Promise<void> {
  let names: string[];
  try {
    names = await readdir(dataDir);
  } catch {
    return; // none yet (or not a directory: said in one line by the start)
  }
  const others = names.filter((n) => !n.startsWith('.') && n !== 'lost+found');
  if (others.length === 0 || names.some((n) => DATA_DIR_NAMES.test(n))) return;
  const shown = others.slice(0, 3).join(', ') + (others.length > 3 ? ', …' : '');
  throw new Error(
    `${dataDir} is no fshare data directory: it holds other files (${shown}) and none of ` +
      `fshare's, and a start would make it private (0700) and write among them; give ` +
      `--data-dir a new or empty directory`,
  );
}

/**
 * Makes (or opens) a data directory, checked before anything is written in it: a directory of
 * its own, made private (0700) where the file system keeps permissions. `fshare serve` and
 * `admin import`/`export` (copy.ts).
 */
export async function prepareDataDir(dataDir: string): Promise<void> {
  await refuseOthersDirectory(dataDir);
  await makeDirs(dataDir).catch((err: NodeJS.ErrnoException) => {
    // "already exists" would name the file in the way, not what is wrong with it.
    if (err.code === 'EEXIST' || err.code === 'ENOTDIR')
      throw new Error(`the data directory ${dataDir} is not a directory`);
    throw err;
  });
  await chmod(dataDir, 0o700);
  // A file system that keeps no permissions (NTFS through ntfs-3g, a Windows drive under WSL)
  // takes the chmod and leaves the directory open to every user: its signing secret, with which
  // anyone could make an administrator's token, and every share's content. Checked before
  // anything is written there.
  const { mode } = await stat(dataDir);
  if ((mode & 0o077) !== 0)
    throw new Error(
      `the data directory ${dataDir} is on a file system that keeps no file permissions (made ` +
        `0700, it is ${(mode & 0o777).toString(8)}), so every user of this machine could read ` +
        `its signing secret and content; use a directory on another file system`,
    );
}
