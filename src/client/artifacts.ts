/**
 * Named sets of files ("artifacts") on top of plain shares, so they work with any server of the
 * spec (docs/CLI.md "Artifacts"):
 *
 * - the manifest is the share named `fshare-artifact:NAME`: JSON listing every file's path, size,
 *   mode and sha256, and where its bytes are;
 * - bytes live in shares named `fshare-artifact:NAME:data:<sha256 of the share's content>`: a large
 *   file is a share of its own; small files are packed, concatenated, into packs of a few MiB;
 * - a push uploads what the stored manifest lacks, then replaces the manifest's content last
 *   (a PUT: old bytes or new, never a mix), then deletes data no manifest needs any more. An
 *   interrupted push leaves the previous set whole; running it again reuses what it uploaded.
 * - a pull checks every path, downloads every file it lacks into a temporary file (beside its
 *   place, or higher up in DIR where a directory is still to be made), verifies its sha256 and
 *   sets its mode; only once all are verified does the commit (pull-commit.ts) put them in place:
 *   DIR holds the old set or the new one, never a mix.
 *
 * A set is its owner's: every function here takes the signed-in user's name and looks only at
 * manifests that user owns, and a pull only at data shares that user owns. Anyone with CREATE can
 * make a share of any name, so a name alone proves nothing about who wrote it.
 */
import { createHash, randomBytes } from 'node:crypto';
import {
  constants as fsConstants,
  chmodSync,
  closeSync,
  copyFileSync,
  createReadStream,
  fchmodSync,
  openSync,
  readFileSync,
  writeSync,
} from 'node:fs';
import {
  chmod,
  copyFile,
  lstat,
  open,
  readdir,
  readFile,
  realpath,
  rename,
  rm,
  stat,
  writeFile,
} from 'node:fs/promises';
import type { FileHandle } from 'node:fs/promises';
import { basename, dirname, join, relative, sep } from 'node:path';
import { Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  HOST_TAG,
  ownedTempDir,
  ownedTempName,
  processAlive,
  removeOwnedTempDir,
  trackTempFiles,
  untrackTempFiles,
} from '../shared/owned-temp.js';
import { writeFully } from '../shared/copy.js';
import type { Share } from '../shared/types.js';
import { deleteFile, findShares, getFile } from './api.js';
import { download } from './download.js';
import { partPathOf } from './filename.js';
import { hashFile } from './hashing.js';
import {
  ApiError,
  ClientInputError,
  ManifestError,
  NoArtifactError,
  VerificationError,
} from './errors.js';
import type { ApiClient } from './http.js';
import { createChunkLimiter, createLimiter, type Limiter } from './limit.js';
import {
  commitPull,
  CommitError,
  finishInterruptedPulls,
  isPullJournal,
  PULL_LOCK,
  PullLock,
  journalWaits,
  FORM_PROBE,
  TEMP,
  TEMP_OLD,
  TEMP_OWNED,
  type PullCommit,
} from './pull-commit.js';
import { FileChangedError, replaceFile, uploadFile, type ResumeStore } from './upload.js';
import { makeDirs } from '../shared/mkdirs.js';

export const ARTIFACT_PREFIX = 'fshare-artifact:';

/**
 * Waits for every task (none is left running when this returns, so nothing writes into a
 * directory being removed), then throws the first failure, saying how many failed.
 */
async function settleAll(what: string, tasks: Promise<unknown>[]): Promise<void> {
  // Every task is awaited before anything is thrown.
  const results = await Promise.allSettled(tasks);
  const failed = results.filter((r): r is PromiseRejectedResult => r.status === 'rejected');
  if (failed.length === 0) return;
  const first = failed[0]!.reason as unknown;
  if (failed.length > 1 && first instanceof Error)
    first.message += ` (${failed.length} of ${tasks.length} ${what} failed)`;
  throw first;
}
const FORMAT = 'fshare-artifact/1';
/** Files below this size are packed together; larger ones are shares of their own. */
export const PACK_FILE_LIMIT = 1024 * 1024;
/** A pack is closed once it holds this many bytes. */
export const PACK_BYTES = 8 * 1024 * 1024;
/** Data shares no manifest names, left by an interrupted push, are deleted after this long. */
const ORPHAN_AGE_MS = 24 * 3600 * 1000;
const NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;
const SHA = /^[0-9a-f]{64}$/;
const EMPTY_SHA256 = createHash('sha256').digest('hex');

export interface ManifestFile {
  /** Relative, with "/" between components. */
  path: string;
  size: number;
  /** Permission bits (0o644). */
  mode: number;
  sha256: string;
  /** The data share holding the bytes (null for an empty file) and where they start in it. */
  share: string | null;
  offset: number;
}

export interface Manifest {
  format: typeof FORMAT;
  name: string;
  created: string;
  files: ManifestFile[];
  /** Directories without files (so that they come back too). */
  dirs: string[];
}

export function checkArtifactName(name: string): string {
  if (!NAME.test(name))
    throw new ClientInputError(
      `an artifact name has 1 to 128 letters, digits, ".", "_" or "-", starting with a letter or digit: ${name}`,
    );
  return name;
}

const manifestName = (name: string) => `${ARTIFACT_PREFIX}${name}`;
const dataPrefix = (name: string) => `${ARTIFACT_PREFIX}${name}:data:`;

/** A Windows drive (`C:`): a path that begins with one leaves DIR there, or names a stream. */
const DRIVE = /^[A-Za-z]:/;

/**
 * A path from a manifest, made safe or refused: relative, "/"-separated, no empty, "." or ".."
 * component, no NUL or backslash, at most 4096 characters.
 */
export function safeRelativePath(path: unknown): string {
  if (typeof path !== 'string' || path.length === 0 || path.length > 4096)
    throw new ManifestError(`a path must be a string of 1 to 4096 characters`);
  if (path.startsWith('/'))
    throw new ManifestError(`absolute path refused: ${JSON.stringify(path)}`);
  if (DRIVE.test(path))
    throw new ManifestError(
      `path that begins with a Windows drive refused: ${JSON.stringify(path)}`,
    );
  if (path.includes('\0') || path.includes('\\'))
    throw new ManifestError(`path with NUL or backslash refused: ${JSON.stringify(path)}`);
  for (const part of path.split('/'))
    if (part === '' || part === '.' || part === '..')
      throw new ManifestError(
        `path with an empty, "." or ".." part refused: ${JSON.stringify(path)}`,
      );
  return path;
}

/**
 * A path of the set a manifest lists: safe, and no name a pull gives its own files, which push
 * never sends. Found from outside: a manifest that named `.fshare-pull.lock` was pulled, then
 * reported "already there" and removed by the pull's end; the temporary and journal names would
 * be removed as a killed pull's. (A pull's journal may name its stale temporary files: it is
 * read with safeRelativePath alone.)
 */
function setPath(path: unknown): string {
  const safe = safeRelativePath(path);
  if (safe.split('/').some(pullOwnName))
    throw new ManifestError(
      `path with a name fshare pull uses for its own files refused: ${JSON.stringify(safe)}`,
    );
  return safe;
}

/** A name pull gives its own files in DIR (its lock, journals and temporary files). */
function pullOwnName(name: string): boolean {
  if (name === PULL_LOCK || isPullJournal(name)) return true;
  if (!name.startsWith(TEMP)) return false;
  const rest = name.slice(TEMP.length);
  return TEMP_OWNED.test(rest) || TEMP_OLD.test(rest);
}

/** Checks every field of a manifest; throws ManifestError at the first thing wrong. */
export function parseManifest(text: string, name: string): Manifest {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    throw new ManifestError(`the manifest is not JSON: ${(err as Error).message}`);
  }
  const m = raw as Partial<Manifest>;
  if (!m || typeof m !== 'object' || m.format !== FORMAT)
    throw new ManifestError(`not an fshare artifact manifest (format ${FORMAT})`);
  if (m.name !== name) throw new ManifestError(`the manifest names another artifact: ${m.name}`);
  if (!Array.isArray(m.files) || !Array.isArray(m.dirs))
    throw new ManifestError('the manifest has no file or directory list');
  const seen = new Set<string>();
  const files: ManifestFile[] = m.files.map((f: Partial<ManifestFile>) => {
    const path = setPath(f?.path);
    if (seen.has(path)) throw new ManifestError(`path listed twice: ${path}`);
    seen.add(path);
    const int = (v: unknown) => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;
    if (!int(f.size) || !int(f.offset) || !int(f.mode) || f.mode! > 0o7777)
      throw new ManifestError(`bad size, offset or mode for ${path}`);
    if (typeof f.sha256 !== 'string' || !SHA.test(f.sha256))
      throw new ManifestError(`bad sha256 for ${path}`);
    if (f.share !== null && (typeof f.share !== 'string' || !/^[0-9a-f-]{36}$/i.test(f.share)))
      throw new ManifestError(`bad share id for ${path}`);
    if (f.share === null && f.size !== 0) throw new ManifestError(`${path} has bytes but no share`);
    return {
      path,
      size: f.size!,
      mode: f.mode! & 0o777,
      sha256: f.sha256,
      share: f.share ?? null,
      offset: f.offset!,
    };
  });
  const dirs = m.dirs.map((d) => setPath(d));
  for (const d of dirs)
    if (seen.has(d)) throw new ManifestError(`${d} is listed as a file and as a directory`);
  // A file cannot also be a directory of another file (or of a listed directory).
  for (const p of [...files.map((f) => f.path), ...dirs]) {
    const parts = p.split('/');
    for (let i = 1; i < parts.length; i++) {
      const parent = parts.slice(0, i).join('/');
      if (seen.has(parent))
        throw new ManifestError(`${parent} is listed as a file and as a directory`);
    }
  }
  return { format: FORMAT, name, created: String(m.created ?? ''), files, dirs };
}

