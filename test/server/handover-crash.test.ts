// A share's handover cut by SIGKILL (FSHARE_FAULT=handover.after-record: the new owner recorded,
// the old owner's unfinished uploads not yet ended), on the embedded store (a restart on the same
// data directory) and on PostgreSQL + S3 (another server that kept running). Property guarded:
// the handover was not acknowledged, so it is whole or absent, never half: here it was recorded,
// so an upload started under the old owner is ended as a completed handover ends it; the new
// owner can neither finish it (409, 410) nor be counted for its chunks against their quota.
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createShare,
  createUser,
  expectFail,
  expectStatus,
  get,
  getShare,
  patch,
  sendChunk,
  upload,
} from '../helpers/http.js';
import { createDatabase, startPostgres, type PgCluster } from '../helpers/postgres.js';
import { createBucket, S3_TEST_ENV, startS3, type S3Server } from '../helpers/s3.js';
import { killAll, serve, stop, type Running, serveRoot } from '../helpers/serve.js';
import { ADMIN, login } from '../helpers/server.js';

const dirIn = serveRoot('handover-crash');

type Person = { username: string; token: string };
const A = Buffer.alloc(1000, 'A');
const QUOTA = 1500;

interface Cut {
  id: string;
  dzuuid: string;
  alice: Person;
  carol: Person;
}

/**
 * On `armed` (a server set to die at handover.after-record): alice's share with chunk 0 of her
 * 2-chunk upload stored (1000 bytes), handed to carol (quota 1500); the server dies in the PATCH.
 */
async function cutHandover(armed: Running): Promise<Cut> {
  const admin = await login(armed.url, ADMIN.username, ADMIN.password);
  const perms = ['CREATE', 'MODIFY', 'READ'];
  const alice = await createUser(armed.url, admin, perms);
  const carol = await createUser(armed.url, admin, perms);
  const quota = { token: admin, json: { quota: QUOTA } };
  expectStatus(await patch(armed.url, `/users/${carol.username}`, quota), 200);
  const id = await createShare(armed.url, alice.token, 'handed.bin');
  const dzuuid = randomUUID();
  const first = { dzuuid, index: 0, total: 2, data: A };
  expectStatus(await sendChunk(armed.url, alice.token, id, first), 200);
  const handover = { token: alice.token, json: { owner_name: carol.username } };
  await patch(armed.url, `/files/${id}`, handover).catch(() => undefined);
  expect(await armed.exited).toMatchObject({ signal: 'SIGKILL' });
  return { id, dzuuid, alice, carol };
}

/** The handover whole, as carol and alice see it through a server at `url`. */
async function expectWhole(url: string, { id, dzuuid, alice, carol }: Cut) {
  expect((await getShare(url, carol.token, id)).owner_name).toBe(carol.username);
  // Alice's 1000 stored bytes are not counted against carol's 1500: 1000 of her own fit (this
  // comes first: on the other server nothing has touched the handed share yet).
  const own = await createShare(url, carol.token, 'own.bin');
  await upload(url, carol.token, own, Buffer.alloc(1000, 'C'), 2);
  // Alice's upload has ended: carol cannot finish it with alice's chunk, nor see it unfinished.
  const rest = { dzuuid, index: 1, total: 2, data: Buffer.alloc(500, 'C') };
  expectFail(await sendChunk(url, carol.token, id, rest), 409);
  expectFail(await get(url, `/files/${id}/uploads/${dzuuid}`, { token: carol.token }), 410);
  expectFail(await sendChunk(url, alice.token, id, { ...rest, data: A }), 403);
  expect(await getShare(url, carol.token, id)).toMatchObject({ initialized: false, size: null });
}

describe('a handover killed between recording the new owner and ending the uploads', () => {
  it('embedded: after a restart the old owner’s upload is ended and not counted', async () => {
    const dir = dirIn('embedded');
    const cut = await cutHandover(await serve(dir, { FSHARE_FAULT: 'handover.after-record' }));
    const after = await serve(dir);
    await expectWhole(after.url, cut);
    expect(await stop(after)).toMatchObject({ code: 0 });
  });

  describe('PostgreSQL + S3', () => {
    let pg: PgCluster;
    let s3: S3Server;
    beforeAll(async () => {
      [pg, s3] = await Promise.all([startPostgres(), startS3()]);
    });
    afterAll(async () => {
      killAll();
      await s3?.stop();
      await pg?.stop();
    });

    it('another server, running all along, ends the upload and does not count it', async () => {
      const args = [
        ...['--database', await createDatabase(pg.adminUrl)],
        ...['--storage', await createBucket(s3.endpoint)],
        ...['--s3-endpoint', s3.endpoint, '--s3-force-path-style'],
      ];
      const start = (fault?: string) =>
        serve(dirIn(randomUUID()), { ...S3_TEST_ENV, FSHARE_FAULT: fault }, args);
      const other = await start();
      const cut = await cutHandover(await start('handover.after-record'));
      await expectWhole(other.url, cut);
      expect(await stop(other)).toMatchObject({ code: 0 });
    });
  });
});
