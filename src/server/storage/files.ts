import { createHash, randomBytes } from 'node:crypto';
import { constants } from 'node:fs';
import {
  link,
  lstat,
  mkdir,
  open,
  readdir,
  readFile,
  rename,
  rm,
  stat,
  truncate,
  unlink,
  writeFile,
  type FileHandle,
} from 'node:fs/promises';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import { fault } from '../faults.js';
import { fsyncDir, isOutOfSpace, writeFileDurably } from '../fsutil.js';
import { bodyPassedOn } from '../gc.js';
import { givePieces, takePiece, writeFileRange, writeFully, WRITE_MAX } from '../../shared/copy.js';
import type { HashWorker, Sha256 } from '../../shared/hasher.js';
import { KeyedMutex } from '../mutex.js';
import { OutcomeUnknownError } from '../store/index.js';
import {
  ChunkRefusedError,
  InsufficientStorageError,
  StorageUnavailableError,
  type ChunkFields,
  type ContentReader,
  type ContentStorage,
  type Layout,
  type NewContent,
  type ReceivedChunk,
} from './index.js';
import {
  checkChunkFields,
  checkDeclaredLength,
  checkJoinedEnd,
  declaredSizeError,
  joinedStart,
} from './chunks.js';
import { isContentName, isUploadName, mayRemoveUnnamed, type Owner } from './owner.js';
import { SpaceReserve } from './space.js';
import { makeDirs } from '../../shared/mkdirs.js';

/** The share id of the start's probe link in content/ (checkOneFileSystem): no share has it. */
const PROBE_SHARE = '00000000-0000-0000-0000-000000000000';

/** Pieces of this size are read back and copied. */
const PIECE = 1024 * 1024;
/**
 * Bodies are written in pieces of this size (one write each) and the hashing thread is told of
 * them a PIECE at a time. Each body being received holds two: 1 MiB pieces made the server's
 * peak 3–8 MB higher with four chunks in flight, for the same writes (bench/README.md).
 */
const BODY_PIECE = WRITE_MAX;
/** Content that no share names is kept this long in orphans/ (setAside). */
const ORPHANS_KEEP_DAYS = 30;
/** Records of finished uploads are kept this long, so that late chunks of them are refused. */
const FINISHED_KEEP_MS = 48 * 3600 * 1000;

export interface FileStorageOptions {
  hasher: HashWorker;
  /** Uploads are refused (507) when they would leave less free space than this. */
  minFreeBytes: number;
  log?: (line: string) => void;
}

/** What `meta` holds: fixed when the upload's first chunk arrives, written once, atomically. */
interface Meta {
  v: 2;
  total: number;
  /** Placed mode: chunks are written in place into `data`. Null: joined at the end. */
  layout: Layout | null;
  created: number;
}

interface Committed {
  length: number;
  /** The dzchunkbyteoffset a joined-mode chunk declared, checked against its neighbours. */
  offset?: number;
}

/** A chunk being written straight into the upload's `data` file. */
interface Writer {
  aborted: boolean;
  /** The write in progress, if any: an abort waits for it, so nothing is written after. */
  writing: Promise<void> | null;
}

interface Spec {
  hash: Sha256;
  index: number;
  epoch: number;
}

const rand = () => randomBytes(8).toString('hex');

/**
 * The sha256 of an upload's content, advanced over the contiguous prefix of committed chunks
 * while the rest arrive. The chunk that is next in line is hashed as its bytes reach the disk (on
 * a copy of the running state, adopted if that chunk is committed); chunks that arrived out of
 * order are hashed once the gap before them is filled. The hashing thread reads the bytes back
 * from the page cache, so receiving never waits for it.
 */
class UploadHash {
  private base: Sha256 | null = null;
  private epoch = 0;
  next = 0;

  constructor(private readonly worker: HashWorker) {}

  /**
   * A hash to feed chunk `index` into as it arrives, when it is the next one due. `expectedBytes`:
   * at most how much the whole upload holds, when known; a small upload is hashed on the main
   * thread (shared/hasher.ts), so an idle server does not start its hashing thread for it.
   */
  speculate(index: number, expectedBytes?: number): Spec | undefined {
    if (index !== this.next) return undefined;
    if (this.next === 0) {
      // Nothing hashed yet: begin afresh, sized for this attempt at the first chunk.
      this.base?.dispose();
      this.base = this.worker.create(expectedBytes);
    }
    this.base ??= this.worker.create();
    return { hash: this.base.copy(), index, epoch: this.epoch };
  }

  /** The chunk that `spec` watched was committed: its hash becomes the running one. */
  adopt(spec: Spec | undefined): void {
    if (spec && spec.epoch === this.epoch && spec.index === this.next) {
      this.base?.dispose();
      this.base = spec.hash;
      this.next++;
    } else spec?.hash.dispose();
  }

  /** Hashes the committed chunks that now continue the prefix, read back from disk. */
  catchUp(has: (i: number) => boolean, source: (i: number) => Source): void {
    while (has(this.next)) {
      this.base ??= this.worker.create();
      const { path, start, end } = source(this.next);
      // A failure loses the hash in the thread; `finish` notices and starts over.
      this.base.updateFromFile(path, start, end).catch(() => undefined);
      this.next++;
    }
  }

  /** A chunk already hashed was replaced by other bytes: start again from the beginning. */
  invalidate(): void {
    this.epoch++;
    this.base?.dispose();
    this.base = null;
    this.next = 0;
  }

  /**
   * The digest of all `total` chunks. Only if the running hash was lost (the hashing thread
   * failed) is it computed again from `whole`, a second pass that `recomputed` reports.
   */
  async finish(total: number, whole: Source): Promise<{ sha256: string; recomputed: boolean }> {
    const base = this.base;
    this.base = null;
    if (base && this.next === total) {
      try {
        return { sha256: await base.digest(), recomputed: false };
      } catch {
        // the hashing thread lost it: read it all back below
      }
    } else base?.dispose();
    const fresh = this.worker.create();
    await fresh.updateFromFile(whole.path, whole.start, whole.end);
    return { sha256: await fresh.digest(), recomputed: true };
  }

  dispose(): void {
    this.base?.dispose();
    this.base = null;
  }
}

interface Source {
  path: string;
  start: number;
  end: number;
}

/**
 * Group commit: `sync()` resolves after an fsync that started after it was called. Callers that
 * come while one runs share the next one, so N chunks finishing together cost about two fsyncs.
 */
class GroupSync {
  private running: Promise<void> | null = null;
  private queued: Promise<void> | null = null;

  constructor(private readonly syncOnce: () => Promise<void>) {}

  sync(): Promise<void> {
    if (this.queued) return this.queued;
    const before = this.running ?? Promise.resolve();
    const next: Promise<void> = before
      .catch(() => undefined)
      .then(async () => {
        this.queued = null;
        this.running = next;
        try {
          await this.syncOnce();
        } finally {
          if (this.running === next) this.running = null;
        }
      });
    this.queued = next;
    return next;
  }
}

/** Runs async jobs one after another, in the order they were queued. */
class SerialWrites {
  private tail: Promise<unknown> = Promise.resolve();

  run<T>(job: () => Promise<T>): Promise<T> {
    const next = this.tail.then(job, job);
    this.tail = next.catch(() => undefined);
    return next;
  }
}