export interface StoredManifest {
  manifest: Manifest;
  share: Share;
  /** The sha256 of the manifest's bytes as read: the version a push replaces (If-Match). */
  sha256: string;
}

/** NAME's manifest shares: the owner's, and the names of the other users who have one. */
async function manifestShares(
  client: ApiClient,
  name: string,
  owner: string,
): Promise<{ own: Share[]; others: string[] }> {
  const all = await findShares(client, { file_name: manifestName(name) });
  const others = new Set(
    all.filter((s) => s.owner_name !== owner).map((s) => s.owner_name ?? 'anonymous'),
  );
  return { own: all.filter((s) => s.owner_name === owner), others: [...others].sort() };
}

/** The newest of these manifests (by their `created`), each verified by the server's sha256. */
async function newestManifest(
  client: ApiClient,
  name: string,
  shares: Share[],
  signal?: AbortSignal,
): Promise<StoredManifest | null> {
  let best: StoredManifest | null = null;
  for (const share of shares.filter((s) => s.initialized)) {
    const bytes = await readShareBytes(client, share.share_id, signal);
    const manifest = parseManifest(bytes.toString('utf8'), name);
    const sha256 = createHash('sha256').update(bytes).digest('hex');
    if (!best || manifest.created > best.manifest.created) best = { manifest, share, sha256 };
  }
  return best;
}

/**
 * `owner`'s manifest of the set, verified by the server's sha256; null when `owner` has none.
 * Manifests of the same name that other users own are never read.
 */
export async function readManifest(
  client: ApiClient,
  name: string,
  owner: string,
  signal?: AbortSignal,
): Promise<StoredManifest | null> {
  return newestManifest(client, name, (await manifestShares(client, name, owner)).own, signal);
}

/** Not the owner's: the line names the users who do have a set of that name (a wrong login?). */
function noArtifact(client: ApiClient, name: string, owner: string, others: string[]) {
  const also = others.length
    ? ` (${others.join(', ')} ${others.length === 1 ? 'has' : 'have'} one; only your own sets are used)`
    : '';
  return new NoArtifactError(`no artifact named ${name} of ${owner} on ${client.server}${also}`);
}

/** The owner's data shares of the set (another user's share of such a name is never used). */
async function ownDataShares(client: ApiClient, name: string, owner: string): Promise<Share[]> {
  return (await findShares(client, { name_prefix: dataPrefix(name) })).filter(
    (s) => s.owner_name === owner,
  );
}

/**
 * Before anything is written: every data share the manifest names exists and is the owner's. A
 * share of another user could be anything that user wants; a set is made of its owner's shares.
 */
async function checkDataShares(
  client: ApiClient,
  name: string,
  owner: string,
  files: ManifestFile[],
): Promise<Map<string, Share>> {
  const wanted = new Map<string, ManifestFile>();
  for (const f of files) if (f.share !== null && !wanted.has(f.share)) wanted.set(f.share, f);
  const found = new Map<string, Share>();
  if (wanted.size === 0) return found;
  const listed = new Map(
    (await findShares(client, { name_prefix: dataPrefix(name) })).map((s) => [s.share_id, s]),
  );
  for (const [id, f] of wanted) {
    // A share renamed since the push is not in the listing: asked for by its id.
    const share =
      listed.get(id) ??
      (await getFile(client, id).catch((err: unknown) => {
        if (err instanceof ApiError && err.status === 404) return null;
        throw err;
      }));
    if (!share)
      throw new DataGoneError(`the data of ${f.path} (share ${id}) is missing on the server`);
    if (share.owner_name !== owner)
      throw new ManifestError(
        `the data of ${f.path} (share ${id}) belongs to ${share.owner_name ?? 'no user'}, not to ${owner}; refusing the set`,
      );
    found.set(id, share);
  }
  return found;
}

/**
 * True when the share holds exactly this file's bytes, so it can be downloaded straight into the
 * file: a file of 1 MiB or more is a share of its own, and a share whose size the server says is
 * the file's. The first file of a pack is at offset 0 too, and may be the only one wanted.
 */
function wholeShare(f: ManifestFile, share: Share | undefined): boolean {
  if (f.offset !== 0) return false;
  const size = share?.size;
  return typeof size === 'number' ? size === f.size : f.size >= PACK_FILE_LIMIT;
}

/** A small share's content as text, through a verified download into a temporary file. */
async function readShareBytes(
  client: ApiClient,
  id: string,
  signal?: AbortSignal,
): Promise<Buffer> {
  const dir = await ownedTempDir('fshare-manifest-');
  try {
    const out = join(dir, 'manifest.json');
    await download(client, id, { output: out, overwrite: true, signal }).catch((err: unknown) => {
      throw aboutShare(err, `the manifest (share ${id})`);
    });
    return await readFile(out);
  } finally {
    await removeOwnedTempDir(dir);
  }
}

/**
 * A download's failure about bytes it fetched, said of what they were for: download() names its
 * `.part` file and says the bytes are kept there, but here that file is a temporary one, removed
 * before the line is read (`DIR/.fshare-tmp-….part`, `/tmp/fshare-manifest-…/manifest.json.part`).
 */
function aboutShare(err: unknown, what: string): unknown {
  if (!(err instanceof Error)) return err;
  err.message = err.message.replace(
    /; (\d+ bytes kept in .*, run again with --continue|they are kept in .*)$/,
    '',
  );
  if (/^the (downloaded bytes|server announced) /.test(err.message))
    err.message = `${what}: ${err.message}`;
  return err;
}

// --- push

interface LocalFile {
  path: string;
  abs: string;
  size: number;
  mode: number;
  mtimeMs: number;
  /** Changes with every write, even one that puts the mtime back (`touch -d`), as git knows. */
  ctimeMs: number;
  ino: number;
  /** When its stamp was read (before any of its bytes). */
  seenAt: number;
  sha256?: string;
}

/** What identifies a file's bytes without reading them. */
type FileStamp = Pick<LocalFile, 'size' | 'mtimeMs' | 'ctimeMs' | 'ino'>;

/**
 * Remembers the sha256 of local files by path, size, mtime, ctime and inode, so a push need not
 * hash. (Without the ctime, a file rewritten in place with its mtime put back kept its old hash:
 * the push said "unchanged" and the set kept the old bytes.)
 */
export interface HashCache {
  get(abs: string, stamp: FileStamp): string | undefined;
  set(abs: string, stamp: FileStamp & Pick<LocalFile, 'seenAt'>, sha256: string): void;
  save(): Promise<void>;
}

/** The coarsest tick of a file's times that fshare knows of (FAT's two seconds). */
const RACY_MS = 2000;

export function fileHashCache(file: string): HashCache {
  type Entry = [size: number, mtimeMs: number, ino: number, sha256: string, ctimeMs: number];
  let entries: Record<string, Entry> | undefined;
  let dirty = false;
  const load = () => {
    if (entries) return entries;
    try {
      // Read once, synchronously at first use; a damaged cache is just empty.
      entries = JSON.parse(readFileSyncSafe(file)) as Record<string, Entry>;
      if (!entries || typeof entries !== 'object') entries = {};
    } catch {
      entries = {};
    }
    return entries;
  };
  return {
    get(abs, f) {
      const e = load()[abs];
      const same =
        Array.isArray(e) &&
        e[0] === f.size &&
        e[1] === f.mtimeMs &&
        e[2] === f.ino &&
        e[4] === f.ctimeMs;
      return same && typeof e[3] === 'string' ? e[3] : undefined;
    },
    set(abs, f, sha256) {
      // Racily clean, as git says: a file changed within its stamp's tick of being seen could
      // change again, with the same size, after it was read, and keep its stamp (exFAT and FAT
      // count whole seconds, HFS+ and ext3 too). Found: on exFAT, a push right after a same-size
      // edit said "unchanged", 5 times in 5, and the set kept the old bytes. Such a file is
      // hashed again by the next push.
      if (f.seenAt - Math.max(f.mtimeMs, f.ctimeMs) < RACY_MS) return;
      load()[abs] = [f.size, f.mtimeMs, f.ino, sha256, f.ctimeMs];
      dirty = true;
    },
    async save() {
      if (!dirty || !entries) return;
      await makeDirs(dirname(file));
      // Named by its writer: a killed save's temp is swept by the next command (sweepConfigTemps).
      const tmp = ownedTempName(file);
      try {
        await writeFile(tmp, JSON.stringify(entries), { mode: 0o600 });
        await rename(tmp, file);
      } catch (err) {
        // A full or read-only disk: the half-written copy must not stay beside the cache.
        await rm(tmp, { force: true });
        throw err;
      }
      dirty = false;
    },
  };
}

function readFileSyncSafe(file: string): string {
  return readFileSync(file, 'utf8');
}

export interface PushOptions {
  name: string;
  /** The signed-in user: only their manifest and data shares of the set are read or replaced. */
  owner: string;
  include?: string[];
  exclude?: string[];
  /** Drop files of the stored set that are not in DIR (otherwise they are kept). */
  delete?: boolean;
  parallel?: number;
  chunkSize?: number;
  resume?: ResumeStore;
  hashCache?: HashCache;
  signal?: AbortSignal;
  onStart?: (files: number, bytes: number) => void;
  onProgress?: (files: number, bytes: number) => void;
  onNotice?: (line: string) => void;
}

export interface TransferCounts {
  files: number;
  bytes: number;
}

export interface PushResult {
  name: string;
  /** The manifest's share. */
  manifest_id: string;
  files: number;
  bytes: number;
  uploaded: TransferCounts;
  skipped: TransferCounts;
  deleted: { files: number };
  /** False when the stored manifest already described the folder: nothing was written. */
  changed: boolean;
}

