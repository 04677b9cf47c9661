// API.md "Expiry (Additive)", the expiry side of "Share links (Additive)" and the limits of
// "Settings and identity": every server here runs on an injected clock (`clock: () => now`), so
// time moves only when a test moves it. Links themselves are in links.test.ts.
import { randomBytes, randomUUID } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Link } from '../../src/shared/types.js';
import {
  allShares,
  createShare,
  createShareWithContent,
  createUser,
  expectFail,
  expectStatus,
  get,
  patch,
  post,
  put,
  request,
  setDefaultPermissions,
  stalledChunk,
  until,
  upload,
  type Res,
} from '../helpers/http.js';
import {
  ADMIN,
  BACKEND,
  chunkArriving,
  login,
  metadataText,
  startServer,
  storedContent,
  storedUploads,
  type TestServer,
} from '../helpers/server.js';

const PERMS = ['CREATE', 'MODIFY', 'DELETE', 'LOCK', 'LIST', 'READ'];
const HTML = { accept: 'text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8' };
const JSON_ONLY = { accept: 'application/json' };
const FORM = { 'content-type': 'application/x-www-form-urlencoded' };
/** Ten years, API.md's longest expiry. */
const MAX_SECONDS = 316_224_000;
const DATA = randomBytes(20_000);

/** A server whose clock moves only when the test says so. */
interface Clocked {
  srv: TestServer;
  url: string;
  admin: string;
  now(): number;
  /** Moves the server's clock by `seconds` (may be negative). */
  tick(seconds: number): void;
  /** Closes the server, keeping its data, and starts a new one on it with the same clock. */
  restart(): Promise<void>;
}

const started: TestServer[] = [];
afterAll(async () => {
  for (const s of started) await s.close().catch(() => undefined);
});

async function clocked(): Promise<Clocked> {
  let now = Date.now();
  const clock = () => now;
  const c: Clocked = {
    srv: await startServer({ clock }),
    url: '',
    admin: '',
    now: () => now,
    tick(seconds) {
      now += Math.round(seconds * 1000);
    },
    async restart() {
      await c.srv.close(false);
      c.srv = await startServer({ clock, dataDir: c.srv.dataDir });
      started.push(c.srv);
      c.url = c.srv.url;
      c.admin = await login(c.url, ADMIN.username, ADMIN.password);
    },
  };
  started.push(c.srv);
  c.url = c.srv.url;
  c.admin = await login(c.url, ADMIN.username, ADMIN.password);
  return c;
}

const iso = (ms: number) => new Date(ms).toISOString();

async function makeLink(
  url: string,
  token: string | undefined,
  share: string,
  json: Record<string, unknown> = {},
) {
  const res = await post(url, `/files/${share}/links`, { token, json });
  expectStatus(res, 201);
  return { id: res.body.id as string, path: new URL(res.body.url as string).pathname, res };
}

async function linkOf(url: string, token: string, id: string): Promise<Link> {
  const res = await get(url, `/links/${id}`, { token });
  expectStatus(res, 200);
  return res.body as Link;
}

/** An HTML page of the public side (the complete header check is in links.test.ts). */
function expectPage(res: Res, status: number): void {
  expectStatus(res, status);
  expect(res.headers['content-type']).toMatch(/^text\/html/);
  expect(String(res.headers['content-security-policy'])).toMatch(/^default-src 'none'; /);
  expect(res.headers['referrer-policy']).toBe('no-referrer');
}

