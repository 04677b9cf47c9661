import { setMaxListeners } from 'node:events';
import { hostname } from 'node:os';
import { randomBytes, randomUUID } from 'node:crypto';
import { constants as fsConstants } from 'node:fs';
import { access, open, stat, statfs, type FileHandle } from 'node:fs/promises';
import { basename, resolve } from 'node:path';
import type { Writable } from 'node:stream';
import type { Share } from '../shared/types.js';
import {
  createFile,
  deleteFile,
  getFile,
  idFromUrl,
  lockFile,
  uploadState,
  whoami,
} from './api.js';
import {
  ApiError,
  ClientInputError,
  UnsupportedError,
  unknownFieldRefused,
  VerificationError,
} from './errors.js';
import { send, toApiError, type ApiClient, type Body } from './http.js';
import { UNSAFE_CHARACTERS } from './filename.js';
import { fileHasher } from './hashing.js';
import { createChunkLimiter, type Limiter } from './limit.js';
import { sharePath, shareUrl } from './refs.js';
import { ShortFileError, writeFileRange } from '../shared/copy.js';
import { systemErrorText } from '../shared/syserr.js';
import { shellWord } from '../shared/shell.js';
import { processAlive } from '../shared/owned-temp.js';

export const DEFAULT_CHUNK_SIZE = 8 * 1024 * 1024;
export const DEFAULT_PARALLEL = 4;
/** File bytes are read in pieces of this size. */
const READ_PIECE = 1024 * 1024;
/**
 * The hash is asked for in pieces of this size, two at a time: an upload that fails stops
 * hashing within two pieces, and its file can then be closed (the hashing thread reads it too).
 */
const HASH_PIECE = 64 * 1024 * 1024;

export interface ChunkOptions {
  /** Bytes per chunk; default 8 MiB. */
  chunkSize?: number;
  /** Chunk requests in flight at once; default 4. Ignored when `limiter` is given. */
  parallel?: number;
  /** Shares one concurrency budget between several uploads. */
  limiter?: Limiter;
  /** Called with the bytes sent so far (of the chunks this run sends), and the file's size. */
  onProgress?: (sentBytes: number, totalBytes: number) => void;
  /** Told what the upload decided on its way (resumed, started over, could not verify). */
  onNotice?: (line: string) => void;
  /** Where unfinished uploads are remembered, so that running the same upload again resumes. */
  resume?: ResumeStore;
  /** Start a fresh upload even if an unfinished one of this file is remembered. */
  restart?: boolean;
  /**
   * The file's sha256, when the caller has just computed it (push): the file is not hashed a
   * second time. Still proved: the server checks the bytes it gets against it (dzsha256), and a
   * file changed since is refused with 422.
   */
  knownSha256?: string;
  /**
   * Replace only the content with this ETag: sent as If-Match with every chunk. fshare serve
   * refuses with 412 (an ApiError) if the share holds other content by then; servers without
   * the extension ignore it.
   */
  ifMatch?: string;
  signal?: AbortSignal;
}

/** An upload that did not finish, remembered so that the same command can resume it. */
export interface UploadRecord {
  server: string;
  /**
   * null until the create is answered: the record is written first, with `create_key`, so a run
   * killed before the answer came finds that share again by sending the same key.
   */
  share_id: string | null;
  /** The Idempotency-Key of the create that makes (or made) the share. */
  create_key?: string;
  dzuuid: string;
  /** Absolute path of the file, and what identified its content when the upload began. */
  path: string;
  size: number;
  mtimeMs: number;
  /** Absent in records of fshares before it (they resume on size, mtime and inode alone). */
  ctimeMs?: number;
  ino: number;
  chunk_size: number;
  /** create: POST into a share this upload made; replace: PUT over a share's content. */
  mode: 'create' | 'replace';
  file_name: string;
  started: string;
  /**
   * The process (and host) running the upload: a record whose process is still alive belongs
   * to an upload in progress, which another run of the same command must not take over.
   */
  pid?: number;
  host?: string;
  /** The file was a private copy of standard input (`upload -`), gone once the command ends. */
  stdin?: boolean;
}

/** Whether a record is of an upload of standard input (older fshares: by its copy's path). */
export function fromStdin(r: UploadRecord): boolean {
  return r.stdin === true || /[/\\]fshare-stdin-[^/\\]+[/\\]stdin$/.test(r.path);
}

/** True when another live process on this host is running the upload of this record. */
export function busyElsewhere(r: UploadRecord): boolean {
  if (!r.pid || r.pid === process.pid || (r.host !== undefined && r.host !== hostname()))
    return false;
  return processAlive(r.pid);
}

export interface ResumeStore {
  list(): Promise<UploadRecord[]>;
  save(record: UploadRecord): Promise<void>;
  remove(record: UploadRecord): Promise<void>;
  /**
   * Takes a record for this process, as one step: the record as it is now, saved with this
   * process's pid, or undefined when it is gone or another live process holds it. Two runs of
   * one interrupted upload both found its record free and both resumed it.
   */
  claim?(record: UploadRecord): Promise<UploadRecord | undefined>;
}

/** A remembered upload taken for this process; undefined when another live one has it. */
async function claimRecord(
  store: ResumeStore | undefined,
  record: UploadRecord,
): Promise<UploadRecord | undefined> {
  if (!store?.claim) return busyElsewhere(record) ? undefined : record;
  return store.claim(record);
}

/** How an upload ended, and what it proved. */
export interface ContentResult {
  size: number;
  chunks: number;
  /** The sha256 the client computed from the file while it read it. */
  sha256: string;
  /** True when the server's own sha256 of the stored content was compared and matched. */
  verified: boolean;
  /** Chunks this run did not send because the server already held them (a resumed upload). */
  resumedChunks: number;
  /** The bytes of those chunks. */
  resumedBytes: number;
}

/**
 * File systems whose files' sizes are not known until they are read (Linux's magic numbers):
 * proc, sysfs, debugfs, tracefs, securityfs, cgroup, cgroup2, configfs. /proc/cpuinfo says 0
 * bytes and was shared empty, with exit 0; a sysfs file says 4096 and failed as "changed while
 * it was uploading".
 */