/** Every regular file and every directory without files under `dir`, filtered by the globs. */
async function scanTree(
  dir: string,
  include: string[],
  exclude: string[],
  notice: (line: string) => void,
): Promise<{ files: LocalFile[]; dirs: string[] }> {
  // Loaded here, not at start-up: only a push or pull with globs needs it.
  const picomatch = include.length || exclude.length ? (await import('picomatch')).default : null;
  const inc = picomatch && include.length ? picomatch(include, { dot: true }) : () => true;
  const exc = picomatch && exclude.length ? picomatch(exclude, { dot: true }) : () => false;
  const files: LocalFile[] = [];
  const dirs: string[] = [];
  const walk = async (abs: string, rel: string): Promise<boolean> => {
    let any = false;
    const entries = await readdir(abs, { withFileTypes: true });
    entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    for (const e of entries) {
      const childRel = rel ? `${rel}/${e.name}` : e.name;
      const childAbs = join(abs, e.name);
      if (e.isDirectory()) {
        if (exc(childRel) || exc(`${childRel}/`)) continue;
        // Pull refuses such a name anywhere in a path: a folder of it would make the set one no
        // pull could write (found from outside: pushed, exit 0, then every pull refused it).
        if (pullOwnName(e.name)) {
          notice(`${childRel}/: a name fshare pull uses for its own files, skipped`);
          continue;
        }
        await checkLocalName(childAbs, childRel);
        const has = await walk(childAbs, childRel);
        if (!has && inc(childRel)) dirs.push(childRel);
        any = true;
      } else if (e.isFile()) {
        if (!inc(childRel) || exc(childRel)) continue;
        // What a killed pull left in the folder is no file of it (pushed, every later pull into a
        // folder would take it for its own leftover and remove it).
        if ((await pullTemp(childAbs, e.name)) !== 'no') {
          notice(`${childRel}: a temporary file of fshare pull, skipped`);
          continue;
        }
        if (isPullJournal(e.name)) {
          notice(`${childRel}: the journal of an interrupted fshare pull, skipped`);
          continue;
        }
        if (e.name === PULL_LOCK) {
          notice(`${childRel}: the lock file of fshare pull, skipped`);
          continue;
        }
        await checkLocalName(childAbs, childRel);
        const st = await stat(childAbs);
        files.push({
          path: childRel,
          abs: childAbs,
          size: st.size,
          mode: st.mode & 0o777,
          mtimeMs: st.mtimeMs,
          ctimeMs: st.ctimeMs,
          ino: st.ino,
          seenAt: Date.now(),
        });
        any = true;
      } else if (!exc(childRel)) {
        notice(
          `${childRel}: ${e.isSymbolicLink() ? 'a symbolic link' : 'not a regular file'}, skipped`,
        );
      }
    }
    return any;
  };
  await walk(dir, '');
  return { files, dirs };
}

/**
 * Refuses, before anything is uploaded, a name no pull could write: one with a backslash, one at
 * the top of the set that begins as a Windows drive does (`x:y.txt`), or one that is not UTF-8
 * (its decoded name, with U+FFFD, names no file). Stored, such a path made the manifest one that
 * every later pull and push refused.
 */
async function checkLocalName(abs: string, rel: string): Promise<void> {
  const fix = 'rename it or leave it out with --exclude';
  if (rel.includes('\\'))
    throw new ClientInputError(`${rel}: a name with a backslash cannot be in a set; ${fix}`);
  if (DRIVE.test(rel))
    throw new ClientInputError(
      `${rel}: a name that begins with a letter and a colon, as a Windows drive does, cannot be at the top of a set; ${fix}`,
    );
  if (rel.includes('\uFFFD') && (await lstat(abs).catch(() => null)) === null)
    throw new ClientInputError(`${rel}: a name that is not UTF-8 cannot be in a set; ${fix}`);
}

async function sha256Of(abs: string): Promise<string> {
  const hash = createHash('sha256');
  await pipeline(createReadStream(abs, { highWaterMark: 1024 * 1024 }), hash);
  return hash.digest('hex');
}

/** Where a file's bytes are: a data share and an offset. */
interface Place {
  share: string;
  offset: number;
}

/** How many times a push runs when another push of the set removed data this one's set uses. */
const PUSH_ATTEMPTS = 3;
/** How many times a push runs again on top of another's set that landed meanwhile. */
const SET_MERGES = 10;

/**
 * Each push deletes, once its manifest is written, the data the manifest it replaced used: with
 * two pushes of one set at once, the one that writes last can name data the other's clean-up
 * deleted (every pull of the set then failed, "the data of PATH is missing"). So a push checks,
 * after writing its manifest, that every data share it names is still there, and runs again (the
 * missing data goes up again) when one is not.
 */
export async function push(
  client: ApiClient,
  dir: string,
  options: PushOptions,
): Promise<PushResult> {
  for (let attempt = 1, merges = 0; ; attempt++) {
    let once;
    try {
      once = await pushOnce(client, dir, options);
    } catch (err) {
      if (!(err instanceof SetChangedError) || ++merges > SET_MERGES) throw err;
      options.onNotice?.(err.notice);
      attempt--;
      // Several pushes at once: apart, so that one of them gets through each round.
      await sleep(50 + Math.floor(Math.random() * 250 * merges));
      continue;
    }
    const { result, shares } = once;
    if (shares.size === 0) return result;
    const there = new Set(
      (await ownDataShares(client, result.name, options.owner))
        .filter((s) => s.initialized)
        .map((s) => s.share_id),
    );
    const lost = [...shares].filter((id) => !there.has(id));
    if (lost.length === 0) return result;
    if (attempt === PUSH_ATTEMPTS)
      throw new ManifestError(
        `the set ${result.name} names data another push of it deleted (share ${lost[0]}); push again`,
      );
    options.onNotice?.(
      `another push of ${result.name} deleted data this one's set uses; pushing again`,
    );
  }
}

async function pushOnce(
  client: ApiClient,
  dir: string,
  options: PushOptions,
): Promise<{ result: PushResult; shares: Set<string> }> {
  const name = checkArtifactName(options.name);
  const notice = options.onNotice ?? (() => undefined);
  const root = await realpath(dir).catch(() => {
    throw new ClientInputError(`no such directory: ${dir}`);
  });
  if (!(await stat(root)).isDirectory()) throw new ClientInputError(`not a directory: ${dir}`);
  const { files, dirs } = await scanTree(
    root,
    options.include ?? [],
    options.exclude ?? [],
    notice,
  );
  options.onStart?.(
    files.length,
    files.reduce((n, f) => n + f.size, 0),
  );

  // Hash what the cache does not know: large files on the hashing thread, small ones here, while
  // the stored manifest and the set's data shares are fetched. A large file goes up as soon as
  // its digest and the stored set are known; the small ones, packed, once all are hashed.
  const known = knownContent(client, name, options);
  known.catch(() => undefined);
  const work = await ownedTempDir('fshare-push-');
  try {
    const run: PushRun = {
      client,
      name,
      options,
      notice,
      known,
      work,
      tally: pushTally(options.onProgress),
      chunks: createChunkLimiter(options.parallel ?? 4),
      jobs: createLimiter(options.parallel ?? 4),
    };
    await settleAll('hashes and uploads', [
      ...files.filter((f) => f.size >= PACK_FILE_LIMIT).map((f) => pushLargeFile(run, f)),
      pushSmallFiles(run, files),
    ]);
    await options.hashCache?.save().catch(() => undefined);
    const { stored, data, places } = await known;
    const present = new Set(data.filter((s) => s.initialized).map((s) => s.share_id));
    const { manifest, deleted } = await nextManifest(name, files, dirs, places, stored, {
      ...options,
      present,
      notice,
    });
    const same =
      stored !== null &&
      JSON.stringify(stored.manifest.files) === JSON.stringify(manifest.files) &&
      JSON.stringify(stored.manifest.dirs) === JSON.stringify(manifest.dirs);
    const manifestId = same ? stored.share.share_id : await publishManifest(run, manifest, data);
    const result: PushResult = {
      name,
      manifest_id: manifestId,
      files: manifest.files.length,
      bytes: manifest.files.reduce((n, e) => n + e.size, 0),
      uploaded: run.tally.uploaded,
      skipped: run.tally.skipped,
      deleted: { files: deleted },
      changed: !same,
    };
    // An unchanged set wrote nothing: what it names was there when it was read.
    return { result, shares: same ? new Set() : referencedShares(manifest) };
  } finally {
    await removeOwnedTempDir(work);
  }
}

/** The data shares a manifest names. */
function referencedShares(manifest: Manifest): Set<string> {
  return new Set(manifest.files.map((f) => f.share).filter((id): id is string => id !== null));
}

/** What the server holds of the set before this push: its manifest, data shares and places. */
interface Known {
  stored: StoredManifest | null;
  data: Share[];
  /** sha256 → where those bytes are (or will be, once this push's upload of them is done). */
  places: Map<string, Promise<Place>>;
  /** sha256 → a whole data share with exactly those bytes. */
  bySha: Map<string, Share>;
}

/** One push under way: what its steps share. */
interface PushRun {
  client: ApiClient;
  name: string;
  options: PushOptions;
  notice: (line: string) => void;
  known: Promise<Known>;
  /** This push's own temporary directory (packs, the manifest). */
  work: string;
  tally: ReturnType<typeof pushTally>;
  /** Chunk requests in flight, and uploads in flight, across the whole push. */
  chunks: Limiter;
  jobs: Limiter;
}

/**
 * Content already on the server: every place the old manifest names, and whole data shares (of
 * this push's earlier, interrupted run too) by their sha256.
 */
