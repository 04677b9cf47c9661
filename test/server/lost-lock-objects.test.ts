// S3 objects written by a server whose share lock was lost. Records are fenced (a task's queries
// run on its lock's connection, 8d79f2f), but objects are written without the database, so a
// task that went on after its lock's backend ended (another server holding the lock by then)
// still wrote to the bucket. Found broken, with two fshare serve on one PostgreSQL and s3rver:
// a completion held after writing its publishing record lost its lock; the last chunk sent again
// through the other server published that record's content (201), then the first server's
// publish failed and removed the content: the share named a sha256 and size whose bytes were
// gone (GET of the content: 503 for good). And a chunk held before it was staged lost its lock;
// another copy of that index went through the other server (200), then the held copy was staged
// over it (answered 200 too) and the upload completed with the replaced bytes. And a sweep that
// had found an upload idle lost its lock; the client resumed the upload through another server
// (a chunk acknowledged), then the sweep ended the upload: that chunk was removed and the next
// one got 409. And a chunk whose PUT was under way when its lock was lost landed after another
// server's copy of that index (200), replacing it: answered 200 too, and the upload completed with
// its bytes. And a sweep's tombstone whose PUT was under way when its lock was lost landed after
// the client resumed the upload through another server (a chunk acknowledged): the upload counted
// as finished, its next chunk got 409. Only PostgreSQL has locks that can be lost.
import { randomBytes, randomUUID } from 'node:crypto';
import { Client } from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { holdAt } from '../../src/server/faults.js';
import type { FshareServer } from '../../src/server/index.js';
import {
  content,
  createShare,
  expectFail,
  expectStatus,
  getShare,
  request,
  sendChunk,
  sendParts,
  sha256hex,
  type Res,
} from '../helpers/http.js';
import {
  ADMIN,
  login,
  loseLockAt,
  startServer,
  startSibling,
  type TestServer,
} from '../helpers/server.js';

