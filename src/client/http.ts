import http, { STATUS_CODES, type IncomingHttpHeaders, type IncomingMessage } from 'node:http';
import { createRequire } from 'node:module';
import type { Writable } from 'node:stream';
import { rawRequest, type BodyTarget } from './rawhttp.js';
import { proxyFor, type ProxyRoute } from './proxy.js';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  ApiError,
  ClientInputError,
  NetworkError,
  ProxyError,
  describeTransportError,
  isConnectError,
  isTransportError,
  notHttpError,
  tlsError,
} from './errors.js';

export interface RetryPolicy {
  /** Extra attempts after the first one. */
  retries: number;
  baseDelayMs: number;
  maxDelayMs: number;
}

export const DEFAULT_RETRY: RetryPolicy = { retries: 4, baseDelayMs: 250, maxDelayMs: 5000 };

/** A connection that moves no byte for this long is given up (and retried where that is safe). */
const IDLE_TIMEOUT_MS = 60_000;

/**
 * The most a JSON answer may take, from sending the request to its last byte. The idle limit
 * catches silence; this catches a server that sends a byte now and then (a broken proxy, a
 * hostile server), which would otherwise keep a CI job waiting without end. Answers fshare reads
 * whole are small (a page of shares is well under 1 MiB), so 5 minutes is far beyond any real
 * one. FSHARE_TEST_ANSWER_DEADLINE_MS (tests only) shortens it.
 */
const ANSWER_DEADLINE_MS = Number(process.env.FSHARE_TEST_ANSWER_DEADLINE_MS) || 300_000;

export interface ClientOptions {
  /** Base URL of the server, e.g. http://127.0.0.1:5000 (a path prefix is kept). */
  server: string;
  /** Bearer token; absent means anonymous. */
  token?: string;
  retry?: Partial<RetryPolicy>;
}

/** Everything a call needs; plain data so it can be copied with another token or server. */
export interface ApiClient {
  readonly server: string;
  readonly token: string | undefined;
  readonly retry: RetryPolicy;
}

// One keep-alive agent per scheme for the whole process: parallel chunks reuse connections.
const AGENT_OPTIONS = { keepAlive: true, maxSockets: 64, scheduling: 'lifo' } as const;
interface Transport {
  lib: { request: typeof http.request };
  agent: http.Agent;
}
const plain: Transport = { lib: http, agent: new http.Agent(AGENT_OPTIONS) };
let secure: Transport | undefined;

/**
 * node:https and its agent, loaded at the first https request: it brings node:tls, which a
 * command that talks plain HTTP (a server on this machine, or behind a TLS-ending proxy) never
 * needs at start-up.
 */
function tls(): Transport {
  if (!secure) {
    const https = createRequire(import.meta.url)('node:https') as typeof import('node:https');
    secure = { lib: https, agent: new https.Agent(AGENT_OPTIONS) };
  }
  return secure;
}

/** Agents that reach https servers through a proxy's CONNECT tunnel, one per proxy. */
const tunnels = new Map<string, http.Agent>();

/** How a request to `url` is sent: the library, its agent, and the proxy it goes through. */
function transportFor(url: URL): Transport & { proxy: ProxyRoute | null } {
  const proxy = proxyFor(url);
  if (url.protocol !== 'https:') return { ...plain, proxy };
  const secured = tls();
  if (!proxy) return { ...secured, proxy };
  let agent = tunnels.get(proxy.shown + (proxy.authorization ?? ''));
  if (!agent) {
    agent = tunnelAgent(proxy);
    tunnels.set(proxy.shown + (proxy.authorization ?? ''), agent);
  }
  return { lib: secured.lib, agent, proxy };
}

/**
 * An https agent whose connections are CONNECT tunnels through `proxy`, TLS to the server inside
 * them (the proxy sees only the host and port).
 */