async function knownContent(client: ApiClient, name: string, options: PushOptions) {
  const [stored, data] = await Promise.all([
    readManifest(client, name, options.owner, options.signal),
    ownDataShares(client, name, options.owner),
  ]);
  const places = new Map<string, Promise<Place>>();
  const shareIds = new Set(data.map((s) => s.share_id));
  for (const f of stored?.manifest.files ?? [])
    if (f.share !== null && shareIds.has(f.share))
      places.set(f.sha256, Promise.resolve({ share: f.share, offset: f.offset }));
  const bySha = new Map<string, Share>();
  for (const s of data) {
    const sha = s.file_name.slice(dataPrefix(name).length);
    if (s.initialized && s.sha256 === sha) bySha.set(sha, s);
  }
  for (const [sha, s] of bySha)
    if (!places.has(sha)) places.set(sha, Promise.resolve({ share: s.share_id, offset: 0 }));
  return { stored, data, places, bySha } satisfies Known;
}

/** Files and bytes uploaded and skipped, reported as each file is settled. */
function pushTally(onProgress: PushOptions['onProgress']) {
  let doneFiles = 0;
  let doneBytes = 0;
  const uploaded: TransferCounts = { files: 0, bytes: 0 };
  const skipped: TransferCounts = { files: 0, bytes: 0 };
  const count = (into: TransferCounts, f: LocalFile) => {
    into.files++;
    into.bytes += f.size;
    doneFiles += 1;
    doneBytes += f.size;
    onProgress?.(doneFiles, doneBytes);
  };
  return { uploaded, skipped, count };
}

/** A large file: hashed on the hashing thread, and its own data share unless the set has it. */
async function pushLargeFile(run: PushRun, f: LocalFile): Promise<void> {
  const { options, tally } = run;
  const cached = options.hashCache?.get(f.abs, f);
  f.sha256 =
    cached ??
    (await hashFile(f.abs, 0, f.size).catch((err: unknown) => {
      throw goneWhilePushed(err, f);
    }));
  if (!cached) options.hashCache?.set(f.abs, f, f.sha256);
  const { places: at } = await run.known;
  const sha = f.sha256;
  const there = at.get(sha);
  if (there) {
    await there;
    return tally.count(tally.skipped, f);
  }
  const place = run.jobs(async () => {
    const r = await uploadFile(run.client, f.abs, {
      name: `${dataPrefix(run.name)}${sha}`,
      limiter: run.chunks,
      chunkSize: options.chunkSize,
      resume: options.resume,
      knownSha256: sha,
      signal: options.signal,
      onNotice: (line) => run.notice(line),
    }).catch(async (err: unknown) => {
      // The server refused bytes that are not the sha256 hashed before (422), or the upload saw
      // the file change under it: a file written meanwhile says so in the push's words.
      if (
        err instanceof FileChangedError ||
        (err instanceof ApiError && err.status === 422 && (await changedSinceScan(f)))
      )
        throw new VerificationError(`${f.path} changed while it was pushed; push again`, {
          cause: err,
        });
      throw err;
    });
    if (r.sha256 !== sha)
      throw new VerificationError(`${f.path} changed while it was pushed; push again`);
    return { share: r.share_id, offset: 0 };
  });
  at.set(sha, place);
  await place;
  tally.count(tally.uploaded, f);
}

/** A pack being filled: small files' bytes, one after another, in a file of this push's own. */
interface Pack {
  handle: FileHandle;
  file: string;
  hash: ReturnType<typeof createHash>;
  bytes: number;
  members: { sha: string; offset: number }[];
}

/**
 * Small files, one read each, in the walk's (sorted) order: hashed, and what the set lacks
 * appended to a pack at once; a full pack goes up while the next fills. The same folder makes
 * the same packs again, so an interrupted push finds them by their sha256.
 */
async function pushSmallFiles(run: PushRun, files: LocalFile[]): Promise<void> {
  const { options, tally } = run;
  const { places: at } = await run.known;
  const packJobs: Promise<unknown>[] = [];
  /** sha256 → the files of this push with those bytes, waiting for their pack. */
  const waiting = new Map<string, LocalFile[]>();
  let pack: Pack | null = null;
  try {
    for (const f of files) {
      if (f.size >= PACK_FILE_LIMIT) continue;
      const cached = options.hashCache?.get(f.abs, f);
      if (f.size === 0 || (cached && at.has(cached))) {
        f.sha256 = f.size === 0 ? EMPTY_SHA256 : cached;
        tally.count(tally.skipped, f);
        continue;
      }
      const bytes = await readFile(f.abs).catch((err: unknown) => {
        throw goneWhilePushed(err, f);
      });
      if (bytes.length !== f.size)
        throw new VerificationError(`${f.path} changed while it was pushed; push again`);
      const sha = createHash('sha256').update(bytes).digest('hex');
      f.sha256 = sha;
      if (sha !== cached) options.hashCache?.set(f.abs, f, sha);
      const twins = waiting.get(sha);
      if (twins) twins.push(f);
      else if (at.has(sha)) tally.count(tally.skipped, f);
      else {
        if (pack && pack.bytes + bytes.length > PACK_BYTES) {
          packJobs.push(sealPack(run, pack, waiting));
          pack = null;
        }
        pack ??= await openPack(run.work);
        await writeFully(pack.handle, bytes, pack.bytes);
        pack.hash.update(bytes);
        pack.members.push({ sha, offset: pack.bytes });
        pack.bytes += bytes.length;
        waiting.set(sha, [f]);
      }
    }
    if (pack) packJobs.push(sealPack(run, pack, waiting));
    pack = null;
  } catch (err) {
    // The pack being filled is closed and the packs already going up are over before the push's
    // directory is removed (its descriptor, left to the garbage collector, printed Node warnings).
    await pack?.handle.close().catch(() => undefined);
    await Promise.allSettled(packJobs);
    throw err;
  }
  await settleAll('packs', packJobs);
}

/** Whether a file of the scan is no longer as the scan found it (or is gone). */
async function changedSinceScan(f: LocalFile): Promise<boolean> {
  const now = await stat(f.abs).catch(() => null);
  return (
    !now ||
    now.size !== f.size ||
    now.mtimeMs !== f.mtimeMs ||
    now.ctimeMs !== f.ctimeMs ||
    now.ino !== f.ino
  );
}

/** A file of the scan that is no longer there changed while it was pushed: exit 7, push again. */
function goneWhilePushed(err: unknown, f: LocalFile): unknown {
  if ((err as NodeJS.ErrnoException | null)?.code !== 'ENOENT') return err;
  return new VerificationError(`${f.path} was removed while it was pushed; push again`);
}

async function openPack(work: string): Promise<Pack> {
  const file = join(work, `${randomBytes(8).toString('hex')}.pack`);
  return {
    handle: await open(file, 'wx', 0o600),
    file,
    hash: createHash('sha256'),
    bytes: 0,
    members: [],
  };
}

/** Uploads a full pack (unless the set holds one with its bytes) and places its members. */
function sealPack(run: PushRun, p: Pack, waiting: Map<string, LocalFile[]>): Promise<void> {
  const { tally } = run;
  return run.jobs(async () => {
    await p.handle.close();
    const { places: at, bySha: whole } = await run.known;
    const sha = p.hash.digest('hex');
    const shareId =
      whole.get(sha)?.share_id ??
      (
        await uploadFile(run.client, p.file, {
          name: `${dataPrefix(run.name)}${sha}`,
          limiter: run.chunks,
          chunkSize: run.options.chunkSize,
          knownSha256: sha,
          signal: run.options.signal,
        })
      ).share_id;
    await rm(p.file, { force: true });
    for (const m of p.members) {
      at.set(m.sha, Promise.resolve({ share: shareId, offset: m.offset }));
      for (const f of waiting.get(m.sha) ?? []) tally.count(tally.uploaded, f);
    }
  });
}

/** The directories a relative path is in: `a/b/c` → `a`, `a/b`. */
function parentsOf(path: string): string[] {
  const parts = path.split('/');
  return parts.slice(1).map((_, i) => parts.slice(0, i + 1).join('/'));
}

/**
 * The manifest this push makes: the folder's files where their bytes now are, and (without
 * --delete) the stored set's files and empty directories the folder lacks; `deleted` counts
 * those --delete drops.
 */
async function nextManifest(
  name: string,
  files: LocalFile[],
  dirs: string[],
  places: Map<string, Promise<Place>>,
  stored: StoredManifest | null,
  options: PushOptions & {
    /** The set's data shares on the server when the push began. */
    present: Set<string>;
    notice: (line: string) => void;
  },
): Promise<{ manifest: Manifest; deleted: number }> {
  const resolved = new Map<string, Place>();
  for (const [sha, place] of places) resolved.set(sha, await place);
  const entries: ManifestFile[] = files.map((f) => {
    const place = f.size === 0 ? null : resolved.get(f.sha256!)!;
    return {
      path: f.path,
      size: f.size,
      mode: f.mode,
      sha256: f.sha256!,
      share: place ? place.share : null,
      offset: place ? place.offset : 0,
    };
  });
  let deleted = 0;
  const local = new Set(files.map((f) => f.path));
  // The folder's directories: a kept file of the stored set may not be one of them, nor be under
  // one of the folder's files (a directory that became a file, or the other way round): such a
  // manifest lists a path as a file and as a directory, and no pull or push could read it again.
  const localDirs = new Set(dirs);
  for (const p of [...local, ...dirs]) for (const d of parentsOf(p)) localDirs.add(d);
  const underAFile = (p: string) => local.has(p) || parentsOf(p).some((d) => local.has(d));
  const keptDirs = new Set(dirs);
  if (stored) {
    for (const f of stored.manifest.files) {
      if (local.has(f.path)) continue;
      if (options.delete || localDirs.has(f.path) || underAFile(f.path)) deleted++;
      else if (f.share !== null && !options.present.has(f.share)) {
        // Kept, it would make a set no pull can finish: its bytes are nowhere.
        options.notice(
          `${f.path}: its data (share ${f.share}) is no longer on the server and it is not in the folder; dropped from the set`,
        );
        deleted++;
      } else entries.push(f);
    }
    if (!options.delete) for (const d of stored.manifest.dirs) if (!underAFile(d)) keptDirs.add(d);
  }
  entries.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
  // A kept directory that now holds a file is no longer an empty one.
  const fileParents = new Set<string>();
  for (const e of entries) {
    const parts = e.path.split('/');
    for (let i = 1; i < parts.length; i++) fileParents.add(parts.slice(0, i).join('/'));
  }
  const manifest: Manifest = {
    format: FORMAT,
    name,
    created: new Date().toISOString(),
    files: entries,
    dirs: [...keptDirs].filter((d) => !fileParents.has(d) && !local.has(d)).sort(),
  };
  return { manifest, deleted };
}

