import { createHmac, randomBytes, randomUUID } from 'node:crypto';
import { readFile, rm, writeFile } from 'node:fs/promises';
import type { RequestListener, Server } from 'node:http';
import { join } from 'node:path';
import { isIPv6, type AddressInfo } from 'node:net';
import { setTimeout as delay } from 'node:timers/promises';
import express, { type Express, type Request, type RequestHandler } from 'express';
import proxyaddr from 'proxy-addr';
import type { RateLimiterAbstract } from 'rate-limiter-flexible';
import { PERMISSIONS } from '../shared/permissions.js';
import { isoNoZone } from '../shared/dates.js';
import { MIN_SECRET_BYTES } from '../shared/secrets.js';
import { writeFileDurably } from './fsutil.js';
import { naming } from '../shared/syserr.js';
import { identify, Tokens } from './auth.js';
import { createHttpServer, sendContinue } from './connections.js';
import type { Context } from './context.js';
import { Errors, errorHandler, HttpError, isDatabaseDown, notFound } from './errors.js';
import { pausePoint } from './faults.js';
import { ShareExpiry } from './expiry.js';
import { endFormerUploads } from './handover.js';
import { HashWorker } from '../shared/hasher.js';
import { LIMITS, type Limits } from './limits.js';
import { limiterClass } from './limiters.js';
import {
  DEFAULT_TOKEN_LIFETIME_SECONDS,
  type RequestEntry,
  type ServerOptions,
} from './options.js';
import { PasswordHasher } from './passwords.js';
import { LoginThrottle } from './throttle.js';
import { authRoutes } from './routes/auth.js';
import { contentRoutes } from './routes/content.js';
import { fileRoutes } from './routes/files.js';
import { linkRoutes } from './routes/links.js';
import { redactLinkPath } from './redact.js';
import { settingsRoutes } from './routes/settings.js';
import { userRoutes } from './routes/users.js';
import { whoamiRoutes } from './routes/whoami.js';
import { openStorage, openStore, storeName } from './backends.js';
import type { ContentStorage } from './storage/index.js';
import {
  blobOf,
  DuplicateUserError,
  LockLostError,
  unfinishedCopyText,
  type MetadataStore,
} from './store/index.js';
import { isUsername, UNPARSABLE } from './validate.js';
import { prepareDataDir } from './datadir.js';

export type { RequestEntry, ServerOptions } from './options.js';

export interface FshareServer {
  app: Express;
  /** Starts listening; port 0 picks a free port. */
  listen(port: number, host: string): Promise<{ url: string; port: number }>;
  /**
   * Stops accepting, lets in-flight requests finish (for at most `graceMs`, when given, then
   * cuts them), flushes metadata.
   */
  close(options?: { graceMs?: number }): Promise<void>;
  /** Set on the first start when the administrator's password was generated (print it once). */
  generatedAdmin?: { username: string; password: string; file: string };
}

/**
 * A valid Host field value (RFC 9112 §3.2, RFC 3986 §3.2.2): `host[:port]`, where host is an
 * IP-literal (`[v6]`, `[vX.…]`), or a non-empty reg-name (which covers IPv4 addresses:
 * unreserved characters, %XX and sub-delims), and port at most 65535. No "/", "?", "@", quote,
 * space or empty host: link URLs are built from it.
 */