function tunnelAgent(proxy: ProxyRoute): http.Agent {
  const load = createRequire(import.meta.url);
  const https = load('node:https') as typeof import('node:https');
  const tlsModule = load('node:tls') as typeof import('node:tls');
  const net = load('node:net') as typeof import('node:net');
  class TunnelAgent extends https.Agent {
    override createConnection(
      options: import('node:tls').ConnectionOptions & { host?: string; port?: number },
      callback: (err: Error | null, socket?: import('node:stream').Duplex) => void,
    ): undefined {
      const host = options.host ?? 'localhost';
      const target = `${host.includes(':') ? `[${host}]` : host}:${options.port ?? 443}`;
      const socket = net.connect({ host: proxy.host, port: proxy.port });
      let head = Buffer.alloc(0);
      let settled = false;
      const fail = (err: Error) => {
        if (settled) return;
        settled = true;
        socket.destroy();
        callback(err);
      };
      socket.once('error', fail);
      socket.setTimeout(IDLE_TIMEOUT_MS, () =>
        fail(Object.assign(new Error('timed out'), { code: 'ETIMEDOUT' })),
      );
      socket.once('connect', () =>
        socket.write(
          `CONNECT ${target} HTTP/1.1\r\nHost: ${target}\r\n` +
            (proxy.authorization ? `Proxy-Authorization: ${proxy.authorization}\r\n` : '') +
            '\r\n',
        ),
      );
      socket.once('end', () =>
        fail(Object.assign(new Error('the proxy closed the connection'), { code: 'ECONNRESET' })),
      );
      const onData = (data: Buffer) => {
        head = Buffer.concat([head, data]);
        const end = head.indexOf('\r\n\r\n');
        if (end < 0) {
          if (head.length > 64 * 1024)
            fail(new ProxyError(`${proxyName(proxy)} sent over 64 KiB of headers`));
          return;
        }
        socket.off('data', onData);
        socket.pause();
        const status = /^HTTP\/1\.[01] (\d{3}) ?([^\r\n]*)/.exec(
          head.subarray(0, end).toString('latin1'),
        );
        if (!status)
          return fail(new ProxyError(`${proxyName(proxy)} does not answer as an HTTP proxy`));
        const code = Number(status[1]);
        if (code !== 200) return fail(connectRefused(proxy, target, code, status[2]!));
        const rest = head.subarray(end + 4);
        if (rest.length > 0) socket.unshift(rest);
        settled = true;
        socket.off('error', fail);
        socket.setTimeout(0);
        socket.removeAllListeners('end');
        callback(null, tlsModule.connect({ ...options, socket }));
      };
      socket.on('data', onData);
      return undefined;
    }
  }
  return new TunnelAgent(AGENT_OPTIONS);
}

/** `the proxy http://HOST:PORT (HTTPS_PROXY)`. */
function proxyName(proxy: ProxyRoute): string {
  return `the proxy ${proxy.shown} (${proxy.variable})`;
}

/**
 * A proxy's refusal of CONNECT: a 5xx is its failure to reach the server (retried, as a refused
 * connection is); anything else is its answer, which no retry changes.
 */
function connectRefused(proxy: ProxyRoute, target: string, code: number, reason: string): Error {
  const status = `${code}${reason ? ` ${reason}` : ''}`;
  if (code >= 500)
    return Object.assign(new Error(`the proxy could not connect to ${target} (${status})`), {
      code: 'EPROXYCONNECT',
    });
  return proxyRefusal(proxy, target, code, status);
}

function proxyRefusal(proxy: ProxyRoute, target: string, code: number, status: string): ProxyError {
  // 407 is the proxy's own; some (tinyproxy) answer a wrong password with 401.
  if (code === 407 || code === 401)
    return new ProxyError(
      proxy.authorization
        ? `${proxyName(proxy)} refused the user name and password in ${proxy.variable} (${status})`
        : `${proxyName(proxy)} asks for a user name and password (${status}): put them in ${proxy.variable} as http://USER:PASSWORD@HOST:PORT`,
    );
  return new ProxyError(`${proxyName(proxy)} does not let fshare through to ${target} (${status})`);
}

/** Closes idle keep-alive connections so a short-lived process can exit at once. */
export function closeConnections(): void {
  plain.agent.destroy();
  secure?.agent.destroy();
  for (const agent of tunnels.values()) agent.destroy();
}

