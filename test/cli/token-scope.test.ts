// Which token goes to which server, through the built binary against a real `fshare serve` and a
// stand-in server that records what it is sent. Found broken: FSHARE_TOKEN went to whatever
// server a share URL named, so `FSHARE_TOKEN=… fshare get http://elsewhere/files/<id>` (a URL
// pasted from a chat or a web page) handed the CI's token to that host. The variable is now the
// token of the command's server only; another server named by a URL gets its own stored token or
// none, and one warning line says how to send the variable there. Also found: `passwd` (or
// `token extend`) by a user an administrator had renamed stored the new token under the new name
// and left the old entry, holding the token passwd had just ended: two accounts stored for the
// server, so a later `--server URL` command (the last login elsewhere) found neither and went
// anonymous. The old entry now goes when the new one takes its place. And: a `logout` racing a
// `login` of the same account (two terminals) deleted the token that login had just stored and
// reported ("Signed in"), not the one it revoked: the user was signed out, unsaid. A logout now
// removes the stored entry only while it holds the token it revoked. And: `fshare login -u bob`
// in a shell with FSHARE_TOKEN set (alice's, from a CI recipe) said "Signed in ... as bob" and
// every next command was alice, unsaid; login now says in one line that the variable wins.
// `passwd` with FSHARE_TOKEN said "every other session was signed out", though the variable's
// token had been ended too (and the new one dropped): it now says so.
import { readFile, writeFile, rm } from 'node:fs/promises';
import { createServer, request, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  ADMIN,
  createCli,
  signIn,
  startServe,
  tempDir,
  type Cli,
  type Serve,
} from '../helpers/cli.js';

let serve: Serve;
let cli: Cli;
let work: string;
let spy: Server;
let spyUrl: string;
/** The Authorization header of every request the stand-in server got ('' when none). */
const seen: string[] = [];

beforeAll(async () => {
  serve = await startServe();
  cli = await createCli();
  await signIn(cli, serve.url);
  work = await tempDir('token-scope');
  spy = createServer((req, res) => {
    seen.push(req.headers.authorization ?? '');
    req.resume();
    res.writeHead(404, { 'content-type': 'application/json' });
    res.end('{"status":"fail","message":"no such share"}');
  });
  await new Promise<void>((done) => spy.listen(0, '127.0.0.1', done));
  spyUrl = `http://127.0.0.1:${(spy.address() as AddressInfo).port}`;
});
afterAll(async () => {
  await serve?.stop();
  await new Promise<void>((done) => (spy ? spy.close(() => done()) : done()));
  if (cli) await rm(cli.configDir, { recursive: true, force: true });
  if (work) await rm(work, { recursive: true, force: true });
});

const ID = '0b6c3b8e-3a8f-4d1c-9a57-2f1f3c0e5d11';

