import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * A small stand-in for the reference server (sachet-server), answering as it does where fshare
 * serve adds things: shares without `size` or `sha256`, zone-less `create_date`, content without
 * ETag, Last-Modified or Repr-Digest, `Content-Disposition: inline`, no upload-state endpoint,
 * and multi-chunk uploads that are answered 200 chunk after chunk but never complete (the
 * reference's bug the verified-transfers issue names). A single-chunk upload completes (201).
 * A field the reference does not know (expires_in, max_downloads…) is refused, as sachet-server
 * refused fshare's: 400 "Invalid data: {'expires_in': ['Unknown field.']}" (create) or
 * "Invalid patch: …" (PATCH of a share, of /users/alice or of /admin/settings); a route it does
 * not have (DELETE /users/<name>/tokens) is a 404. A file name that is a token is
 * sent unquoted in Content-Disposition (`inline; filename=small.bin`), as the reference sends it.
 * Any bearer token is accepted. Bodies are small in these tests, so they are buffered.
 */
export interface StandIn {
  url: string;
  shares: Map<string, StandInShare>;
  /** Requests seen, as "METHOD path". */
  requests: string[];
  close(): Promise<void>;
}

export interface StandInShare {
  share_id: string;
  file_name: string;
  owner_name: string | null;
  initialized: boolean;
  locked: boolean;
  create_date: string;
  content: Buffer;
}

const json = (res: ServerResponse, status: number, body: unknown) => {
  const text = JSON.stringify(body);
  res.writeHead(status, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(text),
  });
  res.end(text);
};

/** The reference's (marshmallow's) refusal of fields it does not know, or undefined. */
function unknownFields(body: Record<string, unknown>, known: string[]): string | undefined {
  const unknown = Object.keys(body).filter((key) => !known.includes(key));
  if (unknown.length === 0) return undefined;
  return `{${unknown.map((key) => `'${key}': ['Unknown field.']`).join(', ')}}`;
}

async function readBody(req: IncomingMessage): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const piece of req) parts.push(piece as Buffer);
  return Buffer.concat(parts);
}

/** Fields and the file part of a multipart body (enough for fshare's chunks). */
function parseMultipart(
  body: Buffer,
  type: string,
): { fields: Record<string, string>; file?: Buffer } {
  const boundary = /boundary=([^;]+)/.exec(type)?.[1];
  if (!boundary) throw new Error('no boundary');
  const delimiter = Buffer.from(`--${boundary}`);
  const fields: Record<string, string> = {};
  let file: Buffer | undefined;
  let at = body.indexOf(delimiter);
  while (at !== -1) {
    const next = body.indexOf(delimiter, at + delimiter.length);
    if (next === -1) break;
    const part = body.subarray(at + delimiter.length + 2, next - 2); // skip CRLF after, before
    const split = part.indexOf('\r\n\r\n');
    const headers = part.subarray(0, split).toString();
    const value = part.subarray(split + 4);
    const name = /name="([^"]*)"/.exec(headers)?.[1] ?? '';
    if (/filename=/.test(headers)) file = Buffer.from(value);
    else fields[name] = value.toString();
    at = next;
  }
  return { fields, file };
}

