// Metadata durability (issue 8): a change is acknowledged only once appended in full and fsynced
// to db.journal. Replay drops only a torn last line (and says so); any other damage stops the
// start with the file and line and the way out (--repair), which keeps every valid entry.
import { randomUUID } from 'node:crypto';
import { cp, mkdir, mkdtemp, readFile, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createServer } from '../../src/server/index.js';
import { encodeLine } from '../../src/server/store/journal.js';
import {
  DamagedMetadataError,
  DuplicateUserError,
  MissingRecordError,
} from '../../src/server/store/index.js';
import { LowdbStore } from '../../src/server/store/lowdb.js';
import { errorLine } from '../../src/cli/output.js';
import { createShare, createShareWithContent, get, getShare, post } from '../helpers/http.js';
import { ensureBuilt, serve, stop } from '../helpers/serve.js';
import { ADMIN, login, startServer, type TestServer } from '../helpers/server.js';

const servers: TestServer[] = [];
afterAll(async () => {
  for (const s of servers) await s.close().catch(() => undefined);
});
beforeAll(ensureBuilt);

/** What a crash would leave: the files as they are on disk while the server runs. */
async function crashImage(dataDir: string): Promise<string> {
  const copy = await mkdtemp(join(tmpdir(), 'fshare-crash-image-'));
  await cp(dataDir, copy, { recursive: true });
  return copy;
}

/** A running server with three shares created after its start (so they are in the journal). */
async function journalWithThreeShares() {
  const srv = await startServer();
  servers.push(srv);
  const token = await login(srv.url, ADMIN.username, ADMIN.password);
  const ids = [];
  for (const name of ['one', 'two', 'three']) ids.push(await createShare(srv.url, token, name));
  const image = await crashImage(srv.dataDir);
  // Line 1 is the administrator made at the first start; lines 2-4 are the shares.
  const lines = (await readFile(join(image, 'db.journal'), 'utf8')).split('\n').filter(Boolean);
  return { token, ids, image, lines };
}

async function listIds(url: string, token: string): Promise<string[]> {
  const res = await get(url, '/files?per_page=1000', { token });
  return (res.body as { data: { share_id: string }[] }).data.map((s) => s.share_id);
}

describe('appends', () => {
  it('an acknowledged change is in the journal before the reply, with a checksum per line', async () => {
    const { ids, lines } = await journalWithThreeShares();
    expect(lines).toHaveLength(4);
    expect(lines[0]).toContain(ADMIN.username);
    lines.forEach((line) => expect(line).toMatch(/^[0-9a-f]{8} \{/));
    ids.forEach((id, i) => expect(lines[i + 1]).toContain(id));
  });
});

describe('replay', () => {
  it('drops a torn last line, says so, and keeps everything before it', async () => {
    const { token, ids, image, lines } = await journalWithThreeShares();
    // A crash in the middle of the last append: half of its line reached the disk.
    const last = lines[3]!;
    await writeFile(
      join(image, 'db.journal'),
      `${lines.slice(0, 3).join('\n')}\n${last.slice(0, last.length / 2)}`,
    );
    const notices: string[] = [];
    const srv = await startServer({ dataDir: image, notice: (l) => notices.push(l) });
    servers.push(srv);
    expect(await listIds(srv.url, token)).toEqual(ids.slice(0, 2));
    expect(notices.join('\n')).toMatch(/db\.journal: dropped an unfinished last entry \(line 4/);
    // The start folded the rest into db.json and began an empty journal.
    expect(await readFile(join(image, 'db.journal'), 'utf8')).toBe('');
    expect(await readFile(join(image, 'db.json'), 'utf8')).toContain(ids[1]);
  });

  it('a zero-filled end (power loss) counts as torn too', async () => {
    const { token, ids, image, lines } = await journalWithThreeShares();
    await writeFile(join(image, 'db.journal'), `${lines.join('\n')}\n${'\0'.repeat(4096)}`);
    const srv = await startServer({ dataDir: image, notice: () => undefined });
    servers.push(srv);
    expect(await listIds(srv.url, token)).toEqual(ids);
  });

  it('is idempotent: entries already in the snapshot are not applied twice', async () => {
    const { token, ids, image } = await journalWithThreeShares();
    // A crash right after the snapshot was renamed in, before the journal was emptied.
    const srv = await startServer({ dataDir: image });
    await srv.server.close();
    const again = await crashImage(image);
    const snapshot = JSON.parse(await readFile(join(again, 'db.json'), 'utf8'));
    // The snapshot holds seq 1-4 (the admin, then the shares); the journal repeats 2-4.
    expect(snapshot.seq).toBe(4);
    const sameSeq = snapshot.shares.map((share: object, i: number) =>
      encodeLine({ seq: i + 2, op: 'addShare', share }),
    );
    await writeFile(join(again, 'db.journal'), sameSeq.join(''));
    const second = await startServer({ dataDir: again });
    servers.push(second);
    expect(await listIds(second.url, token)).toEqual(ids);
  });
});

describe('records written before a rule', () => {
  // Names that differ only in case are refused since 2026-11-24; a journal written before may
  // hold such a pair. Property: the store still starts with both users, and a third spelling is
  // refused.
  it('a journal holding two names that differ only in case replays; a new spelling is refused', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'fshare-case-'));
    const first = await startServer({ dataDir: dir });
    const token = await login(first.url, ADMIN.username, ADMIN.password);
    await first.close(false);
    const db = JSON.parse(await readFile(join(dir, 'db.json'), 'utf8'));
    const journal = await readFile(join(dir, 'db.journal'), 'utf8').catch(() => '');
    const seq = db.seq + journal.split('\n').filter(Boolean).length;
    const template = db.users[0];
    const lines = ['pair', 'PAIR'].map((username, i) =>
      encodeLine({
        seq: seq + 1 + i,
        op: 'addUser',
        user: { ...template, id: randomUUID(), username, permissions: ['READ'] },
      }),
    );
    await writeFile(join(dir, 'db.journal'), journal + lines.join(''));
    const again = await startServer({ dataDir: dir });
    servers.push(again);
    const users = await get(again.url, '/users?per_page=100', { token });
    const names = (users.body.data as { username: string }[]).map((u) => u.username);
    expect(names).toEqual(expect.arrayContaining(['pair', 'PAIR']));
    const third = await post(again.url, '/users', {
      token,
      json: { username: 'Pair', password: 'pw-123456', permissions: [] },
    });
    expect(third.status).toBe(409);
  });
});