const SIZELESS_FS = new Set([
  0x9fa0, 0x62656572, 0x64626720, 0x74726163, 0x73636673, 0x27e0eb, 0x63677270, 0x62656570,
]);

async function refuseSizeless(path: string): Promise<void> {
  if (process.platform !== 'linux') return;
  const fs = await statfs(path).catch(() => undefined);
  if (fs && SIZELESS_FS.has(fs.type))
    throw new ClientInputError(
      `${path} is a kernel file, whose size is not known until it is read; upload it from standard input: fshare upload - -n ${shellWord(basename(path))} < ${shellWord(path)}`,
    );
}

/** Size of a local regular file, with a clear error for a missing path or a directory. */
export async function localFileSize(path: string): Promise<number> {
  try {
    const info = await stat(path);
    if (!info.isFile()) throw new ClientInputError(`not a regular file: ${path}`);
    await refuseSizeless(path);
    // Readable, before any share is made for it (an unreadable file used to make an empty
    // share first, then fail as "changed while it was uploading").
    await access(path, fsConstants.R_OK);
    return info.size;
  } catch (err) {
    throw localFileError(err, path);
  }
}

interface LocalFile {
  path: string;
  size: number;
  mtimeMs: number;
  ctimeMs: number;
  ino: number;
  dev: number;
}

/**
 * A file being uploaded, open once: its chunks and its hash are read through this one
 * descriptor, so what is hashed is what is sent, whatever the path names meanwhile.
 */
interface OpenFile extends LocalFile {
  handle: FileHandle;
}

function localFileError(err: unknown, path: string): unknown {
  if (err instanceof ClientInputError) return err;
  const code = (err as { code?: string }).code;
  // An empty argument (`upload "$UNSET"`) is shown, not left as nothing after the colon.
  if (code === 'ENOENT') return new ClientInputError(`no such file: ${path || '""'}`);
  if (code === 'EACCES') return new ClientInputError(`permission denied: ${path}`);
  return err;
}

/** Opens a local regular file for an upload (O_NONBLOCK: a FIFO named by mistake never hangs). */
async function openLocal(path: string): Promise<OpenFile> {
  let handle: FileHandle | undefined;
  try {
    handle = await open(path, fsConstants.O_RDONLY | (fsConstants.O_NONBLOCK ?? 0));
    const info = await handle.stat();
    if (!info.isFile()) throw new ClientInputError(`not a regular file: ${path}`);
    await refuseSizeless(path);
    return {
      path: resolve(path),
      size: info.size,
      mtimeMs: info.mtimeMs,
      ctimeMs: info.ctimeMs,
      ino: info.ino,
      dev: info.dev,
      handle,
    };
  } catch (err) {
    await handle?.close().catch(() => undefined);
    throw localFileError(err, path);
  }
}

/**
 * The sha256 of an open file, read through its descriptor on the hashing thread, two pieces
 * asked for at a time. Once `stop` says so it asks for no more, waits for what it asked (so the
 * file may be closed then) and fails.
 */
async function hashOpen(file: OpenFile, stop: { stopped: boolean } = { stopped: false }) {
  const hash = fileHasher().create(file.size);
  let pending: Promise<void> | undefined;
  try {
    for (let pos = 0; pos < file.size; pos += HASH_PIECE) {
      if (stop.stopped) throw new Error('the upload stopped');
      const next = hash.updateFromHandle(file.handle, pos, Math.min(file.size, pos + HASH_PIECE));
      next.catch(() => undefined); // awaited below
      await pending;
      pending = next;
    }
    await pending;
  } catch (err) {
    await pending?.catch(() => undefined);
    hash.dispose();
    throw err;
  }
  return hash.digest();
}

/** Whether the path no longer names the file as it was opened: another file, or written to. */
async function changedSince(file: OpenFile): Promise<boolean> {
  const now = await stat(file.path).catch(() => null);
  return (
    !now ||
    now.dev !== file.dev ||
    now.ino !== file.ino ||
    now.size !== file.size ||
    now.mtimeMs !== file.mtimeMs
  );
}

/** The file changed while it was being uploaded: what was sent is not one version of it. */
export class FileChangedError extends Error {
  override readonly name = 'FileChangedError';
  constructor(path: string, options?: { cause?: unknown }) {
    super(`${path} changed while it was uploading; run the command again`, options);
  }
}

/**
 * One chunk's multipart body, written by hand: the fields, the file's bytes [start, end) read in
 * 1 MiB pieces, and, last, `trailer` fields whose values may still be coming (the whole file's
 * sha256 is known only once the file has been read). Its exact length is known up front.
 */
function chunkBody(
  fields: Record<string, string>,
  file: { handle: FileHandle; path: string; start: number; end: number; name: string },
  trailer: Record<string, Promise<string>>,
  trailerLength: Record<string, number>,
): Body {
  // As long as RFC 2046 allows (70 characters): servers that find the boundary with
  // Boyer-Moore-Horspool, as busboy does (fshare serve, under multer), skip that far per step.
  // One 512 MiB body cost fshare serve 5–6 % less CPU than with a 31-character boundary
  // (bench/README.md, "the upload floor").
  const boundary = `----------fshare${randomBytes(27).toString('hex')}`;
  const part = (name: string) =>
    `--${boundary}\r\nContent-Disposition: form-data; name="${name}"\r\n\r\n`;
  const head = Buffer.from(
    Object.entries(fields)
      .map(([name, value]) => `${part(name)}${value}\r\n`)
      .join('') +
      `--${boundary}\r\nContent-Disposition: form-data; name="upload"; ` +
      // Control characters (a local file named `esc\x1b.txt`) break a part's header: busboy
      // refused the whole body. The name here is informative only; the share's is in file_name.
      `filename="${file.name.replace(/["\\\x00-\x1f\x7f]/g, '_')}"\r\n` +
      'Content-Type: application/octet-stream\r\n\r\n',
  );
  const end = `--${boundary}--\r\n`;
  let tailLength = 2 + end.length;
  for (const name of Object.keys(trailer))
    tailLength += part(name).length + trailerLength[name]! + 2;
  return {
    length: head.length + (file.end - file.start) + tailLength,
    type: `multipart/form-data; boundary=${boundary}`,
    async write(out: Writable) {
      await writeTo(out, head);
      await writeFileRangeOf(out, file.handle, file.path, file.start, file.end);
      let tail = '\r\n';
      for (const [name, value] of Object.entries(trailer))
        tail += `${part(name)}${await value}\r\n`;
      await writeTo(out, Buffer.from(tail + end));
    },
  };
}