describe('S3 objects of a task whose share lock was lost', () => {
  let own: TestServer;
  let other: FshareServer;
  let otherUrl: string;
  let t: string;
  let db: Client;
  /** A third server, started by a test. */
  let third: Promise<FshareServer> | undefined;
  beforeAll(async () => {
    own = await startServer();
    // Another server on the same database and bucket (`own.direct` is the first of its own).
    ({ server: other, url: otherUrl } = await startSibling(own, 'lost-lock-objects'));
    t = await login(own.direct, ADMIN.username, ADMIN.password);
    db = new Client({ connectionString: own.database });
    await db.connect();
  });
  afterAll(async () => {
    await db?.end();
    await (await third?.catch(() => undefined))?.close();
    await other?.close();
    await own?.close();
  });

  /**
   * Sends `chunk` (to the first server) and holds it at `point`; there terminates the connection
   * holding its locks, runs `meanwhile`, and lets it go on. Returns its answer.
   */
  const loseLock = (point: string, chunk: () => Promise<Res>, meanwhile: () => Promise<void>) =>
    loseLockAt(db, point, chunk, meanwhile);

  /** Chunk `index` of the upload `dzuuid` of `data`, in `total` chunks of 3000 bytes. */
  const pieces = (dzuuid: string, data: Buffer, total: number) => (index: number) => ({
    dzuuid,
    index,
    total,
    data: data.subarray(index * 3000, (index + 1) * 3000),
  });

  it('content a share names is never removed by a server whose lock was lost: another server published it from that server’s publishing record', async () => {
    const id = await createShare(own.direct, t, 'published.bin');
    const data = randomBytes(5000);
    const dzuuid = randomUUID();
    const chunk = pieces(dzuuid, data, 2);
    expectStatus(await sendChunk(own.direct, t, id, chunk(0)), 200);
    const res = await loseLock(
      's3.before-publish',
      () => sendChunk(own.direct, t, id, chunk(1)),
      // The last chunk sent again, through the other server: it publishes the held content.
      async () => expectStatus(await sendChunk(otherUrl, t, id, chunk(1)), 201),
    );
    expectFail(res, 503);
    expect(await getShare(otherUrl, t, id)).toMatchObject({ size: 5000, sha256: sha256hex(data) });
    expect((await content(otherUrl, t, id)).equals(data)).toBe(true);
    expect((await content(own.direct, t, id)).equals(data)).toBe(true);
  });

  it('a chunk acknowledged through another server is never replaced by a copy whose lock was lost', async () => {
    const id = await createShare(own.direct, t, 'staged.bin');
    const dzuuid = randomUUID();
    const [first, late, acknowledged, last] = [3000, 3000, 3000, 1000].map((n) => randomBytes(n));
    const chunk = (index: number, data: Buffer) => ({ dzuuid, index, total: 3, data });
    expectStatus(await sendChunk(otherUrl, t, id, chunk(0, first!)), 200);
    const res = await loseLock(
      's3.before-stage',
      () => sendChunk(own.direct, t, id, chunk(1, late!)),
      // Another copy of index 1 (the client gave up on the first), through the other server.
      async () => expectStatus(await sendChunk(otherUrl, t, id, chunk(1, acknowledged!)), 200),
    );
    expectStatus(await sendChunk(otherUrl, t, id, chunk(2, last!)), 201);
    const whole = Buffer.concat([first!, acknowledged!, last!]);
    expect(await getShare(otherUrl, t, id)).toMatchObject({ size: 7000, sha256: sha256hex(whole) });
    expect((await content(otherUrl, t, id)).equals(whole)).toBe(true);
    // The copy that lost its lock was not stored, and says so.
    expectFail(res, 503);
  });

  it('an upload resumed through another server is not ended by a sweep whose lock was lost', async () => {
    const id = await createShare(own.direct, t, 'swept.bin');
    const dzuuid = randomUUID();
    const data = randomBytes(7000);
    const chunk = pieces(dzuuid, data, 3);
    expectStatus(await sendChunk(own.direct, t, id, chunk(0)), 200);
    // A server that takes every unfinished upload for idle: its start-up sweep ends this one.
    // Only the sweep holds an advisory lock in this database (the upload's) when it is held.
    await loseLockAt(
      db,
      's3.before-end',
      () =>
        (third = startSibling(own, 'sweeper', own.database, { uploadIdleMs: 0 }).then(
          (s) => s.server,
        )),
      // The client resumes the upload: its chunk is acknowledged.
      async () => expectStatus(await sendChunk(own.direct, t, id, chunk(1)), 200),
    );
    await third;
    expectStatus(await sendChunk(own.direct, t, id, chunk(2)), 201);
    expect((await content(own.direct, t, id)).equals(data)).toBe(true);
  });

  // A sweep's tombstone whose PUT was under way when its lock was lost, landing after another
  // server stored a chunk of the upload (found broken: the upload counted as finished, the next
  // chunk got 409, and the acknowledged one was lost with it). Each tombstone now has the token
  // of its lock, and one that a copy staged by a later lock holder outranks ends nothing.
  it('an upload resumed through another server is not ended by a tombstone whose PUT lands after its lock was lost', async () => {
    const id = await createShare(own.direct, t, 'tombstone.bin');
    const dzuuid = randomUUID();
    const data = randomBytes(7000);
    const chunk = pieces(dzuuid, data, 3);
    // The sweeper of the test before, if any, sweeps no more.
    await (await third)?.close();
    expectStatus(await sendChunk(own.direct, t, id, chunk(0)), 200);
    let status: Res | undefined;
    let completed: Res | undefined;
    // A sweeper's start-up sweep found the upload idle and checked its lock; its tombstone's
    // PUT is held until the lock is lost and the client resumed through another server.
    await loseLockAt(
      db,
      's3.before-tombstone-put',
      () =>
        (third = startSibling(own, 'tombstone', own.database, { uploadIdleMs: 0 }).then(
          (s) => s.server,
        )),
      async () => {
        expectStatus(await sendChunk(otherUrl, t, id, chunk(1)), 200);
        // Once the tombstone has landed, before its server can learn that its lock is gone.
        holdAt('s3.after-tombstone-put', async () => {
          status = await request(otherUrl, 'GET', `/files/${id}/uploads/${dzuuid}`, { token: t });
          completed = await sendChunk(otherUrl, t, id, chunk(2));
        });
      },
    );
    await third;
    expect(status).toBeDefined();
    expectStatus(status!, 200);
    expect(status!.body).toMatchObject({ received: [0, 1] });
    expectStatus(completed!, 201);
    expect((await content(own.direct, t, id)).equals(data)).toBe(true);
    expect(await getShare(own.direct, t, id)).toMatchObject({
      size: 7000,
      sha256: sha256hex(data),
    });
    // The upload did finish, and says so.
    const uploads = `/files/${id}/uploads/${dzuuid}`;
    expectFail(await request(own.direct, 'GET', uploads, { token: t }), 410);
  });

  // The tombstone's lock is asked for again once it landed (and the tombstone removed if lost):
  // a completion whose content was published must still say so.
  it('a completion whose lock is lost after publishing, while its tombstone is written, answers 201 with the content in place', async () => {
    const id = await createShare(own.direct, t, 'closed.bin');
    const dzuuid = randomUUID();
    const data = randomBytes(5000);
    const chunk = pieces(dzuuid, data, 2);
    expectStatus(await sendChunk(own.direct, t, id, chunk(0)), 200);
    const res = await loseLock(
      's3.before-tombstone-put',
      () => sendChunk(own.direct, t, id, chunk(1)),
      async () => undefined,
    );
    expectStatus(res, 201);
    expect(await getShare(otherUrl, t, id)).toMatchObject({ size: 5000, sha256: sha256hex(data) });
    expect((await content(otherUrl, t, id)).equals(data)).toBe(true);
  });

  // A chunk whose PUT was under way when its lock was lost, landing after another server's copy
  // of the same index (found broken: it replaced that copy, answered 200 too, and the upload
  // completed with its bytes). Each copy now has a key of its own, and the highest token wins.
  it('a copy whose PUT lands after its lock was lost, and after another server acknowledged a copy of that index, is never the one the upload completes with', async () => {
    const id = await createShare(own.direct, t, 'in-flight.bin');
    const dzuuid = randomUUID();
    const [first, late, acknowledged, last] = [3000, 3000, 3000, 1000].map((n) => randomBytes(n));
    const chunk = (index: number, data: Buffer) => ({ dzuuid, index, total: 3, data });
    const whole = Buffer.concat([first!, acknowledged!, last!]);
    expectStatus(await sendChunk(otherUrl, t, id, chunk(0, first!)), 200);
    let completed: Promise<Res> | undefined;
    const res = await loseLock(
      's3.before-put',
      () => sendChunk(own.direct, t, id, chunk(1, late!)),
      async () => {
        expectStatus(await sendChunk(otherUrl, t, id, chunk(1, acknowledged!)), 200);
        // Once the held copy has landed (after the acknowledged one), before its server can
        // learn that its lock is gone: the upload completes through the other server.
        holdAt('s3.after-put', async () => {
          completed = sendChunk(otherUrl, t, id, chunk(2, last!));
          await completed;
        });
      },
    );
    expect(completed).toBeDefined();
    expectStatus(await completed!, 201);
    expect((await content(otherUrl, t, id)).equals(whole)).toBe(true);
    expect(await getShare(otherUrl, t, id)).toMatchObject({ size: 7000, sha256: sha256hex(whole) });
    // The copy that lost its lock says it was not stored.
    expectFail(res, 503);
  });

  it('a copy that landed before its lock was lost was not acknowledged, and changes nothing: the copy acknowledged before it stays', async () => {
    const id = await createShare(own.direct, t, 'unanswered.bin');
    const dzuuid = randomUUID();
    const [first, acknowledged, unanswered, last] = [3000, 3000, 3000, 1000].map((n) =>
      randomBytes(n),
    );
    const chunk = (index: number, data: Buffer) => ({ dzuuid, index, total: 3, data });
    expectStatus(await sendChunk(otherUrl, t, id, chunk(0, first!)), 200);
    expectStatus(await sendChunk(otherUrl, t, id, chunk(1, acknowledged!)), 200);
    // Index 1 sent again with other bytes: its copy lands, then its lock is lost.
    const res = await loseLock(
      's3.after-put',
      () => sendChunk(own.direct, t, id, chunk(1, unanswered!)),
      async () => undefined,
    );
    expectFail(res, 503);
    expectStatus(await sendChunk(otherUrl, t, id, chunk(2, last!)), 201);
    const whole = Buffer.concat([first!, acknowledged!, last!]);
    expect((await content(otherUrl, t, id)).equals(whole)).toBe(true);
  });

  it('the upload fields (dzsha256) of a copy whose lock was lost never replace those of the copy another server acknowledged', async () => {
    const id = await createShare(own.direct, t, 'fields.bin');
    const dzuuid = randomUUID();
    const data = randomBytes(5000);
    const right = sha256hex(data);
    const chunk = (url: string, index: number, sha: string) =>
      sendParts(url, t, id, [
        { name: 'dzuuid', value: dzuuid },
        { name: 'dzchunkindex', value: String(index) },
        { name: 'dztotalchunks', value: '2' },
        { name: 'dzsha256', value: sha },
        { name: 'upload', filename: 'blob', data: data.subarray(index * 3000, (index + 1) * 3000) },
      ]);
    let completed: Promise<Res> | undefined;
    // The first chunk, with a dzsha256 the client then corrected; its PUTs held until the lock
    // is lost and the corrected first chunk was acknowledged through the other server.
    const res = await loseLock(
      's3.before-put',
      () => chunk(own.direct, 0, sha256hex(Buffer.from('another file'))),
      async () => {
        expectStatus(await chunk(otherUrl, 0, right), 200);
        holdAt('s3.after-put', async () => {
          completed = chunk(otherUrl, 1, right);
          await completed;
        });
      },
    );
    expect(completed).toBeDefined();
    expectStatus(await completed!, 201);
    expect(await getShare(otherUrl, t, id)).toMatchObject({ size: 5000, sha256: right });
    expect((await content(otherUrl, t, id)).equals(data)).toBe(true);
    expectFail(res, 503);
  });
});
