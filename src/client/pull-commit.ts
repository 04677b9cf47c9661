/**
 * The commit of a pull (docs/CLI.md "fshare pull", "All or nothing"): once every file of the set
 * is downloaded and verified into a temporary file, what DIR shows changes in one synchronous
 * step (no signal handler, no other task runs in between): what is in the way goes, every
 * temporary file is renamed into place, the set's directories are made, skipped files get their
 * mode, and --delete's extras go. Before the first change a journal of those steps is written in
 * DIR (`.fshare-pull-PID-HOST-…`, to a temporary name, fsync'd, renamed), so that only a SIGKILL
 * (or a crash) in the middle can leave DIR part old, part new, and the next pull into DIR finishes
 * that commit before anything else (roll forward: the temporary files were verified).
 */
import { randomBytes } from 'node:crypto';
import {
  closeSync,
  fsyncSync,
  lstatSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmdirSync,
  rmSync,
  chmodSync,
  statfsSync,
  unlinkSync,
  writeSync,
} from 'node:fs';
import { lstat, open, readdir, realpath, unlink, type FileHandle } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { loadLocks } from '../shared/filelock.js';
import { HOST_TAG, processAlive, trackTempFiles, untrackTempFiles } from '../shared/owned-temp.js';

/** A pull's temporary files: `.fshare-tmp-<pid>-<host tag>-<random>` (see artifacts.ts). */
export const TEMP = '.fshare-tmp-';
/**
 * `<pid>-<host tag>-<random>`, and `.part` while download() writes it, or `-<characters>` for a
 * probe of the names a file system takes (artifacts.ts, NameProbe); older fshares: `<random>`.
 */
export const TEMP_OWNED = /^(\d+)-([0-9a-f]{8})-[0-9a-f]{12}(\.part|-.+)?$/s;
/** An accent, as one character: a probe of Unicode forms ends in it (TEMP_OWNED). */
export const FORM_PROBE = '-\u00e9';
export const TEMP_OLD = /^[0-9a-f]{12}(\.part)?$/;

const JOURNAL = /^\.fshare-pull-(\d+)-([0-9a-f]{8})-[0-9a-f]{12}$/;
const FORMAT = 'fshare-pull-journal/1';

/**
 * Whether a journal of the pull `owner` (`<pid>-<host tag>`) waits in `dir` or a directory above
 * it: a killed commit's temporary files are kept for the next pull into that journal's DIR, even
 * when a pull into a directory below it comes first (it would take them for plain leftovers).
 */
export async function journalWaits(dir: string, owner: string): Promise<boolean> {
  const prefix = `.fshare-pull-${owner}-`;
  for (let at = dir; ; at = dirname(at)) {
    const names = await readdir(at).catch(() => [] as string[]);
    if (names.some((n) => n.startsWith(prefix) && JOURNAL.test(n))) return true;
    if (dirname(at) === at) return false;
  }
}

/** The lock file a pull holds in DIR from its plan to its commit (see PullLock). */
export const PULL_LOCK = '.fshare-pull.lock';

/**
 * One pull into a DIR at a time. Two at once each planned against what DIR held when they began,
 * so the later commit could skip a file it took for already right that the earlier commit had just
 * changed, and report a set DIR no longer held; a commit killed under another pull's plan was
 * rolled forward over that pull's files. The lock is the kernel's, on `.fshare-pull.lock` in DIR
 * (dropped however its holder ends); the file is removed when the pull ends. A waiter that gets
 * the lock of a file already removed takes the new one. Where no lock can be had (a file system
 * without locks, a DIR it cannot write), the pull goes on unguarded, as before.
 */
export class PullLock {
  private handle: FileHandle | undefined;
  private ino = 0;
  private root: string | undefined;

  /** Whether the lock is held: then no other pull (of any process or host) is at work in DIR. */
  get held(): boolean {
    return this.handle !== undefined;
  }

  /** Takes the lock of `root` (DIR's real path) unless held; `waiting` is said once if it must wait. */
  async take(root: string, waiting: (line: string) => void): Promise<void> {
    if (this.root !== undefined) return;
    this.root = root;
    const path = join(root, PULL_LOCK);
    let told = false;
    for (;;) {
      let handle: FileHandle;
      try {
        handle = await open(path, 'a', 0o600);
      } catch {
        return;
      }
      try {
        if (!loadLocks().tryLock(handle.fd)) {
          if (!told) waiting(`waiting for another fshare pull into ${root} to finish`);
          told = true;
          await loadLocks().waitForLock(handle.fd);
        }
      } catch {
        await handle.close();
        return;
      }
      const held = (await handle.stat()).ino;
      const now = await lstat(path).catch(() => null);
      if (now?.ino === held) {
        this.handle = handle;
        this.ino = held;
        trackTempFiles(path); // a signal that ends fshare (Ctrl-C) removes it too
        return;
      }
      await handle.close(); // its holder removed that file as it ended: take the new one
    }
  }