describe('link expiry', () => {
  let c: Clocked;
  let shareId: string;
  beforeAll(async () => {
    c = await clocked();
    shareId = await createShareWithContent(c.url, c.admin, 'timed.bin', DATA);
  });

  it('a link with expires_in 60 works until its expiry; from then on it is 410 (JSON, HTML page, bytes, HEAD) and says expired', async () => {
    const t0 = c.now();
    const made = await makeLink(c.url, c.admin, shareId, { expires_in: 60 });
    expect(made.res.body).toMatchObject({ expires: iso(t0 + 60_000), state: 'active' });
    const page = await get(c.url, made.path, { headers: JSON_ONLY });
    expect(page.body.expires).toBe(iso(t0 + 60_000));

    c.tick(59.999);
    expectStatus(await get(c.url, made.path, { headers: JSON_ONLY }), 200);
    const bytes = await get(c.url, `${made.path}?download`);
    expectStatus(bytes, 200);
    expect(bytes.buf.equals(DATA)).toBe(true);

    c.tick(0.001);
    expectFail(await get(c.url, made.path, { headers: JSON_ONLY }), 410);
    c.tick(1);
    expectFail(await get(c.url, made.path, { headers: JSON_ONLY }), 410);
    const html = await get(c.url, made.path, { headers: HTML });
    expectPage(html, 410);
    expect(html.text).toContain('expired');
    expectFail(await get(c.url, `${made.path}?download`), 410);
    expectStatus(await request(c.url, 'HEAD', `${made.path}?download`), 410);
    // The resume window of the download just made does not outlive the link.
    expectFail(await get(c.url, `${made.path}?download`, { headers: { range: 'bytes=5-' } }), 410);
    expect(await linkOf(c.url, c.admin, made.id)).toMatchObject({
      state: 'expired',
      downloads: 1,
    });
    // The share itself is untouched.
    expectStatus(await get(c.url, `/files/${shareId}`, { token: c.admin }), 200);
  });

  it('expires as a time with a zone is kept as that instant in UTC; null is never', async () => {
    const t0 = c.now();
    const at = new Date(Math.floor(t0 / 1000) * 1000 + 3_600_000);
    const local = new Date(at.getTime() + 2 * 3_600_000).toISOString().replace('.000Z', '+02:00');
    const made = await makeLink(c.url, c.admin, shareId, { expires: local });
    expect(made.res.body.expires).toBe(at.toISOString());
    const never = await makeLink(c.url, c.admin, shareId, { expires: null });
    expect(never.res.body.expires).toBeNull();
    c.tick(3601);
    expectFail(await get(c.url, made.path, { headers: JSON_ONLY }), 410);
    expectStatus(await get(c.url, never.path, { headers: JSON_ONLY }), 200);
  });

  it("a link shows the earlier of its own and its share's expiry, and the share's ends it", async () => {
    const t0 = c.now();
    const id = await createShare(c.url, c.admin, 'soon.bin');
    const patched = await patch(c.url, `/files/${id}`, {
      token: c.admin,
      json: { expires_in: 100 },
    });
    expectStatus(patched, 200);
    await upload(c.url, c.admin, id, DATA);
    const later = await makeLink(c.url, c.admin, id, { expires_in: 1000 });
    const sooner = await makeLink(c.url, c.admin, id, { expires_in: 50 });
    const forever = await makeLink(c.url, c.admin, id);
    expect(later.res.body.expires).toBe(iso(t0 + 100_000));
    expect(sooner.res.body.expires).toBe(iso(t0 + 50_000));
    expect(forever.res.body.expires).toBe(iso(t0 + 100_000));
    expect((await get(c.url, later.path, { headers: JSON_ONLY })).body.expires).toBe(
      iso(t0 + 100_000),
    );
    c.tick(101);
    for (const l of [later, forever]) {
      const res = await get(c.url, `${l.path}?download`);
      // 410 while the expired share awaits its sweep, 404 once it is deleted.
      expect([404, 410]).toContain(res.status);
      expectFail(res, res.status);
    }
  });

  it('the resume window: 30 minutes after the counted download (or after the last resume), then a resume counts', async () => {
    const made = await makeLink(c.url, c.admin, shareId, { max_downloads: 1 });
    const full = await get(c.url, `${made.path}?download`);
    expectStatus(full, 200);
    const resume = () => get(c.url, `${made.path}?download`, { headers: { range: 'bytes=7-' } });
    c.tick(20 * 60);
    const first = await resume();
    expectStatus(first, 206);
    expect(first.buf.equals(DATA.subarray(7))).toBe(true);
    // 45 minutes after the download, but 25 after the last resume: still the same download.
    c.tick(25 * 60);
    expectStatus(await resume(), 206);
    // 31 minutes of silence: a new download, and the link has none left.
    c.tick(31 * 60);
    expectFail(await resume(), 410);
    expect(await linkOf(c.url, c.admin, made.id)).toMatchObject({
      downloads: 1,
      state: 'used-up',
    });
  });

  it('a password grant lasts one hour', async () => {
    const made = await makeLink(c.url, c.admin, shareId, { password: 'hour-pw' });
    const unlock = await post(c.url, made.path, { body: 'password=hour-pw', headers: FORM });
    expectStatus(unlock, 303);
    const cookie = String(unlock.headers['set-cookie']?.[0]).split(';')[0]!;
    c.tick(3599);
    expectStatus(await get(c.url, made.path, { headers: { ...JSON_ONLY, cookie } }), 200);
    c.tick(2);
    expectFail(await get(c.url, made.path, { headers: { ...JSON_ONLY, cookie } }), 401);
  });
});