/** Writes and resolves once the bytes are handed on (the buffer may then be used again). */
function writeTo(out: Writable, data: Buffer): Promise<void> {
  return new Promise((resolve, reject) =>
    out.write(data, (err) => (err ? reject(err) : resolve())),
  );
}

/**
 * Writes bytes [start, end) of the open file (shared/copy.ts). A file that is shorter than it
 * was has changed while uploading: that is said in those words (and the request is cut, so the
 * server never waits for bytes that will not come).
 */
async function writeFileRangeOf(
  out: Writable,
  handle: FileHandle,
  path: string,
  start: number,
  end: number,
) {
  if (end <= start) return;
  try {
    await writeFileRange(handle, out, start, end);
  } catch (err) {
    throw err instanceof ShortFileError ? new FileChangedError(path, { cause: err }) : err;
  }
}

interface Plan {
  uploadId: string;
  chunkSize: number;
  total: number;
  /** Chunks the server already holds (a resumed upload). */
  held: Set<number>;
  record?: UploadRecord;
  /** Chunks this run had stored (answered 200 or 201). */
  stored?: number;
}

/**
 * What to send: a fresh upload, or the rest of one this client began before (same server, share,
 * file, size, modification time and inode), asking the server which chunks it holds.
 */
async function plan(
  client: ApiClient,
  id: string,
  file: LocalFile,
  mode: 'create' | 'replace',
  chunkSize: number,
  options: ContentOptions,
  fileName: string,
): Promise<Plan> {
  const fresh = (): Plan => ({
    uploadId: randomUUID(),
    chunkSize,
    total: Math.max(1, Math.ceil(file.size / chunkSize)),
    held: new Set(),
  });
  // A share uploadFile has just made, with its record already kept (or said not to be).
  if (options.fresh)
    return { ...fresh(), uploadId: options.fresh.uploadId, record: options.fresh.record };
  const found = (await options.resume?.list())?.find(
    (r) =>
      r.server === client.server &&
      r.share_id === id &&
      r.path === file.path &&
      r.mode === mode &&
      !busyElsewhere(r),
  );
  const remembered = found && !options.restart ? await claimRecord(options.resume, found) : found;
  let result = fresh();
  if (remembered && !options.restart) {
    const same =
      remembered.size === file.size &&
      remembered.mtimeMs === file.mtimeMs &&
      // An edit whose mtime was put back still changes the ctime (found from outside: the run
      // after it resumed, and the server refused the whole, exit 7; push checks it too).
      (remembered.ctimeMs === undefined || remembered.ctimeMs === file.ctimeMs) &&
      remembered.ino === file.ino;
    const state = same ? await uploadState(client, id, remembered.dzuuid).catch(() => null) : null;
    if (state && state.total === Math.max(1, Math.ceil(file.size / remembered.chunk_size))) {
      result = {
        uploadId: remembered.dzuuid,
        chunkSize: remembered.chunk_size,
        total: state.total,
        held: new Set(state.received),
      };
      options.onNotice?.(
        `resuming the upload of ${file.path}: the server holds ${state.received.length} of ${state.total} chunks`,
      );
    } else
      options.onNotice?.(
        same
          ? `the server cannot resume the earlier upload of ${file.path}; starting over`
          : `${file.path} changed since the earlier upload began; starting over`,
      );
    if (!result.held.size) await options.resume?.remove(remembered);
  }
  if (options.resume && result.held.size === 0)
    result.record = newRecord(client, id, file, mode, result, fileName);
  else if (remembered && result.held.size)
    // Taken over: this process runs it now.
    result.record = { ...remembered, pid: process.pid, host: hostname() };
  if (result.record) result.record = await keepRecord(result.record, options);
  return result;
}

function newRecord(
  client: ApiClient,
  id: string | null,
  file: LocalFile,
  mode: 'create' | 'replace',
  p: { uploadId: string; chunkSize: number },
  fileName: string,
): UploadRecord {
  return {
    server: client.server,
    share_id: id,
    dzuuid: p.uploadId,
    path: file.path,
    size: file.size,
    mtimeMs: file.mtimeMs,
    ctimeMs: file.ctimeMs,
    ino: file.ino,
    chunk_size: p.chunkSize,
    mode,
    file_name: fileName,
    started: new Date().toISOString(),
    pid: process.pid,
    host: hostname(),
  };
}

/**
 * Saves a record; undefined when it cannot be. The record only makes a later run resumable: a
 * full or read-only disk under it must not stop the upload (nor leave an empty share that no
 * record names). It goes on, and says so.
 */
async function keepRecord(
  record: UploadRecord,
  options: ChunkOptions,
): Promise<UploadRecord | undefined> {
  try {
    await options.resume!.save(record);
    return record;
  } catch (err) {
    options.onNotice?.(
      `cannot keep a record to resume this upload (${systemErrorText(err) ?? (err as Error).message}); ` +
        `it goes on, but could not be resumed if interrupted`,
    );
    return undefined;
  }
}

export interface ContentOptions extends ChunkOptions {
  /** POST for a share that has no content yet, PUT to replace existing content. */
  mode: 'create' | 'replace';
  /** The name the upload is remembered under (the share's file name). */
  fileName?: string;
  /** @internal The file, already open (uploadFile); else it is opened here. */
  file?: OpenFile;
  /** @internal A fresh upload into the share uploadFile just made, and its record (if kept). */
  fresh?: { uploadId: string; record?: UploadRecord };
}

