// Administration through the built binary against a real `fshare serve`, where the administrator
// acts on themself or a command stops halfway: what it prints must say what was done.
import { readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  ADMIN,
  BIN,
  cleanEnv,
  createCli,
  startServe,
  tempDir,
  type Cli,
  type Serve,
} from '../helpers/cli.js';

let serve: Serve;
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

async function addUser(admin: Cli, name: string, perms: string, password: string): Promise<void> {
  const res = await admin.run(['users', 'add', name, '--perms', perms, '--password-stdin'], {
    input: `${password}\n`,
  });
  expect(res.exitCode, res.stderr).toBe(0);
}

beforeAll(async () => {
  serve = await startServe();
});
afterAll(async () => {
  await serve?.stop();
  for (const cli of clis) await rm(cli.configDir, { recursive: true, force: true });
});

describe('an administrator acting on themself', () => {
  // `users passwd` of your own name changes the password and, by it, ends this session's token:
  // with --json it then read the user back with that dead token and failed, exit 3 "run fshare
  // login", for a change that had been made; without --json it said only "changed", and the next
  // command met a 401. Now: exit 0, the user (read before), and one line that this session ended.
  it('users passwd of yourself reports the change and says this session ended too', async () => {
    const admin = await signedIn(ADMIN.username, ADMIN.password);
    await addUser(admin, 'root2', 'ADMIN', 'root2-old');
    const root2 = await signedIn('root2', 'root2-old');
    const res = await root2.run(['--json', 'users', 'passwd', 'root2', '--password-stdin'], {
      input: 'root2-new\n',
    });
    expect(res.exitCode, res.stderr).toBe(0);
    expect(JSON.parse(res.stdout)).toMatchObject({ username: 'root2', permissions: ['ADMIN'] });
    expect(res.stderr.trim().split('\n')).toEqual([
      'fshare: that ended every session of root2, this one too: run `fshare login` with the new password (`fshare passwd` changes your own and keeps you signed in)',
    ]);
    // What the line says is so: this session is over, the new password signs in.
    expect((await root2.run(['whoami'])).exitCode).toBe(3);
    await signedIn('root2', 'root2-new');

    // Another user's password: no such line.
    await addUser(admin, 'plain', 'READ', 'plain-old');
    const other = await admin.run(['users', 'passwd', 'plain', '--password-stdin'], {
      input: 'plain-new\n',
    });
    expect(other.exitCode, other.stderr).toBe(0);
    expect(other.stdout.trim()).toBe('Password of plain changed');
    expect(other.stderr).toBe('');
  }, 180_000);

  // `users signout` of yourself ended this session silently ("Every token of NAME was revoked"
  // and nothing more); it now says so, as the next command will find.
  it('users signout of yourself says this session ended too', async () => {
    const admin = await signedIn(ADMIN.username, ADMIN.password);
    await addUser(admin, 'root3', 'ADMIN', 'root3-pw');
    const root3 = await signedIn('root3', 'root3-pw');
    const res = await root3.run(['users', 'signout', 'root3']);
    expect(res.exitCode, res.stderr).toBe(0);
    expect(res.stdout.trim()).toBe('Every token of root3 was revoked');
    expect(res.stderr.trim()).toBe('fshare: that ended this session too: run `fshare login`');
    expect((await root3.run(['whoami'])).exitCode).toBe(3);
  }, 180_000);

  // `users rm root4 carol` run by root4 deleted root4 first, which ended its token, so carol got
  // 401: exit 3 with carol still there, and no word that the session had gone with the account.
  // Your own account now goes last, and one line says this session ended with it.
  it('users rm of yourself among others deletes them all, yours last, and says this session ended', async () => {
    const admin = await signedIn(ADMIN.username, ADMIN.password);
    await addUser(admin, 'root4', 'ADMIN', 'root4-pw');
    await addUser(admin, 'carol4', 'READ', 'carol4-pw');
    const root4 = await signedIn('root4', 'root4-pw');
    const res = await root4.run(['users', 'rm', 'root4', 'carol4']);
    expect(res.exitCode, res.stderr).toBe(0);
    expect(res.stdout.trim().split('\n')).toEqual(['Deleted user carol4', 'Deleted user root4']);
    expect(res.stderr.trim()).toBe(
      'fshare: that was your own account: this session ended with it; sign in as another user (fshare login)',
    );
    for (const name of ['root4', 'carol4'])
      expect((await admin.run(['users', 'show', name])).exitCode, name).toBe(4);
  }, 180_000);
});

describe('users rm stopped by a failure', () => {
  // `users rm a missing b --json` deleted a, stopped at the 404 and printed no JSON: a script
  // could not learn that a was gone. It now prints the array of the users it deleted (as `rm`
  // does for shares), with the error line and its exit code.
  it('--json lists the users deleted before the failure', async () => {
    const admin = await signedIn(ADMIN.username, ADMIN.password);
    await addUser(admin, 'gone1', 'READ', 'pw-gone1');
    await addUser(admin, 'kept1', 'READ', 'pw-kept1');
    const res = await admin.run(['--json', 'users', 'rm', 'gone1', 'nosuchuser', 'kept1']);
    expect(res.exitCode).toBe(4);
    expect(JSON.parse(res.stdout)).toEqual([{ username: 'gone1', deleted: true }]);
    // Of several names, the line says which one failed.
    expect(res.stderr.trim()).toBe('fshare: nosuchuser: No user with this name (HTTP 404)');
    const left = await admin.json<{ users: { username: string }[] }>(['users', 'ls', '--all']);
    const names = left.users.map((u) => u.username);
    expect(names).not.toContain('gone1');
    expect(names).toContain('kept1');

    const none = await admin.run(['--json', 'users', 'rm', 'nosuchuser']);
    expect(none.exitCode).toBe(4);
    expect(JSON.parse(none.stdout)).toEqual([]);
    expect(none.stderr.trim()).toBe('fshare: No user with this name (HTTP 404)');
  }, 180_000);
});