describe('share expiry', () => {
  // Found from outside on two servers: the server that set a share's expiry was SIGKILLed, so
  // no sweep ran at the expiry (the other server looks once a minute); a chunk streaming into
  // the other server when the expiry passed was committed, 201 "Upload complete", into a share
  // that answered 404 to everything else. An expired share now takes no chunk: 404.
  it('a chunk that streamed in across the expiry is refused with 404 and stores nothing', async () => {
    const c = await clocked();
    const made = await post(c.url, '/files', {
      token: c.admin,
      json: { file_name: 'expires-mid-chunk.bin', expires_in: 60 },
    });
    expectStatus(made, 201);
    const id = (made.body.url as string).split('/').pop()!;
    const fields = { dzuuid: randomUUID(), dzchunkindex: 0, dztotalchunks: 2 };
    const slow = await stalledChunk(c.url, c.admin, id, fields, randomBytes(3 << 20), 2 << 20);
    await until(() => chunkArriving(c.srv, id), 'the chunk to reach the server');
    c.tick(61);
    expectFail(await slow.finish(), 404);
    expect(await storedUploads(c.srv, id)).toEqual([]);
  });

  it('at its expiry a share is gone at once (GET, content, links, lists); the sweep then deletes its content and record, durably', async () => {
    const c = await clocked();
    const t0 = c.now();
    const made = await post(c.url, '/files', {
      token: c.admin,
      json: { file_name: 'expiring.bin', expires_in: 60 },
    });
    expectStatus(made, 201);
    const id = (made.body.url as string).split('/').pop()!;
    await upload(c.url, c.admin, id, DATA);
    const share = await get(c.url, `/files/${id}`, { token: c.admin });
    expect(share.body.expires).toBe(iso(t0 + 60_000));
    const link = await makeLink(c.url, c.admin, id);
    expect(link.res.body.expires).toBe(iso(t0 + 60_000));
    expect(await storedContent(c.srv, id)).toHaveLength(1);
    expectStatus(await get(c.url, `/files/${id}/content`, { token: c.admin }), 200);

    c.tick(61);
    expectFail(await get(c.url, `/files/${id}`, { token: c.admin }), 404);
    expectFail(await get(c.url, `/files/${id}/content`, { token: c.admin }), 404);
    expectStatus(await request(c.url, 'HEAD', `/files/${id}/content`, { token: c.admin }), 404);
    expectFail(
      await patch(c.url, `/files/${id}`, { token: c.admin, json: { file_name: 'x' } }),
      404,
    );
    expectFail(await post(c.url, `/files/${id}/lock`, { token: c.admin }), 404);
    expectFail(await post(c.url, `/files/${id}/links`, { token: c.admin, json: {} }), 404);
    expectFail(await get(c.url, `/files/${id}/links`, { token: c.admin }), 404);
    expectFail(await get(c.url, `/links/${link.id}`, { token: c.admin }), 404);
    const viaLink = await get(c.url, `${link.path}?download`);
    expect([404, 410]).toContain(viaLink.status);
    expectFail(viaLink, viaLink.status);

    // Lists leave it out (and sweep it first).
    expect((await allShares(c.url, c.admin)).map((s) => s.share_id)).not.toContain(id);
    const links = await get(c.url, '/links?per_page=1000', { token: c.admin });
    expect((links.body.data as Link[]).map((l) => l.id)).not.toContain(link.id);
    expect(await storedContent(c.srv, id)).toEqual([]);
    expectFail(await get(c.url, link.path, { headers: JSON_ONLY }), 404);

    // The deletion is durable: even with the clock set back before the expiry, after a restart
    // the share is gone.
    c.tick(-61);
    await c.restart();
    expectFail(await get(c.url, `/files/${id}`, { token: c.admin }), 404);
    expectFail(await get(c.url, link.path, { headers: JSON_ONLY }), 404);
    if (BACKEND === 'embedded') {
      const snapshot = await readFile(join(c.srv.dataDir, 'db.json'), 'utf8');
      const journal = await readFile(join(c.srv.dataDir, 'db.journal'), 'utf8').catch(() => '');
      const state = JSON.parse(snapshot) as { shares: { share_id: string }[]; links: unknown[] };
      expect(state.shares.map((s) => s.share_id)).not.toContain(id);
      // Anything the journal still says about it ends with its deletion.
      const lines = journal.split('\n').filter((l) => l.includes(id));
      if (lines.length) expect(lines.at(-1)).toContain('deleteShare');
    } else {
      // PostgreSQL keeps no history: no row of any table names the share any more.
      expect(await metadataText(c.srv)).not.toContain(id);
    }
  });

  it('a locked share expires too (an expiry is a deletion asked for in advance)', async () => {
    const c = await clocked();
    const id = await createShareWithContent(c.url, c.admin, 'locked.bin', DATA);
    expectStatus(
      await patch(c.url, `/files/${id}`, { token: c.admin, json: { expires_in: 30 } }),
      200,
    );
    expectStatus(await post(c.url, `/files/${id}/lock`, { token: c.admin }), 200);
    c.tick(31);
    expectFail(await get(c.url, `/files/${id}`, { token: c.admin }), 404);
    expect((await allShares(c.url, c.admin)).map((s) => s.share_id)).not.toContain(id);
    expect(await storedContent(c.srv, id)).toEqual([]);
  });

  it('expires: null (PATCH) keeps a share past its old expiry; PUT without expiry fields leaves it as it is', async () => {
    const c = await clocked();
    const t0 = c.now();
    const res = await post(c.url, '/files', { token: c.admin, json: { expires_in: 60 } });
    const id = (res.body.url as string).split('/').pop()!;
    await upload(c.url, c.admin, id, DATA);
    expectStatus(
      await put(c.url, `/files/${id}`, {
        token: c.admin,
        json: { file_name: 'renamed.bin', owner_name: ADMIN.username },
      }),
      200,
    );
    expect((await get(c.url, `/files/${id}`, { token: c.admin })).body).toMatchObject({
      file_name: 'renamed.bin',
      expires: iso(t0 + 60_000),
    });
    expectStatus(
      await patch(c.url, `/files/${id}`, { token: c.admin, json: { expires: null } }),
      200,
    );
    c.tick(120);
    const after = await get(c.url, `/files/${id}`, { token: c.admin });
    expectStatus(after, 200);
    expect(after.body.expires).toBeNull();
    expect((await allShares(c.url, c.admin)).map((s) => s.share_id)).toContain(id);
    expect(await storedContent(c.srv, id)).toHaveLength(1);
  });

  it('the sweeper survives a restart: a share that fell due while the server was down is gone before the first answer', async () => {
    const c = await clocked();
    const res = await post(c.url, '/files', {
      token: c.admin,
      json: { file_name: 'while-down.bin', expires_in: 60 },
    });
    const id = (res.body.url as string).split('/').pop()!;
    await upload(c.url, c.admin, id, DATA);
    const keep = await createShareWithContent(c.url, c.admin, 'kept.bin', DATA);
    const link = await makeLink(c.url, c.admin, id);
    await c.srv.close(false);
    c.tick(120);
    // Still there while the server is down.
    expect(await storedContent(c.srv, id)).toHaveLength(1);
    const srv = await startServer({ clock: c.now, dataDir: c.srv.dataDir });
    started.push(srv);
    // Swept during start: no request was needed.
    expect(await storedContent(srv, id)).toEqual([]);
    expect(await storedContent(srv, keep)).toHaveLength(1);
    const admin = await login(srv.url, ADMIN.username, ADMIN.password);
    expectFail(await get(srv.url, `/files/${id}`, { token: admin }), 404);
    expectFail(await get(srv.url, link.path, { headers: JSON_ONLY }), 404);
    expectStatus(await get(srv.url, `/files/${keep}`, { token: admin }), 200);
  });
});

