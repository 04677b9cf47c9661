import { randomBytes, randomUUID } from 'node:crypto';
import { rename } from 'node:fs/promises';
import net from 'node:net';
import { Client } from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createShareWithContent,
  createShare,
  expectStatus,
  get,
  request,
  sendChunk,
  sha256hex,
} from '../helpers/http.js';
import { createDatabase, startPostgres, type PgCluster } from '../helpers/postgres.js';
import { contentKeys, createBucket, S3_TEST_ENV, startS3, type S3Server } from '../helpers/s3.js';
import { tempDir } from '../helpers/cli.js';
import { ensureBuilt, serve } from '../helpers/serve.js';
import { ADMIN, login, startServer, type TestServer } from '../helpers/server.js';
import { holdAt } from '../../src/server/faults.js';

/**
 * An object store or a database that stops answering is the server's problem, not the client's:
 * every request that needs it gets 503 JSON with Retry-After (never a 500, never a hang), what
 * does not need it still works, the server says what failed in one line, and stays up.
 */
let pg: PgCluster;
let s3: S3Server;
let srv: TestServer;
let token: string;
let stored: string;
const notices: string[] = [];
const seconds: TestServer[] = [];

beforeAll(async () => {
  Object.assign(process.env, S3_TEST_ENV);
  [pg, s3] = await Promise.all([startPostgres(), startS3()]);
  srv = await startServer({
    database: await createDatabase(pg.adminUrl),
    storage: await createBucket(s3.endpoint),
    s3Endpoint: s3.endpoint,
    s3ForcePathStyle: true,
    notice: (line) => notices.push(line),
  });
  token = await login(srv.url, ADMIN.username, ADMIN.password);
  stored = await createShareWithContent(srv.url, token, 'kept.bin', randomBytes(5000));
});

afterAll(async () => {
  for (const second of seconds) await second.close();
  await srv?.close();
  await s3?.stop();
  await pg?.stop();
});

/**
 * A TCP relay to `target` (host:port) that can hold what clients send (`holding`) or refuse and
 * cut every connection (`cut`), to fail a backend under a running server for a moment.
 */
async function startRelay(target: { host: string; port: number }) {
  const clients = new Set<net.Socket>();
  const state = { holding: false, refusing: false };
  const relay = net.createServer((client) => {
    if (state.refusing) {
      client.destroy();
      return;
    }
    const upstream = net.connect(target.port, target.host);
    clients.add(client);
    for (const s of [client, upstream]) {
      s.on('error', () => undefined);
      s.on('close', () => {
        clients.delete(client);
        client.destroy();
        upstream.destroy();
      });
    }
    // What the client sends while `holding` never reaches the backend.
    client.on('data', (bytes) => {
      if (!state.holding) upstream.write(bytes);
    });
    upstream.on('data', (bytes) => client.write(bytes));
  });
  await new Promise<void>((resolve) => relay.listen(0, '127.0.0.1', resolve));
  return {
    port: (relay.address() as net.AddressInfo).port,
    state,
    cut: () => {
      for (const c of clients) c.destroy();
    },
    close: () => {
      relay.close();
      for (const c of clients) c.destroy();
    },
  };
}

function expectUnavailable(res: {
  status: number;
  headers: Record<string, unknown>;
  body: unknown;
}) {
  expect(res.status, JSON.stringify(res.body)).toBe(503);
  expect(res.headers['retry-after']).toBeDefined();
  expect(res.body).toMatchObject({ status: 'fail' });
}

