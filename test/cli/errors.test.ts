import { randomBytes, randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import { readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { createServer, request } from 'node:http';
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
    // An empty argument (a variable not set) is named as one, not as nothing after the colon.
    const empty = await cli.run(['upload', '']);
    expect(empty.exitCode).toBe(2);
    expectOneLine(empty.stderr, /^fshare: no such file: ""$/);
    const list = await cli.json<{ shares: unknown[] }>(['ls']);
    expect(list.shares).toHaveLength(0);
  });

  it('bad id: exit 2; unknown id: exit 4', async () => {
    const bad = await cli.run(['info', 'not-a-share']);
    expect(bad.exitCode).toBe(2);
    expectOneLine(bad.stderr, /not a share id or URL: not-a-share/);
    // An empty id (a script's "$ID" unset) is named as "", not as nothing.
    const empty = await cli.run(['lock', '']);
    expect(empty.exitCode).toBe(2);
    expectOneLine(empty.stderr, /^fshare: not a share id or URL: ""$/);
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
      ['upload', file, '--chunk-size', '1.5'], // bytes come whole
      ['users', 'quota', 'admin', '1.5b'],
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

  // An empty value (a script's "$SIZE" unset) read `not a size:  (try …)`, nothing where the
  // value goes; it is shown as "", as share ids and ranges already were.
  it('an empty size, count or duration is shown as "" in its one line, exit 2', async () => {
    const file = join(work, 'a.txt');
    for (const [args, line] of [
      [['users', 'quota', 'admin', ''], 'fshare: not a size: "" (try 10GiB, 500m, bytes or none)'],
      [['upload', file, '--chunk-size', ''], 'fshare: not a size: "" (try 512k, 8m, 1g or bytes)'],
      [
        ['upload', file, '--parallel', ' '],
        'fshare: --parallel must be a whole number from 1 to 64: " "',
      ],
    ] as const) {
      const res = await cli.run([...args]);
      expect(res.exitCode, args.join(' ')).toBe(2);
      expect(res.stderr).toBe(line);
    }
    const expiry = await cli.run(['upload', file, '--expires', '']);
    expect(expiry.exitCode).toBe(2);
    expectOneLine(expiry.stderr, /: ""$/);
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

  // `ls --all` followed `next` wherever it pointed: a server answering every page with
  // {"data":[],"next":2,"pages":5} (or next 1) got ~14,000 requests in 5 s, and never an end. A
  // page's `next` is a later page than the one read, and no more than `pages`; anything else is
  // the wrong shape, for every list walked page by page (ls, users ls, links, artifacts).
  it('a page whose next does not move on, or passes the last page, is one line and exit 1 at once', async () => {
    let body = '';
    let requests = 0;
    const other = createServer((req, res) => {
      req.resume();
      if (req.url === '/whoami') {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end('{"username":"admin","permissions":["ADMIN","LIST","READ"]}');
        return;
      }
      requests++;
      // A client that keeps walking is stopped by the test's server (a 404), not by a timeout.
      const stop = requests > 40;
      res.writeHead(stop ? 404 : 200, { 'content-type': 'application/json' });
      res.end(stop ? '{"status":"fail","message":"stopped by the test"}' : body);
    });
    await new Promise<void>((r) => other.listen(0, '127.0.0.1', r));
    const port = (other.address() as AddressInfo).port;
    try {
      const env = { FSHARE_TOKEN: 'secret-token-value' };
      const at = ['--server', `http://127.0.0.1:${port}`];
      const cases: [object, number][] = [
        [{ data: [], prev: null, next: 2, pages: 5 }, 2], // page 2 names page 2 again
        [{ data: [], prev: null, next: 1, pages: 5 }, 1],
        [{ data: [], prev: null, next: 6, pages: 5 }, 1],
        [{ data: [], prev: null, next: 2 }, 1],
        [{ data: [], prev: null, pages: 1 }, 1],
      ];
      const commands: [string[], string][] = [
        [['ls', '--all'], '/files'],
        [['--json', 'ls', '--all'], '/files'],
        [['users', 'ls', '--all'], '/users'],
        [['links', '--all'], '/links'],
        [['artifacts'], '/files'],
      ];
      for (const [page, expected] of cases)
        for (const [args, path] of commands) {
          body = JSON.stringify(page);
          requests = 0;
          const res = await cli.run([...at, ...args], { env });
          const what = `${body}: ${args.join(' ')}`;
          expect(res.exitCode, `${what}: ${res.stderr}`).toBe(1);
          expect(res.stdout, what).toBe('');
          expectOneLine(
            res.stderr,
            new RegExp(
              `^fshare: the server's answer to GET ${path} is not a page of a list \\(HTTP 200\\)$`,
            ),
          );
          expect(requests, what).toBe(expected);
        }
      // The last page, and a next page that exists, are read as before.
      body = JSON.stringify({ data: [], prev: null, next: null, pages: 0 });
      expect((await cli.run([...at, 'ls', '--all'], { env })).exitCode).toBe(0);
      body = JSON.stringify({ data: [], prev: null, next: 3, pages: 5 });
      const one = await cli.run([...at, '--json', 'ls', '--page', '2'], { env });
      expect(one.exitCode, one.stderr).toBe(0);
      expect(JSON.parse(one.stdout)).toMatchObject({ page: 2, pages: 5, next: 3 });
    } finally {
      await new Promise((r) => other.close(r));
    }
  });

  // Property: the share a create answer names is a share id (a UUID, API.md "Shares"), or the
  // answer is of another shape: exit 1, one line, no request to any other path. Found from
  // outside: `{"url": "/files/<uuid>/../../users"}` sent the chunks, then a DELETE, to
  // /files/users.
  it('a create answer whose url ends in no share id: exit 1, one line, nothing sent after it', async () => {
    const seen: string[] = [];
    let url = '';
    const other = createServer((req, res) => {
      seen.push(`${req.method} ${req.url}`);
      req.resume();
      req.on('end', () => {
        res.writeHead(201, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ status: 'success', message: 'File created', url }));
      });
    });
    await new Promise<void>((r) => other.listen(0, '127.0.0.1', r));
    const port = (other.address() as AddressInfo).port;
    const file = join(work, 'create-shape.bin');
    await writeFile(file, 'create shape\n');
    try {
      for (const made of [
        `/files/${randomUUID()}/../../users`,
        '/files/users',
        '/files/..',
        `/files/${randomUUID()}x`,
      ]) {
        url = made;
        seen.length = 0;
        const res = await cli.run(['--server', `http://127.0.0.1:${port}`, 'upload', file], {
          env: { FSHARE_TOKEN: 'any-token' },
        });
        expect(res.exitCode, `${made}: ${res.stderr}`).toBe(1);
        expectOneLine(
          res.stderr,
          /^fshare: the server's answer to POST \/files is not a success with the address of the new share \(HTTP 201\)$/,
        );
        expect(seen).toEqual(['POST /files']);
      }
    } finally {
      other.closeAllConnections();
      await new Promise<void>((r) => other.close(() => r()));
    }
  });

  // A sign-in answer without `username` was taken: "Signed in to … as undefined", exit 0, and the
  // token "a b" (no Authorization header can carry it) stored for the account undefined@server.
  it('a sign-in or renewal answer without a user name or a usable token is one line and exit 1; nothing is stored', async () => {
    let body = '';
    const other = createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(body);
      });
    });
    await new Promise<void>((r) => other.listen(0, '127.0.0.1', r));
    const port = (other.address() as AddressInfo).port;
    const fresh = await createCli();
    try {
      const at = ['--server', `http://127.0.0.1:${port}`];
      for (const answer of [
        { status: 'success', auth_token: 'a b' },
        { status: 'success', auth_token: 'abc.def' },
        { status: 'success', username: '', auth_token: 'abc.def' },
        { status: 'success', username: 7, auth_token: 'abc.def' },
        { status: 'success', username: 'bob', auth_token: 'a b' },
        { status: 'success', username: 'bob', auth_token: 'abc.def\n' },
        { status: 'success', username: 'bob', auth_token: '' },
        { status: 'success', username: 'bob', auth_token: 7 },
      ]) {
        body = JSON.stringify(answer);
        const login = await fresh.run([...at, 'login', '-u', 'bob', '--password-stdin'], {
          input: 'pw-for-bob-123\n',
        });
        expect(login.exitCode, `${body}: ${login.stderr}`).toBe(1);
        expect(login.stdout).toBe('');
        expectOneLine(
          login.stderr,
          /^fshare: the server's answer to POST \/users\/login is not a token \(HTTP 200\)$/,
        );
        const extend = await fresh.run([...at, 'token', 'extend'], {
          env: { FSHARE_TOKEN: 'old-token' },
        });
        expect(extend.exitCode, `${body}: ${extend.stderr}`).toBe(1);
        expect(extend.stdout).toBe('');
        expectOneLine(
          extend.stderr,
          /^fshare: the server's answer to POST \/users\/extend is not a token \(HTTP 200\)$/,
        );
      }
      // Nothing was stored: no token, no account, for any name.
      expect((await fresh.run([...at, 'token'])).exitCode).toBe(3);
      for (const f of await readdir(fresh.configDir, { recursive: true })) {
        const text = await readFile(join(fresh.configDir, f)).catch(() => Buffer.alloc(0));
        expect(text.toString(), f).not.toMatch(/undefined|a b|abc\.def/);
      }
      // The same server with a whole answer signs in.
      body = JSON.stringify({ status: 'success', username: 'bob', auth_token: 'abc.def' });
      const ok = await fresh.run([...at, 'login', '-u', 'bob', '--password-stdin'], {
        input: 'pw-for-bob-123\n',
      });
      expect(ok.exitCode, ok.stderr).toBe(0);
      expect(ok.stdout).toMatch(/as bob /);
    } finally {
      await new Promise((r) => other.close(r));
      await rm(fresh.configDir, { recursive: true, force: true });
    }
  });

  // List items of the wrong type crashed `ls` ("text.replace is not a function") and went
  // through `ls --json`, exit 0; a share whose sha256 was the number 12345 counted as one without
  // a digest; a share with another id than the one asked for was shown as the one asked for.
  it('a list item or a share of the wrong shape, or another share than the one asked for, is one line and exit 1', async () => {
    const id = randomUUID();
    const share = {
      share_id: id,
      file_name: 'a.txt',
      owner_name: 'admin',
      initialized: true,
      locked: false,
      create_date: '2026-01-01T00:00:00.000000',
      size: 1,
      sha256: 'a'.repeat(64),
    };
    const user = { username: 'bob', permissions: ['READ'], register_date: share.create_date };
    const link = {
      id: '1e12848f89cc7245',
      share_id: id,
      file_name: 'a.txt',
      created_by: 'admin',
      create_date: share.create_date,
      expires: null,
      max_downloads: null,
      downloads: 0,
      downloads_left: null,
      has_password: false,
      state: 'active',
    };
    let answer: { share: object; user: object; link: object } = { share, user, link };
    const page = (item: object) =>
      JSON.stringify({ data: [item], prev: null, next: null, pages: 1 });
    const other = createServer((req, res) => {
      req.resume();
      const path = req.url!.split('?')[0]!;
      const body =
        path === '/files'
          ? page(answer.share)
          : path === '/users'
            ? page(answer.user)
            : path === '/links' || path.endsWith('/links')
              ? page(answer.link)
              : JSON.stringify(answer.share);
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(body);
    });
    await new Promise<void>((r) => other.listen(0, '127.0.0.1', r));
    const port = (other.address() as AddressInfo).port;
    try {
      const env = { FSHARE_TOKEN: 'secret-token-value' };
      const at = ['--server', `http://127.0.0.1:${port}`];
      const run = (args: string[]) => cli.run([...at, ...args], { env });
      // The whole answers are read (upper-case hex is a sha256 too).
      for (const good of [
        share,
        { ...share, sha256: 'A'.repeat(64), size: null, owner_name: null },
      ]) {
        answer = { share: good, user, link };
        for (const args of [['ls'], ['--json', 'ls'], ['info', id], ['users', 'ls'], ['links']]) {
          const res = await run(args);
          expect(res.exitCode, `${args.join(' ')}: ${res.stderr}`).toBe(0);
        }
      }
      const badShares: object[] = [
        { share_id: 1 },
        { ...share, file_name: 7 },
        { ...share, size: 'big' },
        { ...share, size: -1 },
        { ...share, sha256: 12345 },
        { ...share, sha256: 'abc' },
        { ...share, sha256: 'g'.repeat(64) },
        { ...share, owner_name: 5 },
        { ...share, create_date: null },
        { ...share, initialized: 'yes' },
        { ...share, expires: 3 },
      ];
      for (const bad of badShares) {
        answer = { share: bad, user, link };
        for (const args of [['ls'], ['--json', 'ls']]) {
          const res = await run(args);
          expect(res.exitCode, `${JSON.stringify(bad)}: ${args.join(' ')}`).toBe(1);
          expect(res.stdout).toBe('');
          expectOneLine(
            res.stderr,
            /^fshare: the server's answer to GET \/files is not a page of a list \(HTTP 200\)$/,
          );
        }
        const info = await run(['info', id]);
        expect(info.exitCode, JSON.stringify(bad)).toBe(1);
        expectOneLine(
          info.stderr,
          new RegExp(
            `^fshare: the server's answer to GET /files/${id} is not the share ${id} \\(HTTP 200\\)$`,
          ),
        );
      }
      answer = {
        share: { ...share, share_id: '11111111-2222-3333-4444-555555555555' },
        user,
        link,
      };
      for (const args of [
        ['info', id],
        ['--json', 'info', id],
        ['links', id],
      ]) {
        const res = await run(args);
        expect(res.exitCode, args.join(' ')).toBe(1);
        expectOneLine(
          res.stderr,
          new RegExp(`GET /files/${id} is not the share ${id} \\(HTTP 200\\)$`),
        );
      }
      for (const bad of [
        { ...user, username: 7 },
        { ...user, permissions: 'READ' },
        { ...user, register_date: 5 },
        { ...user, quota: 'lots' },
      ]) {
        answer = { share, user: bad, link };
        const res = await run(['users', 'ls']);
        expect(res.exitCode, JSON.stringify(bad)).toBe(1);
        expectOneLine(res.stderr, /GET \/users is not a page of a list \(HTTP 200\)$/);
      }
      for (const bad of [
        { ...link, downloads: '3' },
        { ...link, has_password: 'no' },
        { ...link, share_id: null },
      ]) {
        answer = { share, user, link: bad };
        const all = await run(['links']);
        expect(all.exitCode, JSON.stringify(bad)).toBe(1);
        expectOneLine(all.stderr, /GET \/links is not a page of a list \(HTTP 200\)$/);
        const one = await run(['--json', 'links', id]);
        expect(one.exitCode, JSON.stringify(bad)).toBe(1);
        expectOneLine(
          one.stderr,
          new RegExp(`GET /files/${id}/links is not a list \\(HTTP 200\\)$`),
        );
      }
    } finally {
      await new Promise((r) => other.close(r));
    }
  });

  // An upload is proved by its 201's digest, or else by the share it asks for: through a proxy
  // that gave another share's id, or a sha256 that is not one (the number 12345), the upload
  // reported success, exit 0. The proxy takes `size` and `sha256` out of the 201 (a server without
  // that extension) so that the share is asked for; a 201 naming other bytes is exit 7.
  it('an upload whose share comes back as another share, or with a sha256 that is not one, is not a success', async () => {
    let rewrite: (share: Record<string, unknown>) => void = () => undefined;
    let rewrite201: (answer: Record<string, unknown>) => void = (answer) => {
      delete answer.size;
      delete answer.sha256;
    };
    const target = new URL(serve.url);
    const proxy = createServer((req, res) => {
      const forward = request(
        {
          host: target.hostname,
          port: target.port,
          method: req.method,
          path: req.url,
          headers: req.headers,
        },
        (up) => {
          const isShare = req.method === 'GET' && /^\/files\/[0-9a-f-]{36}$/.test(req.url!);
          const completed = req.url!.endsWith('/content') && up.statusCode === 201;
          if (completed) {
            const parts: Buffer[] = [];
            up.on('data', (p: Buffer) => parts.push(p));
            up.on('end', () => {
              const answer = JSON.parse(Buffer.concat(parts).toString()) as Record<string, unknown>;
              rewrite201(answer);
              res.writeHead(201, { 'content-type': 'application/json' });
              res.end(JSON.stringify(answer));
            });
            return;
          }
          if (!isShare || up.statusCode !== 200) {
            res.writeHead(up.statusCode ?? 502, up.headers);
            up.pipe(res);
            return;
          }
          const parts: Buffer[] = [];
          up.on('data', (p: Buffer) => parts.push(p));
          up.on('end', () => {
            const share = JSON.parse(Buffer.concat(parts).toString()) as Record<string, unknown>;
            rewrite(share);
            const text = JSON.stringify(share);
            res.writeHead(200, {
              'content-type': 'application/json',
              'content-length': Buffer.byteLength(text),
            });
            res.end(text);
          });
        },
      );
      req.pipe(forward);
    });
    await new Promise<void>((r) => proxy.listen(0, '127.0.0.1', r));
    const port = (proxy.address() as AddressInfo).port;
    try {
      const at = ['--server', `http://127.0.0.1:${port}`];
      const env = { FSHARE_TOKEN: (await cli.run(['token'])).stdout.trim() };
      for (const change of [
        (s: Record<string, unknown>) => (s.share_id = '11111111-2222-3333-4444-555555555555'),
        (s: Record<string, unknown>) => (s.sha256 = 12345),
      ]) {
        rewrite = change;
        const res = await cli.run([...at, 'upload', join(work, 'a.txt')], { env });
        expect(res.exitCode, res.stderr).toBe(1);
        expect(res.stdout).toBe('');
        expectOneLine(
          res.stderr,
          /^fshare: the server's answer to GET \/files\/[0-9a-f-]{36} is not the share [0-9a-f-]{36} \(HTTP 200\)$/,
        );
      }
      rewrite = () => undefined;
      const ok = await cli.run([...at, 'upload', join(work, 'a.txt')], { env });
      expect(ok.exitCode, ok.stderr).toBe(0);
      // A 201 that names other bytes than the file's: exit 7, whatever the share says.
      rewrite201 = (answer) => (answer.sha256 = 'ab'.repeat(32));
      const other = await cli.run([...at, 'upload', join(work, 'a.txt')], { env });
      expect(other.exitCode).toBe(7);
      expectOneLine(
        other.stderr,
        /^fshare: the server stored other bytes than .*a\.txt \(sha256 (ab){32}, the file's is [0-9a-f]{64}\) \(the share it had created was deleted\)$/,
      );
    } finally {
      await new Promise((r) => proxy.close(r));
    }
  });

  // A copy of the last chunk refused with 423 (the share has content) once deleted the share and
  // failed, though the lost answer to the first copy may have been its 201. The share's sha256
  // decides: another one is a verification failure, and the share, whose content may still be
  // this upload's, is kept; a share still without content means the refusal was for something
  // else, and stands.
  it('a repeated last chunk refused with 423: other content is exit 7 and the share is kept; no content is the refusal', async () => {
    const id = randomUUID();
    let shareAnswer: object = {};
    let chunks = 0;
    const deletes: string[] = [];
    const other = createServer((req, res) => {
      const answer = (status: number, body: object) => {
        res.writeHead(status, { 'content-type': 'application/json' });
        res.end(JSON.stringify(body));
      };
      req.resume();
      req.on('end', () => {
        if (req.method === 'POST' && req.url === '/files')
          return answer(201, { status: 'success', url: `/files/${id}` });
        if (req.method === 'POST' && req.url === `/files/${id}/content`) {
          // The first copy is taken and its answer lost; the copy sent again is refused.
          if (++chunks === 1) return req.socket.destroy();
          return answer(423, {
            status: 'fail',
            message: 'The share already has content: use PUT to replace it',
          });
        }
        if (req.method === 'GET' && req.url === `/files/${id}`) return answer(200, shareAnswer);
        if (req.method === 'DELETE') {
          deletes.push(req.url!);
          return answer(200, { status: 'success' });
        }
        answer(404, { status: 'fail', message: 'No route' });
      });
    });
    await new Promise<void>((r) => other.listen(0, '127.0.0.1', r));
    const port = (other.address() as AddressInfo).port;
    const base = {
      share_id: id,
      file_name: 'a.txt',
      owner_name: 'admin',
      locked: false,
      create_date: '2026-01-01T00:00:00.000000',
    };
    try {
      const env = { FSHARE_TOKEN: 'secret-token-value' };
      const upload = () =>
        cli.run(['--server', `http://127.0.0.1:${port}`, 'upload', join(work, 'a.txt')], { env });
      shareAnswer = { ...base, initialized: true, size: 1, sha256: 'b'.repeat(64) };
      const otherBytes = await upload();
      expect(otherBytes.exitCode, otherBytes.stderr).toBe(7);
      expect(chunks).toBe(2);
      expectOneLine(
        otherBytes.stderr,
        new RegExp(
          `^fshare: the server stored other bytes than .*a\\.txt \\(sha256 b{64}, the file's is [0-9a-f]{64}\\) \\(the share it had created, ${id}, was kept: it has content\\)$`,
        ),
      );
      expect(deletes).toEqual([]);

      chunks = 0;
      shareAnswer = { ...base, initialized: false, size: null, sha256: null };
      const empty = await upload();
      expect(empty.exitCode, empty.stderr).toBe(5);
      expectOneLine(
        empty.stderr,
        /^fshare: The share already has content: use PUT to replace it \(the share it had created was deleted\) \(HTTP 423\)$/,
      );
      expect(deletes).toEqual([`/files/${id}`]);
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

  // Found from outside: a local file whose name holds a control character could not be uploaded
  // at all: its name went raw into the chunk's multipart header (busboy refused the body, even
  // with -n) and into file_name (which servers refuse). Both are made safe now.
  it('a local file named with a control character uploads, as esc_.txt or under -n', async () => {
    const file = join(work, 'esc\x1b.txt');
    const data = randomBytes(2 * 1024 * 1024);
    data[data.length - 1] = 0x0a; // a last newline is content too (execa once cut it off)
    await writeFile(file, data);
    const [plain] = await cli.json<{ share_id: string; file_name: string }[]>([
      'upload',
      file,
      '--chunk-size',
      '1m',
      '--no-progress',
    ]);
    expect(plain!.file_name).toBe('esc_.txt');
    const [named] = await cli.json<{ file_name: string }[]>(['upload', file, '-n', 'ok.bin']);
    expect(named!.file_name).toBe('ok.bin');
    const back = await cli.runBinary(['get', plain!.share_id, '-o', '-', '--no-progress']);
    expect(back.exitCode, back.stderr).toBe(0);
    expect(back.stdout.equals(data)).toBe(true);
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
    // Characters a header cannot carry were undici's "Invalid character in header content".
    const accented = await fresh.run(['--server', serve.url, 'whoami'], {
      env: { FSHARE_TOKEN: `${token}é` },
    });
    expect(accented.exitCode).toBe(2);
    expectOneLine(
      accented.stderr,
      /FSHARE_TOKEN is not a token: it has characters other than printable ASCII inside/,
    );
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
