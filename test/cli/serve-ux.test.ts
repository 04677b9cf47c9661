import { execFileSync } from 'node:child_process';
import { createHmac, randomBytes } from 'node:crypto';
import { closeSync, existsSync, openSync } from 'node:fs';
import { chmod, mkdir, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import http from 'node:http';
import { createServer, type AddressInfo } from 'node:net';
import { join } from 'node:path';
import { execa, type ResultPromise } from 'execa';
import { afterAll, describe, expect, it } from 'vitest';
import { ADMIN, BIN, cleanEnv, createCli, signIn, tempDir } from '../helpers/cli.js';
import { mountExfat, mountSmallDisk } from '../helpers/mount.js';

/** `fshare serve` as an operator meets it: the port, the first start, the log, the stop. */

const cleanup: (() => Promise<unknown>)[] = [];
afterAll(async () => {
  for (const task of cleanup.reverse()) await task().catch(() => undefined);
});

interface Running {
  child: ResultPromise;
  url: string;
  stdout(): string;
  stderr(): string;
}

async function serve(
  args: string[],
  env: Record<string, string> = {},
  stderrFd?: number,
): Promise<Running> {
  const child = execa('node', [BIN, 'serve', '--port', '0', '--min-free', '16m', ...args], {
    env: cleanEnv(env),
    extendEnv: false,
    stdin: 'ignore',
    reject: false,
    buffer: false,
    // A descriptor the child inherits as is, as `2> file` makes it (execa's types list no numbers).
    ...(stderrFd === undefined ? {} : ({ stderr: stderrFd } as object)),
  });
  let out = '';
  let err = '';
  child.stdout?.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr?.on('data', (d: Buffer) => (err += d.toString()));
  const url = await new Promise<string>((resolve, reject) => {
    const check = setInterval(() => {
      const m = /Listening on (http:\/\/\S+)/.exec(out);
      if (m) {
        clearInterval(check);
        resolve(m[1]!);
      }
    }, 20);
    void child.then((r) => {
      clearInterval(check);
      reject(new Error(`serve exited ${r.exitCode}: ${err}`));
    });
  });
  cleanup.push(async () => {
    child.kill('SIGKILL');
    await child;
  });
  return { child, url, stdout: () => out, stderr: () => err };
}

/** `fshare serve` on `dataDir` that is expected to stop at the start: its result. */
const serveOnce = (dataDir: string) =>
  execa('node', [BIN, 'serve', '--port', '0', '--data-dir', dataDir], {
    env: cleanEnv(),
    extendEnv: false,
    reject: false,
    stdin: 'ignore',
  });

/** Waits until `test` holds for the server's stderr (the log is written after the response). */
async function logged(running: Running, test: (text: string) => boolean): Promise<string> {
  for (let i = 0; i < 200 && !test(running.stderr()); i++)
    await new Promise((r) => setTimeout(r, 25));
  return running.stderr();
}

describe('fshare serve, as an operator meets it', () => {
  it('a port in use: one clear line, exit 1, and nothing created (no data directory, no admin)', async () => {
    const blocker = createServer();
    await new Promise<void>((r) => blocker.listen(0, '127.0.0.1', r));
    cleanup.push(() => new Promise((r) => blocker.close(r)));
    const port = (blocker.address() as AddressInfo).port;
    const dir = await tempDir('inuse');
    const data = join(dir, 'data');
    const res = await execa('node', [BIN, 'serve', '--port', String(port), '--data-dir', data], {
      env: cleanEnv(),
      extendEnv: false,
      reject: false,
      stdin: 'ignore',
    });
    expect(res.exitCode).toBe(1);
    expect(res.stderr.trim().split('\n')).toHaveLength(1);
    expect(res.stderr).toMatch(new RegExp(`127\\.0\\.0\\.1:${port} is already in use`));
    expect(res.stdout).not.toMatch(/password/);
    expect(existsSync(data)).toBe(false);
    await rm(dir, { recursive: true, force: true });
  });

  // Property: no token can be forged by guessing the key. RFC 7518 asks 256 bits of an HS256
  // key; FSHARE_SECRET=changeme signed every token with a key found offline in moments.
  it('an FSHARE_SECRET shorter than 32 bytes: one line, exit 2, nothing created', async () => {
    const dir = await tempDir('weak-secret');
    const data = join(dir, 'data');
    for (const secret of ['changeme', 'x'.repeat(31)]) {
      const res = await execa('node', [BIN, 'serve', '--port', '0', '--data-dir', data], {
        env: cleanEnv({ FSHARE_SECRET: secret }),
        extendEnv: false,
        reject: false,
        stdin: 'ignore',
      });
      expect(res.exitCode).toBe(2);
      expect(res.stderr.trim().split('\n')).toEqual([
        expect.stringMatching(/^fshare: FSHARE_SECRET must be at least 32 bytes .*openssl rand/),
      ]);
      expect(res.stderr).not.toContain(secret);
      expect(existsSync(data)).toBe(false);
    }
    // 32 bytes is enough.
    const ok = await serve(['--data-dir', data, '-q'], { FSHARE_SECRET: 'y'.repeat(32) });
    expect(ok.url).toMatch(/^http:/);
    await rm(dir, { recursive: true, force: true }).catch(() => undefined);
  });

  // Property: no token can be forged. A first start on a full disk left an empty `secret` file,
  // and the next start signed every token with an empty key, which anyone can compute: a token
  // of the administrator, re-signed with "", was accepted.
  it('a first start on a full disk leaves no secret; later starts sign with a whole one, never an empty one', async () => {
    const disk = await mountSmallDisk(1);
    if (typeof disk === 'string') throw new Error(disk); // CI runs as root: a tmpfs always mounts
    cleanup.push(() => disk.unmount());
    const data = join(disk.dir, 'data');
    const filler = join(disk.dir, 'filler');
    await writeFile(filler, Buffer.alloc(2 * 1024 * 1024)).catch((err: NodeJS.ErrnoException) => {
      if (err.code !== 'ENOSPC') throw err;
    });
    const env = { FSHARE_ADMIN_PASSWORD: ADMIN.password };
    const failed = await execa('node', [BIN, 'serve', '--port', '0', '--data-dir', data], {
      env: cleanEnv(env),
      extendEnv: false,
      reject: false,
      stdin: 'ignore',
    });
    expect(failed.exitCode).toBe(1);
    expect(failed.stderr).toMatch(/no space left on the device/);
    expect((await readdir(data)).filter((name) => name.startsWith('secret'))).toEqual([]);
    await rm(filler);

    /** A real token of the administrator, signed again with an empty key. */
    const forged = (token: string) => {
      const [head, body] = token.split('.');
      const mac = createHmac('sha256', '').update(`${head}.${body}`).digest('base64url');
      return `${head}.${body}.${mac}`;
    };
    for (const round of ['after the full disk', 'over an empty secret file']) {
      const running = await serve(['--data-dir', data, '-q'], env);
      const secret = (await readFile(join(data, 'secret'), 'utf8')).trim();
      expect(Buffer.byteLength(secret), round).toBeGreaterThanOrEqual(32);
      const login = await fetch(`${running.url}/users/login`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ username: ADMIN.username, password: ADMIN.password }),
      });
      const { auth_token: token } = (await login.json()) as { auth_token: string };
      const as = (t: string) =>
        fetch(`${running.url}/whoami`, { headers: { authorization: `Bearer ${t}` } });
      expect((await as(token)).status, round).toBe(200);
      expect((await as(forged(token))).status, round).toBe(401);
      if (round === 'over an empty secret file')
        expect(running.stderr()).toContain('was empty: made a new signing secret');
      running.child.kill('SIGTERM');
      await running.child;
      // What an earlier version left after such a first start.
      await writeFile(join(data, 'secret'), '');
    }
  });

  it('a --host that is no address: one line saying so, exit 1, nothing created', async () => {
    const dir = await tempDir('bad-host');
    const data = join(dir, 'data');
    const res = await execa(
      'node',
      [BIN, 'serve', '--port', '0', '--host', 'no-such-host.invalid', '--data-dir', data],
      { env: cleanEnv(), extendEnv: false, reject: false, stdin: 'ignore' },
    );
    expect(res.exitCode).toBe(1);
    expect(res.stderr.trim().split('\n')).toEqual([
      'fshare: --host no-such-host.invalid is not an address, nor a name that resolves to one',
    ]);
    expect(existsSync(data)).toBe(false);
    await rm(dir, { recursive: true, force: true });
  });

  it('a --data-dir that is a file: one line saying so, exit 1, the file untouched', async () => {
    const dir = await tempDir('data-file');
    const file = join(dir, 'not-a-dir');
    await writeFile(file, 'keep me');
    const res = await serveOnce(file);
    expect(res.exitCode).toBe(1);
    expect(res.stderr.trim().split('\n')).toEqual([
      `fshare: the data directory ${file} is not a directory`,
    ]);
    expect(await readFile(file, 'utf8')).toBe('keep me');
    await rm(dir, { recursive: true, force: true });
  });

  // Found from outside: with a volume mounted on DATA/content (the big disk for the files),
  // the server started and every upload ended in a 500 once all its chunks had been sent (the
  // finished file is linked into content/: EXDEV). On exFAT (a USB drive), which has no hard
  // links, the same (EPERM). Property: a data directory whose folders cannot be linked between
  // is refused at the start, with one line saying why and what to do, before any upload.
  it('content/ on another file system than the data directory: one line at the start, exit 1', async () => {
    const disk = await mountSmallDisk(4);
    if (typeof disk === 'string') throw new Error(disk); // CI runs as root: a tmpfs mounts
    const dir = await tempDir('split-data');
    const content = join(dir, 'data', 'content');
    await mkdir(content, { recursive: true });
    execFileSync('mount', ['--bind', disk.dir, content]);
    try {
      const res = await serveOnce(join(dir, 'data'));
      expect(res.exitCode).toBe(1);
      expect(res.stderr.trim().split('\n')).toEqual([
        `fshare: ${content} is on another file system than the data directory ${join(dir, 'data')} (a volume mounted there?): fshare renames and links files between its folders, which needs one file system; mount the volume on the data directory instead, or point --data-dir at a directory on it`,
      ]);
    } finally {
      execFileSync('umount', [content]);
      await disk.unmount();
      await rm(dir, { recursive: true, force: true });
    }
  });

  // Found from outside: on a file system that keeps no permissions (NTFS through ntfs-3g, exFAT,
  // a Windows drive under WSL) the server started, its data directory and signing secret open
  // to every user of the machine (0777), so any of them could sign an administrator's token.
  // Property: a data directory that cannot be made private is refused before anything is
  // written there.
  it('a data directory on a file system without permissions (exFAT): one line, exit 1, nothing written', async (ctx) => {
    const disk = await mountExfat(16);
    if (typeof disk === 'string') return ctx.skip(disk);
    try {
      const data = join(disk.dir, 'data');
      const res = await serveOnce(data);
      expect(res.exitCode).toBe(1);
      expect(res.stderr.trim().split('\n')).toEqual([
        `fshare: the data directory ${data} is on a file system that keeps no file permissions (made 0700, it is 777), so every user of this machine could read its signing secret and content; use a directory on another file system`,
      ]);
      expect(await readdir(data)).toEqual([]);
    } finally {
      await disk.unmount();
    }
  });

  it('a data directory on exFAT (no hard links): one line at the start, exit 1', async (ctx) => {
    // Private (umask=077), so that the start gets as far as the hard links.
    const disk = await mountExfat(16, ['umask=077']);
    if (typeof disk === 'string') return ctx.skip(disk);
    try {
      const data = join(disk.dir, 'data');
      const res = await serveOnce(data);
      expect(res.exitCode).toBe(1);
      expect(res.stderr.trim().split('\n')).toEqual([
        `fshare: the file system of ${data} has no hard links (EPERM), which fshare needs to publish finished uploads; use a directory on another file system (ext4, XFS, Btrfs, ZFS, NFS)`,
      ]);
      // The probe left nothing behind.
      expect(await readdir(join(data, 'content'))).toEqual([]);
      expect(await readdir(join(data, 'incoming'))).toEqual([]);
    } finally {
      await disk.unmount();
    }
  });

  // Found from outside: `--data-dir ~` (or `.` in a project) made the directory 0700 and wrote
  // db.json, secret, content/… among the user's files. Property: a directory holding files,
  // none of them fshare's, is refused with nothing changed; a new volume (lost+found) is taken.
  it("a --data-dir holding someone else's files: one line, exit 1, its mode and files untouched", async () => {
    const dir = await tempDir('not-data');
    const home = join(dir, 'home');
    await mkdir(join(home, 'projects'), { recursive: true });
    await mkdir(join(home, '.cache'));
    await writeFile(join(home, 'notes.txt'), 'mine');
    await chmod(home, 0o755);
    const res = await serveOnce(home);
    expect(res.exitCode).toBe(1);
    expect(res.stderr.trim().split('\n')).toEqual([
      `fshare: ${home} is no fshare data directory: it holds other files (notes.txt, projects) and none of fshare's, and a start would make it private (0700) and write among them; give --data-dir a new or empty directory`,
    ]);
    expect((await stat(home)).mode & 0o777).toBe(0o755);
    expect((await readdir(home)).sort()).toEqual(['.cache', 'notes.txt', 'projects']);

    const volume = join(dir, 'volume');
    await mkdir(join(volume, 'lost+found'), { recursive: true });
    const running = await serve(['--data-dir', volume]);
    expect(running.url).toMatch(/^http:/);
    running.child.kill('SIGTERM');
    await running.child;
    expect(await readdir(volume)).toContain('db.json');
    await rm(dir, { recursive: true, force: true });
  });

  it('the first start keeps the generated admin password in a 0600 file that signs in', async () => {
    const dir = await tempDir('first');
    cleanup.push(() => rm(dir, { recursive: true, force: true }));
    const running = await serve(['--data-dir', join(dir, 'data'), '--quiet']);
    const printed = /password: (\S+)/.exec(running.stdout())![1]!;
    const file = join(dir, 'data', 'admin-password');
    expect(running.stdout()).toContain(file);
    expect((await stat(file)).mode & 0o777).toBe(0o600);
    expect(await readFile(file, 'utf8')).toBe(`admin\n${printed}\n`);
    const cli = await createCli();
    const login = await cli.run(
      ['--server', running.url, 'login', '-u', 'admin', '--password-stdin'],
      {
        input: `${(await readFile(file, 'utf8')).split('\n')[1]}\n`,
      },
    );
    expect(login.exitCode).toBe(0);
  });

  it('--help shows defaults in human units', async () => {
    const res = await execa('node', [BIN, 'serve', '--help'], {
      env: cleanEnv(),
      extendEnv: false,
    });
    expect(res.stdout).toMatch(/--min-free <size>[\s\S]*default:\s+256m/);
    expect(res.stdout).toMatch(/--token-lifetime <duration>[\s\S]*default:\s+7d/);
    expect(res.stdout).toMatch(/--grace <duration>[\s\S]*default:\s+10s/);
    expect(res.stdout).not.toMatch(/268435456|604800/);
  });

  it('--trust-proxy checks its list when the command line is read (proxy-addr is loaded then)', async () => {
    const res = await execa('node', [BIN, 'serve', '--port', '0', '--trust-proxy', '10.0.0.0/99'], {
      env: cleanEnv(),
      extendEnv: false,
      reject: false,
      timeout: 20_000,
    });
    expect(res.exitCode).toBe(2);
    expect(res.stderr.trim().split('\n')).toHaveLength(1);
    expect(res.stderr).toMatch(
      /--trust-proxy .*10\.0\.0\.0\/99.* is invalid\. expected addresses or CIDR/,
    );
    const dir = await tempDir('proxy');
    cleanup.push(() => rm(dir, { recursive: true, force: true }));
    const running = await serve(['--data-dir', dir, '--trust-proxy', 'loopback,10.0.0.0/8']);
    expect((await fetch(`${running.url}/files`)).status).toBe(401);
  });

  // Each --public-url refused below is one line, exit 2, and the server never starts.
  const notPlain = 'expected an http or https URL without user name, password, query or fragment';
  it.each([
    // Property: --public-url never puts credentials into the link URLs handed out. Found: it
    // took https://user:pw@host/, and every link URL then carried that user name and password.
    ['a user name and password', 'https://user:pw@files.example.com/', notPlain],
    ['a user name', 'https://user@files.example.com', notPlain],
    // Property: link URLs are the public URL's path followed by /l/<token>. Found: a public URL
    // ending in an empty query or fragment (https://h/x? or https://h/x#, a typo) was taken, as
    // the check looked at the query's and fragment's values only, and links were handed out as
    // https://h/x?/l/<token>: a page at /x that gets the token in its query.
    ['an empty query', 'https://files.example.com/x?', notPlain],
    ['an empty fragment', 'https://files.example.com/#', notPlain],
    // Property: a link's redirect never leads to another host. Found: --public-url https://h//x
    // made the redirect after a link password go to //x/l/…, which browsers read as host x.
    [
      'a path that starts with //',
      'https://files.example.com//x',
      'expected a path that does not start with //',
    ],
  ])(
    '--public-url with %s (%s): one line, exit 2, the server not started',
    async (_what, url, expected) => {
      const res = await execa('node', [BIN, 'serve', '--port', '0', '--public-url', url], {
        env: cleanEnv(),
        extendEnv: false,
        reject: false,
        timeout: 20_000,
      });
      expect(res.exitCode, res.stderr).toBe(2);
      expect(res.stderr.trim().split('\n')).toEqual([
        `fshare: option '--public-url <url>' argument '${url}' is invalid. ${expected}`,
      ]);
    },
  );

  // Property: a full disk under the log never takes the server down. Standard error redirected
  // to a file is the request log: a line that cannot be written is dropped, requests are still
  // answered (an upload included), and lines are written again once there is room. The server
  // used to crash at the first log line that met ENOSPC.
  it('a log on a full disk: the server keeps answering, and logs again once there is room', async () => {
    const disk = await mountSmallDisk(1);
    if (typeof disk === 'string') throw new Error(disk); // CI runs as root: a tmpfs always mounts
    cleanup.push(() => disk.unmount());
    const dir = await tempDir('fulllog');
    cleanup.push(() => rm(dir, { recursive: true, force: true }));
    const log = join(disk.dir, 'serve.log');
    const fd = openSync(log, 'a');
    const running = await serve(['--data-dir', join(dir, 'data')], {}, fd).finally(() =>
      closeSync(fd),
    );
    // Fill what is left of the disk.
    const filler = join(disk.dir, 'filler');
    await writeFile(filler, Buffer.alloc(2 * 1024 * 1024)).catch((err: NodeJS.ErrnoException) => {
      if (err.code !== 'ENOSPC') throw err;
    });
    const before = (await stat(log)).size;
    for (let i = 0; i < 20; i++) expect((await fetch(`${running.url}/files`)).status).toBe(401);
    const file = join(dir, 'small.bin');
    await writeFile(file, randomBytes(100_000));
    const password = (await readFile(join(dir, 'data', 'admin-password'), 'utf8')).split('\n')[1];
    const cli = await createCli();
    const login = await cli.run(
      ['--server', running.url, 'login', '-u', 'admin', '--password-stdin'],
      { input: `${password}\n` },
    );
    expect(login.exitCode).toBe(0);
    expect((await cli.run(['upload', file])).exitCode).toBe(0);
    expect(running.child.exitCode).toBeNull();
    expect((await stat(log)).size).toBe(before); // nothing could be written, nothing was

    await rm(filler);
    expect((await fetch(`${running.url}/files/after-room`)).status).toBe(401);
    let text = '';
    for (let i = 0; i < 200 && !text.includes('/files/after-room'); i++) {
      await new Promise((r) => setTimeout(r, 25));
      text = await readFile(log, 'utf8');
    }
    expect(text).toContain('GET /files/after-room 401');
  });

  // Property: `serve`'s standard output is a log too. With `> log 2>&1` on a full disk, the
  // "Listening on" line cannot be written; the server starts and answers all the same (it used to
  // stop at once with "cannot write to standard output", unseen in a log that had no room).
  it('> log 2>&1 on a full disk: the server starts and answers', async () => {
    const disk = await mountSmallDisk(1);
    if (typeof disk === 'string') throw new Error(disk); // CI runs as root: a tmpfs always mounts
    cleanup.push(() => disk.unmount());
    await writeFile(join(disk.dir, 'filler'), Buffer.alloc(2 * 1024 * 1024)).catch(
      (err: NodeJS.ErrnoException) => {
        if (err.code !== 'ENOSPC') throw err;
      },
    );
    const dir = await tempDir('fullout');
    cleanup.push(() => rm(dir, { recursive: true, force: true }));
    const probe = createServer();
    await new Promise<void>((r) => probe.listen(0, '127.0.0.1', r));
    const port = (probe.address() as AddressInfo).port;
    await new Promise((r) => probe.close(r));
    const fd = openSync(join(disk.dir, 'all.log'), 'a');
    const child = execa('node', [BIN, 'serve', '--port', String(port), '--data-dir', dir], {
      env: cleanEnv(),
      extendEnv: false,
      stdin: 'ignore',
      reject: false,
      ...({ stdout: fd, stderr: fd } as object), // as `> log 2>&1` makes them
    });
    closeSync(fd);
    cleanup.push(async () => {
      child.kill('SIGKILL');
      await child;
    });
    // Not yet listening (0), or still opening its data (503): wait.
    let status = 0;
    for (let i = 0; i < 400 && (status === 0 || status === 503); i++) {
      status = await fetch(`http://127.0.0.1:${port}/files`).then(
        (r) => r.status,
        () => 0,
      );
      if (status === 0 || status === 503) await new Promise((r) => setTimeout(r, 25));
    }
    expect(status).toBe(401);
    for (let i = 0; i < 10; i++)
      expect((await fetch(`http://127.0.0.1:${port}/files`)).status).toBe(401);
    expect(child.exitCode).toBeNull();
  });

  it('the JSON request log: ISO time, client address, path without its query, status, bytes, duration', async () => {
    const dir = await tempDir('log');
    cleanup.push(() => rm(dir, { recursive: true, force: true }));
    const running = await serve(['--data-dir', join(dir, 'data'), '--log-format', 'json']);
    await fetch(`${running.url}/whoami?token=SECRET-IN-QUERY`);
    const text = await logged(running, (t) => t.includes('"/whoami"'));
    expect(text).not.toContain('SECRET-IN-QUERY');
    const line = text.split('\n').find((l) => l.includes('"/whoami"'))!;
    const entry = JSON.parse(line) as Record<string, unknown>;
    expect(entry).toMatchObject({
      remote: '127.0.0.1',
      method: 'GET',
      path: '/whoami',
      status: 200,
      aborted: false,
    });
    expect(new Date(entry.time as string).toISOString()).toBe(entry.time);
    expect(entry.bytes).toBeGreaterThan(0);
    expect(typeof entry.ms).toBe('number');
  });

  it('a client that goes away mid-download is one log line, never a stack trace', async () => {
    const dir = await tempDir('gone');
    cleanup.push(() => rm(dir, { recursive: true, force: true }));
    const running = await serve(['--data-dir', join(dir, 'data')], {
      FSHARE_ADMIN_USER: ADMIN.username,
      FSHARE_ADMIN_PASSWORD: ADMIN.password,
    });
    const { id, token } = await bigShare(running.url, dir);
    await new Promise<void>((resolve) => {
      const req = http.get(
        `${running.url}/files/${id}/content`,
        { headers: { authorization: `Bearer ${token}` } },
        (res) => {
          res.once('data', () => {
            req.destroy();
            resolve();
          });
        },
      );
      req.on('error', () => undefined);
    });
    const text = await logged(running, (t) =>
      / \/files\/\S+\/content 200 \d+B \S+ cut short/.test(t),
    );
    expect(text).toMatch(/GET \/files\/\S+\/content 200 \d+B \S+ cut short/);
    expect(text).not.toMatch(/\n\s+at /);
  });

  it('SIGTERM while a download stalls: the transfer gets its grace, then the server exits 0', async () => {
    const dir = await tempDir('grace');
    cleanup.push(() => rm(dir, { recursive: true, force: true }));
    const running = await serve(['--data-dir', join(dir, 'data'), '--grace', '1s'], {
      FSHARE_ADMIN_USER: ADMIN.username,
      FSHARE_ADMIN_PASSWORD: ADMIN.password,
    });
    const { id, token } = await bigShare(running.url, dir);
    // A reader that takes the first bytes and then reads nothing more: the download stalls.
    const stalled = await new Promise<http.IncomingMessage>((resolve) =>
      http.get(
        `${running.url}/files/${id}/content`,
        { headers: { authorization: `Bearer ${token}` } },
        (res) => {
          res.pause();
          resolve(res);
        },
      ),
    );
    stalled.on('error', () => undefined);
    running.child.kill('SIGTERM');
    const result = await running.child;
    expect(result.exitCode).toBe(0);
    expect(running.stderr()).toMatch(
      /SIGTERM: no new connections; transfers in progress have 1s to finish/,
    );
    expect(running.stderr()).toMatch(/GET \/files\/\S+\/content 200 \d+B \S+ cut short/);
  });
});

/** A 64 MiB share (larger than any socket buffer), uploaded with the CLI; its id and a token. */
async function bigShare(url: string, dir: string): Promise<{ id: string; token: string }> {
  const cli = await createCli();
  await signIn(cli, url);
  const file = join(dir, 'big.bin');
  await writeFile(file, randomBytes(64 * 1024 * 1024));
  const [share] = await cli.json<{ share_id: string }[]>(['--server', url, 'upload', file]);
  const token = (await cli.run(['--server', url, 'token'])).stdout.trim();
  return { id: share!.share_id, token };
}