/**
 * Uploads a local file as the content of share `id` with the dz* chunk protocol, proving what
 * was stored: the file is hashed (on another thread) while its chunks go up; the whole file's
 * sha256 travels after the data of the last chunk sent (dzsha256), so fshare serve refuses a
 * mismatch before it replaces anything; afterwards the server's own sha256 is compared. Against a
 * server without digests the upload counts as done only when a chunk was answered 201.
 */
export async function uploadContent(
  client: ApiClient,
  id: string,
  path: string,
  options: ContentOptions,
): Promise<ContentResult> {
  const chunkSize = options.chunkSize ?? DEFAULT_CHUNK_SIZE;
  if (!Number.isSafeInteger(chunkSize) || chunkSize < 1)
    throw new ClientInputError(`chunk size must be a positive number of bytes`);
  const file = options.file ?? (await openLocal(path));
  try {
    return await uploadOpen(client, id, path, file, chunkSize, options);
  } finally {
    if (!options.file) await file.handle.close().catch(() => undefined);
  }
}

async function uploadOpen(
  client: ApiClient,
  id: string,
  path: string,
  file: OpenFile,
  chunkSize: number,
  options: ContentOptions,
): Promise<ContentResult> {
  const fileName = options.fileName ?? defaultShareName(path);
  const p = await plan(client, id, file, options.mode, chunkSize, options, fileName);
  const stopHashing = { stopped: false };
  const digest =
    options.knownSha256 === undefined
      ? hashOpen(file, stopHashing)
      : Promise.resolve(options.knownSha256);
  digest.catch(() => undefined);
  let sha256: string;
  let verified: boolean;
  let sent = false;
  try {
    const outcome = await sendChunks(client, id, file, p, digest, options).catch(
      async (err: unknown) => {
        // The server's sha256 of the bytes sent refused them: a file written to while it was
        // read says so, not "the uploaded bytes have sha256 …" (exit 7) as if the wire lost them.
        if (err instanceof ApiError && err.status === 422 && (await changedSince(file)))
          throw new FileChangedError(path, { cause: err });
        throw err;
      },
    );
    sent = true;
    sha256 = await digest;
    // The path must still name the file that was read (not another moved there), unchanged.
    if (await changedSince(file)) throw new FileChangedError(path);
    verified = await confirm(client, id, path, sha256, file.size, outcome, options);
  } catch (err) {
    // The hashing thread reads the file too: it stops before the file may be closed.
    stopHashing.stopped = true;
    await digest.catch(() => undefined);
    if (sent && err instanceof Error) afterLastChunk.add(err);
    // Refused or disproved: nothing to resume. (An interruption keeps its record, and so does
    // a token ended under an upload: its share is still there, to finish or clean up.)
    // A replacement stopped by a lock (423) after the server stored some of its chunks keeps
    // its record too: the server keeps those chunks, and the same command once the share is
    // unlocked sends only the others (it started over, while they held the quota for a day).
    const lockedHalfway =
      options.mode === 'replace' &&
      err instanceof ApiError &&
      err.status === 423 &&
      p.held.size + (p.stored ?? 0) > 0;
    const over =
      (refusedForGood(err) &&
        !(options.mode === 'create' && (unauthorized(err) || forbidden(err))) &&
        !lockedHalfway) ||
      err instanceof VerificationError ||
      err instanceof FileChangedError;
    if (over && p.record) await options.resume?.remove(p.record);
    if (lockedHalfway && p.record && err instanceof Error) recordKept.add(err);
    throw err;
  }
  if (p.record) await options.resume?.remove(p.record);
  let resumedBytes = 0;
  for (const i of p.held)
    resumedBytes += Math.min(file.size, (i + 1) * p.chunkSize) - i * p.chunkSize;
  return {
    size: file.size,
    chunks: p.total,
    sha256,
    verified,
    resumedChunks: p.held.size,
    resumedBytes,
  };
}

interface Sent {
  /** A chunk was answered 201: the upload completed. */
  completed: boolean;
  /**
   * A chunk sent again (an earlier copy may have reached the server, its answer lost) was refused
   * as if the upload had finished: POST 423 (the share has content), PUT 409 (the upload is
   * over). The lost answer may have been the 201: the share's sha256 tells (confirm).
   */
  refusedAgain?: ApiError;
  /**
   * A chunk sent once was refused with 409 (its upload is over, or another copy of the chunk was
   * taken: one still on its way from an interrupted run, say). The rest is sent all the same; if
   * the share's sha256 does not then prove the upload, this refusal is what is reported.
   */
  refused?: ApiError;
  /**
   * A chunk of a new share was refused with 423: the share has content already (another run of
   * this same upload may have completed it) or was locked. The rest is not sent.
   */
  stopped?: boolean;
  /**
   * What the 201 said it published (fshare serve says so): the proof of this upload, which a
   * GET afterwards is not, since another upload to the share may have replaced it by then.
   */
  published?: { sha256: string; size: number };
}

/** The sha256 and size in a 201's answer, when the server gives both (fshare serve does). */
function publishedBy(text: string): Sent['published'] {
  try {
    const body = JSON.parse(text) as { sha256?: unknown; size?: unknown };
    if (
      typeof body.sha256 === 'string' &&
      /^[0-9a-f]{64}$/i.test(body.sha256) &&
      Number.isSafeInteger(body.size)
    )
      return { sha256: body.sha256.toLowerCase(), size: body.size as number };
  } catch {
    // not JSON: the reference server's answer may be anything; the GET in confirm() tells
  }
  return undefined;
}

/**
 * Errors after which the share this upload created is kept, not deleted: it has content that was
 * not proved to be other bytes of this upload (a 201 lost on the way, or someone else's).
 */
const sharesWithContent = new WeakSet<Error>();

/** Errors that came once every chunk had been sent (the share may have its content then). */
const afterLastChunk = new WeakSet<Error>();

/** Errors after which the upload's record was kept on purpose, to resume or clean it up later. */
const recordKept = new WeakSet<Error>();

/**
 * True when the upload that failed with `err` left its share and its record (a 401: the token
 * ended on the way): running it again once signed in goes on, `fshare uploads clean` gives up.
 */
