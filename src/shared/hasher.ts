import { createHash, type Hash } from 'node:crypto';
import { open, type FileHandle } from 'node:fs/promises';
import { Worker } from 'node:worker_threads';
import { setKeptFlagsAgain } from './v8-flags.js';

/**
 * sha256 off the event loop: one worker thread holds the running hashes of every upload and
 * reads the bytes to hash from the files they were just written to (the page cache), so hashing
 * overlaps receiving and never holds a request back, and no bytes are copied between threads.
 * Messages are handled in order, so a hash's updates, copies and digest happen in the order they
 * were asked for. The thread ends once it has held no hash for 2 s, and starts again when needed.
 *
 * A hash known to cover at most INLINE_MAX bytes is computed here instead, on the calling thread:
 * starting the thread costs about 30 ms of CPU (a new V8 isolate), more than hashing 4 MiB even
 * without SHA instructions (17 ms at 240 MB/s), and a small transfer has nothing to overlap.
 */
export const INLINE_MAX = 4 * 1024 * 1024;

/** A sha256 being computed, on the hashing thread or (small ones) here. */
export interface Sha256 {
  /** Adds bytes [start, end) of a file; resolves once they are hashed. */
  updateFromFile(path: string, start: number, end: number): Promise<void>;
  /**
   * Adds bytes [start, end) of a file already open: what is hashed is that file, whatever its
   * path names meanwhile. The handle must stay open until this resolves.
   */
  updateFromHandle(handle: FileHandle, start: number, end: number): Promise<void>;
  /**
   * Shares memory with the hash: bytes placed in `ring` are hashed from there by
   * updateFromRing, with no copy and no reading back.
   */
  useRing(ring: SharedArrayBuffer): void;
  /** Adds bytes [off, off + len) of the ring; resolves once hashed (the slot is free again). */
  updateFromRing(off: number, len: number): Promise<void>;
  /** Resolves once every update asked for so far is done (the files may go away then). */
  settled(): Promise<unknown>;
  /** A second hash with the same state, to go on from here without changing this one. */
  copy(): Sha256;
  /** The lower-case hex digest of everything added; the hash is used up. */
  digest(): Promise<string>;
  dispose(): void;
}

// Plain CommonJS run with `eval`, so it works from the TypeScript sources (tests) and from dist/.
const WORKER_SOURCE = `
const { parentPort } = require('node:worker_threads');
const { createHash } = require('node:crypto');
const { openSync, readSync, closeSync } = require('node:fs');
const hashes = new Map();
const rings = new Map();
const buffer = Buffer.allocUnsafe(1024 * 1024);
parentPort.on('message', (m) => {
  try {
    switch (m.t) {
      case 'new': hashes.set(m.id, createHash('sha256')); break;
      case 'copy': hashes.set(m.id, hashes.get(m.from).copy()); break;
      case 'file': {
        const hash = hashes.get(m.id);
        // m.fd: a descriptor the main thread holds open (threads share the process's descriptors)
        const fd = m.fd ?? openSync(m.path, 'r');
        try {
          let pos = m.start;
          while (pos < m.end) {
            const n = readSync(fd, buffer, 0, Math.min(buffer.length, m.end - pos), pos);
            if (n === 0) throw new Error('the file ended at byte ' + pos + ' of ' + m.end);
            hash.update(buffer.subarray(0, n));
            pos += n;
          }
        } finally {
          if (m.fd === undefined) closeSync(fd);
        }
        parentPort.postMessage({ req: m.req });
        break;
      }
      case 'ring': rings.set(m.id, new Uint8Array(m.sab)); break;
      case 'slot':
        hashes.get(m.id).update(rings.get(m.id).subarray(m.off, m.off + m.len));
        parentPort.postMessage({ req: m.req });
        break;
      case 'digest':
        parentPort.postMessage({ req: m.req, hex: hashes.get(m.id).digest('hex') });
        hashes.delete(m.id);
        rings.delete(m.id);
        break;
      case 'drop': hashes.delete(m.id); rings.delete(m.id); break;
      case 'sync': parentPort.postMessage({ req: m.req }); break;
    }
  } catch (err) {
    // The hash is lost: its digest fails, and the caller computes it again from the file.
    if (m.id !== undefined) hashes.delete(m.id);
    if (m.req !== undefined) parentPort.postMessage({ req: m.req, error: String(err && err.message || err) });
  }
});
`;

