// The PostgreSQL metadata store against a real throwaway cluster. Most tests open TWO stores on
// one database, standing in for two servers: every rule the embedded store keeps by applying
// one change at a time must hold between them. One test runs the same changes on LowdbStore and
// PostgresStore and requires every answer to be strictly equal.
import { createHash, randomBytes, randomUUID } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Client } from 'pg';
import { RateLimiterRes } from 'rate-limiter-flexible';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  DuplicateUserError,
  LinkUsedUpError,
  MissingRecordError,
  type LinkRecord,
  type MetadataStore,
  type NewShare,
  type Settings,
  type UserRecord,
} from '../../src/server/store/index.js';
import type { Permission } from '../../src/shared/permissions.js';
import { LowdbStore } from '../../src/server/store/lowdb.js';
import {
  EACH_SHARE_PAGE,
  MIGRATIONS,
  PostgresStore,
  type PostgresStoreOptions,
} from '../../src/server/store/postgres.js';
import { createDatabase, startPostgres, type PgCluster } from '../helpers/postgres.js';

let cluster: PgCluster;
beforeAll(async () => {
  cluster = await startPostgres();
});
afterAll(async () => {
  await cluster?.stop();
});

const opened: PostgresStore[] = [];
const logs: string[] = [];
afterEach(async () => {
  for (const store of opened.splice(0)) await store.close();
  logs.length = 0;
});

async function openStore(url: string, options: PostgresStoreOptions = {}) {
  const store = await PostgresStore.open(url, { log: (line) => logs.push(line), ...options });
  opened.push(store);
  return store;
}

/** Two stores on one fresh database: two servers. */
async function twoStores(options: PostgresStoreOptions = {}) {
  const url = await createDatabase(cluster.adminUrl);
  return { url, a: await openStore(url, options), b: await openStore(url, options) };
}

async function sql<R>(url: string, text: string, values: unknown[] = []): Promise<R[]> {
  const client = new Client({ connectionString: url });
  await client.connect();
  try {
    return (await client.query(text, values)).rows as R[];
  } finally {
    await client.end();
  }
}

function within<T>(promise: Promise<T>, ms = 10_000): Promise<T> {
  return Promise.race([
    promise,
    sleep(ms).then(() => {
      throw new Error(`still waiting after ${ms} ms (a deadlock?)`);
    }),
  ]);
}

async function collect<T>(items: AsyncIterable<T>): Promise<T[]> {
  const all: T[] = [];
  for await (const item of items) all.push(item);
  return all;
}

const DATE = '2026-01-02T03:04:05.678000';

function user(username: string, extra: Partial<UserRecord> = {}): UserRecord {
  return {
    id: randomUUID(),
    username,
    permissions: ['LIST', 'READ'],
    register_date: DATE,
    password_hash: 'scrypt$hash',
    token_gen: 0,
    quota: null,
    ...extra,
  };
}

function share(extra: Partial<NewShare> = {}): NewShare {
  return {
    share_id: randomUUID(),
    file_name: 'report.pdf',
    owner_id: null,
    initialized: false,
    locked: false,
    create_date: DATE,
    size: null,
    sha256: null,
    expires: null,
    ...extra,
  };
}

function link(shareId: string, extra: Partial<LinkRecord> = {}): LinkRecord {
  return {
    id: randomBytes(8).toString('hex'),
    share_id: shareId,
    token_sha256: createHash('sha256').update(randomBytes(16)).digest('hex'),
    created_by: null,
    create_date: DATE,
    expires: null,
    max_downloads: null,
    downloads: 0,
    password_hash: null,
    ...extra,
  };
}