describe('validation', () => {
  let c: Clocked;
  let shareId: string;
  beforeAll(async () => {
    c = await clocked();
    shareId = await createShareWithContent(c.url, c.admin, 'v.bin', DATA);
  });

  const expiryBodies = (now: number): [string, Record<string, unknown>][] => [
    ['both expires and expires_in', { expires_in: 60, expires: iso(now + 86_400_000) }],
    ['expires without a zone', { expires: iso(now + 86_400_000).replace('Z', '') }],
    ['expires in the past', { expires: iso(now - 1000) }],
    ['expires now', { expires: iso(now) }],
    ['expires beyond ten years', { expires: iso(now + (MAX_SECONDS + 60) * 1000) }],
    ['expires not a date', { expires: 'tomorrow' }],
    ['expires a number', { expires: now + 86_400_000 }],
    ['expires_in 0', { expires_in: 0 }],
    ['expires_in -1', { expires_in: -1 }],
    ['expires_in "7d"', { expires_in: '7d' }],
    ['expires_in "60"', { expires_in: '60' }],
    ['expires_in 1.5', { expires_in: 1.5 }],
    ['expires_in beyond ten years', { expires_in: MAX_SECONDS + 1 }],
    ['an unknown field', { expiry: 60 }],
  ];
  const linkBodies: [string, Record<string, unknown>][] = [
    ['max_downloads 0', { max_downloads: 0 }],
    ['max_downloads -1', { max_downloads: -1 }],
    ['max_downloads 1.5', { max_downloads: 1.5 }],
    ['max_downloads "3"', { max_downloads: '3' }],
    ['max_downloads true', { max_downloads: true }],
    ['an empty password', { password: '' }],
    ['a password of 1025 characters', { password: 'x'.repeat(1025) }],
    ['a password that is not a string', { password: 1234 }],
    ['downloads (read-only)', { downloads: 5 }],
    ['a token', { token: 'a'.repeat(32) }],
  ];

  it('POST /files/<id>/links: every bad body is a 400 JSON error and makes no link', async () => {
    const before = (await get(c.url, `/files/${shareId}/links`, { token: c.admin })).body.data;
    const bad = [...expiryBodies(c.now()), ...linkBodies];
    for (const [what, json] of bad) {
      const res = await post(c.url, `/files/${shareId}/links`, { token: c.admin, json });
      expect(res.status, what).toBe(400);
      expectFail(res, 400);
    }
    for (const body of ['[]', '"x"', '{not json']) {
      const res = await post(c.url, `/files/${shareId}/links`, {
        token: c.admin,
        body,
        headers: { 'content-type': 'application/json' },
      });
      expectFail(res, 400);
    }
    const after = (await get(c.url, `/files/${shareId}/links`, { token: c.admin })).body.data;
    expect(after).toEqual(before);
  });

  it('POST /files and PATCH /files/<id>: every bad expiry is a 400 JSON error and changes nothing', async () => {
    const shares = (await allShares(c.url, c.admin)).length;
    for (const [what, json] of expiryBodies(c.now())) {
      const res = await post(c.url, '/files', { token: c.admin, json });
      expect(res.status, what).toBe(400);
      expectFail(res, 400);
      const patched = await patch(c.url, `/files/${shareId}`, { token: c.admin, json });
      expect(patched.status, `PATCH ${what}`).toBe(400);
      expectFail(patched, 400);
    }
    expect(await allShares(c.url, c.admin)).toHaveLength(shares);
    expect((await get(c.url, `/files/${shareId}`, { token: c.admin })).body.expires).toBeNull();
  });

  it('the bounds themselves are accepted: expires_in 1 and ten years, expires with an offset, max_downloads 1, null, a password of 1024 characters', async () => {
    const now = c.now();
    const ok: Record<string, unknown>[] = [
      { expires_in: 1 },
      { expires_in: MAX_SECONDS },
      { expires: iso(now + MAX_SECONDS * 1000) },
      { expires: iso(now + 86_400_000).replace('Z', '+00:00') },
      { expires: null },
      { expires_in: null },
      { max_downloads: 1 },
      { max_downloads: null },
      { password: 'x'.repeat(1024) },
      { password: null },
      {},
    ];
    for (const json of ok) {
      const res = await post(c.url, `/files/${shareId}/links`, { token: c.admin, json });
      expect(res.status, JSON.stringify(json).slice(0, 80)).toBe(201);
    }
    const share = await post(c.url, '/files', { token: c.admin, json: { expires_in: 1 } });
    expectStatus(share, 201);
  });
});