/** Validates a server URL and drops trailing slashes: "http://h:5000/" → "http://h:5000". */
export function normalizeServer(url: string): string {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new ClientInputError(`not a server URL: ${url}`);
  }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:')
    throw new ClientInputError(`server URL must be http or https: ${url}`);
  if (parsed.search || parsed.hash)
    throw new ClientInputError(`server URL must not have a query: ${url}`);
  // Never echoed: it would put the password in a log. fshare signs in with tokens only.
  if (parsed.username || parsed.password)
    throw new ClientInputError(
      `server URL must not carry a user name or password (${parsed.origin}); sign in with fshare login`,
    );
  return `${parsed.origin}${parsed.pathname.replace(/\/+$/, '')}`;
}

export function createClient(options: ClientOptions): ApiClient {
  return {
    server: normalizeServer(options.server),
    token: options.token,
    retry: { ...DEFAULT_RETRY, ...options.retry },
  };
}

/**
 * The longest a `Retry-After` may ask fshare to wait before a retry: 30 s, so a command's five
 * attempts never wait more than about 2 minutes in all (a CI step, a person at a terminal). A
 * server asking for more is not retried: the command fails at once and says how long it asked.
 */
export const MAX_RETRY_AFTER_MS = 30_000;

/** A `Retry-After` beyond a day is taken for a broken value, not a wish: the backoff applies. */
const ABSURD_RETRY_AFTER_MS = 86_400_000;

/**
 * The wait a `Retry-After` header asks for, in ms (RFC 9110: seconds, or an HTTP date); undefined
 * when there is none or it is not a valid one (negative, a fraction, text, beyond a day).
 */
export function retryAfterMs(headers: IncomingHttpHeaders, now = Date.now()): number | undefined {
  const value = header(headers, 'retry-after')?.trim();
  if (!value) return undefined;
  let ms: number;
  if (/^\d{1,12}$/.test(value)) ms = Number(value) * 1000;
  else if (/ GMT$/.test(value) && !Number.isNaN(Date.parse(value)))
    ms = Math.max(0, Date.parse(value) - now);
  else return undefined;
  return ms <= ABSURD_RETRY_AFTER_MS ? ms : undefined;
}

/** Told of every retry and its wait (`--debug` prints it); tokens are the caller's to hide. */
let retryLog: ((line: string) => void) | undefined;

export function onRetry(log: (line: string) => void): void {
  retryLog = log;
}

/** A retry made outside send() (a download's body cut, resumed from where it broke). */
export function noteRetry(line: string): void {
  retryLog?.(line);
}

export const seconds = (ms: number) => `${Math.round(ms / 100) / 10} s`;

/** Delay before attempt `attempt + 1`: exponential with jitter so parallel chunks spread out. */
export function backoffDelay(policy: RetryPolicy, attempt: number): number {
  const exp = Math.min(policy.maxDelayMs, policy.baseDelayMs * 2 ** (attempt - 1));
  return Math.round(exp * (0.75 + Math.random() * 0.5));
}

/**
 * A request body: bytes, or a writer called afresh for every attempt, with its exact length. The
 * writer writes the body to the request (awaiting each write, so it can reuse its buffers) and
 * resolves when it has written all of it.
 */
export type Body =
  string | Buffer | { length: number; type?: string; write: (out: Writable) => Promise<void> };

export interface RawRequest {
  method: string;
  /** Path below the server URL, starting with "/". */
  path: string;
  query?: Record<string, string | number | undefined>;
  headers?: Record<string, string>;
  /** A factory, so a retried request gets a fresh body (a stream can be read once). */
  body?: () => Body;
  /** Safe to repeat after the request may have reached the server (GET, PUT, chunk uploads). */
  idempotent: boolean;
  /** Also retry 5xx answers (only sensible when idempotent). */
  retryServerErrors?: boolean;
  /**
   * A download: over plain HTTP its body is read straight into the taker's memory (rawhttp.ts).
   * Only for GET and HEAD without a body.
   */
  download?: boolean;
  /**
   * Read the whole of a 2xx answer within the attempt, so a body cut short or stalled (a 200
   * whose JSON stops halfway) is a transport failure of that attempt, retried as one, not a
   * broken answer. An error status stands by itself, whatever becomes of its body.
   */
  buffered?: boolean;
  /**
   * Called once the request's body is all handed to the connection (each attempt), while its
   * answer is still to come.
   */
  onBodySent?: () => void;
  signal?: AbortSignal;
}