  /** Removes the lock file (if it is still the one held), then lets go. */
  async release(): Promise<void> {
    const handle = this.handle;
    this.handle = undefined;
    if (!handle) return;
    const path = join(this.root!, PULL_LOCK);
    untrackTempFiles(path);
    try {
      if ((await lstat(path).catch(() => null))?.ino === this.ino) await unlink(path);
    } catch {
      // left for the next pull into DIR, which takes it as it is
    }
    await handle.close();
  }
}

/** True for the name of a pull's journal: not a file of DIR (push and --delete pass it over). */
export function isPullJournal(name: string): boolean {
  return JOURNAL.test(name);
}

/** Every step of a commit, paths relative to DIR ("/" between parts): paths only, no bytes. */
export interface PullCommit {
  /** What is in the way of the set (a directory where a file goes, a file where a directory). */
  remove: { path: string; dir: boolean }[];
  /** The set's directories (those of its files are made as their files are renamed). */
  dirs: string[];
  /** Each verified temporary file (its mode already set) and the file of the set it becomes. */
  rename: [temp: string, target: string][];
  /** Files already there with the set's bytes whose mode differs. */
  modes: [path: string, mode: number][];
  /** --delete: files the set does not have, then directories to remove if emptied (deepest first). */
  extra: string[];
  emptied: string[];
}

export function emptyCommit(): PullCommit {
  return { remove: [], dirs: [], rename: [], modes: [], extra: [], emptied: [] };
}

function isEmpty(c: PullCommit): boolean {
  return (
    c.remove.length + c.rename.length + c.modes.length + c.extra.length + c.emptied.length === 0 &&
    c.dirs.length === 0
  );
}

/** Thrown when the commit stopped halfway (a permission, EXDEV): the next pull finishes it. */
export class CommitError extends Error {
  override readonly name = 'CommitError';
}

/**
 * Test hook, never documented for users: FSHARE_TEST_KILL_AFTER_RENAMES=N makes the commit
 * SIGKILL its own process after N renames, the one moment that leaves DIR part old, part new.
 */
function killAfterRenames(): number | undefined {
  const n = Number(process.env.FSHARE_TEST_KILL_AFTER_RENAMES);
  return Number.isSafeInteger(n) && n >= 0 ? n : undefined;
}

/**
 * Makes DIR show the new set (see the top of this file). Synchronous on purpose: a SIGINT or
 * SIGTERM is handled only once it is over. `onRenamed` is told each temporary file that is gone.
 */
export function commitPull(
  root: string,
  commit: PullCommit,
  onRenamed: (temp: string) => void,
): void {
  if (isEmpty(commit)) return;
  checkRoom(root, commit);
  let journal: string;
  try {
    journal = writeJournal(root, commit);
  } catch (err) {
    // Its own temporary file is no name of the user's: the line names DIR ("no space left on
    // the device: DIR"; it said no place at all, a write carrying no path).
    if (typeof (err as NodeJS.ErrnoException).code === 'string')
      (err as NodeJS.ErrnoException).path = root;
    throw err;
  }
  try {
    applyCommit(root, commit, onRenamed, { killAfter: killAfterRenames() });
  } catch (err) {
    // The journal and the temporary files it names stay: the next pull into DIR finishes this.
    for (const [temp] of commit.rename) onRenamed(join(root, temp));
    throw new CommitError(
      `the pull into ${root} stopped while putting its files in place (${(err as Error).message}); the next fshare pull into it finishes it`,
      { cause: err },
    );
  }
  unlinkSync(journal);
}

/** statfs's f_type of a tmpfs, whose directories take no blocks of its size. */
const TMPFS_MAGIC = 0x01021994;

/**
 * The room the commit's new directories take, checked before its first change: a full disk
 * stopped a commit halfway (mkdir: no space left), DIR part old, part new, where it must be the
 * old set or the new one (found from outside, on ext4 and on a tmpfs out of inodes). Counted: an
 * inode and the blocks of each new directory (its entries: the files and directories put in it),
 * and the journal's inode and blocks. Too little is ENOSPC naming DIR, with nothing changed. The
 * count errs high, never low: a directory's entry is 8 bytes and its name rounded up to 4, as
 * ext4 lays them out.
 */