interface Reply {
  req: number;
  hex?: string;
  error?: string;
}

export class HashWorker {
  private worker: Worker | null = null;
  /** Resolves once `worker` is online (or has failed to start). */
  private online: Promise<void> = Promise.resolve();
  private starting = false;
  private nextId = 1;
  private nextReq = 1;
  /** Hashes made and not yet digested or disposed of: while any is, the thread holds state. */
  private live = 0;
  private idleTimer: NodeJS.Timeout | null = null;
  private readonly requests = new Map<
    number,
    { resolve: (hex?: string) => void; reject: (e: Error) => void }
  >();

  /**
   * `disabled` (benchmarks only, FSHARE_BENCH_NO_DIGEST=1): nothing is hashed and every digest
   * is "", so a benchmark can measure the same transfer without hashing beside it.
   */
  constructor(private readonly options: { disabled?: boolean; idleMs?: number } = {}) {}

  get disabled(): boolean {
    return this.options.disabled === true;
  }

  /**
   * Resolves once the hashing thread, if one is starting, runs (about 20–30 ms after the first
   * hash that needs it). Creating its V8 isolate sets back the flags this process keeps
   * (shared/v8-flags.ts) until then, so a server reads no body in between.
   */
  ready(): Promise<void> {
    if (!this.worker || !this.starting) return Promise.resolve();
    this.worker.ref(); // awaited: keep the process alive until it runs
    return this.online;
  }

  /** Whether the thread is running now (it ends when idle). */
  get running(): boolean {
    return this.worker !== null;
  }

  private get thread(): Worker {
    if (!this.worker) {
      const worker = new Worker(WORKER_SOURCE, { eval: true });
      worker.on('message', (m: Reply) => this.onReply(m));
      worker.on('error', (err) => this.onExit(worker, err));
      worker.on('exit', () => this.onExit(worker, new Error('the hashing thread stopped')));
      this.starting = true;
      this.online = new Promise<void>((resolve) => {
        // Once, and only for the thread in use: one that was ended may exit while the next starts.
        let once = false;
        const started = () => {
          if (once) return;
          once = true;
          if (this.worker === worker) {
            this.starting = false;
            if (this.requests.size === 0) worker.unref();
          }
          resolve();
        };
        worker.once('online', () => {
          setKeptFlagsAgain(); // its V8 isolate's set-up put some back (shared/v8-flags.ts)
          started();
        });
        worker.once('exit', started); // failed to start: hashes fail, and are redone
      });
      worker.unref(); // after the listeners: adding a 'message' listener refs the port again
      this.worker = worker;
    }
    return this.worker;
  }

  private onReply(m: Reply): void {
    const req = this.requests.get(m.req);
    this.requests.delete(m.req);
    if (this.requests.size === 0) {
      this.worker?.unref(); // idle: let the process end
      this.endWhenIdle();
    }
    if (!req) return;
    if (m.error !== undefined) req.reject(new Error(m.error));
    else req.resolve(m.hex);
  }

  /**
   * With no hash held and nothing asked, the thread ends after `idleMs` (2 s), and with it its
   * heap (about 10 MB); the next hash starts a new one.
   */
  private endWhenIdle(): void {
    if (this.idleTimer || !this.worker || this.live > 0 || this.requests.size > 0) return;
    this.idleTimer = setTimeout(() => {
      this.idleTimer = null;
      const worker = this.worker;
      if (!worker || this.live > 0 || this.requests.size > 0) return;
      this.worker = null;
      void worker.terminate();
    }, this.options.idleMs ?? 2000);
    this.idleTimer.unref();
  }

  private busy(): void {
    if (this.idleTimer) clearTimeout(this.idleTimer);
    this.idleTimer = null;
  }