describe('a backend that stops answering', () => {
  it('a start that fails once the database is open (no such bucket) exits 1 in one line, no hang', async () => {
    await ensureBuilt();
    const failed = (await serve(await tempDir('nobucket'), S3_TEST_ENV, [
      '--database',
      await createDatabase(pg.adminUrl),
      '--storage',
      's3://no-such-bucket-here',
      '--s3-endpoint',
      s3.endpoint,
      '--s3-force-path-style',
    ]).catch((e: unknown) => e)) as { code?: number; stderr?: string };
    expect(failed.code).toBe(1);
    const lines = failed.stderr!.trim().split('\n');
    expect(lines.at(-1)).toMatch(/^fshare: The S3 bucket "no-such-bucket-here" does not exist/);
    expect(lines.filter((l) => /^\s+at /.test(l))).toEqual([]); // no stack trace
  });

  // Content a share let go of is removed some minutes later (DEPLOY.md). Found from outside: an
  // object store not answering at that moment left the bytes in the bucket until a start an
  // hour on. The removal is tried again while the server runs.
  it("a deleted share's bytes are removed once the object store answers again", async () => {
    const endpoint = new URL(s3.endpoint);
    const relay = await startRelay({ host: endpoint.hostname, port: Number(endpoint.port) });
    const storage = await createBucket(s3.endpoint);
    const notes: string[] = [];
    const relayed = await startServer({
      database: await createDatabase(pg.adminUrl),
      storage,
      s3Endpoint: `http://127.0.0.1:${relay.port}`,
      s3ForcePathStyle: true,
      limits: { removedContentKeepMs: 300 },
      notice: (line) => notes.push(line),
    });
    seconds.push(relayed);
    try {
      const own = await login(relayed.url, ADMIN.username, ADMIN.password);
      const id = await createShareWithContent(relayed.url, own, 'gone.bin', randomBytes(2000));
      expect(await contentKeys(s3.endpoint, storage)).toHaveLength(1);
      relay.state.refusing = true;
      relay.cut();
      expectStatus(await request(relayed.url, 'DELETE', `/files/${id}`, { token: own }), 200);
      await expect
        .poll(() => notes.join('\n'), { timeout: 20_000 })
        .toMatch(/could not remove content no share names: .*; tried again in 0\.3 s/);
      relay.state.refusing = false;
      await expect.poll(() => contentKeys(s3.endpoint, storage), { timeout: 20_000 }).toEqual([]);
    } finally {
      relay.close();
    }
  });

  it('object store gone: content requests are 503 with Retry-After; metadata still answers', async () => {
    const doomed = await createShareWithContent(srv.url, token, 'doomed.bin', randomBytes(3000));
    // The object store stops as an upload's content is published, before the upload is ended:
    // the answer is the 201 of what was published. Found from outside: it was 503 "try again"
    // for content the share already had, and the retry got 423.
    const late = await createShare(srv.url, token, 'late.bin');
    const bytes = randomBytes(4000);
    const unhold = holdAt('s3.before-tombstone-put', () => s3.stop());
    try {
      const done = await sendChunk(srv.url, token, late, {
        dzuuid: randomUUID(),
        index: 0,
        total: 1,
        data: bytes,
      });
      expectStatus(done, 201);
    } finally {
      unhold();
    }
    expect((await get(srv.url, `/files/${late}`, { token })).body).toMatchObject({
      initialized: true,
      size: 4000,
      sha256: sha256hex(bytes),
    });
    expect(notices.join('\n')).toMatch(/was published, but ending it failed/);
    await s3.stop();
    // A DELETE is done once its record is: the bytes left are removed later. Found from
    // outside: it answered 503 "try again" for a share it had deleted (a second DELETE: 404).
    const gone = await request(srv.url, 'DELETE', `/files/${doomed}`, { token });
    expectStatus(gone, 200);
    expect((await get(srv.url, `/files/${doomed}`, { token })).status).toBe(404);
    expect(notices.join('\n')).toMatch(
      new RegExp(
        `share ${doomed} was deleted, but removing its stored bytes failed .*; what is left is removed later`,
      ),
    );
    expectUnavailable(await get(srv.url, `/files/${stored}/content`, { token }));
    const id = await createShare(srv.url, token, 'later.bin');
    expectUnavailable(
      await sendChunk(srv.url, token, id, {
        dzuuid: randomUUID(),
        index: 0,
        total: 2,
        data: randomBytes(1000),
      }),
    );
    // Nothing changed: the share is still empty; the stored one is still listed as it was.
    expect((await get(srv.url, `/files/${id}`, { token })).body).toMatchObject({
      initialized: false,
    });
    expect((await get(srv.url, `/files/${stored}`, { token })).body).toMatchObject({
      initialized: true,
      size: 5000,
    });
    expect(notices.join('\n')).toMatch(/unavailable: S3 .* failed/);
  });

  // node-postgres's error for a connection that closed under a query has no code: found from
  // outside (PostgreSQL stopped at once while requests ran), some of those requests got 500.
  // Here a TCP relay in front of the database holds what the server sends, then cuts every
  // connection with the server's query on its way.
  it('a database connection lost under a query is a 503, not a 500', async () => {
    const database = new URL(await createDatabase(pg.adminUrl));
    const relay = await startRelay({ host: database.hostname, port: Number(database.port) });
    database.port = String(relay.port);
    const relayed = await startServer({ database: database.toString(), notice: () => undefined });
    seconds.push(relayed);
    try {
      const own = await login(relayed.url, ADMIN.username, ADMIN.password);
      relay.state.holding = true;
      const answer = get(relayed.url, '/files', { token: own });
      await new Promise((resolve) => setTimeout(resolve, 300));
      relay.cut();
      expectUnavailable(await answer);
      relay.state.holding = false;
      expectStatus(await get(relayed.url, '/files', { token: own }), 200);
    } finally {
      relay.close();
    }
  });

  it('database gone: requests are 503 with Retry-After, and the server keeps running', async () => {
    // A server that has just started walks the shares for content without a sha256. Found from
    // outside: a database that went away under that walk (pg_ctl restart) ended the server,
    // with a stack trace; and once that was mended, the walk went on through its page, a line
    // (and a read of the content) for every share. Here a second server, on a database whose
    // shares lack their sha256, is held at the walk's first share while the database stops.
    const database = await createDatabase(pg.adminUrl);
    const first = await startServer({ database, notice: () => undefined });
    const own = await login(first.url, ADMIN.username, ADMIN.password);
    for (const name of ['a.bin', 'b.bin', 'c.bin'])
      await createShareWithContent(first.url, own, name, randomBytes(1000));
    await first.close(false);
    const sql = new Client({ connectionString: database });
    await sql.connect();
    await sql.query('UPDATE fshare_shares SET sha256 = NULL');
    await sql.end();
    const notes: string[] = [];
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    let reached!: () => void;
    const atWalk = new Promise<void>((resolve) => (reached = resolve));
    const unhold = holdAt('digest.share', async () => {
      reached();
      await released;
    });
    let second: TestServer;
    try {
      // Its content in a data directory: the object store is gone already (above).
      second = await startServer({
        dataDir: first.dataDir,
        database,
        notice: (line) => notes.push(line),
      });
      seconds.push(second);
      await atWalk;
    } finally {
      unhold();
    }
    await pg.stop();
    release();
    await expect
      .poll(() => notes.join('\n'), { timeout: 10_000 })
      .toMatch(
        /sha256 of older content: the walk over the shares stopped \(.*\); it starts again in 60 s/,
      );
    expect(notes.filter((l) => l.startsWith('sha256 of share'))).toEqual([]);
    expectUnavailable(await get(second.url, '/whoami'));
    expectUnavailable(await get(srv.url, '/whoami'));
    expectUnavailable(await get(srv.url, `/files/${stored}`, { token }));
    expect(notices.join('\n')).toMatch(/unavailable: /);
    // Still up and serving what needs no database (a CORS preflight), and still 503, not a
    // crash, a moment later.
    expectStatus(await request(srv.url, 'OPTIONS', '/files'), 204);
    expectUnavailable(await get(srv.url, '/whoami'));
  });
});

