// SIGKILL of `fshare serve` on PostgreSQL + S3 (a throwaway cluster and s3rver) at the points of
// a completion, through the FSHARE_FAULT hook of the real binary, then a restart on the same
// database and bucket. After every crash: the share serves its old bytes or its new bytes, whole,
// with the recorded sha256; the client's retry of the chunk it never saw acknowledged completes
// the upload (201); a later copy of it is refused; no content object is left that no share names.
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ListObjectsV2Command, S3Client } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  content,
  createShare,
  createShareWithContent,
  createUser,
  expectFail,
  expectStatus,
  get,
  getShare,
  patch,
  sendChunk,
  sha256hex,
  split,
  verifyAllContent,
} from '../helpers/http.js';
import { createDatabase, startPostgres, type PgCluster } from '../helpers/postgres.js';
import { createBucket, S3_TEST_ENV, startS3, type S3Server } from '../helpers/s3.js';
import { ensureBuilt, killAll, serve, stop, type Running } from '../helpers/serve.js';
import { ADMIN, login } from '../helpers/server.js';

let pg: PgCluster;
let s3: S3Server;
let root: string;
beforeAll(async () => {
  await ensureBuilt();
  [pg, s3] = await Promise.all([startPostgres(), startS3()]);
  root = await mkdtemp(join(tmpdir(), 'fshare-s3-crash-'));
});
afterAll(async () => {
  killAll();
  await s3?.stop();
  await pg?.stop();
  await rm(root, { recursive: true, force: true });
});

interface Backend {
  args: string[];
  bucket: string;
  token: string;
}

/** A new database and bucket with the administrator made, and a token (valid across restarts). */
async function fresh(): Promise<Backend> {
  const database = await createDatabase(pg.adminUrl);
  const storage = await createBucket(s3.endpoint);
  const args = [
    '--database',
    database,
    '--storage',
    storage,
    '--s3-endpoint',
    s3.endpoint,
    '--s3-force-path-style',
  ];
  const first = await start(args);
  const token = await login(first.url, ADMIN.username, ADMIN.password);
  await stop(first);
  return { args, bucket: storage.slice('s3://'.length), token };
}

const start = (args: string[], fault?: string) =>
  serve(join(root, randomUUID()), { ...S3_TEST_ENV, FSHARE_FAULT: fault }, args);

async function contentKeys(bucket: string): Promise<string[]> {
  const client = new S3Client({
    endpoint: s3.endpoint,
    forcePathStyle: true,
    ...S3_TEST_ENV_CONFIG,
  });
  try {
    const page = await client.send(
      new ListObjectsV2Command({ Bucket: bucket, Prefix: 'content/' }),
    );
    return (page.Contents ?? []).map((o) => o.Key!);
  } finally {
    client.destroy();
  }
}
const S3_TEST_ENV_CONFIG = {
  region: S3_TEST_ENV.AWS_REGION,
  credentials: {
    accessKeyId: S3_TEST_ENV.AWS_ACCESS_KEY_ID,
    secretAccessKey: S3_TEST_ENV.AWS_SECRET_ACCESS_KEY,
  },
};

/**
 * Every share serves whole content with its sha256, and every content object is a share's but
 * `orphans` (content a crash left unreferenced; a server start removes it once an hour old).
 * Counted once the server has stopped: content a share let go of is kept for downloads other
 * servers began (removedContentKeepMs), and removed when the server stops if not before.
 */
async function checkIntact(running: Running, b: Backend, orphans = 0) {
  const shares = await verifyAllContent(running.url, b.token);
  const withContent = [...shares.values()].filter((s) => s.initialized).length;
  expect(await stop(running)).toMatchObject({ code: 0 });
  expect(await contentKeys(b.bucket)).toHaveLength(withContent + orphans);
  return shares;
}

// 6 MiB in 3 chunks: the content is joined as an S3 multipart upload (two parts).
const NEW = randomBytes(6 * 1024 * 1024 + 5);
const chunks = split(NEW, 3);
const send = (
  url: string,
  token: string,
  id: string,
  dzuuid: string,
  index: number,
  method: 'POST' | 'PUT',
) => sendChunk(url, token, id, { dzuuid, index, total: 3, data: chunks[index]! }, method);