describe('damage that is not a torn end', () => {
  async function damagedInTheMiddle() {
    const made = await journalWithThreeShares();
    const [admin, one, two, three] = made.lines as [string, string, string, string];
    // One character of the line of share "two" changed: its checksum no longer matches.
    const flipped = two.replace('"two"', '"tw0"');
    await writeFile(join(made.image, 'db.journal'), `${admin}\n${one}\n${flipped}\n${three}\n`);
    return made;
  }

  it('stops the start with the file and the line, and the way out', async () => {
    const { image } = await damagedInTheMiddle();
    const error = await createServer({ dataDir: image }).catch((err: unknown) => err);
    expect(error).toBeInstanceOf(DamagedMetadataError);
    expect((error as Error).message).toMatch(/db\.journal line 3 is damaged \(checksum mismatch\)/);
    expect((error as Error).message).toContain('fshare serve --repair');
  });

  it('the binary prints it as one line and exits 1, without a stack trace', async () => {
    const { image } = await damagedInTheMiddle();
    const failed = await serve(image).catch((err: { code: number; stderr: string }) => err);
    expect('code' in failed && failed.code).toBe(1);
    const stderr = (failed as { stderr: string }).stderr.trim();
    expect(stderr.split('\n')).toHaveLength(1);
    expect(stderr).toMatch(/^fshare: .*db\.journal line 3 is damaged.*--repair/);
  });

  it('--repair keeps every valid entry, moves the damaged journal aside, and later starts are normal', async () => {
    const { token, ids, image } = await damagedInTheMiddle();
    const damaged = await readFile(join(image, 'db.journal'));
    const running = await serve(image, {}, ['--repair']);
    expect(await listIds(running.url, token)).toEqual([ids[0], ids[2]]);
    expect(running.stderr()).toMatch(/repair: skipped .*db\.journal line 3 \(checksum mismatch\)/);
    expect((await stop(running)).code).toBe(0);
    const aside = (await readdir(image)).filter((f) => f.startsWith('db.journal.damaged-'));
    expect(aside).toHaveLength(1);
    expect((await readFile(join(image, aside[0]!))).equals(damaged)).toBe(true);
    const normal = await serve(image);
    expect(await listIds(normal.url, token)).toEqual([ids[0], ids[2]]);
    await stop(normal);
  });

  it('an entry that names a record that is not there: refused with its line; --repair skips it', async () => {
    const { token, ids, image, lines } = await journalWithThreeShares();
    const ghost = encodeLine({
      seq: 5,
      op: 'updateShare',
      id: '00000000-0000-4000-8000-000000000000',
      changes: { locked: true },
    });
    const fourth = encodeLine({
      seq: 6,
      op: 'setSettings',
      settings: { default_permissions: ['READ'] },
    });
    await writeFile(join(image, 'db.journal'), `${lines.join('\n')}\n${ghost}${fourth}`);
    const error = await createServer({ dataDir: image }).catch((err: unknown) => err);
    expect((error as Error).message).toMatch(
      /db\.journal line 5 cannot be applied \(No share with this id\)/,
    );
    const repaired = await startServer({ dataDir: image, repair: true, notice: () => undefined });
    servers.push(repaired);
    expect(await listIds(repaired.url, token)).toEqual(ids);
    // The entry after it was kept.
    const settings = await get(repaired.url, '/admin/settings', { token });
    expect(settings.body).toEqual({
      default_permissions: ['READ'],
      max_expiry: null,
      max_downloads: null,
    });
    expect(await getShare(repaired.url, token, ids[0]!)).toMatchObject({ locked: false });
  });
});

