import { createHash, randomUUID } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import http, { type IncomingHttpHeaders } from 'node:http';
import { join } from 'node:path';
import { expect } from 'vitest';

/** A complete HTTP response, read with node:http so nothing is hidden or normalised. */
export interface Res {
  status: number;
  headers: IncomingHttpHeaders;
  rawHeaders: string[];
  buf: Buffer;
  text: string;
  /** The parsed JSON body, or undefined when the body is not JSON. */
  body: any;
}

export interface RequestOptions {
  token?: string;
  /** Sent as JSON with `Content-Type: application/json`. */
  json?: unknown;
  /** Sent as is; set the content type in `headers`. */
  body?: string | Buffer;
  headers?: Record<string, string>;
  /** The client address to send from (any of 127.0.0.0/8 works on loopback). */
  localAddress?: string;
}

const REQUEST_IDLE_TIMEOUT_MS = 20_000;

/** One HTTP request over a fresh connection; resolves for every status code. */
export function request(
  base: string,
  method: string,
  path: string,
  opts: RequestOptions = {},
): Promise<Res> {
  const url = new URL(path, base);
  const headers: Record<string, string> = {};
  let payload: Buffer | undefined;
  if (opts.json !== undefined) {
    headers['content-type'] = 'application/json';
    payload = Buffer.from(JSON.stringify(opts.json));
  } else if (opts.body !== undefined) {
    payload = Buffer.isBuffer(opts.body) ? opts.body : Buffer.from(opts.body);
  }
  if (opts.token !== undefined) headers['authorization'] = `Bearer ${opts.token}`;
  Object.assign(headers, opts.headers ?? {});
  if (payload !== undefined) headers['content-length'] = String(payload.length);
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        host: url.hostname,
        port: url.port,
        path: url.pathname + url.search,
        method,
        headers,
        agent: false,
        localAddress: opts.localAddress,
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('error', reject);
        res.on('end', () => {
          const buf = Buffer.concat(chunks);
          const text = buf.toString('utf8');
          let body: unknown;
          try {
            body = text.length > 0 ? JSON.parse(text) : undefined;
          } catch {
            body = undefined;
          }
          resolve({
            status: res.statusCode ?? 0,
            headers: res.headers,
            rawHeaders: res.rawHeaders,
            buf,
            text,
            body,
          });
        });
      },
    );
    req.on('error', reject);
    // A safety net, not an assertion: a hung request fails with its name instead of a test timeout.
    req.setTimeout(REQUEST_IDLE_TIMEOUT_MS, () =>
      req.destroy(new Error(`${method} ${path}: no response for ${REQUEST_IDLE_TIMEOUT_MS} ms`)),
    );
    if (payload !== undefined) req.write(payload);
    req.end();
  });
}

export const get = (base: string, path: string, opts?: RequestOptions) =>
  request(base, 'GET', path, opts);
export const post = (base: string, path: string, opts?: RequestOptions) =>
  request(base, 'POST', path, opts);
export const patch = (base: string, path: string, opts?: RequestOptions) =>
  request(base, 'PATCH', path, opts);
export const put = (base: string, path: string, opts?: RequestOptions) =>
  request(base, 'PUT', path, opts);
export const del = (base: string, path: string, opts?: RequestOptions) =>
  request(base, 'DELETE', path, opts);

/** Asserts an error response: the status and API.md's `{status: "fail", message}` body. */
export function expectFail(res: Res, status: number): void {
  expect({ status: res.status, body: res.body }, `${res.status} ${res.text.slice(0, 300)}`).toEqual(
    {
      status,
      body: { status: 'fail', message: expect.any(String) },
    },
  );
  expect((res.body as { message: string }).message.length).toBeGreaterThan(0);
  expect(res.headers['content-type']).toMatch(/^application\/json/);
}

/** Asserts a status code, printing the body when it differs. */
export function expectStatus(res: Res, status: number): void {
  expect(res.status, `expected ${status}, got ${res.status}: ${res.text.slice(0, 300)}`).toBe(
    status,
  );
}

