// What survives a restart on the same data directory, what a first start creates, and metadata
// writes under concurrency (API.md "Tokens", "Content and the chunk protocol"; issue 2 "Server").
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtemp, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
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
  post,
  sendChunk,
  setDefaultPermissions,
  split,
} from '../helpers/http.js';
import { ADMIN, BACKEND, login, startServer, type TestServer } from '../helpers/server.js';

const roots: string[] = [];

async function freshDataDir(): Promise<string> {
  const root = await mkdtemp(join(tmpdir(), 'fshare-persist-'));
  roots.push(root);
  // Not created yet: the server must create it.
  return join(root, 'data');
}

afterAll(async () => {
  for (const root of roots) await rm(root, { recursive: true, force: true });
});

describe('first start', () => {
  let srv: TestServer;
  beforeAll(async () => {
    srv = await startServer({ dataDir: await freshDataDir() });
  });
  afterAll(async () => {
    await srv?.close(false);
  });

  it('creates the data directory with mode 0700', async () => {
    expect((await stat(srv.dataDir)).mode & 0o777).toBe(0o700);
  });

  // The secret file and db.json are the embedded store's; with PostgreSQL both are in the
  // database (its secrets table, and the metadata tables).
  if (BACKEND === 'embedded') {
    it('generates the signing secret in <dataDir>/secret with mode 0600', async () => {
      const s = await stat(join(srv.dataDir, 'secret'));
      expect(s.isFile()).toBe(true);
      expect(s.mode & 0o777).toBe(0o600);
      expect(s.size).toBeGreaterThanOrEqual(32);
    });

    it('keeps metadata in <dataDir>/db.json, which parses', async () => {
      const db = JSON.parse(await readFile(join(srv.dataDir, 'db.json'), 'utf8'));
      expect(typeof db).toBe('object');
    });
  }

  it('creates the configured admin with every permission', async () => {
    const token = await login(srv.url, ADMIN.username, ADMIN.password);
    const who = await get(srv.url, '/whoami', { token });
    expect(who.body).toMatchObject({
      username: ADMIN.username,
      permissions: ['CREATE', 'MODIFY', 'DELETE', 'LOCK', 'LIST', 'ADMIN', 'READ'],
    });
  });
});

describe('separate data directories', () => {
  it('two servers on fresh data directories in one process share nothing', async () => {
    const a = await startServer({ dataDir: await freshDataDir() });
    const b = await startServer({ dataDir: await freshDataDir() });
    try {
      const ta = await login(a.url, ADMIN.username, ADMIN.password);
      const tb = await login(b.url, ADMIN.username, ADMIN.password);
      await createShare(a.url, ta, 'only-in-a.txt');
      await createUser(a.url, ta, ['READ'], 'only-in-a');
      await setDefaultPermissions(a.url, ta, ['LIST']);
      const files = await get(b.url, '/files', { token: tb });
      expect(files.body.data).toEqual([]);
      const users = await get(b.url, '/users', { token: tb });
      expect(users.body.data.map((u: { username: string }) => u.username)).toEqual([
        ADMIN.username,
      ]);
      const settings = await get(b.url, '/admin/settings', { token: tb });
      expect(settings.body.default_permissions).toEqual([]);
    } finally {
      await a.close(false);
      await b.close(false);
    }
  });
});