describe('the data directory failing under a running server', () => {
  // Property: a disk the server cannot use (its data directory moved away, as an operator's
  // mistake or a lost mount does) answers 503 JSON with Retry-After and one log line, never a 500
  // with a stack; nothing is acknowledged that was not stored, and once the directory is back
  // the same requests work, with the content stored before byte for byte.
  it('uploads and downloads are 503 while it is gone, and work again once it is back', async () => {
    const dataDir = await tempDir('gone');
    const lines: string[] = [];
    const local = await startServer({ dataDir, notice: (line) => lines.push(line) });
    try {
      const t = await login(local.url, ADMIN.username, ADMIN.password);
      const before = randomBytes(70_000);
      const kept = await createShareWithContent(local.url, t, 'before.bin', before);
      const id = await createShare(local.url, t, 'during.bin');
      const data = randomBytes(50_000);
      const chunk = { dzuuid: randomUUID(), index: 0, total: 1, data };

      await rename(dataDir, `${dataDir}.away`);
      try {
        expectUnavailable(await sendChunk(local.url, t, id, chunk));
        expectUnavailable(await get(local.url, `/files/${kept}/content`, { token: t }));
      } finally {
        await rename(`${dataDir}.away`, dataDir);
      }
      expect(lines.filter((l) => /^error:/.test(l))).toEqual([]);
      expect(lines.some((l) => /^unavailable: .*ENOENT/.test(l))).toBe(true);

      expectStatus(await sendChunk(local.url, t, id, chunk), 201);
      const back = await get(local.url, `/files/${id}/content`, { token: t });
      expect(back.buf.equals(data)).toBe(true);
      const old = await get(local.url, `/files/${kept}/content`, { token: t });
      expect(old.buf.equals(before)).toBe(true);
    } finally {
      await local.close(true);
    }
  });
});