export function leftToResume(err: unknown): boolean {
  return err instanceof Error && recordKept.has(err);
}

/** Errors after which the share is left, but no record of it could be kept (a full disk). */
const unrecorded = new WeakSet<Error>();

/**
 * True when the upload that failed with `err` cannot be resumed: its share was left, but no
 * record of it could be kept, so a run again would make another share (the line names it).
 */
export function leftUnrecorded(err: unknown): boolean {
  return err instanceof Error && unrecorded.has(err);
}

function forbidden(err: unknown): boolean {
  return err instanceof ApiError && err.status === 403;
}

function unauthorized(err: unknown): boolean {
  return err instanceof ApiError && err.status === 401;
}

/** Sends every chunk the server does not hold yet, in parallel; the last one carries dzsha256. */
async function sendChunks(
  client: ApiClient,
  id: string,
  file: OpenFile,
  p: Plan,
  digest: Promise<string>,
  options: ContentOptions,
): Promise<Sent> {
  const method = options.mode === 'create' ? 'POST' : 'PUT';
  const limit = options.limiter ?? createChunkLimiter(options.parallel ?? DEFAULT_PARALLEL);
  const abort = new AbortController();
  // Every chunk request listens to it until it ends, up to 2 × --parallel − 1 of them at once (and
  // their retries' sleeps): bounded by the limiter, not a leak for Node to warn of past 10.
  setMaxListeners(0, abort.signal);
  const onOuterAbort = () => abort.abort(options.signal?.reason);
  options.signal?.addEventListener('abort', onOuterAbort, { once: true });
  // Stopped already (Ctrl-C while the share was being created): no abort event will come.
  if (options.signal?.aborted) onOuterAbort();
  const toSend = [...Array(p.total).keys()].filter((i) => !p.held.has(i));
  const last = toSend[toSend.length - 1];
  const sent: Sent = { completed: false };
  let bytes = file.size;
  for (const i of toSend) bytes -= Math.min(file.size, (i + 1) * p.chunkSize) - i * p.chunkSize;
  options.onProgress?.(bytes, file.size); // a resumed upload starts where it was

  const sendChunk = async (index: number, handOver: () => void) => {
    const start = index * p.chunkSize;
    const end = Math.min(file.size, start + p.chunkSize);
    const fields = {
      dzuuid: p.uploadId,
      dzchunkindex: String(index),
      dztotalchunks: String(p.total),
      // Dropzone's layout fields, before the data: fshare serve writes the chunk in place.
      dzchunkbyteoffset: String(start),
      dzchunksize: String(p.chunkSize),
      dztotalfilesize: String(file.size),
    };
    const hashing = !fileHasher().disabled;
    const trailer: Record<string, Promise<string>> = index === last && hashing
      ? { dzsha256: digest }
      : {};
    const res = await send(client, {
      method,
      path: `${sharePath(id)}/content`,
      headers: options.ifMatch === undefined ? undefined : { 'if-match': options.ifMatch },
      body: () =>
        chunkBody(fields, { ...file, start, end, name: basename(file.path) }, trailer, {
          dzsha256: 64,
        }),
      idempotent: true, // the protocol replaces a re-sent index
      retryServerErrors: true,
      onBodySent: handOver,
      signal: abort.signal,
    });
    if ((res.statusCode === 409 || res.statusCode === 423) && res.repeated)
      sent.refusedAgain ??= await toApiError(res);
    else if (res.statusCode === 409) sent.refused ??= await toApiError(res);
    else if (res.statusCode === 423 && method === 'POST') {
      // Its content came from elsewhere: the share's sha256 tells whether it is this file's
      // (confirm), and a share with content is never deleted. It once was: a second run of one
      // interrupted upload deleted the share the first had just completed and reported.
      sent.refused ??= await toApiError(res);
      sent.stopped = true;
      return;
    } else if (res.statusCode >= 400) throw await toApiError(res);
    else {
      if (res.statusCode === 201) {
        sent.completed = true;
        sent.published = publishedBy(await res.text());
      } else await res.dump();
      p.stored = (p.stored ?? 0) + 1;
    }
    bytes += end - start;
    options.onProgress?.(bytes, file.size);
  };

  let skipped = false;
  const run = (index: number) =>
    limit(async (handOver) => {
      if (abort.signal.aborted) return void (skipped = true);
      if (sent.stopped) return;
      try {
        await sendChunk(index, handOver);
      } catch (err) {
        abort.abort(err); // fail fast: no point sending the rest
        throw err;
      }
    });
  // Every chunk but the last goes up at once (as many in flight as allowed); the last follows
  // them, so that the file's sha256 travels with it. One chunk alone goes at once, its sha256
  // right after its data, so hashing and sending overlap.
  const first = toSend.slice(0, -1);
  const results = await Promise.allSettled(first.map(run));
  if (last !== undefined && !results.some((r) => r.status === 'rejected')) {
    if (toSend.length > 1) await digest;
    results.push(...(await Promise.allSettled([run(last)])));
  }
  options.signal?.removeEventListener('abort', onOuterAbort);
  const failure = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
  if (failure) throw abort.signal.reason ?? failure.reason;
  if (skipped) throw abort.signal.reason;
  return sent;
}

/**
 * Whether the upload is proved done: the server's sha256 (and size) of the share equal the file's;
 * on a server without digests, a 201 is what it tells. Anything else is a VerificationError, or
 * the server's refusal of a chunk when there was one.
 */