export function isValidHost(value: string): boolean {
  const m = /^(\[[^\]]*\]|[A-Za-z0-9\-._~!$&'()*+,;=%]+)(?::(\d{0,5}))?$/.exec(value);
  if (!m) return false;
  const [, host, port] = m;
  if (port && Number(port) > 65535) return false;
  if (host!.startsWith('[')) {
    const inner = host!.slice(1, -1);
    return isIPv6(inner) || /^v[0-9A-Fa-f]+\.[A-Za-z0-9\-._~!$&'()*+,;=:]+$/.test(inner);
  }
  return /^(?:[A-Za-z0-9\-._~!$&'()*+,;=]|%[0-9A-Fa-f]{2})+$/.test(host!);
}

/**
 * RFC 9112 §3.2: a request with more than one Host, or a Host that is not valid, is a 400, and
 * so is an HTTP/1.1 request without one (HTTP/1.0 may leave it out). Checked before anything
 * else reads the request.
 */
function hostProblem(req: Request): string | undefined {
  let count = 0;
  for (let i = 0; i < req.rawHeaders.length; i += 2)
    if (req.rawHeaders[i]!.toLowerCase() === 'host') count++;
  if (count > 1) return 'The request has more than one Host header';
  const host = req.headers.host;
  if (host === undefined)
    return req.httpVersion === '1.1' ? 'An HTTP/1.1 request must have a Host header' : undefined;
  if (!isValidHost(host))
    return `The Host header must be host[:port] (a name, an IPv4 address or a [bracketed] IPv6 address): ${JSON.stringify(host.slice(0, 100))} is not`;
  return undefined;
}

/**
 * RFC 9112 §6.1: Node decodes the chunked transfer coding alone, and would pass a body sent as
 * `Transfer-Encoding: gzip, chunked` on still compressed (a JSON body unparsable, a chunk's bytes
 * stored as sent). Any other coding is a 501, before a byte of the body is read.
 */
function transferCodingProblem(req: Request): HttpError | undefined {
  const header = req.headers['transfer-encoding'];
  if (header === undefined) return undefined;
  const others = header
    .split(',')
    .map((c) => c.trim().toLowerCase())
    .filter((c) => c !== '' && c !== 'chunked');
  if (others.length === 0) return undefined;
  return new HttpError(
    501,
    `The server decodes no Transfer-Encoding but chunked (this request has ${JSON.stringify(header.slice(0, 100))}); send the body with chunked alone or with a Content-Length`,
  );
}

/**
 * RFC 9110 §15.6.6: a request line in a major version other than 1 (`HTTP/2.0` sent as text,
 * which Node's parser takes) is a 505; found from outside, it was served as HTTP/1.1.
 */
function versionProblem(req: Request): HttpError | undefined {
  if (req.httpVersionMajor === 1) return undefined;
  return new HttpError(
    505,
    `The server speaks HTTP/1.1 (this request's line says HTTP/${req.httpVersion.slice(0, 10)})`,
  );
}

/** A chunk upload (POST or PUT of /files/<id>/content, multipart): its route sends 100 Continue. */
function isChunkUpload(req: Request): boolean {
  return (
    (req.method === 'POST' || req.method === 'PUT') &&
    /^\/files\/[^/]+\/content\/?$/i.test(req.path) &&
    req.is('multipart/form-data') === 'multipart/form-data'
  );
}

/**
 * The headers a browser page may read besides the safelisted ones: Retry-After (429, 503) says
 * when to come back, Allow (405) what the path takes.
 */
const EXPOSED_HEADERS =
  'Content-Disposition, Content-Range, Content-Length, Location, ETag, Accept-Ranges, Repr-Digest, Idempotent-Replayed, Retry-After, Allow, WWW-Authenticate';

const ALLOWED_HEADERS = [
  'Authorization',
  'Content-Type',
  'Range',
  'If-Range',
  'If-None-Match',
  'If-Match',
  'If-Modified-Since',
  'If-Unmodified-Since',
  'Idempotency-Key',
];

/**
 * The request headers a page may send: ours, and on a preflight whatever else it asks for
 * (Dropzone.js sends Cache-Control and X-Requested-With with every chunk; a page's own library
 * may add others). Answers never depend on a cookie or on the origin, so another header gives
 * a page nothing: the browser's check only kept such pages from working. Names only (RFC 9110
 * tokens), at most 32 of them.
 */
function allowedHeaders(req: Request): string {
  const asked = req.method === 'OPTIONS' ? req.get('access-control-request-headers') : undefined;
  if (!asked) return ALLOWED_HEADERS.join(', ');
  const names = new Map(ALLOWED_HEADERS.map((h) => [h.toLowerCase(), h]));
  for (const name of asked.split(',').slice(0, 32)) {
    const h = name.trim();
    if (/^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,64}$/.test(h) && !names.has(h.toLowerCase()))
      names.set(h.toLowerCase(), h);
  }
  return [...names.values()].join(', ');
}

/** API.md "CORS": the reference server's browser client must work against us. */
const cors: RequestHandler = (req, res, next) => {
  res.set({
    'Access-Control-Allow-Origin': '*',
    'Access-Control-Allow-Headers': allowedHeaders(req),
    'Access-Control-Allow-Methods': 'GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS',
    'Access-Control-Expose-Headers': EXPOSED_HEADERS,
    'Access-Control-Max-Age': '600',
  });
  const badVersion = versionProblem(req);
  if (badVersion) {
    next(badVersion);
    return;
  }
  const badHost = hostProblem(req);
  if (badHost) {
    next(Errors.badRequest(badHost));
    return;
  }
  const badCoding = transferCodingProblem(req);
  if (badCoding) {
    next(badCoding);
    return;
  }
  if (req.method === 'OPTIONS') {
    // A cache must not answer another page's preflight with this one's list.
    res.vary('Access-Control-Request-Headers');
    res.status(204).end();
    return;
  }
  next();
};

const parseJson = express.json({ limit: LIMITS.maxJsonBytes });

/** Parses JSON bodies, but leaves a parse failure for the route to report in API.md's order. */
const deferredJson: RequestHandler = (req, res, next) => {
  parseJson(req, res, (err?: unknown) => {
    if ((err as { type?: string } | undefined)?.type === 'entity.parse.failed') {
      // `null`, `"text"`, `7` are JSON that strict parsing refuses: the route then says the body
      // must be an object, not that it is no JSON.
      req.body = jsonValue((err as { body?: unknown }).body);
      next();
      return;
    }
    next(err);
  });
};

/** The value of a body body-parser refused: JSON that is not an object or array, else UNPARSABLE. */
function jsonValue(text: unknown): unknown {
  if (typeof text !== 'string') return UNPARSABLE;
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return UNPARSABLE;
  }
}

/** One entry per request, when the response is done or the client went away. */
function requestLog(log: (entry: RequestEntry) => void): RequestHandler {
  return (req, res, next) => {
    const started = process.hrtime.bigint();
    const socket = req.socket;
    const sentBefore = socket.bytesWritten;
    res.on('close', () => {
      log({
        time: new Date().toISOString(),
        remote: req.ip ?? socket.remoteAddress ?? '-',
        method: req.method,
        // Never the query string (where a secret would go), never a link's token.
        path: redactLinkPath(req.originalUrl.replace(/\?.*$/s, ''), res.locals.linkId),
        status: res.headersSent ? res.statusCode : 0, // 0: no answer was sent
        bytes: Math.max(0, socket.bytesWritten - sentBefore),
        ms: Number(process.hrtime.bigint() - started) / 1e6,
        aborted: !res.writableFinished,
      });
    });
    next();
  };
}

/** Whether a connection's address is one of the trusted proxies (`trustProxy`). */
function trustedProxies(options: ServerOptions): (address: string) => boolean {
  if (!options.trustProxy?.length) return () => false;
  const trust = proxyaddr.compile(options.trustProxy);
  return (address) => trust(address, 0);
}

/** The plain one-line form of a request entry. */
export function requestLine(e: RequestEntry): string {
  return `${e.method} ${e.path} ${e.status} ${e.ms.toFixed(1)}ms${e.aborted ? ' (cut short)' : ''}`;
}

/**
 * The JWT signing secret of an embedded server: `<data-dir>/secret`, made on the first start.
 * It is written whole or not at all (temporary file, fsync, rename): a first start on a full
 * disk once left an empty file, and the next start signed every token with an empty key, which
 * anyone can forge. An empty file (from that, or any such cut) is replaced, with a notice; a
 * short one is refused.
 */
async function loadSecret(dataDir: string, notice: (line: string) => void): Promise<string> {
  const file = join(dataDir, 'secret');
  let found: string | undefined;
  try {
    found = (await readFile(file, 'utf8')).trim();
  } catch (err) {
    // A read's EISDIR carries no path: the message would not say which file.
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw naming(err, file);
  }
  if (found) {
    if (Buffer.byteLength(found) < MIN_SECRET_BYTES)
      throw new Error(
        `${file} holds a secret shorter than ${MIN_SECRET_BYTES} bytes, which could be guessed from any token: remove the file (a new one is made; every token issued so far stops working)`,
      );
    return found;
  }
  if (found === '') notice(`${file} was empty: made a new signing secret`);
  const secret = randomBytes(48).toString('base64url');
  await writeFileDurably(file, secret);
  return secret;
}

/**
 * Content stored by fshare 0.1 has no sha256 in its record: computed in the background after
 * start, one share at a time, and recorded unless the content was replaced meanwhile.
 */
async function digestOldContent(
  store: MetadataStore,
  storage: ContentStorage,
  stop: AbortSignal,
  log: (line: string) => void,
): Promise<void> {
  for (;;) {
    try {
      await pausePoint('digest.start');
      for await (const share of store.eachShare()) {
        if (stop.aborted) return;
        if (!share.initialized || share.sha256) continue;
        await pausePoint('digest.share');
        try {
          const sha256 = await storage.digest(blobOf(share));
          await store.withShareLock(share.share_id, async () => {
            const current = await store.getShare(share.share_id);
            if (current && blobOf(current) === blobOf(share) && !current.sha256)
              await store.updateShare(share.share_id, { sha256 });
          });
        } catch (err) {
          // The database gone: the whole walk stops and starts again later (found from outside:
          // a line, and a read of its content, for every share left on the page).
          if (isDatabaseDown(err) || err instanceof LockLostError) throw err;
          if (!stop.aborted) log(`sha256 of share ${share.share_id}: ${(err as Error).message}`);
        }
      }
      return;
    } catch (err) {
      // The walk itself failed (a database restarted under it). Found from outside: its
      // rejection was unhandled and ended a server started a moment before, with a stack.
      if (stop.aborted) return;
      log(
        `sha256 of older content: the walk over the shares stopped (${(err as Error).message}); it starts again in ${DIGEST_RETRY_MS / 1000} s`,
      );
      await delay(DIGEST_RETRY_MS, undefined, { signal: stop, ref: false }).catch(() => undefined);
      if (stop.aborted) return;
    }
  }
}

/** How long digestOldContent waits before walking the shares again after a failure. */
const DIGEST_RETRY_MS = 60_000;

/** The administrator to create on a first start has a name no user may have. Nothing was created. */
export class AdminNameError extends Error {
  constructor(name: string) {
    super(
      `--admin-user (or FSHARE_ADMIN_USER) must be 1-64 characters of letters, digits, ".", "_", "@" or "-", starting with a letter or digit, and not login, logout, extend or password: ${JSON.stringify(name)}`,
    );
  }
}

export async function createServer(options: ServerOptions): Promise<FshareServer> {
  const { dataDir } = options;
  const log =
    options.notice ?? options.log ?? ((line: string) => process.stderr.write(`${line}\n`));
  const limits: Limits = {
    ...LIMITS,
    ...options.limits,
    maxChunkBytes: options.maxChunkBytes ?? options.limits?.maxChunkBytes ?? LIMITS.maxChunkBytes,
    minFreeBytes: options.minFreeBytes ?? options.limits?.minFreeBytes ?? LIMITS.minFreeBytes,
  };
  // Until the data is open, every request is told to come back (the port may be bound first).
  let handler: RequestListener = (_req, res) => {
    // Every answer allows any origin (API.md "CORS"), this one too: a browser page reads it.
    res.writeHead(503, {
      'Content-Type': 'application/json',
      'Retry-After': '1',
      'Access-Control-Allow-Origin': '*',
      'Access-Control-Expose-Headers': EXPOSED_HEADERS,
    });
    res.end(JSON.stringify({ status: 'fail', message: 'The server is starting; try again' }));
  };
  let bound: { server: Server; url: string; port: number } | undefined;
  if (options.bind)
    bound = await bindHttp(
      (req, res) => handler(req, res),
      limits,
      log,
      options.bind,
      trustedProxies(options),
    );
  // What a failed start had opened is closed again (a database pool would keep the process up).
  const opened: (() => unknown)[] = [];
  try {
    return await openServer(options, dataDir, limits, log, bound, opened, (app) => (handler = app));
  } catch (err) {
    for (const close of opened.reverse()) await Promise.resolve(close()).catch(() => undefined);
    if (bound) await new Promise((resolve) => bound!.server.close(resolve));
    throw err;
  }
}

/** Listens on `port` and `host`; rejects (EADDRINUSE, EACCES…) with nothing else done. */
function bindHttp(
  listener: RequestListener,
  limits: Limits,
  log: (line: string) => void,
  { port, host }: { port: number; host: string },
  isProxy: (address: string) => boolean,
): Promise<{ server: Server; url: string; port: number }> {
  return new Promise((resolve, reject) => {
    const s = createHttpServer(listener, limits, log, isProxy);
    s.once('error', reject);
    s.listen(port, host, () => {
      s.off('error', reject);
      const { port: actual } = s.address() as AddressInfo;
      const shownHost = host.includes(':') ? `[${host}]` : host;
      resolve({ server: s, url: `http://${shownHost}:${actual}`, port: actual });
    });
  });
}

async function openServer(
  options: ServerOptions,
  dataDir: string,
  limits: Limits,
  log: (line: string) => void,
  bound: { server: Server; url: string; port: number } | undefined,
  opened: (() => unknown)[],
  ready: (app: Express) => void,
): Promise<FshareServer> {
  await prepareDataDir(dataDir);
  const { store, shared } = await openStore(options, dataDir, log, 'serve');
  opened.push(() => store.close());
  // Part of a copy (fshare admin import/export cut short) would pass for the whole server: some
  // shares missing, with nothing to say so. Refused before anything reads or sweeps it.
  const copyMark = await store.unfinishedCopy();
  if (copyMark)
    throw new Error(
      `${unfinishedCopyText(storeName(options, dataDir), copyMark)}: no server starts on part of a copy; run that command again, which starts the copy over`,
    );
  const noDigest = process.env.FSHARE_BENCH_NO_DIGEST === '1';
  if (noDigest) log('FSHARE_BENCH_NO_DIGEST=1: new content gets no sha256 (for benchmarks only)');
  const hasher = new HashWorker({ disabled: noDigest });
  opened.push(() => hasher.close());
  const storage = await openStorage(options, dataDir, store, hasher, limits, log);
  opened.push(() => storage.close());
  const referenced = new Set<string>();
  const handedOver = new Map<string, string>();
  let shares = 0;
  for await (const share of store.eachShare()) {
    shares++;
    if (share.initialized) referenced.add(blobOf(share));
    if (share.pending_handover) handedOver.set(share.share_id, share.pending_handover);
  }
  await storage.init((blob) => referenced.has(blob), {
    identity: await store.identity(),
    shares,
    name: storeName(options, dataDir),
  });
  // Uploads of shares that are gone (a removal a crash cut short after its record): they end
  // now, not after a day idle, holding their chunks' bytes.
  // A failure here only leaves them to that sweep.
  await (async () => {
    for (const shareId of (await storage.unfinished()).keys())
      if (!(await store.getShare(shareId))) await storage.removeUploads(shareId);
  })().catch((err: unknown) =>
    log(`the uploads of removed shares could not be ended now (${String(err)}); the sweep will`),
  );
  // Handovers a crash cut short: the old owner's uploads end before any request could use them.
  // Until then they count for no one; a failure here is retried by the next request for the share.
  for (const [shareId, mark] of handedOver)
    await endFormerUploads(store, storage, shareId, mark).catch((err: unknown) =>
      log(
        `share ${shareId}: the uploads of its former owner could not be removed (${String(err)})`,
      ),
    );
  await storage.sweep(limits.uploadIdleMs);
  const sweeper = setInterval(
    () => void storage.sweep(limits.uploadIdleMs).catch(() => undefined),
    3600_000,
  );
  sweeper.unref();
  opened.push(() => clearInterval(sweeper));
  const stopDigest = new AbortController();
  const digesting = noDigest
    ? Promise.resolve()
    : digestOldContent(store, storage, stopDigest.signal, log);
  opened.push(() => {
    stopDigest.abort();
    return digesting;
  });

  const clock = options.clock ?? Date.now;
  const expiry = new ShareExpiry(store, storage, clock, log);
  opened.push(() => expiry.stop());
  // Shares that expired while the server was down go first.
  await expiry.sweepDue();

  const secret =
    options.secret ?? (shared ? await shared.sharedSecret() : await loadSecret(dataDir, log));
  const limiter = (keyPrefix: string, points: number, seconds: number): RateLimiterAbstract =>
    shared
      ? shared.limiter(keyPrefix, points, seconds)
      : new (limiterClass('RateLimiterMemory'))({ keyPrefix, points, duration: seconds });
  const tokens = new Tokens(
    secret,
    options.tokenLifetimeSeconds ?? DEFAULT_TOKEN_LIFETIME_SECONDS,
    store,
    clock,
  );

  const passwords = new PasswordHasher(limits.passwordQueue);
  opened.push(() => passwords.close());
  let generatedAdmin: FshareServer['generatedAdmin'];
  if ((await store.userCount()) === 0) {
    const username = options.adminUser ?? 'admin';
    // A name no request could make (a space, a control character, "login") gave an
    // administrator whose /users/<name> no URL reaches, or one that reads as another.
    if (!isUsername(username)) throw new AdminNameError(username);
    // An empty one (FSHARE_ADMIN_PASSWORD= in an env file) is none: no sign-in takes "", so an
    // administrator with it could never sign in, and no start would make another.
    const password = options.adminPassword || randomBytes(12).toString('base64url');
    const admin = {
      id: randomUUID(),
      username,
      permissions: [...PERMISSIONS],
      register_date: isoNoZone(),
      password_hash: await passwords.hash(password),
      token_gen: 0,
      quota: null,
    };
    if (!options.adminPassword) {
      generatedAdmin = { username, password, file: join(dataDir, 'admin-password') };
      // Also kept where only this account can read it: a printed password is easily lost.
      await writeFile(generatedAdmin.file, `${username}\n${password}\n`, {
        mode: 0o600,
        flag: 'w',
      });
    }
    // Servers starting together on one new database: one of them creates the administrator.
    await store.addUser(admin).catch(async (err: unknown) => {
      if (!(err instanceof DuplicateUserError)) throw err;
      if (generatedAdmin) await rm(generatedAdmin.file, { force: true });
      generatedAdmin = undefined;
    });
  }

  const ctx: Context = {
    store,
    storage,
    tokens,
    passwords,
    throttle: new LoginThrottle(
      (prefix, w) => limiter(prefix, w.points, w.seconds),
      shared !== undefined,
    ),
    limits,
    limiter,
    clock,
    expiry,
    linkKey: createHmac('sha256', secret).update('fshare link grants').digest(),
    idempotencyKey: createHmac('sha256', secret).update('fshare idempotency keys').digest(),
    publicUrl: options.publicUrl,
    log,
  };
  const app = express();
  app.disable('x-powered-by');
  app.set('etag', false);
  app.set('query parser', 'simple');
  // req.ip: the client's address, from X-Forwarded-For only when a trusted proxy sent it.
  app.set(
    'trust proxy',
    options.trustProxy?.length ? proxyaddr.compile(options.trustProxy) : false,
  );
  if (options.requestLog) app.use(requestLog(options.requestLog));
  else if (options.log) {
    const line = options.log;
    app.use(requestLog((e) => line(requestLine(e))));
  }
  // Expect: 100-continue is answered at once, but for a chunk upload, whose route sends it once
  // the checks its headers allow have passed (API.md "Conventions").
  app.use((req, res, next) => {
    // Nor for a body that is refused unread (cors, below).
    if (!isChunkUpload(req) && !transferCodingProblem(req) && !versionProblem(req))
      sendContinue(res);
    next();
  });
  app.use(cors);
  app.use(deferredJson);
  const links = linkRoutes(ctx);
  // A share link's page and bytes never depend on who asks (API.md "Share links").
  app.use(links.pages);
  app.use(identify(tokens, store));
  app.use(authRoutes(ctx));
  app.use(userRoutes(ctx));
  app.use(settingsRoutes(ctx));
  app.use(whoamiRoutes(ctx));
  app.use(links.manage);
  app.use(contentRoutes(ctx));
  app.use(fileRoutes(ctx));
  app.use(notFound);
  app.use(errorHandler(log));

  let server: Server | undefined = bound?.server;
  ready(app);
  return {
    app,
    generatedAdmin,
    async listen(port, host) {
      if (bound) return { url: bound.url, port: bound.port }; // bound before the data was opened
      const b = await bindHttp(app, limits, log, { port, host }, trustedProxies(options));
      server = b.server;
      return { url: b.url, port: b.port };
    },
    async close({ graceMs }: { graceMs?: number } = {}) {
      clearInterval(sweeper);
      stopDigest.abort();
      await expiry.stop();
      if (server) {
        const s = server;
        const closed = new Promise<void>((resolve) => s.close(() => resolve()));
        // Connections close as soon as they are idle; past the grace period, whatever is still
        // transferring is cut.
        const idle = setInterval(() => s.closeIdleConnections(), 250);
        s.closeIdleConnections();
        const cut =
          graceMs === undefined ? undefined : setTimeout(() => s.closeAllConnections(), graceMs);
        try {
          await closed;
        } finally {
          clearInterval(idle);
          clearTimeout(cut);
        }
      }
      await digesting;
      await storage.close();
      await hasher.close();
      await passwords.close();
      await store.close();
    },
  };
}