/**
 * Writes the new manifest, the last step and the one that makes the new set visible (old
 * manifest or new, whole), then removes what the set no longer uses. Returns its share.
 */
async function publishManifest(run: PushRun, manifest: Manifest, data: Share[]): Promise<string> {
  const { client, name, options } = run;
  const { stored } = await run.known;
  const file = join(run.work, 'manifest.json');
  await writeFile(file, `${JSON.stringify(manifest)}\n`);
  let manifestId: string;
  if (stored) {
    // Only over the manifest this set was made from: another push's, landed meanwhile, is
    // merged with on the next run instead of being overwritten (its files would be lost). A
    // set removed meanwhile (404) is made anew by the next run.
    await replaceFile(client, stored.share.share_id, file, {
      signal: options.signal,
      ifMatch: `"${stored.sha256}"`,
    }).catch((err: unknown) => {
      if (err instanceof ApiError && err.status === 412) throw new SetChangedError(name);
      if (err instanceof ApiError && err.status === 404)
        throw new SetChangedError(name, `the set ${name} was removed meanwhile; pushing it anew`);
      throw err;
    });
    manifestId = stored.share.share_id;
  } else {
    const create = (createKey: string | undefined) =>
      uploadFile(client, file, {
        name: manifestName(name),
        signal: options.signal,
        createKey,
      });
    // The set's key: two first pushes of it at once make one manifest share (fshare serve), not
    // two that each push's clean-up would delete. The one that gives it content first made the
    // set; the other is told 423 and runs again on top of it. The share that key made was
    // handed to another user (409): a share of a key of its own, as before.
    const made = await create(manifestName(name))
      .catch((err: unknown) => {
        if (err instanceof ApiError && err.status === 409) return create(undefined);
        throw err;
      })
      .catch((err: unknown) => {
        if (err instanceof ApiError && err.status === 423) throw new SetChangedError(name);
        throw err;
      });
    manifestId = made.share_id;
  }
  await collectGarbage(client, name, options.owner, manifest, stored, data, manifestId, run.notice);
  return manifestId;
}

/** Another push of the set replaced its manifest after this one read it: run again, merging. */
class SetChangedError extends Error {
  constructor(
    set: string,
    readonly notice = `another push of ${set} changed the set meanwhile; pushing again on top of it`,
  ) {
    super(notice);
  }
}

/**
 * After the new manifest is in place: deletes the data shares the old manifest used and the new
 * one does not, the owner's older duplicate manifests, and data shares no manifest names that an
 * interrupted push left more than a day ago. A failure here loses nothing: it is only said.
 */
async function collectGarbage(
  client: ApiClient,
  name: string,
  owner: string,
  manifest: Manifest,
  stored: StoredManifest | null,
  data: Share[],
  manifestId: string,
  notice: (line: string) => void,
): Promise<void> {
  const used = new Set(manifest.files.map((f) => f.share).filter((s): s is string => s !== null));
  const before = new Set(
    (stored?.manifest.files ?? []).map((f) => f.share).filter((s): s is string => s !== null),
  );
  const now = Date.now();
  const doomed = data.filter(
    (s) =>
      !used.has(s.share_id) &&
      (before.has(s.share_id) ||
        now - Date.parse(`${s.create_date.replace(/Z$/, '')}Z`) > ORPHAN_AGE_MS),
  );
  // Only the owner's: another user's set of the same name is theirs (an ADMIN could delete it).
  const older = (await manifestShares(client, name, owner)).own.filter(
    (s) => s.share_id !== manifestId,
  );
  for (const s of [...doomed, ...older])
    await deleteFile(client, s.share_id).catch((err: unknown) =>
      notice(`could not delete the unused share ${s.share_id}: ${(err as Error).message}`),
    );
}

// --- pull

export interface PullOptions {
  /** The signed-in user: only their manifest, pointing only at their data shares, is used. */
  owner: string;
  /** Remove files under DIR that the set does not have. */
  delete?: boolean;
  parallel?: number;
  signal?: AbortSignal;
  onStart?: (files: number, bytes: number) => void;
  onProgress?: (files: number, bytes: number) => void;
  onNotice?: (line: string) => void;
}

export interface PullResult {
  name: string;
  manifest_id: string;
  dir: string;
  files: number;
  bytes: number;
  downloaded: TransferCounts;
  skipped: TransferCounts;
  deleted: { files: number };
}

/**
 * For a file named `name` in a pulled tree: 'no' when it is not a pull's temporary file (the
 * user's), 'live' when a running pull (this one or another) may still write it or the journal
 * of a killed commit names it, 'stale' when no live process owns it: a pull killed on the way
 * left it, and nothing will ever finish it. An
 * older fshare's temporary name says no owner: stale once untouched for a day.
 */
async function pullTemp(abs: string, name: string): Promise<'no' | 'live' | 'stale'> {
  if (!name.startsWith(TEMP)) return 'no';
  const rest = name.slice(TEMP.length);
  const owned = TEMP_OWNED.exec(rest);
  if (owned) {
    if (owned[2] !== HOST_TAG || processAlive(Number(owned[1]))) return 'live';
    // Named by the journal of a commit that was killed: the next pull into its DIR needs it.
    return (await journalWaits(dirname(abs), `${owned[1]}-${owned[2]}`)) ? 'live' : 'stale';
  }
  if (!TEMP_OLD.test(rest)) return 'no';
  const st = await lstat(abs).catch(() => null);
  return st?.isFile() && Date.now() - st.mtimeMs > ORPHAN_AGE_MS ? 'stale' : 'live';
}

/** Removes the stale temporary files of killed pulls from the directories of a set. */
async function sweepTemps(dirs: Iterable<string>): Promise<void> {
  for (const dir of dirs) {
    const names = await readdir(dir).catch(() => [] as string[]);
    for (const name of names)
      if ((await pullTemp(join(dir, name), name)) === 'stale')
        await rm(join(dir, name), { force: true });
  }
}

/**
 * Checks the directories of `rel` under `root` (nothing is made here: the commit makes what is
 * missing), refusing to pass through a symbolic link (one planted in DIR would lead the write
 * elsewhere). Each real directory found goes into `known`; a file (not a link) on the way goes
 * into `inTheWay` (pull --delete replaces it), and the check stops there, as at a missing one.
 */
async function checkParents(
  root: string,
  rel: string,
  known: Set<string>,
  inTheWay: Set<string>,
): Promise<void> {
  let at = root;
  for (const part of rel.split('/').slice(0, -1)) {
    at = join(at, part);
    if (known.has(at)) continue;
    const st = await lstat(at).catch((err: NodeJS.ErrnoException) => {
      if (err.code === 'ENOENT') return null;
      throw err;
    });
    if (st === null) return;
    if (st.isSymbolicLink())
      throw new ManifestError(
        `${relative(root, at)} is a symbolic link; refusing to write through it`,
      );
    if (!st.isDirectory()) {
      inTheWay.add(at);
      return;
    }
    known.add(at);
  }
}

/** The files (of any kind but directories) at or under `abs`, never following a link. */
async function countFiles(abs: string): Promise<number> {
  if (!(await lstat(abs)).isDirectory()) return 1;
  let n = 0;
  for (const e of await readdir(abs, { withFileTypes: true }))
    n += e.isDirectory() ? await countFiles(join(abs, e.name)) : 1;
  return n;
}

/**
 * What a pull has ready for its commit (pull-commit.ts): each verified temporary file (its mode
 * set) and the file of the set it becomes, and the files already there whose mode changes. Until
 * the commit, nothing in DIR that a user sees as a file of the set changes.
 */
class Staging {
  /** Temporary file → its file of the set (absolute paths). */
  readonly renames = new Map<string, string>();
  /** A file already there with the set's bytes → the mode it gets. */
  readonly modes = new Map<string, number>();

  /** A failed pull: every temporary file goes, DIR stays as it was. */
  async discard(): Promise<void> {
    for (const tmp of this.renames.keys()) await drop(tmp);
    this.renames.clear();
    this.modes.clear();
  }
}

/**
 * True when a regular file (not a link) with this size and sha256 is already at `abs`; its mode,
 * if it differs, is set by the commit. A file with other names (hard links: a cache restored with
 * `cp -al`, say) shares its mode with them, outside DIR too: that one is not changed, the name in
 * DIR becomes a copy of its own with the mode (renamed by the commit).
 */
async function alreadyThere(abs: string, f: ManifestFile, staging: Staging): Promise<boolean> {
  const st = await lstat(abs).catch(() => null);
  if (!st || !st.isFile() || st.size !== f.size) return false;
  if ((st.mode & 0o777) !== f.mode && st.nlink > 1) return ownCopy(abs, f, staging);
  if ((await sha256Of(abs)) !== f.sha256) return false;
  if ((st.mode & 0o777) !== f.mode) staging.modes.set(abs, f.mode);
  return true;
}

