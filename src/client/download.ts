import { createHash } from 'node:crypto';
import { constants as fs } from 'node:fs';
import { lstat, open, rename, rm, stat, type FileHandle } from 'node:fs/promises';
import type { IncomingHttpHeaders } from 'node:http';
import { basename, dirname, join, resolve } from 'node:path';
import type { Writable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import { writeFullySync } from '../shared/copy.js';
import { loadLocks } from '../shared/filelock.js';
import { naming, systemErrorText } from '../shared/syserr.js';
import type { Sha256 } from '../shared/hasher.js';
import type { Share } from '../shared/types.js';
import { getFile } from './api.js';
import {
  ApiError,
  ClientInputError,
  NetworkError,
  VerificationError,
  describeTransportError,
  isTransportError,
} from './errors.js';
import { filenameFromDisposition, nameTooLong, partPathOf, sanitizeFileName } from './filename.js';
import {
  backoffDelay,
  header,
  noteRetry,
  seconds,
  send,
  toApiError,
  withoutTokens,
  type ApiClient,
  type Response,
} from './http.js';
import type { BodyTarget } from './rawhttp.js';
import { sharePath, shownArgument } from './refs.js';
import { fileHasher } from './hashing.js';

/** Bytes are written in pieces of this size: few system calls, flat memory. */
const PIECE = 1024 * 1024;
/** Pieces in the ring shared with the hashing thread (16 MiB: with 8, a hashing thread that lost its core for a moment stalled the socket, and the stalls cost more system time than the copy). */
const RING_SLOTS = 16;

/** `A-B` (inclusive), `A-` (from A to the end) or `-N` (the last N bytes). */
export type ByteRange = { start: number; end?: number } | { suffix: number };

export function parseByteRange(text: string): ByteRange {
  const match = /^\s*(\d*)\s*-\s*(\d*)\s*$/.exec(text);
  const bad = () =>
    new ClientInputError(`not a byte range (A-B, A- or -N): ${shownArgument(text)}`);
  if (!match || (match[1] === '' && match[2] === '')) throw bad();
  if (match[1] === '') {
    const suffix = Number(match[2]);
    if (!Number.isSafeInteger(suffix) || suffix < 1) throw bad();
    return { suffix };
  }
  const start = Number(match[1]);
  const end = match[2] === '' ? undefined : Number(match[2]);
  if (
    !Number.isSafeInteger(start) ||
    (end !== undefined && !(Number.isSafeInteger(end) && end >= start))
  )
    throw bad();
  return end === undefined ? { start } : { start, end };
}

/** A range as `A-B`, `A-` or `-N`, without the spaces or leading zeros it was typed with. */
export function byteRangeText(range: ByteRange): string {
  return 'suffix' in range ? `-${range.suffix}` : `${range.start}-${range.end ?? ''}`;
}

/** What identifies the content a `.part` was started from: a strong ETag, or Last-Modified. */
export interface Validator {
  etag?: string;
  lastModified?: string;
}

/** Remembers the validator each `.part` was started with, so a resume can send it in If-Range. */
export interface ValidatorStore {
  get(partPath: string): Promise<Validator | undefined> | Validator | undefined;
  /** `undefined` forgets the entry (the download finished). */
  set(partPath: string, validator: Validator | undefined): Promise<void> | void;
}

export interface DownloadStart {
  /** Final path, or null when writing to a stream. */
  path: string | null;
  /** Bytes already present before this response (a resumed `.part`). */
  offset: number;
  /** Bytes the finished download will hold, when the server said. */
  totalBytes: number | undefined;
}

export interface DownloadOptions {
  /** A file path, an existing directory (name from the server), or "-" for `stdout`. */
  output?: string;
  /** Where "-" writes; default process.stdout. */
  stdout?: Writable;
  /** Directory for a name taken from Content-Disposition; default the current directory. */
  directory?: string;
  /** Appended to a name taken from the server (".0-1023" for a byte range). */
  nameSuffix?: string;
  range?: ByteRange;
  /** Resume `NAME.part` with Range + If-Range (only with a validator the server gave). */
  resume?: boolean;
  /** Allow replacing an existing file whose name came from the server. */
  overwrite?: boolean;
  validators?: ValidatorStore;
  onStart?: (info: DownloadStart) => void;
  onProgress?: (receivedBytes: number, totalBytes: number | undefined) => void;
  /** Told why a partial download was discarded (it starts over from byte 0). */
  onRestart?: (reason: string) => void;
  /** Told what could not be done, e.g. that the server gives no digest to verify against. */
  onNotice?: (line: string) => void;
  signal?: AbortSignal;
  /**
   * Where the content comes from when it is not a share's `/files/<id>/content` (a share link):
   * the id given to download() then only names the download where no name is known.
   */
  source?: ContentSource;
}

/** The content to download: its URL path, what each request carries, what is known of it. */
export interface ContentSource {
  /** Path (and query) below the client's server of the GET and HEAD that give the content. */
  path: string;
  /** Headers every request carries (a link's grant cookie). */
  headers?: Record<string, string>;
  /**
   * What the server states about the content: its size and sha256 (and the name it goes by).
   * Rejects with the server's ApiError when it will not say (a failed HEAD is explained by it).
   */
  info: () => Promise<Pick<Share, 'size' | 'sha256'>>;
  /**
   * The requests name the content's sha256 (a link's `?download&sha256=`): the server sends that
   * content or refuses, so no answer of other content can be a replacement made meanwhile.
   */
  pinned?: boolean;
}

export interface DownloadResult {
  path: string | null;
  /** Bytes in the finished file (or written to the stream). */
  bytes: number;
  /** Bytes that were already in the `.part` and not downloaded again. */
  resumedFrom: number;
  /** The sha256 of what was written (null for a byte range). */
  sha256: string | null;
  /** True when it matched the digest the server gave (Repr-Digest, or the share's sha256). */
  verified: boolean;
}

/** The file exists and its name came from the server: we never overwrite it silently. */
export class FileExistsError extends Error {
  override readonly name = 'FileExistsError';
}

/** The file system of NAME's folder does not take NAME (exFAT and ":", say). */
export class NameRefusedError extends Error {
  override readonly name = 'NameRefusedError';
}

/** Another download (another fshare) holds the lock on the same `NAME.part`. */
export class PartBusyError extends Error {
  override readonly name = 'PartBusyError';
}

function contentLength(headers: IncomingHttpHeaders): number | undefined {
  const text = header(headers, 'content-length');
  return text !== undefined && /^\d+$/.test(text) ? Number(text) : undefined;
}

function contentRange(headers: IncomingHttpHeaders) {
  const text = header(headers, 'content-range') ?? '';
  const match = /^bytes (\d{1,15})-(\d{1,15})\/(\d{1,15}|\*)$/.exec(text);
  if (!match || Number(match[2]) < Number(match[1])) return undefined;
  const total = match[3] === '*' ? undefined : Number(match[3]);
  if (total !== undefined && Number(match[2]) >= total) return undefined;
  return { start: Number(match[1]), end: Number(match[2]), total, text };
}

/** The validator a response offers for If-Range: a strong ETag, else Last-Modified. */
function validatorOf(headers: IncomingHttpHeaders): Validator | undefined {
  const etag = header(headers, 'etag');
  if (etag && !etag.startsWith('W/')) return { etag };
  const lastModified = header(headers, 'last-modified');
  return lastModified ? { lastModified } : undefined;
}

const sameValidator = (a: Validator, b: Validator) =>
  a.etag === b.etag && a.lastModified === b.lastModified;

/** The sha256 in an RFC 9530 Repr-Digest header, as lower-case hex. */
export function reprDigest(headers: IncomingHttpHeaders): string | undefined {
  const m = /(?:^|,)\s*sha-256=:([A-Za-z0-9+/]+=*):/.exec(header(headers, 'repr-digest') ?? '');
  if (!m) return undefined;
  const hex = Buffer.from(m[1]!, 'base64').toString('hex');
  return hex.length === 64 ? hex : undefined;
}

async function sizeOf(path: string): Promise<number | undefined> {
  try {
    return (await stat(path)).size;
  } catch {
    return undefined;
  }
}

/**
 * An existing path that is neither a regular file nor a directory, links followed: a device
 * (/dev/null, a terminal), a FIFO, /dev/stdout on a pipe. Such a path is written straight, as
 * `curl -o` writes it: a `.part` beside it renamed over it would replace the device itself.
 */
export async function isStreamPath(path: string): Promise<boolean> {
  try {
    const s = await stat(path);
    return !s.isFile() && !s.isDirectory();
  } catch {
    return false;
  }
}

/**
 * Opens a device or FIFO for writing. A FIFO's open waits for a reader inside a thread that the
 * process cannot leave (Ctrl-C would not end it): its reader is waited for here, where a signal
 * can stop the wait.
 */
async function openDevice(path: string, signal: AbortSignal | undefined): Promise<FileHandle> {
  if (!(await stat(path)).isFIFO()) return open(path, 'w');
  for (;;) {
    const probe = await open(path, fs.O_WRONLY | fs.O_NONBLOCK).catch((err: unknown) => {
      if ((err as NodeJS.ErrnoException).code === 'ENXIO') return undefined; // no reader yet
      throw err;
    });
    if (probe) {
      try {
        return await open(path, 'w');
      } finally {
        await probe.close();
      }
    }
    await sleep(100, undefined, { signal });
  }
}

async function exists(path: string): Promise<boolean> {
  return lstat(path).then(
    () => true,
    () => false,
  );
}

async function isDirectory(path: string): Promise<boolean> {
  try {
    return (await stat(path)).isDirectory();
  } catch {
    return false;
  }
}

/**
 * The safe local name for a response: Content-Disposition's name, else the share id; `suffix`
 * (".0-1023" for a byte range) appended, the name cut so that it fits with ".part".
 */
export function defaultFileName(headers: IncomingHttpHeaders, id: string, suffix = ''): string {
  // A token fshare sent is never part of a real name: a server that put one there would have it
  // kept in a file name, for every `ls` of the directory to show. It is `[token]` there too, as
  // in every line fshare prints.
  const given = filenameFromDisposition(header(headers, 'content-disposition'));
  const name = given === undefined ? undefined : withoutTokens(given);
  return (sanitizeFileName(name, suffix) ?? id) + suffix;
}

/** An error for a failed HEAD (which has no body): ask the source for the server's words. */
async function headFailure(source: ContentSource, status: number): Promise<Error> {
  try {
    await source.info();
  } catch (err) {
    if (err instanceof ApiError) return err;
  }
  return new ApiError(status, status === 404 ? 'the share has no content yet' : `HTTP ${status}`);
}

/** A share's content: GET /files/<id>/content, described by GET /files/<id>. */
function shareSource(client: ApiClient, id: string): ContentSource {
  return { path: `${sharePath(id)}/content`, info: () => getFile(client, id) };
}

/**
 * Writes a response into a file at a position through a ring of RING_SLOTS 1 MiB pieces that the
 * hashing thread shares. The socket reads straight into the free part of the current piece
 * (rawhttp.ts). A full piece is written to the file at once, from this thread, and handed to the
 * hashing thread, which hashes it from the shared memory (no copy, no reading back) while the next
 * pieces fill. A piece is refilled only once it is hashed, so the download waits for the hash
 * rather than buffering without bound: memory stays at the ring's 16 MiB.
 *
 * The writes are synchronous, in pieces of at most WRITE_MAX: this thread has nothing else to do
 * while a download runs, and a write that blocks only pauses the socket (TCP holds the sender
 * back). Measured against the alternatives (bench/README.md, "Downloads: where the writes
 * go"): writes in libuv's pool ran several at once on one file and spun on its lock in the
 * kernel, and one at a time through the pool cost thread hand-offs; writing here was the fastest,
 * hashed or not.
 */
class FileSink implements BodyTarget {
  private readonly ring: Buffer;
  /** Per slot: its hash, while it runs. */
  private readonly busy: ({ done: boolean; promise: Promise<void> } | undefined)[];
  private slot = 0;
  private fill = 0;
  private failure: unknown = null;
  /** Bytes written so far. */
  written = 0;

  constructor(
    private readonly handle: FileHandle,
    /** The file's path, named in a write error. */
    private readonly path: string,
    private readonly start: number,
    private readonly hash: Sha256 | undefined,
  ) {
    const shared = new SharedArrayBuffer(RING_SLOTS * PIECE);
    hash?.useRing(shared);
    this.ring = Buffer.from(shared);
    this.busy = new Array<undefined>(RING_SLOTS).fill(undefined);
  }

  space(): Buffer {
    return this.ring.subarray(this.slot * PIECE + this.fill, (this.slot + 1) * PIECE);
  }

  filled(n: number): Promise<void> | undefined {
    this.fill += n;
    return this.fill === PIECE ? this.next() : undefined;
  }

  async write(data: Buffer): Promise<void> {
    for (let off = 0; off < data.length;) {
      const space = this.space();
      const n = Math.min(space.length, data.length - off);
      data.copy(space, 0, off, off + n);
      off += n;
      await this.filled(n);
    }
  }

  /** Hands the current piece on and moves to the next; a promise when that one is still busy. */
  private next(): Promise<void> | undefined {
    this.dispatch();
    if (this.failure) return Promise.reject(this.failure);
    this.slot = (this.slot + 1) % RING_SLOTS;
    const busy = this.busy[this.slot];
    return busy && !busy.done ? busy.promise : undefined;
  }

  private dispatch(): void {
    if (this.fill === 0 || this.failure) return;
    const off = this.slot * PIECE;
    const len = this.fill;
    try {
      writeFullySync(this.handle.fd, this.ring.subarray(off, off + len), this.start + this.written);
    } catch (err) {
      const e = err as NodeJS.ErrnoException;
      if (typeof e === 'object' && e !== null && e.path === undefined) e.path = this.path;
      this.failure = err;
      return;
    }
    this.written += len;
    this.fill = 0;
    const hashed = this.hash?.updateFromRing(off, len);
    if (!hashed) return;
    const entry = { done: false, promise: Promise.resolve() };
    // A hash that fails is not a failed download: the digest is then computed from the file.
    entry.promise = hashed.then(
      () => void (entry.done = true),
      () => void (entry.done = true),
    );
    this.busy[this.slot] = entry;
  }

  /**
   * Writes the rest, waits for the hashing thread to let go of the ring; throws a write error.
   * The file stays open (and locked) for the download's next attempt and its rename.
   */
  async close(): Promise<void> {
    this.dispatch();
    await Promise.all(this.busy.map((b) => b?.promise));
    if (this.failure) throw this.failure;
  }
}

/** Writes a response to a stream (standard output), hashing it on the way when asked. */
class StreamSink implements BodyTarget {
  private readonly scratch = Buffer.allocUnsafe(PIECE);
  written = 0;

  constructor(
    private readonly out: Writable,
    private readonly hash: ReturnType<typeof createHash> | undefined,
  ) {}

  space(): Buffer {
    return this.scratch;
  }

  filled(n: number): Promise<void> | undefined {
    // The scratch memory is read into again at once: the stream gets a copy.
    return this.push(Buffer.from(this.scratch.subarray(0, n)));
  }

  write(data: Buffer): Promise<void> {
    return this.push(data) ?? Promise.resolve();
  }

  /**
   * Resolves once everything written so far has been handed to the system: a process that ends
   * right after must not leave the tail of a download in a stream buffer.
   */
  flushed(): Promise<void> {
    return new Promise((resolve, reject) =>
      // A write queued behind one that failed is told only that the stream was destroyed: the
      // stream's own error says why (no space left).
      this.out.write(Buffer.alloc(0), (err) => (err ? reject(this.out.errored ?? err) : resolve())),
    );
  }

  private push(data: Buffer): Promise<void> | undefined {
    if (this.out.errored || this.out.destroyed) return Promise.reject(outputGone(this.out));
    this.hash?.update(data);
    this.written += data.length;
    if (this.out.write(data)) return undefined;
    return drained(this.out);
  }
}

function outputGone(out: Writable): Error {
  return out.errored ?? new Error('the output was closed before the download ended');
}

/**
 * Resolves at the stream's next 'drain'; rejects if it fails or closes first (a full disk, a
 * reader that went away), so a download into a broken stream fails instead of waiting forever.
 */
function drained(out: Writable): Promise<void> {
  return new Promise((resolve, reject) => {
    const settle = (err?: Error) => {
      out.off('drain', onDrain).off('error', onError).off('close', onClose);
      if (err) reject(err);
      else resolve();
    };
    const onDrain = () => settle();
    const onError = (err: Error) => settle(err);
    const onClose = () => settle(outputGone(out));
    out.on('drain', onDrain).on('error', onError).on('close', onClose);
  });
}

/** Where a download goes and how far it already is. */
interface State {
  target: string | undefined;
  nameFromServer: boolean;
  directory: string;
  /** Bytes of the requested window already held (in the .part). */
  offset: number;
  resumedFrom: number;
  /** The validator the .part was started from. */
  validator: Validator | undefined;
  /** Bytes the finished window holds, when known. */
  expected: number | undefined;
  /** The sha256 the server gave for the content. */
  digest: string | undefined;
  /** The hash of what was written, running in the hashing thread (files), or here (streams). */
  hash: Sha256 | undefined;
  streamHash: ReturnType<typeof createHash> | undefined;
  /**
   * The `.part` was resumed without a recorded validator, trusting the server's digest to catch a
   * mix: a mismatch then starts over from byte 0 once instead of failing.
   */
  tentative: boolean;
  /** The `.part`, open and locked (holdPart) from its first use until the download ends. */
  part: FileHandle | undefined;
  /** Bytes of the whole content, as the server stated them (share, Content-Length, -Range). */
  total: number | undefined;
  /** The share's metadata (its size and sha256), asked for once, when first needed. */
  share: Promise<Pick<Share, 'size' | 'sha256'> | undefined> | undefined;
  /** Where the content comes from (a share's content, or a link). */
  source: ContentSource;
}

/**
 * Downloads a share's content. Files are written to `NAME.part`, hashed as they are written, and
 * renamed only once the byte count matches what the server announced and the sha256 matches the
 * digest it gave; a mismatch keeps the bytes in `NAME.part` and throws VerificationError. A
 * broken connection is resumed with Range + If-Range (never without a validator when nothing
 * would notice a mix: a byte range, which nothing verifies, or a server that gives no sha256).
 */
export async function download(
  client: ApiClient,
  id: string,
  options: DownloadOptions = {},
): Promise<DownloadResult> {
  const device =
    options.output !== undefined &&
    options.output !== '-' &&
    !/[/\\]$/.test(options.output) &&
    (await isStreamPath(options.output))
      ? options.output
      : undefined;
  if (device !== undefined && options.resume)
    throw new ClientInputError(`--continue needs a regular file, not ${device}`);
  const toStream = options.output === '-' || device !== undefined;
  if (toStream && options.resume) throw new ClientInputError('--continue needs a file, not stdout');
  if (options.resume && options.range)
    throw new ClientInputError('--continue and --range cannot be combined');
  const state: State = {
    target: undefined,
    nameFromServer: false,
    directory: options.directory ?? '.',
    offset: 0,
    resumedFrom: 0,
    validator: undefined,
    expected: undefined,
    digest: undefined,
    hash: undefined,
    streamHash: toStream && !options.range ? createHash('sha256') : undefined,
    tentative: false,
    part: undefined,
    total: undefined,
    share: undefined,
    source: options.source ?? shareSource(client, id),
  };
  if (!toStream && options.output !== undefined) {
    if (/[/\\]$/.test(options.output) || (await isDirectory(options.output)))
      state.directory = options.output;
    else state.target = options.output;
  }
  // Opened before anything is asked of the server: a device that cannot be written to is said
  // at once, with its path (EACCES, a FIFO's ENXIO), and nothing is downloaded.
  const deviceHandle = device !== undefined ? await openDevice(device, options.signal) : undefined;
  // The stream closes the handle when it ends (a handle a stream holds waits for it to close).
  const out = deviceHandle?.createWriteStream();
  // Its failures are met where it is written and flushed (StreamSink, `drained`): a write that
  // fails once the last one was handed over (a small download into /dev/full) was also emitted
  // as an 'error' event nobody listened to, and the process died with a stack trace.
  out?.on('error', () => undefined);
  try {
    const opts = out ? { ...options, stdout: out } : options;
    if (options.resume) {
      const done = await planResume(client, id, state, opts);
      if (done) return done;
    }
    await transfer(client, id, state, opts, toStream);
    return await finishOrRestart(client, id, state, opts);
  } catch (err) {
    if (!toStream) await dropEmptyPart(state, options);
    // A write into the device carries no path ("no space left on the device" alone, /dev/full).
    throw device !== undefined ? naming(err, device) : err;
  } finally {
    // Closing the .part releases its lock (after the rename, when the download finished).
    await state.part?.close().catch(() => undefined);
    if (out && !out.closed)
      await new Promise<void>((resolve) => {
        out.once('close', () => resolve());
        out.end();
      });
  }
}

/** Failures to create the .part that are about NAME's place, not the .part itself. */
const USERS_PATH_CODES = new Set(['ENOENT', 'ENOTDIR', 'EACCES', 'EPERM', 'EROFS', 'ENAMETOOLONG']);

/**
 * Opens `NAME.part` (created when missing; never truncated here) and holds an exclusive kernel
 * lock on it until the download ends, so that two fshares given the same -o cannot both write
 * it: the second once kept writing through its descriptor into the file the first had verified
 * and renamed into place. With `create` false, only an existing `.part` is held (false: none).
 * A file system without locks is written unguarded, as the config files are (filelock.ts).
 */
async function holdPart(state: State, create: boolean): Promise<boolean> {
  if (state.part) return true;
  const target = state.target!;
  const part = partPathOf(target);
  if (create && nameTooLong(target))
    // Found before a byte is written (the .part's shortened name would fit, NAME would not).
    throw Object.assign(new Error(`file name too long: ${target}`), {
      code: 'ENAMETOOLONG',
      syscall: 'open',
      path: target,
    });
  const busy = () =>
    new PartBusyError(`another fshare is writing ${part}; wait for it or choose another -o`);
  for (let tries = 1; ; tries++) {
    let handle: FileHandle;
    try {
      // As cp and curl -o make files: 0666 less the umask (a download is no secret of ours).
      // O_NOFOLLOW: a NAME.part planted as a symbolic link (in /tmp, a shared workspace) would
      // lead the write into whatever file it points at.
      handle = await open(part, fs.O_WRONLY | fs.O_NOFOLLOW | (create ? fs.O_CREAT : 0), 0o666);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (!create && code === 'ENOENT') return false;
      // Its folder is there, and the name is refused (EINVAL), or said not to be there (exFAT's
      // answer to a name with ":" or "?"): "no such file or directory: a:b?.txt" named nothing
      // missing.
      if (
        (code === 'EINVAL' || code === 'ENOENT') &&
        (await isDirectory(dirname(target))) &&
        !(await exists(target))
      )
        throw new NameRefusedError(
          `the file system of ${resolve(dirname(target))} does not take the name ${basename(target)}; save it under another name with -o`,
        );
      // Where NAME cannot be made (no such directory, no permission): the user's path, not the
      // .part's. A planted link keeps naming the .part: that is the file refused. So does a
      // "no such file" where NAME itself exists (/proc/version: its folder makes no files).
      if (code && USERS_PATH_CODES.has(code) && !(code === 'ENOENT' && (await exists(target))))
        (err as NodeJS.ErrnoException).path = target;
      throw err;
    }
    let held: boolean;
    try {
      held = loadLocks().tryLock(handle.fd);
    } catch {
      held = true; // no locks on this file system: unguarded, as before
    }
    if (!held) {
      await handle.close();
      throw busy();
    }
    // The file locked must still be the one named NAME.part: a holder that finished in between
    // renamed it into place, and it is then the finished download, not ours to write.
    const [mine, named] = await Promise.all([handle.stat(), lstat(part).catch(() => undefined)]);
    if (mine.nlink > 1) {
      // A NAME.part planted as a hard link to another file (a shared directory) would lead the
      // bytes into that file, as a symbolic link would: refused the same way.
      await handle.close();
      throw Object.assign(new Error(`${part} has other names`), {
        code: 'EMLINK',
        syscall: 'open',
        path: part,
      });
    }
    if (named && named.ino === mine.ino && named.dev === mine.dev) {
      state.part = handle;
      return true;
    }
    await handle.close();
    if (!create && !named) return false;
    if (tries === 5) throw busy();
  }
}

/**
 * The share's metadata, asked for once: what the bytes are checked against. A record that cannot
 * be read fails the download, its bytes kept for --continue. Found from outside: with GET
 * /files/<id> failing (503, 401, a reset), the download was saved unchecked, exit 0, with "the
 * server gives no sha256". A record of the wrong shape (a 2xx that is not this share, a sha256
 * that is not one) is a lying server.
 */
function shareOf(
  client: ApiClient,
  id: string,
  state: State,
): Promise<Pick<Share, 'size' | 'sha256'> | undefined> {
  return (state.share ??= state.source.info().catch((err: unknown) => {
    if (err instanceof ApiError && err.status >= 200 && err.status < 300) throw err;
    if (err instanceof Error) {
      const part = state.target === undefined ? undefined : partPathOf(state.target);
      err.message =
        `the share's size and sha256, which the download is checked against, could not be read: ${err.message}` +
        (part && state.offset > 0 ? `; what was downloaded stays in ${part} for --continue` : '');
    }
    throw err;
  }));
}

/** The server gives a sha256 for the content (Repr-Digest, or the share's). */
async function digestKnown(client: ApiClient, id: string, state: State): Promise<boolean> {
  return state.digest !== undefined || !!(await shareOf(client, id, state))?.sha256;
}

/** The share's size in bytes, when the server states it. */
async function shareSize(client: ApiClient, id: string, state: State): Promise<number | undefined> {
  const size = (await shareOf(client, id, state))?.size;
  return typeof size === 'number' && Number.isSafeInteger(size) && size >= 0 ? size : undefined;
}

/** finish(), except that a tentative resume that proves wrong starts over once from byte 0. */
async function finishOrRestart(
  client: ApiClient,
  id: string,
  state: State,
  options: DownloadOptions,
): Promise<DownloadResult> {
  try {
    return await finish(client, id, state, options);
  } catch (err) {
    if (!(err instanceof VerificationError) || !state.tentative) throw err;
    options.onRestart?.(
      `${partPathOf(state.target!)} did not hold this share's bytes; starting over from byte 0`,
    );
    Object.assign(state, { offset: 0, resumedFrom: 0, validator: undefined, hash: undefined });
    state.tentative = false;
    await transfer(client, id, state, options, false);
    return finish(client, id, state, options);
  }
}

/**
 * --continue: asks for the headers (HEAD) and decides whether the `.part` can go on. It can only
 * with the validator it was started from, still the server's; otherwise it starts over.
 * Returns the result when the `.part` already holds everything.
 */
async function planResume(
  client: ApiClient,
  id: string,
  state: State,
  options: DownloadOptions,
): Promise<DownloadResult | undefined> {
  const head = await send(client, {
    method: 'HEAD',
    path: state.source.path,
    headers: state.source.headers,
    idempotent: true,
    retryServerErrors: true,
  });
  await head.dump();
  if (head.statusCode >= 400) throw await headFailure(state.source, head.statusCode);
  if (state.target === undefined) {
    state.target = join(state.directory, defaultFileName(head.headers, id, options.nameSuffix));
    state.nameFromServer = true;
  }
  const part = partPathOf(state.target);
  // Held before it is read: a second --continue of the same .part waits for nothing and stops.
  const have = (await holdPart(state, false)) ? (await state.part!.stat()).size : 0;
  const now = validatorOf(head.headers);
  const started = await options.validators?.get(part);
  state.expected = state.total = contentLength(head.headers);
  if (have === 0) return undefined;
  const restart = (reason: string) => options.onRestart?.(reason);
  const digest = reprDigest(head.headers);
  if (
    now &&
    !started &&
    digest !== undefined &&
    (state.expected === undefined || have <= state.expected)
  ) {
    // Nothing says which content the .part came from, but the server's sha256 will: go on, and
    // start over if the whole does not match.
    state.offset = state.resumedFrom = have;
    state.validator = now;
    state.digest = digest;
    state.tentative = true;
    if (state.expected === have) return finishOrRestart(client, id, state, options);
    return undefined;
  }
  if (!now || !started) {
    restart(
      now
        ? `${part} was started without a validator; starting over from byte 0`
        : 'the server gives no validator (ETag or Last-Modified) to resume with; starting over from byte 0',
    );
    return undefined;
  }
  if (!sameValidator(now, started)) {
    restart('the share changed since the partial download; starting over');
    return undefined;
  }
  if (state.expected !== undefined && have > state.expected) {
    restart('the partial file is larger than the share; starting over');
    return undefined;
  }
  state.offset = state.resumedFrom = have;
  state.validator = started;
  state.digest = reprDigest(head.headers);
  if (state.expected === have) return finish(client, id, state, options);
  return undefined;
}

/** The Range and If-Range headers for the next request. */
function rangeHeaders(state: State, options: DownloadOptions, windowStart: number | undefined) {
  const headers: Record<string, string> = {};
  const range = options.range;
  const windowEnd = range && 'end' in range ? range.end : undefined;
  if (windowStart === undefined && range && 'suffix' in range)
    headers.range = `bytes=-${range.suffix}`;
  else if ((windowStart ?? 0) + state.offset > 0 || windowEnd !== undefined)
    headers.range = `bytes=${(windowStart ?? 0) + state.offset}-${windowEnd ?? ''}`;
  if (headers.range && state.offset > 0 && state.validator)
    headers['if-range'] = state.validator.etag ?? state.validator.lastModified!;
  return headers;
}

/** Requests and writes the content, resuming from what was written after a broken connection. */
async function transfer(
  client: ApiClient,
  id: string,
  state: State,
  options: DownloadOptions,
  toStream: boolean,
): Promise<void> {
  const range = options.range;
  let windowStart: number | undefined =
    range && 'start' in range ? range.start : range ? undefined : 0;
  let started = false;
  for (let attempt = 1; ; attempt++) {
    const headers = rangeHeaders(state, options, windowStart);
    const res = await send(client, {
      method: 'GET',
      path: state.source.path,
      headers: { ...state.source.headers, ...headers },
      idempotent: true,
      retryServerErrors: true,
      download: true,
      signal: options.signal,
    }).catch(async (err: unknown) => {
      throw await resumeHint(state, options, err);
    });
    if (res.statusCode === 416 && options.resume && state.offset > 0 && !started) {
      await res.dump();
      options.onRestart?.('the partial file does not match the share; starting over');
      state.offset = state.resumedFrom = 0;
      continue;
    }
    if (res.statusCode >= 400) {
      const err = await toApiError(res);
      if (started && (res.statusCode === 404 || res.statusCode === 410))
        await partOfGoneShare(state, options, err);
      throw err;
    }
    windowStart = await acceptResponse(
      client,
      res,
      state,
      options,
      headers,
      toStream,
      windowStart,
      id,
    );
    if (!started) await checkOverwrite(state, options, res);
    if (!toStream && state.target !== undefined) {
      await holdPart(state, true).catch(async (err: unknown) => {
        await res.dump();
        throw err;
      });
      await rememberValidator(state, options, res.headers);
    } else if (state.offset === 0) {
      // A stream has no record, but a cut in the middle is resumed in this run all the same:
      // only with If-Range, so a share replaced meanwhile never adds its bytes to the old ones.
      state.validator = validatorOf(res.headers);
    }
    if (!started) {
      options.onStart?.({
        path: state.target ?? null,
        offset: state.offset,
        totalBytes: state.expected,
      });
    }
    started = true;
    let cut = await writeBody(res, state, options, toStream);
    // A body that ends before the bytes announced (chunked, or a shorter Content-Length than
    // the Content-Range) is cut short like a broken connection, and goes on from where it ended.
    if (!cut && state.expected !== undefined && state.offset < state.expected)
      cut = Object.assign(new Error('the body ended early'), {
        code: 'UND_ERR_RES_CONTENT_LENGTH_MISMATCH',
      });
    if (!cut) return;
    // Without a validator the rest could come from content that replaced these bytes, and only
    // a digest of the whole would notice: a byte range (never verified) is not resumed then, nor
    // is a download from a server that gives no digest either (the reference server: a share
    // replaced in between was saved as old bytes then new ones, exit 0). A file starts over from
    // byte 0 instead; a stream, whose bytes are out, cannot.
    const undetectable =
      !state.validator && options.range === undefined && !(await digestKnown(client, id, state));
    const unsafe = !state.validator && (options.range !== undefined || (undetectable && toStream));
    if (attempt > client.retry.retries || unsafe)
      throw await resumeHint(
        state,
        options,
        new NetworkError(
          `download from ${client.server} broke off: ${describeTransportError(cut)} (` +
            (unsafe
              ? 'not resumed: the server gives no validator (ETag or Last-Modified) to ask for the same content with'
              : `after ${attempt} attempts`) +
            ')',
          attempt,
          { cause: cut },
        ),
      );
    if (undetectable) {
      options.onRestart?.(
        `download from ${client.server} broke off: ${describeTransportError(cut)}; the server ` +
          'gives no validator (ETag or Last-Modified) or sha256 to resume it with; starting over from byte 0',
      );
      state.offset = state.resumedFrom = 0;
    }
    const delay = backoffDelay(client.retry, attempt);
    // --debug says so, as for every other retry: found from outside, a body cut and resumed
    // printed nothing.
    noteRetry(
      `GET ${state.source.path}: the body broke off after ${state.offset} bytes (${describeTransportError(cut)}); ` +
        `${state.offset > 0 ? 'resuming' : 'retrying'} in ${seconds(delay)} (attempt ${attempt + 1} of ${client.retry.retries + 1})`,
    );
    await sleep(delay, undefined, { signal: options.signal });
  }
}

/** Reads a response's status and headers into the state; returns where the window starts. */
async function acceptResponse(
  client: ApiClient,
  res: Response,
  state: State,
  options: DownloadOptions,
  headers: Record<string, string>,
  toStream: boolean,
  windowStart: number | undefined,
  id: string,
): Promise<number> {
  if (res.statusCode === 206) {
    const cr = contentRange(res.headers);
    if (!cr) {
      await res.dump();
      throw new Error('the server sent a partial response without a valid Content-Range');
    }
    // A 206 must be exactly the bytes asked for, of a content of the share's size: a shorter
    // one was saved as the whole file, and a shorter --range as the range.
    const known = state.total ?? (await shareSize(client, id, state));
    const total = cr.total ?? known;
    const asked = askedBytes(state, options, windowStart, total);
    const otherTotal = cr.total !== undefined && known !== undefined && cr.total !== known;
    if (
      otherTotal ||
      cr.start !== (asked.start ?? cr.start) ||
      (asked.end !== undefined ? cr.end !== asked.end : total === undefined && cr.end > asked.max)
    ) {
      await res.dump();
      throw new Error(
        `the server answered ${cr.text} to a request for ${asked.text}` +
          (otherTotal ? ` of a share of ${known} bytes` : ''),
      );
    }
    state.total = total;
    state.expected = state.offset + (cr.end - cr.start + 1);
    windowStart = windowStart ?? cr.start;
  } else {
    // 200: the whole content, because no range was asked or If-Range no longer matched, or
    // the last bytes of an empty content were asked (RFC 9110 §14.1.1: no 206 states none).
    const emptyTail =
      options.range !== undefined &&
      'suffix' in options.range &&
      state.offset === 0 &&
      contentLength(res.headers) === 0;
    if (headers.range && !emptyTail) {
      if (options.range || toStream) {
        await res.dump();
        throw new Error(
          state.offset > 0
            ? 'the share changed during the download'
            : 'the server ignored the byte range',
        );
      }
      options.onRestart?.('the share changed since the partial download; starting over');
      state.offset = state.resumedFrom = 0;
    }
    windowStart = 0;
    // Without a Content-Length (chunked, or read until the connection closes) the body has no end
    // of its own: the share's size, where the server states it, bounds it instead, so a server
    // that never stops cannot fill the disk. With one, it must be the share's size: a shorter
    // 200 was saved as the whole file.
    const announced = contentLength(res.headers);
    const size = await shareSize(client, id, state);
    if (announced !== undefined && size !== undefined && announced !== size) {
      await res.dump();
      throw new Error(`the server answered ${announced} bytes for a share of ${size} bytes`);
    }
    state.expected = state.total = announced ?? size;
  }
  state.digest = reprDigest(res.headers) ?? (state.offset > 0 ? state.digest : undefined);
  if (!toStream && state.target === undefined) {
    state.target = join(state.directory, defaultFileName(res.headers, id, options.nameSuffix));
    state.nameFromServer = true;
  }
  return windowStart;
}

/**
 * The bytes the last request asked for, as the 206 must cover them: from `start` (undefined: a
 * suffix whose start the size decides) to `end` (undefined where it cannot be known: an
 * open-ended request of a content of no stated size; the 206 may then end anywhere up to `max`).
 */
function askedBytes(
  state: State,
  options: DownloadOptions,
  windowStart: number | undefined,
  total: number | undefined,
): { start: number | undefined; end: number | undefined; max: number; text: string } {
  const range = options.range;
  const last = total === undefined ? undefined : total - 1;
  if (windowStart === undefined && range && 'suffix' in range) {
    const start = total === undefined ? undefined : Math.max(0, total - range.suffix);
    return {
      start,
      end: last,
      max: Number.MAX_SAFE_INTEGER,
      text: start === undefined ? `the last ${range.suffix} bytes` : `bytes ${start}-${last}`,
    };
  }
  const start = (windowStart ?? 0) + state.offset;
  const asked = range && 'end' in range ? range.end : undefined;
  // A request past the end is answered up to the last byte (RFC 9110 14.1.2).
  const end = last === undefined ? undefined : Math.min(asked ?? last, last);
  return {
    start,
    end,
    max: asked ?? Number.MAX_SAFE_INTEGER,
    text: `bytes ${start}-${end ?? asked ?? ''}`,
  };
}

/** Records the validator a new `.part` is started from, for a later --continue. */
async function rememberValidator(
  state: State,
  options: DownloadOptions,
  headers: IncomingHttpHeaders,
): Promise<void> {
  const validator = validatorOf(headers);
  if (state.target && (state.offset === 0 || !state.validator)) {
    state.validator = validator;
    // Only --continue needs it: a full or read-only disk under the config must not stop the
    // download (without it, a later --continue starts over, as with a server that gives none).
    try {
      await options.validators?.set(partPathOf(state.target), validator);
    } catch (err) {
      options.onNotice?.(
        `cannot keep what --continue needs (${systemErrorText(err) ?? (err as Error).message}); ` +
          `the download goes on, but could not be continued if interrupted`,
      );
    }
  }
}

/** A name that came from the server never replaces an existing file unless asked. */
async function checkOverwrite(state: State, options: DownloadOptions, res: Response) {
  // Nor a directory, even when asked: the rename at the end would fail, after the whole download
  // went into a NAME.part left beside it (`get ID --clobber` with a folder of the share's name).
  if (
    state.target !== undefined &&
    state.nameFromServer &&
    (await lstat(state.target).then(
      (s) => s.isDirectory(),
      () => false,
    ))
  ) {
    await res.dump();
    throw new FileExistsError(`${state.target} is a directory (choose another name with -o)`);
  }
  if (
    state.target !== undefined &&
    state.nameFromServer &&
    !options.overwrite &&
    // Anything of that name, a dangling symbolic link too (found from outside: one was replaced
    // by the download, exit 0, without --clobber).
    (await lstat(state.target).then(
      () => true,
      () => false,
    ))
  ) {
    await res.dump();
    throw new FileExistsError(
      `${state.target} already exists (choose another name with -o, or pass --clobber)`,
    );
  }
}

/**
 * Writes a response body (to the `.part` at the current offset, or to the stream). Returns the
 * transport error if the connection broke (the bytes received before it are kept), else null.
 */
async function writeBody(
  res: Response,
  state: State,
  options: DownloadOptions,
  toStream: boolean,
): Promise<unknown> {
  const part = state.target && !toStream ? partPathOf(state.target) : undefined;
  if (part) {
    await holdPart(state, true);
    // Only a .part that holds bytes is cut: on ext4, truncating a file to 0, even an empty one,
    // makes its close allocate and start writing every block it was given (auto_da_alloc), which
    // held a 512 MiB download's end up by 0.16 s.
    if (state.offset === 0 && (await state.part!.stat()).size > 0) await state.part!.truncate(0);
  }
  if (part && (state.offset === 0 || !state.hash)) await startHash(state, part);
  const sink = part
    ? new FileSink(state.part!, part, state.offset, state.hash)
    : new StreamSink(options.stdout ?? process.stdout, state.streamHash);
  let received = 0;
  const progress = (n: number) => {
    received += n;
    if (state.expected !== undefined && state.offset + received > state.expected)
      throw new Error(
        `the server sent more than the ${state.expected} bytes it announced; nothing more was written`,
      );
    options.onProgress?.(state.offset + received, state.expected);
  };
  let cut: unknown = null;
  try {
    await res.readInto({
      space: () => sink.space(),
      filled: (n) => {
        progress(n);
        return sink.filled(n);
      },
      write: (data) => {
        progress(data.length);
        return sink.write(data);
      },
    });
  } catch (err) {
    if (!isTransportError(err)) {
      if (sink instanceof FileSink) await sink.close().catch(() => undefined);
      throw err;
    }
    cut = err;
  }
  // Every byte received before a cut is kept: the next attempt goes on from there.
  if (sink instanceof FileSink) await sink.close();
  else await sink.flushed();
  state.offset += sink.written;
  return cut;
}

/** A new running hash for a `.part`, covering what it already holds (a resumed download). */
async function startHash(state: State, part: string): Promise<void> {
  state.hash?.dispose();
  state.hash = fileHasher().create(state.expected);
  if (state.offset > 0) state.hash.updateFromFile(part, 0, state.offset).catch(() => undefined);
}

/**
 * The share (or link) went away while its download was being resumed in this run: no download
 * can finish its `.part` now. One this run began is removed with its record, so the failure
 * leaves nothing; one it resumed from an earlier run stays, and the line says so. Found from
 * outside: a share deleted mid-download left a `.part` and its record, unsaid.
 */
async function partOfGoneShare(state: State, options: DownloadOptions, err: Error): Promise<void> {
  if (state.target === undefined || !state.part) return;
  const part = partPathOf(state.target);
  if (state.resumedFrom > 0) {
    err.message += `; the ${state.resumedFrom} bytes downloaded before stay in ${part}, which no download can finish now`;
    return;
  }
  await state.part.close().catch(() => undefined);
  state.part = undefined;
  await rm(part, { force: true }).catch(() => undefined);
  await Promise.resolve(options.validators?.set(part, undefined)).catch(() => undefined);
}

/**
 * A failed download whose `.part` holds nothing leaves neither it nor its record: nothing can be
 * resumed from it. Found from outside: an answer that broke before its first byte (a malformed
 * chunked body) left an empty NAME.part and a record in partials/. Removed while still locked,
 * so another fshare's new `.part` of that name is never the one removed.
 */
async function dropEmptyPart(state: State, options: DownloadOptions): Promise<void> {
  if (state.target === undefined || !state.part) return;
  const size = await state.part.stat().then(
    (s) => s.size,
    () => undefined,
  );
  if (size !== 0) return;
  const part = partPathOf(state.target);
  await rm(part, { force: true }).catch(() => undefined);
  await state.part.close().catch(() => undefined);
  state.part = undefined;
  await Promise.resolve(options.validators?.set(part, undefined)).catch(() => undefined);
}

/** A network failure that leaves data in the .part says how to pick it up again. */
async function resumeHint(state: State, options: DownloadOptions, err: unknown): Promise<unknown> {
  const part = state.target === undefined ? undefined : partPathOf(state.target);
  const held = part === undefined ? 0 : ((await sizeOf(part)) ?? 0);
  // --continue cannot be combined with --range: a range is fetched again.
  if (err instanceof NetworkError && held > 0)
    err.message += options.range
      ? `; ${held} bytes kept in ${part}, run the command again for the whole range`
      : `; ${held} bytes kept in ${part}, run again with --continue`;
  return err;
}

/** Checks the byte count and the sha256, then renames the `.part` into place. */
async function finish(
  client: ApiClient,
  id: string,
  state: State,
  options: DownloadOptions,
): Promise<DownloadResult> {
  const target = state.target;
  const part = target === undefined ? undefined : partPathOf(target);
  if (part && state.expected !== undefined && state.offset !== state.expected)
    throw new Error(
      `download incomplete: ${state.offset} of ${state.expected} bytes; run again with --continue`,
    );
  let sha256: string | null = null;
  let verified = false;
  if (!options.range) {
    // The whole content is the share's size, whatever a response (or a HEAD) announced.
    const size = await shareSize(client, id, state);
    if (size !== undefined && state.offset !== size)
      throw new Error(
        `the server announced ${state.offset} bytes for a share of ${size} bytes` +
          (part ? `; they are kept in ${part}` : ''),
      );
    if (part) {
      if (!state.hash) await startHash(state, part);
      sha256 = await state.hash!.digest().catch(async () => {
        const again = fileHasher().create(state.offset);
        await again.updateFromFile(part, 0, state.offset);
        return again.digest();
      });
      state.hash = undefined;
    } else if (state.streamHash) sha256 = state.streamHash.digest('hex');
    // Every sha256 the server states must be the bytes': the answer's Repr-Digest and the
    // share's record (or the link's, which its URL may name). Found from outside: a Repr-Digest
    // of other bytes won over the link's sha256, even one named in the URL, and they were
    // saved as verified.
    const stated = (await shareOf(client, id, state))?.sha256;
    const claims = [state.digest, typeof stated === 'string' ? stated : undefined].filter(
      (d): d is string => d !== undefined,
    );
    if (sha256 === '') {
      // FSHARE_BENCH_NO_DIGEST (benchmarks only): nothing was hashed, nothing is claimed
    } else if (claims.length > 0 && sha256 !== null) {
      // Hex in either case is the same digest (a server that answered upper case was refused).
      const wrong = claims.find((claim) => sha256 !== claim.toLowerCase());
      if (wrong !== undefined)
        throw new VerificationError(
          `the downloaded bytes have sha256 ${sha256}, not the server's ${wrong}` +
            (!state.source.pinned &&
            claims.length > 1 &&
            claims.some((claim) => sha256 === claim.toLowerCase())
              ? ' (the answer and the record of the share disagree: was it replaced during the download?)'
              : '') +
            (part ? `; they are kept in ${part}` : '') +
            // Its first bytes came from an earlier run, and may be what is wrong: every later
            // --continue failed the same way, with no word of the way out (found from outside).
            (part && state.resumedFrom > 0
              ? ` (the first ${state.resumedFrom} of them from an earlier run: without --continue it downloads whole again)`
              : ''),
        );
      verified = true;
    } else options.onNotice?.('the download could not be verified: the server gives no sha256');
  }
  if (!part || !target)
    return { path: null, bytes: state.offset, resumedFrom: state.resumedFrom, sha256, verified };
  await rename(part, target).catch((err: NodeJS.ErrnoException) => {
    // The bytes are verified and kept in the .part; what failed is putting them at NAME.
    throw Object.assign(err, { path: target, dest: undefined });
  });
  // A validator left behind names a .part that is gone, and is never used: no reason to fail.
  try {
    await options.validators?.set(part, undefined);
  } catch {
    // nothing lost: the entry is only ever read together with its .part
  }
  return { path: target, bytes: state.offset, resumedFrom: state.resumedFrom, sha256, verified };
}
