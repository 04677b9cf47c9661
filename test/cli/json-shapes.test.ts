import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN, createCli, startServe, tempDir, type Cli, type Serve } from '../helpers/cli.js';

/**
 * docs/CLI.md "JSON output": one shape per kind of object, the same in every command that
 * prints it. Each command's --json document is held to its documented keys and types here.
 */

const SHARE = {
  share_id: 'string',
  url: 'string',
  file_name: 'string',
  owner_name: 'string|null',
  initialized: 'boolean',
  locked: 'boolean',
  create_date: 'string',
  size: 'number|null',
  sha256: 'string|null',
  expires: 'string|null',
};
const USER = {
  username: 'string',
  permissions: 'object',
  register_date: 'string',
  quota: 'number|null',
  used: 'number|null',
};
const TRANSFER = {
  share_id: 'string',
  url: 'string',
  file_name: 'string|null',
  path: 'string|null',
  size: 'number',
  sha256: 'string|null',
  verified: 'boolean',
  resumed_bytes: 'number',
  expires: 'string|null',
  link: 'object|null',
};
const SETTINGS = {
  default_permissions: 'object',
  max_expiry: 'number|null',
  max_downloads: 'number|null',
};
const RECORD = {
  share_id: 'string',
  url: 'string',
  path: 'string',
  size: 'number',
  kind: 'string',
  started: 'string',
  server: 'string',
  running: 'boolean',
  record: 'string',
  damaged: 'null',
};

type Shape = Record<string, string>;

/** Exactly these keys, each of one of its types; dates are ISO 8601 with a zone. */
function expectShape(value: unknown, shape: Shape, what: string): void {
  expect(value, what).toBeTypeOf('object');
  const object = value as Record<string, unknown>;
  expect(Object.keys(object).sort(), what).toEqual(Object.keys(shape).sort());
  for (const [key, types] of Object.entries(shape)) {
    const actual = object[key] === null ? 'null' : typeof object[key];
    expect(types.split('|'), `${what}.${key} is ${actual}`).toContain(actual);
  }
  for (const key of ['create_date', 'register_date', 'started'])
    if (typeof object[key] === 'string')
      expect(object[key], `${what}.${key}`).toMatch(
        /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$/,
      );
}

let serve: Serve;
let admin: Cli;
let work: string;
let file: string;
let json: <T>(args: string[], input?: string) => Promise<T>;

beforeAll(async () => {
  serve = await startServe();
  admin = await createCli();
  work = await tempDir('shapes');
  file = join(work, 'data.bin');
  await writeFile(file, randomBytes(50_000));
  json = <T>(args: string[], input?: string) =>
    admin.json<T>(['--server', serve.url, ...args], { input, cwd: work });
});

afterAll(async () => {
  await serve?.stop();
  await rm(work, { recursive: true, force: true });
});

