// API.md "CORS" and "Bodies": headers on every response, preflights, 404 and 405 as JSON.
import { randomUUID } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import net, { type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createShareWithContent,
  expectFail,
  expectStatus,
  request,
  type Res,
  until,
} from '../helpers/http.js';
import { createServer } from '../../src/server/index.js';
import { ADMIN, login, startServer, type TestServer } from '../helpers/server.js';

const ORIGIN = 'https://client.example.org';

let srv: TestServer;
let base: string;
let admin: string;
let shareId: string;

const list = (value: string | string[] | undefined) =>
  (Array.isArray(value) ? value.join(',') : (value ?? ''))
    .split(',')
    .map((s) => s.trim().toLowerCase())
    .filter(Boolean);

function expectAllowsOrigin(res: Res): void {
  const allow = res.headers['access-control-allow-origin'];
  expect(allow === '*' || allow === ORIGIN, `Access-Control-Allow-Origin: ${allow}`).toBe(true);
}

function expectExposes(res: Res): void {
  const exposed = list(res.headers['access-control-expose-headers']);
  for (const h of [
    'content-disposition',
    'content-range',
    'content-length',
    'location',
    'etag',
    'repr-digest',
    // Not safelisted: without these a page cannot read when to retry (429, 503) or what a path
    // allows (405).
    'retry-after',
    'allow',
    // The challenge of a 401 (RFC 9110 §11.6.1).
    'www-authenticate',
  ]) {
    expect(exposed, `Access-Control-Expose-Headers lists ${h}`).toContain(h);
  }
}

beforeAll(async () => {
  srv = await startServer();
  base = srv.url;
  admin = await login(base, ADMIN.username, ADMIN.password);
  shareId = await createShareWithContent(base, admin, 'cors.txt', Buffer.from('cors body'));
});

afterAll(async () => {
  await srv?.close();
});