  /** Every hash the thread held is gone: fail what waits on it; the next call starts a new one. */
  private onExit(worker: Worker, err: Error): void {
    if (this.worker !== worker) return; // one that was ended when idle, or already replaced
    this.worker = null;
    for (const req of this.requests.values()) req.reject(err);
    this.requests.clear();
  }

  private post(message: Record<string, unknown>): void {
    if (!this.options.disabled) this.thread.postMessage(message);
  }

  private ask(message: Record<string, unknown>): Promise<string | undefined> {
    if (this.options.disabled) return Promise.resolve('');
    const req = this.nextReq++;
    return new Promise((resolve, reject) => {
      this.requests.set(req, { resolve, reject });
      const thread = this.thread;
      thread.ref(); // an answer is awaited: keep the process alive for it
      thread.postMessage({ ...message, req });
    });
  }

  /**
   * Starts the hashing thread now if a hash of `expectedBytes` (undefined: not known) would run
   * there, so that a body about to be read waits for it (`ready`) instead of being read while it
   * starts. A thread started for nothing ends after `idleMs`, as an idle one does.
   */
  prepare(expectedBytes?: number): void {
    if (this.options.disabled || this.worker) return;
    if (expectedBytes !== undefined && expectedBytes <= INLINE_MAX) return;
    void this.thread;
    this.endWhenIdle();
  }

  /**
   * A new, empty sha256. `expectedBytes`: how much it will cover, when known; at most INLINE_MAX
   * and it is computed on this thread (the hashing thread is not started for it).
   */
  create(expectedBytes?: number): Sha256 {
    if (!this.options.disabled && expectedBytes !== undefined && expectedBytes <= INLINE_MAX)
      return new InlineHash(createHash('sha256'));
    this.busy();
    if (!this.options.disabled) this.live++;
    const id = this.nextId++;
    this.post({ t: 'new', id });
    return new RunningHash(this, id);
  }

  /** @internal */
  copyOf(from: number): RunningHash {
    this.busy();
    if (!this.options.disabled) this.live++;
    const id = this.nextId++;
    this.post({ t: 'copy', id, from });
    return new RunningHash(this, id);
  }

  /** @internal */
  fromFile(id: number, path: string, start: number, end: number): Promise<unknown> {
    return this.ask({ t: 'file', id, path, start, end });
  }

  /** @internal */
  fromFd(id: number, fd: number, start: number, end: number): Promise<unknown> {
    return this.ask({ t: 'file', id, fd, start, end });
  }

  /** @internal */
  attachRing(id: number, ring: SharedArrayBuffer): void {
    this.post({ t: 'ring', id, sab: ring });
  }

  /** @internal */
  fromRing(id: number, off: number, len: number): Promise<unknown> {
    return this.ask({ t: 'slot', id, off, len });
  }

  /** @internal */
  async digest(id: number): Promise<string> {
    const hex = this.ask({ t: 'digest', id });
    this.finished();
    return (await hex)!;
  }

  /** Resolves once every message sent before it has been handled. */
  settled(): Promise<unknown> {
    return this.ask({ t: 'sync' });
  }

  /** @internal */
  drop(id: number): void {
    if (this.worker) this.worker.postMessage({ t: 'drop', id });
    this.finished();
    this.endWhenIdle();
  }

  private finished(): void {
    if (this.live > 0) this.live--;
  }

  async close(): Promise<void> {
    this.busy();
    const worker = this.worker;
    if (worker) this.onExit(worker, new Error('the hashing thread was closed'));
    if (worker) await worker.terminate();
  }
}

/** One sha256 being computed in the worker. Use it from one place at a time. */
export class RunningHash implements Sha256 {
  private finished = false;

  constructor(
    private readonly worker: HashWorker,
    private readonly id: number,
  ) {}

  /** Adds bytes [start, end) of a file; the worker reads them. Resolves once they are hashed. */
  async updateFromFile(path: string, start: number, end: number): Promise<void> {
    if (end > start) await this.worker.fromFile(this.id, path, start, end);
  }