describe('users perms run at once', () => {
  // `users perms NAME +PERM` reads the permissions, changes them and writes them all back: four
  // administrators adding one each at once all got exit 0, and the user was left with one or two
  // of the four (each write went over the others). Now each write carries If-Match and is done
  // again on what is there when another came first: every change stays.
  it('+PERM changes made at once by several administrators are all kept', async () => {
    const admin = await signedIn(ADMIN.username, ADMIN.password);
    const others = await Promise.all([1, 2, 3].map(() => signedIn(ADMIN.username, ADMIN.password)));
    await addUser(admin, 'many', '', 'many-pw');
    for (let round = 0; round < 3; round++) {
      const reset = await admin.run(['users', 'perms', 'many', '--set', 'none']);
      expect(reset.exitCode, reset.stderr).toBe(0);
      const runs = await Promise.all(
        [admin, ...others].map((cli, i) =>
          cli.run(['users', 'perms', 'many', `+${['READ', 'LIST', 'LOCK', 'CREATE'][i]}`]),
        ),
      );
      for (const run of runs) expect(run.exitCode, run.stderr).toBe(0);
      const shown = await admin.json<{ permissions: string[] }>(['users', 'show', 'many']);
      expect(shown.permissions).toEqual(['CREATE', 'LOCK', 'LIST', 'READ']);
    }
  }, 180_000);
});

describe('fshare serve: the first administrator', () => {
  // FSHARE_ADMIN_PASSWORD= (empty, as an env file or a compose file leaves it) made the
  // administrator with the password "", printed 'with password: ' and nothing after it; no
  // sign-in takes an empty password (400), and a server with a user never makes another
  // administrator: nobody could ever manage it. An empty password now counts as none given: a
  // random one is made, printed and kept in admin-password, and it signs in.
  it('an empty FSHARE_ADMIN_PASSWORD gets a random password that signs in', async () => {
    const empty = await startServe({ env: { FSHARE_ADMIN_PASSWORD: '' } });
    try {
      const printed = /Created administrator "admin" with password: (\S+)\n/.exec(empty.stdout());
      expect(printed, empty.stdout()).not.toBeNull();
      const password = printed![1]!;
      expect(await readFile(join(empty.dataDir, 'admin-password'), 'utf8')).toBe(
        `admin\n${password}\n`,
      );
      const cli = await createCli();
      clis.push(cli);
      const res = await cli.run(
        ['--server', empty.url, 'login', '-u', 'admin', '--password-stdin'],
        { input: `${password}\n` },
      );
      expect(res.exitCode, res.stderr).toBe(0);
    } finally {
      await empty.stop();
    }
  }, 180_000);

  // The administrator made on a first start took any name: "a b", "login", "Ｂｏｂ", one with an
  // escape character. POST /users refuses all of them (400), so no later request could make or
  // reach such a user the same way (/users/login is the sign-in), and it read like another in
  // lists and logs. Now: exit 2, one line naming the rule, and no user is created.
  it('a name no user may have is one line, exit 2, and creates no user', async () => {
    const dir = await tempDir('admin-name');
    try {
      const data = join(dir, 'data');
      for (const name of ['a b', 'login', 'Ｂｏｂ', 'a\u001bb']) {
        const res = await execa(
          'node',
          [BIN, 'serve', '--port', '0', '--data-dir', data, '--admin-user', name, '-q'],
          {
            env: cleanEnv({ FSHARE_ADMIN_PASSWORD: ADMIN.password }),
            extendEnv: false,
            reject: false,
            stdin: 'ignore',
            timeout: 60_000,
          },
        );
        expect(res.exitCode, res.stderr).toBe(2);
        expect(res.stdout).toBe('');
        expect(res.stderr).toBe(
          `fshare: --admin-user (or FSHARE_ADMIN_USER) must be 1-64 characters of letters, digits, ".", "_", "@" or "-", starting with a letter or digit, and not login, logout, extend or password: ${JSON.stringify(name)}`,
        );
      }
      const env = await execa('node', [BIN, 'serve', '--port', '0', '--data-dir', data, '-q'], {
        env: cleanEnv({ FSHARE_ADMIN_USER: 'Logout', FSHARE_ADMIN_PASSWORD: ADMIN.password }),
        extendEnv: false,
        reject: false,
        stdin: 'ignore',
        timeout: 60_000,
      });
      expect(env.exitCode, env.stderr).toBe(2);
      expect(env.stderr).toMatch(/^fshare: --admin-user \(or FSHARE_ADMIN_USER\) .*: "Logout"$/);
      // Nothing of those starts holds a user: the metadata written names none of them.
      const written = await readFile(join(data, 'db.json'), 'utf8').catch(() => '');
      expect(written).not.toMatch(/"username"/);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }, 180_000);
});