describe('CORS', () => {
  const routes = (): Array<[string, string[]]> => [
    ['/files', ['GET', 'POST']],
    [`/files/${shareId}`, ['GET', 'PATCH', 'PUT', 'DELETE']],
    [`/files/${shareId}/content`, ['GET', 'POST', 'PUT']],
    [`/files/${shareId}/lock`, ['POST']],
    ['/users/login', ['POST']],
    ['/users', ['GET', 'POST']],
    [`/users/${ADMIN.username}`, ['GET', 'PATCH', 'PUT', 'DELETE']],
    ['/admin/settings', ['GET', 'PATCH', 'PUT']],
    ['/whoami', ['GET']],
  ];

  it('OPTIONS preflights answer 204 allowing any origin and the Authorization, Content-Type and Range headers', async () => {
    for (const [path, methods] of routes()) {
      for (const method of methods) {
        const res = await request(base, 'OPTIONS', path, {
          headers: {
            origin: ORIGIN,
            'access-control-request-method': method,
            'access-control-request-headers': 'authorization,content-type,range',
          },
        });
        expect(res.status, `OPTIONS ${path} (${method})`).toBe(204);
        expectAllowsOrigin(res);
        const allowHeaders = list(res.headers['access-control-allow-headers']);
        for (const h of [
          'authorization',
          'content-type',
          'range',
          'if-range',
          'if-none-match',
          'if-match',
          'if-modified-since',
          'if-unmodified-since',
        ]) {
          expect(allowHeaders, `${path}: Access-Control-Allow-Headers lists ${h}`).toContain(h);
        }
        const allowMethods = list(res.headers['access-control-allow-methods']);
        expect(allowMethods, `${path}: Access-Control-Allow-Methods lists ${method}`).toContain(
          method.toLowerCase(),
        );
      }
    }
  });

  // Dropzone.js sends Cache-Control and X-Requested-With with every chunk: its preflight was
  // answered without them, so Chromium blocked every chunk of a Dropzone page on another origin
  // (test/browser/dropzone.test.ts). A preflight now allows the header names it asks for.
  it('a preflight allows the other request headers it asks for, names only', async () => {
    const res = await request(base, 'OPTIONS', `/files/${shareId}/content`, {
      headers: {
        origin: ORIGIN,
        'access-control-request-method': 'POST',
        'access-control-request-headers':
          'accept, authorization, cache-control, x-requested-with, x-my-header, bad(name)',
      },
    });
    expect(res.status).toBe(204);
    const allowHeaders = list(res.headers['access-control-allow-headers']);
    for (const h of ['authorization', 'cache-control', 'x-requested-with', 'x-my-header', 'range'])
      expect(allowHeaders, `Access-Control-Allow-Headers lists ${h}`).toContain(h);
    expect(allowHeaders.join(',')).not.toContain('bad(');
    expect(list(res.headers.vary)).toContain('access-control-request-headers');
  });

  it('a preflight without a token is not refused by authentication', async () => {
    const res = await request(base, 'OPTIONS', '/admin/settings', {
      headers: { origin: ORIGIN, 'access-control-request-method': 'PUT' },
    });
    expect(res.status).toBe(204);
  });

  it('successful responses allow the origin and expose the four headers', async () => {
    const whoami = await request(base, 'GET', '/whoami', { headers: { origin: ORIGIN } });
    expectStatus(whoami, 200);
    expectAllowsOrigin(whoami);
    expectExposes(whoami);

    const created = await request(base, 'POST', '/files', {
      token: admin,
      json: { file_name: 'x.txt' },
      headers: { origin: ORIGIN },
    });
    expectStatus(created, 201);
    expectAllowsOrigin(created);
    expectExposes(created);

    const ranged = await request(base, 'GET', `/files/${shareId}/content`, {
      token: admin,
      headers: { origin: ORIGIN, range: 'bytes=0-3' },
    });
    expectStatus(ranged, 206);
    expectAllowsOrigin(ranged);
    expectExposes(ranged);
  });

  it('error responses carry the CORS headers too', async () => {
    const responses = [
      await request(base, 'GET', '/files', { headers: { origin: ORIGIN } }), // 401
      await request(base, 'GET', `/files/${randomUUID()}`, {
        token: admin,
        headers: { origin: ORIGIN },
      }), // 404
      await request(base, 'GET', '/no/such/route', { headers: { origin: ORIGIN } }), // 404
      await request(base, 'DELETE', '/whoami', { headers: { origin: ORIGIN } }), // 405
      await request(base, 'GET', `/files/${shareId}/content`, {
        token: admin,
        headers: { origin: ORIGIN, range: 'bytes=999-' },
      }), // 416
    ];
    expect(responses.map((r) => r.status)).toEqual([401, 404, 404, 405, 416]);
    for (const res of responses) {
      expectAllowsOrigin(res);
      expectExposes(res);
    }
  });
});

describe('unknown routes → 404 JSON', () => {
  for (const [method, path] of [
    ['GET', '/'],
    ['GET', '/nope'],
    ['POST', '/nope/deeper'],
    ['GET', '/files/x/y/z'],
    ['GET', `/files/${'0'.repeat(8)}-0000-0000-0000-${'0'.repeat(12)}/contents`],
    ['DELETE', '/admin'],
    ['GET', '/admin/other'],
  ] as const) {
    it(`${method} ${path}`, async () => {
      expectFail(await request(base, method, path, { token: admin }), 404);
    });
  }
});

describe('known route, wrong method → 405 JSON with Allow', () => {
  const cases: Array<[string, () => string, string[]]> = [
    ['DELETE', () => '/files', ['GET', 'POST']],
    ['PUT', () => '/files', ['GET', 'POST']],
    ['POST', () => `/files/${shareId}`, ['GET', 'PATCH', 'PUT', 'DELETE']],
    ['PATCH', () => `/files/${shareId}/content`, ['GET', 'POST', 'PUT']],
    ['DELETE', () => `/files/${shareId}/content`, ['GET', 'POST', 'PUT']],
    ['GET', () => `/files/${shareId}/lock`, ['POST']],
    ['GET', () => `/files/${shareId}/unlock`, ['POST']],
    ['POST', () => '/whoami', ['GET']],
    ['DELETE', () => '/whoami', ['GET']],
    ['POST', () => '/admin/settings', ['GET', 'PATCH', 'PUT']],
    ['DELETE', () => '/admin/settings', ['GET', 'PATCH', 'PUT']],
    ['DELETE', () => '/users', ['GET', 'POST']],
    ['POST', () => `/users/${ADMIN.username}`, ['GET', 'PATCH', 'PUT', 'DELETE']],
  ];
  for (const [method, path, allowed] of cases) {
    it(`${method} ${path().replace(/[0-9a-f-]{36}/, '<id>')} → Allow ${allowed.join(', ')}`, async () => {
      const res = await request(base, method, path(), { token: admin });
      expectFail(res, 405);
      const allow = list(res.headers.allow).map((m) => m.toUpperCase());
      for (const m of allowed) expect(allow, `Allow: ${res.headers.allow}`).toContain(m);
      expect(allow).not.toContain(method);
    });
  }

  it('405 does not need authentication', async () => {
    const res = await request(base, 'DELETE', '/files');
    expectFail(res, 405);
    expect(res.headers.allow).toBeDefined();
  });
});