/** A response whose body has not been read yet: read it (readInto, text) or drop it (dump). */
export interface Response {
  statusCode: number;
  headers: IncomingHttpHeaders;
  /** Reads the whole body into `target`; rejects with a transport error if the connection breaks. */
  readInto(target: BodyTarget): Promise<void>;
  text(): Promise<string>;
  dump(): Promise<void>;
  /** An earlier attempt of this request may have reached the server (its answer was lost, or 5xx). */
  repeated?: boolean;
  /** The proxy that carried the request and its answer (an http server's, proxy.ts). */
  proxy?: ProxyRoute;
}

export function urlFor(client: ApiClient, path: string, query?: RawRequest['query']): URL {
  const url = new URL(client.server + path);
  for (const [key, value] of Object.entries(query ?? {}))
    if (value !== undefined) url.searchParams.set(key, String(value));
  return url;
}

/**
 * The most of a JSON or error answer read into memory: a page of 1,000 shares is well under
 * 1 MiB, so only a server that is broken or hostile sends more, and it cannot fill this process.
 */
const MAX_ANSWER_BYTES = 16 * 1024 * 1024;

function wrap(res: IncomingMessage): Response {
  return {
    statusCode: res.statusCode ?? 0,
    headers: res.headers,
    async readInto(target) {
      for await (const data of res as AsyncIterable<Buffer>) await target.write(data);
    },
    async text() {
      const pieces: Buffer[] = [];
      let size = 0;
      for await (const piece of res as AsyncIterable<Buffer>) {
        size += piece.length;
        if (size > MAX_ANSWER_BYTES) {
          res.destroy();
          throw new ApiError(
            res.statusCode ?? 0,
            `the server's answer is larger than ${MAX_ANSWER_BYTES / 1024 / 1024} MiB, more than any answer fshare reads`,
          );
        }
        pieces.push(piece);
      }
      return Buffer.concat(pieces).toString('utf8');
    },
    async dump() {
      if (res.readableEnded || res.destroyed) return;
      res.resume();
      await new Promise<void>((resolve) => {
        res.once('end', resolve);
        res.once('close', resolve);
      });
    },
  };
}

/** One attempt: resolves with the response headers, the body still to be read. */
function attempt(url: URL, req: RawRequest, headers: Record<string, string>): Promise<Response> {
  const { lib, agent, proxy } = transportFor(url);
  // An http server through a proxy: the request goes to the proxy, naming the whole URL.
  const forward = proxy && url.protocol === 'http:' ? proxy : null;
  if (req.download && url.protocol === 'http:' && !req.body)
    return rawRequest(url, {
      method: req.method === 'HEAD' ? 'HEAD' : 'GET',
      headers,
      idleTimeoutMs: IDLE_TIMEOUT_MS,
      signal: req.signal,
      proxy: forward ?? undefined,
    });
  const body = req.body?.();
  const out = { ...headers };
  if (typeof body === 'string' || Buffer.isBuffer(body)) {
    if (typeof body === 'string') out['content-type'] ??= 'application/json';
    out['content-length'] = String(Buffer.byteLength(body));
  } else if (body) {
    out['content-length'] = String(body.length);
    if (body.type) out['content-type'] ??= body.type;
  }
  if (forward?.authorization) out['proxy-authorization'] = forward.authorization;
  return new Promise((resolve, reject) => {
    // The response keeps Node's small read buffer: with a larger one (tried: 1 MiB) a connection
    // cut mid-download discards what was buffered, and --continue would fetch it again.
    const options = { method: req.method, headers: out, agent, signal: req.signal };
    const request = forward
      ? lib.request({
          ...options,
          host: forward.host,
          port: forward.port,
          path: url.href,
          headers: { ...out, host: url.host },
        })
      : lib.request(url, options);
    request.setTimeout(IDLE_TIMEOUT_MS, () =>
      request.destroy(Object.assign(new Error('timed out'), { code: 'ETIMEDOUT' })),
    );
    // A JSON answer (buffered) ends by its deadline, body included, whatever trickles in.
    let answer: IncomingMessage | undefined;
    const deadline = req.buffered
      ? setTimeout(() => {
          const err = Object.assign(new Error('timed out'), { code: 'ETIMEDOUT' });
          if (answer) answer.destroy(err);
          else request.destroy(err);
        }, ANSWER_DEADLINE_MS)
      : undefined;
    deadline?.unref();
    request.once('error', (err) => {
      clearTimeout(deadline);
      reject(err);
    });
    request.once('response', (res) => {
      answer = res;
      res.once('close', () => clearTimeout(deadline));
      res.setTimeout(IDLE_TIMEOUT_MS, () =>
        res.destroy(Object.assign(new Error('timed out'), { code: 'ETIMEDOUT' })),
      );
      resolve(wrap(res));
    });
    if (body === undefined) request.end();
    else if (typeof body === 'string' || Buffer.isBuffer(body)) request.end(body);
    else
      body.write(request).then(
        () =>
          request.end((err?: Error | null) => {
            if (!err) req.onBodySent?.(); // all of it handed to the connection
          }),
        (err: unknown) => request.destroy(err as Error),
      );
  });
}