function checkRoom(root: string, c: PullCommit): void {
  const at = (rel: string) => join(root, ...rel.split('/'));
  const made = new Map<string, number>(); // a directory the commit makes → bytes of its entries
  const entry = (name: string) => 8 + Math.ceil(Buffer.byteLength(name) / 4) * 4;
  const need = (dir: string) => {
    for (let d = dir; d !== root && !made.has(d); d = dirname(d)) {
      const st = lstatOrNull(d);
      if (st?.isDirectory()) return;
      made.set(d, 24); // "." and ".."
    }
  };
  for (const [, target] of c.rename) need(dirname(at(target)));
  for (const d of c.dirs) need(at(d));
  if (made.size === 0) return;
  for (const [, target] of c.rename) {
    const dir = dirname(at(target));
    if (made.has(dir)) made.set(dir, made.get(dir)! + entry(basename(target)));
  }
  for (const d of made.keys()) {
    const parent = dirname(d);
    if (made.has(parent)) made.set(parent, made.get(parent)! + entry(basename(d)));
  }
  const fs = statfsSync(root);
  let blocks = 2; // the journal (a few blocks at most for most sets: counted below) and a margin
  blocks += Math.ceil(Buffer.byteLength(JSON.stringify(c)) / fs.bsize);
  if (fs.type !== TMPFS_MAGIC)
    for (const bytes of made.values()) {
      const own = Math.ceil(bytes / fs.bsize);
      blocks += own > 1 ? own + 1 : own; // past one block, ext4 adds an index block
    }
  const freeBlocks = process.getuid?.() === 0 ? fs.bfree : fs.bavail;
  // File systems that count no inodes (btrfs) say 0 of them in all.
  const inodesShort = fs.files > 0 && fs.ffree < made.size + 1;
  if (blocks > freeBlocks || inodesShort)
    throw Object.assign(
      new Error(`no space left on the device for the set's ${made.size} new directories: ${root}`),
      { code: 'ENOSPC', syscall: 'mkdir', path: root },
    );
}

/** The journal, whole or not at all: written to a temporary name, fsync'd, renamed. */
function writeJournal(root: string, commit: PullCommit): string {
  const id = `${process.pid}-${HOST_TAG}-${randomBytes(6).toString('hex')}`;
  const file = join(root, `.fshare-pull-${id}`);
  const temp = join(root, `${TEMP}${id}`);
  const fd = openSync(temp, 'wx', 0o600);
  try {
    const text = Buffer.from(`${JSON.stringify({ format: FORMAT, ...commit })}\n`);
    for (let w = 0; w < text.length;) w += writeSync(fd, text, w);
    fsyncSync(fd);
  } catch (err) {
    closeSync(fd);
    rmSync(temp, { force: true });
    throw err;
  }
  closeSync(fd);
  renameSync(temp, file);
  syncDir(root);
  return file;
}