describe('FSHARE_TOKEN goes to the command server only', () => {
  it('a share URL naming another server gets no FSHARE_TOKEN, and a warning says so', async () => {
    const token = (await cli.run(['token'])).stdout.trim();
    expect(token).toMatch(/^\S{20,}$/);
    // A CI job: the token in the environment, the server in FSHARE_SERVER, its own config dir.
    const ci = await createCli();
    const env = { FSHARE_TOKEN: token, FSHARE_SERVER: serve.url };
    try {
      seen.length = 0;
      const get = await ci.run(['get', `${spyUrl}/files/${ID}`, '-o', join(work, 'x')], { env });
      expect(get.exitCode).toBe(4);
      const info = await ci.run(['info', `${spyUrl}/files/${ID}/content`], { env });
      expect(info.exitCode).toBe(4);
      expect(seen.length).toBeGreaterThanOrEqual(2);
      for (const auth of seen) expect(auth).toBe('');
      expect(get.stderr).toContain(
        `fshare: FSHARE_TOKEN is not sent to ${spyUrl}, which is not the command's server (${serve.url}); to use it there, set FSHARE_SERVER=${spyUrl}`,
      );
      expect(get.stderr).not.toContain(token);

      // The same variable still serves a URL of the command's own server, and that server itself.
      const file = join(work, 'a.txt');
      await writeFile(file, 'scoped\n');
      const up = await ci.json<{ share_id: string }[]>(['upload', file], { env });
      const id = up[0]!.share_id;
      const own = await ci.run(['get', `${serve.url}/files/${id}`, '-o', '-'], { env });
      expect(own.exitCode, own.stderr).toBe(0);
      expect(own.stdout).toBe('scoped');
      expect(own.stderr).not.toContain('FSHARE_TOKEN');
    } finally {
      await rm(ci.configDir, { recursive: true, force: true });
    }
  });

  it('a URL of another server still gets the token stored for that server', async () => {
    // The stored login is for the spy's address: FSHARE_TOKEN (for serve) must not replace it.
    const both = await createCli();
    try {
      await writeFile(
        join(both.configDir, 'credentials.json'),
        `${JSON.stringify({ [`admin@${spyUrl}`]: 'stored-token-for-spy' })}\n`,
        { mode: 0o600 },
      );
      seen.length = 0;
      const res = await both.run(['info', `${spyUrl}/files/${ID}`], {
        env: { FSHARE_TOKEN: 'token-for-serve', FSHARE_SERVER: serve.url },
      });
      expect(res.exitCode).toBe(4);
      expect(seen).toEqual(['Bearer stored-token-for-spy']);
    } finally {
      await rm(both.configDir, { recursive: true, force: true });
    }
  });
  // Found from outside: accounts are stored as `USER@SERVER`, and a server's only account was
  // found by its ending; the account of a server at `http://a/x@<spy>` ends like the spy's own.
  it('a server whose URL ends in @<another server> lends that server no token', async () => {
    const both = await createCli();
    try {
      await writeFile(
        join(both.configDir, 'credentials.json'),
        `${JSON.stringify({ [`admin@${serve.url}/x@${spyUrl}`]: 'token-of-the-other-server' })}\n`,
        { mode: 0o600 },
      );
      seen.length = 0;
      const res = await both.run(['--server', spyUrl, 'info', ID]);
      expect(res.exitCode).toBe(4);
      expect(seen).toEqual(['']);
    } finally {
      await rm(both.configDir, { recursive: true, force: true });
    }
  });
});

describe('the account renamed under the client', () => {
  it('passwd and token extend store the new name and drop the entry of the old one', async () => {
    const admin = (await cli.run(['token'])).stdout.trim();
    const add = await cli.run(['users', 'add', 'ivy', '--perms', 'READ', '--password-stdin'], {
      input: 'ivy-pw-1\n',
    });
    expect(add.exitCode, add.stderr).toBe(0);
    const ivy = await createCli();
    const stored = async () =>
      Object.keys(
        JSON.parse(await readFile(join(ivy.configDir, 'credentials.json'), 'utf8')) as object,
      );
    const rename = async (from: string, to: string) => {
      const res = await fetch(`${serve.url}/users/${from}`, {
        method: 'PATCH',
        headers: { authorization: `Bearer ${admin}`, 'content-type': 'application/json' },
        body: JSON.stringify({ username: to }),
      });
      expect(res.status).toBe(200);
    };
    try {
      await signIn(ivy, serve.url, { username: 'ivy', password: 'ivy-pw-1' });
      await rename('ivy', 'ivy2');
      const passwd = await ivy.run(['passwd', '--password-stdin'], {
        input: 'ivy-pw-1\nivy-pw-2\n',
      });
      expect(passwd.exitCode, passwd.stderr).toBe(0);
      expect(await stored()).toEqual([`ivy2@${serve.url}`]);

      await rename('ivy2', 'ivy3');
      const extend = await ivy.run(['token', 'extend']);
      expect(extend.exitCode, extend.stderr).toBe(0);
      expect(extend.stdout).toContain('Token renewed for ivy3');
      expect(await stored()).toEqual([`ivy3@${serve.url}`]);

      // With the last login elsewhere, --server finds the server's one stored account.
      const config = join(ivy.configDir, 'config.json');
      await writeFile(config, `${JSON.stringify({ server: spyUrl, username: ADMIN.username })}\n`);
      const who = await ivy.run(['--server', serve.url, 'whoami']);
      expect(who.exitCode, who.stderr).toBe(0);
      expect(who.stdout).toMatch(/^ivy3 on /);
    } finally {
      await rm(ivy.configDir, { recursive: true, force: true });
    }
  });
});

