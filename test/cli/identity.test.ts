// The CLI side of issue 9, through the built binary against a real `fshare serve`: a password
// change keeps the user signed in on this machine (with the new token) and out everywhere else;
// `logout --everywhere` and `users signout` end every token; `users quota` sets a quota that the
// next upload meets; a download keeps the whole stored name, made safe as browsers do.
import { readdir, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN, createCli, startServe, tempDir, type Cli, type Serve } from '../helpers/cli.js';
import { startStandIn, type StandIn } from '../helpers/standin.js';

let serve: Serve;
let admin: Cli;
let work: string;
const clis: Cli[] = [];

async function signedIn(user: string, password: string): Promise<Cli> {
  const cli = await createCli();
  clis.push(cli);
  const res = await cli.run(['--server', serve.url, 'login', '-u', user, '--password-stdin'], {
    input: `${password}\n`,
  });
  expect(res.exitCode, res.stderr).toBe(0);
  return cli;
}

beforeAll(async () => {
  serve = await startServe();
  admin = await signedIn(ADMIN.username, ADMIN.password);
  work = await tempDir('identity');
});
afterAll(async () => {
  await serve?.stop();
  for (const cli of clis) await rm(cli.configDir, { recursive: true, force: true });
  if (work) await rm(work, { recursive: true, force: true });
});

async function addUser(name: string, perms: string, password: string): Promise<void> {
  const res = await admin.run(['users', 'add', name, '--perms', perms, '--password-stdin'], {
    input: `${password}\n`,
  });
  expect(res.exitCode, res.stderr).toBe(0);
}

describe('identity from the command line', () => {
  it('passwd keeps this machine signed in and signs every other one out', async () => {
    await addUser('erin', 'READ,LIST', 'erin-old');
    const here = await signedIn('erin', 'erin-old');
    const elsewhere = await signedIn('erin', 'erin-old');
    const before = (await here.run(['token'])).stdout.trim();
    const res = await here.run(['passwd', '--password-stdin'], { input: 'erin-old\nerin-new\n' });
    expect(res.exitCode, res.stderr).toBe(0);
    expect(res.stdout).toMatch(/every other session was signed out/);
    expect((await here.run(['whoami'])).stdout).toMatch(/^erin /);
    // The token the new one replaced is revoked, not left working until it expires (the server
    // keeps the token that changed the password, and nothing here holds it any more).
    const replaced = await here.run(['whoami'], { env: { FSHARE_TOKEN: before } });
    expect(replaced.exitCode).toBe(3);
    const there = await elsewhere.run(['whoami']);
    expect(there.exitCode).toBe(3);
  });

  it("logout --everywhere, and an admin's users signout, end every token", async () => {
    await addUser('frank', 'READ', 'frank-pw');
    const a = await signedIn('frank', 'frank-pw');
    const b = await signedIn('frank', 'frank-pw');
    const out = await a.run(['logout', '--everywhere']);
    expect(out.exitCode, out.stderr).toBe(0);
    expect((await b.run(['whoami'])).exitCode).toBe(3);
    const c = await signedIn('frank', 'frank-pw');
    const signout = await admin.run(['users', 'signout', 'frank']);
    expect(signout.exitCode, signout.stderr).toBe(0);
    expect((await c.run(['whoami'])).exitCode).toBe(3);
  });

  it('users quota: shown by users ls, met by the next upload with a clear line (exit 1)', async () => {
    await addUser('gina', 'CREATE,READ,LIST', 'gina-pw');
    const set = await admin.run(['users', 'quota', 'gina', '1k']);
    expect(set.exitCode, set.stderr).toBe(0);
    const listed = await admin.json<{ users: { username: string; quota: number; used: number }[] }>(
      ['users', 'ls'],
    );
    expect(listed.users.find((u) => u.username === 'gina')).toMatchObject({ quota: 1024, used: 0 });
    const table = await admin.run(['users', 'ls']);
    expect(table.stdout).toMatch(/^gina\t.*\t0\t1024\t/m);
    const gina = await signedIn('gina', 'gina-pw');
    await writeFile(join(work, 'small.bin'), Buffer.alloc(600));
    await writeFile(join(work, 'big.bin'), Buffer.alloc(2000));
    expect((await gina.run(['upload', join(work, 'small.bin')])).exitCode).toBe(0);
    const over = await gina.run(['upload', join(work, 'big.bin')]);
    expect(over.exitCode).toBe(1);
    expect(over.stderr).toMatch(/quota of gina .*\(HTTP 413\)/);
    expect((await admin.run(['users', 'quota', 'gina', 'none'])).exitCode).toBe(0);
    expect((await gina.run(['upload', join(work, 'big.bin')])).exitCode).toBe(0);
    expect((await admin.run(['users', 'quota', 'gina', 'lots'])).exitCode).toBe(2);
  });

  // A NAME of "", "." or ".." cannot be carried by a URL: found sending DELETE / and GET / ("No
  // route", exit 4), DELETE /tokens, and DELETE or PATCH /users (405, exit 1). Now exit 2 with one
  // line and no request; `users rm` refuses before deleting any of the names it was given.
  it('users commands refuse the names "", "." and ".." with exit 2 and change nothing', async () => {
    await addUser('hank', 'READ', 'hank-pw');
    for (const bad of ['', '.', '..']) {
      for (const args of [
        ['users', 'show', bad],
        ['users', 'rm', 'hank', bad],
        ['users', 'perms', bad, '--set', 'ADMIN'],
        ['users', 'passwd', bad, '--password-stdin'],
        ['users', 'quota', bad, '1k'],
        ['users', 'signout', bad],
      ]) {
        const res = await admin.run(args, { input: 'pw\n' });
        expect(res.exitCode, `${args.join(' ')}: ${res.stderr}`).toBe(2);
        expect(res.stdout).toBe('');
        expect(res.stderr.trim()).toBe(`fshare: not a user name: "${bad}"`);
      }
    }
    const hank = await admin.json<{ username: string }>(['users', 'show', 'hank']);
    expect(hank.username).toBe('hank');
  });

  it('get keeps the whole stored name, with separators made "_" and no leading dot', async () => {
    await writeFile(join(work, 'payload.txt'), 'hostile name');
    const up = await admin.json<{ share_id: string }[]>([
      'upload',
      join(work, 'payload.txt'),
      '--name',
      '../../etc/passwd-T.txt',
    ]);
    const into = await tempDir('get-name');
    const got = await admin.run(['get', up[0]!.share_id], { cwd: into });
    expect(got.exitCode, got.stderr).toBe(0);
    expect(await readdir(into)).toEqual(['_.._etc_passwd-T.txt']);
    await rm(into, { recursive: true, force: true });
  });
});

