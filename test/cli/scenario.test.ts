import { createHash, randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { lstat, readFile, rm, stat, symlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Page, Settings, Share, User, Whoami } from '../../src/shared/types.js';
import { ADMIN, createCli, startServe, tempDir, type Cli, type Serve } from '../helpers/cli.js';

interface ListShape {
  shares: (Share & { url: string; sha256: string | null })[];
  page: number | null;
  pages: number | null;
}

interface Uploaded {
  share_id: string;
  url: string;
  file_name: string;
  size: number;
}

/** One line on stderr, in CLI.md's shape. */
function expectErrorLine(stderr: string, status?: number): void {
  const lines = stderr.trimEnd().split('\n');
  expect(lines).toHaveLength(1);
  expect(lines[0]).toMatch(/^fshare: \S/);
  // The status ends the server's words; a next step may follow it ("; run `fshare login`").
  if (status !== undefined) expect(lines[0]).toMatch(new RegExp(`\\(HTTP ${status}\\)(; .+)?$`));
}

/**
 * Bytes written to stdout equal the expected ones; on a mismatch, says how (length, first
 * differing offset, stderr) rather than only "false".
 */
function expectSameBytes(got: { stdout: Buffer; stderr: string; exitCode: number }, want: Buffer) {
  if (got.stdout.equals(want)) return;
  let at = 0;
  while (at < Math.min(got.stdout.length, want.length) && got.stdout[at] === want[at]) at++;
  expect.fail(
    `stdout has ${got.stdout.length} bytes, expected ${want.length}; first difference at ${at}; exit ${got.exitCode}; stderr: ${got.stderr}`,
  );
}

describe('fshare end to end against fshare serve', () => {
  let serve: Serve;
  let admin: Cli;
  let alice: Cli;
  let work: string;
  let original: Buffer;
  let replacement: Buffer;
  let share: Uploaded;
  let aliceToken: string;

  beforeAll(async () => {
    serve = await startServe();
    admin = await createCli();
    alice = await createCli();
    work = await tempDir('work');
    original = randomBytes(1_000_003); // 16 chunks of 64 KiB, the last one short
    replacement = randomBytes(200_000);
    await writeFile(join(work, 'random.bin'), original);
    await writeFile(join(work, 'replacement.bin'), replacement);
    await writeFile(join(work, 'empty.txt'), '');
    await writeFile(join(work, 'hello.txt'), 'hello\n');
  });

  afterAll(async () => {
    await serve?.stop();
    for (const dir of [admin?.configDir, alice?.configDir, work])
      if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('signs in with --password-stdin and remembers the server', async () => {
    const res = await admin.run(
      ['--server', serve.url, 'login', '-u', ADMIN.username, '--password-stdin'],
      {
        input: `${ADMIN.password}\n`,
      },
    );
    expect(res.exitCode).toBe(0);
    expect(res.stdout).toContain(`Signed in to ${serve.url} as admin`);
    // No --server from here on: the saved server of the last login is used.
    const me = await admin.json<Whoami>(['whoami']);
    expect(me.username).toBe('admin');
    expect(me.permissions).toContain('ADMIN');
  });

  it('refuses a wrong password with exit 3', async () => {
    const other = await createCli();
    const res = await other.run(
      ['--server', serve.url, 'login', '-u', 'admin', '--password-stdin'],
      {
        input: 'wrong\n',
      },
    );
    expect(res.exitCode).toBe(3);
    expectErrorLine(res.stderr, 401);
  });

  it('adds a user and edits its permissions', async () => {
    const add = await admin.run(
      ['users', 'add', 'alice', '--perms', 'create,READ,LIST', '--password-stdin'],
      { input: 'alice-pw-1\n' },
    );
    expect(add.exitCode).toBe(0);
    const perms = await admin.run([
      'users',
      'perms',
      'alice',
      '+MODIFY',
      '+LOCK',
      '+DELETE',
      '-LIST',
    ]);
    expect(perms.exitCode).toBe(0);
    expect(perms.stdout).toBe('alice: CREATE, MODIFY, DELETE, LOCK, READ');
    const set = await admin.json<{ permissions: string[] }>([
      'users',
      'perms',
      'alice',
      '--set',
      'READ,LIST,CREATE,MODIFY,DELETE,LOCK',
    ]);
    expect(set.permissions).toEqual(['CREATE', 'MODIFY', 'DELETE', 'LOCK', 'LIST', 'READ']);
    const shown = await admin.json<User>(['users', 'show', 'alice']);
    expect(shown.username).toBe('alice');
    expect(shown.permissions).toEqual(['CREATE', 'MODIFY', 'DELETE', 'LOCK', 'LIST', 'READ']);
    const list = await admin.json<{ users: User[] }>(['users', 'ls']);
    expect(list.users.map((u) => u.username)).toEqual(['admin', 'alice']);
    const again = await admin.run(['users', 'add', 'alice', '--password-stdin'], { input: 'x\n' });
    expect(again.exitCode).toBe(5); // 409
    expectErrorLine(again.stderr, 409);

    const login = await alice.run(
      ['--server', serve.url, 'login', '-u', 'alice', '--password-stdin'],
      {
        input: 'alice-pw-1\n',
      },
    );
    expect(login.exitCode).toBe(0);
    const notAdmin = await alice.run(['users', 'ls']);
    expect(notAdmin.exitCode).toBe(3);
    expectErrorLine(notAdmin.stderr, 403);
  });

  it('uploads a multi-chunk file in parallel, quietly when not on a terminal', async () => {
    const res = await alice.run([
      '--json',
      'upload',
      join(work, 'random.bin'),
      '--chunk-size',
      '64k',
      '--parallel',
      '4',
    ]);
    expect(res.exitCode).toBe(0);
    expect(res.stderr).toBe('');
    const uploaded = JSON.parse(res.stdout) as Uploaded[];
    expect(uploaded).toHaveLength(1);
    share = uploaded[0]!;
    expect(share).toMatchObject({ file_name: 'random.bin', size: original.length });
    expect(share.url).toBe(`${serve.url}/files/${share.share_id}`);
  });

  it('uploads several files, an empty one included, and prints id and URL per file', async () => {
    const res = await alice.run(['upload', join(work, 'empty.txt'), join(work, 'hello.txt')]);
    expect(res.exitCode).toBe(0);
    const lines = res.stdout.split('\n');
    expect(lines).toHaveLength(2);
    for (const line of lines)
      expect(line).toMatch(/^[0-9a-f-]{36} {2}http:\/\/\S+\/files\/[0-9a-f-]{36} {2}\S+$/);
    const empty = lines.find((l) => l.endsWith('empty.txt'))!.split('  ')[0]!;
    const info = await alice.json<Share>(['info', empty]);
    expect(info).toMatchObject({ initialized: true, size: 0, file_name: 'empty.txt' });
    const got = await alice.runBinary(['get', empty, '-o', '-']);
    expect(got.exitCode).toBe(0);
    expect(got.stdout.length).toBe(0);
    // The last bytes of an empty file are none (RFC 9110 §14.1.1): found from outside, this was
    // the server's 416 and exit 1, while `--range 0-` saved the empty file.
    for (const range of ['-10', '0-']) {
      const tail = await alice.runBinary(['get', empty, '--range', range, '-o', '-']);
      expect(tail.exitCode, tail.stderr.toString()).toBe(0);
      expect(tail.stdout.length).toBe(0);
    }
  });

  it('lists shares as a table and as the server page', async () => {
    const table = await alice.run(['ls']);
    expect(table.exitCode).toBe(0);
    const row = table.stdout.split('\n').find((l) => l.startsWith(share.share_id));
    expect(row?.split('\t')).toEqual([
      share.share_id,
      'random.bin',
      String(original.length),
      'alice',
      '-',
      expect.any(String),
    ]);
    const page = await alice.json<ListShape>(['ls', '--per-page', '2']);
    expect(page.shares).toHaveLength(2);
    expect(page).toMatchObject({ page: 1, pages: 2 });
    expect(page.shares[0]).toMatchObject({
      share_id: share.share_id,
      url: share.url,
      initialized: true,
      locked: false,
      sha256: createHash('sha256').update(original).digest('hex'),
    });
    // --all prints the same shape, every share in it
    const all = await alice.json<ListShape>(['ls', '--all', '--per-page', '1']);
    expect(all.shares).toHaveLength(3);
    expect(Object.keys(all.shares[0]!).sort()).toEqual(Object.keys(page.shares[0]!).sort());
  });

  it('downloads the whole file, by id and by URL, byte for byte', async () => {
    const out = join(work, 'out.bin');
    const res = await alice.run(['get', share.share_id, '-o', out]);
    expect(res.exitCode).toBe(0);
    expect((await readFile(out)).equals(original)).toBe(true);
    expect(existsSync(`${out}.part`)).toBe(false);
    // Made as cp and curl -o make files (it was 0600: unreadable to a web server serving it).
    const umask = process.umask();
    expect((await stat(out)).mode & 0o777).toBe(0o666 & ~umask);

    // Default name from Content-Disposition, in the current directory.
    const dir = await tempDir('get');
    const byUrl = await alice.json<{ path: string; size: number }>(['get', share.url], {
      cwd: dir,
    });
    expect(byUrl.size).toBe(original.length);
    expect((await readFile(join(dir, 'random.bin'))).equals(original)).toBe(true);
    // A name chosen by the server never overwrites an existing file silently.
    const again = await alice.run(['get', share.url], { cwd: dir });
    expect(again.exitCode).toBe(1);
    expectErrorLine(again.stderr);
    const clobber = await alice.run(['get', share.url, '--clobber'], { cwd: dir });
    expect(clobber.exitCode).toBe(0);
    // Nor a symbolic link of that name whose target is not there (found from outside: it was
    // replaced, exit 0): the link stays as it was; --clobber replaces the link itself.
    await rm(join(dir, 'random.bin'));
    await symlink(join(dir, 'nowhere', 'random.bin'), join(dir, 'random.bin'));
    const dangling = await alice.run(['get', share.url], { cwd: dir });
    expect(dangling.exitCode).toBe(1);
    expectErrorLine(dangling.stderr);
    expect(dangling.stderr.trim()).toBe(
      `fshare: random.bin already exists (choose another name with -o, or pass --clobber)`,
    );
    expect((await lstat(join(dir, 'random.bin'))).isSymbolicLink()).toBe(true);
    expect(existsSync(join(dir, 'nowhere'))).toBe(false);
    const over = await alice.run(['get', share.url, '--clobber'], { cwd: dir });
    expect(over.exitCode, over.stderr).toBe(0);
    expect((await lstat(join(dir, 'random.bin'))).isFile()).toBe(true);
    await rm(dir, { recursive: true, force: true });
  });

  it('downloads a byte range to stdout', async () => {
    const slice = await alice.runBinary(['get', share.share_id, '--range', '100-199', '-o', '-']);
    expect(slice.exitCode).toBe(0);
    expectSameBytes(slice, original.subarray(100, 200));
    const tail = await alice.runBinary(['get', share.share_id, '--range', '-10', '-o', '-']);
    expectSameBytes(tail, original.subarray(original.length - 10));
    const from = await alice.runBinary(['get', share.share_id, '--range', '999990-', '-o', '-']);
    expectSameBytes(from, original.subarray(999_990));
  });

  it('resumes a truncated .part with --continue', async () => {
    const dir = await tempDir('resume');
    await writeFile(join(dir, 'random.bin.part'), original.subarray(0, 300_000));
    const res = await alice.json<{ path: string; size: number; resumed_bytes: number }>(
      ['get', share.share_id, '--continue'],
      { cwd: dir },
    );
    expect(res).toMatchObject({ size: original.length, resumed_bytes: 300_000, verified: true });
    expect((await readFile(join(dir, 'random.bin'))).equals(original)).toBe(true);
    expect(existsSync(join(dir, 'random.bin.part'))).toBe(false);

    // A .part that does not belong to the current content is thrown away, not glued on.
    await writeFile(join(dir, 'other.bin.part'), Buffer.alloc(original.length + 5));
    const bigger = await alice.run([
      'get',
      share.share_id,
      '--continue',
      '-o',
      join(dir, 'other.bin'),
    ]);
    expect(bigger.exitCode).toBe(0);
    expect((await readFile(join(dir, 'other.bin'))).equals(original)).toBe(true);
    await rm(dir, { recursive: true, force: true });
  });

  it('renames a share', async () => {
    const res = await alice.run(['rename', share.share_id, 'renamed.bin']);
    expect(res.exitCode).toBe(0);
    expect((await alice.json<Share>(['info', share.share_id])).file_name).toBe('renamed.bin');
  });

  it('gives a share away and back with chown', async () => {
    expect((await alice.run(['chown', share.share_id, 'admin'])).exitCode).toBe(0);
    expect((await alice.json<Share>(['info', share.share_id])).owner_name).toBe('admin');
    const notOwner = await alice.run(['rename', share.share_id, 'nope.bin']);
    expect(notOwner.exitCode).toBe(3);
    expectErrorLine(notOwner.stderr, 403);
    expect((await admin.run(['chown', share.url, 'alice'])).exitCode).toBe(0);
    const unknownUser = await alice.run(['chown', share.share_id, 'nobody']);
    expect(unknownUser.exitCode).toBe(1);
    expectErrorLine(unknownUser.stderr, 400);
    const anon = await alice.json<{ share_id: string }[]>([
      'upload',
      join(work, 'hello.txt'),
      '--name',
      'anon.txt',
    ]);
    expect((await alice.run(['chown', anon[0]!.share_id, '--anonymous'])).exitCode).toBe(0);
    expect((await alice.json<Share>(['info', anon[0]!.share_id])).owner_name).toBeNull();
  });

  it('never lets a share name escape the current directory', async () => {
    const dir = await tempDir('names');
    const up = await alice.json<Uploaded[]>([
      'upload',
      join(work, 'hello.txt'),
      '--name',
      '../escape.txt',
    ]);
    const res = await alice.run(['get', up[0]!.share_id], { cwd: dir });
    expect(res.exitCode).toBe(0);
    // The whole name is kept, the separator made "_" and the leading dots dropped (issue 9).
    expect(await readFile(join(dir, '_escape.txt'), 'utf8')).toBe('hello\n');
    expect(existsSync(join(dir, '..', 'escape.txt'))).toBe(false);
    const dots = await alice.json<Uploaded[]>(['upload', join(work, 'hello.txt'), '--name', '..']);
    expect((await alice.run(['get', dots[0]!.share_id], { cwd: dir })).exitCode).toBe(0);
    // fshare serve offers a share named ".." as "__" (a name that can be saved, for curl -OJ too).
    expect(existsSync(join(dir, '__'))).toBe(true);
    await rm(dir, { recursive: true, force: true });
    for (const id of [up[0]!.share_id, dots[0]!.share_id]) await alice.run(['rm', id]);
  });

  it('refuses to replace or delete a locked share with exit 5', async () => {
    expect((await alice.run(['lock', share.share_id])).exitCode).toBe(0);
    expect((await alice.json<Share>(['info', share.share_id])).locked).toBe(true);
    const replace = await alice.run(['replace', share.share_id, join(work, 'replacement.bin')]);
    expect(replace.exitCode).toBe(5);
    expectErrorLine(replace.stderr, 423);
    const del = await alice.run(['rm', share.share_id]);
    expect(del.exitCode).toBe(5);
    expectErrorLine(del.stderr, 423);
  });

  it('replaces the content once unlocked', async () => {
    expect((await alice.run(['unlock', share.share_id])).exitCode).toBe(0);
    const res = await alice.json<Uploaded>([
      'replace',
      share.url,
      join(work, 'replacement.bin'),
      '--chunk-size',
      '32k',
    ]);
    expect(res).toMatchObject({
      share_id: share.share_id,
      size: replacement.length,
      file_name: 'renamed.bin',
    });
    const got = await alice.runBinary(['get', share.share_id, '-o', '-']);
    expectSameBytes(got, replacement);
  });

  it('lets anonymous users read only once the admin allows READ', async () => {
    const anonymous = await createCli();
    const denied = await anonymous.run(['--server', serve.url, 'get', share.share_id, '-o', '-']);
    expect(denied.exitCode).toBe(3);
    expectErrorLine(denied.stderr, 401);

    expect((await admin.run(['settings', 'anon', 'READ'])).exitCode).toBe(0);
    expect(await admin.json<Settings>(['settings', 'show'])).toEqual({
      default_permissions: ['READ'],
      max_expiry: null,
      max_downloads: null,
    });
    const me = await anonymous.json<Whoami>(['--server', serve.url, 'whoami']);
    expect(me).toEqual({ username: null, permissions: ['READ'] });
    const got = await anonymous.runBinary(['get', share.url, '-o', '-']);
    expect(got.exitCode).toBe(0);
    expectSameBytes(got, replacement);

    expect((await admin.run(['settings', 'anon', '--none'])).exitCode).toBe(0);
    expect((await admin.json<Settings>(['settings', 'show'])).default_permissions).toEqual([]);
  });

  // ADMIN among the anonymous permissions (the contract allows it) lets anyone who can reach the
  // server make themselves an administrator; the command said only "anonymous permissions: …".
  it('says in one warning line that anonymous ADMIN hands the server to anyone, and nothing for READ', async () => {
    const read = await admin.run(['settings', 'anon', 'READ']);
    expect(read.exitCode).toBe(0);
    expect(read.stderr).toBe('');
    const res = await admin.run(['settings', 'anon', 'READ', 'ADMIN']);
    expect(res.exitCode, res.stderr).toBe(0);
    expect(res.stdout).toContain('ADMIN');
    expect(res.stderr).toBe(
      `fshare: anyone who can reach ${serve.url} may now, without signing in, manage its users and settings (ADMIN), make themselves an administrator included; take it back with fshare settings anon --none (or a list without ADMIN)`,
    );
    try {
      // What it warns of: no token, and a new administrator.
      const made = await fetch(`${serve.url}/users`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          username: 'intruder',
          password: 'intruder-pw',
          permissions: ['ADMIN'],
        }),
      });
      expect(made.status).toBe(201);
    } finally {
      expect((await admin.run(['settings', 'anon', '--none'])).exitCode).toBe(0);
      expect((await admin.run(['users', 'rm', 'intruder'])).exitCode).toBe(0);
    }
  });

  it('prints the token for CI and accepts it from FSHARE_TOKEN', async () => {
    const res = await alice.run(['token']);
    expect(res.exitCode).toBe(0);
    aliceToken = res.stdout;
    expect(aliceToken).toMatch(/^[\w-]+\.[\w-]+\.[\w-]+$/);
    const ci = await createCli();
    const me = await ci.json<Whoami>(['--server', serve.url, 'whoami'], {
      env: { FSHARE_TOKEN: aliceToken },
    });
    expect(me.username).toBe('alice');
    const fresh = await ci.run(['--server', serve.url, 'token', 'extend'], {
      env: { FSHARE_TOKEN: aliceToken },
    });
    expect(fresh.exitCode).toBe(0);
    expect(fresh.stdout).toMatch(/^[\w-]+\.[\w-]+\.[\w-]+$/);
    expect(fresh.stdout).not.toBe(aliceToken);
  });

  it('token extend stores a fresh token that works', async () => {
    const before = (await admin.run(['token'])).stdout;
    const res = await admin.run(['token', 'extend']);
    expect(res.exitCode).toBe(0);
    const after = (await admin.run(['token'])).stdout;
    expect(after).not.toBe(before);
    expect((await admin.json<Whoami>(['whoami'])).username).toBe('admin');
  });

  it('deletes a share', async () => {
    const res = await alice.json<{ share_id: string }[]>(['rm', share.url]);
    expect(res.map((r) => r.share_id)).toEqual([share.share_id]);
    const gone = await alice.run(['info', share.share_id]);
    expect(gone.exitCode).toBe(4);
    expectErrorLine(gone.stderr, 404);
  });

  it('logout revokes the token on the server', async () => {
    const res = await alice.run(['logout']);
    expect(res.exitCode).toBe(0);
    const me = await alice.json<Whoami>(['whoami']);
    expect(me.username).toBeNull();
    const revoked = await alice.run(['whoami'], { env: { FSHARE_TOKEN: aliceToken } });
    expect(revoked.exitCode).toBe(3);
    expectErrorLine(revoked.stderr, 401);
    const noToken = await alice.run(['token']);
    expect(noToken.exitCode).toBe(3);
  });
});