describe('start-up', () => {
  it('two stores opening a fresh database together apply each migration once; reopening applies none', async () => {
    const url = await createDatabase(cluster.adminUrl);
    await Promise.all([openStore(url), openStore(url), openStore(url)]);
    const applied = await sql<{ version: number; applied_at: Date }>(
      url,
      'SELECT version, applied_at FROM fshare_migrations ORDER BY version',
    );
    expect(applied.map((r) => r.version)).toEqual(MIGRATIONS.map((_, i) => i + 1));
    expect(logs.filter((l) => /applied PostgreSQL schema migration/.test(l))).toHaveLength(
      MIGRATIONS.length,
    );

    logs.length = 0;
    await openStore(url);
    expect(logs).toEqual([]);
    const again = await sql<{ version: number; applied_at: Date }>(
      url,
      'SELECT version, applied_at FROM fshare_migrations ORDER BY version',
    );
    expect(again).toEqual(applied);
  });

  // Version 2 makes names that differ only in case one name (a unique index on lower()). A
  // database that already holds such a pair must still open, keeping both users; a fresh one
  // refuses the second spelling between servers too.
  it('names differing only in case: refused on a fresh database, an old pair kept on upgrade', async () => {
    const fresh = await createDatabase(cluster.adminUrl);
    const [a, b] = await Promise.all([openStore(fresh), openStore(fresh)]);
    const results = await Promise.allSettled([a.addUser(user('Casey')), b.addUser(user('casey'))]);
    expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(1);
    expect(results.find((r) => r.status === 'rejected')).toMatchObject({
      reason: expect.any(DuplicateUserError),
    });

    const old = await createDatabase(cluster.adminUrl);
    await openStore(old);
    await sql(old, 'DROP INDEX fshare_users_username_lower');
    await sql(old, 'DELETE FROM fshare_migrations WHERE version >= 2');
    const pair = [user('pair'), user('PAIR')];
    for (const u of pair)
      await sql(
        old,
        `INSERT INTO fshare_users (id, username, permissions, register_date, password_hash, token_gen)
         VALUES ($1, $2, $3, $4, $5, $6)`,
        [u.id, u.username, u.permissions, u.register_date, u.password_hash, u.token_gen],
      );
    const upgraded = await openStore(old);
    expect((await upgraded.getUser('pair'))?.id).toBe(pair[0]!.id);
    expect((await upgraded.getUser('PAIR'))?.id).toBe(pair[1]!.id);

    // Found from outside: with the pair kept (and so no index), every other case twin was taken:
    // a new "ERIN" beside "erin", a rename to "eriN", an "Admin". Still refused, and between
    // servers at once too; renaming a user to its own name in another case is no twin.
    const other = await openStore(old);
    const erin = user('erin');
    await upgraded.addUser(erin);
    await expect(upgraded.addUser(user('ERIN'))).rejects.toBeInstanceOf(DuplicateUserError);
    await expect(upgraded.addUser(user('Pair'))).rejects.toBeInstanceOf(DuplicateUserError);
    const frank = user('frank');
    await upgraded.addUser(frank);
    await expect(upgraded.updateUser(frank.id, { username: 'eriN' })).rejects.toBeInstanceOf(
      DuplicateUserError,
    );
    await upgraded.updateUser(frank.id, { username: 'Frank' });
    expect((await upgraded.getUser('Frank'))?.id).toBe(frank.id);
    for (let round = 0; round < 5; round++) {
      const racing = await Promise.allSettled([
        upgraded.addUser(user(`Twin${round}`)),
        other.addUser(user(`tWIN${round}`)),
      ]);
      expect(racing.filter((r) => r.status === 'fulfilled')).toHaveLength(1);
    }
    // A user of the kept pair may still be changed with its own name in the change (a PUT names
    // it): no rename, so no twin (found from outside: 409 once the check came in).
    await upgraded.updateUser(pair[1]!.id, { username: 'PAIR', quota: 5 });
    expect((await upgraded.getUser('PAIR'))?.quota).toBe(5);
    await expect(upgraded.updateUser(pair[1]!.id, { username: 'Pair' })).rejects.toBeInstanceOf(
      DuplicateUserError,
    );
    expect((await upgraded.getUser('erin'))?.id).toBe(erin.id);
    expect(await upgraded.getUser('ERIN')).toBeUndefined();
    expect(await upgraded.getUser('eriN')).toBeUndefined();
  });

  it('refuses a database whose schema is newer than this fshare', async () => {
    const url = await createDatabase(cluster.adminUrl);
    await openStore(url);
    await sql(url, 'INSERT INTO fshare_migrations (version) VALUES ($1)', [MIGRATIONS.length + 1]);
    await expect(PostgresStore.open(url, { log: () => undefined })).rejects.toThrow(
      /newer than this fshare knows.*upgrade fshare/,
    );
  });

  it('an unreachable server is named by host and port, never with the password', async () => {
    // A port nobody listens on.
    const free = await new Promise<number>((resolve) => {
      const server = createServer().listen(0, '127.0.0.1', () => {
        const { port } = server.address() as { port: number };
        server.close(() => resolve(port));
      });
    });
    const err = await PostgresStore.open(`postgres://fshare:s3cret-pw@127.0.0.1:${free}/fshare`, {
      log: () => undefined,
    }).catch((e: Error) => e);
    expect(err).toBeInstanceOf(Error);
    expect((err as Error).message).toContain(`cannot connect to PostgreSQL at 127.0.0.1:${free}`);
    expect((err as Error).message).toMatch(/ECONNREFUSED/);
    expect((err as Error).message).not.toContain('s3cret-pw');
  });
});