  /** Adds bytes [start, end) of an open file; the worker reads them through its descriptor. */
  async updateFromHandle(handle: FileHandle, start: number, end: number): Promise<void> {
    if (end > start) await this.worker.fromFd(this.id, handle.fd, start, end);
  }

  /**
   * Shares memory with the hashing thread: bytes placed in `ring` are hashed from there by
   * updateFromRing, with no copy and no reading back.
   */
  useRing(ring: SharedArrayBuffer): void {
    this.worker.attachRing(this.id, ring);
  }

  /** Adds bytes [off, off + len) of the ring; resolves once hashed (the slot is free again). */
  async updateFromRing(off: number, len: number): Promise<void> {
    if (len > 0) await this.worker.fromRing(this.id, off, len);
  }

  /** Resolves once every update asked for so far is done (the files may go away then). */
  settled(): Promise<unknown> {
    return this.worker.settled();
  }

  /** A second hash with the same state, to go on from here without changing this one. */
  copy(): RunningHash {
    return this.worker.copyOf(this.id);
  }

  /** The lower-case hex digest of everything added; the hash is used up. */
  digest(): Promise<string> {
    this.finished = true;
    return this.worker.digest(this.id);
  }

  dispose(): void {
    if (this.finished) return;
    this.finished = true;
    this.worker.drop(this.id);
  }
}

/**
 * Files are read for inline hashes one at a time, as the thread does: a push of thousands of
 * small files holds one file open and one buffer, not thousands.
 */
let inlineReads: Promise<unknown> = Promise.resolve();
let inlineBuffer: Buffer | undefined;

function readInline(
  file: string | FileHandle,
  start: number,
  end: number,
  hash: Hash,
): Promise<void> {
  const read = inlineReads.then(async () => {
    if (end <= start) return;
    const handle = typeof file === 'string' ? await open(file, 'r') : file;
    try {
      inlineBuffer ??= Buffer.allocUnsafe(256 * 1024);
      for (let pos = start; pos < end;) {
        const want = Math.min(inlineBuffer.length, end - pos);
        const { bytesRead } = await handle.read(inlineBuffer, 0, want, pos);
        if (bytesRead === 0) throw new Error(`the file ended at byte ${pos} of ${end}`);
        hash.update(inlineBuffer.subarray(0, bytesRead));
        pos += bytesRead;
      }
    } finally {
      if (typeof file === 'string') await handle.close();
    }
  });
  inlineReads = read.catch(() => undefined);
  return read;
}

/**
 * A sha256 computed on this thread, with the same order as the worker's: each update runs once
 * the ones asked for before it are done, whether or not they were awaited. A failed update loses
 * the hash (its digest fails), as on the thread.
 */
class InlineHash implements Sha256 {
  private tail: Promise<Hash>;
  private ring: Uint8Array | undefined;

  constructor(start: Hash | Promise<Hash>) {
    this.tail = Promise.resolve(start);
  }

  private queue(op: (hash: Hash) => void | Promise<void>): Promise<void> {
    const next = this.tail.then(async (hash) => {
      await op(hash);
      return hash;
    });
    next.catch(() => undefined); // a failure is the caller's (and the digest's) to see
    this.tail = next;
    return next.then(() => undefined);
  }

  updateFromFile(path: string, start: number, end: number): Promise<void> {
    return this.queue((hash) => readInline(path, start, end, hash));
  }

  updateFromHandle(handle: FileHandle, start: number, end: number): Promise<void> {
    return this.queue((hash) => readInline(handle, start, end, hash));
  }

  useRing(ring: SharedArrayBuffer): void {
    this.ring = new Uint8Array(ring);
  }

  updateFromRing(off: number, len: number): Promise<void> {
    return this.queue((hash) => {
      if (len > 0) hash.update(this.ring!.subarray(off, off + len));
    });
  }

  settled(): Promise<unknown> {
    return this.tail.then(
      () => undefined,
      () => undefined,
    );
  }

  copy(): Sha256 {
    return new InlineHash(this.tail.then((hash) => hash.copy()));
  }

  digest(): Promise<string> {
    return this.tail.then((hash) => hash.digest('hex'));
  }

  dispose(): void {}
}