async function confirm(
  client: ApiClient,
  id: string,
  path: string,
  sha256: string,
  size: number,
  sent: Sent,
  options: ContentOptions,
): Promise<boolean> {
  if (sha256 === '') return false; // FSHARE_BENCH_NO_DIGEST: nothing was hashed to compare
  const published = sent.published;
  if (published) {
    // The completing chunk's answer names what it published: that is this upload's proof.
    // A share read afterwards may already hold another upload's content (two `replace`s of one
    // share at once: the first to finish was told "the server stored other bytes", exit 7).
    if (published.sha256 === sha256 && published.size === size) return true;
    throw new VerificationError(
      published.sha256 === sha256
        ? `the server holds ${published.size} bytes for ${path}, not the file's ${size}`
        : `the server stored other bytes than ${path} (sha256 ${published.sha256}, the file's is ${sha256})`,
    );
  }
  const share = await getFile(client, id);
  const fail = (err: Error): Error => {
    // Without this run's 201, content in the share may be a lost 201's, or another's: kept.
    if (!sent.completed && share.initialized) sharesWithContent.add(err);
    return err;
  };
  if (typeof share.sha256 === 'string') {
    const same = share.sha256.toLowerCase() === sha256;
    if (same && (typeof share.size !== 'number' || share.size === size)) return true;
    if (!sent.completed && sent.refused) throw fail(sent.refused);
    if (!sent.completed && !sent.refusedAgain)
      throw fail(new VerificationError(`the server did not confirm the upload of ${path}`));
    throw fail(
      new VerificationError(
        same
          ? `the server holds ${share.size} bytes for ${path}, not the file's ${size}`
          : `the server stored other bytes than ${path} (sha256 ${share.sha256}, the file's is ${sha256})`,
      ),
    );
  }
  if (!sent.completed) {
    const refusal = sent.refused ?? sent.refusedAgain;
    // No content (or no 201 and no digest to prove any): the refusal stands.
    if (refusal && (sent.refused || !share.initialized)) throw fail(refusal);
    if (!refusal)
      throw fail(
        new VerificationError(
          `the server did not confirm the upload of ${path}: no chunk was answered 201 Created`,
        ),
      );
  }
  // What such a server does tell: the length of the content it now serves.
  const head = await send(client, {
    method: 'HEAD',
    path: `${sharePath(id)}/content`,
    idempotent: true,
    retryServerErrors: true,
  });
  await head.dump();
  const length = Number(head.headers['content-length']);
  const known = head.statusCode === 200 && Number.isSafeInteger(length);
  if (known && length !== size)
    throw fail(
      new VerificationError(`the server holds ${length} bytes for ${path}, not the file's ${size}`),
    );
  if (!sent.completed && !known)
    throw fail(new VerificationError(`the server did not confirm the upload of ${path}`));
  options.onNotice?.(
    `${path}: uploaded, but not verified (the server gives no sha256); the file's is ${sha256}`,
  );
  return false;
}

export interface UploadFileOptions extends ChunkOptions {
  /** Share name; defaults to the file's base name. */
  name?: string;
  /** Lock the share once its content is complete. */
  lock?: boolean;
  /** fshare extension: the share is deleted this many seconds after its creation. */
  expiresIn?: number;
  /** The file is a private copy of standard input: its record says so (it cannot be resumed). */
  stdin?: boolean;
  /**
   * The create's Idempotency-Key, instead of a fresh one: every upload given the same key makes
   * (or finds) the same share on fshare serve (a set's manifest: `push`).
   */
  createKey?: string;
}

/** What `fshare upload --json` prints per file. */
export interface UploadedShare {
  share_id: string;
  url: string;
  file_name: string;
  size: number;
  sha256: string;
  verified: boolean;
  /** Bytes the server already held from an earlier run of the same upload. */
  resumed_bytes: number;
  /** When the server deletes the share (null: never, or not asked). */
  expires: string | null;
}

/** The upload was refused for good (a 4xx); the share it had created was deleted again. */
export function refusedForGood(err: unknown): boolean {
  return (
    err instanceof ApiError &&
    err.status >= 400 &&
    err.status < 500 &&
    err.status !== 408 &&
    err.status !== 429
  );
}

/**
 * Creates a share for a local file and uploads its content (and locks it if asked). Running the
 * same upload again after an interruption resumes it into the same share, or, when the earlier
 * run was stopped after the server had the whole file, reports that share. An upload the server
 * refuses for good deletes the share it created, so no empty share is left behind.
 */
export async function uploadFile(
  client: ApiClient,
  path: string,
  options: UploadFileOptions = {},
): Promise<UploadedShare> {
  const file = await openLocal(path); // fail before creating an empty share
  try {
    return await uploadOpenFile(client, path, file, options);
  } finally {
    await file.handle.close().catch(() => undefined);
  }
}

async function uploadOpenFile(
  client: ApiClient,
  path: string,
  file: OpenFile,
  options: UploadFileOptions,
): Promise<UploadedShare> {
  const fileName = options.name ?? defaultShareName(path);
  if (options.restart) await abandonEarlier(client, file, options);
  const earlier = options.restart ? undefined : await earlierUpload(client, file, options);
  if (earlier?.finished)
    return finished(client, earlier.finished.share_id, earlier.finished.file_name, options, {
      size: file.size,
      chunks: 0,
      sha256: earlier.sha256!,
      verified: true,
      resumedChunks: 0,
      resumedBytes: file.size,
    });
  let id = earlier?.shareId;
  let fresh = earlier?.fresh;
  if (id === undefined) ({ id, fresh } = await createAndRecord(client, file, fileName, options));
  let result: ContentResult;
  try {
    result = await uploadContent(client, id, path, {
      ...options,
      mode: 'create',
      fileName,
      knownSha256: options.knownSha256 ?? earlier?.sha256,
      file,
      fresh,
    });
  } catch (err) {
    await failed(client, id, err, options);
    throw err;
  }
  return finished(client, id, fileName, options, result);
}