// db.json is only ever replaced whole (temp file, fsync, rename): anything else in it is damage
// or a stray file. Property guarded: such a snapshot stops the start with one message and changes
// nothing; it was read as a new store (an empty file), carried over as fshare 0.1's metadata (any
// JSON without a version), or failed with a TypeError.
describe('a db.json that is not a snapshot fshare wrote', () => {
  /** A stopped server's data directory: two shares, everything folded into db.json. */
  async function folded() {
    const srv = await startServer();
    const token = await login(srv.url, ADMIN.username, ADMIN.password);
    for (const name of ['one', 'two']) await createShare(srv.url, token, name);
    await srv.close(false);
    servers.push(srv);
    return srv.dataDir;
  }

  const cases: [string, string, RegExp][] = [
    ['empty', '', /db\.json is empty\. .*restore it from a backup/],
    ['blank', ' \n\n', /db\.json is empty\./],
    ['null', 'null', /is not fshare's metadata \(it holds null, not an object\)/],
    ['a list', '[]', /is not fshare's metadata \(it holds a list, not an object\)/],
    ['a number', '42', /\(it holds a number, not an object\)/],
    [
      'no version, users or shares',
      '{}',
      /is not fshare's metadata \(no version, users or shares\)/,
    ],
    ['users of the wrong type', '{"users":5,"shares":[]}', /"users" is not a list of records/],
    ['shares of the wrong type', '{"version":2,"shares":[1]}', /"shares" is not a list of records/],
    ['settings of the wrong type', '{"version":2,"settings":[]}', /"settings" is not an object/],
    ['a negative seq', '{"version":2,"seq":-1}', /"seq" is not a count/],
    ['a version that is text', '{"version":"2"}', /"version" is not a number/],
    ['an older unknown version', '{"version":1,"users":[],"shares":[]}', /unknown version 1/],
    [
      'a newer version',
      '{"version":3,"users":[],"shares":[]}',
      /written by a newer fshare \(metadata version 3\)/,
    ],
  ];
  it.each(cases)(
    '%s: the start stops with one message, nothing written',
    async (_, text, message) => {
      const dir = await folded();
      await writeFile(join(dir, 'db.json'), text);
      const before = await readdir(dir);
      const error = await createServer({ dataDir: dir }).catch((err: unknown) => err);
      expect(error).toBeInstanceOf(DamagedMetadataError);
      expect((error as Error).message).toMatch(message);
      expect(await readFile(join(dir, 'db.json'), 'utf8')).toBe(text);
      expect(await readdir(dir)).toEqual(before);
    },
  );

  // A read of a directory fails with an error that names no path: "is a directory, not a file"
  // said nothing of which file; a file where content/ goes said "already exists".
  it.each([
    ['secret', 'dir', /is a directory, not a file: .*\/secret$/],
    ['db.journal', 'dir', /is a directory, not a file: .*\/db\.journal$/],
    ['db.json', 'dir', /is a directory, not a file: .*\/db\.json$/],
    ['content', 'file', /\/content is not a directory$/],
    ['uploads', 'file', /\/uploads is not a directory$/],
  ] as const)(
    '%s made a %s: the start stops with a message that names it',
    async (name, kind, message) => {
      const dir = await folded();
      await rm(join(dir, name), { recursive: true });
      if (kind === 'dir') await mkdir(join(dir, name));
      else await writeFile(join(dir, name), 'x');
      const error = await createServer({ dataDir: dir }).catch((err: unknown) => err);
      expect(errorLine(error)).toMatch(message);
    },
  );

  it('a missing db.json with a journal that begins past the first change stops the start', async () => {
    const { image } = await journalWithThreeShares();
    // The journal holds the changes since the last fold; the fold itself is gone.
    const [, ...rest] = (await readFile(join(image, 'db.journal'), 'utf8')).split('\n');
    await writeFile(join(image, 'db.journal'), rest.join('\n'));
    await rm(join(image, 'db.json'));
    const error = await createServer({ dataDir: image }).catch((err: unknown) => err);
    expect(error).toBeInstanceOf(DamagedMetadataError);
    expect((error as Error).message).toMatch(
      /db\.json is missing, and .*db\.journal begins at change \d+/,
    );
  });

  // Found from outside: db.json restored from a backup older than the last fold, beside the
  // journal of now, started with the backup's shares plus the journal's, and the changes in
  // between silently undone (a share made then was gone, its content removed). Property: a
  // journal that does not continue its snapshot stops the start, saying how to go on.
  it('a db.json older than its journal (changes in neither file) stops the start; each way out works', async () => {
    const srv = await startServer();
    servers.push(srv);
    const dir = srv.dataDir;
    let token = await login(srv.url, ADMIN.username, ADMIN.password);
    const a = await createShare(srv.url, token, 'a');
    await srv.server.close(); // folds the journal into db.json
    const backup = await readFile(join(dir, 'db.json'));
    let again = await startServer({ dataDir: dir });
    token = await login(again.url, ADMIN.username, ADMIN.password);
    await createShare(again.url, token, 'b');
    await again.server.close();
    again = await startServer({ dataDir: dir });
    token = await login(again.url, ADMIN.username, ADMIN.password);
    const c = await createShare(again.url, token, 'c');
    const image = await crashImage(dir); // c is in the journal only
    await again.server.close();
    await writeFile(join(image, 'db.json'), backup);

    const error = await createServer({ dataDir: image }).catch((err: unknown) => err);
    expect(error).toBeInstanceOf(DamagedMetadataError);
    expect((error as Error).message).toMatch(
      /db\.journal line \d+ is change \d+, and .*db\.json holds the changes up to \d+: change \d+ is in neither .*Restore .*db\.journal from the same backup as .*db\.json, or, to go on from .*db\.json alone, move .*db\.journal aside\.$/,
    );
    // --repair goes on with what is there, and says so; the next start is normal.
    const repaired = await crashImage(image);
    const notices: string[] = [];
    const fixed = await startServer({
      dataDir: repaired,
      repair: true,
      notice: (line) => notices.push(line),
    });
    servers.push(fixed);
    expect(notices.some((n) => /change \d+ is in neither/.test(n))).toBe(true);
    expect((await listIds(fixed.url, token)).sort()).toEqual([a, c].sort());
    await fixed.server.close();
    const next = await startServer({ dataDir: repaired });
    servers.push(next);
    expect((await listIds(next.url, token)).sort()).toEqual([a, c].sort());
    // The journal moved aside: the backup's state alone.
    await rm(join(image, 'db.journal'));
    const alone = await startServer({ dataDir: image });
    servers.push(alone);
    expect(await listIds(alone.url, token)).toEqual([a]);
  });

  // Found from outside: db.journal restored alone from a backup older than the last fold (its
  // changes all folded into db.json since) started silently, without the changes the journal it
  // replaced held. Property: a journal that ends before its snapshot stops the start, saying
  // how to go on; a crash between a fold and the journal's emptying (the journal ends at the
  // snapshot's change) is no such journal (crash-points tests).
  it('a db.journal older than its db.json stops the start; each way out works', async () => {
    const srv = await startServer();
    servers.push(srv);
    const dir = srv.dataDir;
    let token = await login(srv.url, ADMIN.username, ADMIN.password);
    const a = await createShare(srv.url, token, 'a');
    const older = await readFile(join(await crashImage(dir), 'db.journal')); // a, unfolded
    expect(older.length).toBeGreaterThan(0);
    await srv.server.close(); // folds the journal into db.json
    let again = await startServer({ dataDir: dir });
    token = await login(again.url, ADMIN.username, ADMIN.password);
    const b = await createShare(again.url, token, 'b');
    await again.server.close();
    again = await startServer({ dataDir: dir });
    token = await login(again.url, ADMIN.username, ADMIN.password);
    await createShare(again.url, token, 'c');
    const image = await crashImage(dir); // c is in the journal only
    await again.server.close();
    await writeFile(join(image, 'db.journal'), older);

    const error = await createServer({ dataDir: image }).catch((err: unknown) => err);
    expect(error).toBeInstanceOf(DamagedMetadataError);
    expect((error as Error).message).toMatch(
      /db\.journal ends at change \d+ \(line \d+\), and .*db\.json holds the changes up to \d+: the journal is older than the snapshot .*Restore .*db\.journal from the same backup as .*db\.json, or, to go on from .*db\.json alone, move .*db\.journal aside\.$/,
    );
    // --repair starts from db.json, says so, and moves the old journal aside.
    const repaired = await crashImage(image);
    const notices: string[] = [];
    const fixed = await startServer({
      dataDir: repaired,
      repair: true,
      notice: (line) => notices.push(line),
    });
    servers.push(fixed);
    expect(notices.some((n) => /the journal is older than the snapshot/.test(n))).toBe(true);
    expect((await readdir(repaired)).some((n) => n.startsWith('db.journal.damaged-'))).toBe(true);
    expect((await listIds(fixed.url, token)).sort()).toEqual([a, b].sort());
    await fixed.server.close();
    const next = await startServer({ dataDir: repaired });
    servers.push(next);
    expect((await listIds(next.url, token)).sort()).toEqual([a, b].sort());
    // The journal moved aside: db.json alone.
    await rm(join(image, 'db.journal'));
    const alone = await startServer({ dataDir: image });
    servers.push(alone);
    expect((await listIds(alone.url, token)).sort()).toEqual([a, b].sort());
  });

  it('the binary prints one line and exits 1; the stored content is still served after a restore', async () => {
    const srv = await startServer();
    const token = await login(srv.url, ADMIN.username, ADMIN.password);
    const id = await createShareWithContent(srv.url, token, 'kept', Buffer.from('kept bytes'));
    await srv.close(false);
    servers.push(srv);
    const good = await readFile(join(srv.dataDir, 'db.json'));
    await writeFile(join(srv.dataDir, 'db.json'), '');
    const failed = await serve(srv.dataDir).catch((err: { code: number; stderr: string }) => err);
    expect('code' in failed && failed.code).toBe(1);
    const stderr = (failed as { stderr: string }).stderr.trim();
    expect(stderr).toMatch(/^fshare: .*db\.json is empty\./);
    expect(stderr.split('\n')).toHaveLength(1);
    await writeFile(join(srv.dataDir, 'db.json'), good);
    const again = await serve(srv.dataDir);
    const res = await get(again.url, `/files/${id}/content`, { token });
    expect(res.buf.toString()).toBe('kept bytes');
    await stop(again);
  });
});

describe('changes made one right after another (a change resumed by the previous one)', () => {
  const user = (name: string) => ({
    id: randomUUID(),
    username: name,
    permissions: [],
    register_date: '2026-11-23T00:00:00.000000',
    password_hash: 'x',
    token_gen: 0,
    quota: null,
  });

  // Guards: a change made by code that the previous change's acknowledgement resumed is written
  // (and acknowledged) at once, not left waiting for some later change. It once waited forever,
  // which hung `fshare admin export` (adding users one after another) with nothing else to do.
  it('each is durable and acknowledged without a later change to push it out', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'fshare-sequential-'));
    const store = await LowdbStore.open(dir, { log: () => undefined });
    const names = Array.from({ length: 20 }, (_, i) => `seq-${i}`);
    // Each awaited directly, as `admin export` adds users: no other change ever comes along.
    const all = (async () => {
      for (const name of names) await store.addUser(user(name));
      return 'written';
    })();
    const late = new Promise((resolve) => setTimeout(() => resolve('stuck'), 5000).unref());
    expect(await Promise.race([all, late])).toBe('written');
    await store.close();
    const again = await LowdbStore.open(dir, { log: () => undefined });
    expect((await again.listUsers(0, 100)).map((u) => u.username)).toEqual(names);
    await again.close();
  });

  it('a refused change is a rejected promise, never a synchronous throw', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'fshare-refused-'));
    const store = await LowdbStore.open(dir, { log: () => undefined });
    await store.addUser(user('taken'));
    let promise: Promise<void> | undefined;
    expect(() => (promise = store.addUser(user('taken')))).not.toThrow();
    await expect(promise).rejects.toBeInstanceOf(DuplicateUserError);
    await expect(store.updateShare(randomUUID(), { locked: true })).rejects.toBeInstanceOf(
      MissingRecordError,
    );
    await store.close();
  });
});