class Upload {
  state: 'open' | 'done' = 'open';
  /** False until the first chunk is committed: a refused first chunk leaves no upload behind. */
  persisted = true;
  /** Chunks received for this upload and not yet committed or discarded. */
  receivers = 0;
  readonly committed = new Map<number, Committed>();
  /** Per index, the storage's count of stored chunks when a copy of it was last stored. */
  readonly storedAt = new Map<number, number>();
  /** Active in-place writers, at most one per index. */
  readonly writers = new Map<number, Writer>();
  sha256?: string;
  /** Joined mode: the dztotalfilesize a chunk announced (the `s` line), which the whole must hold. */
  size?: number;
  /** Joined mode: the dzchunksize a chunk announced (the `k` line), which every chunk keeps to. */
  chunkSize?: number;
  lastActivity = Date.now();
  /** Makes the log's appended lines durable, one fsync for every chunk waiting on it. */
  readonly logSync = new GroupSync(async () => {
    if (this.state !== 'open') return; // finished: its log is gone, and no longer needed
    const handle = await open(join(this.dir, 'log'), 'r');
    try {
      await handle.datasync();
    } finally {
      await handle.close();
    }
  });

  /**
   * The writes of placed chunks into `data`, one at a time. ext4 takes the file's inode lock for
   * each buffered write, and a thread that waits for it spins on the CPU while the holder copies:
   * with four chunks in flight, 7 % of the server's CPU over a 512 MiB upload (0.4 s) went to
   * that spinning (perf, bench/README.md). Queued here, a waiting write costs nothing, and the
   * disk sees the same writes.
   */
  readonly dataWrites = new SerialWrites();

  /** The same for the `data` file of placed chunks. */
  readonly dataSync = new GroupSync(async () => {
    if (this.state !== 'open') return;
    const handle = await open(this.dataPath, 'r');
    try {
      await handle.datasync();
    } finally {
      await handle.close();
    }
  });

  constructor(
    readonly name: string,
    readonly dir: string,
    readonly meta: Meta,
    readonly hash: UploadHash,
  ) {}

  get dataPath(): string {
    return join(this.dir, 'data');
  }

  /** Placed mode: where chunk `index` goes. */
  region(index: number): { start: number; length: number } {
    const { chunkSize, fileSize } = this.meta.layout!;
    const start = index * chunkSize;
    const length = index < this.meta.total - 1 ? chunkSize : fileSize - start;
    return { start, length };
  }

  source(index: number): Source {
    if (this.meta.layout) {
      const { start, length } = this.region(index);
      return { path: this.dataPath, start, end: start + length };
    }
    return {
      path: join(this.dir, String(index)),
      start: 0,
      end: this.committed.get(index)!.length,
    };
  }
}

/** A received chunk: where its bytes are, and what it was written for. */
class Received implements ReceivedChunk {
  bytes = 0;
  /** The storage's count of stored chunks when this copy began to arrive (FileStorage.stored). */
  startedAt = 0;
  /** More bytes arrived than `receive` was allowed to store (the quota, the chunk size). */
  overflow = false;
  /** More bytes arrived than the chunk's place holds (a placed chunk too long: a 400, not a 413). */
  pastPlace = false;
  done = false;

  constructor(
    readonly kind: 'inplace' | 'staged' | 'incoming',
    readonly path: string,
    readonly upload?: Upload,
    readonly fields?: ChunkFields,
    readonly writer?: Writer,
    public spec?: Spec,
  ) {}
}

/**
 * File-system storage. Names on disk come only from server-made values (share ids, random hex,
 * hashes): `dzuuid` and file names never become paths.
 *
 *   content/<share_id>.<hex>              a share's bytes (content/<share_id> from fshare 0.1)
 *   uploads/<share_id>.<sha256(dzuuid)>/  one upload:
 *       meta        its total and layout, written once, atomically
 *       log         committed chunks, one fsynced line each ("c index length offset")
 *       data        placed mode: the content being assembled, chunks written in place
 *       <index>     joined mode: a committed chunk
 *       s.<hex>     a chunk being received (never counted until committed)
 *       done        the upload finished (completed, failed its digest, swept): the record that
 *                   refuses its late chunks; nothing else is left
 *   incoming/<hex>                        a chunk whose fields came after its data
 */
export class FileStorage implements ContentStorage {
  private readonly contentDir: string;
  private readonly uploadsDir: string;
  private readonly incomingDir: string;
  /** Marks of content being let go (releasing): removed once the content is. */
  private readonly removingDir: string;
  private readonly uploads = new Map<string, Upload>();
  /** Chunks stored so far by this process: the order in which copies began and were stored. */
  private stored = 0;
  private readonly locks = new KeyedMutex();
  private readonly space: SpaceReserve;
  private readonly hasher: HashWorker;
  private readonly log: (line: string) => void;

  constructor(
    private readonly dataDir: string,
    private readonly options: FileStorageOptions,
  ) {
    this.contentDir = join(dataDir, 'content');
    this.uploadsDir = join(dataDir, 'uploads');
    this.incomingDir = join(dataDir, 'incoming');
    this.removingDir = join(dataDir, 'removing');
    this.hasher = options.hasher;
    this.log = options.log ?? ((line) => process.stderr.write(`${line}\n`));
    this.space = new SpaceReserve(dataDir, options.minFreeBytes);
  }

  async init(referenced: (blob: string) => boolean, owner?: Owner): Promise<void> {
    for (const dir of [this.contentDir, this.uploadsDir, this.incomingDir])
      await makeDirs(dir).catch((err: NodeJS.ErrnoException) => {
        // "already exists" would name the file in the way, not what is wrong with it.
        if (err.code === 'EEXIST' || err.code === 'ENOTDIR')
          throw new Error(`${dir} is not a directory`);
        throw err;
      });
    // Without it (no inode left) removals still work; what they leave is then set aside.
    await makeDirs(this.removingDir).catch(() => undefined);
    await this.checkOneFileSystem();
    // Content let go by a removal or a replacement whose bytes a crash kept from going (marked
    // by `releasing`): removed below. A mark of content still named is of a change that never
    // happened: it goes.
    const released: string[] = [];
    // Only a directory of its own: through a link to content/, every file there would read as
    // a mark.
    const marks = (await lstat(this.removingDir).catch(() => null))?.isDirectory()
      ? await readdir(this.removingDir, { withFileTypes: true }).catch(() => [])
      : [];
    for (const e of marks) {
      if (!e.isFile() || !isContentName(e.name)) continue;
      if (referenced(e.name)) await rm(join(this.removingDir, e.name), { force: true });
      else released.push(e.name);
    }
    const letGo = new Set(released);
    // Content that no share names: written by a completion that crashed before it was recorded,
    // or left by a removal that crashed. Removed only if this store owns the content (owner.ts).
    // Only files fshare names as content: a directory there (lost+found) stopped the start.
    const unnamed: string[] = [];
    for (const e of await readdir(this.contentDir, { withFileTypes: true })) {
      if (!e.isFile() || !isContentName(e.name) || referenced(e.name) || letGo.has(e.name))
        continue;
      // A start's own probe that a kill left (checkOneFileSystem): never anyone's content, and
      // never counted as content at stake.
      if (e.name.startsWith(`${PROBE_SHARE}.`))
        await rm(join(this.contentDir, e.name), { force: true });
      else unnamed.push(e.name);
    }
    const markFile = join(this.dataDir, 'content-owner');
    const mayRemove = await mayRemoveUnnamed(
      {
        read: () =>
          readFile(markFile, 'utf8').then(
            (text) => text.trim(),
            (err: NodeJS.ErrnoException) => {
              if (err.code === 'ENOENT') return null;
              throw err;
            },
          ),
        write: (id) => writeFileDurably(markFile, `${id}\n`),
        content: this.contentDir,
        mark: markFile,
        afresh: `move ${this.contentDir} aside`,
        unnamed: (files) =>
          `move ${files} to ${join(this.dataDir, 'orphans')}/ (kept ${ORPHANS_KEEP_DAYS} days)`,
      },
      owner,
      unnamed.length,
    );
    // Nothing is in flight at start: partial bodies are leftovers of a crash. Only fshare's own
    // files: a directory there (an S3 server's temp files, from a start with --storage) stopped
    // the start with EISDIR.
    for (const e of await readdir(this.incomingDir, { withFileTypes: true }))
      if (e.isFile() && /^[0-9a-f]{16}$/.test(e.name))
        await rm(join(this.incomingDir, e.name), { force: true });
    for (const name of released) await this.removeContent(name);
    // A copy's target (no server runs on it): what an earlier, unfinished copy stored goes.
    if (mayRemove && owner?.alone)
      for (const name of unnamed) await rm(join(this.contentDir, name), { force: true });
    else if (mayRemove) await this.setAside(unnamed);
    await this.dropOldOrphans();
    // Every upload read back once: what requests cut by a crash left is removed, records that
    // cannot be read count as absent, completions that were published are closed.
    for (const name of await this.uploadDirs()) {
      const upload = await this.load(name);
      if (upload?.state === 'open') this.uploads.set(name, upload);
    }
  }