/** Unique, readable names so tests sharing one server never collide. */
export function unique(prefix: string): string {
  return `${prefix}-${randomUUID().slice(0, 8)}`;
}

/** Creates a user through POST /users and signs it in. */
export async function createUser(
  base: string,
  adminToken: string,
  permissions: string[],
  username = unique('user'),
  password = `pw-${randomUUID()}`,
): Promise<{ username: string; password: string; token: string }> {
  const res = await post(base, '/users', {
    token: adminToken,
    json: { username, password, permissions },
  });
  expectStatus(res, 201);
  const login = await post(base, '/users/login', { json: { username, password } });
  expectStatus(login, 200);
  return { username, password, token: (login.body as { auth_token: string }).auth_token };
}

/** Creates a share and returns its id. */
export async function createShare(
  base: string,
  token: string | undefined,
  fileName?: string,
): Promise<string> {
  const res = await post(base, '/files', {
    token,
    json: fileName === undefined ? {} : { file_name: fileName },
  });
  expectStatus(res, 201);
  const url = (res.body as { url: string }).url;
  const match = /^\/files\/([0-9a-f-]{36})$/i.exec(url);
  expect(match, `share url ${url}`).not.toBeNull();
  return match![1]!;
}

export async function getShare(base: string, token: string | undefined, id: string) {
  const res = await get(base, `/files/${id}`, { token });
  expectStatus(res, 200);
  return res.body as ShareJson;
}

export async function setDefaultPermissions(
  base: string,
  adminToken: string,
  permissions: string[],
): Promise<void> {
  const res = await patch(base, '/admin/settings', {
    token: adminToken,
    json: { default_permissions: permissions },
  });
  expectStatus(res, 200);
}

export type Part =
  | { name: string; value: string }
  | { name: string; filename: string; data: Buffer; contentType?: string };

/** Builds a multipart/form-data body by hand, so tests control every byte. */
export function multipart(parts: Part[]): { body: Buffer; contentType: string } {
  const boundary = `----fshare-test-${randomUUID()}`;
  const pieces: Buffer[] = [];
  for (const part of parts) {
    if ('value' in part) {
      pieces.push(
        Buffer.from(
          `--${boundary}\r\nContent-Disposition: form-data; name="${part.name}"\r\n\r\n${part.value}\r\n`,
        ),
      );
    } else {
      pieces.push(
        Buffer.from(
          `--${boundary}\r\nContent-Disposition: form-data; name="${part.name}"; filename="${part.filename}"\r\n` +
            `Content-Type: ${part.contentType ?? 'application/octet-stream'}\r\n\r\n`,
        ),
        part.data,
        Buffer.from('\r\n'),
      );
    }
  }
  pieces.push(Buffer.from(`--${boundary}--\r\n`));
  return { body: Buffer.concat(pieces), contentType: `multipart/form-data; boundary=${boundary}` };
}

/** Sends raw multipart parts to a share's content endpoint. */
export function sendParts(
  base: string,
  token: string | undefined,
  id: string,
  parts: Part[],
  method: 'POST' | 'PUT' = 'POST',
  headers: Record<string, string> = {},
): Promise<Res> {
  const { body, contentType } = multipart(parts);
  return request(base, method, `/files/${id}/content`, {
    token,
    body,
    headers: { 'content-type': contentType, ...headers },
  });
}

export interface Chunk {
  dzuuid: string;
  index: number;
  total: number;
  data: Buffer;
}

/** Sends one chunk of the chunk protocol. */
export function sendChunk(
  base: string,
  token: string | undefined,
  id: string,
  chunk: Chunk,
  method: 'POST' | 'PUT' = 'POST',
  headers: Record<string, string> = {},
): Promise<Res> {
  return sendParts(
    base,
    token,
    id,
    [
      { name: 'dzuuid', value: chunk.dzuuid },
      { name: 'dzchunkindex', value: String(chunk.index) },
      { name: 'dztotalchunks', value: String(chunk.total) },
      { name: 'upload', filename: 'blob', data: chunk.data },
    ],
    method,
    headers,
  );
}