describe('64 concurrent POST /files', () => {
  it('all succeed, all are listed, and all survive a restart', async () => {
    const dataDir = await freshDataDir();
    let srv = await startServer({ dataDir });
    try {
      const token = await login(srv.url, ADMIN.username, ADMIN.password);
      const results = await Promise.all(
        Array.from({ length: 64 }, (_, i) =>
          post(srv.url, '/files', { token, json: { file_name: `concurrent-${i}.txt` } }),
        ),
      );
      for (const res of results) expectStatus(res, 201);
      const ids = results.map((r) => r.body.url.slice('/files/'.length) as string);
      expect(new Set(ids).size).toBe(64);

      const listed = await get(srv.url, '/files?per_page=1000', { token });
      expectStatus(listed, 200);
      const listedIds = listed.body.data.map((s: { share_id: string }) => s.share_id);
      expect([...listedIds].sort()).toEqual([...ids].sort());
      const names = listed.body.data.map((s: { file_name: string }) => s.file_name).sort();
      expect(names).toEqual(Array.from({ length: 64 }, (_, i) => `concurrent-${i}.txt`).sort());

      await srv.close(false);
      srv = await startServer({ dataDir });
      const again = await get(srv.url, '/files?per_page=1000', { token });
      expectStatus(again, 200);
      expect(again.body.data.map((s: { share_id: string }) => s.share_id)).toEqual(listedIds);
    } finally {
      await srv.close(false);
    }
  });

  it('concurrent users, shares and settings writes lose nothing', async () => {
    const dataDir = await freshDataDir();
    let srv = await startServer({ dataDir });
    try {
      const token = await login(srv.url, ADMIN.username, ADMIN.password);
      const names = Array.from({ length: 20 }, (_, i) => `user-${i}`);
      const work = await Promise.all([
        ...names.map((username) =>
          post(srv.url, '/users', {
            token,
            json: { username, password: 'pw-123456', permissions: ['READ'] },
          }),
        ),
        ...Array.from({ length: 20 }, () => post(srv.url, '/files', { token, json: {} })),
        patch(srv.url, '/admin/settings', { token, json: { default_permissions: ['LIST'] } }),
      ]);
      expect(work.map((r) => r.status).sort()).toEqual([...Array(40).fill(201), 200].sort());
      await srv.close(false);
      srv = await startServer({ dataDir });
      const t2 = await login(srv.url, ADMIN.username, ADMIN.password);
      const users = await get(srv.url, '/users?per_page=1000', { token: t2 });
      expect(users.body.data.map((u: { username: string }) => u.username).sort()).toEqual(
        [ADMIN.username, ...names].sort(),
      );
      const files = await get(srv.url, '/files?per_page=1000', { token: t2 });
      expect(files.body.data).toHaveLength(20);
      const settings = await get(srv.url, '/admin/settings', { token: t2 });
      expect(settings.body.default_permissions).toEqual(['LIST']);
    } finally {
      await srv.close(false);
    }
  });
});