describe('SIGKILL during a completion on PostgreSQL + S3', () => {
  for (const point of ['s3.before-publish', 's3.after-publish']) {
    it(`killed at ${point} while replacing: old or new bytes, whole; the retry completes`, async () => {
      const b = await fresh();
      const seed = await start(b.args);
      const old = randomBytes(1000);
      const id = await createShareWithContent(seed.url, b.token, 'r.bin', old);
      await stop(seed);

      const dzuuid = randomUUID();
      const dying = await start(b.args, point);
      for (let i = 0; i < 3; i++)
        await send(dying.url, b.token, id, dzuuid, i, 'PUT').catch(() => undefined);
      expect(await dying.exited).toMatchObject({ signal: 'SIGKILL' });

      const running = await start(b.args);
      try {
        const served = await content(running.url, b.token, id);
        // Before publishing the old bytes are the share's; after, the new ones.
        expect(served.equals(point === 's3.before-publish' ? old : NEW)).toBe(true);
        // The client never saw its 201: it sends the last chunk again, and the upload completes.
        expectStatus(await send(running.url, b.token, id, dzuuid, 2, 'PUT'), 201);
        expect((await content(running.url, b.token, id)).equals(NEW)).toBe(true);
        expect((await getShare(running.url, b.token, id)).sha256).toBe(sha256hex(NEW));
        // The upload is over: another copy of its last chunk is refused and changes nothing.
        expectFail(await send(running.url, b.token, id, dzuuid, 2, 'PUT'), 409);
        // Killed after publishing, before the replaced content was removed: that one object is
        // left unreferenced (its name was only in the answer the crash cut).
        await checkIntact(running, b, point === 's3.after-publish' ? 1 : 0);
      } finally {
        await stop(running);
      }
    });
  }

  it('killed after publishing a new share’s first content: the content is whole; a retried POST is 423', async () => {
    const b = await fresh();
    const seed = await start(b.args);
    const id = await createShare(seed.url, b.token, 'created.bin');
    await stop(seed);
    const dzuuid = randomUUID();
    const dying = await start(b.args, 's3.after-publish');
    for (let i = 0; i < 3; i++)
      await send(dying.url, b.token, id, dzuuid, i, 'POST').catch(() => undefined);
    expect(await dying.exited).toMatchObject({ signal: 'SIGKILL' });
    const running = await start(b.args);
    try {
      expect((await content(running.url, b.token, id)).equals(NEW)).toBe(true);
      expect((await getShare(running.url, b.token, id)).sha256).toBe(sha256hex(NEW));
      // The share has content now: POST is refused before any storage is touched (API.md), and
      // the client finds its bytes there by sha256.
      expectFail(await send(running.url, b.token, id, dzuuid, 2, 'POST'), 423);
      await checkIntact(running, b);
    } finally {
      await stop(running);
    }
  });

  // Found from outside on two servers: server A was SIGKILLed after publishing an upload's
  // content and before closing the upload. Its staged chunks then counted as an unfinished
  // upload of the owner on server B (and on A once restarted) for 24 hours, until the idle
  // sweep, beside the content they had become: a 6 MiB upload was refused with 413 under a
  // quota with room for it (the client's retried POST gets 423 and cannot close the upload).
  // Chunks of an upload whose content its share holds now count once, as that content.
  it('killed after publishing: the owner’s quota counts the content once on the other server', async () => {
    const b = await fresh();
    const survivor = await start(b.args);
    const owner = await createUser(survivor.url, b.token, ['CREATE', 'READ']);
    expectStatus(
      await patch(survivor.url, `/users/${owner.username}`, {
        token: b.token,
        json: { quota: 2 * NEW.length + 10 },
      }),
      200,
    );
    const id = await createShare(survivor.url, owner.token, 'first.bin');
    const dzuuid = randomUUID();
    const dying = await start(b.args, 's3.after-publish');
    try {
      for (let i = 0; i < 3; i++)
        await send(i < 2 ? survivor.url : dying.url, owner.token, id, dzuuid, i, 'POST').catch(
          () => undefined,
        );
      expect(await dying.exited).toMatchObject({ signal: 'SIGKILL' });
      expect((await content(survivor.url, owner.token, id)).equals(NEW)).toBe(true);
      // The owner has one NEW and room for another.
      const second = await createShare(survivor.url, owner.token, 'second.bin');
      const again = randomUUID();
      for (let i = 0; i < 3; i++)
        expectStatus(
          await send(survivor.url, owner.token, second, again, i, 'POST'),
          i === 2 ? 201 : 200,
        );
      const me = await get(survivor.url, `/users/${owner.username}`, { token: owner.token });
      expect(me.body).toMatchObject({ used: 2 * NEW.length });
      await checkIntact(survivor, b);
    } finally {
      await stop(survivor);
    }
  });

  it('killed between staged chunks: the acknowledged chunks are kept, the rest is sent again', async () => {
    const b = await fresh();
    const seed = await start(b.args);
    const id = await createShare(seed.url, b.token, 'partial.bin');
    const dzuuid = randomUUID();
    expectStatus(await send(seed.url, b.token, id, dzuuid, 0, 'POST'), 200);
    // SIGKILL, not a clean stop: what was acknowledged is in S3, nothing else is needed.
    seed.child.kill('SIGKILL');
    await seed.exited;
    const running = await start(b.args);
    try {
      const status = await fetch(`${running.url}/files/${id}/uploads/${dzuuid}`, {
        headers: { authorization: `Bearer ${b.token}` },
      });
      expect(await status.json()).toMatchObject({ total: 3, received: [0] });
      expectStatus(await send(running.url, b.token, id, dzuuid, 1, 'POST'), 200);
      expectStatus(await send(running.url, b.token, id, dzuuid, 2, 'POST'), 201);
      expect((await content(running.url, b.token, id)).equals(NEW)).toBe(true);
      await checkIntact(running, b);
    } finally {
      await stop(running);
    }
  });
});