  /**
   * Content that no share names, at a start. A link of an upload's file is a completion a crash
   * cut short before its record (the client never had its 201; its upload keeps the bytes, and
   * load() reads the link count): it goes. Any other file is moved to orphans/<time>/ and said
   * in the log, kept ORPHANS_KEEP_DAYS: the content of shares the metadata does not have, or of
   * a removal whose mark (releasing) a crash lost. Found from outside: an older db.json
   * restored from a backup made the start remove, silently, the content of every share
   * uploaded since (and of every share replaced since, whose record names older bytes).
   */
  private async setAside(unnamed: string[]): Promise<void> {
    let dir: string | undefined;
    let moved = 0;
    // The files a completion links into content/: a link of one of them is that completion's.
    // (Another link, such as an operator's `cp -al` snapshot, is no reason to remove the file.)
    const completing = new Set<string>();
    if (unnamed.length > 0)
      for (const upload of await this.uploadDirs())
        for (const entry of await readdir(join(this.uploadsDir, upload)).catch(() => [])) {
          if (entry !== 'data' && entry !== '0' && !entry.startsWith('j.')) continue;
          const info = await stat(join(this.uploadsDir, upload, entry)).catch(() => null);
          if (info) completing.add(`${info.dev}:${info.ino}`);
        }
    for (const name of unnamed) {
      const path = join(this.contentDir, name);
      const info = await stat(path).catch(() => null);
      if (!info) continue;
      if (info.nlink > 1 && completing.has(`${info.dev}:${info.ino}`)) {
        await rm(path, { force: true });
        continue;
      }
      try {
        if (!dir) {
          const stamp = new Date().toISOString().replace(/[:.]/g, '-');
          dir = join(this.dataDir, 'orphans', stamp);
          await makeDirs(dir);
        }
        await rename(path, join(dir, name));
        moved++;
      } catch (err) {
        // No room for the folder (a full disk): the files stay where they are, and the next
        // start tries again.
        this.log(
          `could not move ${unnamed.length - moved} stored file(s) that no share names out of ${this.contentDir} (${String(err)}); they stay there`,
        );
        break;
      }
    }
    if (!dir || moved === 0) return;
    await fsyncDir(dir);
    await fsyncDir(this.contentDir);
    this.log(
      `moved ${moved} stored file${moved === 1 ? '' : 's'} that no share names to ${dir}: what a crash left, or the content of shares the metadata does not have (an older db.json restored?); kept ${ORPHANS_KEEP_DAYS} days (docs/CLI.md, fshare serve, "Content that no share names")`,
    );
  }

  /** What setAside moved, once kept ORPHANS_KEEP_DAYS. */
  private async dropOldOrphans(): Promise<void> {
    const root = join(this.dataDir, 'orphans');
    const entries = await readdir(root, { withFileTypes: true }).catch(() => []);
    for (const e of entries) {
      if (!e.isDirectory() || !/^\d{4}-\d\d-\d\dT[\d-]+Z$/.test(e.name)) continue;
      const mtimeMs = (await stat(join(root, e.name)).catch(() => null))?.mtimeMs ?? Date.now();
      if (Date.now() - mtimeMs > ORPHANS_KEEP_DAYS * 24 * 3600 * 1000)
        await rm(join(root, e.name), { recursive: true, force: true });
    }
  }

