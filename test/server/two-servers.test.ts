import { randomBytes, randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createServer, type FshareServer } from '../../src/server/index.js';
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

async function start(database: string, storage: string) {
  const server = await createServer({
    dataDir: await tempDir('two'),
    database,
    storage,
    s3Endpoint: s3.endpoint,
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
  const database = await createDatabase(pg.adminUrl);
  const storage = await createBucket(s3.endpoint);
  // Started together on a new database: one of them creates the schema and the administrator.
  [a, b] = await Promise.all([start(database, storage), start(database, storage)]);
  admin = await login(a.url, ADMIN.username, ADMIN.password);
});

afterAll(async () => {
  await Promise.all([a?.server.close(), b?.server.close()]);
  await s3?.stop();
  await pg?.stop();
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
    expectStatus(
      await post(b.url, '/users/password', {
        token: second,
        json: { old: user.password, new: 'a-new-password-456' },
      }),
      200,
    );
    expectFail(await get(a.url, '/whoami', { token: second }), 401);

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