describe('logout racing a login', () => {
  it('a login stored meanwhile keeps its token: logout removes only the one it revoked', async () => {
    // A proxy in front of serve that holds POST /users/logout until the second login is done.
    let held!: () => void;
    const logoutArrived = new Promise<void>((done) => (held = done));
    let release!: () => void;
    const released = new Promise<void>((done) => (release = done));
    const upstream = new URL(serve.url);
    const proxy = createServer((req, res) => {
      const forward = () => {
        const out = request(
          {
            host: upstream.hostname,
            port: upstream.port,
            method: req.method,
            path: req.url,
            headers: { ...req.headers, host: upstream.host },
          },
          (answer) => {
            res.writeHead(answer.statusCode ?? 502, answer.headers);
            answer.pipe(res);
          },
        );
        out.on('error', () => res.destroy());
        req.pipe(out);
      };
      if (req.method === 'POST' && req.url === '/users/logout') {
        held();
        void released.then(forward);
      } else forward();
    });
    await new Promise<void>((done) => proxy.listen(0, '127.0.0.1', done));
    const via = `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`;
    const user = await createCli();
    try {
      await signIn(user, via);
      const first = (await user.run(['token'])).stdout.trim();
      const logout = user.run(['logout']);
      await logoutArrived;
      await signIn(user, via); // the second terminal, while the logout waits for its answer
      const second = (await user.run(['token'])).stdout.trim();
      expect(second).not.toBe(first);
      release();
      const out = await logout;
      expect(out.exitCode, out.stderr).toBe(0);
      expect(out.stderr.trim()).toBe(
        `fshare: a newer token of ${ADMIN.username} was stored meanwhile (another login); it is kept, and still signs you in`,
      );
      const who = await user.run(['whoami']);
      expect(who.exitCode, who.stderr).toBe(0);
      expect(who.stdout).toMatch(new RegExp(`^${ADMIN.username} on `));
      expect((await user.run(['token'])).stdout.trim()).toBe(second);
    } finally {
      release();
      const closed = new Promise<void>((done) => proxy.close(() => done()));
      proxy.closeAllConnections();
      await closed;
      await rm(user.configDir, { recursive: true, force: true });
    }
  });
});

describe('login with FSHARE_TOKEN set', () => {
  it('says that the variable, not the token just stored, signs the next commands', async () => {
    const admin = (await cli.run(['token'])).stdout.trim();
    const add = await cli.run(['users', 'add', 'jay', '--perms', 'READ', '--password-stdin'], {
      input: 'jay-pw\n',
    });
    expect(add.exitCode, add.stderr).toBe(0);
    const shell = await createCli();
    const env = { FSHARE_TOKEN: admin };
    try {
      const login = await shell.run(
        ['--server', serve.url, 'login', '-u', 'jay', '--password-stdin'],
        { input: 'jay-pw\n', env },
      );
      expect(login.exitCode, login.stderr).toBe(0);
      expect(login.stdout).toContain(`Signed in to ${serve.url} as jay`);
      expect(login.stderr.trim()).toBe(
        `fshare: FSHARE_TOKEN is set, and commands to ${serve.url} use it, not the token of jay stored now, until it is unset`,
      );
      expect(login.stderr).not.toContain(admin);
      // What the line warns of: the next command is the variable's user, not jay.
      const who = await shell.run(['whoami'], { env });
      expect(who.stdout).toMatch(new RegExp(`^${ADMIN.username} on `));
      // Without the variable: no such line.
      const plain = await shell.run(['login', '-u', 'jay', '--password-stdin'], {
        input: 'jay-pw\n',
      });
      expect(plain.exitCode, plain.stderr).toBe(0);
      expect(plain.stderr).toBe('');
    } finally {
      await rm(shell.configDir, { recursive: true, force: true });
    }
  });
});