  /**
   * A chunk body moves from incoming/ into its upload's folder by a rename, and a finished
   * upload's file is hard-linked into content/: the folders must be on one file system, the
   * data directory's (whose free space the reserve measures), and it must have hard links.
   * Found from outside: a volume mounted on content/ alone made every upload end in a 500
   * (EXDEV), after all its chunks had been sent.
   */
  private async checkOneFileSystem(): Promise<void> {
    const [home, ...dirs] = [this.dataDir, this.contentDir, this.uploadsDir, this.incomingDir];
    const { dev } = await stat(home!);
    for (const dir of dirs)
      if ((await stat(dir)).dev !== dev)
        throw new Error(
          `${dir} is on another file system than the data directory ${home} (a volume mounted ` +
            `there?): fshare renames and links files between its folders, which needs one file ` +
            `system; mount the volume on the data directory instead, or point --data-dir at a ` +
            `directory on it`,
        );
    // Named as incoming/ and content/ name theirs, so that what a kill between these lines
    // leaves is removed by the next start (content of the nil share id, which no share has).
    const probe = join(this.incomingDir, rand());
    const linked = join(this.contentDir, `${PROBE_SHARE}.${rand()}`);
    try {
      await (await open(probe, 'wx', 0o600)).close();
    } catch (err) {
      if (isOutOfSpace(err)) return; // no inode for it: the start goes on, for downloads
      throw err;
    }
    try {
      await link(probe, linked);
      await fault('start.probe-linked');
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'EPERM' || code === 'ENOTSUP' || code === 'EOPNOTSUPP' || code === 'ENOSYS')
        throw new Error(
          `the file system of ${home} has no hard links (${code}), which fshare needs to ` +
            `publish finished uploads; use a directory on another file system (ext4, XFS, Btrfs, ZFS, NFS)`,
        );
      if (!isOutOfSpace(err)) throw err;
    } finally {
      await rm(linked, { force: true });
      await rm(probe, { force: true });
    }
  }

  /**
   * The uploads' folders: directories named as uploadName() names them. Anything else in
   * uploads/ is not fshare's (a file there stopped the start with ENOTDIR; a symbolic link was
   * read, and its target's files removed, as an upload's).
   */
  private async uploadDirs(): Promise<string[]> {
    return (await readdir(this.uploadsDir, { withFileTypes: true }))
      .filter((e) => e.isDirectory() && isUploadName(e.name))
      .map((e) => e.name);
  }

  async isUnfinished(shareId: string, uploadId: string): Promise<boolean> {
    return this.uploads.get(this.uploadName(shareId, uploadId))?.persisted === true;
  }

  async uploadStatus(
    shareId: string,
    uploadId: string,
  ): Promise<{ total: number; received: number[]; bytes: number } | 'finished' | null> {
    const name = this.uploadName(shareId, uploadId);
    const upload = this.uploads.get(name);
    if (upload?.persisted && upload.state === 'open') {
      const received = [...upload.committed.keys()].sort((a, b) => a - b);
      let bytes = 0;
      for (const c of upload.committed.values()) bytes += c.length;
      return { total: upload.meta.total, received, bytes };
    }
    try {
      await stat(join(this.uploadsDir, name, 'done'));
      return 'finished';
    } catch {
      return null;
    }
  }

  async unfinished(): Promise<Map<string, { uploads: number; bytes: number }>> {
    const out = new Map<string, { uploads: number; bytes: number }>();
    for (const upload of this.uploads.values()) {
      if (!upload.persisted || upload.state !== 'open') continue;
      const shareId = upload.name.slice(0, upload.name.indexOf('.'));
      const entry = out.get(shareId) ?? { uploads: 0, bytes: 0 };
      entry.uploads++;
      for (const c of upload.committed.values()) entry.bytes += c.length;
      out.set(shareId, entry);
    }
    return out;
  }

  reserve(bytes: number): Promise<() => void> {
    return this.space.reserve(bytes);
  }

  holdsMore(bytes: number): Promise<void> {
    return this.space.check(bytes);
  }

  // Receiving

  async receive(
    shareId: string,
    fields: ChunkFields | null,
    body: Readable,
    maxBytes: number,
  ): Promise<ReceivedChunk> {
    const startedAt = this.stored;
    if (!fields) {
      const path = join(this.incomingDir, rand());
      const received = new Received('incoming', path);
      received.startedAt = startedAt;
      try {
        await this.hasher.ready();
        await this.writeFile(body, received, path, maxBytes);
      } catch (err) {
        // A body cut off, stalled or refused leaves nothing in incoming/.
        await this.discard(received);
        throw err;
      }
      return received;
    }
    const received = await this.withUpload(shareId, fields, true, async (upload) => {
      const { index } = fields;
      upload.receivers++;
      // A single chunk's upload is no larger than the bytes this body may store.
      const expected = fields.total === 1 ? maxBytes - 1 : undefined;
      const spec = upload.hash.speculate(index, expected);
      // Every chunk is hashed, as it arrives or once the gap before it is filled: the hashing
      // thread starts before this body is read, whichever of an upload's chunks comes first
      // (chunks come several at a time; only chunk 0 is hashed as it arrives). A body read while
      // the thread starts could let the young generation grow (server/gc.ts).
      if (!spec) this.hasher.prepare(upload.meta.layout?.fileSize ?? expected);
      const inPlace =
        upload.meta.layout !== null &&
        fields.layout !== undefined &&
        !upload.committed.has(index) &&
        !upload.writers.has(index);
      if (inPlace) {
        const writer: Writer = { aborted: false, writing: null };
        upload.writers.set(index, writer);
        return new Received('inplace', upload.dataPath, upload, fields, writer, spec);
      }
      return new Received(
        'staged',
        join(upload.dir, `s.${rand()}`),
        upload,
        fields,
        undefined,
        spec,
      );
    });
    received.startedAt = startedAt;
    try {
      // Bodies wait while a hashing thread starts: none is read in the window where the young
      // generation could grow (server/gc.ts).
      await this.hasher.ready();
      if (received.kind === 'inplace') {
        const { start, length } = received.upload!.region(fields.index);
        await this.writeInPlace(body, received, start, length);
      } else await this.writeFile(body, received, received.path, maxBytes);
    } catch (err) {
      await this.discard(received);
      throw err;
    }
    return received;
  }

  /** Streams a body into a new file of its own, fsynced. */
  private async writeFile(body: Readable, received: Received, path: string, max: number) {
    const handle = await open(path, 'wx', 0o600);
    try {
      await this.pump(body, received, handle, 0, max);
      await fault('chunk.mid-body');
      await handle.datasync();
    } finally {
      await handle.close();
    }
  }

  /** Streams a body into its place in the upload's data file; never past its region. */
  private async writeInPlace(body: Readable, received: Received, start: number, length: number) {
    const handle = await open(received.path, constants.O_WRONLY | constants.O_CREAT, 0o600);
    try {
      await this.pump(body, received, handle, start, length);
    } finally {
      await handle.close();
    }
    // Durable before it is recorded; chunks written together share the fsync of the file.
    if (!received.writer!.aborted) await received.upload!.dataSync.sync();
  }

  /**
   * Copies a body to `handle` at `position` in BODY_PIECEs (one written while the next fills),
   * feeding the speculative hash, and never writing more than `max` bytes or after an abort.
   * The rest of an oversized or superseded body is read and dropped, so the request can end.
   */
  private async pump(
    body: Readable,
    received: Received,
    handle: FileHandle,
    position: number,
    max: number,
  ): Promise<void> {
    const writer = received.writer;
    // One piece fills while the one before it is written. Memory stays flat: a piece is taken
    // when bytes come to fill it and given back once its write is done, so a body that stalls
    // holds only the piece it was filling (100 bodies stalled mid-chunk held 50 MB with two each).
    let piece: Buffer | null = null;
    let fill = 0;
    let written = 0;
    let writing: Promise<void> | null = null;
    // On disk and not yet handed to the hashing thread: [hashFrom, hashTo).
    let hashFrom = position;
    let hashTo = position;
    const hashWritten = () => {
      // The hashing thread reads it back from the page cache while the rest arrives. Fire and
      // forget: a failure loses the speculative hash, and completion recomputes.
      if (hashTo > hashFrom)
        received.spec?.hash.updateFromFile(received.path, hashFrom, hashTo).catch(() => {});
      hashFrom = hashTo;
    };
    // The first failed write (a full disk): nothing more is written, the body is still read to
    // its end (so the request can be answered), then the failure is thrown.
    let failure: unknown = null;
    const settle = async () => {
      if (!writing) return;
      try {
        await writing;
      } catch (err) {
        failure ??= err;
      }
      writing = null;
      if (writer) writer.writing = null;
    };
    const flush = async () => {
      await settle();
      if (writer?.aborted || failure) fill = 0; // dropped: nothing is written after either
      if (fill === 0) return;
      const full = piece!;
      const bytes = full.subarray(0, fill);
      const at = position + written;
      written += fill;
      fill = 0;
      piece = null;
      const queue = received.kind === 'inplace' ? received.upload?.dataWrites : undefined;
      const write = () => writeFully(handle, bytes, at);
      writing = (queue ? queue.run(write) : write())
        .then(() => {
          hashTo = at + bytes.length;
          if (hashTo - hashFrom >= PIECE) hashWritten();
        })
        // Written or failed, the write is over: nothing reads the piece any more.
        .finally(() => givePieces(full));
      writing.catch(() => undefined); // observed in settle(); never an unhandled rejection
      if (writer) writer.writing = writing;
    };
    try {
      for await (const data of body as AsyncIterable<Buffer>) {
        bodyPassedOn(data.length);
        if (received.overflow || received.pastPlace || writer?.aborted || failure) continue;
        if (received.bytes + data.length > max) {
          // In place, `max` is the chunk's place (writeInPlace), not what the body may store.
          if (received.kind === 'inplace') received.pastPlace = true;
          else received.overflow = true;
          continue;
        }
        received.bytes += data.length;
        let off = 0;
        while (off < data.length) {
          piece ??= takePiece(BODY_PIECE);
          const n = Math.min(data.length - off, BODY_PIECE - fill);
          data.copy(piece, fill, off, off + n);
          fill += n;
          off += n;
          if (fill === BODY_PIECE) await flush();
        }
      }
      await flush();
    } finally {
      // Whatever happened, no write of this body is still running when this returns.
      await settle();
      if (piece) givePieces(piece);
    }
    if (failure) throw failure;
    hashWritten(); // the rest, so the speculative hash holds the whole body
  }

  async discard(chunk: ReceivedChunk): Promise<void> {
    const received = chunk as Received;
    if (received.done) return;
    received.done = true;
    received.spec?.hash.dispose();
    const upload = received.upload;
    if (received.kind === 'inplace') {
      // Its bytes stay in a region no committed chunk claims; the next copy overwrites them.
      if (upload!.writers.get(received.fields!.index) === received.writer)
        upload!.writers.delete(received.fields!.index);
    } else await rm(received.path, { force: true });
    if (upload && --upload.receivers === 0 && !upload.persisted)
      await this.locks.run(upload.name, () => this.dropIfUnused(upload));
  }

  /** An upload none of whose chunks was committed, and none is on its way, leaves nothing. */
  private async dropIfUnused(upload: Upload): Promise<void> {
    if (upload.persisted || upload.receivers > 0 || this.uploads.get(upload.name) !== upload)
      return;
    this.uploads.delete(upload.name);
    upload.hash.dispose();
    await rm(upload.dir, { recursive: true, force: true });
  }

  // Committing

  async commit(
    shareId: string,
    fields: ChunkFields,
    chunk: ReceivedChunk,
    publish: (content: NewContent) => Promise<string | undefined>,
  ): Promise<'stored' | 'complete'> {
    const received = chunk as Received;
    // The hashing thread reads a chunk file of its own back as it arrives; that file is renamed
    // or removed below, so those reads must be done first.
    if (received.kind !== 'inplace') await received.spec?.hash.settled().catch(() => undefined);
    let stored: Upload | undefined;
    try {
      const outcome = await this.withUpload(shareId, fields, true, async (upload) => {
        if (received.upload && received.upload !== upload)
          throw new ChunkRefusedError('finished', 'This upload has already finished');
        if (
          received.fields &&
          (received.fields.index !== fields.index || received.fields.uploadId !== fields.uploadId)
        )
          throw new ChunkRefusedError('invalid', 'The chunk fields changed after the data');
        // A copy stored after this one began to arrive wins (docs/API.md): this one, late (a
        // stalled connection the client gave up on), must not replace what was acknowledged.
        const storedAt = upload.storedAt.get(fields.index);
        if (received.writer?.aborted || (storedAt !== undefined && storedAt > received.startedAt))
          throw new ChunkRefusedError(
            'superseded',
            `Chunk ${fields.index} was sent again and the other copy was stored instead`,
          );
        await this.record(upload, fields, received);
        upload.storedAt.set(fields.index, ++this.stored);
        upload.lastActivity = Date.now();
        await fault('chunk.after-record');
        upload.hash.adopt(received.spec);
        received.spec = undefined; // the upload's now (adopted or disposed), not the chunk's
        upload.hash.catchUp(
          (i) => upload.committed.has(i),
          (i) => upload.source(i),
        );
        if (upload.committed.size < upload.meta.total) {
          stored = upload;
          return 'stored';
        }
        return this.complete(shareId, upload, publish).catch((err: unknown) => {
          // The chunk is recorded, and so is every other: "nothing was changed" would be wrong.
          if (isOutOfSpace(err))
            throw new InsufficientStorageError(
              'The server is out of storage space to finish this upload; its chunks are kept: send the last one again once there is room',
            );
          throw err;
        });
      });
      // Its log line is made durable before the chunk is acknowledged, outside the lock, so the
      // chunks of an upload that arrive together share the fsync.
      if (stored) await stored.logSync.sync();
      return outcome;
    } finally {
      await this.discard(received);
    }
  }

  /** Checks a received chunk against its upload and makes it part of it (commit makes its log line durable). */
  private async record(upload: Upload, fields: ChunkFields, received: Received): Promise<void> {
    const { index } = fields;
    // Every check comes before anything is written: a refused chunk leaves nothing behind, not
    // an upload of no chunks (which would count against the limits on unfinished uploads) nor
    // its dzsha256 (which would refuse the right one when the chunk is sent again).
    if (fields.sha256 && upload.sha256 && upload.sha256 !== fields.sha256)
      throw new ChunkRefusedError('invalid', 'dzsha256 differs from the one earlier chunks sent');
    const region = upload.meta.layout ? upload.region(index) : null;
    const tooLong = received.overflow || received.pastPlace;
    if (region && (tooLong || received.bytes !== region.length))
      throw new ChunkRefusedError(
        'invalid',
        `Chunk ${index} must have ${region.length} bytes (dzchunksize and dztotalfilesize), not ${tooLong ? 'more' : received.bytes}`,
      );
    if (!region) {
      this.checkJoinedOffset(upload, fields, received.bytes);
      let others = 0;
      for (const [i, chunk] of upload.committed) if (i !== index) others += chunk.length;
      checkDeclaredLength(fields, received.bytes, others, upload);
    }
    try {
      await this.recordChecked(upload, fields, received, region);
    } catch (err) {
      // A chunk that fails here (a full disk) is not committed, and an upload none of whose
      // chunks is committed leaves nothing once its requests are over (dropIfUnused): found
      // from outside, a first chunk refused with 507 left its folder and its bytes, counted
      // against the bounds on unfinished uploads for a day.
      if (upload.committed.size === 0) upload.persisted = false;
      throw err;
    }
  }

  /** The writes of `record`, its checks passed. */
  private async recordChecked(
    upload: Upload,
    fields: ChunkFields,
    received: Received,
    region: { start: number; length: number } | null,
  ): Promise<void> {
    const { index } = fields;
    if (!upload.persisted) {
      await writeMeta(upload.dir, upload.meta);
      await fsyncDir(this.uploadsDir);
      upload.persisted = true;
    }
    // The dzsha256 line goes in the same write as the chunk's own line: a chunk that fails
    // leaves neither (a dzsha256 left behind would refuse the right one when it is sent again).
    // So do the dztotalfilesize and dzchunksize of a joined upload (placed ones have them in
    // their layout).
    const size = upload.meta.layout || upload.size !== undefined ? undefined : fields.fileSize;
    const chunkSize =
      upload.meta.layout || upload.chunkSize !== undefined ? undefined : fields.chunkSize;
    const lines = (line: string) =>
      (fields.sha256 && !upload.sha256 ? `h ${fields.sha256}\n` : '') +
      (size !== undefined ? `s ${size}\n` : '') +
      (chunkSize !== undefined ? `k ${chunkSize}\n` : '') +
      line;
    const logged = () => {
      if (fields.sha256) upload.sha256 ??= fields.sha256;
      if (size !== undefined) upload.size ??= size;
      if (chunkSize !== undefined) upload.chunkSize ??= chunkSize;
    };
    if (region) {
      const { start, length } = region;
      if (received.kind !== 'inplace')
        await this.copyIntoPlace(upload, index, received, start, length);
      await fault('chunk.before-record');
      await this.appendLog(upload, lines(`c ${index} ${length} -\n`), false);
      logged();
      upload.committed.set(index, { length });
      if (received.kind === 'inplace') upload.writers.delete(index);
      return;
    }
    const target = join(upload.dir, String(index));
    const before = upload.committed.get(index);
    // A copy of a committed chunk with the same bytes changes nothing, whatever happens below.
    const same =
      before !== undefined &&
      before.length === received.bytes &&
      (await sameBytes(target, 0, received.path, 0, received.bytes));
    if (before && !same && index < upload.hash.next) upload.hash.invalidate();
    await rename(received.path, target);
    try {
      await fsyncDir(upload.dir);
      await fault('chunk.before-record');
      const offset = fields.offset ?? '-';
      await this.appendLog(upload, lines(`c ${index} ${received.bytes} ${offset}\n`), false);
    } catch (err) {
      // The copy is in the chunk's place without its line: unless it holds the committed
      // bytes, neither it nor the copy it replaced counts (a start reads the file's size
      // against the old line and drops it too).
      if (!same) {
        upload.committed.delete(index);
        await rm(target, { force: true }).catch(() => undefined);
      }
      throw err;
    }
    logged();
    upload.committed.set(index, { length: received.bytes, offset: fields.offset });
  }

  /**
   * Placed mode, a chunk received as a file of its own (a re-send, or a client without the
   * layout fields): copied into its region. The region is marked uncommitted first, so a crash
   * in the middle of the copy can never leave mixed bytes counted as a chunk.
   */
  private async copyIntoPlace(
    upload: Upload,
    index: number,
    received: Received,
    start: number,
    length: number,
  ): Promise<void> {
    const writer = upload.writers.get(index);
    if (writer) {
      writer.aborted = true;
      await writer.writing?.catch(() => undefined);
      upload.writers.delete(index);
    }
    if (upload.committed.has(index)) {
      if (await sameBytes(upload.dataPath, start, received.path, 0, length)) return;
      await this.appendLog(upload, `d ${index}\n`);
      upload.committed.delete(index);
      if (index < upload.hash.next) upload.hash.invalidate();
    }
    const out = await open(upload.dataPath, constants.O_WRONLY | constants.O_CREAT, 0o600);
    try {
      await copyRange(received.path, out, start, length);
      await out.datasync();
    } finally {
      await out.close();
    }
  }

  /** Joined mode: a declared dzchunkbyteoffset must agree with the chunks on either side. */
  private checkJoinedOffset(upload: Upload, fields: ChunkFields, bytes: number): void {
    const start = joinedStart(fields, (i) => upload.committed.get(i)?.length);
    const next = upload.committed.get(fields.index + 1);
    if (start !== undefined) checkJoinedEnd(fields.index, start, bytes, next?.offset);
  }

  /** Every chunk is in: the content is made, checked, handed to `publish`, and the upload ends. */
  private async complete(
    shareId: string,
    upload: Upload,
    publish: (content: NewContent) => Promise<string | undefined>,
  ): Promise<'complete'> {
    const { total, layout } = upload.meta;
    let source: string;
    if (layout) {
      source = upload.dataPath;
      const handle = await open(source, constants.O_RDWR | constants.O_CREAT, 0o600);
      try {
        await handle.truncate(layout.fileSize);
        await handle.datasync();
      } finally {
        await handle.close();
      }
    } else if (total === 1) {
      source = join(upload.dir, '0'); // one chunk is the content already: nothing to copy
    } else {
      source = join(upload.dir, `j.${rand()}`);
      await this.join(upload, source);
    }
    const size = (await stat(source)).size;
    const short = declaredSizeError(size, upload.size);
    if (short) {
      await this.finish(upload);
      throw short;
    }
    const { sha256, recomputed } = await upload.hash.finish(total, {
      path: source,
      start: 0,
      end: size,
    });
    if (recomputed) this.log(`sha256 of ${upload.name} recomputed: its running hash was lost`);
    if (upload.sha256 && sha256 && upload.sha256 !== sha256) {
      await this.finish(upload);
      throw new ChunkRefusedError(
        'digest',
        `The uploaded bytes have sha256 ${sha256}, not the ${upload.sha256} that dzsha256 announced; the upload was discarded`,
      );
    }
    const blob = `${shareId}.${rand()}`;
    const target = join(this.contentDir, blob);
    await link(source, target);
    await fsyncDir(this.contentDir);
    await fault('complete.after-link');
    let replaced: string | undefined;
    try {
      replaced = await publish({ blob, size, sha256 });
    } catch (err) {
      // Whether the record names the content may be unknown (the database's answer was lost):
      // then it stays; a start removes it if no share names it.
      if (err instanceof OutcomeUnknownError) throw err;
      await rm(target, { force: true });
      if (source.includes(`${upload.dir}/j.`)) await rm(source, { force: true });
      throw err;
    }
    await fault('complete.after-publish');
    // Published: the upload is done, whatever follows. Closing it and removing the content it
    // replaced are housekeeping; if the disk refuses them (no inode left for the record), the
    // answer is still 201 and a start of the server finishes them.
    try {
      await this.finish(upload);
      await fault('complete.after-tombstone');
    } catch (err) {
      upload.state = 'done'; // stays in memory as finished: its late chunks are refused
      this.log(
        `could not close upload ${upload.name} after publishing it (${String(err)}); a restart will`,
      );
    }
    if (replaced && replaced !== blob)
      await this.removeContent(replaced).catch((err: unknown) =>
        this.log(`could not remove replaced content ${replaced} (${String(err)}); a restart will`),
      );
    return 'complete';
  }

  /** Joined mode with several chunks: copies them in index order into one new file. */
  private async join(upload: Upload, target: string): Promise<void> {
    const out = await open(target, 'wx', 0o600);
    try {
      let at = 0;
      for (let i = 0; i < upload.meta.total; i++) {
        const length = upload.committed.get(i)!.length;
        await copyRange(join(upload.dir, String(i)), out, at, length);
        at += length;
      }
      await out.datasync();
    } catch (err) {
      // A join the disk could not hold leaves no part of it behind.
      await out.close().catch(() => undefined);
      await rm(target, { force: true });
      throw err;
    } finally {
      await out.close().catch(() => undefined);
    }
  }

  /**
   * Ends an upload for good: a `done` record is made durable, everything else is removed. Late
   * chunks of it are refused from then on.
   */
  private async finish(upload: Upload): Promise<void> {
    upload.state = 'done';
    upload.hash.dispose();
    for (const writer of upload.writers.values()) writer.aborted = true;
    await (await open(join(upload.dir, 'done'), 'w', 0o600)).close();
    await fsyncDir(upload.dir);
    for (const name of await readdir(upload.dir))
      if (name !== 'done') await rm(join(upload.dir, name), { force: true, recursive: true });
    this.uploads.delete(upload.name);
  }

  /**
   * `finish`, or, when the disk has no room for the `done` record (no inode left), the upload's
   * folder goes whole, as `end` does. A start or a sweep that closes an upload must not fail on a
   * full disk: the server still serves downloads and removals there.
   */
  private async finishOrDrop(upload: Upload): Promise<void> {
    try {
      await this.finish(upload);
    } catch (err) {
      if (!isOutOfSpace(err)) throw err;
      this.uploads.delete(upload.name);
      await removeUploadDir(upload.dir);
    }
  }

  /**
   * Appends a line to the upload's log. `durable`: fsynced before this returns (a line that must
   * be on disk before the next step, such as `d` before its region is overwritten); otherwise
   * the caller makes it durable with `upload.logSync.sync()` before it acknowledges anything, so
   * that chunks arriving together share one fsync (group commit) and the lock is not held for it.
   */
  private async appendLog(upload: Upload, line: string, durable = true): Promise<void> {
    const handle = await open(join(upload.dir, 'log'), 'a', 0o600);
    try {
      const { size } = await handle.stat();
      try {
        await writeFully(handle, Buffer.from(line), null);
      } catch (err) {
        // Part of a line (a full disk) would join the next line into one that reads as
        // neither: the log is cut back to its last whole line.
        await handle.truncate(size).catch(() => undefined);
        throw err;
      }
      if (durable) await handle.datasync();
    } finally {
      await handle.close();
    }
  }

  // Uploads: finding, creating, loading

  private uploadName(shareId: string, uploadId: string): string {
    const key = createHash('sha256').update(uploadId).digest('hex').slice(0, 40);
    return `${shareId}.${key}`;
  }

  /** Runs `task` on an upload under its lock; creates the upload if it is new and `create`. */
  private withUpload<T>(
    shareId: string,
    fields: ChunkFields,
    create: boolean,
    task: (upload: Upload) => Promise<T>,
  ): Promise<T> {
    const name = this.uploadName(shareId, fields.uploadId);
    return this.locks.run(name, async () => {
      let upload: Upload | null | undefined = this.uploads.get(name);
      if (!upload) {
        upload = await this.load(name);
        if (!upload && create) upload = await this.create(name, fields);
        if (!upload) throw new ChunkRefusedError('finished', 'No such upload');
        if (upload.state === 'open') this.uploads.set(name, upload);
      }
      if (upload.state !== 'open')
        throw new ChunkRefusedError('finished', 'This upload has already finished');
      try {
        checkChunkFields(
          { ...upload.meta, size: upload.size, chunkSize: upload.chunkSize },
          fields,
        );
        return await task(upload);
      } finally {
        await this.dropIfUnused(upload);
      }
    });
  }

  private async create(name: string, fields: ChunkFields): Promise<Upload> {
    const dir = join(this.uploadsDir, name);
    const meta: Meta = {
      v: 2,
      total: fields.total,
      layout: fields.layout ?? null,
      created: Date.now(),
    };
    await rm(dir, { recursive: true, force: true }); // what an unreadable earlier attempt left
    await mkdir(dir, { mode: 0o700 });
    const upload = new Upload(name, dir, meta, new UploadHash(this.hasher));
    upload.persisted = false; // `meta` is written with the first committed chunk
    return upload;
  }

  /**
   * Reads an upload back from disk: null when there is none (or its record is empty or cut
   * short, which counts as none); a finished one when only its `done` record is left.
   */
  private async load(name: string): Promise<Upload | null> {
    const dir = join(this.uploadsDir, name);
    let names: string[];
    try {
      names = await readdir(dir);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw err;
    }
    const hash = new UploadHash(this.hasher);
    if (names.includes('done')) {
      // Finished; what the crash kept `finish` from removing goes now.
      for (const entry of names)
        if (entry !== 'done') await rm(join(dir, entry), { force: true, recursive: true });
      const upload = new Upload(name, dir, { v: 2, total: 0, layout: null, created: 0 }, hash);
      upload.state = 'done';
      return upload;
    }
    let meta = parseMeta(await readFile(join(dir, 'meta'), 'utf8').catch(() => ''));
    if (!meta && names.includes('total')) meta = await convertLegacy(dir, names);
    if (!meta) {
      await rm(dir, { recursive: true, force: true });
      return null;
    }
    const upload = new Upload(name, dir, meta, hash);
    const touched = await Promise.all(
      [dir, join(dir, 'log')].map((p) =>
        stat(p).then(
          (i) => i.mtimeMs,
          () => 0,
        ),
      ),
    );
    upload.lastActivity = Math.max(...touched);
    const log = await readFile(join(dir, 'log')).catch(() => Buffer.alloc(0));
    // A line the crash cut short was never acknowledged; it goes, so that the next line
    // appended cannot join it into one that reads as neither.
    const whole = log.lastIndexOf(0x0a) + 1;
    if (whole < log.length) await truncate(join(dir, 'log'), whole);
    for (const line of log.subarray(0, whole).toString('latin1').split('\n'))
      readLogLine(upload, line);
    // Leftovers of requests cut by the crash; a content file linked elsewhere means the
    // completion was published (start-up removed unpublished links), so the upload is done.
    let published = false;
    for (const entry of await readdir(dir)) {
      const path = join(dir, entry);
      if (entry.startsWith('s.') || entry.endsWith('.tmp')) await rm(path, { force: true });
      else if (entry === 'data' || entry.startsWith('j.') || (entry === '0' && meta.total === 1)) {
        const info = await stat(path);
        if (info.nlink > 1) published = true;
        else if (entry.startsWith('j.')) await rm(path, { force: true });
      }
    }
    if (!meta.layout) {
      for (const [index, c] of upload.committed) {
        const size = await stat(join(dir, String(index))).then(
          (s) => s.size,
          () => -1,
        );
        if (size !== c.length) upload.committed.delete(index);
      }
    }
    if (published) await this.finishOrDrop(upload);
    else if (upload.committed.size === 0) {
      // No chunk of it was ever acknowledged (a crash or a full disk before the first one's
      // line): it leaves nothing, and counts against no bound on unfinished uploads.
      await rm(dir, { recursive: true, force: true });
      return null;
    }
    return upload;
  }

  // Reading and removing

  async open(blob: string): Promise<ContentReader | null> {
    let handle: FileHandle;
    try {
      handle = await open(join(this.contentDir, blob), 'r');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
      // content/ itself gone (a lost mount, the data directory moved away) may come back: the
      // storage is unavailable, not this content missing.
      if (!(await stat(this.contentDir).catch(() => null)))
        throw new StorageUnavailableError(
          `${this.contentDir} is not there (${(err as Error).message})`,
        );
      return null;
    }
    const info = await handle.stat().catch(async (err: unknown) => {
      await handle.close();
      throw err;
    });
    let streaming = false;
    return {
      size: info.size,
      mtimeMs: info.mtimeMs,
      stream(start, end) {
        streaming = true;
        return handle.createReadStream({ start, end, highWaterMark: PIECE, autoClose: true });
      },
      async writeTo(out, start, end, signal) {
        streaming = true;
        try {
          await writeFileRange(handle, out, start, end + 1, signal);
        } finally {
          await handle.close();
        }
      },
      async close() {
        if (!streaming) await handle.close();
      },
    };
  }

  async digest(blob: string): Promise<string> {
    const path = join(this.contentDir, blob);
    const { size } = await stat(path);
    const hash = this.hasher.create(size);
    await hash.updateFromFile(path, 0, size);
    return hash.digest();
  }

  async releasing(blob: string): Promise<void> {
    if (!isContentName(blob)) return;
    // Not synced: a mark a crash loses leaves the content set aside, never removed wrongly.
    await writeFile(join(this.removingDir, blob), '', { mode: 0o600 }).catch(() => undefined);
  }

  async removeContent(blob: string): Promise<void> {
    await rm(join(this.contentDir, blob), { force: true });
    if (isContentName(blob)) await rm(join(this.removingDir, blob), { force: true });
  }

  async removeUploads(shareId: string): Promise<void> {
    for (const name of await this.uploadDirs())
      if (name.startsWith(`${shareId}.`)) await this.end(name);
  }

  async removeUpload(shareId: string, uploadId: string): Promise<void> {
    await this.end(this.uploadName(shareId, uploadId));
  }

  /** Ends an upload, whatever its state, leaving only its `done` record. */
  private async end(name: string): Promise<void> {
    await this.locks.run(name, async () => {
      const upload = this.uploads.get(name);
      if (upload) {
        upload.state = 'done';
        upload.hash.dispose();
        for (const writer of upload.writers.values()) writer.aborted = true;
        this.uploads.delete(name);
      }
      const dir = join(this.uploadsDir, name);
      try {
        // A `done` record, as `finish` leaves: a chunk that passed its checks before the share
        // was handed over (or deleted) is refused, rather than starting the upload afresh.
        await (await open(join(dir, 'done'), 'w', 0o600)).close();
        await fsyncDir(dir);
        for (const entry of await readdir(dir))
          if (entry !== 'done') await rm(join(dir, entry), { force: true, recursive: true });
      } catch {
        // No room even for that (a full disk): all of it goes; the share's owner check
        // refuses such a chunk anyway.
        await removeUploadDir(dir);
      }
    });
  }

  async sweep(maxIdleMs: number): Promise<void> {
    const now = Date.now();
    for (const name of await this.uploadDirs()) {
      const dir = join(this.uploadsDir, name);
      await this.locks.run(name, async () => {
        const live = this.uploads.get(name);
        if (live && (live.writers.size > 0 || now - live.lastActivity < maxIdleMs)) return;
        const info = await stat(dir).catch(() => null);
        if (!info) return;
        const finished = await stat(join(dir, 'done')).catch(() => null);
        if (finished) {
          if (now - finished.mtimeMs > FINISHED_KEEP_MS)
            await rm(dir, { recursive: true, force: true });
          return;
        }
        const log = await stat(join(dir, 'log')).catch(() => null);
        const active = Math.max(info.mtimeMs, log?.mtimeMs ?? 0, live?.lastActivity ?? 0);
        if (now - active < maxIdleMs) return;
        const upload = live ?? (await this.load(name));
        if (upload && upload.state === 'open') await this.finishOrDrop(upload);
        else if (!upload) await rm(dir, { recursive: true, force: true });
      });
    }
  }

  async close(): Promise<void> {
    for (const upload of this.uploads.values()) upload.hash.dispose();
    this.uploads.clear();
  }
}

