import { randomBytes, randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import { readFile, rm, stat, writeFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import type { Command } from 'commander';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildProgram } from '../../src/cli/program.js';
import {
  ADMIN,
  BIN,
  cleanEnv,
  closedPort,
  createCli,
  startServe,
  tempDir,
  type Cli,
  type Serve,
} from '../helpers/cli.js';

function expectOneLine(stderr: string, pattern: RegExp): void {
  const lines = stderr.trimEnd().split('\n');
  expect(lines).toHaveLength(1);
  expect(lines[0]).toMatch(/^fshare: /);
  expect(lines[0]).toMatch(pattern);
  expect(stderr).not.toMatch(/\s+at .+:\d+:\d+/); // never a stack trace
}

describe('bad input gives one clear line and the right exit code', () => {
  let serve: Serve;
  let cli: Cli;
  let work: string;

  beforeAll(async () => {
    serve = await startServe();
    cli = await createCli();
    work = await tempDir('bad');
    await writeFile(join(work, 'a.txt'), 'a');
    const login = await cli.run(
      ['--server', serve.url, 'login', '-u', ADMIN.username, '--password-stdin'],
      {
        input: `${ADMIN.password}\n`,
      },
    );
    expect(login.exitCode).toBe(0);
  });

  afterAll(async () => {
    await serve?.stop();
    if (cli) await rm(cli.configDir, { recursive: true, force: true });
    if (work) await rm(work, { recursive: true, force: true });
  });

  it('missing file: exit 2, nothing created', async () => {
    const res = await cli.run(['upload', join(work, 'a.txt'), join(work, 'missing.bin')]);
    expect(res.exitCode).toBe(2);
    expectOneLine(res.stderr, /no such file: .*missing\.bin/);
    expect(res.stdout).toBe('');
    const list = await cli.json<{ shares: unknown[] }>(['ls']);
    expect(list.shares).toHaveLength(0);
  });

  it('bad id: exit 2; unknown id: exit 4', async () => {
    const bad = await cli.run(['info', 'not-a-share']);
    expect(bad.exitCode).toBe(2);
    expectOneLine(bad.stderr, /not a share id or URL: not-a-share/);
    const badUrl = await cli.run(['get', `${serve.url}/users/admin`]);
    expect(badUrl.exitCode).toBe(2);
    const unknown = await cli.run(['get', randomUUID(), '-o', '-']);
    expect(unknown.exitCode).toBe(4);
    expectOneLine(unknown.stderr, /\(HTTP 404\)$/);
  });

  it('bad size, range, count or permission: exit 2', async () => {
    const file = join(work, 'a.txt');
    for (const args of [
      ['upload', file, '--chunk-size', 'lots'],
      ['upload', file, '--chunk-size', '0'],
      ['upload', file, '--parallel', 'x'],
      ['get', randomUUID(), '--range', '9-3'],
      ['get', randomUUID(), '--continue', '-o', '-'],
      ['get', randomUUID(), '--json', '-o', '-'],
      ['ls', '--page', '0'],
      ['users', 'add', 'bob', '--perms', 'READ,FLY', '--password-stdin'],
      ['users', 'perms', 'bob', 'READ'],
      ['settings', 'anon'],
      ['chown', randomUUID()],
    ]) {
      const res = await cli.run(args, { input: 'pw\n' });
      expect(res.exitCode, args.join(' ')).toBe(2);
      expectOneLine(res.stderr, /./);
    }
  });

  it('commander usage errors: exit 2 in one line', async () => {
    for (const args of [['frobnicate'], ['upload'], ['get', 'a', 'b'], ['ls', '--bogus']]) {
      const res = await cli.run(args);
      expect(res.exitCode, args.join(' ')).toBe(2);
      expectOneLine(res.stderr, /./);
    }
  });

  it('never waits for a password without a terminal', async () => {
    const fresh = await createCli();
    const res = await fresh.run(['--server', serve.url, 'login', '-u', 'admin']);
    expect(res.exitCode).toBe(2);
    expectOneLine(res.stderr, /--password-stdin/);
    const empty = await fresh.run([
      '--server',
      serve.url,
      'login',
      '-u',
      'admin',
      '--password-stdin',
    ]);
    expect(empty.exitCode).toBe(2);
    const add = await cli.run(['users', 'add', 'carol']);
    expect(add.exitCode).toBe(2);
  });

  it('server down: exit 6 after retries, one line', async () => {
    const port = await closedPort();
    const res = await cli.run(['--server', `http://127.0.0.1:${port}`, 'ls']);
    expect(res.exitCode).toBe(6);
    expectOneLine(res.stderr, /cannot reach http:\/\/127\.0\.0\.1:\d+: connection refused/);
    const up = await cli.run([
      '--server',
      `http://127.0.0.1:${port}`,
      'upload',
      join(work, 'a.txt'),
    ]);
    expect(up.exitCode).toBe(6);
  });

  // A password typed for a plain-HTTP server on another machine crosses the network readable; the
  // login said nothing of it. Loopback and https:// are quiet.
  it('login over plain HTTP to another machine warns before the password is sent; loopback and https do not', async () => {
    const login = (server: string) =>
      cli.run(['--server', server, 'login', '-u', 'someone', '--password-stdin'], {
        input: 'a-password-123\n',
      });
    const far = await login('http://fshare-test.invalid:5000');
    expect(far.exitCode).toBe(6); // no such host
    const lines = far.stderr.trimEnd().split('\n');
    expect(lines[0]).toBe(
      'fshare: http://fshare-test.invalid:5000 is plain HTTP: the password and the token cross the network unencrypted; use https:// unless a trusted network carries it',
    );
    expect(lines).toHaveLength(2);
    for (const quiet of [
      'https://fshare-test.invalid:5000',
      'http://localhost:1',
      'http://[::1]:1',
    ]) {
      const res = await login(quiet);
      expect(res.stderr, quiet).not.toContain('plain HTTP');
      expect(res.stderr.trimEnd().split('\n'), quiet).toHaveLength(1);
    }
  });

  // Property: an answer that is not the one asked for is a failure, never a success. A 302 was
  // "Saved NAME (0 B)" with exit 0; a 200 of another shape crashed inside `ls` with "Cannot read
  // properties of undefined". And a token is only ever sent to the address the user gave.
  it('a redirect is one line naming where it leads (not followed); an answer of another shape, or too large, is one line', async () => {
    const seen: { url: string; auth?: string }[] = [];
    const other = createServer((req, res) => {
      seen.push({ url: req.url!, auth: req.headers.authorization });
      req.resume();
      if (req.url!.startsWith('/elsewhere')) {
        res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': 5 });
        res.end('bytes');
      } else if (req.url!.startsWith('/files?')) {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end('{"data":null}');
      } else if (req.url!.startsWith('/users?')) {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end('');
      } else if (req.url === '/admin/settings') {
        // 17 MiB of JSON, in pieces: more than any answer fshare reads into memory.
        res.writeHead(200, { 'content-type': 'application/json' });
        res.write('{"default_permissions":[');
        const piece = `${'"READ",'.repeat((1024 * 1024) / 8)}`;
        let sent = 0;
        const more = () => {
          while (sent < 17 && res.write(piece)) sent++;
          if (sent < 17) res.once('drain', more);
          else res.end('"READ"]}');
        };
        res.on('error', () => undefined);
        more();
      } else {
        res.writeHead(302, { location: `http://127.0.0.1:${port}/elsewhere`, 'content-length': 0 });
        res.end();
      }
    });
    await new Promise<void>((r) => other.listen(0, '127.0.0.1', r));
    const port = (other.address() as AddressInfo).port;
    try {
      const env = { FSHARE_TOKEN: 'secret-token-value' };
      const at = ['--server', `http://127.0.0.1:${port}`];
      const id = randomUUID();
      const out = join(work, 'redirected.bin');
      for (const args of [
        ['get', id, '-o', out],
        ['info', id],
        ['upload', join(work, 'a.txt')],
        ['whoami'],
      ]) {
        const res = await cli.run([...at, ...args], { env });
        expect(res.exitCode, `${args[0]}: ${res.stderr}`).toBe(1);
        expectOneLine(
          res.stderr,
          new RegExp(
            `the server redirects to http://127\\.0\\.0\\.1:${port}/elsewhere; fshare follows no redirects.* \\(HTTP 302\\)$`,
          ),
        );
      }
      expect(existsSync(out)).toBe(false);
      expect(existsSync(`${out}.part`)).toBe(false);
      // Never followed, so the token went nowhere but where it was sent.
      expect(seen.filter((r) => r.url.startsWith('/elsewhere'))).toEqual([]);

      const ls = await cli.run([...at, 'ls'], { env });
      expect(ls.exitCode).toBe(1);
      expectOneLine(ls.stderr, /the server's answer to GET \/files is not a page of a list/);
      const users = await cli.run([...at, 'users', 'ls'], { env });
      expect(users.exitCode).toBe(1);
      expectOneLine(
        users.stderr,
        /the server's answer to GET \/users is empty, not a page of a list \(HTTP 200\)$/,
      );
      const huge = await cli.run([...at, 'settings', 'show'], { env });
      expect(huge.exitCode).toBe(1);
      expectOneLine(huge.stderr, /the server's answer is larger than 16 MiB/);
    } finally {
      await new Promise((r) => other.close(r));
    }
  });

  // A 200 is not a success by itself: a proxy's page, an empty body or {"status":"fail"} once made
  // rm, lock, rename, users add/rm, token extend and logout print their success line, exit 0,
  // though the server had stated nothing (token extend even stored a token that was not there).
  it('a 2xx answer that does not state success is one line and exit 1, for every command that changes something', async () => {
    const answers: Record<string, [string, string]> = {
      fail: ['application/json', '{"status":"fail","message":"refused by policy"}'],
      empty: ['application/json', ''],
      html: ['text/html', '<html><body>Sign in to the proxy</body></html>'],
      other: ['application/json', '{"ok":true}'],
    };
    let kind = 'fail';
    const other = createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        const [type, body] = answers[kind]!;
        res.writeHead(200, { 'content-type': type, 'content-length': Buffer.byteLength(body) });
        res.end(body);
      });
    });
    await new Promise<void>((r) => other.listen(0, '127.0.0.1', r));
    const port = (other.address() as AddressInfo).port;
    const id = randomUUID();
    try {
      const env = { FSHARE_TOKEN: 'secret-token-value' };
      const at = ['--server', `http://127.0.0.1:${port}`];
      const commands: [string[], string][] = [
        [['rm', id], `DELETE /files/${id}`],
        [['lock', id], `POST /files/${id}/lock`],
        [['unlock', id], `POST /files/${id}/unlock`],
        [['rename', id, 'new-name'], `PATCH /files/${id}`],
        [['users', 'add', 'bob', '--password-stdin'], 'POST /users'],
        [['users', 'rm', 'bob'], 'DELETE /users/bob'],
        [['upload', join(work, 'a.txt')], 'POST /files'],
        [['token', 'extend'], 'POST /users/extend'],
        [['whoami'], 'GET /whoami'],
      ];
      for (const k of Object.keys(answers)) {
        kind = k;
        const what: Record<string, RegExp> = {
          fail: /with a failure: refused by policy \(HTTP 200\)$/,
          empty: /is empty, not (a|an) [a-z ]+ \(HTTP 200\)$/,
          html: /is not JSON \(HTTP 200\)$/,
          other: /is not (a|an) [a-z ]+ \(HTTP 200\)$/,
        };
        for (const [args, request] of commands) {
          const res = await cli.run([...at, ...args], { env, input: 'pw-for-bob-123\n' });
          expect(res.exitCode, `${k}: ${args.join(' ')}: ${res.stderr}`).toBe(1);
          expect(res.stdout, `${k}: ${args.join(' ')}`).toBe('');
          expectOneLine(res.stderr, what[k]!);
          expect(res.stderr).toContain(request);
        }
      }
    } finally {
      await new Promise((r) => other.close(r));
    }
  });

  // A download without a Content-Length (chunked) had no end but the server's: one that never
  // stopped filled the disk (77 GB here before ENOSPC). The share's stated size bounds it now.
  it('a download body longer than the share it belongs to is cut off at once: exit 1, one line, nothing past the size', async () => {
    const id = randomUUID();
    const piece = Buffer.alloc(1024 * 1024, 0x41);
    let pieces = 0;
    let closed = false;
    const other = createServer((req, res) => {
      req.resume();
      if (req.url === `/files/${id}`) {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(
          JSON.stringify({
            share_id: id,
            file_name: 'endless.bin',
            owner_name: null,
            initialized: true,
            locked: false,
            create_date: '2026-01-01T00:00:00',
            size: 3 * piece.length + 5,
            sha256: 'a'.repeat(64),
          }),
        );
        return;
      }
      // Chunked, 256 MiB at most (the test's own bound), a piece whenever the socket takes it.
      res.writeHead(200, { 'content-type': 'application/octet-stream' });
      res.on('close', () => (closed = true));
      res.on('error', () => undefined);
      const more = () => {
        while (!closed && pieces < 256) {
          pieces++;
          if (!res.write(piece)) return void res.once('drain', more);
        }
        res.end();
      };
      more();
    });
    await new Promise<void>((r) => other.listen(0, '127.0.0.1', r));
    const port = (other.address() as AddressInfo).port;
    try {
      const out = join(work, 'endless.bin');
      const res = await cli.run(['--server', `http://127.0.0.1:${port}`, 'get', id, '-o', out], {
        env: { FSHARE_TOKEN: 'secret-token-value' },
      });
      expect(res.exitCode).toBe(1);
      expectOneLine(
        res.stderr,
        /^fshare: the server sent more than the 3145733 bytes it announced; nothing more was written$/,
      );
      expect(existsSync(out)).toBe(false);
      const { size } = await stat(`${out}.part`);
      expect(size).toBeLessThanOrEqual(3 * piece.length + 5);
      expect(closed).toBe(true);
      expect(pieces).toBeLessThan(256); // the client hung up; it did not read to the end
    } finally {
      await new Promise((r) => other.close(r));
    }
  });

  // `get -o - | head -c 10` used to exit 0: the download was cut short by the reader and never
  // verified, yet it reported success. A listing into `head` stays a quiet exit 0.
  it('a download into a reader that leaves early is exit 1 with one line; a listing into head stays exit 0', async () => {
    const file = join(work, 'four-mib.bin');
    await writeFile(file, randomBytes(4 * 1024 * 1024));
    const [up] = await cli.json<{ share_id: string }[]>(['upload', file, '--no-progress']);
    const env = cleanEnv({ FSHARE_CONFIG_DIR: cli.configDir, FSHARE_KEYRING: 'off' });
    const pipe = (command: string) =>
      execa('bash', ['-c', `${command} | head -c 10 > /dev/null; echo "\${PIPESTATUS[0]}"`], {
        env,
        extendEnv: false,
        reject: false,
        input: '',
      });
    const cut = await pipe(`node ${BIN} get ${up!.share_id} -o - --no-progress`);
    expect(cut.stdout.trim()).toBe('1');
    expectOneLine(
      cut.stderr,
      /^fshare: standard output was closed before the download ended; the download was cut short and not verified$/,
    );
    const listing = await pipe(`node ${BIN} ls`);
    expect(listing.stdout.trim()).toBe('0');
    expect(listing.stderr).toBe('');
    // Read to its end, the same download is whole and exit 0.
    const whole = await cli.runBinary(['get', up!.share_id, '-o', '-', '--no-progress']);
    expect(whole.exitCode).toBe(0);
    expect(whole.stdout.equals(await readFile(file))).toBe(true);
  });

  // A CI secret read from a file ends with a line break, and people paste "Bearer …": both used
  // to fail (a header error; a 401), though the token itself was good.
  it('FSHARE_TOKEN with a line break at the end or "Bearer " in front still works; inner spaces are exit 2', async () => {
    const token = (await cli.run(['token'])).stdout.trim();
    expect(token.split('.')).toHaveLength(3);
    const fresh = await createCli(); // no stored token: only the variable can sign in
    for (const value of [
      `${token}\n`,
      `${token}\r\n`,
      `  ${token}\t`,
      `Bearer ${token}`,
      `bearer  ${token}\n`,
    ]) {
      const res = await fresh.run(['--server', serve.url, 'whoami'], {
        env: { FSHARE_TOKEN: value },
      });
      expect(res.exitCode, JSON.stringify(value)).toBe(0);
      expect(res.stdout).toMatch(new RegExp(`^${ADMIN.username} on `));
    }
    const bad = await fresh.run(['--server', serve.url, 'whoami'], {
      env: { FSHARE_TOKEN: `${token.slice(0, 10)} ${token.slice(10)}` },
    });
    expect(bad.exitCode).toBe(2);
    expectOneLine(bad.stderr, /FSHARE_TOKEN is not a token: it has spaces or line breaks inside/);
    expect(bad.stderr).not.toContain(token.slice(10));
    await rm(fresh.configDir, { recursive: true, force: true });
  });

  it('FSHARE_SERVER beats the saved server, --server beats both', async () => {
    const port = await closedPort();
    const dead = `http://127.0.0.1:${port}`;
    const viaEnv = await cli.run(['whoami'], { env: { FSHARE_SERVER: dead } });
    expect(viaEnv.exitCode).toBe(6);
    expect(viaEnv.stderr).toContain(dead);
    const viaFlag = await cli.run(['--server', serve.url, 'whoami'], {
      env: { FSHARE_SERVER: dead },
    });
    expect(viaFlag.exitCode).toBe(0);
  });

  it('logout with the server gone still forgets the token and says so', async () => {
    const other = await startServe();
    const user = await createCli();
    try {
      const login = await user.run(
        ['--server', other.url, 'login', '-u', ADMIN.username, '--password-stdin'],
        {
          input: `${ADMIN.password}\n`,
        },
      );
      expect(login.exitCode).toBe(0);
    } finally {
      await other.stop();
    }
    const res = await user.run(['logout']);
    expect(res.exitCode).toBe(6);
    expectOneLine(res.stderr, /signed out locally.*cannot reach/);
    const token = await user.run(['token']);
    expect(token.exitCode).toBe(3);
    await rm(user.configDir, { recursive: true, force: true });
  });

  it('a bad server URL is a usage error', async () => {
    const res = await cli.run(['--server', 'ftp://example.com', 'ls']);
    expect(res.exitCode).toBe(2);
    expectOneLine(res.stderr, /http or https/);
    // Credentials in the URL were dropped without a word; now refused, and never echoed.
    const withPassword = await cli.run(['--server', 'http://ann:hunter2@127.0.0.1:9', 'ls']);
    expect(withPassword.exitCode).toBe(2);
    expectOneLine(
      withPassword.stderr,
      /server URL must not carry a user name or password \(http:\/\/127\.0\.0\.1:9\); sign in with fshare login/,
    );
    expect(withPassword.stderr).not.toContain('hunter2');
  });

  it('--json prints exactly one JSON document', async () => {
    for (const args of [['whoami'], ['ls'], ['settings', 'show'], ['users', 'ls'], ['token']]) {
      const res = await cli.run(['--json', ...args]);
      expect(res.exitCode, args.join(' ')).toBe(0);
      expect(() => JSON.parse(res.stdout), args.join(' ')).not.toThrow();
    }
  });

  it('every command has --help with an example (every command of the tree, found by walking it)', async () => {
    const commands: string[][] = [[]];
    const walk = (cmd: Command, path: string[]) => {
      for (const sub of cmd.commands) {
        if (sub.name() === 'help') continue;
        commands.push([...path, sub.name()]);
        walk(sub, [...path, sub.name()]);
      }
    };
    walk(buildProgram(), []);
    expect(commands.length).toBeGreaterThan(30);
    await Promise.all(
      commands.map(async (args) => {
        const res = await cli.run([...args, '--help']);
        expect(res.exitCode, args.join(' ')).toBe(0);
        expect(res.stdout, args.join(' ')).toContain('Examples:');
        expect(res.stdout, args.join(' ')).toContain('fshare ');
      }),
    );
  });

  it('passwd changes the own password; the old one stops working', async () => {
    const add = await cli.run(['users', 'add', 'dave', '--perms', 'READ', '--password-stdin'], {
      input: 'old-pw\n',
    });
    expect(add.exitCode).toBe(0);
    const dave = await createCli();
    expect(
      (
        await dave.run(['--server', serve.url, 'login', '-u', 'dave', '--password-stdin'], {
          input: 'old-pw\n',
        })
      ).exitCode,
    ).toBe(0);
    const wrong = await dave.run(['passwd', '--password-stdin'], { input: 'nope\nnew-pw\n' });
    expect(wrong.exitCode).toBe(3);
    const ok = await dave.run(['passwd', '--password-stdin'], { input: 'old-pw\nnew-pw\n' });
    expect(ok.exitCode).toBe(0);
    const old = await dave.run(['login', '-u', 'dave', '--password-stdin'], { input: 'old-pw\n' });
    expect(old.exitCode).toBe(3);
    const reset = await cli.run(['users', 'passwd', 'dave', '--password-stdin'], {
      input: 'reset-pw\n',
    });
    expect(reset.exitCode).toBe(0);
    const fresh = await dave.run(['login', '-u', 'dave', '--password-stdin'], {
      input: 'reset-pw\n',
    });
    expect(fresh.exitCode).toBe(0);
    const gone = await cli.run(['users', 'rm', 'dave']);
    expect(gone.exitCode).toBe(0);
    // The server answers 403 (API.md); to an administrator the CLI says what that means.
    const missing = await cli.run(['users', 'show', 'dave']);
    expect(missing.exitCode).toBe(4);
    expect(missing.stderr).toMatch(/no such user: dave/);
  });
});