describe('warnings carry names a server sent', () => {
  // A server answered a sign-in with a user name holding terminal escapes (clear the screen, set
  // the window title, a new line that looks like fshare's own): stdout showed it as '?', but the
  // FSHARE_TOKEN warning wrote it to the terminal as it came. Every warning line is now printable.
  it('shows control characters in a warning as ?, as stdout does', async () => {
    const evil = 'bob\u001b[2J\u001b]0;pwned\u0007\nfshare: fake line';
    const hostile = createServer((req, res) => {
      req.resume();
      const body = JSON.stringify({ status: 'success', username: evil, auth_token: 'tok-123' });
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(body);
    });
    await new Promise<void>((resolve) => hostile.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(hostile.address() as AddressInfo).port}`;
    const shell = await createCli();
    try {
      const login = await shell.run(['--server', url, 'login', '-u', 'bob', '--password-stdin'], {
        input: 'pw\n',
        env: { FSHARE_TOKEN: 'another-token' },
      });
      expect(login.exitCode, login.stderr).toBe(0);
      const shown = 'bob?[2J?]0;pwned??fshare: fake line';
      expect(login.stdout).toContain(`as ${shown} (`);
      expect(login.stderr).toBe(
        `fshare: FSHARE_TOKEN is set, and commands to ${url} use it, not the token of ${shown} stored now, until it is unset`,
      );
    } finally {
      hostile.closeAllConnections();
      await new Promise((resolve) => hostile.close(resolve));
      await rm(shell.configDir, { recursive: true, force: true });
    }
  });
});

describe('passwd with FSHARE_TOKEN', () => {
  // fshare serve keeps the token that changed the password (as the reference server does): the
  // variable's token goes on, and the CLI, which asks rather than assumes, says nothing else.
  it('keeps the token in the variable working, and says every other session ended', async () => {
    const add = await cli.run(['users', 'add', 'kim', '--perms', 'READ', '--password-stdin'], {
      input: 'kim-pw-1\n',
    });
    expect(add.exitCode, add.stderr).toBe(0);
    const ci = await createCli();
    try {
      await signIn(ci, serve.url, { username: 'kim', password: 'kim-pw-1' });
      const token = (await ci.run(['token'])).stdout.trim();
      const env = { FSHARE_TOKEN: token };
      // Another session, stored on this machine.
      await signIn(ci, serve.url, { username: 'kim', password: 'kim-pw-1' });
      expect((await ci.run(['token'])).stdout.trim()).not.toBe(token);
      const res = await ci.run(['passwd', '--password-stdin'], {
        input: 'kim-pw-1\nkim-pw-2\n',
        env,
      });
      expect(res.exitCode, res.stderr).toBe(0);
      expect(res.stdout).toBe('Password changed; every other session was signed out');
      expect(res.stderr).toBe('');
      // What it says is so: the variable's token works, the stored one (another session) ended.
      const who = await ci.run(['whoami'], { env });
      expect(who.exitCode, who.stderr).toBe(0);
      expect(who.stdout).toMatch(/^kim on /);
      expect((await ci.run(['whoami'])).exitCode).toBe(3);
    } finally {
      await rm(ci.configDir, { recursive: true, force: true });
    }
  });

  // A server that ends the caller's token too (fshare serve before it kept it) and sends a new
  // one: the variable's token is dead, which the CLI finds out by asking, and says.
  it("says so when the server ended the variable's token too", async () => {
    const seen: string[] = [];
    const older = createServer((req, res) => {
      req.resume();
      seen.push(`${req.method} ${req.url}`);
      const [status, body] =
        req.url === '/users/password'
          ? [
              200,
              {
                status: 'success',
                message: 'Password changed',
                username: 'kim',
                auth_token: 'new-tok',
              },
            ]
          : [401, { status: 'fail', message: 'The token is invalid, expired or revoked' }];
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(body));
    });
    await new Promise<void>((resolve) => older.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(older.address() as AddressInfo).port}`;
    const shell = await createCli();
    try {
      const res = await shell.run(['--server', url, 'passwd', '--password-stdin'], {
        input: 'kim-pw-1\nkim-pw-2\n',
        env: { FSHARE_TOKEN: 'old-tok' },
      });
      expect(res.exitCode, res.stderr).toBe(0);
      expect(res.stdout).toBe('Password changed');
      expect(res.stderr.trim()).toBe(
        'fshare: every session was signed out, the token in FSHARE_TOKEN too: set it to a new one (fshare login, then fshare token)',
      );
      expect(res.stdout + res.stderr).not.toContain('new-tok');
      expect(seen).toEqual(['POST /users/password', 'GET /whoami']);
    } finally {
      older.closeAllConnections();
      await new Promise((resolve) => older.close(resolve));
      await rm(shell.configDir, { recursive: true, force: true });
    }
  });
});

// Found from outside: `FSHARE_TOKEN=<another server's token> fshare logout` said "Signed out",
// exit 0, with a warning that the variable's token "is revoked", and its --json named the user
// stored for the command's server, who was not signed out. The token still worked on its own
// server. Nothing was revoked, and the command now says so: exit 3.
describe('logout of a token the server does not accept', () => {
  it('another server’s token in FSHARE_TOKEN: exit 3, nothing claimed, and it still works there', async () => {
    const other = await startServe();
    const elsewhere = await createCli();
    try {
      await signIn(elsewhere, other.url);
      const token = (await elsewhere.run(['--server', other.url, 'token'])).stdout.trim();
      expect(token.length).toBeGreaterThan(20);
      for (const args of [['logout'], ['logout', '--everywhere'], ['--json', 'logout']]) {
        const res = await cli.run(['--server', serve.url, ...args], {
          env: { FSHARE_TOKEN: token },
        });
        expect(res.exitCode, res.stderr).toBe(3);
        expect(res.stdout).toBe('');
        expect(res.stderr.trim()).toBe(
          `fshare: ${serve.url} does not accept the token in FSHARE_TOKEN (HTTP 401), so nothing was revoked: it had ended already, or it is another server's (then it still works there: \`fshare --server URL logout\` with that server's URL revokes it)`,
        );
      }
      // Still valid on its own server, and the stored login here is untouched.
      const there = await elsewhere.run(['--server', other.url, 'whoami', '--json']);
      expect(JSON.parse(there.stdout).username).toBe(ADMIN.username);
      const here = await cli.run(['--server', serve.url, 'whoami', '--json']);
      expect(JSON.parse(here.stdout).username).toBe(ADMIN.username);
      // Revoked where it came from, the variable's logout names no stored user.
      const out = await elsewhere.run(['--server', other.url, '--json', 'logout'], {
        env: { FSHARE_TOKEN: token },
      });
      expect(out.exitCode, out.stderr).toBe(0);
      expect(JSON.parse(out.stdout)).toEqual({ server: other.url, username: null, revoked: true });
      const after = await elsewhere.run(['--server', other.url, 'whoami'], {
        env: { FSHARE_TOKEN: token },
      });
      expect(after.exitCode).toBe(3);
    } finally {
      await other.stop();
      await rm(elsewhere.configDir, { recursive: true, force: true });
    }
  });
});