/** Stages a copy of `abs` with the manifest's mode to replace it, if the copy has its sha256. */
async function ownCopy(abs: string, f: ManifestFile, staging: Staging): Promise<boolean> {
  const tmp = tempIn(dirname(abs));
  try {
    await copyFile(abs, tmp, fsConstants.COPYFILE_EXCL);
    if ((await sha256Of(tmp)) !== f.sha256) {
      await drop(tmp);
      return false;
    }
    await verified(tmp, f, f.sha256);
    staging.renames.set(tmp, abs);
    return true;
  } catch (err) {
    await drop(tmp);
    throw err;
  }
}

/**
 * A new temporary file's name in `dir` (beside its file, or the deepest directory of its place
 * that DIR has: same file system); it (and the `.part` download() may write) is removed on a
 * signal that ends fshare until `settled` says it was renamed or removed (Ctrl-C left them).
 */
function tempIn(dir: string): string {
  const tmp = join(dir, `${TEMP}${process.pid}-${HOST_TAG}-${randomBytes(6).toString('hex')}`);
  trackTempFiles(tmp, partPathOf(tmp));
  return tmp;
}

const settled = (tmp: string) => untrackTempFiles(tmp, partPathOf(tmp));

async function drop(tmp: string): Promise<void> {
  await rm(tmp, { force: true });
  settled(tmp);
}

/**
 * A failure about a pull's temporary file names the file of the set it was for (`temps`: each
 * temporary path and its file), or `fallback` when it names none (a write through a descriptor):
 * `DIR/.fshare-tmp-…` is nothing the user knows, and is gone by the time the line is read.
 */
function namingTarget(err: unknown, temps: Map<string, string>, fallback?: string): unknown {
  const e = err as { code?: unknown; path?: string; dest?: string } | null;
  if (!e || typeof e !== 'object' || typeof e.code !== 'string') return err;
  const path = e.path === undefined ? fallback : temps.get(e.path);
  if (path !== undefined) {
    e.path = path;
    e.dest = undefined;
  } else if (e.dest !== undefined && temps.has(e.dest)) e.dest = temps.get(e.dest);
  return err;
}

/** A temporary file ready for the commit: its bytes verified, then its mode. */
async function verified(tmp: string, f: ManifestFile, got: string) {
  if (got !== f.sha256)
    throw new VerificationError(
      `${f.path}: sha256 ${got} does not match the manifest's ${f.sha256}`,
    );
  await chmod(tmp, f.mode);
}

async function emptyFile(
  f: ManifestFile,
  home: string,
  target: string,
  staging: Staging,
): Promise<void> {
  const tmp = tempIn(home);
  try {
    await writeFile(tmp, '', { flag: 'wx', mode: 0o600 });
    await verified(tmp, f, EMPTY_SHA256);
    staging.renames.set(tmp, target);
  } catch (err) {
    await drop(tmp);
    throw namingTarget(err, new Map([[tmp, target]]));
  }
}

/** A file that is a share of its own: a verified download into a temporary file, staged. */
async function downloadInto(
  client: ApiClient,
  share: string,
  f: ManifestFile,
  place: { home: string; target: string },
  staging: Staging,
  signal?: AbortSignal,
): Promise<void> {
  const { home, target } = place;
  const tmp = tempIn(home);
  const part = partPathOf(tmp);
  try {
    const r = await download(client, share, { output: tmp, overwrite: true, signal });
    await verified(tmp, f, r.sha256 ?? '');
    staging.renames.set(tmp, target);
  } catch (err) {
    await drop(tmp);
    await rm(part, { force: true });
    throw namingTarget(
      aboutShare(err, `the data of ${f.path} (share ${share})`),
      new Map([
        [tmp, target],
        [part, target],
      ]),
      target,
    );
  }
}

/**
 * The bytes of a pack, as they stream in, into the files wanted from it: each range into a
 * temporary file, hashed, verified, given its mode and staged for the commit once complete.
 * Ranges no one wants are passed over; a range several paths share (identical files) is written
 * once and copied.
 */
class PackSplitter extends Writable {
  private readonly ranges: { start: number; end: number; files: ManifestFile[] }[];
  private at = 0;
  private next = 0;
  private open: { fd: number; tmp: string; hash: ReturnType<typeof createHash> } | null = null;
  /** Each temporary file still on disk and not yet staged, and the file it is for. */
  private readonly temps = new Map<string, string>();
  private failure: Error | undefined;

  constructor(
    wanted: ManifestFile[],
    private readonly targets: Map<ManifestFile, string>,
    private readonly homes: Map<ManifestFile, string>,
    private readonly staging: Staging,
    private readonly placed: (f: ManifestFile) => void,
  ) {
    super();
    const byRange = new Map<string, ManifestFile[]>();
    for (const f of wanted) {
      const key = `${f.offset}:${f.size}`;
      byRange.set(key, [...(byRange.get(key) ?? []), f]);
    }
    this.ranges = [...byRange.values()]
      .map((files) => ({ start: files[0]!.offset, end: files[0]!.offset + files[0]!.size, files }))
      .sort((a, b) => a.start - b.start);
  }

  override _write(chunk: Buffer, _enc: BufferEncoding, cb: (err?: Error | null) => void): void {
    // After a failure the rest is read and dropped: the stream itself never errors (the download
    // writing into it would wait for a drain that never comes); finish() reports it.
    if (this.failure) return cb();
    try {
      let pos = 0;
      while (pos < chunk.length && this.next < this.ranges.length) {
        const range = this.ranges[this.next]!;
        const here = this.at + pos;
        if (here < range.start) {
          pos += Math.min(chunk.length - pos, range.start - here);
          continue;
        }
        if (!this.open) {
          const first = range.files[0]!;
          const tmp = tempIn(this.homes.get(first)!);
          this.temps.set(tmp, this.targets.get(first)!);
          this.open = { fd: openSync(tmp, 'wx', 0o600), tmp, hash: createHash('sha256') };
        }
        const take = Math.min(chunk.length - pos, range.end - here);
        const piece = chunk.subarray(pos, pos + take);
        this.open.hash.update(piece);
        for (let w = 0; w < piece.length;) w += writeSync(this.open.fd, piece, w);
        pos += take;
        if (this.at + pos === range.end) {
          const { fd, tmp, hash } = this.open;
          this.open = null;
          this.next++;
          this.place(range.files, fd, tmp, hash.digest('hex'));
        }
      }
      this.at += chunk.length;
      cb();
    } catch (err) {
      const range = this.ranges[Math.min(this.next, this.ranges.length - 1)];
      const fallback = range ? this.targets.get(range.files[0]!) : undefined;
      this.failure = namingTarget(err, this.temps, fallback) as Error;
      cb();
    }
  }

  /**
   * A complete range: verified, then its file (and copies for the other paths of the same bytes)
   * given its mode and staged, synchronously: thousands of small files cost a few system calls
   * each, not a chain of promises.
   */
  private place(files: ManifestFile[], fd: number, tmp: string, got: string): void {
    try {
      if (got !== files[0]!.sha256)
        throw new VerificationError(
          `${files[0]!.path}: sha256 ${got} does not match the manifest's ${files[0]!.sha256}`,
        );
      fchmodSync(fd, files[0]!.mode);
    } finally {
      closeSync(fd);
    }
    for (const f of files.slice(1)) {
      const target = this.targets.get(f)!;
      const copy = tempIn(this.homes.get(f)!);
      this.temps.set(copy, target);
      copyFileSync(tmp, copy);
      chmodSync(copy, f.mode);
      this.staging.renames.set(copy, target);
      this.temps.delete(copy);
      this.placed(f);
    }
    this.staging.renames.set(tmp, this.targets.get(files[0]!)!);
    this.temps.delete(tmp);
    this.placed(files[0]!);
  }

  /** After the download: every wanted file staged, or the first failure. */
  async finish(): Promise<void> {
    if (this.failure) throw this.failure;
    if (this.next < this.ranges.length)
      throw new VerificationError(
        `${this.ranges[this.next]!.files[0]!.path}: the data share ended before its bytes`,
      );
  }

  /** A failed download: its temporary files not yet staged go (the staged ones with the pull). */
  async abandon(): Promise<void> {
    if (this.open) closeSync(this.open.fd);
    this.open = null;
    for (const tmp of this.temps.keys()) await drop(tmp);
    this.temps.clear();
  }
}

/** A data share the manifest names is not on the server (a push may have replaced the set). */
class DataGoneError extends ManifestError {}

/** How many times a pull starts over when a push replaced the set under it. */
const PULL_ATTEMPTS = 3;

/**
 * A push that replaces the set deletes the data only the old manifest used, so a pull reading
 * the old one finds its data gone halfway: when the stored manifest is no longer the one it read,
 * the pull starts over with the new one (DIR is still as it was: nothing is put in place before
 * every file is verified). Before anything, a commit of an earlier pull into DIR that was killed
 * halfway is finished.
 */
export async function pull(
  client: ApiClient,
  name: string,
  dir: string,
  options: PullOptions,
): Promise<PullResult> {
  checkArtifactName(name);
  const notice = (line: string) => options.onNotice?.(line);
  const lock = new PullLock();
  try {
    const there = await realpath(dir).catch(() => null);
    if (there !== null) await lock.take(there, notice);
    await finishInterruptedPulls(dir, safeRelativePath, notice, lock.held);
    for (let attempt = 1; ; attempt++) {
      let read: StoredManifest | undefined;
      try {
        return await pullOnce(client, name, dir, options, lock, (m) => (read = m));
      } catch (err) {
        if (!(err instanceof DataGoneError) || !read || attempt === PULL_ATTEMPTS) throw err;
        const now = await readManifest(client, name, options.owner, options.signal);
        if (!now || JSON.stringify(now.manifest) === JSON.stringify(read.manifest)) throw err;
        notice(`${name} was replaced while it was pulled; pulling the new set`);
      }
    }
  } finally {
    await lock.release();
  }
}