export async function startStandIn(createDate = '2026-11-20T10:00:00.123456'): Promise<StandIn> {
  const shares = new Map<string, StandInShare>();
  const requests: string[] = [];
  /** Chunks of unfinished multi-chunk uploads, never joined. */
  const pending = new Map<string, Map<number, Buffer>>();
  let defaultPermissions: string[] = [];
  const view = (s: StandInShare) => ({
    share_id: s.share_id,
    file_name: s.file_name,
    owner_name: s.owner_name,
    initialized: s.initialized,
    locked: s.locked,
    create_date: s.create_date,
  });

  const handle = async (req: IncomingMessage, res: ServerResponse) => {
    const url = new URL(req.url ?? '/', 'http://x');
    requests.push(`${req.method} ${url.pathname}`);
    const path = url.pathname.split('/').filter(Boolean);
    if (req.method === 'GET' && url.pathname === '/whoami')
      return json(res, 200, {
        status: 'success',
        username: 'alice',
        permissions: ['CREATE', 'MODIFY', 'DELETE', 'READ', 'LIST'],
      });
    if (url.pathname === '/admin/settings') {
      if (req.method === 'GET') return json(res, 200, { default_permissions: defaultPermissions });
      if (req.method === 'PATCH') {
        const body = JSON.parse((await readBody(req)).toString() || '{}') as {
          default_permissions?: string[];
        };
        const refused = unknownFields(body, ['default_permissions']);
        if (refused)
          return json(res, 400, { status: 'fail', message: `Invalid patch: ${refused}` });
        defaultPermissions = body.default_permissions ?? defaultPermissions;
        return json(res, 200, { status: 'success' });
      }
    }
    if (
      path[0] === 'users' &&
      path.length === 2 &&
      (req.method === 'GET' || req.method === 'PATCH')
    ) {
      // One user, alice; a quota (fshare serve's) is a field the reference does not know.
      if (path[1] !== 'alice')
        return json(res, 404, { status: 'fail', message: 'This resource does not exist.' });
      if (req.method === 'GET')
        return json(res, 200, {
          username: 'alice',
          permissions: ['CREATE', 'MODIFY', 'DELETE', 'READ', 'LIST'],
          register_date: createDate,
        });
      const body = JSON.parse((await readBody(req)).toString() || '{}') as Record<string, unknown>;
      const refused = unknownFields(body, ['username', 'password', 'permissions']);
      if (refused) return json(res, 400, { status: 'fail', message: `Invalid patch: ${refused}` });
      return json(res, 200, { status: 'success' });
    }
    if (path[0] !== 'files') return json(res, 404, { status: 'fail', message: 'Not found' });
    if (path.length === 1 && req.method === 'POST') {
      const body = JSON.parse((await readBody(req)).toString() || '{}') as { file_name?: string };
      const refused = unknownFields(body, ['file_name', 'owner_name']);
      if (refused) return json(res, 400, { status: 'fail', message: `Invalid data: ${refused}` });
      const id = randomUUID();
      shares.set(id, {
        share_id: id,
        file_name: body.file_name ?? id,
        owner_name: 'alice',
        initialized: false,
        locked: false,
        create_date: createDate,
        content: Buffer.alloc(0),
      });
      res.setHeader('location', `/files/${id}`);
      return json(res, 201, { status: 'success', url: `/files/${id}` });
    }
    if (path.length === 1 && req.method === 'GET') {
      const data = [...shares.values()].map(view);
      return json(res, 200, { data, prev: null, next: null, pages: 1 });
    }
    const share = shares.get(path[1] ?? '');
    if (!share) return json(res, 404, { status: 'fail', message: 'No share with this id' });
    if (path.length === 2) {
      if (req.method === 'GET') return json(res, 200, view(share));
      if (req.method === 'DELETE') {
        shares.delete(share.share_id);
        return json(res, 200, { status: 'success' });
      }
      if (req.method === 'PATCH') {
        const body = JSON.parse((await readBody(req)).toString() || '{}') as {
          file_name?: string;
          owner_name?: string | null;
        };
        if (share.locked)
          return json(res, 423, { status: 'fail', message: 'This share is locked.' });
        const refused = unknownFields(body, ['file_name', 'owner_name']);
        if (refused)
          return json(res, 400, { status: 'fail', message: `Invalid patch: ${refused}` });
        if (body.file_name !== undefined) share.file_name = body.file_name;
        if (body.owner_name !== undefined) share.owner_name = body.owner_name;
        return json(res, 200, { status: 'success' });
      }
    }
    if (path.length === 3 && path[2] === 'content') {
      if (req.method === 'POST' || req.method === 'PUT') {
        const { fields, file } = parseMultipart(
          await readBody(req),
          req.headers['content-type'] ?? '',
        );
        const total = Number(fields.dztotalchunks);
        const index = Number(fields.dzchunkindex);
        if (!fields.dzuuid || !Number.isInteger(total) || !Number.isInteger(index) || !file)
          return json(res, 400, { status: 'fail', message: 'bad chunk' });
        if (total === 1) {
          share.content = file;
          share.initialized = true;
          return json(res, 201, { status: 'success', message: 'Upload complete' });
        }
        const chunks = pending.get(fields.dzuuid) ?? new Map<number, Buffer>();
        chunks.set(index, file);
        pending.set(fields.dzuuid, chunks);
        return json(res, 200, { status: 'success', message: 'Chunk received' });
      }
      if (req.method === 'GET' || req.method === 'HEAD') {
        if (!share.initialized) return json(res, 404, { status: 'fail', message: 'No content' });
        const size = share.content.length;
        const headers: Record<string, string | number> = {
          'content-type': 'application/octet-stream',
          'content-disposition': /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(share.file_name)
            ? `inline; filename=${share.file_name}`
            : `inline; filename="${share.file_name}"`,
          'accept-ranges': 'bytes',
        };
        const m = /^bytes=(\d+)-(\d*)$/.exec(req.headers.range ?? '');
        let status = 200;
        let body = share.content;
        if (m) {
          const start = Number(m[1]);
          const end = m[2] ? Math.min(Number(m[2]), size - 1) : size - 1;
          body = share.content.subarray(start, end + 1);
          headers['content-range'] = `bytes ${start}-${end}/${size}`;
          status = 206;
        }
        headers['content-length'] = body.length;
        res.writeHead(status, headers);
        return res.end(req.method === 'HEAD' ? undefined : body);
      }
    }
    return json(res, 404, { status: 'fail', message: 'Not found' });
  };

  const server: Server = createServer((req, res) => {
    handle(req, res).catch((err: Error) =>
      json(res, 400, { status: 'fail', message: err.message }),
    );
  });
  await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    shares,
    requests,
    close: () =>
      new Promise<void>((done) => {
        server.closeAllConnections();
        server.close(() => done());
      }),
  };
}