function parseMeta(text: string): Meta | null {
  try {
    const meta = JSON.parse(text) as Meta;
    const layoutOk =
      meta.layout === null ||
      (typeof meta.layout === 'object' &&
        Number.isSafeInteger(meta.layout.chunkSize) &&
        Number.isSafeInteger(meta.layout.fileSize));
    if (meta.v === 2 && Number.isSafeInteger(meta.total) && meta.total >= 1 && layoutOk)
      return meta;
  } catch {
    // empty or cut short: counts as absent
  }
  return null;
}

/**
 * Removes an upload's folder so that a crash midway cannot leave a log of committed chunks
 * without their bytes (an upload that would then publish a hole): its record goes first, and a
 * folder without one is no upload (`load`).
 */
async function removeUploadDir(dir: string): Promise<void> {
  for (const record of ['meta', 'total']) await rm(join(dir, record), { force: true });
  await fsyncDir(dir).catch(() => undefined);
  await rm(dir, { recursive: true, force: true });
}

/**
 * An upload left by fshare 0.1 (`total`, chunks as `<index>` files or `<index>.at` records
 * pointing into `data`): rewritten as a joined-mode upload with the same chunks.
 */
async function convertLegacy(dir: string, names: string[]): Promise<Meta | null> {
  const total = Number((await readFile(join(dir, 'total'), 'utf8').catch(() => '')).trim());
  if (!Number.isSafeInteger(total) || total < 1) return null;
  const lines: string[] = [];
  for (const name of names) {
    const at = /^(\d+)\.at$/.exec(name);
    if (at) {
      const [offset, length] = (await readFile(join(dir, name), 'utf8')).split(' ').map(Number);
      if (!Number.isSafeInteger(offset) || !Number.isSafeInteger(length)) continue;
      const out = await open(join(dir, `${at[1]}.tmp`), 'w', 0o600);
      try {
        await copyRange(join(dir, 'data'), out, 0, length!, offset!);
        await out.datasync();
      } finally {
        await out.close();
      }
      await rename(join(dir, `${at[1]}.tmp`), join(dir, at[1]!));
      lines.push(`c ${at[1]} ${length} ${offset}\n`);
    } else if (/^\d+$/.test(name)) {
      lines.push(`c ${name} ${(await stat(join(dir, name))).size} -\n`);
    }
  }
  const meta: Meta = { v: 2, total, layout: null, created: Date.now() };
  await writeAtomically(join(dir, 'log'), lines.join(''));
  await writeAtomically(join(dir, 'meta'), JSON.stringify(meta));
  for (const name of names)
    if (name === 'total' || name === 'data' || name.endsWith('.at'))
      await rm(join(dir, name), { force: true });
  await fsyncDir(dir);
  return meta;
}