/** Where a pull puts each file: its place, and the directory its temporary file goes in. */
interface PullPlan {
  root: string;
  targets: Map<ManifestFile, string>;
  /**
   * The deepest directory of each file's place that DIR already has: its own directory, or one
   * higher up when a directory of the set is still to be made (or a file in the way of one still
   * stands): made (removed) only by the commit, on the same file system.
   */
  homes: Map<ManifestFile, string>;
  /** What is in the way of the set (--delete): path → whether it is a directory. */
  inTheWay: Map<string, boolean>;
  /** The directories DIR has on the way to the set's paths (checked: real directories). */
  dirsThere: Set<string>;
}

/**
 * Every path is checked before anything is written. What DIR has where the set has something of
 * the other kind (a file where a directory goes, a directory where a file goes: the set changed
 * shape) is refused here, or with --delete left for the commit to remove.
 */
async function planPull(root: string, manifest: Manifest, options: PullOptions): Promise<PullPlan> {
  const targets = new Map<ManifestFile, string>();
  const checked = new Set<string>();
  const inTheWay = new Map<string, boolean>();
  const clash = (rel: string, what: string) =>
    new ManifestError(
      `${rel} is ${what} in ${root}, where the set has ${what === 'a directory' ? 'a file' : 'a directory'}; nothing written (pull with --delete to replace it)`,
    );
  const checkParent = async (rel: string) => {
    const found = new Set<string>();
    await checkParents(root, rel, checked, found);
    for (const file of found) {
      if (!options.delete) throw clash(relative(root, file), 'a file');
      inTheWay.set(file, false);
    }
  };
  for (const f of manifest.files) {
    const target = join(root, ...f.path.split('/'));
    targets.set(f, target);
    await checkParent(f.path);
    // A name too long for this file system fails here, before anything is written.
    const there = await lstat(target).catch((err: NodeJS.ErrnoException) => {
      if (err.code === 'ENOENT' || err.code === 'ENOTDIR') return null;
      throw err;
    });
    if (there?.isDirectory()) {
      if (!options.delete) throw clash(f.path, 'a directory');
      inTheWay.set(target, true);
    }
  }
  for (const d of manifest.dirs) await checkParent(`${d}/x`);
  await checkNames(root, manifest);
  const homes = new Map<ManifestFile, string>();
  for (const f of manifest.files) {
    const parents = parentsOf(f.path).map((p) => join(root, ...p.split('/')));
    homes.set(f, parents.reverse().find((p) => checked.has(p)) ?? root);
  }
  return { root, targets, homes, inTheWay, dirsThere: checked };
}

/**
 * Found from outside, pulling into exFAT (a USB drive; macOS and Windows file systems do the
 * same): a set holding A.txt and a.txt was written into one file, "4 files", exit 0, and the next
 * pull found both "already there"; a set holding sub/x:y.txt stopped halfway through putting its
 * files in place (":" is no character of a name there), DIR a mix of two versions, and every
 * later pull stopped at the same rename. Names of the set that DIR's file system cannot hold
 * apart are refused before anything is written.
 */
async function checkNames(root: string, manifest: Manifest): Promise<void> {
  const probe = new NameProbe(root);
  const paths = [...manifest.files.map((f) => f.path), ...manifest.dirs];
  const unusual = new Set<string>();
  for (const path of paths) for (const char of path.replace(PLAIN_CHARS, '')) unusual.add(char);
  const refused = await probe.refusedOf([...unusual]);
  for (const path of paths) {
    const char = [...path].find((c) => refused.has(c));
    if (char !== undefined)
      throw new ManifestError(
        `${path}: the file system of ${root} does not take ${JSON.stringify(char)} in a name: ` +
          `nothing written; pull into a directory on a file system that does`,
      );
  }
  // Two files that are one name lose one of them; a file and a directory that are one name
  // stop the commit halfway (found: docs and Docs/x). Two directories just merge: each file of
  // both is there, under its own name.
  const dirs = new Set(manifest.dirs);
  for (const f of manifest.files) for (const d of parentsOf(f.path)) dirs.add(d);
  const entries = [
    ...manifest.files.map((f) => ({ path: f.path, file: true })),
    ...[...dirs].map((path) => ({ path, file: false })),
  ];
  const byKey = new Map<string, { path: string; file: boolean }>();
  for (const entry of entries) {
    const key = foldName(entry.path);
    const first = byKey.get(key);
    if (first === undefined) byKey.set(key, entry);
    else if ((first.file || entry.file) && (await probe.oneName(first.path, entry.path)))
      throw new ManifestError(
        `the set holds ${first.path} and ${entry.path}, which are one name on the file system ` +
          `of ${root} (it does not tell case or Unicode forms apart): nothing written; pull ` +
          `into a directory on a file system that does`,
      );
  }
}

/** Paths that a file system folding case or Unicode form takes for one have one fold. */
const foldName = (path: string) => path.normalize('NFC').toLowerCase();

/** Characters every file system fshare knows takes in a name (and "/"): no need to ask. */
const PLAIN_CHARS = /[A-Za-z0-9._ +,=@~/-]/g;

/**
 * Asks DIR's file system about names with temporary files of pull's own (TEMP_OWNED: a probe
 * left by a kill is removed by the next pull), each question once.
 */
class NameProbe {
  constructor(private readonly root: string) {}

  /**
   * The characters of `chars` that no name may hold here. Asked in groups (one temporary file
   * whose name ends in all of a group), then one by one in a group refused.
   */
  async refusedOf(chars: string[]): Promise<Set<string>> {
    const refused = new Set<string>();
    const groups: string[][] = [];
    let bytes = Infinity;
    for (const char of chars) {
      const size = Buffer.byteLength(char);
      if (bytes + size > 120) {
        groups.push([]);
        bytes = 0;
      }
      groups.at(-1)!.push(char);
      bytes += size;
    }
    for (const group of groups) {
      if (await this.makes(group.join(''))) continue;
      for (const char of group) if (!(await this.makes(char))) refused.add(char);
    }
    return refused;
  }

  /** Whether a temporary file whose name ends in `-` and `chars` can be made. */
  private makes(chars: string): Promise<boolean> {
    return this.ask(`-${chars}`, (name) => name, true);
  }

  /**
   * Whether paths a and b, which differ only in case or Unicode form, are one name here: a
   * temporary file is looked up under a name that differs from its own as b differs from a (in
   * capitals, an accent as one character or two).
   */
  async oneName(a: string, b: string): Promise<boolean> {
    const needsCase = a.normalize('NFC') !== b.normalize('NFC');
    const needsForm = a.toLowerCase() !== b.toLowerCase();
    const suffix = needsForm ? FORM_PROBE : '';
    return this.ask(suffix, (name) =>
      needsCase ? name.toUpperCase().normalize('NFD') : name.normalize('NFD'),
    );
  }

  /**
   * Makes the temporary file `<temp name><suffix>` in DIR, then says whether `other(its name)`
   * names a file (or, with `made`, only whether it could be made).
   */
  private async ask(suffix: string, other: (name: string) => string, made = false) {
    const base = tempIn(this.root);
    const probe = `${base}${suffix}`;
    trackTempFiles(probe);
    try {
      await writeFile(probe, '', { flag: 'wx' });
    } catch (err) {
      untrackTempFiles(probe);
      const code = (err as NodeJS.ErrnoException).code;
      // exFAT answers a name with ":" "no such file"; others say it is invalid.
      if (made && (code === 'ENOENT' || code === 'EINVAL' || code === 'EILSEQ')) return false;
      // DIR is what cannot be written (read-only, full), not a probe the user never made.
      if (err && typeof err === 'object') (err as NodeJS.ErrnoException).path = this.root;
      throw err;
    } finally {
      settled(base);
    }
    try {
      if (made) return true;
      // The name is random: found under the other name, it is the probe. (Not by its inode:
      // FUSE file systems such as exfat-fuse number each name they are asked for apart.)
      return await lstat(join(this.root, other(basename(probe)))).then(
        () => true,
        () => false,
      );
    } finally {
      await rm(probe, { force: true });
      untrackTempFiles(probe);
    }
  }
}

