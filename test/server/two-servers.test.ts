import { randomBytes, randomUUID } from 'node:crypto';
import {
  createServer as createHttpServer,
  request as httpRequest,
  type IncomingMessage,
  type Server,
} from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createServer, type FshareServer } from '../../src/server/index.js';
import type { Limits } from '../../src/server/limits.js';
import {
  createShare,
  createShareWithContent,
  createUser,
  del,
  expectFail,
  expectStatus,
  get,
  post,
  sendChunk,
  sha256hex,
  split,
} from '../helpers/http.js';
import { createDatabase, startPostgres, type PgCluster } from '../helpers/postgres.js';
import { createBucket, S3_TEST_ENV, startS3, type S3Server } from '../helpers/s3.js';
import { tempDir } from '../helpers/cli.js';
import { ADMIN, login } from '../helpers/server.js';

/**
 * Two servers on one PostgreSQL database and one S3 bucket act as one server: each property
 * below is checked by making a change through one server and observing it through the other
 * (the whole server suite also runs through a round-robin balancer in the `two-servers`
 * project; these tests name the properties one by one).
 */
let pg: PgCluster;
let s3: S3Server;
let a: { url: string; server: FshareServer };
let b: { url: string; server: FshareServer };
let admin: string;

let database: string;
let storage: string;

async function start(
  database: string,
  storage: string,
  { s3Endpoint = s3.endpoint, limits }: { s3Endpoint?: string; limits?: Partial<Limits> } = {},
) {
  const server = await createServer({
    dataDir: await tempDir('two'),
    database,
    storage,
    s3Endpoint,
    limits,
    s3ForcePathStyle: true,
    adminUser: ADMIN.username,
    adminPassword: ADMIN.password,
    minFreeBytes: 16 * 1024 * 1024,
  });
  const { url } = await server.listen(0, '127.0.0.1');
  return { url, server };
}

beforeAll(async () => {
  Object.assign(process.env, S3_TEST_ENV);
  [pg, s3] = await Promise.all([startPostgres(), startS3()]);
  database = await createDatabase(pg.adminUrl);
  storage = await createBucket(s3.endpoint);
  // Started together on a new database: one of them creates the schema and the administrator.
  [a, b] = await Promise.all([start(database, storage), start(database, storage)]);
  admin = await login(a.url, ADMIN.username, ADMIN.password);
});

afterAll(async () => {
  await Promise.all([a?.server.close(), b?.server.close()]);
  await s3?.stop();
  await pg?.stop();
});

/**
 * A proxy in front of s3rver that holds the requests `hold` picks (by default every ranged GET:
 * a download's read of content) while `holding`, until `release()`; `held` resolves when the
 * first one arrives.
 */