/** The response with its body read already (text() and readInto() give it, dump() drops it). */
async function buffer(res: Response): Promise<Response> {
  const text = await res.text();
  return {
    ...res,
    text: () => Promise.resolve(text),
    readInto: (target) => target.write(Buffer.from(text)),
    dump: () => Promise.resolve(),
  };
}

/**
 * A 5xx that a moment may mend (500, 502, 503, 504…). Not these, which the same request meets
 * again: 501 Not Implemented, 505 HTTP Version Not Supported, 507 Insufficient Storage (the
 * server's disk or the file's declared size: space is freed by people, not by seconds), 508, 510,
 * 511 Network Authentication Required.
 */
function transient(status: number): boolean {
  return status >= 500 && ![501, 505, 507, 508, 510, 511].includes(status);
}

/**
 * How long to wait before retrying an answer that a moment may mend, or undefined when it is not
 * retried: a transient 5xx, or a 429 that says when to come back (as curl --retry does). The wait
 * is the backoff, or the server's `Retry-After` when that is longer; one longer than
 * MAX_RETRY_AFTER_MS is not waited for (the answer is the command's failure, its line says the
 * wait), and an invalid one leaves the backoff.
 */
function serverDelay(
  res: Response,
  client: ApiClient,
  n: number,
): { ms: number; why: string } | undefined {
  const asked = retryAfterMs(res.headers);
  if (
    !transient(res.statusCode) &&
    res.statusCode !== 408 &&
    !(res.statusCode === 429 && asked !== undefined)
  )
    return undefined;
  if (asked !== undefined && asked > MAX_RETRY_AFTER_MS) return undefined;
  const backoff = backoffDelay(client.retry, n);
  return asked !== undefined && asked >= backoff
    ? { ms: asked, why: 'Retry-After' }
    : { ms: backoff, why: 'backoff' };
}

/** Every token this process has sent: a server may echo one back, in a message or a Location. */
const sentTokens = new Set<string>();

/**
 * Shorter "tokens" are hidden nowhere: a placeholder such as `null` in FSHARE_TOKEN is no secret,
 * and hiding it would turn every "null" in a message into "[token]". Real ones are far longer.
 */
const MIN_HIDDEN_TOKEN = 12;

/**
 * Hides another secret as the tokens sent are hidden: a share link's token, which is the link
 * (`--debug`'s retry lines name the request's path, /l/<token>), as the server's log hides it.
 */
export function hideSecret(secret: string): void {
  if (secret.length >= MIN_HIDDEN_TOKEN) sentTokens.add(secret);
}

/** `text` with every token this process sent replaced by `[token]` (for lines a log may keep). */
export function withoutTokens(text: string): string {
  for (const token of sentTokens) text = text.split(token).join('[token]');
  return text;
}

/**
 * Sends one request, retrying transport failures (and 5xx when allowed) with backoff.
 * Returns the response with its body unread; the caller must read or dump it.
 */