describe('settings: max_expiry and max_downloads', () => {
  let c: Clocked;
  let user: { username: string; password: string; token: string };
  let userShare: string;
  const settings = async () => {
    const res = await get(c.url, '/admin/settings', { token: c.admin });
    expectStatus(res, 200);
    return res.body as Record<string, unknown>;
  };
  const setLimits = async (json: Record<string, unknown>) =>
    expectStatus(await patch(c.url, '/admin/settings', { token: c.admin, json }), 200);

  beforeAll(async () => {
    c = await clocked();
    user = await createUser(c.url, c.admin, PERMS);
    userShare = await createShareWithContent(c.url, user.token, 'u.bin', DATA);
  });

  it('GET /admin/settings has max_expiry and max_downloads, null on a fresh server', async () => {
    expect(await settings()).toEqual({
      default_permissions: [],
      max_expiry: null,
      max_downloads: null,
    });
  });

  it("PATCH sets the limits; PUT with only default_permissions (an old client's body) keeps them; null clears them", async () => {
    await setLimits({ max_expiry: 3600, max_downloads: 5 });
    expect(await settings()).toEqual({
      default_permissions: [],
      max_expiry: 3600,
      max_downloads: 5,
    });
    const old = await put(c.url, '/admin/settings', {
      token: c.admin,
      json: { default_permissions: ['READ'] },
    });
    expectStatus(old, 200);
    expect(old.body).toMatchObject({ status: 'success' });
    expect(await settings()).toEqual({
      default_permissions: ['READ'],
      max_expiry: 3600,
      max_downloads: 5,
    });
    expectStatus(
      await put(c.url, '/admin/settings', {
        token: c.admin,
        json: { default_permissions: [], max_expiry: null, max_downloads: 7 },
      }),
      200,
    );
    expect(await settings()).toEqual({
      default_permissions: [],
      max_expiry: null,
      max_downloads: 7,
    });
    await setLimits({ max_downloads: null });
    expect(await settings()).toMatchObject({ max_expiry: null, max_downloads: null });
    // They are metadata: a restart keeps them.
    await setLimits({ max_expiry: 86400, max_downloads: 9 });
    await c.restart();
    // The user's token outlives the restart (the secret is in the data directory).
    expectStatus(await get(c.url, `/users/${user.username}`, { token: user.token }), 200);
    expect(await settings()).toMatchObject({ max_expiry: 86400, max_downloads: 9 });
    await setLimits({ max_expiry: null, max_downloads: null });
  });

  it('invalid limits are a 400 JSON error and change nothing; ADMIN only', async () => {
    await setLimits({ max_expiry: 3600, max_downloads: 5 });
    const bad: Record<string, unknown>[] = [
      { max_expiry: 0 },
      { max_expiry: -1 },
      { max_expiry: 1.5 },
      { max_expiry: '3600' },
      { max_expiry: MAX_SECONDS + 1 },
      { max_expiry: true },
      { max_downloads: 0 },
      { max_downloads: -1 },
      { max_downloads: 1.5 },
      { max_downloads: '5' },
      { max_downloads: [] },
      { max_links: 3 },
    ];
    for (const json of bad) {
      expectFail(await patch(c.url, '/admin/settings', { token: c.admin, json }), 400);
      expectFail(
        await put(c.url, '/admin/settings', {
          token: c.admin,
          json: { default_permissions: ['LIST'], ...json },
        }),
        400,
      );
    }
    expectFail(
      await put(c.url, '/admin/settings', { token: c.admin, json: { max_expiry: 60 } }),
      400,
    );
    expect(await settings()).toEqual({
      default_permissions: [],
      max_expiry: 3600,
      max_downloads: 5,
    });
    expectFail(
      await patch(c.url, '/admin/settings', { token: user.token, json: { max_expiry: null } }),
      403,
    );
    expectFail(await patch(c.url, '/admin/settings', { json: { max_expiry: null } }), 401);
    expectFail(await get(c.url, '/admin/settings', { token: user.token }), 403);
    expect(await settings()).toMatchObject({ max_expiry: 3600, max_downloads: 5 });
  });

  it("a user's link without limits gets expires = now + max_expiry and max_downloads; asking for more (or for never) is a 400 naming the limit", async () => {
    await setLimits({ max_expiry: 3600, max_downloads: 5 });
    const now = c.now();
    const made = await makeLink(c.url, user.token, userShare);
    expect(made.res.body).toMatchObject({
      expires: iso(now + 3_600_000),
      max_downloads: 5,
      downloads_left: 5,
    });
    const tooMuch: [Record<string, unknown>, RegExp][] = [
      [{ expires_in: 7200 }, /3600/],
      [{ expires_in: 3601 }, /3600/],
      [{ expires: iso(now + 7_200_000) }, /3600/],
      [{ expires: null }, /3600/],
      [{ expires_in: null }, /3600/],
      [{ max_downloads: 6 }, /5/],
      [{ max_downloads: null }, /5/],
    ];
    for (const [json, limit] of tooMuch) {
      const res = await post(c.url, `/files/${userShare}/links`, { token: user.token, json });
      expectFail(res, 400);
      expect(res.body.message, JSON.stringify(json)).toMatch(limit);
    }
    // Within the limits is fine.
    const within = await makeLink(c.url, user.token, userShare, {
      expires_in: 3600,
      max_downloads: 5,
    });
    expect(within.res.body).toMatchObject({ expires: iso(now + 3_600_000), max_downloads: 5 });
    const less = await makeLink(c.url, user.token, userShare, {
      expires_in: 60,
      max_downloads: 2,
    });
    expect(less.res.body).toMatchObject({ expires: iso(now + 60_000), max_downloads: 2 });
  });

  it("a user's new share without an expiry gets now + max_expiry; a later one or never is a 400", async () => {
    await setLimits({ max_expiry: 3600, max_downloads: 5 });
    const now = c.now();
    const id = await createShare(c.url, user.token, 'capped.bin');
    expect((await get(c.url, `/files/${id}`, { token: user.token })).body.expires).toBe(
      iso(now + 3_600_000),
    );
    for (const json of [{ expires_in: 7200 }, { expires: null }, { expires_in: null }]) {
      const res = await post(c.url, '/files', { token: user.token, json });
      expectFail(res, 400);
      expect(res.body.message).toMatch(/3600/);
      expectFail(await patch(c.url, `/files/${id}`, { token: user.token, json }), 400);
    }
    expect((await get(c.url, `/files/${id}`, { token: user.token })).body.expires).toBe(
      iso(now + 3_600_000),
    );
    // PUT without expiry fields (an old client) still works and keeps the expiry.
    expectStatus(
      await put(c.url, `/files/${id}`, {
        token: user.token,
        json: { file_name: 'capped-2.bin', owner_name: user.username },
      }),
      200,
    );
    expect((await get(c.url, `/files/${id}`, { token: user.token })).body).toMatchObject({
      file_name: 'capped-2.bin',
      expires: iso(now + 3_600_000),
    });
  });

  it('anonymous callers are held to max_expiry too', async () => {
    await setLimits({ max_expiry: 3600, max_downloads: 5 });
    await setDefaultPermissions(c.url, c.admin, ['CREATE', 'READ']);
    try {
      const now = c.now();
      const res = await post(c.url, '/files', { json: { file_name: 'anon.bin' } });
      expectStatus(res, 201);
      const id = (res.body.url as string).split('/').pop()!;
      expect((await get(c.url, `/files/${id}`)).body.expires).toBe(iso(now + 3_600_000));
      expectFail(await post(c.url, '/files', { json: { expires_in: 7200 } }), 400);
    } finally {
      await setDefaultPermissions(c.url, c.admin, []);
    }
  });

  it('ADMIN is not limited', async () => {
    await setLimits({ max_expiry: 3600, max_downloads: 5 });
    const now = c.now();
    const id = await createShareWithContent(c.url, c.admin, 'admin.bin', DATA);
    expect((await get(c.url, `/files/${id}`, { token: c.admin })).body.expires).toBeNull();
    const free = await makeLink(c.url, c.admin, id);
    expect(free.res.body).toMatchObject({ expires: null, max_downloads: null });
    const big = await makeLink(c.url, c.admin, userShare, {
      expires_in: 7200,
      max_downloads: 1000,
    });
    expect(big.res.body).toMatchObject({ expires: iso(now + 7_200_000), max_downloads: 1000 });
    const share = await post(c.url, '/files', { token: c.admin, json: { expires: null } });
    expectStatus(share, 201);
  });

  it('changing a limit does not touch existing shares and links', async () => {
    await setLimits({ max_expiry: null, max_downloads: null });
    const now = c.now();
    const id = await createShare(c.url, user.token, 'before.bin');
    const made = await makeLink(c.url, user.token, userShare);
    expect(made.res.body).toMatchObject({ expires: null, max_downloads: null });
    await setLimits({ max_expiry: 60, max_downloads: 1 });
    expect(await linkOf(c.url, user.token, made.id)).toMatchObject({
      expires: null,
      max_downloads: null,
    });
    expect((await get(c.url, `/files/${id}`, { token: user.token })).body.expires).toBeNull();
    c.tick(120);
    expectStatus(await get(c.url, `/files/${id}`, { token: user.token }), 200);
    for (let i = 0; i < 2; i++) expectStatus(await get(c.url, `${made.path}?download`), 200);
    await setLimits({ max_expiry: null, max_downloads: null });
  });
});