/** Splits data into `count` chunks (the last may be shorter; count ≥ 1). */
export function split(data: Buffer, count: number): Buffer[] {
  const size = Math.ceil(data.length / count);
  return Array.from({ length: count }, (_, i) => data.subarray(i * size, (i + 1) * size));
}

/** Uploads data sequentially in `count` chunks and asserts 200 … 200, 201. */
export async function upload(
  base: string,
  token: string | undefined,
  id: string,
  data: Buffer,
  count = 1,
  method: 'POST' | 'PUT' = 'POST',
): Promise<void> {
  const dzuuid = randomUUID();
  const chunks = split(data, count);
  for (const [index, chunk] of chunks.entries()) {
    const res = await sendChunk(
      base,
      token,
      id,
      { dzuuid, index, total: count, data: chunk },
      method,
    );
    expectStatus(res, index === count - 1 ? 201 : 200);
  }
}

/** Creates a share and uploads its content; returns the share id. */
export async function createShareWithContent(
  base: string,
  token: string | undefined,
  fileName: string,
  data: Buffer,
  count = 1,
): Promise<string> {
  const id = await createShare(base, token, fileName);
  await upload(base, token, id, data, count);
  return id;
}

/** Every regular file under dir, recursively (absolute paths); [] when dir is missing. */
export async function walkFiles(dir: string): Promise<string[]> {
  const out: string[] = [];
  let entries;
  try {
    entries = await readdir(dir, { withFileTypes: true });
  } catch {
    return out;
  }
  for (const entry of entries) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) out.push(...(await walkFiles(path)));
    else out.push(path);
  }
  return out;
}

/** Every entry (files and directories) under dir, recursively, as absolute paths. */
export async function walkAll(dir: string): Promise<string[]> {
  const out: string[] = [];
  let entries;
  try {
    entries = await readdir(dir, { withFileTypes: true });
  } catch {
    return out;
  }
  for (const entry of entries) {
    const path = join(dir, entry.name);
    out.push(path);
    if (entry.isDirectory()) out.push(...(await walkAll(path)));
  }
  return out.sort();
}

/** Files under dir whose bytes contain the marker. */
export async function filesContaining(dir: string, marker: Buffer | string): Promise<string[]> {
  const needle = Buffer.isBuffer(marker) ? marker : Buffer.from(marker);
  const hits: string[] = [];
  for (const file of await walkFiles(dir)) {
    try {
      if ((await readFile(file)).includes(needle)) hits.push(file);
    } catch {
      // a file removed while we walk is not a hit
    }
  }
  return hits;
}

/** Reads a share's content; asserts 200. */
export async function content(base: string, token: string | undefined, id: string) {
  const res = await get(base, `/files/${id}/content`, { token });
  expectStatus(res, 200);
  return res.buf;
}

export const ISO_NO_ZONE = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}$/;
export const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export interface ShareJson {
  share_id: string;
  file_name: string;
  owner_name: string | null;
  initialized: boolean;
  locked: boolean;
  create_date: string;
  size: number | null;
  sha256: string | null;
}

/** Every share, all pages. */
export async function allShares(base: string, token: string | undefined): Promise<ShareJson[]> {
  const out: ShareJson[] = [];
  for (let page = 1; ; page++) {
    const res = await get(base, `/files?per_page=1000&page=${page}`, { token });
    expectStatus(res, 200);
    out.push(...(res.body.data as ShareJson[]));
    if (res.body.next === null) return out;
  }
}

export const sha256hex = (data: Buffer): string => createHash('sha256').update(data).digest('hex');

/**
 * The storage promise, checked from outside: every share with content serves exactly `size`
 * bytes whose sha256 is the recorded one (and is the ETag). Returns the shares with their
 * content's sha256.
 */