export async function send(client: ApiClient, req: RawRequest): Promise<Response> {
  const url = urlFor(client, req.path, req.query);
  const proxy = proxyFor(url);
  const through = proxy ? ` through ${proxyName(proxy)}` : '';
  // An http server's requests and answers pass through the proxy itself (https: a tunnel).
  const forwarded = proxy && url.protocol === 'http:' ? proxy : undefined;
  const headers: Record<string, string> = { ...req.headers };
  if (client.token) {
    headers.authorization = `Bearer ${client.token}`;
    if (client.token.length >= MIN_HIDDEN_TOKEN) sentTokens.add(client.token);
  }
  let repeated = false;
  for (let n = 1; ; n++) {
    let res: Response;
    try {
      res = await attempt(url, req, headers);
      if (req.buffered && res.statusCode >= 200 && res.statusCode < 300) res = await buffer(res);
    } catch (err) {
      if (req.signal?.aborted) throw req.signal.reason ?? err;
      if (!isTransportError(err))
        throw tlsError(client.server, err) ?? notHttpError(client.server, err) ?? err;
      const retryable = req.idempotent || isConnectError(err);
      if (!isConnectError(err)) repeated = true;
      if (!retryable || n > client.retry.retries) {
        const tries = n === 1 ? '' : ` (after ${n} attempts)`;
        // A request that is not repeated and may have reached the server: say so, since it may
        // have been carried out (a user created, a password changed) though no answer came.
        const why = describeTransportError(err);
        throw new NetworkError(
          retryable
            ? `cannot reach ${client.server}${through}: ${why}${tries}`
            : `no answer from ${client.server}${through} to ${req.method} ${req.path} (${why}): it may have been carried out; check before running the command again`,
          n,
          { cause: err },
        );
      }
      const delay = backoffDelay(client.retry, n);
      retryLog?.(
        `${req.method} ${req.path}: ${describeTransportError(err)}; retrying in ${seconds(delay)} (attempt ${n + 1} of ${client.retry.retries + 1})`,
      );
      await sleep(delay, undefined, { signal: req.signal });
      continue;
    }
    // A 408 says the request never arrived whole (RFC 9110 §15.5.9: the client may send it
    // again), as a connection cut before the answer would: retried like one.
    const delay =
      (req.retryServerErrors || (res.statusCode === 408 && req.idempotent)) &&
      n <= client.retry.retries &&
      serverDelay(res, client, n);
    if (delay) {
      repeated = true;
      await res.dump();
      retryLog?.(
        `${req.method} ${req.path} answered ${res.statusCode}; retrying in ${seconds(delay.ms)} (${delay.why}, attempt ${n + 1} of ${client.retry.retries + 1})`,
      );
      await sleep(delay.ms, undefined, { signal: req.signal });
      continue;
    }
    if (res.statusCode >= 300 && res.statusCode < 400) {
      await res.dump();
      throw redirected(res);
    }
    // Only a proxy answers 407: an http server's request went to it, and it wants credentials
    // (some, tinyproxy, answer wrong ones with a 401 of their own, never the server's JSON).
    if (
      forwarded &&
      (res.statusCode === 407 ||
        (res.statusCode === 401 &&
          forwarded.authorization &&
          !/json/i.test(header(res.headers, 'content-type') ?? '')))
    ) {
      await res.dump();
      const status = `${res.statusCode} ${STATUS_CODES[res.statusCode]}`;
      throw proxyRefusal(forwarded, url.host, res.statusCode, status);
    }
    res.repeated = repeated;
    res.proxy = forwarded;
    return res;
  }
}

/**
 * fshare follows no redirect, and never takes one for an answer: its body is not the content or
 * the JSON asked for (a download "saved" 0 bytes of a 302 with exit 0), and following it would
 * send the token to an address the user never gave.
 */
function redirected(res: Response): ApiError {
  const to = header(res.headers, 'location');
  return new ApiError(
    res.statusCode,
    // fshare asks for no condition (If-None-Match, If-Modified-Since): a 304 is no redirect.
    res.statusCode === 304
      ? 'the server answered 304 Not Modified to a request that asked for no condition'
      : to
        ? `the server redirects to ${to}; fshare follows no redirects: if that address is right, use it as the server`
        : `the server answered with a redirect without a Location; fshare follows no redirects`,
    undefined,
    res.headers,
  );
}

