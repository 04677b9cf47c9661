import { Worker } from 'node:worker_threads';

/**
 * sha256 off the event loop: one worker thread holds the running hashes of every upload, so
 * hashing overlaps receiving instead of stalling it. Messages are handled in order, so a hash's
 * updates, copies and digest happen in the order they were asked for.
 *
 * Memory is bounded: `update` waits while more than MAX_QUEUED bytes are on their way to the
 * worker, which pushes back on whoever feeds it (a request body). Bytes already on disk are
 * hashed by the worker reading the file itself (`updateFromFile`), so they cost no queue space.
 */
const MAX_QUEUED = 8 * 1024 * 1024;
/** Bytes travel to the thread in buffers of this size, which it hands back. */
const PIECE = 1024 * 1024;

// Plain CommonJS run with `eval`, so it works from the TypeScript sources (tests) and from dist/.
const WORKER_SOURCE = `
const { parentPort } = require('node:worker_threads');
const { createHash } = require('node:crypto');
const { openSync, readSync, closeSync } = require('node:fs');
const hashes = new Map();
const buffer = Buffer.allocUnsafe(1024 * 1024);
parentPort.on('message', (m) => {
  try {
    switch (m.t) {
      case 'new': hashes.set(m.id, createHash('sha256')); break;
      case 'copy': hashes.set(m.id, hashes.get(m.from).copy()); break;
      case 'data':
        try {
          hashes.get(m.id).update(new Uint8Array(m.buf, 0, m.len));
        } finally {
          // The buffer goes back to be filled again: no garbage per MiB hashed.
          parentPort.postMessage({ t: 'ack', bytes: m.len, buf: m.buf }, [m.buf]);
        }
        break;
      case 'file': {
        const hash = hashes.get(m.id);
        const fd = openSync(m.path, 'r');
        try {
          let pos = m.start;
          while (pos < m.end) {
            const n = readSync(fd, buffer, 0, Math.min(buffer.length, m.end - pos), pos);
            if (n === 0) throw new Error('the file ended at byte ' + pos + ' of ' + m.end);
            hash.update(buffer.subarray(0, n));
            pos += n;
          }
        } finally {
          closeSync(fd);
        }
        parentPort.postMessage({ t: 'done', req: m.req });
        break;
      }
      case 'digest':
        parentPort.postMessage({ t: 'done', req: m.req, hex: hashes.get(m.id).digest('hex') });
        hashes.delete(m.id);
        break;
      case 'drop': hashes.delete(m.id); break;
    }
  } catch (err) {
    if (m.id !== undefined) hashes.delete(m.id);
    if (m.req !== undefined) parentPort.postMessage({ t: 'done', req: m.req, error: String(err && err.message || err) });
  }
});
`;

type Reply =
  | { t: 'ack'; bytes: number; buf: ArrayBuffer }
  | { t: 'done'; req: number; hex?: string; error?: string };

export class HashWorker {
  /**
   * `disabled` (benchmarks only, FSHARE_BENCH_NO_DIGEST=1): nothing is hashed and every digest
   * is "", so a benchmark can measure the same transfer without hashing beside it.
   */
  constructor(private readonly options: { disabled?: boolean } = {}) {}

  private worker: Worker | null = null;
  private nextId = 1;
  private nextReq = 1;
  private queued = 0;
  private readonly waitingForRoom: (() => void)[] = [];
  /** Buffers the thread gave back, to carry the next bytes. */
  private readonly spare: ArrayBuffer[] = [];
  private readonly requests = new Map<
    number,
    { resolve: (hex?: string) => void; reject: (e: Error) => void }
  >();

  private get thread(): Worker {
    if (!this.worker) {
      const worker = new Worker(WORKER_SOURCE, { eval: true });
      worker.unref();
      worker.on('message', (m: Reply) => this.onReply(m));
      worker.on('error', (err) => this.onExit(err));
      worker.on('exit', () => this.onExit(new Error('the hashing thread stopped')));
      this.worker = worker;
    }
    return this.worker;
  }

  private onReply(m: Reply): void {
    if (m.t === 'ack') {
      this.queued -= m.bytes;
      if (this.spare.length < MAX_QUEUED / PIECE) this.spare.push(m.buf);
      while (this.queued < MAX_QUEUED && this.waitingForRoom.length) this.waitingForRoom.shift()!();
      return;
    }
    const req = this.requests.get(m.req);
    this.requests.delete(m.req);
    if (!req) return;
    if (m.error !== undefined) req.reject(new Error(m.error));
    else req.resolve(m.hex);
  }

  /** Every hash the thread held is gone: fail what waits on it; the next call starts a new one. */
  private onExit(err: Error): void {
    if (!this.worker) return;
    this.worker = null;
    this.queued = 0;
    for (const wake of this.waitingForRoom.splice(0)) wake();
    for (const req of this.requests.values()) req.reject(err);
    this.requests.clear();
  }

  private ask(message: Record<string, unknown>): Promise<string | undefined> {
    const req = this.nextReq++;
    return new Promise((resolve, reject) => {
      this.requests.set(req, { resolve, reject });
      this.thread.postMessage({ ...message, req });
    });
  }

  /** A new, empty sha256. */
  create(): RunningHash {
    const id = this.nextId++;
    if (!this.options.disabled) this.thread.postMessage({ t: 'new', id });
    return new RunningHash(this, id);
  }

  /** @internal */
  copyOf(from: number): RunningHash {
    const id = this.nextId++;
    if (!this.options.disabled) this.thread.postMessage({ t: 'copy', id, from });
    return new RunningHash(this, id);
  }

  /** @internal Hands the bytes to the thread (the buffer is copied once); waits for room. */
  async feed(id: number, bytes: Uint8Array): Promise<void> {
    if (this.options.disabled) return;
    while (this.queued >= MAX_QUEUED) await new Promise<void>((r) => this.waitingForRoom.push(r));
    for (let off = 0; off < bytes.length; off += PIECE) {
      const part = bytes.subarray(off, off + PIECE);
      const buf = this.spare.pop() ?? new ArrayBuffer(PIECE);
      new Uint8Array(buf).set(part);
      this.queued += part.length;
      this.thread.postMessage({ t: 'data', id, buf, len: part.length }, [buf]);
    }
  }

  /** @internal */
  fromFile(id: number, path: string, start: number, end: number): Promise<unknown> {
    if (this.options.disabled) return Promise.resolve();
    return this.ask({ t: 'file', id, path, start, end });
  }

  /** @internal */
  async digest(id: number): Promise<string> {
    if (this.options.disabled) return '';
    return (await this.ask({ t: 'digest', id }))!;
  }

  /** @internal */
  drop(id: number): void {
    this.worker?.postMessage({ t: 'drop', id });
  }

  async close(): Promise<void> {
    const worker = this.worker;
    this.onExit(new Error('the hashing thread was closed'));
    if (worker) await worker.terminate();
  }
}

/** One sha256 being computed in the worker. Use it from one place at a time. */
export class RunningHash {
  private finished = false;

  constructor(
    private readonly worker: HashWorker,
    private readonly id: number,
  ) {}

  /** Adds bytes; resolves when the worker has room for more (not when they are hashed). */
  update(bytes: Uint8Array): Promise<void> {
    return this.worker.feed(this.id, bytes);
  }

  /** Adds bytes [start, end) of a file; the worker reads them. Resolves once they are hashed. */
  async updateFromFile(path: string, start: number, end: number): Promise<void> {
    if (end > start) await this.worker.fromFile(this.id, path, start, end);
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
