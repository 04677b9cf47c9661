// API.md "Pagination": GET /files and GET /users.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createShare, createUser, expectFail, expectStatus, get } from '../helpers/http.js';
import { ADMIN, login, startServer, type TestServer } from '../helpers/server.js';

const COUNT = 35;

let srv: TestServer;
let base: string;
let admin: string;
let ids: string[];

const ids_of = (body: { data: Array<{ share_id: string }> }) => body.data.map((s) => s.share_id);

beforeAll(async () => {
  srv = await startServer();
  base = srv.url;
  admin = await login(base, ADMIN.username, ADMIN.password);
});

afterAll(async () => {
  await srv?.close();
});

describe('an empty list', () => {
  it('page 1 → 200 with data [] and no prev/next', async () => {
    const res = await get(base, '/files', { token: admin });
    expectStatus(res, 200);
    expect(res.body).toMatchObject({ data: [], prev: null, next: null });
    expect(typeof res.body.pages).toBe('number');
    expect([0, 1]).toContain(res.body.pages);
    expectStatus(await get(base, '/files?page=1&per_page=5', { token: admin }), 200);
  });

  it('page 2 → 404', async () => {
    expectFail(await get(base, '/files?page=2', { token: admin }), 404);
  });
});

describe('a list of 35 shares', () => {
  beforeAll(async () => {
    // Created one after another so their order is the creation order.
    ids = [];
    for (let i = 0; i < COUNT; i++)
      ids.push(await createShare(base, admin, `f${String(i).padStart(2, '0')}.txt`));
  });

  it('defaults: page 1, 15 per page, oldest first', async () => {
    const res = await get(base, '/files', { token: admin });
    expectStatus(res, 200);
    expect(
      Object.keys(res.body)
        .filter((k) => k !== 'status')
        .sort(),
    ).toEqual(['data', 'next', 'pages', 'prev']);
    expect(res.body).toMatchObject({ prev: null, next: 2, pages: 3 });
    expect(ids_of(res.body)).toEqual(ids.slice(0, 15));
    // Each entry is a whole share.
    expect(res.body.data[0]).toMatchObject({
      share_id: ids[0],
      file_name: 'f00.txt',
      owner_name: ADMIN.username,
      initialized: false,
      locked: false,
      size: null,
      create_date: expect.any(String),
    });
  });

  it('page 2 and the last page', async () => {
    const p2 = await get(base, '/files?page=2', { token: admin });
    expectStatus(p2, 200);
    expect(p2.body).toMatchObject({ prev: 1, next: 3, pages: 3 });
    expect(ids_of(p2.body)).toEqual(ids.slice(15, 30));
    const p3 = await get(base, '/files?page=3', { token: admin });
    expectStatus(p3, 200);
    expect(p3.body).toMatchObject({ prev: 2, next: null, pages: 3 });
    expect(ids_of(p3.body)).toEqual(ids.slice(30));
  });

  it('a page past the last → 404', async () => {
    expectFail(await get(base, '/files?page=4', { token: admin }), 404);
    expectFail(await get(base, '/files?page=1000', { token: admin }), 404);
    expectFail(await get(base, '/files?page=2&per_page=35', { token: admin }), 404);
  });

  // A page number past 2^53 is named in the 404 as it was sent, not as the nearest double.
  it('a page past 2^53 → 404 naming that page', async () => {
    for (const page of ['9007199254740993', '99999999999999999999999', '00012345678901234567891']) {
      const res = await get(base, `/files?page=${page}`, { token: admin });
      expectFail(res, 404);
      expect(res.body.message).toBe(`Page ${page.replace(/^0+/, '')} is past the last page (3)`);
    }
  });

  it('per_page: exact fit, 1, and the maximum of 1000', async () => {
    const fit = await get(base, `/files?per_page=${COUNT}`, { token: admin });
    expect(fit.body).toMatchObject({ prev: null, next: null, pages: 1 });
    expect(ids_of(fit.body)).toEqual(ids);
    const one = await get(base, '/files?per_page=1&page=35', { token: admin });
    expectStatus(one, 200);
    expect(one.body).toMatchObject({ prev: 34, next: null, pages: 35 });
    expect(ids_of(one.body)).toEqual([ids[34]]);
    const max = await get(base, '/files?per_page=1000', { token: admin });
    expectStatus(max, 200);
    expect(max.body).toMatchObject({ prev: null, next: null, pages: 1 });
    expect(ids_of(max.body)).toEqual(ids);
  });

  it('walking every page of 7 gives each share once, in order', async () => {
    const seen: string[] = [];
    let page: number | null = 1;
    let pages = 0;
    while (page !== null) {
      const res = await get(base, `/files?per_page=7&page=${page}`, { token: admin });
      expectStatus(res, 200);
      pages = res.body.pages;
      seen.push(...ids_of(res.body));
      page = res.body.next;
    }
    expect(pages).toBe(5);
    expect(seen).toEqual(ids);
  });

  it('per_page over 1000 → 400', async () => {
    expectFail(await get(base, '/files?per_page=1001', { token: admin }), 400);
    expectFail(await get(base, '/files?per_page=100000', { token: admin }), 400);
  });

  for (const query of [
    'page=0',
    'page=-1',
    'page=abc',
    'page=1.5',
    'page=',
    'per_page=0',
    'per_page=-5',
    'per_page=ten',
    'per_page=2.5',
    'per_page=',
  ]) {
    it(`${query} → 400`, async () => {
      expectFail(await get(base, `/files?${query}`, { token: admin }), 400);
    });
  }

  it('needs LIST: 403 without it', async () => {
    const user = await createUser(base, admin, ['READ', 'CREATE']);
    expectFail(await get(base, '/files', { token: user.token }), 403);
  });
});

describe('GET /users is paginated the same way', () => {
  it('oldest first, 15 per page by default, with prev/next/pages and edges', async () => {
    const names = [ADMIN.username];
    // The LIST-less user made above already exists; read the current list first.
    const start = await get(base, '/users?per_page=1000', { token: admin });
    expectStatus(start, 200);
    names.splice(0, 1, ...start.body.data.map((u: { username: string }) => u.username));
    expect(names[0]).toBe(ADMIN.username);
    while (names.length < 20) names.push((await createUser(base, admin, ['READ'])).username);

    const p1 = await get(base, '/users', { token: admin });
    expectStatus(p1, 200);
    expect(p1.body).toMatchObject({ prev: null, next: 2, pages: 2 });
    expect(p1.body.data.map((u: { username: string }) => u.username)).toEqual(names.slice(0, 15));
    for (const u of p1.body.data)
      expect(Object.keys(u).sort()).toEqual([
        'permissions',
        'quota',
        'register_date',
        'used',
        'username',
      ]);

    const p2 = await get(base, '/users?page=2', { token: admin });
    expect(p2.body).toMatchObject({ prev: 1, next: null, pages: 2 });
    expect(p2.body.data.map((u: { username: string }) => u.username)).toEqual(names.slice(15));

    expectFail(await get(base, '/users?page=3', { token: admin }), 404);
    expectFail(await get(base, '/users?per_page=1001', { token: admin }), 400);
    expectFail(await get(base, '/users?page=0', { token: admin }), 400);
    expectFail(await get(base, '/users?per_page=x', { token: admin }), 400);
    const ten = await get(base, '/users?per_page=10&page=2', { token: admin });
    expect(ten.body).toMatchObject({ prev: 1, next: null, pages: 2 });
    expect(ten.body.data).toHaveLength(10);
  });
});