/** Reads an error response into an ApiError carrying the server's message. */
export async function toApiError(res: Response): Promise<ApiError> {
  const text = await res.text().catch(() => '');
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    body = undefined;
  }
  const fromServer =
    typeof body === 'object' &&
    body !== null &&
    typeof (body as { message?: unknown }).message === 'string'
      ? (body as { message: string }).message
      : undefined;
  // An answer that is not the server's JSON, through a proxy, may be the proxy's own (a 502 or
  // 500 when it cannot reach the server): the line says it came through one.
  const fallback =
    (STATUS_CODES[res.statusCode] ?? 'request failed') +
    (res.proxy ? `, answered through ${proxyName(res.proxy)}` : '');
  return new ApiError(res.statusCode, fromServer || fallback, body, res.headers);
}

export interface JsonRequest {
  method: string;
  path: string;
  query?: RawRequest['query'];
  json?: unknown;
  /** What a 2xx answer must be; anything else is an ApiError naming the request. */
  expect: AnswerShape;
  /**
   * An `Idempotency-Key` for a POST: the request is then sent again after a lost answer or a
   * 5xx, like a GET (fshare serve answers a repeat with what the first one made).
   */
  idempotencyKey?: string;
  /**
   * A request whose repeat does no more than the first (DELETE, lock, unlock): sent again after
   * a lost answer or a 5xx. A DELETE repeated that way and answered 404 was done by an earlier
   * attempt (or by someone else meanwhile): the thing is gone, as asked.
   */
  repeatable?: boolean;
  /** Told the headers of the answer (before its body is read). */
  onHeaders?: (headers: IncomingHttpHeaders) => void;
  /** A condition for the request (`If-Match`). */
  ifMatch?: string;
}

/** The shape of the answer a request asks for: a JSON object that `ok` accepts. */
export interface AnswerShape {
  /** What it is, for the error line: "a share", "a success". */
  what: string;
  ok: (body: Record<string, unknown>) => boolean;
}

export const isRecord = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/**
 * A JSON call: throws ApiError on an error status; returns the parsed body of a 2xx answer when
 * it has the shape asked for. Any other answer (a proxy's page, an empty body, `{"status":
 * "fail"}` with 200, a server of another kind) is an ApiError, so no command reports a success
 * the server did not state.
 */
export async function callJson<T>(client: ApiClient, req: JsonRequest): Promise<T> {
  const payload = req.json === undefined ? undefined : JSON.stringify(req.json);
  const idempotent =
    req.method === 'GET' ||
    req.method === 'HEAD' ||
    req.method === 'PUT' ||
    req.repeatable === true ||
    req.idempotencyKey !== undefined;
  const res = await send(client, {
    method: req.method,
    path: req.path,
    query: req.query,
    headers: {
      accept: 'application/json',
      ...(req.idempotencyKey === undefined ? {} : { 'idempotency-key': req.idempotencyKey }),
      ...(req.ifMatch === undefined ? {} : { 'if-match': req.ifMatch }),
    },
    body: payload === undefined ? undefined : () => payload,
    idempotent,
    retryServerErrors: idempotent,
    buffered: true,
  });
  if (res.statusCode === 404 && res.repeated && req.repeatable && req.method === 'DELETE') {
    await res.dump();
    return { status: 'success', message: 'Already gone' } as T;
  }
  if (res.statusCode >= 400) throw await toApiError(res);
  req.onHeaders?.(res.headers);
  const text = await res.text();
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    throw new ApiError(
      res.statusCode,
      text.trim() === ''
        ? `the server's answer to ${req.method} ${req.path} is empty, not ${req.expect.what}`
        : `the server's answer to ${req.method} ${req.path} is not JSON`,
    );
  }
  if (isRecord(body) && req.expect.ok(body)) return body as T;
  if (isRecord(body) && body.status === 'fail' && typeof body.message === 'string')
    throw new ApiError(
      res.statusCode,
      `the server answered ${req.method} ${req.path} with a failure: ${body.message}`,
      body,
    );
  throw new ApiError(
    res.statusCode,
    `the server's answer to ${req.method} ${req.path} is not ${req.expect.what}`,
    body,
  );
}

/** One header's value (the first, when the server sent several). */
export function header(headers: IncomingHttpHeaders, name: string): string | undefined {
  const value = headers[name];
  return Array.isArray(value) ? value[0] : value;
}