export async function verifyAllContent(
  base: string,
  token: string | undefined,
): Promise<Map<string, ShareJson>> {
  const shares = new Map<string, ShareJson>();
  for (const share of await allShares(base, token)) {
    shares.set(share.share_id, share);
    if (!share.initialized) {
      expect(share, share.share_id).toMatchObject({ size: null, sha256: null });
      continue;
    }
    const res = await get(base, `/files/${share.share_id}/content`, { token });
    expectStatus(res, 200);
    expect(res.buf.length, `size of ${share.share_id}`).toBe(share.size);
    expect(sha256hex(res.buf), `sha256 of ${share.share_id}`).toBe(share.sha256);
    expect(res.headers.etag).toBe(`"${share.sha256}"`);
  }
  return shares;
}

/** The multipart body of one chunk with any fields (in the order given), for raw requests. */
export function chunkMultipart(
  fields: Record<string, string | number>,
  data: Buffer,
): { head: Buffer; tail: Buffer; contentType: string } {
  const boundary = `----fshare-raw-${randomUUID()}`;
  let head = '';
  for (const [name, value] of Object.entries(fields))
    head += `--${boundary}\r\nContent-Disposition: form-data; name="${name}"\r\n\r\n${value}\r\n`;
  head +=
    `--${boundary}\r\nContent-Disposition: form-data; name="upload"; filename="blob"\r\n` +
    `Content-Type: application/octet-stream\r\n\r\n`;
  return {
    head: Buffer.from(head),
    tail: Buffer.from(`\r\n--${boundary}--\r\n`),
    contentType: `multipart/form-data; boundary=${boundary}`,
  };
}

/**
 * A chunk request that stops in the middle of its body: the headers, the fields and the first
 * `sent` bytes of `data` are written, then nothing until `finish` sends the rest (or `abort`
 * cuts the connection). `response` settles when the server answers.
 */
export async function stalledChunk(
  base: string,
  token: string | undefined,
  id: string,
  fields: Record<string, string | number>,
  data: Buffer,
  sent: number,
  method: 'POST' | 'PUT' = 'POST',
  extra: Buffer = Buffer.alloc(0),
  more: Record<string, string> = {},
): Promise<{ finish(): Promise<Res>; abort(): void; response: Promise<Res> }> {
  const { head, tail, contentType } = chunkMultipart(fields, data);
  const body = Buffer.concat([head, data, tail, extra]);
  const url = new URL(`/files/${id}/content`, base);
  const headers: Record<string, string> = {
    ...more,
    'content-type': contentType,
    'content-length': String(body.length),
  };
  if (token) headers.authorization = `Bearer ${token}`;
  const req = http.request({
    host: url.hostname,
    port: url.port,
    path: url.pathname,
    method,
    agent: false,
    headers,
  });
  const response = new Promise<Res>((resolve, reject) => {
    req.on('error', reject);
    req.on('response', (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('error', reject);
      res.on('end', () => {
        const buf = Buffer.concat(chunks);
        const text = buf.toString();
        let parsed: unknown;
        try {
          parsed = JSON.parse(text);
        } catch {
          parsed = undefined;
        }
        resolve({
          status: res.statusCode!,
          headers: res.headers,
          rawHeaders: res.rawHeaders,
          buf,
          text,
          body: parsed,
        });
      });
    });
  });
  response.catch(() => undefined);
  const cut = head.length + sent;
  await new Promise<void>((done) => req.write(body.subarray(0, cut), () => done()));
  return {
    finish() {
      req.end(body.subarray(cut));
      return response;
    },
    abort() {
      req.destroy();
    },
    response,
  };
}

/** Polls every `stepMs` until `check` holds (a state the server reaches on its own), for at most 10 s. */
export async function until(
  check: () => Promise<boolean> | boolean,
  what: string,
  stepMs = 50,
  timeoutMs = 10_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, stepMs));
  }
}