/** Replaces a small file whole: a temp file, fsynced, renamed over it (the caller fsyncs the dir). */
async function writeAtomically(path: string, text: string): Promise<void> {
  const handle = await open(`${path}.tmp`, 'w', 0o600);
  try {
    await writeFully(handle, Buffer.from(text), 0);
    await handle.datasync();
  } finally {
    await handle.close();
  }
  await rename(`${path}.tmp`, path);
}

async function writeMeta(dir: string, meta: Meta): Promise<void> {
  await writeAtomically(join(dir, 'meta'), JSON.stringify(meta));
  await fsyncDir(dir);
}

/** Copies `length` bytes of a file (from `from`) to `out` at `at`, 1 MiB at a time. */
async function copyRange(
  path: string,
  out: FileHandle,
  at: number,
  length: number,
  from = 0,
): Promise<void> {
  const input = await open(path, 'r');
  const buffer = Buffer.allocUnsafe(Math.min(PIECE, Math.max(1, length)));
  try {
    let done = 0;
    while (done < length) {
      const { bytesRead } = await input.read(
        buffer,
        0,
        Math.min(buffer.length, length - done),
        from + done,
      );
      if (bytesRead === 0) throw new Error(`${path} ended after ${done} of ${length} bytes`);
      await writeFully(out, buffer.subarray(0, bytesRead), at + done);
      done += bytesRead;
    }
  } finally {
    await input.close();
  }
}