describe('a restart on the same data directory keeps everything', () => {
  const dataDir = { path: '' };
  let first: TestServer;
  let second: TestServer;
  const state = {
    adminToken: '',
    revoked: '',
    bob: { username: '', password: '', token: '' },
    doneId: '',
    done: randomBytes(5000),
    pendingId: '',
    pendingUuid: randomUUID(),
    pending: randomBytes(3000),
    replacingId: '',
    replacingUuid: randomUUID(),
    replacingOld: Buffer.from('old content before the restart'),
    replacingNew: randomBytes(2048),
    lockedId: '',
  };

  beforeAll(async () => {
    dataDir.path = await freshDataDir();
    first = await startServer({ dataDir: dataDir.path });
    const url = first.url;
    state.adminToken = await login(url, ADMIN.username, ADMIN.password);
    state.bob = await createUser(
      url,
      state.adminToken,
      ['CREATE', 'MODIFY', 'READ', 'LIST', 'LOCK'],
      'bob',
    );
    state.revoked = await login(url, 'bob', state.bob.password);
    expectStatus(
      await post(url, '/users/logout', { token: state.bob.token, json: { token: state.revoked } }),
      200,
    );
    await setDefaultPermissions(url, state.adminToken, ['READ', 'LIST']);
    state.doneId = await createShareWithContent(url, state.bob.token, 'done.bin', state.done, 2);

    // An upload cut after chunks 0 and 1 of 3.
    state.pendingId = await createShare(url, state.bob.token, 'pending.bin');
    const parts = split(state.pending, 3);
    for (const index of [0, 1]) {
      expectStatus(
        await sendChunk(url, state.bob.token, state.pendingId, {
          dzuuid: state.pendingUuid,
          index,
          total: 3,
          data: parts[index]!,
        }),
        200,
      );
    }

    // A replacement (PUT) cut after chunk 1 of 2.
    state.replacingId = await createShareWithContent(
      url,
      state.bob.token,
      'replacing.txt',
      state.replacingOld,
    );
    expectStatus(
      await sendChunk(
        url,
        state.bob.token,
        state.replacingId,
        { dzuuid: state.replacingUuid, index: 1, total: 2, data: split(state.replacingNew, 2)[1]! },
        'PUT',
      ),
      200,
    );

    state.lockedId = await createShareWithContent(
      url,
      state.bob.token,
      'locked.txt',
      Buffer.from('locked'),
    );
    expectStatus(await post(url, `/files/${state.lockedId}/lock`, { token: state.bob.token }), 200);

    await first.close(false);
    second = await startServer({ dataDir: dataDir.path });
  });

  afterAll(async () => {
    await second?.close(false);
  });

  it('tokens issued before the restart are still valid (the secret is reused)', async () => {
    const res = await get(second.url, '/users/bob', { token: state.bob.token });
    expectStatus(res, 200);
    expect(res.body).toMatchObject({
      username: 'bob',
      permissions: ['CREATE', 'MODIFY', 'LOCK', 'LIST', 'READ'],
    });
    expectStatus(
      await get(second.url, `/users/${ADMIN.username}`, { token: state.adminToken }),
      200,
    );
  });

  it('a revoked token stays revoked', async () => {
    expectFail(await get(second.url, '/users/bob', { token: state.revoked }), 401);
  });

  it('users and their passwords survive; the admin is reused, not duplicated', async () => {
    await login(second.url, 'bob', state.bob.password);
    await login(second.url, ADMIN.username, ADMIN.password);
    const users = await get(second.url, '/users?per_page=1000', { token: state.adminToken });
    const names = users.body.data.map((u: { username: string }) => u.username);
    expect(names).toEqual([ADMIN.username, 'bob']);
  });

  it('settings survive', async () => {
    const res = await get(second.url, '/admin/settings', { token: state.adminToken });
    expect(res.body.default_permissions).toEqual(['LIST', 'READ']);
    const who = await get(second.url, '/whoami');
    expect(who.body).toMatchObject({ username: null, permissions: ['LIST', 'READ'] });
  });

  it('shares and their content survive', async () => {
    expect(await getShare(second.url, state.bob.token, state.doneId)).toMatchObject({
      file_name: 'done.bin',
      owner_name: 'bob',
      initialized: true,
      locked: false,
      size: state.done.length,
    });
    expect((await content(second.url, undefined, state.doneId)).equals(state.done)).toBe(true);
    expect((await getShare(second.url, state.bob.token, state.lockedId)).locked).toBe(true);
    expectFail(
      await patch(second.url, `/files/${state.lockedId}`, {
        token: state.bob.token,
        json: { file_name: 'x' },
      }),
      423,
    );
  });

  it('an unfinished upload is finished after the restart by sending the missing chunk', async () => {
    expect(await getShare(second.url, state.bob.token, state.pendingId)).toMatchObject({
      initialized: false,
      size: null,
    });
    const res = await sendChunk(second.url, state.bob.token, state.pendingId, {
      dzuuid: state.pendingUuid,
      index: 2,
      total: 3,
      data: split(state.pending, 3)[2]!,
    });
    expectStatus(res, 201);
    expect(
      (await content(second.url, state.bob.token, state.pendingId)).equals(state.pending),
    ).toBe(true);
    expect(await getShare(second.url, state.bob.token, state.pendingId)).toMatchObject({
      initialized: true,
      size: state.pending.length,
    });
  });

  it('an unfinished replacement keeps serving the old content, then completes', async () => {
    expect(
      (await content(second.url, state.bob.token, state.replacingId)).equals(state.replacingOld),
    ).toBe(true);
    const res = await sendChunk(
      second.url,
      state.bob.token,
      state.replacingId,
      { dzuuid: state.replacingUuid, index: 0, total: 2, data: split(state.replacingNew, 2)[0]! },
      'PUT',
    );
    expectStatus(res, 201);
    expect(
      (await content(second.url, state.bob.token, state.replacingId)).equals(state.replacingNew),
    ).toBe(true);
  });

  it('the total of an upload is remembered across the restart', async () => {
    const id = await createShare(second.url, state.bob.token, 'total.bin');
    const dzuuid = randomUUID();
    expectStatus(
      await sendChunk(second.url, state.bob.token, id, {
        dzuuid,
        index: 0,
        total: 2,
        data: Buffer.from('t0'),
      }),
      200,
    );
    await second.close(false);
    second = await startServer({ dataDir: dataDir.path });
    expectFail(
      await sendChunk(second.url, state.bob.token, id, {
        dzuuid,
        index: 0,
        total: 1,
        data: Buffer.from('zz'),
      }),
      400,
    );
    expectStatus(
      await sendChunk(second.url, state.bob.token, id, {
        dzuuid,
        index: 1,
        total: 2,
        data: Buffer.from('t1'),
      }),
      201,
    );
    expect((await content(second.url, state.bob.token, id)).toString()).toBe('t0t1');
  });

  it('a later start without admin options reuses the existing admin and its password', async () => {
    await second.close(false);
    second = await startServer({
      dataDir: dataDir.path,
      adminUser: undefined,
      adminPassword: undefined,
    });
    await login(second.url, ADMIN.username, ADMIN.password);
    const users = await get(second.url, '/users?per_page=1000', { token: state.adminToken });
    expect(users.body.data.map((u: { username: string }) => u.username)).toEqual([
      ADMIN.username,
      'bob',
    ]);
  });
});
