// The client through an HTTP proxy (Debian's tinyproxy), as a company's CI runs it: the built
// binary against a real `fshare serve` listening on this machine's network address (a server on
// loopback is always reached directly). Found from outside: fshare read no proxy variable, so
// where only the proxy leads out every command failed with "cannot reach", and where the proxy was
// there to watch what leaves, fshare went around it.
import { execFileSync } from 'node:child_process';
import { randomBytes, createHash } from 'node:crypto';
import { readFile, writeFile } from 'node:fs/promises';
import { connect, type AddressInfo } from 'node:net';
import { join } from 'node:path';
import { createServer, type Server } from 'node:tls';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  ADMIN,
  closedPort,
  createCli,
  startServe,
  tempDir,
  type Cli,
  type Serve,
} from '../helpers/cli.js';
import { outsideAddress, startProxy, type HttpProxy } from '../helpers/proxy.js';

/** No proxy variable of the environment the tests run in reaches the commands unless set here. */
const NO_PROXY_ENV = {
  http_proxy: '',
  HTTP_PROXY: '',
  https_proxy: '',
  HTTPS_PROXY: '',
  all_proxy: '',
  ALL_PROXY: '',
  no_proxy: '',
  NO_PROXY: '',
};

let serve: Serve;
let proxy: HttpProxy;
let address: string;
/** The server over https: a TLS front on the same address, certificate made for it. */
let front: Server;
let secureUrl: string;
let caFile: string;
let work: string;

beforeAll(async () => {
  address = outsideAddress();
  [serve, proxy] = await Promise.all([startServe({ args: ['--host', address] }), startProxy()]);
  work = await tempDir('proxy-work');
  const key = join(work, 'key.pem');
  caFile = join(work, 'cert.pem');
  // A certificate for this address, which the commands trust through NODE_EXTRA_CA_CERTS.
  execFileSync(
    'openssl',
    [
      'req',
      '-x509',
      '-newkey',
      'rsa:2048',
      '-nodes',
      '-keyout',
      key,
      '-out',
      caFile,
      '-days',
      '2',
      '-subj',
      `/CN=${address}`,
      '-addext',
      `subjectAltName=IP:${address}`,
    ],
    { stdio: 'pipe' },
  );
  const port = Number(new URL(serve.url).port);
  front = createServer({ key: await readFile(key), cert: await readFile(caFile) }, (tls) => {
    const plain = connect(port, address);
    tls.pipe(plain).pipe(tls);
    tls.on('error', () => plain.destroy());
    plain.on('error', () => tls.destroy());
  });
  await new Promise<void>((done) => front.listen(0, address, done));
  secureUrl = `https://${address}:${(front.address() as AddressInfo).port}`;
});

afterAll(async () => {
  front?.close();
  await proxy?.stop();
  await serve?.stop();
});

/** The administrator's token on the server at `url`, asked for directly. */
async function tokenOf(url: string): Promise<string> {
  const login = await fetch(`${url}/users/login`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ username: ADMIN.username, password: ADMIN.password }),
  });
  return ((await login.json()) as { auth_token: string }).auth_token;
}

/** A CLI signed in through FSHARE_TOKEN (no login request that could go around the proxy). */
async function client(): Promise<{ cli: Cli; env: Record<string, string> }> {
  const cli = await createCli();
  const token = await tokenOf(serve.url);
  return { cli, env: { ...NO_PROXY_ENV, FSHARE_TOKEN: token, NODE_EXTRA_CA_CERTS: caFile } };
}

const sha256 = (data: Buffer) => createHash('sha256').update(data).digest('hex');

/**
 * Uploads 3 MiB and a few bytes in 1 MiB chunks (4 chunk requests) with `proxied` in the
 * environment, then gets it back: both verified, the bytes the same. Returns the share's id.
 */
async function roundTrip(proxied: Record<string, string>): Promise<string> {
  const { cli, env } = await client();
  const data = randomBytes(3 * 1024 * 1024 + 5);
  const file = join(work, `${randomBytes(4).toString('hex')}.bin`);
  await writeFile(file, data);
  const run = (args: string[]) =>
    cli.run([...args, '--json', '--no-progress'], {
      env: { ...env, ...proxied },
    });
  const up = await run(['upload', file, '--chunk-size', '1m']);
  expect(up.exitCode, up.stderr).toBe(0);
  const [share] = JSON.parse(up.stdout) as { share_id: string; verified: boolean }[];
  expect(share!.verified).toBe(true);
  const got = await run(['get', share!.share_id, '-o', `${file}.out`]);
  expect(got.exitCode, got.stderr).toBe(0);
  expect(JSON.parse(got.stdout)).toMatchObject({ verified: true, sha256: sha256(data) });
  expect(sha256(await readFile(`${file}.out`))).toBe(sha256(data));
  return share!.share_id;
}

/** The one line on stderr. */
function oneLine(stderr: string): string {
  const lines = stderr.trimEnd().split('\n');
  expect(lines, stderr).toHaveLength(1);
  return lines[0]!;
}