/** True when `length` bytes at `a`:`aStart` equal those at `b`:`bStart`. */
async function sameBytes(
  a: string,
  aStart: number,
  b: string,
  bStart: number,
  length: number,
): Promise<boolean> {
  const [ha, hb] = await Promise.all([open(a, 'r'), open(b, 'r')]);
  try {
    if ((await ha.stat()).size < aStart + length) return false;
    const ba = Buffer.allocUnsafe(Math.min(PIECE, Math.max(1, length)));
    const bb = Buffer.allocUnsafe(ba.length);
    for (let done = 0; done < length;) {
      const n = Math.min(ba.length, length - done);
      const [ra, rb] = await Promise.all([
        ha.read(ba, 0, n, aStart + done),
        hb.read(bb, 0, n, bStart + done),
      ]);
      if (ra.bytesRead !== n || rb.bytesRead !== n || !ba.subarray(0, n).equals(bb.subarray(0, n)))
        return false;
      done += n;
    }
    return true;
  } finally {
    await Promise.all([ha.close(), hb.close()]);
  }
}

const LOG_LINE =
  /^(?:h ([0-9a-f]{64})|s (\d{1,15})|k (\d{1,15})|d (\d{1,15})|c (\d{1,15}) (\d{1,15}) (\d{1,15}|-))$/;

/**
 * Applies one line of an upload's log: `h SHA256` (the dzsha256 announced), `s SIZE` (the
 * dztotalfilesize announced, joined mode), `k SIZE` (the dzchunksize announced, joined mode),
 * `c INDEX LENGTH OFFSET|-` (a committed chunk), `d INDEX` (a chunk withdrawn). Anything else (a
 * line from a damaged log) is skipped: it never records a chunk that was not acknowledged. (A
 * server older than the `s` and `k` lines skips them so, and holds the upload to them no more.)
 */
function readLogLine(upload: Upload, line: string): void {
  const m = LOG_LINE.exec(line);
  if (!m) return;
  const [, sha256, size, chunkSize, withdrawn, index, length, offset] = m;
  if (sha256) upload.sha256 = sha256;
  else if (size !== undefined) upload.size = Number(size);
  else if (chunkSize !== undefined) upload.chunkSize = Number(chunkSize);
  else if (withdrawn !== undefined) upload.committed.delete(Number(withdrawn));
  else if (Number(index) < upload.meta.total)
    upload.committed.set(Number(index), {
      length: Number(length),
      offset: offset === '-' ? undefined : Number(offset),
    });
}
