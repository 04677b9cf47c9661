import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createNetServer, type AddressInfo, type Socket } from 'node:net';
import { readdir, readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createCli, tempDir, type Cli } from '../helpers/cli.js';

// What a CI job sees when a server's answer breaks or turns hostile, through the built binary
// against a stand-in server that answers as told.

/** Sends the status line, headers and the first bytes of `body`, then cuts the connection. */
function cutAnswer(res: ServerResponse, body: string): void {
  res.writeHead(200, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(body),
  });
  // Cut only once the bytes are flushed, so the client really holds the start of the answer.
  res.write(body.slice(0, 10), () => res.socket?.destroy());
}

/** A share's record (GET /files/<id>) as a server without digests answers it, as JSON. */
function shareRecord(id: string, fields: Record<string, unknown>): string {
  return JSON.stringify({
    share_id: id,
    owner_name: 'ci',
    initialized: true,
    locked: false,
    create_date: '2026-11-20T10:00:00.000Z',
    ...fields,
  });
}

const WHOAMI = JSON.stringify({ username: 'ci', permissions: ['READ', 'LIST'] });
const TOKEN = 'ci-secret-token-5d41402abc4b2a76b9719d911017c592';

describe('answers that break or echo the token', () => {
  let server: Server;
  let url: string;
  let cli: Cli;
  let seen: string[];
  let answer: (req: IncomingMessage, res: ServerResponse, n: number) => void;

  beforeAll(async () => {
    server = createServer((req, res) => {
      seen.push(`${req.method} ${req.url}`);
      req.resume();
      req.on('end', () => answer(req, res, seen.length));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    cli = await createCli();
  });

  beforeEach(() => {
    seen = [];
  });

  afterAll(async () => {
    server?.closeAllConnections();
    await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
    if (cli) await rm(cli.configDir, { recursive: true, force: true });
  });

  const run = (args: string[]) =>
    cli.run(['--server', url, ...args], { env: { FSHARE_TOKEN: TOKEN } });

  it('a JSON answer cut short is a transport failure: retried, then exit 6, nothing on stdout', async () => {
    // Property: a 2xx whose JSON body breaks off (connection reset mid-answer) is a failed
    // attempt, retried like a reset before the answer (CLI.md Retries: "a response cut short").
    // Found broken: the body was read after the retry loop, so `whoami` gave up at once with
    // exit 1 and the line 'fshare: aborted'.
    answer = (_req, res, n) =>
      n === 1 ? cutAnswer(res, WHOAMI) : res.end(WHOAMI.replace('"ci"', '"ci2"'));
    const once = await run(['--json', 'whoami']);
    expect(once.stderr).toBe('');
    expect(once.exitCode).toBe(0);
    expect(JSON.parse(once.stdout)).toEqual({ username: 'ci2', permissions: ['READ', 'LIST'] });
    expect(seen).toEqual(['GET /whoami', 'GET /whoami']);

    seen = [];
    answer = (_req, res) => cutAnswer(res, WHOAMI);
    const always = await run(['--json', 'whoami']);
    expect(always.exitCode).toBe(6);
    expect(always.stdout).toBe('');
    expect(always.stderr).toBe(`fshare: cannot reach ${url}: connection reset (after 5 attempts)`);
    expect(seen).toHaveLength(5);
  });

  it('a JSON answer that trickles in is cut at its deadline: retried, then exit 6', async () => {
    // Property: an answer that never falls silent for the idle limit but never ends either (a
    // byte now and then: a broken proxy, a hostile server) does not keep a CI job waiting for
    // ever. Found: a 54-byte whoami answer at a byte every 5 s took 4 min 20 s and exited 0; at
    // one byte every 50 s it would never end. The deadline is 5 minutes, shortened here.
    answer = (_req, res) => {
      res.writeHead(200, {
        'content-type': 'application/json',
        'content-length': Buffer.byteLength(WHOAMI),
      });
      let sent = 0;
      const drip = setInterval(() => {
        if (sent < WHOAMI.length) res.write(WHOAMI[sent++]!);
        else res.end();
      }, 100);
      res.once('close', () => clearInterval(drip));
    };
    const res = await cli.run(['--server', url, '--json', 'whoami'], {
      env: { FSHARE_TOKEN: TOKEN, FSHARE_TEST_ANSWER_DEADLINE_MS: '1000' },
    });
    expect(res.exitCode).toBe(6);
    expect(res.stdout).toBe('');
    expect(res.stderr).toBe(`fshare: cannot reach ${url}: timed out (after 5 attempts)`);
    expect(seen).toHaveLength(5);
  });

  it('a POST whose answer is cut short is exit 6 saying it may have been carried out', async () => {
    // Property: the answer to a request that is not sent again (users add) breaking off after it
    // reached the server says that it may have been done (CLI.md Retries). Found broken: exit 1,
    // 'fshare: aborted', which says neither what happened nor to check before running it again.
    answer = (_req, res) =>
      cutAnswer(res, JSON.stringify({ status: 'success', message: 'User created' }));
    const res = await cli.run(
      ['--server', url, '--json', 'users', 'add', 'bob', '--password-stdin'],
      { env: { FSHARE_TOKEN: TOKEN }, input: 'a-password-1234\n' },
    );
    expect(res.exitCode).toBe(6);
    expect(res.stdout).toBe('');
    expect(res.stderr).toBe(
      `fshare: no answer from ${url} to POST /users (connection reset): it may have been carried out; check before running the command again`,
    );
    expect(seen).toEqual(['POST /users']);

    // An error status stands by itself: a 500 whose body breaks off is that 500 (exit 1), not a
    // request that may have been carried out (exit 6).
    seen = [];
    answer = (_req, res) => {
      res.writeHead(500, { 'content-type': 'application/json', 'content-length': 100 });
      res.write('{"status":"fa', () => res.socket?.destroy());
    };
    const failed = await cli.run(
      ['--server', url, '--json', 'users', 'add', 'bob', '--password-stdin'],
      { env: { FSHARE_TOKEN: TOKEN }, input: 'a-password-1234\n' },
    );
    expect(failed.exitCode).toBe(1);
    expect(failed.stdout).toBe('');
    expect(failed.stderr).toBe('fshare: Internal Server Error (HTTP 500)');
    expect(seen).toEqual(['POST /users']);
  });

  it('a server that echoes the token back never gets it printed', async () => {
    // Property: no token reaches stderr, even from a hostile server that puts the Authorization
    // header it got into its error message or a redirect's Location (CI logs are kept and
    // shared). Found broken: 'fshare: bad header Bearer <the token> (HTTP 401)' printed it whole.
    answer = (req, res) => {
      const auth = req.headers.authorization ?? '';
      if (req.url === '/whoami') {
        res.writeHead(302, { location: `https://elsewhere.example/?t=${auth.slice(7)}` });
        res.end();
        return;
      }
      res.writeHead(401, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ status: 'fail', message: `bad header ${auth}` }));
    };
    const denied = await run(['--json', 'ls']);
    expect(denied.exitCode).toBe(3);
    expect(denied.stdout).toBe('');
    expect(denied.stderr).toBe(
      'fshare: bad header Bearer [token] (HTTP 401); it came from FSHARE_TOKEN, which fshare login does not change: set the variable to a valid token, or unset it',
    );
    const debug = await run(['--json', '--debug', 'ls']);
    expect(debug.exitCode).toBe(3);
    expect(debug.stderr).toContain('[token]');
    expect(debug.stderr).not.toContain(TOKEN);
    const redirected = await run(['--json', 'whoami']);
    expect(redirected.exitCode).toBe(1);
    expect(redirected.stderr).toContain('https://elsewhere.example/?t=[token]');
    expect(redirected.stderr).not.toContain(TOKEN);
    // A placeholder in the variable (a CI secret left unset: "null") is no secret, and hiding it
    // would turn every "null" of a message into "[token]".
    const placeholder = await cli.run(['--server', url, '--json', 'ls'], {
      env: { FSHARE_TOKEN: 'null' },
    });
    expect(placeholder.exitCode).toBe(3);
    expect(placeholder.stderr).toContain('fshare: bad header Bearer null (HTTP 401)');
  });

  it('a token put into names the server sends is never printed on stdout, tables or --json', async () => {
    // Property: what fshare prints from the server's strings (share and owner names, a user
    // name) shows a token it sent as [token], on stdout as on stderr (CLI.md Errors and exit
    // codes). Found broken: a hostile server that named a share after the caller's token had
    // `ls` print it whole on stdout, in the table and in --json (a CI log, kept and shared).
    const id = '0e13fdd1-7ff2-4179-8263-b57911c15f09';
    answer = (req, res) => {
      const token = (req.headers.authorization ?? '').slice(7);
      const share = {
        share_id: id,
        file_name: `leak-${token}.txt`,
        owner_name: `owner-${token}`,
        initialized: true,
        locked: false,
        create_date: '2026-11-20T10:00:00.000Z',
      };
      if (req.url?.startsWith('/files?'))
        return res.end(JSON.stringify({ data: [share], pages: 1, next: null }));
      if (req.url === `/files/${id}`) return res.end(JSON.stringify(share));
      if (req.url === '/whoami')
        return res.end(JSON.stringify({ username: `user-${token}`, permissions: ['READ'] }));
      if (req.url === '/users/extend')
        return res.end(JSON.stringify({ status: 'success', username: 'ci', auth_token: token }));
      res.writeHead(404, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ status: 'fail', message: 'Not found' }));
    };
    for (const args of [
      ['ls'],
      ['--json', 'ls'],
      ['info', id],
      ['--json', 'info', id],
      ['whoami'],
    ]) {
      const res = await run(args);
      expect(res.exitCode, args.join(' ')).toBe(0);
      expect(res.stdout, args.join(' ')).toContain('[token]');
      expect(res.stdout + res.stderr, args.join(' ')).not.toContain(TOKEN);
    }
    const json = await run(['--json', 'whoami']);
    expect(JSON.parse(json.stdout)).toEqual({ username: 'user-[token]', permissions: ['READ'] });
    // Where the token is the output asked for (token extend hands back the new one, here the
    // same), it is printed as it is.
    const extended = await run(['token', 'extend']);
    expect(extended.exitCode).toBe(0);
    expect(extended.stdout).toBe(TOKEN);
  });

  it('a token put into the download name the server gives is never kept in a file name', async () => {
    // Property: a token fshare sent never ends up in a local file name (every `ls` of the
    // directory, a CI artifact list, shows it). Found broken: a server whose Content-Disposition
    // named the file after the caller's token (percent-encoded in filename*, as names are) had
    // `fshare get` save it under that name, while the line on stdout showed [token].
    const id = '0e13fdd1-7ff2-4179-8263-b57911c15f09';
    const body = Buffer.from('the content');
    answer = (req, res) => {
      const token = (req.headers.authorization ?? '').slice(7);
      const encoded = [...Buffer.from(`leak-${token}.bin`)]
        .map((b) => `%${b.toString(16).padStart(2, '0')}`)
        .join('');
      if (req.url === `/files/${id}/content`) {
        res.writeHead(200, {
          'content-type': 'application/octet-stream',
          'content-length': body.length,
          'content-disposition': `attachment; filename*=UTF-8''${encoded}`,
        });
        return res.end(body);
      }
      // The record the download is checked against (it gives no sha256: not verified).
      if (req.url === `/files/${id}`) return res.end(shareRecord(id, { file_name: 'leak.bin' }));
      res.writeHead(404, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ status: 'fail', message: 'Not found' }));
    };
    const dir = await tempDir('token-name');
    try {
      const res = await cli.run(['--server', url, 'get', id], {
        env: { FSHARE_TOKEN: TOKEN },
        cwd: dir,
      });
      expect(res.exitCode, res.stderr).toBe(0);
      expect(await readdir(dir)).toEqual(['leak-[token].bin']);
      expect(await readFile(join(dir, 'leak-[token].bin'))).toEqual(body);
      expect(res.stdout + res.stderr).not.toContain(TOKEN);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  // Property: a download that fails before its first byte leaves nothing to resume, and so
  // nothing behind: no empty NAME.part, no record in partials/. Found from outside: a malformed
  // chunked body left both (exit 1).
  it('a download whose body breaks before its first byte leaves no .part and no record', async () => {
    const id = '0e13fdd1-7ff2-4179-8263-b57911c15f09';
    answer = (req, res) => {
      if (req.url === `/files/${id}/content`) {
        // A chunk size that is not hexadecimal, then the end of the connection.
        res.socket!.end(
          'HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\n' +
            'etag: "v1"\r\ntransfer-encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n',
        );
        return;
      }
      if (req.url === `/files/${id}`)
        return res.end(shareRecord(id, { file_name: 'broken.bin', size: 3 }));
      res.writeHead(404, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ status: 'fail', message: 'Not found' }));
    };
    const dir = await tempDir('empty-part');
    const partials = async () =>
      (await readdir(join(cli.configDir, 'partials')).catch(() => [] as string[])).sort();
    const before = await partials();
    try {
      const res = await cli.run(['--server', url, 'get', id, '-o', join(dir, 'broken.bin')], {
        env: { FSHARE_TOKEN: TOKEN },
      });
      expect(res.exitCode, res.stderr).not.toBe(0);
      expect(res.stderr.trim().split('\n')).toHaveLength(1);
      expect(await readdir(dir)).toEqual([]);
      expect(await partials()).toEqual(before);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("info fails when the share's links cannot be read, instead of saying there are none to see", async () => {
    // Property: info's "links" is null only when the caller may not see them (401, 403) or the
    // server has none (404, 405), as CLI.md says. Found broken: every failure was taken for that,
    // so with GET /files/<id>/links answering 503 five times, `info --json` exited 0 with
    // "links": null, as if the owner had no links to see.
    const id = '0e13fdd1-7ff2-4179-8263-b57911c15f09';
    const share = JSON.stringify({
      share_id: id,
      file_name: 'a.txt',
      owner_name: 'ci',
      initialized: true,
      locked: false,
      create_date: '2026-11-20T10:00:00.000Z',
    });
    let links = 503;
    answer = (req, res) => {
      if (req.url === `/files/${id}`) return res.end(share);
      res.writeHead(links, { 'content-type': 'text/html' });
      res.end('<html><body>unavailable</body></html>');
    };
    const failed = await run(['--json', 'info', id]);
    expect(failed.exitCode).toBe(1);
    expect(failed.stdout).toBe('');
    expect(failed.stderr).toBe('fshare: Service Unavailable (HTTP 503)');
    expect(seen.filter((r) => r.endsWith('/links'))).toHaveLength(5);

    links = 403;
    const hidden = await run(['--json', 'info', id]);
    expect(hidden.exitCode).toBe(0);
    expect((JSON.parse(hidden.stdout) as { links: unknown }).links).toBeNull();
  });

  it('a port where another service answers is one line saying it does not speak HTTP, exit 6', async () => {
    // Property: a server URL whose port answers something that is not HTTP (SSH, PostgreSQL, a
    // TLS server's alert: a CI job given the wrong port) gets one line naming the server and the
    // way on, exit 6 like TLS spoken to a plain HTTP port. Found broken: `ls` printed node's
    // 'fshare: Parse Error: Expected HTTP/, RTSP/ or ICE/' (exit 1), and `get` retried it five
    // times as 'connection reset' (exit 6).
    const sockets = new Set<Socket>();
    const other = createNetServer((socket) => {
      sockets.add(socket);
      socket.on('error', () => undefined);
      socket.on('close', () => sockets.delete(socket));
      socket.end('SSH-2.0-OpenSSH_9.6\r\n');
    });
    await new Promise<void>((resolve) => other.listen(0, '127.0.0.1', resolve));
    const at = `http://127.0.0.1:${(other.address() as AddressInfo).port}`;
    const line = `fshare: ${at} does not speak HTTP there (try another port, or https:// instead of http://)`;
    const dir = await tempDir('not-http');
    try {
      for (const args of [['ls'], ['get', '0e13fdd1-7ff2-4179-8263-b57911c15f09']]) {
        const res = await cli.run(['--server', at, '--json', ...args], {
          env: { FSHARE_TOKEN: TOKEN },
          cwd: dir,
        });
        expect(res.exitCode, args.join(' ')).toBe(6);
        expect(res.stdout, args.join(' ')).toBe('');
        expect(res.stderr, args.join(' ')).toBe(line);
      }
    } finally {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => other.close(() => resolve()));
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('a 401 to the token in FSHARE_TOKEN says to mend the variable, not to run fshare login', async () => {
    // Property: the step after a 401 is one that helps. FSHARE_TOKEN wins over the token fshare
    // login stores, so a CI job whose variable holds a revoked token is told to set or unset the
    // variable. Found broken: it was told 'run `fshare login` (or set FSHARE_TOKEN)', and after
    // that login (exit 0) the next command got the same 401.
    answer = (_req, res) => {
      res.writeHead(401, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({ status: 'fail', message: 'The token is invalid, expired or revoked' }),
      );
    };
    const revoked = await run(['--json', 'ls']);
    expect(revoked.exitCode).toBe(3);
    expect(revoked.stdout).toBe('');
    expect(revoked.stderr).toBe(
      'fshare: The token is invalid, expired or revoked (HTTP 401); it came from FSHARE_TOKEN, which fshare login does not change: set the variable to a valid token, or unset it',
    );
    // Without the variable (no token at all), signing in is the step.
    const anonymous = await cli.run(['--server', url, '--json', 'ls']);
    expect(anonymous.exitCode).toBe(3);
    expect(anonymous.stderr).toBe(
      'fshare: The token is invalid, expired or revoked (HTTP 401); run `fshare login` (or set FSHARE_TOKEN)',
    );
  });
});