/** What an upload that failed leaves of its share and record, and how its error line says it. */
async function failed(
  client: ApiClient,
  id: string,
  err: unknown,
  options: UploadFileOptions,
): Promise<void> {
  const forget = async () => {
    const records = (await options.resume?.list()) ?? [];
    for (const r of records)
      if (r.server === client.server && r.share_id === id) await options.resume?.remove(r);
  };
  if (!(err instanceof Error)) return;
  if (unauthorized(err)) {
    // The token ended on the way (`fshare logout` elsewhere, an administrator): nothing can be
    // deleted now. The share and its record stay, for the same upload or `uploads clean` later.
    const records = (await options.resume?.list()) ?? [];
    if (records.some((r) => r.server === client.server && r.share_id === id)) recordKept.add(err);
    err.message += afterLastChunk.has(err)
      ? ` (the share it had created, ${id}, is left with its content unchecked)`
      : ` (the share it had created, ${id}, is left empty)`;
  } else if (forbidden(err)) {
    // Refused to this user: the share may have been handed to another since (its chunks are
    // then refused with 403), whose share this is not to delete. It and its record stay; `uploads
    // clean` deletes it only if it is still this user's.
    err.message += ` (the share it had created, ${id}, is left as it is: fshare uploads clean deletes it if it is still yours)`;
  } else if (sharesWithContent.has(err)) {
    // Content that may be this upload's (a lost 201) or another's is never deleted.
    await forget();
    err.message += ` (the share it had created, ${id}, was kept: it has content)`;
  } else if (
    refusedForGood(err) ||
    err instanceof VerificationError ||
    err instanceof FileChangedError
  ) {
    // Nothing to resume: the share this upload created goes too, and the line says whether
    // it could (a user without DELETE cannot remove it).
    const removed = await deleteFile(client, id).then(
      () => null,
      (e: unknown) => (e instanceof Error ? e.message : String(e)),
    );
    await forget();
    err.message +=
      removed === null
        ? ' (the share it had created was deleted)'
        : ` (the share it had created, ${id}, could not be deleted: ${removed})`;
  } else if (options.resume) {
    // Left to be resumed, which a later run finds by its record. Without one (the config
    // directory's disk was full), nothing would: the line names the share instead.
    const records = await options.resume.list().catch(() => []);
    if (!records.some((r) => r.server === client.server && r.share_id === id)) {
      unrecorded.add(err);
      err.message += ` (the share it had created, ${id}, is left as it is, and no record of it could be kept to resume the upload; fshare rm ${id} removes it)`;
    }
  }
}

/** The end of an upload that is done: locked if asked, and described as `upload` prints it. */
async function finished(
  client: ApiClient,
  id: string,
  fileName: string,
  options: UploadFileOptions,
  result: ContentResult,
): Promise<UploadedShare> {
  if (options.lock) await lockFile(client, id);
  const expires =
    options.expiresIn === undefined
      ? null
      : ((await getFile(client, id).catch(() => undefined))?.expires ?? null);
  return {
    share_id: id,
    url: shareUrl(client.server, id),
    file_name: fileName,
    size: result.size,
    sha256: result.sha256,
    verified: result.verified,
    resumed_bytes: result.resumedBytes,
    expires,
  };
}

/**
 * Creates the share of a fresh upload. Its record is written first, with the Idempotency-Key the
 * create sends and no share id yet, then again with the share's id: a run killed in between (its
 * share made, the answer not yet read) left a record by which the next run asks for that same
 * share again (pendingShare), instead of a share no record names.
 */
async function createAndRecord(
  client: ApiClient,
  file: OpenFile,
  fileName: string,
  options: UploadFileOptions,
): Promise<{ id: string; fresh: NonNullable<ContentOptions['fresh']> }> {
  const uploadId = randomUUID();
  const key = options.createKey ?? randomUUID();
  const chunkSize = options.chunkSize ?? DEFAULT_CHUNK_SIZE;
  let record = options.resume
    ? await keepRecord(
        {
          ...newRecord(client, null, file, 'create', { uploadId, chunkSize }, fileName),
          create_key: key,
          ...(options.stdin ? { stdin: true } : {}),
        },
        options,
      )
    : undefined;
  let madeId: string | undefined;
  try {
    const id = await createShare(client, fileName, options.expiresIn, key, async (newId) => {
      madeId = newId;
      // The same record file (it is named by the key): if it cannot be written now, the one
      // without the id still finds the share again.
      if (record) {
        record = { ...record, share_id: newId };
        await options.resume!.save(record).catch(() => undefined);
      }
    });
    return { id, fresh: { uploadId, record } };
  } catch (err) {
    // The share was deleted again (a server without expiry), or the create was refused: nothing
    // is left to find. (A create whose answer did not come keeps its record: the next run asks
    // for the share by its key.)
    if (
      record &&
      (err instanceof UnsupportedError || (madeId === undefined && refusedForGood(err)))
    )
      await options.resume?.remove(record);
    // The expiry could not be read back (a 401, say): the share made is dealt with as below.
    else if (madeId !== undefined) await failed(client, madeId, err, options);
    throw err;
  }
}

/**
 * Creates the share (`made` is told its id at once); with an expiry, checks that the server took
 * it before any byte is sent (a server without expiry refuses the field, as the reference does, or
 * may ignore it: its share would never be deleted).
 */
async function createShare(
  client: ApiClient,
  fileName: string,
  expiresIn: number | undefined,
  key: string,
  made: (id: string) => Promise<void>,
): Promise<string> {
  const fields = expiresIn === undefined ? undefined : { expires_in: expiresIn };
  const unsupported = () =>
    new UnsupportedError(
      `${client.server} does not support share expiry (--expires); nothing was uploaded`,
    );
  const created = await createFile(client, fileName, fields, key).catch((err: unknown) => {
    throw unknownFieldRefused(err, 'expires_in') ? unsupported() : err;
  });
  const id = idFromUrl(created.url);
  await made(id);
  if (expiresIn === undefined) return id;
  const share = await getFile(client, id);
  if (!share.expires) {
    await deleteFile(client, id).catch(() => undefined);
    throw unsupported();
  }
  return id;
}

/**
 * The share a record written before its create names: the create is sent again with the same
 * Idempotency-Key (and name). `replayed`: the server said it is the share the earlier create
 * made (fshare serve). Otherwise this create made it now. fshare serve says so
 * (`Idempotent-Replayed: false`): the earlier create never reached it, and nothing was left. A
 * server that says nothing ignores the key and may also have made one for the earlier create,
 * which nothing names: `unknown` says so in a line (only then: against fshare serve it was false).
 */