describe('fshare through an HTTP proxy', () => {
  // Property: every request to an http server goes to the proxy named by HTTP_PROXY, which
  // forwards it; the transfers are verified as without it.
  it('to an http server: every request goes through HTTP_PROXY; upload and get verified', async () => {
    const before = (await proxy.requests()).length;
    const id = await roundTrip({ FSHARE_SERVER: serve.url, HTTP_PROXY: proxy.url });
    const carried = (await proxy.requests()).slice(before);
    const content = `${serve.url}/files/${id}/content`;
    expect(carried).toContain(`POST ${serve.url}/files`);
    expect(carried.filter((r) => r === `POST ${content}`)).toHaveLength(4);
    expect(carried).toContain(`GET ${content}`);
    expect(carried.every((r) => r.includes(serve.url))).toBe(true);
  });

  // Property: to an https server, the proxy carries a CONNECT tunnel to its host and port, and
  // TLS runs inside it to the server itself (its certificate checked as without a proxy).
  it('to an https server: a CONNECT tunnel through HTTPS_PROXY; upload and get verified', async () => {
    const before = (await proxy.requests()).length;
    await roundTrip({ FSHARE_SERVER: secureUrl, HTTPS_PROXY: proxy.url });
    const carried = (await proxy.requests()).slice(before);
    expect(carried.length).toBeGreaterThan(0);
    const target = secureUrl.replace('https://', '');
    expect(carried.every((r) => r === `CONNECT ${target}`)).toBe(true);
  });

  // Property: NO_PROXY (a name, a range, a host and port) and a server on loopback are reached
  // directly; a proxy that is down then changes nothing for them.
  it('NO_PROXY and a server on loopback go direct', async () => {
    const { cli, env } = await client();
    const down = `http://127.0.0.1:${await closedPort()}`;
    const port = new URL(serve.url).port;
    for (const noProxy of [
      `example.com, ${address}`,
      `${address.split('.').slice(0, 3).join('.')}.0/24`,
      `${address}:${port}`,
      '*',
    ]) {
      const res = await cli.run(['whoami'], {
        env: { ...env, FSHARE_SERVER: serve.url, HTTP_PROXY: down, NO_PROXY: noProxy },
      });
      expect(res.exitCode, `${noProxy}: ${res.stderr}`).toBe(0);
    }
    const local = await startServe();
    try {
      const res = await cli.run(['whoami'], {
        env: {
          ...env,
          FSHARE_TOKEN: await tokenOf(local.url),
          FSHARE_SERVER: local.url,
          HTTP_PROXY: down,
          ALL_PROXY: down,
        },
      });
      expect(res.exitCode, res.stderr).toBe(0);
    } finally {
      await local.stop();
    }
    // Another port of the same host is not the one NO_PROXY names: it goes to the proxy.
    const other = await cli.run(['whoami'], {
      env: {
        ...env,
        FSHARE_SERVER: serve.url,
        HTTP_PROXY: down,
        NO_PROXY: `${address}:1`,
      },
    });
    expect(other.exitCode).toBe(6);
    expect(oneLine(other.stderr)).toBe(
      `fshare: cannot reach ${serve.url} through the proxy ${down} (HTTP_PROXY): connection refused (after 5 attempts)`,
    );
  });

  // Property: a proxy that cannot be used is named in one line with the way on, never taken for
  // the server: one that is down, one that asks for a password (and the password in the
  // variable's URL then works), one of a kind fshare does not speak.
  it('a proxy that is down, wants a password or is not HTTP: one line naming it', async () => {
    const { cli, env } = await client();
    const down = `http://127.0.0.1:${await closedPort()}`;
    const unreachable = await cli.run(['whoami'], {
      env: { ...env, FSHARE_SERVER: secureUrl, HTTPS_PROXY: down },
    });
    expect(unreachable.exitCode).toBe(6);
    expect(oneLine(unreachable.stderr)).toBe(
      `fshare: cannot reach ${secureUrl} through the proxy ${down} (HTTPS_PROXY): connection refused (after 5 attempts)`,
    );

    const guarded = await startProxy({ auth: { user: 'ci', password: 'pr0xy-pass' } });
    try {
      for (const [server, variable] of [
        [secureUrl, 'HTTPS_PROXY'],
        [serve.url, 'HTTP_PROXY'],
      ] as const) {
        const asked = await cli.run(['whoami'], {
          env: { ...env, FSHARE_SERVER: server, [variable]: guarded.url },
        });
        expect(asked.exitCode).toBe(6);
        expect(oneLine(asked.stderr)).toMatch(
          new RegExp(
            `^fshare: the proxy ${guarded.url.replace(/\./g, '\\.')} \\(${variable}\\) asks for a user name and password \\(407[^)]*\\): put them in ${variable} as http://USER:PASSWORD@HOST:PORT$`,
          ),
        );
        const withAuth = guarded.url.replace('http://', 'http://ci:pr0xy-pass@');
        const wrong = await cli.run(['whoami'], {
          env: {
            ...env,
            FSHARE_SERVER: server,
            [variable]: guarded.url.replace('http://', 'http://ci:wrong@'),
          },
        });
        expect(wrong.exitCode).toBe(6);
        expect(oneLine(wrong.stderr)).toMatch(/refused the user name and password in/);
        expect(wrong.stderr).not.toMatch(/wrong/); // the password is never shown
        const ok = await cli.run(['whoami'], {
          env: { ...env, FSHARE_SERVER: server, [variable]: withAuth },
        });
        expect(ok.exitCode, ok.stderr).toBe(0);
        expect(ok.stdout).toMatch(/^admin on /);
      }
      expect((await guarded.requests()).length).toBeGreaterThan(0);
    } finally {
      await guarded.stop();
    }

    const socks = await cli.run(['whoami'], {
      env: { ...env, FSHARE_SERVER: serve.url, ALL_PROXY: 'socks5://127.0.0.1:1080' },
    });
    expect(socks.exitCode).toBe(2);
    expect(oneLine(socks.stderr)).toBe(
      'fshare: ALL_PROXY names a socks5 proxy (socks5://127.0.0.1:1080); fshare goes through http:// proxies only',
    );
  });
});