describe('--json: one documented shape per kind of object', () => {
  it('account commands', async () => {
    expectShape(
      await json(['login', '-u', ADMIN.username, '--password-stdin'], `${ADMIN.password}\n`),
      { server: 'string', username: 'string', stored: 'string' },
      'login',
    );
    expectShape(
      await json(['whoami']),
      { username: 'string|null', permissions: 'object' },
      'whoami',
    );
    expectShape(await json(['token']), { token: 'string' }, 'token');
    expectShape(
      await json(['token', 'extend']),
      { server: 'string', username: 'string', stored: 'string' },
      'token extend',
    );
  });

  it('shares: upload, info, ls, ls --all, rename, chown, lock, unlock, replace, get, rm', async () => {
    const uploaded = await json<unknown[]>(['upload', file]);
    expect(uploaded).toHaveLength(1);
    expectShape(uploaded[0], TRANSFER, 'upload[0]');
    const id = (uploaded[0] as { share_id: string }).share_id;
    expectShape(await json(['info', id]), { ...SHARE, links: 'object|null' }, 'info');
    for (const args of [['ls'], ['ls', '--all']]) {
      const list = await json<{ shares: unknown[] }>(args);
      expect(Object.keys(list).sort(), args.join(' ')).toEqual(['next', 'page', 'pages', 'shares']);
      for (const s of list.shares) expectShape(s, SHARE, `${args.join(' ')} item`);
    }
    expectShape(await json(['rename', id, 'renamed.bin']), SHARE, 'rename');
    expectShape(await json(['chown', id, ADMIN.username]), SHARE, 'chown');
    expectShape(await json(['lock', id]), SHARE, 'lock');
    expectShape(await json(['unlock', id]), SHARE, 'unlock');
    expectShape(await json(['replace', id, file]), TRANSFER, 'replace');
    expectShape(await json(['get', id, '-o', join(work, 'back.bin')]), TRANSFER, 'get');
    expectShape(
      await json(['get', id, '--range', '0-9', '-o', join(work, 'slice.bin')]),
      TRANSFER,
      'get --range',
    );
    // A slice without -o is never saved under the whole file's name.
    const slice = await json<{ path: string; size: number }>(['get', id, '--range', '5-14']);
    expect(slice).toMatchObject({ path: join(work, 'renamed.bin.5-14'), size: 10 });
    expect(
      (await readFile(join(work, 'renamed.bin.5-14'))).equals(
        (await readFile(file)).subarray(5, 15),
      ),
    ).toBe(true);
    // Typed with spaces and a leading zero, the range names the file as 5-14 all the same.
    await rm(join(work, 'renamed.bin.5-14'));
    const spaced = await json<{ path: string }>(['get', id, '--range', ' 05 - 14 ']);
    expect(spaced.path).toBe(join(work, 'renamed.bin.5-14'));
    expect(existsSync(join(work, 'renamed.bin'))).toBe(false);
    const removed = await json<unknown[]>(['rm', id]);
    expectShape(removed[0], { share_id: 'string', deleted: 'boolean' }, 'rm[0]');
  });

  it('users: add, show, perms, passwd, quota, ls, ls --all, signout, rm', async () => {
    expectShape(
      await json(
        ['users', 'add', 'shape-user', '--perms', 'READ', '--password-stdin'],
        'pw-123456\n',
      ),
      USER,
      'users add',
    );
    expectShape(await json(['users', 'show', 'shape-user']), USER, 'users show');
    expectShape(await json(['users', 'perms', 'shape-user', '+LIST']), USER, 'users perms');
    expectShape(
      await json(['users', 'passwd', 'shape-user', '--password-stdin'], 'pw-654321\n'),
      USER,
      'users passwd',
    );
    expectShape(await json(['users', 'quota', 'shape-user', '1m']), USER, 'users quota');
    for (const args of [
      ['users', 'ls'],
      ['users', 'ls', '--all'],
    ]) {
      const list = await json<{ users: unknown[] }>(args);
      expect(Object.keys(list).sort(), args.join(' ')).toEqual(['next', 'page', 'pages', 'users']);
      for (const u of list.users) expectShape(u, USER, `${args.join(' ')} item`);
    }
    expectShape(
      await json(['users', 'signout', 'shape-user']),
      { username: 'string', signed_out: 'boolean' },
      'users signout',
    );
    const removed = await json<unknown[]>(['users', 'rm', 'shape-user']);
    expectShape(removed[0], { username: 'string', deleted: 'boolean' }, 'users rm[0]');
  });

  it('settings and unfinished uploads', async () => {
    expectShape(await json(['settings', 'show']), SETTINGS, 'settings show');
    expectShape(await json(['settings', 'anon', '--none']), SETTINGS, 'settings anon');
    const records = await json<unknown[]>(['uploads']);
    expect(Array.isArray(records)).toBe(true);
    for (const r of records) expectShape(r, RECORD, 'uploads item');
    const cleaned = await json<unknown[]>(['uploads', 'clean']);
    for (const r of cleaned)
      expectShape(
        r,
        { ...RECORD, share_deleted: 'boolean', message: 'string' },
        'uploads clean item',
      );
  });

  it('logout', async () => {
    expectShape(
      await json(['logout']),
      { server: 'string', username: 'string|null', revoked: 'boolean' },
      'logout',
    );
  });
});
