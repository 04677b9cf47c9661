// GET /files/<id>/uploads/<dzuuid> (additive, issue 10): which chunks of an unfinished upload the
// server holds, so a client that restarts sends only the others. Property guarded: the answer
// lists exactly the committed chunks, survives a server restart, and says 410 once the upload
// finished (a late chunk would be refused) and 404 for one it never stored; only the owner asks.
import { randomBytes, randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  content,
  createShare,
  createUser,
  expectFail,
  expectStatus,
  get,
  sendChunk,
  split,
} from '../helpers/http.js';
import { ADMIN, login, startServer, type TestServer } from '../helpers/server.js';

describe('upload state', () => {
  let srv: TestServer;
  let token: string;
  beforeAll(async () => {
    srv = await startServer();
    token = await login(srv.url, ADMIN.username, ADMIN.password);
  });
  afterAll(() => srv?.close());

  it('lists the stored chunks, across a restart, then 410 once the upload completed', async () => {
    const id = await createShare(srv.url, token, 'state.bin');
    const data = randomBytes(50_000);
    const chunks = split(data, 5);
    const dzuuid = randomUUID();
    expectFail(await get(srv.url, `/files/${id}/uploads/${dzuuid}`, { token }), 404);
    for (const index of [0, 3, 1])
      expectStatus(
        await sendChunk(srv.url, token, id, { dzuuid, index, total: 5, data: chunks[index]! }),
        200,
      );
    const state = await get(srv.url, `/files/${id}/uploads/${dzuuid}`, { token });
    expectStatus(state, 200);
    expect(state.body).toEqual({
      dzuuid,
      total: 5,
      received: [0, 1, 3],
      bytes: chunks[0]!.length + chunks[1]!.length + chunks[3]!.length,
    });

    // The same answer from a restarted server over the same data directory.
    await srv.close(false);
    srv = await startServer({ dataDir: srv.dataDir });
    token = await login(srv.url, ADMIN.username, ADMIN.password);
    const again = await get(srv.url, `/files/${id}/uploads/${dzuuid}`, { token });
    expect(again.body).toMatchObject({ received: [0, 1, 3] });

    for (const index of [2, 4])
      await sendChunk(srv.url, token, id, { dzuuid, index, total: 5, data: chunks[index]! });
    expect((await content(srv.url, token, id)).equals(data)).toBe(true);
    expectFail(await get(srv.url, `/files/${id}/uploads/${dzuuid}`, { token }), 410);
  });

  it('answers only the owner, and refuses a bad upload id with a JSON 400', async () => {
    const id = await createShare(srv.url, token, 'owned.bin');
    const dzuuid = randomUUID();
    await sendChunk(srv.url, token, id, { dzuuid, index: 0, total: 2, data: randomBytes(10) });
    const { token: mallory } = await createUser(srv.url, token, ['CREATE', 'READ']);
    expectFail(await get(srv.url, `/files/${id}/uploads/${dzuuid}`, { token: mallory }), 403);
    expectFail(await get(srv.url, `/files/${id}/uploads/${dzuuid}`), 401);
    expectFail(await get(srv.url, `/files/${id}/uploads/${'x'.repeat(2000)}`, { token }), 400);
    expectFail(await get(srv.url, `/files/${randomUUID()}/uploads/${dzuuid}`, { token }), 404);
  });
});
