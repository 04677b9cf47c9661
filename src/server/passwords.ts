import { randomBytes, timingSafeEqual } from 'node:crypto';
import { Worker } from 'node:worker_threads';

/**
 * Password hashing (scrypt) on a thread of its own. Node's scrypt runs on the libuv pool that
 * file reads and writes also use, so a flood of logins made downloads wait seconds; here hashes
 * wait only for each other. At most `maxQueued` wait at once: beyond that the server is busy
 * (BusyError, answered 503 with Retry-After), so a flood costs the attacker, not the queue.
 */
/**
 * N = 2^15, r = 8: 32 MiB per hash. Besides being stronger than 0.1's 2^14, a buffer above
 * 32 MiB is one glibc always maps and unmaps (its dynamic mmap threshold stops at 32 MiB), so no
 * sign-in leaves memory behind; 16 MiB buffers raised that threshold and left ~25 MB resident.
 * Hashes with other parameters still verify and are replaced at the next sign-in.
 */
const SCRYPT = { N: 32768, r: 8, p: 1, maxmem: 64 * 1024 * 1024 };
const KEYLEN = 64;

const WORKER_SOURCE = `
const { parentPort } = require('node:worker_threads');
const { scryptSync } = require('node:crypto');
parentPort.on('message', (m) => {
  try {
    const key = scryptSync(m.password, Buffer.from(m.salt, 'base64'), m.keylen, m.params);
    parentPort.postMessage({ req: m.req, key: key.toString('base64') });
  } catch (err) {
    parentPort.postMessage({ req: m.req, error: String(err && err.message || err) });
  }
});
`;

/** Too many password hashes are waiting: try again in a moment. */
export class BusyError extends Error {
  constructor() {
    super('The server is busy checking passwords; try again in a moment');
  }
}

interface Params {
  N: number;
  r: number;
  p: number;
  maxmem: number;
}

export class PasswordHasher {
  private worker: Worker | null = null;
  private nextReq = 1;
  private readonly waiting = new Map<
    number,
    { resolve: (key: Buffer) => void; reject: (e: Error) => void }
  >();
  private dummy: Promise<string> | null = null;
  private idleTimer: NodeJS.Timeout | null = null;

  /**
   * `idleMs`: the thread ends after this long without work, and with it its heap and the memory
   * scrypt used (about 25 MB in all); the next sign-in starts a new one in a few milliseconds.
   */
  constructor(
    private readonly maxQueued = 32,
    private readonly idleMs = 2000,
  ) {}

  private get thread(): Worker {
    if (!this.worker) {
      const worker = new Worker(WORKER_SOURCE, { eval: true });
      worker.on('message', (m: { req: number; key?: string; error?: string }) => {
        const entry = this.waiting.get(m.req);
        this.waiting.delete(m.req);
        if (this.waiting.size === 0) {
          worker.unref(); // idle: let the process end
          this.idleTimer = setTimeout(() => {
            this.idleTimer = null;
            if (this.worker === worker && this.waiting.size === 0) {
              this.worker = null;
              void worker.terminate();
            }
          }, this.idleMs);
          this.idleTimer.unref();
        }
        if (!entry) return;
        if (m.error !== undefined) entry.reject(new Error(m.error));
        else entry.resolve(Buffer.from(m.key!, 'base64'));
      });
      const fail = (err: Error) => {
        if (this.worker !== worker) return;
        this.worker = null;
        for (const entry of this.waiting.values()) entry.reject(err);
        this.waiting.clear();
      };
      worker.on('error', fail);
      worker.on('exit', () => fail(new Error('the password thread stopped')));
      worker.unref(); // after the listeners: adding a 'message' listener refs the port again
      this.worker = worker;
    }
    return this.worker;
  }

  private derive(password: string, salt: Buffer, keylen: number, params: Params): Promise<Buffer> {
    if (this.waiting.size >= this.maxQueued) return Promise.reject(new BusyError());
    const req = this.nextReq++;
    return new Promise((resolve, reject) => {
      this.waiting.set(req, { resolve, reject });
      if (this.idleTimer) clearTimeout(this.idleTimer);
      this.idleTimer = null;
      const thread = this.thread;
      thread.ref(); // an answer is awaited: keep the process alive for it
      thread.postMessage({ req, password, salt: salt.toString('base64'), keylen, params });
    });
  }

  /** `scrypt$N$r$p$salt$hash`, base64 parts: a slow salted hash, parameters kept for later changes. */
  async hash(password: string): Promise<string> {
    const salt = randomBytes(16);
    const hash = await this.derive(password, salt, KEYLEN, SCRYPT);
    return [
      'scrypt',
      SCRYPT.N,
      SCRYPT.r,
      SCRYPT.p,
      salt.toString('base64'),
      hash.toString('base64'),
    ].join('$');
  }

  /**
   * Checks a password against a stored hash. With no stored hash (no such user) the same work is
   * done against a dummy one, so "no such user" takes as long as "wrong password".
   */
  async verify(password: string, stored: string | undefined): Promise<boolean> {
    this.dummy ??= this.hash(randomBytes(16).toString('hex')).catch((err: unknown) => {
      this.dummy = null; // busy this time: try again next time
      throw err;
    });
    const [scheme, n, r, p, salt, hash] = (stored ?? (await this.dummy)).split('$');
    if (scheme !== 'scrypt' || !salt || !hash) return false;
    const expected = Buffer.from(hash, 'base64');
    const actual = await this.derive(password, Buffer.from(salt, 'base64'), expected.length, {
      N: Number(n),
      r: Number(r),
      p: Number(p),
      maxmem: SCRYPT.maxmem,
    });
    return timingSafeEqual(actual, expected) && stored !== undefined;
  }

  /** True when a stored hash was made with other parameters than new hashes get. */
  outdated(stored: string): boolean {
    const [scheme, n, r, p] = stored.split('$');
    return (
      scheme !== 'scrypt' ||
      Number(n) !== SCRYPT.N ||
      Number(r) !== SCRYPT.r ||
      Number(p) !== SCRYPT.p
    );
  }

  async close(): Promise<void> {
    const worker = this.worker;
    this.worker = null;
    if (worker) await worker.terminate();
  }
}