export async function pendingShare(
  client: ApiClient,
  record: UploadRecord,
  expiresIn?: number,
): Promise<{ id: string; replayed: boolean; unknown?: string }> {
  const fields = expiresIn === undefined ? undefined : { expires_in: expiresIn };
  const created = await createFile(client, record.file_name, fields, record.create_key);
  return {
    id: idFromUrl(created.url),
    replayed: created.replayed,
    unknown: created.keyTaken
      ? undefined
      : `the earlier upload of ${record.path} was stopped while its share was being created; ` +
        `a server that does not take Idempotency-Key (the reference server) may have left an ` +
        `empty share named ${record.file_name} then, which fshare cannot tell from others: fshare ls shows it`,
  };
}

/** --restart: the earlier, unfinished upload of this file is given up, its empty share deleted. */
async function abandonEarlier(
  client: ApiClient,
  file: LocalFile,
  options: UploadFileOptions,
): Promise<void> {
  const records = (await options.resume?.list()) ?? [];
  for (const r of records) {
    if (r.server !== client.server || r.path !== file.path || r.mode !== 'create') continue;
    let id = r.share_id;
    if (id === null) {
      const pending = await pendingShare(client, r).catch(() => undefined);
      if (pending?.unknown) options.onNotice?.(pending.unknown);
      id = pending?.id ?? null;
    }
    const share = id === null ? undefined : await getFile(client, id).catch(() => undefined);
    if (id !== null && share && !share.initialized)
      await deleteFile(client, id).catch(() => undefined);
    await options.resume?.remove(r);
  }
}

interface Earlier {
  /** The share of an unfinished upload of this file, still empty: the upload goes on there. */
  shareId?: string;
  /** The share holds this file already: the earlier run was stopped after its last 201. */
  finished?: Share;
  /** The file's sha256, when it had to be computed to tell. */
  sha256?: string;
  /** The earlier run was stopped before it sent a chunk: its record, to go on as a fresh upload. */
  fresh?: ContentOptions['fresh'];
}

/**
 * What the record of an earlier upload of this same file (same server, path) finds on the
 * server: its share still empty (go on there), holding this file's bytes (done: the run was
 * stopped after the server's 201, before it forgot its record), or neither (said in a line; the
 * record goes, and the file is uploaded into a new share).
 */
async function earlierUpload(
  client: ApiClient,
  file: OpenFile,
  options: UploadFileOptions,
): Promise<Earlier | undefined> {
  const records = (await options.resume?.list()) ?? [];
  // An upload of the same file that another live process is running is left to it.
  const free = records.find(
    (r) =>
      r.server === client.server &&
      r.path === file.path &&
      r.mode === 'create' &&
      !busyElsewhere(r),
  );
  const record = free && (await claimRecord(options.resume, free));
  if (!record) return undefined;
  let what = 'is gone';
  let fresh: ContentOptions['fresh'];
  if (record.share_id === null) {
    // Stopped between its record and its create's answer: the create again, with its key.
    const pending = await pendingShare(client, record, options.expiresIn).catch((err: unknown) => {
      // 409: the share that key made was handed to another owner since.
      if (err instanceof ApiError && err.status === 409) return undefined;
      throw err;
    });
    if (!pending) {
      options.onNotice?.(
        `the share of the earlier upload of ${file.path} is not open to you any more; uploading it again into a new share`,
      );
      await options.resume?.remove(record);
      return {};
    }
    record.share_id = pending.id;
    fresh = { uploadId: record.dzuuid, record: { ...record, pid: process.pid, host: hostname() } };
    await options.resume?.save(fresh.record!).catch(() => undefined);
    // A create that never reached the server (not a repeat, said by a server that takes the key)
    // left nothing: the upload simply goes on in the share made now, with nothing to say.
    if (pending.replayed)
      options.onNotice?.(
        `the earlier upload of ${file.path} was stopped while its share was being created; it goes on in that share, ${pending.id}`,
      );
    else if (pending.unknown) options.onNotice?.(pending.unknown);
  }
  // Only "not found" (or no longer the caller's) means gone: any other failure stops here, the
  // record kept, no new share.
  const found = await getFile(client, record.share_id).catch((err: unknown) => {
    if (err instanceof ApiError && err.status === 403) what = 'is not open to you any more';
    if (err instanceof ApiError && (err.status === 404 || err.status === 403)) return undefined;
    throw err;
  });
  // Handed to another user since (fshare serve shows any share to a user with READ): going on
  // there was refused with 403, and the failure then deleted the new owner's share.
  const me = found ? await whoami(client).catch(() => undefined) : undefined;
  const share = me && found?.owner_name !== me.username ? undefined : found;
  if (found && !share) what = 'is not yours any more';
  if (share && !share.initialized) return { shareId: record.share_id, fresh };
  let sha256: string | undefined;
  if (share && typeof share.sha256 === 'string') {
    what = 'holds other content now';
    if (typeof share.size !== 'number' || share.size === file.size) {
      sha256 = options.knownSha256 ?? (await hashOpen(file));
      if (sha256 !== '' && share.sha256.toLowerCase() === sha256) {
        await options.resume?.remove(record);
        return { finished: share, sha256 };
      }
    }
  } else if (share) what = 'has content that cannot be checked (the server gives no sha256)';
  options.onNotice?.(
    `share ${record.share_id} of the earlier upload of ${file.path} ${what}; uploading it again into a new share`,
  );
  await options.resume?.remove(record);
  return { sha256 };
}

/** Replaces the content of an existing share with a local file (PUT content). */
export async function replaceFile(
  client: ApiClient,
  id: string,
  path: string,
  options: ChunkOptions = {},
): Promise<UploadedShare> {
  const result = await uploadContent(client, id, path, { ...options, mode: 'replace' });
  const share = await getFile(client, id).catch(() => undefined);
  return {
    share_id: id,
    url: shareUrl(client.server, id),
    file_name: share?.file_name ?? basename(path),
    size: result.size,
    sha256: result.sha256,
    verified: result.verified,
    resumed_bytes: result.resumedBytes,
    expires: share?.expires ?? null,
  };
}

/**
 * The share name a file gets without `--name`: its base name with control and bidirectional
 * characters made "_" (servers refuse them in names: a local `esc\x1b.txt` was a 400).
 */
export function defaultShareName(path: string): string {
  return basename(path).replace(UNSAFE_CHARACTERS, '_');
}
