import { STATUS_CODES } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import { Agent, FormData, request, type Dispatcher } from 'undici';
import {
  ApiError,
  ClientInputError,
  NetworkError,
  describeTransportError,
  isConnectError,
  isTransportError,
} from './errors.js';

export interface RetryPolicy {
  /** Extra attempts after the first one. */
  retries: number;
  baseDelayMs: number;
  maxDelayMs: number;
}

export const DEFAULT_RETRY: RetryPolicy = { retries: 4, baseDelayMs: 250, maxDelayMs: 5000 };

export interface ClientOptions {
  /** Base URL of the server, e.g. http://127.0.0.1:5000 (a path prefix is kept). */
  server: string;
  /** Bearer token; absent means anonymous. */
  token?: string;
  /** Defaults to one keep-alive Agent shared by every client of the process. */
  dispatcher?: Dispatcher;
  retry?: Partial<RetryPolicy>;
}

/** Everything a call needs; plain data so it can be copied with another token or server. */
export interface ApiClient {
  readonly server: string;
  readonly token: string | undefined;
  readonly dispatcher: Dispatcher;
  readonly retry: RetryPolicy;
}

let sharedAgent: Agent | undefined;

/** The process-wide keep-alive agent: parallel chunks reuse its connections. */
export function defaultDispatcher(): Agent {
  sharedAgent ??= new Agent({ keepAliveTimeout: 30_000, keepAliveMaxTimeout: 120_000 });
  return sharedAgent;
}

/** Closes the shared agent so a short-lived process can exit without waiting for idle sockets. */
export async function closeDefaultDispatcher(): Promise<void> {
  const agent = sharedAgent;
  sharedAgent = undefined;
  if (agent) await agent.close();
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
  return `${parsed.origin}${parsed.pathname.replace(/\/+$/, '')}`;
}

export function createClient(options: ClientOptions): ApiClient {
  return {
    server: normalizeServer(options.server),
    token: options.token,
    dispatcher: options.dispatcher ?? defaultDispatcher(),
    retry: { ...DEFAULT_RETRY, ...options.retry },
  };
}

/** Delay before attempt `attempt + 1`: exponential with jitter so parallel chunks spread out. */
export function backoffDelay(policy: RetryPolicy, attempt: number): number {
  const exp = Math.min(policy.maxDelayMs, policy.baseDelayMs * 2 ** (attempt - 1));
  return Math.round(exp * (0.75 + Math.random() * 0.5));
}

type Body = string | FormData | null;

export interface RawRequest {
  method: Dispatcher.HttpMethod;
  /** Path below the server URL, starting with "/". */
  path: string;
  query?: Record<string, string | number | undefined>;
  headers?: Record<string, string>;
  /** A factory so a retried request gets a fresh body (a FormData stream can be read once). */
  body?: () => Body;
  /** Safe to repeat after the request may have reached the server (GET, PUT, chunk uploads). */
  idempotent: boolean;
  /** Also retry 5xx answers (only sensible when idempotent). */
  retryServerErrors?: boolean;
  signal?: AbortSignal;
}

export function urlFor(client: ApiClient, path: string, query?: RawRequest['query']): string {
  const url = new URL(client.server + path);
  for (const [key, value] of Object.entries(query ?? {}))
    if (value !== undefined) url.searchParams.set(key, String(value));
  return url.toString();
}

/**
 * Sends one request, retrying transport failures (and 5xx when allowed) with backoff.
 * Returns the raw response, status unchecked; the caller must consume or dump its body.
 */
export async function send(client: ApiClient, req: RawRequest): Promise<Dispatcher.ResponseData> {
  const url = urlFor(client, req.path, req.query);
  const headers: Record<string, string> = { ...req.headers };
  if (client.token) headers.authorization = `Bearer ${client.token}`;
  for (let attempt = 1; ; attempt++) {
    const body = req.body?.() ?? null;
    const sendHeaders =
      typeof body === 'string' ? { 'content-type': 'application/json', ...headers } : headers;
    let res: Dispatcher.ResponseData;
    try {
      res = await request(url, {
        method: req.method,
        headers: sendHeaders,
        body,
        dispatcher: client.dispatcher,
        signal: req.signal,
      });
    } catch (err) {
      if (!isTransportError(err)) throw err;
      const retryable = req.idempotent || isConnectError(err);
      if (!retryable || attempt > client.retry.retries) {
        const tries = attempt === 1 ? '' : ` (after ${attempt} attempts)`;
        throw new NetworkError(
          `cannot reach ${client.server}: ${describeTransportError(err)}${tries}`,
          attempt,
          { cause: err },
        );
      }
      await sleep(backoffDelay(client.retry, attempt), undefined, { signal: req.signal });
      continue;
    }
    if (res.statusCode >= 500 && req.retryServerErrors && attempt <= client.retry.retries) {
      await res.body.dump();
      await sleep(backoffDelay(client.retry, attempt), undefined, { signal: req.signal });
      continue;
    }
    return res;
  }
}

/** Reads an error response into an ApiError carrying the server's message. */
export async function toApiError(res: Dispatcher.ResponseData): Promise<ApiError> {
  const text = await res.body.text().catch(() => '');
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
  const fallback = STATUS_CODES[res.statusCode] ?? 'request failed';
  return new ApiError(res.statusCode, fromServer || fallback, body);
}

export interface JsonRequest {
  method: Dispatcher.HttpMethod;
  path: string;
  query?: RawRequest['query'];
  json?: unknown;
}

/** A JSON call: throws ApiError on an error status, returns the parsed body otherwise. */
export async function callJson<T>(client: ApiClient, req: JsonRequest): Promise<T> {
  const payload = req.json === undefined ? undefined : JSON.stringify(req.json);
  const idempotent = req.method === 'GET' || req.method === 'HEAD' || req.method === 'PUT';
  const res = await send(client, {
    method: req.method,
    path: req.path,
    query: req.query,
    headers: { accept: 'application/json' },
    body: payload === undefined ? undefined : () => payload,
    idempotent,
    retryServerErrors: idempotent,
  });
  if (res.statusCode >= 400) throw await toApiError(res);
  const text = await res.body.text();
  if (!text) return {} as T;
  try {
    return JSON.parse(text) as T;
  } catch {
    throw new ApiError(res.statusCode, 'the server sent a response that is not JSON');
  }
}