async function holdingS3Proxy(
  hold: (req: IncomingMessage) => boolean = (req) => req.method === 'GET' && !!req.headers.range,
) {
  let holding = true;
  let arrived: () => void = () => undefined;
  const held = new Promise<void>((resolve) => (arrived = resolve));
  const waiting: (() => void)[] = [];
  const target = new URL(s3.endpoint);
  const server: Server = createHttpServer((req, res) => {
    const forward = () => {
      const out = httpRequest(
        {
          host: target.hostname,
          port: target.port,
          method: req.method,
          path: req.url,
          headers: req.headers,
        },
        (answer) => {
          res.writeHead(answer.statusCode!, answer.headers);
          answer.pipe(res);
        },
      );
      out.on('error', () => res.destroy());
      req.pipe(out);
    };
    if (holding && hold(req)) {
      waiting.push(forward);
      arrived();
    } else forward();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    endpoint: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    held,
    release() {
      holding = false;
      for (const forward of waiting.splice(0)) forward();
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** Replaces a share's content with one chunk. */
const replaceContent = (url: string, id: string, data: Buffer) =>
  sendChunk(url, admin, id, { dzuuid: randomUUID(), index: 0, total: 1, data }, 'PUT');

describe('content a share let go of, with downloads begun on another server', () => {
  // Found: a server deleted replaced content from S3 at once. A download another server had
  // begun (record read, content opened with HeadObject, GET not yet sent) then had its GET
  // answered NoSuchKey and was cut after its headers. On files an open file stays readable once
  // unlinked; on S3 the old object is now kept for removedContentKeepMs.
  it('a download begun before a replace on the other server gets the old bytes, whole', async () => {
    const proxy = await holdingS3Proxy();
    const c = await start(database, storage, { s3Endpoint: proxy.endpoint });
    try {
      const OLD = randomBytes(3 * 1024 * 1024 + 7);
      const NEW = randomBytes(2 * 1024 * 1024 + 9);
      const id = await createShareWithContent(a.url, admin, 'kept.bin', OLD);
      const download = get(c.url, `/files/${id}/content`, { token: admin });
      download.catch(() => undefined);
      await proxy.held; // c has opened the old content and asked for its bytes
      expectStatus(await replaceContent(a.url, id, NEW), 201);
      proxy.release();
      const res = await download;
      expectStatus(res, 200);
      expect(res.buf.length).toBe(OLD.length);
      expect(sha256hex(res.buf)).toBe(sha256hex(OLD));
      expect(res.headers.etag).toBe(`"${sha256hex(OLD)}"`);
      // Every server serves the new bytes from then on.
      for (const server of [a.url, b.url, c.url])
        expect(sha256hex((await get(server, `/files/${id}/content`, { token: admin })).buf)).toBe(
          sha256hex(NEW),
        );
    } finally {
      await c.server.close();
      await proxy.close();
    }
  });

  // The wait has an end: content no share names is removed once removedContentKeepMs is over,
  // and by a server that stops before then (nothing else would until a start an hour later).
  it('replaced and deleted content is removed after the wait, or when the server stops', async () => {
    const bucket = storage.slice('s3://'.length);
    const keys = async (id: string) => {
      const { S3Client, ListObjectsV2Command } = await import('@aws-sdk/client-s3');
      const client = new S3Client({ endpoint: s3.endpoint, forcePathStyle: true });
      try {
        const page = await client.send(
          new ListObjectsV2Command({ Bucket: bucket, Prefix: `content/${id}.` }),
        );
        return (page.Contents ?? []).map((o) => o.Key!);
      } finally {
        client.destroy();
      }
    };
    const quick = await start(database, storage, { limits: { removedContentKeepMs: 300 } });
    const slow = await start(database, storage, { limits: { removedContentKeepMs: 3_600_000 } });
    let slowClosed = false;
    try {
      const replaced = await createShareWithContent(quick.url, admin, 'r.bin', randomBytes(100));
      const deleted = await createShareWithContent(quick.url, admin, 'd.bin', randomBytes(100));
      const before = await keys(replaced);
      const newBytes = randomBytes(50);
      expectStatus(await replaceContent(quick.url, replaced, newBytes), 201);
      expectStatus(await del(quick.url, `/files/${deleted}`, { token: admin }), 200);
      // Still there just after: a download begun elsewhere may yet read them.
      expect(await keys(replaced)).toHaveLength(2);
      expect(await keys(deleted)).toHaveLength(1);
      const deadline = Date.now() + 20_000;
      while ((await keys(deleted)).length > 0 || (await keys(replaced)).length > 1) {
        if (Date.now() > deadline) throw new Error('content let go of was never removed');
        await new Promise((r) => setTimeout(r, 100));
      }
      expect(await keys(replaced)).not.toContain(before[0]);
      const served = await get(quick.url, `/files/${replaced}/content`, { token: admin });
      expect(served.buf.equals(newBytes)).toBe(true);

      // An hour's wait, but the server stops: it removes what it let go of before it exits.
      const gone = await createShareWithContent(slow.url, admin, 'g.bin', randomBytes(100));
      expectStatus(await del(slow.url, `/files/${gone}`, { token: admin }), 200);
      await new Promise((r) => setTimeout(r, 500));
      expect(await keys(gone)).toHaveLength(1);
      await slow.server.close();
      slowClosed = true;
      expect(await keys(gone)).toEqual([]);
    } finally {
      await quick.server.close();
      if (!slowClosed) await slow.server.close();
    }
  });
});

describe('a caller that changed while another server joined their upload', () => {
  // Found from outside: the last chunk of a 60 MiB upload reached server B, which took seconds
  // to join the staged chunks; the user was deleted through server A meanwhile (200), and B
  // still published the content (201) to the deleted user's share. The caller's check before a
  // chunk is committed came before the join; it is now made again where the content is
  // published, under the share's lock: 401, and the share is unchanged.
  it('deleted while the last chunk is joined on the other server: 401, nothing published', async () => {
    let armed = false;
    // Holds the join's reads of the staged chunks (and of the upload's record).
    const proxy = await holdingS3Proxy(
      (req) =>
        armed && req.method === 'GET' && (req.url ?? '').split('?')[0]!.includes('/uploads/'),
    );
    const c = await start(database, storage, { s3Endpoint: proxy.endpoint });
    try {
      const user = await createUser(a.url, admin, ['CREATE', 'READ']);
      const id = await createShare(a.url, user.token, 'joined-late.bin');
      const dzuuid = randomUUID();
      const first = randomBytes(1024 * 1024);
      expectStatus(
        await sendChunk(a.url, user.token, id, { dzuuid, index: 0, total: 2, data: first }),
        200,
      );
      armed = true;
      const last = sendChunk(c.url, user.token, id, {
        dzuuid,
        index: 1,
        total: 2,
        data: randomBytes(10),
      });
      last.catch(() => undefined);
      await proxy.held; // c has checked the caller and is joining the upload
      expectStatus(await del(a.url, `/users/${user.username}`, { token: admin }), 200);
      proxy.release();
      expectFail(await last, 401);
      const share = await get(b.url, `/files/${id}`, { token: admin });
      expect(share.body).toMatchObject({ initialized: false, size: null });
    } finally {
      await c.server.close();
      await proxy.close();
    }
  });
});

describe('two servers on one database and bucket', () => {
  it('start together on a new database with one administrator and one signing secret', async () => {
    const users = await get(b.url, '/users', { token: admin });
    expectStatus(users, 200);
    expect((users.body.data as { username: string }[]).map((u) => u.username)).toEqual([
      ADMIN.username,
    ]);
    // A token signed by one is accepted by the other: the secret is the database's.
    expectStatus(await get(b.url, '/whoami', { token: admin }), 200);
  });

  it('chunks of one upload sent alternately to both complete into whole content', async () => {
    const data = randomBytes(6 * 1024 * 1024 + 333);
    const id = await createShare(a.url, admin, 'alternate.bin');
    const dzuuid = randomUUID();
    const chunks = split(data, 7);
    for (const [index, chunk] of chunks.entries()) {
      const server = index % 2 === 0 ? a.url : b.url;
      const res = await sendChunk(server, admin, id, { dzuuid, index, total: 7, data: chunk });
      expectStatus(res, index === 6 ? 201 : 200);
    }
    for (const server of [a.url, b.url]) {
      const res = await get(server, `/files/${id}/content`, { token: admin });
      expectStatus(res, 200);
      expect(sha256hex(res.buf)).toBe(sha256hex(data));
      expect(res.headers.etag).toBe(`"${sha256hex(data)}"`);
    }
  });

  it('the last two chunks arriving at both at once: content whole, the upload completed once', async () => {
    const data = randomBytes(1024 * 1024 + 5);
    const id = await createShare(a.url, admin, 'race.bin');
    const dzuuid = randomUUID();
    const chunks = split(data, 4);
    for (const index of [0, 1])
      expectStatus(
        await sendChunk(a.url, admin, id, { dzuuid, index, total: 4, data: chunks[index]! }),
        200,
      );
    const [x, y] = await Promise.all([
      sendChunk(a.url, admin, id, { dzuuid, index: 2, total: 4, data: chunks[2]! }),
      sendChunk(b.url, admin, id, { dzuuid, index: 3, total: 4, data: chunks[3]! }),
    ]);
    expect([x.status, y.status].sort()).toEqual([200, 201]);
    const res = await get(b.url, `/files/${id}/content`, { token: admin });
    expect(sha256hex(res.buf)).toBe(sha256hex(data));
    // A late chunk of the finished upload is refused by either server (the share has content).
    for (const server of [a.url, b.url])
      expectFail(
        await sendChunk(server, admin, id, { dzuuid, index: 1, total: 4, data: chunks[1]! }),
        423,
      );
    expect(sha256hex((await get(a.url, `/files/${id}/content`, { token: admin })).buf)).toBe(
      sha256hex(data),
    );
  });

  it('a lock taken on one is honoured by the other at once', async () => {
    const id = await createShareWithContent(a.url, admin, 'locked.txt', Buffer.from('v1'));
    expectStatus(await post(a.url, `/files/${id}/lock`, { token: admin }), 200);
    const replace = await sendChunk(
      b.url,
      admin,
      id,
      { dzuuid: randomUUID(), index: 0, total: 1, data: Buffer.from('v2') },
      'PUT',
    );
    expectFail(replace, 423);
    expectFail(await del(b.url, `/files/${id}`, { token: admin }), 423);
    const res = await get(b.url, `/files/${id}/content`, { token: admin });
    expect(res.buf.toString()).toBe('v1');
  });

  it('a token revoked on one fails on the other at once; so does a changed password and a deleted user', async () => {
    const user = await createUser(a.url, admin, ['READ', 'LIST']);
    expectStatus(await get(b.url, '/whoami', { token: user.token }), 200);
    expectStatus(
      await post(a.url, '/users/logout', { token: user.token, json: { token: user.token } }),
      200,
    );
    expectFail(await get(b.url, '/whoami', { token: user.token }), 401);

    const second = await login(b.url, user.username, user.password);
    const other = await login(a.url, user.username, user.password);
    expectStatus(
      await post(b.url, '/users/password', {
        token: second,
        json: { old: user.password, new: 'a-new-password-456' },
      }),
      200,
    );
    expectFail(await get(a.url, '/whoami', { token: other }), 401);
    // The token that changed the password goes on working, on both servers.
    expectStatus(await get(a.url, '/whoami', { token: second }), 200);

    const third = await login(a.url, user.username, 'a-new-password-456');
    expectStatus(await del(b.url, `/users/${user.username}`, { token: admin }), 200);
    expectFail(await get(a.url, '/whoami', { token: third }), 401);
  });

  it('a link allowing 5 downloads gives exactly 5 when 20 are asked of both servers at once', async () => {
    const id = await createShareWithContent(a.url, admin, 'five.bin', randomBytes(4096));
    const made = await post(a.url, `/files/${id}/links`, {
      token: admin,
      json: { max_downloads: 5 },
    });
    expectStatus(made, 201);
    const path = new URL(made.body.url as string).pathname;
    const results = await Promise.all(
      Array.from({ length: 20 }, (_, i) => get(i % 2 ? a.url : b.url, `${path}?download`)),
    );
    const statuses = results.map((r) => r.status);
    expect(statuses.filter((s) => s === 200)).toHaveLength(5);
    expect(statuses.filter((s) => s === 410)).toHaveLength(15);
    const link = await get(b.url, `/links/${made.body.id as string}`, { token: admin });
    expect(link.body).toMatchObject({ downloads: 5, max_downloads: 5 });
  });

  it('failed sign-ins are counted together: the limit is reached across both servers', async () => {
    const user = await createUser(a.url, admin, ['READ']);
    for (let i = 0; i < 10; i++) {
      const server = i % 2 ? a.url : b.url;
      expectFail(
        await post(server, '/users/login', {
          json: { username: user.username, password: `wrong-${i}` },
        }),
        401,
      );
    }
    for (const server of [a.url, b.url])
      expectFail(
        await post(server, '/users/login', {
          json: { username: user.username, password: user.password },
        }),
        429,
      );
  });
});