describe('the same answers as the embedded store', () => {
  /** A run of changes, including refused ones, and then every read; both stores must agree. */
  async function scenario(store: MetadataStore, now: number) {
    const errors: string[] = [];
    const refused = async (change: Promise<unknown>) => {
      const err = await change.then(
        () => null,
        (e: Error) => e,
      );
      errors.push(err ? `${err.constructor.name}: ${err.message}` : 'accepted');
    };
    const alice = user('alice', { id: 'u-alice', quota: 1000 });
    const bob = user('bob', { id: 'u-bob', legacy_tokens: true });
    const carol = user('carol', { id: 'u-carol', legacy_tokens: true });
    const dave = user('dave', { id: 'u-dave', legacy_tokens: true, permissions: ['ADMIN'] });
    for (const u of [alice, bob, carol, dave]) await store.addUser(u);
    await refused(store.addUser(user('alice')));
    await refused(store.addUser(user('alex', { id: 'u-bob' })));
    await refused(store.addUser(user('bob', { id: 'u-bob' })));

    const s1 = share({ share_id: 'a1', owner_id: alice.id });
    // As fshare 0.1 wrote them: no sha256, no expires.
    const { sha256: _s, expires: _e, ...old } = share({ share_id: 'a2', owner_id: bob.id });
    const s3 = share({ share_id: 'a3' });
    const s4 = share({ share_id: 'a4', owner_id: alice.id, expires: '2099-01-01T00:00:00.000Z' });
    const s5 = share({ share_id: 'a5', owner_id: carol.id, size: 7, initialized: true });
    s5.file_name = 'nul\u0000byte \u{1F600}'; // any well-formed name, NUL included
    for (const s of [s1, old, s3, s4, s5]) await store.addShare(s);
    await refused(store.addShare(share({ share_id: 'a3' })));
    await store.updateShare('a1', { size: 100, initialized: true, sha256: 'ab'.repeat(32) });
    await store.updateShare('a2', { blob: 'blob-a2', size: 40, initialized: true });
    await store.updateShare('a3', { expires: new Date(now - 1000).toISOString() });
    await store.updateShare('a5', { owner_id: alice.id, expires: new Date(now).toISOString() });
    await store.updateShare('a4', {});
    await refused(store.updateShare('nope', { locked: true }));
    await refused(store.updateShare('nope', {}));
    await refused(store.deleteShare('nope'));

    // Fixed token hashes, so that both stores are given the same links.
    const made = (id: string, shareId: string, extra: Partial<LinkRecord>) =>
      link(shareId, { id, token_sha256: createHash('sha256').update(id).digest('hex'), ...extra });
    const l1 = made('l1', 'a1', { created_by: alice.id });
    const l2 = made('l2', 'a2', { created_by: bob.id, max_downloads: 2 });
    const l3 = made('l3', 'a3', { created_by: carol.id, expires: '2099-01-01T00:00:00.000Z' });
    const l4 = made('l4', 'a1', { created_by: bob.id, password_hash: 'pw' });
    for (const l of [l1, l2, l3, l4]) await store.addLink(l);
    await refused(store.addLink(link('gone', { id: 'l9' })));
    await refused(store.addLink(link('gone', { id: 'l1' })));
    await refused(store.addLink(link('a1', { id: 'l1' })));
    await refused(store.addLink(link('a1', { token_sha256: l2.token_sha256 })));
    await store.countDownload('l2');
    await store.countDownload('l2');
    await refused(store.countDownload('l2'));
    await refused(store.countDownload('nope'));
    await store.countDownload('l1');
    await store.deleteLink('l4');
    await refused(store.deleteLink('l4'));

    await store.updateUser(bob.id, { username: 'robert' }); // a rename ends legacy tokens
    await store.updateUser(carol.id, { legacy_tokens: false, token_gen: 2 });
    // The last administrator keeps ADMIN and stays; once bob has it too, dave may lose it.
    const demoteDave = { username: 'dave', quota: 5, permissions: ['READ'] as Permission[] };
    await refused(store.updateUser(dave.id, demoteDave));
    await refused(store.deleteUser(dave.id));
    await store.updateUser(bob.id, { permissions: ['ADMIN', 'LIST'] });
    await store.updateUser(dave.id, demoteDave);
    await refused(store.updateUser(bob.id, { permissions: [] }));
    await store.updateUser(alice.id, {});
    await refused(store.updateUser(carol.id, { username: 'robert', token_gen: 9 }));
    await refused(store.updateUser('nobody', { quota: 1 }));
    await refused(store.updateUser('nobody', {}));
    await store.deleteUser(carol.id); // her link l3 goes; her shares keep her id
    await refused(store.deleteUser(carol.id));
    // A link whose maker is gone when it is stored would outlive them: refused.
    await refused(store.addLink(made('l5', 'a1', { created_by: carol.id })));
    // Keys with a NUL (from a URL, say) match nothing. Each change is made when its refusal is
    // awaited: made all at once, the later ones' rejections waited unhandled for the first.
    for (const change of [
      () => store.updateUser('u\u0000', {}),
      () => store.deleteUser('u\u0000'),
      () => store.updateShare('a1\u0000', { locked: true }),
      () => store.deleteShare('a1\u0000'),
      () => store.deleteLink('l1\u0000'),
      () => store.countDownload('l1\u0000'),
    ])
      await refused(change());
    await store.addUser(user('carol', { id: 'u-carol-2' })); // not the owner of her shares
    await store.deleteShare('a3');

    await store.setSettings({ default_permissions: ['READ', 'LIST'], max_expiry: 3600 });
    await store.revoke('j-old', Math.floor(now / 1000) - 10);
    const revokedBefore = await store.isRevoked('j-old'); // until the next revocation
    await store.revoke('j-1', Math.floor(now / 1000) + 3600);
    await store.revoke('j-2', Math.floor(now / 1000) + 3600);

    const ids = ['u-alice', 'u-bob', 'u-carol', 'u-carol-2', 'u-dave', 'nobody', 'u-\u0000'];
    const names = ['alice', 'bob', 'robert', 'carol', 'dave', 'nobody', 'alice\u0000'];
    const shares = ['a1', 'A2', 'a3', 'a4', 'a5', 'a1\u0000'];
    const byId = <T extends { share_id: string }>(list: T[]) =>
      [...list].sort((x, y) => x.share_id.localeCompare(y.share_id));
    return {
      errors,
      users: await store.listUsers(0, 100),
      usersPage: await store.listUsers(1, 2),
      userCount: await store.userCount(),
      byName: await Promise.all(names.map((n) => store.getUser(n))),
      byId: await Promise.all(ids.map((id) => store.getUserById(id))),
      usage: await Promise.all(ids.map((id) => store.usageOf(id))),
      shares: await store.listShares(0, 100),
      sharesPage: await store.listShares(1, 2),
      shareCount: await store.shareCount(),
      each: await collect(store.eachShare()),
      getShare: await Promise.all(shares.map((id) => store.getShare(id))),
      // The embedded store lists these in the order expiries were set; here, oldest share first.
      expired: byId(await store.expiredShares(now)),
      nextExpiry: await store.nextExpiry(),
      links: await store.listLinks(),
      linksOf: await Promise.all(shares.map((id) => store.listLinks(id))),
      ownedLinks: await Promise.all(ids.map((id) => store.listOwnedLinks(id))),
      link: await Promise.all(['l1', 'l2', 'l3', 'l4', 'l1\u0000'].map((id) => store.getLink(id))),
      byHash: await Promise.all([l1, l2, l3].map((l) => store.getLinkByTokenHash(l.token_sha256))),
      noHash: await store.getLinkByTokenHash('\u0000'),
      settings: await store.getSettings(),
      revoked: [
        revokedBefore,
        ...(await Promise.all(['j-old', 'j-1', 'j-2', 'x\u0000'].map((j) => store.isRevoked(j)))),
      ],
    };
  }

  /**
   * LowdbStore as it is: a refused change throws synchronously, and a change made right after
   * the previous one resolved waits for some later change to be written (flush() hands back the
   * write loop that is just ending); so each call is made a promise and followed by a macrotask.
   */
  function spaced(store: MetadataStore): MetadataStore {
    const tick = () => new Promise((resolve) => setImmediate(resolve));
    return new Proxy(store, {
      get(target, name, receiver) {
        const value = Reflect.get(target, name, receiver) as unknown;
        if (typeof value !== 'function' || name === 'eachShare') return value;
        return async (...args: unknown[]) => {
          try {
            return await (value as (...a: unknown[]) => unknown).apply(target, args);
          } finally {
            await tick();
          }
        };
      },
    });
  }

  it('every record, list and refusal is strictly equal to LowdbStore’s', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'fshare-lowdb-'));
    try {
      const lowdb = await LowdbStore.open(dir, { log: () => undefined });
      const now = Date.now();
      const expected = await scenario(spaced(lowdb), now);
      await lowdb.close();
      const { a } = await twoStores();
      const actual = await scenario(a, now);
      expect(actual).toStrictEqual(expected);
      // And what the scenario was meant to show, spelled out:
      // GET /links of a user, in one query (found: one query per link in the store, so another
      // user's 3000 links made it take 1.4 s): alice owns a1 (l1) and a5, bob a2 (l2).
      expect(actual.ownedLinks.map((links) => links.map((l) => l.id))).toEqual([
        ['l1'],
        ['l2'],
        [],
        [],
        [],
        [],
        [],
      ]);
      expect(actual.errors).toEqual([
        'DuplicateUserError: A user with this name already exists',
        'Error: user id already in use',
        'DuplicateUserError: A user with this name already exists',
        'Error: share id already in use',
        'MissingRecordError: No share with this id',
        'MissingRecordError: No share with this id',
        'MissingRecordError: No share with this id',
        'MissingRecordError: No share with this id',
        'MissingRecordError: No share with this id',
        'Error: link id already in use',
        'Error: link id already in use',
        'LinkUsedUpError: This link has no downloads left',
        'MissingRecordError: No link with this id',
        'MissingRecordError: No link with this id',
        ...Array<string>(3).fill(
          'LastAdminError: This would leave the server without an administrator: give another user ADMIN first',
        ),
        'DuplicateUserError: A user with this name already exists',
        'MissingRecordError: No user with this name',
        'MissingRecordError: No user with this name',
        'MissingRecordError: No user with this name',
        'MissingRecordError: No user with this name', // the link of a deleted maker
        'MissingRecordError: No user with this name',
        'MissingRecordError: No user with this name',
        'MissingRecordError: No share with this id',
        'MissingRecordError: No share with this id',
        'MissingRecordError: No link with this id',
        'MissingRecordError: No link with this id',
      ]);
      const [bob, carolsShare] = [actual.byId[1]!, actual.getShare[4]!];
      expect(bob.username).toBe('robert');
      expect('legacy_tokens' in bob).toBe(false);
      expect(actual.byId[4]!.legacy_tokens).toBe(true); // "renamed" to its own name
      expect(actual.getShare[1]).not.toHaveProperty('sha256');
      expect(actual.getShare[1]).toMatchObject({ blob: 'blob-a2', owner_name: 'robert' });
      expect(actual.getShare[0]).not.toHaveProperty('blob');
      expect(carolsShare).toMatchObject({ owner_name: 'alice', file_name: 'nul\u0000byte 😀' });
      expect(actual.links.map((l) => l.id)).toEqual(['l1', 'l2']);
      expect(actual.revoked).toEqual([true, false, true, true, false]);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe('rules between two servers', () => {
  it('of 20 users of one name added at once through both stores, exactly one is added', async () => {
    const { a, b } = await twoStores();
    const results = await Promise.allSettled(
      Array.from({ length: 20 }, (_, i) => (i % 2 ? a : b).addUser(user('same'))),
    );
    expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(1);
    for (const r of results.filter((r) => r.status === 'rejected'))
      expect((r as PromiseRejectedResult).reason).toBeInstanceOf(DuplicateUserError);
    expect(await a.userCount()).toBe(1);
  });

  it('a rename onto a taken name is refused and changes nothing', async () => {
    const { a, b } = await twoStores();
    const ann = user('ann');
    const ben = user('ben');
    await a.addUser(ann);
    await b.addUser(ben);
    await expect(b.updateUser(ben.id, { username: 'ann', token_gen: 7 })).rejects.toBeInstanceOf(
      DuplicateUserError,
    );
    expect(await a.getUserById(ben.id)).toStrictEqual(ben);
    expect(await a.getUser('ann')).toStrictEqual(ann);
  });

  it('40 downloads at once through both stores of a link allowing 5: exactly 5 are counted', async () => {
    const { a, b } = await twoStores();
    const s = share();
    await a.addShare(s);
    const l = link(s.share_id, { max_downloads: 5 });
    await b.addLink(l);
    const results = await Promise.allSettled(
      Array.from({ length: 40 }, (_, i) => (i % 2 ? a : b).countDownload(l.id)),
    );
    expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(5);
    for (const r of results.filter((r) => r.status === 'rejected'))
      expect((r as PromiseRejectedResult).reason).toBeInstanceOf(LinkUsedUpError);
    expect((await a.getLink(l.id))!.downloads).toBe(5);
  });

  it('a revocation and a token generation written by one store are seen by the other at once', async () => {
    const { a, b } = await twoStores();
    const u = user('tok');
    await a.addUser(u);
    await a.updateUser(u.id, { token_gen: 3 });
    expect((await b.getUserById(u.id))!.token_gen).toBe(3);
    const exp = Math.floor(Date.now() / 1000) + 60;
    expect(await b.isRevoked('jti-1')).toBe(false);
    await a.revoke('jti-1', exp);
    expect(await b.isRevoked('jti-1')).toBe(true);
  });

  it('revocations made together on both stores all land; expired ones are forgotten', async () => {
    const { a, b } = await twoStores();
    const now = Math.floor(Date.now() / 1000);
    for (let i = 0; i < 10; i++) await a.revoke(`old-${i}`, now - 5);
    await Promise.all(
      Array.from({ length: 20 }, (_, i) => (i % 2 ? a : b).revoke(`new-${i}`, now + 60)),
    );
    for (let i = 0; i < 20; i++) expect(await a.isRevoked(`new-${i}`)).toBe(true);
    for (let i = 0; i < 10; i++) expect(await b.isRevoked(`old-${i}`)).toBe(false);
  });

  it('both stores share one JWT secret, made by whichever came first, kept across restarts', async () => {
    const url = await createDatabase(cluster.adminUrl);
    const [a, b] = await Promise.all([openStore(url), openStore(url)]);
    const [first, second] = await Promise.all([a.sharedSecret(), b.sharedSecret()]);
    expect(first).toMatch(/^[A-Za-z0-9_-]{64}$/);
    expect(second).toBe(first);
    await a.close();
    expect(await (await openStore(url)).sharedSecret()).toBe(first);
  });

  it('a limiter counts the points consumed through either store', async () => {
    const { a, b } = await twoStores();
    const viaA = a.limiter('login', 5, 60);
    const viaB = b.limiter('login', 5, 60);
    await viaA.consume('10.0.0.1', 2);
    expect((await viaB.get('10.0.0.1'))!.consumedPoints).toBe(2);
    const results = await Promise.allSettled(
      Array.from({ length: 10 }, (_, i) => (i % 2 ? viaA : viaB).consume('10.0.0.1')),
    );
    expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(3);
    const refusal = results.find((r) => r.status === 'rejected') as PromiseRejectedResult;
    expect(refusal.reason).toBeInstanceOf(RateLimiterRes);
    // Another prefix is another count.
    await b.limiter('link', 1, 60).consume('10.0.0.1');
    // Keys as callers make them: parts joined with NUL; any length.
    for (const key of ['alice\u0000127.0.0.1', 'x'.repeat(1000)]) {
      await viaA.consume(key, 5);
      await expect(viaB.consume(key)).rejects.toBeInstanceOf(RateLimiterRes);
    }
  });
});

describe('withShareLock', () => {
  it('tasks on one key never overlap, across both stores and whatever the case of the key', async () => {
    const { a, b } = await twoStores();
    let inside = 0;
    let most = 0;
    let done = 0;
    const task = async () => {
      inside += 1;
      most = Math.max(most, inside);
      await a.userCount();
      await sleep(2);
      inside -= 1;
      done += 1;
    };
    await within(
      Promise.all(
        Array.from({ length: 30 }, (_, i) =>
          (i % 2 ? a : b).withShareLock(i % 3 ? 'Share-1' : 'share-1', task),
        ),
      ),
    );
    expect(done).toBe(30);
    expect(most).toBe(1);
  });

  it('tasks on different keys run at the same time, across stores', async () => {
    const { a, b } = await twoStores();
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    const first = a.withShareLock('k1', () => released);
    await sleep(50);
    // Would wait for `first` forever if k2 were excluded by k1.
    await within(
      b.withShareLock('k2', async () => release()),
      5000,
    );
    await within(first, 5000);
  });

  it('nested locks on other keys work and exclude the other store', async () => {
    const { a, b } = await twoStores();
    const order: string[] = [];
    let waiting: Promise<unknown> = Promise.resolve();
    const result = await within(
      a.withShareLock('outer', () =>
        a.withShareLock('inner', async () => {
          waiting = Promise.all([
            b.withShareLock('outer', async () => order.push('b outer')),
            b.withShareLock('INNER', async () => order.push('b inner')),
          ]);
          await sleep(100);
          order.push('a done');
          return 42;
        }),
      ),
    );
    await within(waiting);
    expect(result).toBe(42);
    expect(order[0]).toBe('a done');
    expect(order).toHaveLength(3);
  });

  it('a task that throws rejects with its error and releases the lock', async () => {
    const { a, b } = await twoStores();
    await expect(
      a.withShareLock('k', async () => {
        throw new Error('boom');
      }),
    ).rejects.toThrow('boom');
    expect(
      await within(
        b.withShareLock('k', async () => 'free'),
        5000,
      ),
    ).toBe('free');
    expect(
      await within(
        a.withShareLock('k', async () => 'free'),
        5000,
      ),
    ).toBe('free');
  });

  it('50 locks at once on distinct keys, each task querying, finish with two connections each', async () => {
    const { a, b } = await twoStores({ poolSize: 2, lockPoolSize: 2 });
    const results = await within(
      Promise.all(
        Array.from({ length: 50 }, (_, i) => {
          const store = i % 2 ? a : b;
          const s = share();
          return store.withShareLock(s.share_id, async () => {
            await store.addShare(s);
            await store.updateShare(s.share_id, { locked: true });
            return (await store.getShare(s.share_id))!.locked;
          });
        }),
      ),
      30_000,
    );
    expect(results).toEqual(Array(50).fill(true));
  });

  it('a lock nested in a task never waits for a lock connection (no deadlock with one)', async () => {
    // A task holding the only lock connection takes a nested lock on "s" while another task
    // waits for a connection to lock "s" itself: the nested lock must not queue behind it.
    const { a } = await twoStores({ lockPoolSize: 1 });
    let entered!: () => void;
    const inOuter = new Promise<void>((resolve) => (entered = resolve));
    const outer = a.withShareLock('upload:s:1', async () => {
      entered();
      await sleep(50);
      return a.withShareLock('s', async () => 'nested');
    });
    await inOuter;
    const top = a.withShareLock('s', async () => 'top');
    expect(await within(Promise.all([outer, top]), 5000)).toEqual(['nested', 'top']);
  });

  it('tasks queued on one key hold one lock connection, not one each', async () => {
    const { a } = await twoStores({ lockPoolSize: 2 });
    let hotDone = 0;
    const hot = Array.from({ length: 20 }, () =>
      a.withShareLock('hot', async () => {
        await sleep(20);
        hotDone += 1;
      }),
    );
    await sleep(30);
    // The second connection is free for another key, long before the queue on "hot" is done.
    await within(
      a.withShareLock('cold', async () => undefined),
      5000,
    );
    expect(hotDone).toBeLessThan(10);
    await within(Promise.all(hot));
  });

  it('a lock connection that breaks releases the lock; the store goes on with a new one', async () => {
    const { url, a, b } = await twoStores();
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    let entered!: () => void;
    const inside = new Promise<void>((resolve) => (entered = resolve));
    const held = a.withShareLock('k', async () => {
      entered();
      await released;
      return 'finished';
    });
    await inside;
    await sql(
      url,
      `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
        WHERE application_name = 'fshare-locks' AND datname = current_database()`,
    );
    // PostgreSQL released the lock with the connection.
    expect(
      await within(
        b.withShareLock('k', async () => 'b'),
        5000,
      ),
    ).toBe('b');
    release();
    expect(await within(held, 5000)).toBe('finished');
    await within(
      (async () => {
        while (!logs.some((l) => /lost the PostgreSQL connection holding share locks/.test(l)))
          await sleep(10);
      })(),
      5000,
    );
    expect(
      await within(
        a.withShareLock('k', async () => 'again'),
        5000,
      ),
    ).toBe('again');
  });
});

describe('records and lists', () => {
  it('changes to missing records are refused with MissingRecordError and change nothing', async () => {
    const { a } = await twoStores();
    const kinds = async (...changes: Promise<unknown>[]) =>
      (await Promise.allSettled(changes)).map((r) => {
        const reason = (r as PromiseRejectedResult).reason as MissingRecordError;
        expect(reason).toBeInstanceOf(MissingRecordError);
        return reason.kind;
      });
    expect(
      await kinds(
        a.updateUser('x', { quota: 5 }),
        a.deleteUser('x'),
        a.updateShare('x', { file_name: 'y' }),
        a.updateShare('x', {}),
        a.deleteShare('x'),
        a.addLink(link('x')),
        a.deleteLink('x'),
        a.countDownload('x'),
      ),
    ).toEqual(['user', 'user', 'share', 'share', 'share', 'share', 'link', 'link']);
    expect([await a.userCount(), await a.shareCount(), await a.listLinks()]).toEqual([0, 0, []]);
  });

  it('deleting a share deletes its links, and only its', async () => {
    const { a, b } = await twoStores();
    const [s, t] = [share(), share()];
    await a.addShare(s);
    await a.addShare(t);
    const [l1, l2, l3] = [link(s.share_id), link(s.share_id), link(t.share_id)];
    for (const l of [l1, l2, l3]) await b.addLink(l);
    await b.deleteShare(s.share_id);
    expect(await a.listLinks()).toStrictEqual([l3]);
    expect(await a.getLinkByTokenHash(l1.token_sha256)).toBeUndefined();
    expect(await a.getShare(s.share_id)).toBeUndefined();
  });

  it('deleting a user removes their links; their shares keep their id and say whose they were', async () => {
    const { a, b } = await twoStores();
    const [ann, ben] = [user('ann'), user('ben')];
    await a.addUser(ann);
    await a.addUser(ben);
    const mine = share({ owner_id: ann.id, size: 30, initialized: true });
    const his = share({ owner_id: ben.id });
    await a.addShare(mine);
    await a.addShare(his);
    const [byAnn, byBen] = [link(his.share_id, { created_by: ann.id }), link(mine.share_id)];
    await a.addLink(byAnn);
    await a.addLink({ ...byBen, created_by: ben.id });
    await b.deleteUser(ann.id);
    expect(await a.getUser('ann')).toBeUndefined();
    expect((await a.listLinks()).map((l) => l.id)).toEqual([byBen.id]);
    expect(await a.getShare(mine.share_id)).toMatchObject({
      owner_id: ann.id,
      owner_name: 'ann (deleted)',
    });
    expect(await a.usageOf(ann.id)).toBe(30);
    // A new user of that name is someone else.
    const again = user('ann');
    await a.addUser(again);
    expect((await b.getShare(mine.share_id))!.owner_name).toBe('ann (deleted)');
    expect(await b.usageOf(again.id)).toBe(0);
  });

  it('a caller can never change the store through a record it passed in or got back', async () => {
    const { a } = await twoStores();
    const u = user('copy');
    await a.addUser(u);
    u.permissions.push('ADMIN');
    u.username = 'changed';
    const got = (await a.getUserById(u.id))!;
    expect(got.permissions).toEqual(['LIST', 'READ']);
    got.permissions.push('ADMIN');
    (await a.listUsers(0, 1))[0]!.permissions.push('DELETE');
    expect((await a.getUser('copy'))!.permissions).toEqual(['LIST', 'READ']);

    const s = share();
    await a.addShare(s);
    const gotShare = (await a.getShare(s.share_id))!;
    gotShare.file_name = 'changed';
    (await a.listShares(0, 1))[0]!.locked = true;
    expect(await a.getShare(s.share_id)).toMatchObject({ file_name: 'report.pdf', locked: false });

    const settings: Settings = { default_permissions: ['READ'] };
    await a.setSettings(settings);
    settings.default_permissions.push('LIST');
    (await a.getSettings()).default_permissions.push('ADMIN');
    expect(await a.getSettings()).toStrictEqual({ default_permissions: ['READ'] });

    const l = link(s.share_id);
    await a.addLink(l);
    (await a.getLink(l.id))!.downloads = 99;
    expect((await a.getLink(l.id))!.downloads).toBe(0);
  });

  it('lists are oldest first, whichever store added them; updates keep the place', async () => {
    const { a, b } = await twoStores();
    const shares = Array.from({ length: 6 }, () => share());
    for (const [i, s] of shares.entries()) await (i % 2 ? a : b).addShare(s);
    await a.updateShare(shares[0]!.share_id, { file_name: 'renamed', size: 1 });
    await b.deleteShare(shares[2]!.share_id);
    const ids = shares.map((s) => s.share_id).filter((_, i) => i !== 2);
    expect((await a.listShares(0, 100)).map((s) => s.share_id)).toEqual(ids);
    expect((await b.listShares(1, 2)).map((s) => s.share_id)).toEqual(ids.slice(1, 3));
    expect(await a.listShares(10, 5)).toEqual([]);

    const users = ['zed', 'amy', 'max'].map((n) => user(n));
    for (const [i, u] of users.entries()) await (i % 2 ? a : b).addUser(u);
    await a.updateUser(users[0]!.id, { username: 'aaron' });
    expect((await b.listUsers(0, 10)).map((u) => u.username)).toEqual(['aaron', 'amy', 'max']);
  });

  it('eachShare goes through more shares than a page holds, once each, in list order', async () => {
    const { a, b } = await twoStores();
    const count = EACH_SHARE_PAGE * 2 + 7;
    for (let i = 0; i < count; i += 50)
      await Promise.all(
        Array.from({ length: Math.min(50, count - i) }, (_, j) =>
          (j % 2 ? a : b).addShare(share()),
        ),
      );
    const listed = (await a.listShares(0, count)).map((s) => s.share_id);
    const seen: string[] = [];
    for await (const s of b.eachShare()) {
      // Added while iterating: not part of this iteration.
      if (seen.length === 0) await a.addShare(share());
      seen.push(s.share_id);
    }
    expect(seen).toEqual(listed);
  });

  it('close() ends the store: every later call rejects', async () => {
    const { a } = await twoStores();
    await a.close();
    await a.close();
    await expect(a.getUser('x')).rejects.toThrow('the metadata store is closed');
    await expect(a.addShare(share())).rejects.toThrow('the metadata store is closed');
    await expect(a.withShareLock('k', async () => 1)).rejects.toThrow('closed');
    await expect(a.sharedSecret()).rejects.toThrow('closed');
    await expect(collect(a.eachShare())).rejects.toThrow('closed');
    expect(() => a.limiter('x', 1, 1)).toThrow('closed');
  });
});