describe('users quota and users signout against a server without them (the reference stand-in)', () => {
  let standIn: StandIn;
  let cli: Cli;
  const run = (args: string[]) =>
    cli.run(['--server', standIn.url, ...args], { env: { FSHARE_TOKEN: 'any-token' } });

  beforeAll(async () => {
    standIn = await startStandIn();
    cli = await createCli();
    clis.push(cli);
  });
  afterAll(async () => {
    await standIn?.close();
  });

  // Against the real reference, users quota printed its 400 "Invalid patch: {'quota': ['Unknown
  // field.']}": the line now says the server has no quotas (exit 1).
  it('users quota exits 1 saying the server does not support quotas', async () => {
    const res = await run(['users', 'quota', 'alice', '1g']);
    expect(res.exitCode).toBe(1);
    expect(res.stdout).toBe('');
    expect(res.stderr).toBe(
      `fshare: ${standIn.url} does not support user quotas (an fshare serve extension)`,
    );
  });

  // Against the real reference, users signout of a user who exists was 'fshare: Not Found (HTTP
  // 404)', exit 4, as if there were no such user: the server has no such route. It now says so
  // (exit 1); a user who does not exist is still exit 4.
  it('users signout of an existing user says the server cannot sign users out (exit 1); a missing user is exit 4', async () => {
    const res = await run(['users', 'signout', 'alice']);
    expect(res.exitCode).toBe(1);
    expect(res.stdout).toBe('');
    expect(res.stderr).toMatch(
      new RegExp(
        `^fshare: ${standIn.url} does not offer signing a user out everywhere \\(an fshare serve extension\\)`,
      ),
    );
    expect(res.stderr.trimEnd().split('\n')).toHaveLength(1);
    const missing = await run(['users', 'signout', 'nobody']);
    expect(missing.exitCode).toBe(4);
    expect(missing.stderr).toMatch(/^fshare: .*\(HTTP 404\)$/);
  });

  // Property: a failed request changes nothing. Found (against the real reference, which has no
  // DELETE /users/<name>/tokens): logout --everywhere deleted the local copy of the token and
  // said 'signed out locally, but the server did not revoke the token: Not Found' (exit 4),
  // though nothing had been revoked anywhere. It now says the server cannot, exit 1, and leaves
  // the session as it was (no other request sent, nothing removed).
  it('logout --everywhere says the server cannot, exit 1, and signs nothing out', async () => {
    standIn.requests.length = 0;
    const res = await run(['logout', '--everywhere']);
    expect(res.exitCode, res.stderr).toBe(1);
    expect(res.stdout).toBe('');
    expect(res.stderr.trimEnd().split('\n')).toEqual([
      `fshare: ${standIn.url} does not offer signing out everywhere (an fshare serve extension): nothing was revoked, and you are still signed in (\`fshare logout\` ends this session)`,
    ]);
    expect(standIn.requests).toEqual(['GET /whoami', 'DELETE /users/alice/tokens']);
  });
});