async function pullOnce(
  client: ApiClient,
  name: string,
  dir: string,
  options: PullOptions,
  lock: PullLock,
  onManifest: (stored: StoredManifest) => void,
): Promise<PullResult> {
  const { own, others } = await manifestShares(client, name, options.owner);
  const stored = await newestManifest(client, name, own, options.signal);
  if (!stored) throw noArtifact(client, name, options.owner, others);
  onManifest(stored);
  const dataShares = await checkDataShares(client, name, options.owner, stored.manifest.files);
  // Permission bits only, as the umask allows (as tar does for a user): a manifest's 0o777 is not
  // a world-writable file here.
  const umask = process.umask();
  const manifest: Manifest = {
    ...stored.manifest,
    files: stored.manifest.files.map((f) => ({ ...f, mode: f.mode & 0o777 & ~umask })),
  };
  await makeDirs(dir, 0o777);
  const root = await realpath(dir);
  await lock.take(root, (line) => options.onNotice?.(line)); // DIR was made just now
  const plan = await planPull(root, manifest, options);
  let deleted = 0;
  for (const abs of plan.inTheWay.keys()) deleted += await countFiles(abs);
  // A pull killed on the way left temporary files in the directories of its set: no one else
  // would ever remove them (another pull running into DIR keeps its own).
  await sweepTemps(new Set([root, ...plan.dirsThere]));

  const totalBytes = manifest.files.reduce((n, f) => n + f.size, 0);
  options.onStart?.(manifest.files.length, totalBytes);
  const staging = new Staging();
  let fetched: Awaited<ReturnType<typeof fetchSet>>;
  let extra: Extra = { files: [], counted: 0, emptied: [] };
  try {
    fetched = await fetchSet(client, manifest, plan, dataShares, staging, options);
    if (options.delete) extra = await listExtra(root, manifest, plan.inTheWay);
  } catch (err) {
    // Nothing in DIR changed: the temporary files go, and DIR is as it was.
    await staging.discard();
    throw err;
  }
  const rel = (abs: string) => relative(root, abs).split(sep).join('/');
  await commitPullOrDiscard(
    root,
    {
      remove: [...plan.inTheWay].map(([abs, isDir]) => ({ path: rel(abs), dir: isDir })),
      dirs: manifest.dirs.filter((d) => !plan.dirsThere.has(join(root, ...d.split('/')))),
      rename: [...staging.renames].map(([tmp, target]) => [rel(tmp), rel(target)]),
      modes: [...staging.modes].map(([abs, mode]) => [rel(abs), mode]),
      extra: extra.files.map(rel),
      emptied: extra.emptied.map(rel),
    },
    settled,
    staging,
  );
  return {
    name,
    manifest_id: stored.share.share_id,
    dir: root,
    files: manifest.files.length,
    bytes: totalBytes,
    downloaded: fetched.downloaded,
    skipped: fetched.skipped,
    deleted: { files: deleted + extra.counted },
  };
}

/**
 * The commit (pull-commit.ts). A failure before its first change (too little room for its
 * directories, the journal refused by a full disk) leaves DIR as it was: the temporary files go
 * too. One after it (CommitError) leaves them for the next pull, which finishes the commit.
 */
async function commitPullOrDiscard(
  root: string,
  commit: PullCommit,
  onRenamed: (temp: string) => void,
  staging: Staging,
): Promise<void> {
  try {
    commitPull(root, commit, onRenamed);
  } catch (err) {
    if (!(err instanceof CommitError)) await staging.discard();
    throw err;
  }
}

/**
 * Phase one of a pull: every file of the set that DIR lacks downloaded and verified into a
 * temporary file (staged), the others found already there. Nothing is put in place.
 */
async function fetchSet(
  client: ApiClient,
  manifest: Manifest,
  plan: PullPlan,
  dataShares: Map<string, Share>,
  staging: Staging,
  options: PullOptions,
): Promise<{ downloaded: TransferCounts; skipped: TransferCounts }> {
  const { root, targets, homes } = plan;
  let doneFiles = 0;
  let doneBytes = 0;
  const progress = (f: ManifestFile) => {
    doneFiles++;
    doneBytes += f.size;
    options.onProgress?.(doneFiles, doneBytes);
  };
  const skipped: TransferCounts = { files: 0, bytes: 0 };
  const downloaded: TransferCounts = { files: 0, bytes: 0 };
  const byShare = new Map<string, ManifestFile[]>();
  const checks = createLimiter(4);
  await settleAll(
    'checks',
    manifest.files.map((f) =>
      checks(async () => {
        const target = targets.get(f)!;
        // Where the file's directory is still to be made, nothing is there yet: no need to look.
        const whole = dirname(target) === root || plan.dirsThere.has(dirname(target));
        if (whole && (await alreadyThere(target, f, staging))) {
          skipped.files++;
          skipped.bytes += f.size;
          progress(f);
          return;
        }
        if (f.share === null) {
          await emptyFile(f, homes.get(f)!, target, staging);
          downloaded.files++;
          progress(f);
          return;
        }
        const list = byShare.get(f.share) ?? [];
        list.push(f);
        byShare.set(f.share, list);
      }),
    ),
  );

  const jobs: Limiter = createLimiter(options.parallel ?? 4);
  const missing = (err: unknown, f: ManifestFile, share: string) => {
    if (err instanceof ApiError && err.status === 404)
      return new DataGoneError(`the data of ${f.path} (share ${share}) is missing on the server`);
    return err;
  };
  const placed = (f: ManifestFile) => {
    downloaded.files++;
    downloaded.bytes += f.size;
    progress(f);
  };
  await settleAll(
    'downloads',
    [...byShare].map(([share, wanted]) =>
      jobs(async () => {
        if (wanted.length === 1 && wholeShare(wanted[0]!, dataShares.get(share))) {
          // A share of its own: straight into a temporary file.
          const f = wanted[0]!;
          const place = { home: homes.get(f)!, target: targets.get(f)! };
          await downloadInto(client, share, f, place, staging, options.signal).catch(
            (err: unknown) => {
              throw missing(err, f, share);
            },
          );
          placed(f);
          return;
        }
        // A pack: split as it streams in, each file into a temporary file of its own.
        const splitter = new PackSplitter(wanted, targets, homes, staging, placed);
        try {
          await download(client, share, { output: '-', stdout: splitter, signal: options.signal });
          await splitter.finish();
        } catch (err) {
          await splitter.abandon();
          throw missing(
            aboutShare(err, `the data of ${wanted[0]!.path} (share ${share})`),
            wanted[0]!,
            share,
          );
        }
      }),
    ),
  );
  return { downloaded, skipped };
}

/** --delete: what the commit removes, and how many of those files count as DIR's. */
interface Extra {
  files: string[];
  counted: number;
  /** Directories the set does not have, deepest first: removed by the commit if emptied. */
  emptied: string[];
}

/**
 * What the set does not have (never following a link); what is in the way of the set is left
 * out (the commit removes it whole). A pull's temporary file or journal is not the user's: a
 * stale temporary file goes uncounted, a live one (another pull into DIR) and a journal stay.
 */
async function listExtra(
  root: string,
  manifest: Manifest,
  inTheWay: Map<string, boolean>,
): Promise<Extra> {
  const keep = new Set(manifest.files.map((f) => f.path));
  const keepDirs = new Set(manifest.dirs);
  for (const f of manifest.files) for (const d of parentsOf(f.path)) keepDirs.add(d);
  // Found from outside: on exFAT, DIR's Readme was the set's README (one name there), and
  // --delete removed it as a file the set lacks: "2 files", exit 0, README gone. A name of DIR
  // that the file system takes for one of the set's is the set's.
  const folded = new Map<string, string>();
  for (const path of [...keep, ...keepDirs]) folded.set(foldName(path), path);
  const probe = new NameProbe(root);
  const kept = async (rel: string, exact: Set<string>) => {
    if (exact.has(rel)) return true;
    const twin = folded.get(foldName(rel));
    return twin !== undefined && exact.has(twin) && (await probe.oneName(rel, twin));
  };
  const extra: Extra = { files: [], counted: 0, emptied: [] };
  const walk = async (abs: string, rel: string) => {
    for (const e of await readdir(abs, { withFileTypes: true })) {
      const childRel = rel ? `${rel}/${e.name}` : e.name;
      const childAbs = join(abs, e.name);
      if (inTheWay.has(childAbs)) continue;
      if (e.isDirectory()) {
        await walk(childAbs, childRel);
        if (!(await kept(childRel, keepDirs))) extra.emptied.push(childAbs);
      } else if (!(await kept(childRel, keep)) && !isPullJournal(e.name) && e.name !== PULL_LOCK) {
        const temp = await pullTemp(childAbs, e.name);
        if (temp === 'live') continue;
        extra.files.push(childAbs);
        if (temp === 'no') extra.counted++;
      }
    }
  };
  await walk(root, '');
  return extra;
}

// --- listing and removing

export interface ArtifactSummary {
  name: string;
  manifest_id: string;
  files: number;
  bytes: number;
  created: string;
}

/**
 * The owner's sets. A set whose manifest is damaged is left out, with a line through `onNotice`;
 * any other failure (the server's, the network's) fails the listing: a set is never left out
 * silently (one whose manifest could not be read was, exit 0).
 */
export async function listArtifacts(
  client: ApiClient,
  owner: string,
  onNotice: (line: string) => void = () => undefined,
): Promise<ArtifactSummary[]> {
  const shares = await findShares(client, { name_prefix: ARTIFACT_PREFIX });
  const byName = new Map<string, Share[]>();
  for (const s of shares) {
    const rest = s.file_name.slice(ARTIFACT_PREFIX.length);
    if (s.owner_name === owner && !rest.includes(':') && NAME.test(rest))
      byName.set(rest, [...(byName.get(rest) ?? []), s]);
  }
  const out: ArtifactSummary[] = [];
  for (const name of [...byName.keys()].sort()) {
    const stored = await newestManifest(client, name, byName.get(name)!).catch((err: unknown) => {
      if (!(err instanceof ManifestError)) throw err;
      onNotice(`${name}: its manifest is damaged (${err.message}); not listed`);
      return null;
    });
    if (!stored) continue;
    out.push({
      name,
      manifest_id: stored.share.share_id,
      files: stored.manifest.files.length,
      bytes: stored.manifest.files.reduce((n, f) => n + f.size, 0),
      created: stored.manifest.created,
    });
  }
  return out;
}

/** Deletes the owner's manifest first (the set is gone at once), then the owner's data shares. */
export async function removeArtifact(
  client: ApiClient,
  name: string,
  owner: string,
): Promise<{ shares: number }> {
  checkArtifactName(name);
  const { own: manifests, others } = await manifestShares(client, name, owner);
  if (manifests.length === 0) throw noArtifact(client, name, owner, others);
  for (const s of manifests) await deleteFile(client, s.share_id);
  const data = await ownDataShares(client, name, owner);
  for (const s of data) await deleteFile(client, s.share_id);
  return { shares: manifests.length + data.length };
}