function syncDir(dir: string): void {
  try {
    const fd = openSync(dir, 'r');
    try {
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
  } catch {
    // Not every file system syncs a directory; the rename is still atomic.
  }
}

const lstatOrNull = (abs: string) => {
  try {
    return lstatSync(abs, { bigint: true }); // bigint: see cli/main.ts, isRegularFile
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ENOTDIR') return null;
    throw err;
  }
};

/**
 * Every step, each one only if it is still to be done, so that a commit interrupted anywhere is
 * finished by running it again. Directories are made on the way, never through a link.
 */
function applyCommit(
  root: string,
  c: PullCommit,
  onRenamed: (temp: string) => void,
  { recovering = false, killAfter }: { recovering?: boolean; killAfter?: number } = {},
): void {
  const at = (rel: string) => join(root, ...rel.split('/'));
  const real = new Set<string>([root]);
  const makeDir = (abs: string) => {
    if (real.has(abs)) return;
    makeDir(dirname(abs));
    const st = lstatOrNull(abs);
    if (!st) mkdirSync(abs);
    else if (!st.isDirectory()) throw new Error(`${abs} is not a directory`);
    real.add(abs);
  };
  // Nothing through a link: a journal is read back from DIR, where anything may have changed.
  const unlinked = (rel: string) => {
    const parts = rel.split('/');
    for (let i = 1; i < parts.length; i++) {
      const abs = at(parts.slice(0, i).join('/'));
      if (real.has(abs)) continue;
      const st = lstatOrNull(abs);
      if (!st) break;
      if (st.isSymbolicLink()) throw new Error(`${abs} is a symbolic link`);
      if (st.isDirectory()) real.add(abs);
    }
    return at(rel);
  };
  for (const { path, dir } of c.remove) {
    const st = lstatOrNull(unlinked(path));
    if (st && st.isDirectory() === dir) rmSync(at(path), { recursive: true, force: true });
  }
  let renamed = 0;
  for (const [temp, target] of c.rename) {
    if (!lstatOrNull(unlinked(temp))?.isFile()) {
      if (recovering) continue; // renamed before the interruption
      throw new Error(`${at(temp)} is gone`);
    }
    makeDir(dirname(at(target)));
    renameSync(at(temp), at(target));
    onRenamed(at(temp));
    if (++renamed === killAfter) process.kill(process.pid, 'SIGKILL');
  }
  for (const d of c.dirs) makeDir(at(d));
  for (const [path, mode] of c.modes)
    if (lstatOrNull(unlinked(path))?.isFile()) chmodSync(at(path), mode);
  for (const path of c.extra) {
    const st = lstatOrNull(unlinked(path));
    if (st && !st.isDirectory()) unlinkSync(at(path));
  }
  for (const d of c.emptied) {
    try {
      rmdirSync(at(d)); // only when empty
    } catch {
      // Not empty (a file the user put there meanwhile): it stays.
    }
  }
}

/** A journal read back, every path checked as the manifest's paths are; null if it is not one. */
function readJournal(file: string, checkPath: (p: unknown) => string): PullCommit | null {
  let raw: Partial<PullCommit> & { format?: unknown };
  try {
    raw = JSON.parse(readFileSync(file, 'utf8')) as typeof raw;
  } catch {
    return null;
  }
  if (!raw || raw.format !== FORMAT) return null;
  const list = <T>(v: T[] | undefined): T[] => (Array.isArray(v) ? v : []);
  const tempName = (p: unknown) => {
    const path = checkPath(p);
    const name = basename(path);
    if (!name.startsWith(TEMP) || !TEMP_OWNED.test(name.slice(TEMP.length)))
      throw new Error(`not a temporary file of fshare pull: ${path}`);
    return path;
  };
  return {
    remove: list(raw.remove).map((r) => ({ path: checkPath(r?.path), dir: r?.dir === true })),
    dirs: list(raw.dirs).map(checkPath),
    rename: list(raw.rename).map((r) => [tempName(r?.[0]), checkPath(r?.[1])]),
    modes: list(raw.modes).map((m) => [checkPath(m?.[0]), Number(m?.[1]) & 0o777]),
    extra: list(raw.extra).map(checkPath),
    emptied: list(raw.emptied).map(checkPath),
  };
}

/**
 * Before a pull into `dir` does anything else: finishes the commit of every pull into it that was
 * killed during its commit, then removes the journal. With DIR's lock held (`locked`, PullLock)
 * every journal there is one: a commit is made holding that lock, so none can still be under
 * way, whatever process or host wrote it (a pid reused since, another host on a shared DIR).
 * Without the lock, only a journal of a process no longer running on this host is finished.
 */
export async function finishInterruptedPulls(
  dir: string,
  checkPath: (p: unknown) => string,
  notice: (line: string) => void,
  locked = false,
): Promise<void> {
  const root = await realpath(dir).catch(() => null);
  if (root === null) return;
  let names: string[];
  try {
    names = readdirSync(root);
  } catch {
    return;
  }
  for (const name of names.filter((n) => JOURNAL.test(n)).sort()) {
    const [, pid, host] = JOURNAL.exec(name)!;
    if (host === HOST_TAG && Number(pid) === process.pid) continue;
    if (!locked && (host !== HOST_TAG || processAlive(Number(pid)))) continue;
    const file = join(root, name);
    try {
      const commit = readJournal(file, checkPath);
      if (commit) {
        applyCommit(root, commit, () => undefined, { recovering: true });
        notice(`finished an interrupted pull into ${root}`);
      }
      unlinkSync(file);
    } catch (err) {
      throw new CommitError(
        `an interrupted pull into ${root} could not be finished (${(err as Error).message}); its journal is ${file}: remove it to pull without finishing that step`,
        { cause: err },
      );
    }
  }
}
