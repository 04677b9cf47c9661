// An upload belongs to the share's owner at the time it started: a handover (PATCH or PUT of
// owner_name) ends the share's unfinished uploads, so the new owner can never publish content
// made of the old owner's chunks and its own, and is not counted for the old owner's chunks.
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  content,
  createShare,
  createUser,
  expectFail,
  expectStatus,
  get,
  patch,
  put,
  sendChunk,
  stalledChunk,
  upload,
} from '../helpers/http.js';
import { ADMIN, login, startServer, storedUploads, type TestServer } from '../helpers/server.js';

let srv: TestServer;
let base: string;
let alice: { username: string; token: string };
let bob: { username: string; token: string };

const A = Buffer.alloc(1000, 'A');
const B = Buffer.alloc(1000, 'B');

beforeAll(async () => {
  srv = await startServer();
  base = srv.url;
  const admin = await login(base, ADMIN.username, ADMIN.password);
  const perms = ['CREATE', 'MODIFY', 'READ', 'LIST'];
  alice = await createUser(base, admin, perms);
  bob = await createUser(base, admin, perms);
});

afterAll(async () => {
  await srv?.close();
});

/** A share of alice's with chunk 0 of a 2-chunk upload `dzuuid` stored. */
async function startedUpload(dzuuid: string): Promise<string> {
  const id = await createShare(base, alice.token, 'handed.bin');
  expectStatus(
    await sendChunk(base, alice.token, id, { dzuuid, index: 0, total: 2, data: A }),
    200,
  );
  expect(await storedUploads(srv, id)).toHaveLength(1);
  return id;
}

describe('a share handed over in the middle of an upload', () => {
  it.each(['PATCH', 'PUT'] as const)(
    '%s owner_name: the new owner cannot finish the old owner’s upload',
    async (method) => {
      const dzuuid = randomUUID();
      const id = await startedUpload(dzuuid);
      const body =
        method === 'PATCH'
          ? { owner_name: bob.username }
          : { owner_name: bob.username, file_name: 'handed.bin' };
      expectStatus(
        await (method === 'PATCH' ? patch : put)(base, `/files/${id}`, {
          token: alice.token,
          json: body,
        }),
        200,
      );
      // The upload is gone: not stored, and its remaining chunk is refused.
      expect(await storedUploads(srv, id)).toEqual([]);
      expectFail(await get(base, `/files/${id}/uploads/${dzuuid}`, { token: bob.token }), 410);
      expectFail(
        await sendChunk(base, bob.token, id, { dzuuid, index: 1, total: 2, data: B }),
        409,
      );
      // Sending the whole upload again under that dzuuid does not bring alice's chunk back.
      expectFail(
        await sendChunk(base, bob.token, id, { dzuuid, index: 0, total: 2, data: B }),
        409,
      );
      expectFail(await get(base, `/files/${id}/content`, { token: bob.token }), 404);
      expect((await get(base, `/files/${id}`, { token: bob.token })).body).toMatchObject({
        initialized: false,
      });
      // An upload of bob's own makes the content: his bytes only.
      await upload(base, bob.token, id, B, 2);
      const got = await content(base, bob.token, id);
      expect(got.equals(B)).toBe(true);
    },
  );

  it('the old owner’s late chunk is refused (403) and leaves nothing', async () => {
    const dzuuid = randomUUID();
    const id = await startedUpload(dzuuid);
    expectStatus(
      await patch(base, `/files/${id}`, { token: alice.token, json: { owner_name: bob.username } }),
      200,
    );
    expectFail(
      await sendChunk(base, alice.token, id, { dzuuid, index: 1, total: 2, data: A }),
      403,
    );
    expect(await storedUploads(srv, id)).toEqual([]);
    expect((await get(base, `/files/${id}`, { token: bob.token })).body).toMatchObject({
      initialized: false,
    });
  });

  it('a chunk of the old owner still arriving at the handover is refused and stores nothing', async () => {
    const id = await createShare(base, alice.token, 'racing.bin');
    const dzuuid = randomUUID();
    const fields = { dzuuid, dzchunkindex: 0, dztotalchunks: 2 };
    const late = await stalledChunk(base, alice.token, id, fields, A, 500);
    expectStatus(
      await patch(base, `/files/${id}`, { token: alice.token, json: { owner_name: bob.username } }),
      200,
    );
    expectFail(await late.finish(), 403);
    expect(await storedUploads(srv, id)).toEqual([]);
    // Bob sending the other chunk under that dzuuid can never complete it with alice's bytes.
    const res = await sendChunk(base, bob.token, id, { dzuuid, index: 1, total: 2, data: B });
    expect([200, 409]).toContain(res.status);
    expect((await get(base, `/files/${id}`, { token: bob.token })).body).toMatchObject({
      initialized: false,
    });
  });

  it('handed back, the first owner cannot resume the upload either', async () => {
    const dzuuid = randomUUID();
    const id = await startedUpload(dzuuid);
    for (const [from, to] of [
      [alice, bob],
      [bob, alice],
    ] as const)
      expectStatus(
        await patch(base, `/files/${id}`, { token: from.token, json: { owner_name: to.username } }),
        200,
      );
    expectFail(
      await sendChunk(base, alice.token, id, { dzuuid, index: 1, total: 2, data: A }),
      409,
    );
    expectFail(await get(base, `/files/${id}/content`, { token: alice.token }), 404);
  });

  it('the recipient’s quota does not count the old owner’s chunks', async () => {
    const admin = await login(base, ADMIN.username, ADMIN.password);
    const carol = await createUser(base, admin, ['CREATE', 'MODIFY', 'READ']);
    expectStatus(
      await patch(base, `/users/${carol.username}`, { token: admin, json: { quota: 1500 } }),
      200,
    );
    const id = await startedUpload(randomUUID());
    expectStatus(
      await patch(base, `/files/${id}`, {
        token: alice.token,
        json: { owner_name: carol.username },
      }),
      200,
    );
    // All 1500 bytes are carol's to use: alice's 1000 stored bytes went with her upload.
    await upload(base, carol.token, id, Buffer.alloc(1500, 'C'), 3);
    expect((await get(base, `/users/${carol.username}`, { token: admin })).body).toMatchObject({
      quota: 1500,
      used: 1500,
    });
  });

  it('a change that keeps the owner keeps the upload', async () => {
    const dzuuid = randomUUID();
    const id = await startedUpload(dzuuid);
    expectStatus(
      await patch(base, `/files/${id}`, {
        token: alice.token,
        json: { owner_name: alice.username, file_name: 'renamed.bin' },
      }),
      200,
    );
    expectStatus(
      await sendChunk(base, alice.token, id, { dzuuid, index: 1, total: 2, data: A }),
      201,
    );
    expect((await content(base, alice.token, id)).equals(Buffer.concat([A, A]))).toBe(true);
  });
});