describe('error bodies', () => {
  it('401, 403, 404, 400 are all {status: "fail", message} as JSON', async () => {
    expectFail(await request(base, 'GET', '/files'), 401);
    expectFail(
      await request(base, 'POST', '/users/login', { json: { username: 'x', password: 'y' } }),
      401,
    );
    expectFail(await request(base, 'GET', '/users/nobody', { token: admin }), 403);
    expectFail(await request(base, 'GET', `/files/${randomUUID()}`, { token: admin }), 404);
    expectFail(await request(base, 'POST', '/files', { token: admin, json: { nope: 1 } }), 400);
  });

  it('a huge unparsable JSON body → 400 or 413 JSON, never 500', async () => {
    const res = await request(base, 'POST', '/files', {
      token: admin,
      body: `{"file_name": "${'x'.repeat(200_000)}`,
      headers: { 'content-type': 'application/json' },
    });
    expect([400, 413]).toContain(res.status);
    expectFail(res, res.status);
  });
});

describe('while the server starts', () => {
  // The 503 "The server is starting" (the port is bound before the data is open) allows any
  // origin like every other answer. Found from outside: it had no Access-Control-Allow-Origin, so
  // a browser page saw a network error instead of its JSON and Retry-After.
  it('the 503 while the data opens carries Access-Control-Allow-Origin', async () => {
    // A "database" that takes connections and never answers keeps the server starting.
    const held: net.Socket[] = [];
    const silent = net.createServer((socket) => {
      socket.on('error', () => undefined);
      held.push(socket);
    });
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    const dataDir = await mkdtemp(join(tmpdir(), 'fshare-test-'));
    let starting: Promise<unknown> = Promise.resolve();
    let port = 0;
    // A port found free may be taken by someone else before the server binds it: then another.
    for (let attempt = 1; ; attempt++) {
      const free = net.createServer();
      await new Promise<void>((resolve) => free.listen(0, '127.0.0.1', resolve));
      port = (free.address() as AddressInfo).port;
      await new Promise((resolve) => free.close(resolve));
      let failed: NodeJS.ErrnoException | undefined;
      starting = createServer({
        dataDir,
        database: `postgres://fshare@127.0.0.1:${(silent.address() as AddressInfo).port}/fshare`,
        bind: { port, host: '127.0.0.1' },
        notice: () => undefined,
      }).then(
        (server) => server.close(),
        (err: NodeJS.ErrnoException) => (failed = err),
      );
      // The port is bound before the data is opened: once the database is called, it answers.
      await until(
        () => held.length > 0 || failed !== undefined,
        'the server to call its database',
        50,
        60_000,
      );
      if (held.length > 0 || failed?.code !== 'EADDRINUSE' || attempt === 5) break;
    }
    try {
      const res = await fetch(`http://127.0.0.1:${port}/files`, { headers: { Origin: ORIGIN } });
      expect(res.status).toBe(503);
      expect(res.headers.get('retry-after')).toBe('1');
      expect(res.headers.get('access-control-allow-origin')).toBe('*');
      expect(list(res.headers.get('access-control-expose-headers') ?? '')).toContain('retry-after');
      expect(await res.json()).toEqual({
        status: 'fail',
        message: 'The server is starting; try again',
      });
    } finally {
      // The database goes away: the start fails, and the port is closed again.
      for (const socket of held) socket.destroy();
      await new Promise((resolve) => silent.close(resolve));
      await starting;
      await rm(dataDir, { recursive: true, force: true });
    }
  });
});
