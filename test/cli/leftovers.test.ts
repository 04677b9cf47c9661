// What a failed or killed command leaves behind: nothing that later commands trust or keep
// forever, and nothing of the user's that the CLI silently ignores.
import { createHash, randomBytes, randomUUID } from 'node:crypto';
import { existsSync, readdirSync } from 'node:fs';
import {
  link,
  mkdir,
  open,
  readdir,
  readFile,
  rm,
  symlink,
  utimes,
  writeFile,
} from 'node:fs/promises';
import { createServer, request as httpRequest } from 'node:http';
import { createRequire } from 'node:module';
import type { AddressInfo } from 'node:net';
import { hostname } from 'node:os';
import { basename, join } from 'node:path';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createCli, signIn, startServe, tempDir, type Cli, type Serve } from '../helpers/cli.js';
import { until } from '../helpers/http.js';
import { mountSmallDisk } from '../helpers/mount.js';

/** The kernel's open-file-description locks, as fshare takes them on a .part. */
const locks = () =>
  createRequire(import.meta.url)('fs-native-extensions') as { tryLock(fd: number): boolean };

let serve: Serve;
let work: string;

beforeAll(async () => {
  serve = await startServe();
  work = await tempDir('leftovers');
});

afterAll(async () => {
  await serve?.stop();
});

async function signedIn(): Promise<Cli> {
  const cli = await createCli();
  await signIn(cli, serve.url);
  return cli;
}

describe('damaged upload records', () => {
  it('are listed as damaged with their path, named once by an upload that meets them, and removed by uploads clean', async () => {
    // Guards: a record file cut short by a crash (or not JSON, or JSON that is not a record) was
    // skipped in silence by uploads, upload and uploads clean, and kept forever; `null` made
    // `fshare uploads` crash.
    const cli = await signedIn();
    const dir = join(cli.configDir, 'uploads');
    await mkdir(dir, { recursive: true });
    const cut = join(dir, 'a'.repeat(32) + '.json');
    const nul = join(dir, 'b'.repeat(32) + '.json');
    await writeFile(cut, '{"server": "http://127.0.0.1:1", "share_');
    await writeFile(nul, 'null');
    const run = (args: string[]) => cli.run(['--server', serve.url, ...args]);

    const listed = await run(['uploads']);
    expect(listed.exitCode, listed.stderr).toBe(0);
    const rows = listed.stdout.trim().split('\n');
    expect(rows).toEqual([`-\t${cut}\t-\tdamaged\t-\t-`, `-\t${nul}\t-\tdamaged\t-\t-`]);

    const json = await run(['--json', 'uploads']);
    expect(json.exitCode, json.stderr).toBe(0);
    const items = JSON.parse(json.stdout) as { record: string; kind: string; damaged: unknown }[];
    expect(items.map((i) => [i.record, i.kind, i.damaged])).toEqual([
      [cut, 'damaged', 'not JSON, or cut short'],
      [nul, 'damaged', 'not an upload record'],
    ]);

    const file = join(work, 'records.bin');
    await writeFile(file, randomBytes(3000));
    const up = await run(['upload', file]);
    expect(up.exitCode, up.stderr).toBe(0);
    const notices = up.stderr.split('\n').filter((l) => l.includes('damaged upload record'));
    expect(notices).toEqual([
      `fshare: damaged upload record (not JSON, or cut short), not used: ${cut}; fshare uploads clean removes it`,
      `fshare: damaged upload record (not an upload record), not used: ${nul}; fshare uploads clean removes it`,
    ]);

    const cleaned = await run(['uploads', 'clean']);
    expect(cleaned.exitCode, cleaned.stderr).toBe(0);
    expect(cleaned.stdout.trim().split('\n')).toEqual([
      `Removed the damaged upload record ${cut} (not JSON, or cut short; no share to delete)`,
      `Removed the damaged upload record ${nul} (not an upload record; no share to delete)`,
    ]);
    expect(existsSync(cut) || existsSync(nul)).toBe(false);
    expect(await readdir(dir)).toEqual([]);
    const after = await run(['--json', 'uploads']);
    expect(JSON.parse(after.stdout)).toEqual([]);
  });
});

describe('an upload record with a ctimeMs that is not a number', () => {
  // Property: a record's share is never lost to a field that only ever decides "start over".
  // Found from outside: a record whose ctimeMs (added this version) was not a number counted
  // as damaged; `uploads clean` removed it and left the empty share it named on the server.
  it('is read as a record without one: listed, and uploads clean deletes its empty share', async () => {
    const cli = await signedIn();
    const run = (args: string[]) => cli.run(['--server', serve.url, ...args]);
    // The empty share an interrupted upload leaves, made over HTTP.
    const made = await fetch(`${serve.url}/files`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${(await run(['token'])).stdout.trim()}`,
        'content-type': 'application/json',
      },
      body: JSON.stringify({ file_name: 'ctime.bin' }),
    });
    const id = ((await made.json()) as { url: string }).url.split('/').pop()!;
    const dir = join(cli.configDir, 'uploads');
    await mkdir(dir, { recursive: true });
    const path = join(work, 'ctime.bin');
    await writeFile(path, 'x');
    await writeFile(
      // Named as fshare names a record (a hash of what it is of).
      join(
        dir,
        `${createHash('sha256').update(`${serve.url}\0${id}\0${path}\0create`).digest('hex').slice(0, 32)}.json`,
      ),
      JSON.stringify({
        server: serve.url,
        share_id: id,
        dzuuid: randomUUID(),
        path,
        size: 1,
        mtimeMs: 1,
        ctimeMs: '1795728123752.2576',
        ino: 1,
        chunk_size: 8388608,
        mode: 'create',
        file_name: 'ctime.bin',
        started: new Date().toISOString(),
      }),
    );
    const listed = await run(['--json', 'uploads']);
    expect(listed.exitCode, listed.stderr).toBe(0);
    expect(JSON.parse(listed.stdout)).toMatchObject([{ share_id: id }]);
    const cleaned = await run(['uploads', 'clean']);
    expect(cleaned.exitCode, cleaned.stderr).toBe(0);
    expect(cleaned.stdout.trim()).toBe(`Deleted share ${id} of the unfinished upload of ${path}`);
    expect((await run(['info', id])).exitCode).toBe(4);
    expect(await readdir(dir)).toEqual([]);
  });
});

describe('what is not an upload record in uploads/', () => {
  it('a directory or a symbolic link there is neither listed nor named by upload, and uploads clean leaves it (exit 0)', async () => {
    // Guards: a directory named like a record was listed as damaged, upload said "fshare
    // uploads clean removes it", and uploads clean then stopped with EISDIR (exit 1).
    const cli = await signedIn();
    const dir = join(cli.configDir, 'uploads');
    const sub = join(dir, 'c'.repeat(32) + '.json');
    const linked = join(dir, 'd'.repeat(32) + '.json');
    const target = join(work, 'not-a-record.json');
    await mkdir(sub, { recursive: true });
    await writeFile(target, '{"kept": true}');
    await symlink(target, linked);
    const run = (args: string[]) => cli.run(['--server', serve.url, ...args]);

    const listed = await run(['--json', 'uploads']);
    expect(listed.exitCode, listed.stderr).toBe(0);
    expect(JSON.parse(listed.stdout)).toEqual([]);
    const file = join(work, 'beside.bin');
    await writeFile(file, randomBytes(3000));
    const up = await run(['upload', file]);
    expect(up.exitCode, up.stderr).toBe(0);
    expect(up.stderr).not.toMatch(/damaged upload record/);
    const cleaned = await run(['uploads', 'clean']);
    expect(cleaned.exitCode, cleaned.stderr).toBe(0);
    expect((await readdir(dir)).sort()).toEqual([sub, linked].map((p) => basename(p)).sort());
    expect(await readFile(target, 'utf8')).toBe('{"kept": true}');
  });
});

describe('temporary record files', () => {
  it("a killed record write's .tmp in uploads/ and partials/ is removed by the next uploads or get --continue; a live writer's is kept", async () => {
    // Guards: a record write killed before its rename left NAME.json.<hex>.tmp in uploads/ or
    // partials/ that nothing ever removed. Temporary names now carry the writer's pid and host:
    // a dead writer's goes at once, an unowned one (older fshares) once a day old, a live
    // writer's never.
    const cli = await signedIn();
    const run = (args: string[]) => cli.run(['--server', serve.url, ...args]);
    const host = createHash('sha256').update(hostname()).digest('hex').slice(0, 8);
    const gone = execa('node', ['-e', '']);
    const dead = gone.pid!;
    await gone;
    const old = new Date(Date.now() - 2 * 24 * 3600 * 1000);
    const plant = async (dir: string) => {
      await mkdir(dir, { recursive: true });
      const names = {
        dead: `${'d'.repeat(32)}.json.${dead}-${host}-${'1'.repeat(12)}.tmp`,
        live: `${'e'.repeat(32)}.json.${process.pid}-${host}-${'2'.repeat(12)}.tmp`,
        oldUnowned: `${'f'.repeat(32)}.json.${'3'.repeat(12)}.tmp`,
        newUnowned: `${'a'.repeat(32)}.json.${'4'.repeat(12)}.tmp`,
      };
      for (const name of Object.values(names)) await writeFile(join(dir, name), '{"cut');
      await utimes(join(dir, names.oldUnowned), old, old);
      return names;
    };
    const uploads = await plant(join(cli.configDir, 'uploads'));
    const listed = await run(['uploads']);
    expect(listed.exitCode, listed.stderr).toBe(0);
    expect(listed.stdout).toBe('');
    expect((await readdir(join(cli.configDir, 'uploads'))).sort()).toEqual(
      [uploads.live, uploads.newUnowned].sort(),
    );

    const src = join(work, 'temps-src.bin');
    const data = randomBytes(100_000);
    await writeFile(src, data);
    const up = await run(['upload', src]);
    expect(up.exitCode, up.stderr).toBe(0);
    const id = up.stdout.split(' ')[0]!;
    const partials = await plant(join(cli.configDir, 'partials'));
    const out = join(work, 'temps-out.bin');
    const got = await run(['get', id, '-o', out, '--continue']);
    expect(got.exitCode, got.stderr).toBe(0);
    expect((await readFile(out)).equals(data)).toBe(true);
    expect((await readdir(join(cli.configDir, 'partials'))).sort()).toEqual(
      [partials.live, partials.newUnowned].sort(),
    );
  });
});

describe('temporary files at the top of the config directory', () => {
  it("a killed write's temp of credentials.json, config.json or push-hashes.json is removed by the next command; a live writer's and anything else are kept", async () => {
    // Guards: credentials.json, config.json and push-hashes.json are written through a temp file
    // and a rename; a write killed in between left NAME.<pid>-<host>-….tmp (credentials.json's
    // holds the tokens, 0600) beside them, and nothing ever removed it. (credentials.json and
    // push-hashes.json also used names without a host, not safe to judge.) Now every command
    // sweeps the owned temps of just those files whose process is gone from this host.
    const cli = await signedIn();
    const host = createHash('sha256').update(hostname()).digest('hex').slice(0, 8);
    const gone = execa('node', ['-e', '']);
    const dead = gone.pid!;
    await gone;
    const owned = (file: string, pid: number, n: number) =>
      `${file}.${pid}-${host}-${String(n).repeat(12)}.tmp`;
    const stale = [
      owned('credentials.json', dead, 1),
      owned('config.json', dead, 2),
      owned('push-hashes.json', dead, 3),
    ];
    const kept = [
      owned('credentials.json', process.pid, 4), // a live writer's
      owned('notes.json', dead, 5), // not a file fshare writes there
      `credentials.json.${dead}.${'6'.repeat(12)}.tmp`, // not an owned name
      'other.tmp',
    ];
    for (const name of [...stale, ...kept])
      await writeFile(join(cli.configDir, name), '{"http://x": {"token": "cut', { mode: 0o600 });
    const before = await readdir(cli.configDir);

    const res = await cli.run(['--server', serve.url, 'whoami']);
    expect(res.exitCode, res.stderr).toBe(0);
    const after = await readdir(cli.configDir);
    for (const name of stale) expect(after).not.toContain(name);
    for (const name of kept) expect(after).toContain(name);
    expect(after.sort()).toEqual(before.filter((n) => !stale.includes(n)).sort());
  });
});

describe('damaged download records', () => {
  it('get --continue names a damaged partials/ record it does not use, and the download replaces it', async () => {
    // Guards: a partials/ record cut short was skipped in silence by get --continue (read in
    // src/cli/context.ts), which then went on as if the .part had no record.
    const cli = await signedIn();
    const run = (args: string[]) => cli.run(['--server', serve.url, ...args]);
    const data = randomBytes(200_000);
    const src = join(work, 'partial-src.bin');
    await writeFile(src, data);
    const up = await run(['upload', src]);
    expect(up.exitCode, up.stderr).toBe(0);
    const id = up.stdout.split(' ')[0]!;
    const out = join(work, 'partial-out.bin');
    await writeFile(`${out}.part`, data.subarray(0, 50_000));
    const record = join(
      cli.configDir,
      'partials',
      `${createHash('sha256').update(`${out}.part`).digest('hex').slice(0, 32)}.json`,
    );
    await mkdir(join(cli.configDir, 'partials'), { recursive: true });
    await writeFile(record, '{"part": "/tmp/x.part", "valid');
    const res = await run(['get', id, '-o', out, '--continue']);
    expect(res.exitCode, res.stderr).toBe(0);
    expect(res.stderr.split('\n')).toContain(
      `fshare: damaged download record (not JSON, or cut short), not used: ${record}`,
    );
    expect((await readFile(out)).equals(data)).toBe(true);
    expect(existsSync(record)).toBe(false);
  });
});

/**
 * Runs `fshare upload -` with TMPDIR of its own; stdin is `inputFile`, else a pipe the test
 * writes and keeps open.
 */
function uploadStdin(cli: Cli, tmp: string, extra: string[] = [], inputFile?: string) {
  return cli.start(['--server', serve.url, 'upload', '-', ...extra], {
    env: { TMPDIR: tmp },
    ...(inputFile ? { inputFile } : { stdin: 'pipe' as const }),
  });
}

/** Waits for `test` to hold: every 25 ms, at most 20 s (CLI processes start slowly in CI). */
const waitFor = (what: string, test: () => Promise<boolean> | boolean) =>
  until(test, what, 25, 20_000);

describe('upload - (standard input)', () => {
  it.each([
    ['SIGINT', { exitCode: 130 }],
    ['SIGTERM', { signal: 'SIGTERM' }],
    ['SIGHUP', { signal: 'SIGHUP' }],
  ] as const)(
    'a %s while stdin is still being read removes the fshare-stdin-* directory',
    async (signal, ending) => {
      // Guards: a signal while stdin was being spooled left /tmp/fshare-stdin-*/stdin behind for
      // good. Ctrl-C is exit 130 (docs: Errors and exit codes); SIGTERM and SIGHUP end the
      // process by that signal, as they do every other command.
      const cli = await signedIn();
      const tmp = await tempDir('stdin-tmp');
      const child = uploadStdin(cli, tmp);
      child.stdin!.write(randomBytes(1000));
      await waitFor('the spool file', () =>
        existsSync(join(tmp, readdirSync(tmp)[0] ?? '-', 'stdin')),
      );
      await new Promise((done) => setTimeout(done, 200));
      child.kill(signal);
      const res = await child;
      if ('exitCode' in ending) expect(res.exitCode, res.stderr).toBe(ending.exitCode);
      else expect(res.signal, res.stderr).toBe(ending.signal);
      expect(await readdir(tmp)).toEqual([]);
    },
  );

  it('an interrupted upload of stdin gives no resume hint that cannot work: it names the share it left and how to delete it', async () => {
    // Guards: Ctrl-C during an upload of stdin said "to resume: fshare upload
    // /tmp/fshare-stdin-…/stdin", a file it had just deleted.
    const cli = await signedIn();
    const tmp = await tempDir('stdin-tmp');
    const input = join(work, 'stdin-big.bin');
    await writeFile(input, Buffer.alloc(64 * 1024 * 1024, 7));
    const child = uploadStdin(cli, tmp, ['--chunk-size', '64k', '-p', '1'], input);
    const records = join(cli.configDir, 'uploads');
    await waitFor(
      'the upload record',
      async () => (await readdir(records).catch(() => [])).length > 0,
    );
    child.kill('SIGINT');
    const res = await child;
    expect(res.exitCode, res.stderr).toBe(130);
    expect(res.stderr).not.toContain('to resume');
    const [record] = await readdir(records);
    const { share_id: id } = JSON.parse(await readFile(join(records, record!), 'utf8')) as {
      share_id: string;
    };
    expect(res.stderr.trim().split('\n')).toEqual([
      'fshare: interrupted',
      `fshare: an upload from standard input cannot be resumed; it left the share ${id} without content: fshare uploads clean (or fshare rm ${id}) deletes it`,
    ]);
    expect(await readdir(tmp)).toEqual([]);
    const cleaned = await cli.run(['--server', serve.url, 'uploads', 'clean']);
    expect(cleaned.stdout).toContain(`Deleted share ${id}`);
  });
  it('uploads lists an interrupted upload of stdin as standard input, never its deleted copy, and uploads clean names it so', async () => {
    // Guards: after an interrupted `upload -`, `fshare uploads` showed the deleted spool file
    // /tmp/fshare-stdin-…/stdin as FILE (and --json as path), as if it could be resumed from there.
    const cli = await signedIn();
    const tmp = await tempDir('stdin-tmp');
    const input = join(work, 'stdin-listed.bin');
    await writeFile(input, Buffer.alloc(64 * 1024 * 1024, 9));
    const child = uploadStdin(cli, tmp, ['--chunk-size', '64k', '-p', '1'], input);
    const records = join(cli.configDir, 'uploads');
    const shareOf = async () => {
      const [name] = await readdir(records).catch(() => [] as string[]);
      if (!name) return null;
      const text = await readFile(join(records, name), 'utf8').catch(() => '{}');
      return ((JSON.parse(text) as { share_id?: string | null }).share_id ?? null) as string | null;
    };
    await waitFor('the upload record with its share', async () => (await shareOf()) !== null);
    const id = (await shareOf())!;
    child.kill('SIGINT');
    expect((await child).exitCode).toBe(130);

    const listed = await cli.run(['--server', serve.url, 'uploads']);
    expect(listed.exitCode, listed.stderr).toBe(0);
    expect(listed.stdout.split('\t').slice(0, 2)).toEqual([id, 'standard input']);
    expect(listed.stdout).not.toContain('fshare-stdin-');
    const json = await cli.json<{ share_id: string; path: unknown; stdin: unknown }[]>([
      '--server',
      serve.url,
      'uploads',
    ]);
    expect(json).toMatchObject([{ share_id: id, path: null, stdin: true }]);

    const cleaned = await cli.run(['--server', serve.url, 'uploads', 'clean']);
    expect(cleaned.exitCode, cleaned.stderr).toBe(0);
    expect(cleaned.stdout).toBe(`Deleted share ${id} of the unfinished upload of standard input`);
  });
});

describe('temporary directories of push and upload -', () => {
  /** `fshare push SRC --name NAME` with TMPDIR of its own, as a process to signal. */
  const pushIn = (cli: Cli, tmp: string, src: string, name: string) =>
    cli.start(['--server', serve.url, 'push', src, '--name', name], { env: { TMPDIR: tmp } });
  const pushDirs = (tmp: string) => readdirSync(tmp).filter((n) => n.startsWith('fshare-push-'));

  /** A folder whose push takes a while: one large file (a share of its own) and a small one. */
  async function bigTree(name: string): Promise<string> {
    const src = join(work, name);
    await mkdir(src, { recursive: true });
    await writeFile(join(src, 'big.bin'), randomBytes(48 * 1024 * 1024));
    await writeFile(join(src, 'small.txt'), 'small\n');
    return src;
  }

  it.each([
    ['SIGINT', { exitCode: 130 }],
    ['SIGTERM', { signal: 'SIGTERM' }],
    ['SIGHUP', { signal: 'SIGHUP' }],
  ] as const)('a %s during push removes its fshare-push-* directory', async (signal, ending) => {
    // Guards: push's /tmp/fshare-push-* (its packs and manifest) stayed for good when SIGINT,
    // SIGTERM or SIGHUP ended it: the signal ended the process before its cleanup ran.
    const cli = await signedIn();
    const tmp = await tempDir('push-tmp');
    const src = await bigTree(`sig-${signal}`);
    const child = pushIn(cli, tmp, src, `sig-${signal.toLowerCase()}`);
    await waitFor('the push directory', () => pushDirs(tmp).length > 0);
    child.kill('SIGSTOP');
    expect(pushDirs(tmp)).toHaveLength(1);
    child.kill(signal);
    child.kill('SIGCONT');
    const res = await child;
    if ('exitCode' in ending) expect(res.exitCode, res.stderr).toBe(ending.exitCode);
    else expect(res.signal, res.stderr).toBe(ending.signal);
    expect(await readdir(tmp)).toEqual([]);
  });

  it("a SIGKILLed push's or upload -'s directory is removed by the next such command; a live one's is kept", async () => {
    // Guards: a SIGKILL (or a crash) of push or `upload -` left /tmp/fshare-push-* or
    // /tmp/fshare-stdin-* for good. Their names now carry the pid and host: the next push or
    // upload removes those of dead processes of this user, never one a running fshare still uses.
    const cli = await signedIn();
    const tmp = await tempDir('killed-tmp');
    const src = await bigTree('killed-push');
    const killed = pushIn(cli, tmp, src, 'killed-push');
    await waitFor('the push directory', () => pushDirs(tmp).length > 0);
    killed.kill('SIGKILL');
    await killed;
    const [pushLeft, ...more] = await readdir(tmp);
    expect(more).toEqual([]);
    expect(pushLeft).toMatch(/^fshare-push-/);

    // The next one (a live `upload -`, still reading its stdin) removes it, and keeps its own.
    const stdinDirs = () => readdirSync(tmp).filter((n) => n.startsWith('fshare-stdin-'));
    const live = uploadStdin(cli, tmp);
    try {
      live.stdin!.write(randomBytes(1000));
      await waitFor('the live spool', () => stdinDirs().length === 1);
      const [liveDir] = stdinDirs();
      expect(await readdir(tmp)).toEqual([liveDir]);
      // An `upload -` killed while it reads: its directory stays, until the next upload.
      const spool = uploadStdin(cli, tmp);
      spool.stdin!.write(randomBytes(1000));
      await waitFor('the spool file', () => stdinDirs().length === 2);
      spool.kill('SIGKILL');
      await spool;
      expect(stdinDirs()).toHaveLength(2);
      const next = await cli.run(['--server', serve.url, 'upload', '-', '--name', 'next'], {
        input: 'next\n',
        env: { TMPDIR: tmp },
      });
      expect(next.exitCode, next.stderr).toBe(0);
      expect(await readdir(tmp)).toEqual([liveDir]);
    } finally {
      live.kill('SIGTERM');
      await live;
    }
    expect(await readdir(tmp)).toEqual([]);
  }, 120_000);
});

describe('a TMPDIR that cannot be used', () => {
  // Found from outside: TMPDIR naming a folder that is not there (or a file) made push, pull and
  // upload - say only "no such file or directory: /nonexistent/fshare-push-27409-…-UvY2YI", a
  // name of fshare's own. Property: one line naming TMPDIR's folder and what to do, exit 1,
  // before anything is made on the server.
  it('push, pull and upload - say which folder and to set TMPDIR; nothing is made', async () => {
    const cli = await signedIn();
    const src = join(work, 'tmpdir-src');
    await mkdir(src, { recursive: true });
    await writeFile(join(src, 'a.txt'), 'a\n');
    const pushed = await cli.run(['--server', serve.url, 'push', src, '--name', 'tmpdir-set']);
    expect(pushed.exitCode, pushed.stderr).toBe(0);
    const before = await cli.json<{ shares: unknown[] }>(['--server', serve.url, 'ls', '--all']);
    const notThere = join(work, 'no-such-tmp');
    const aFile = join(src, 'a.txt');
    for (const [tmp, why] of [
      [notThere, 'no such file or directory'],
      [aFile, 'not a directory'],
      [join(work, 'x'.repeat(300)), 'file name too long'],
    ] as const) {
      const line = `fshare: cannot make a temporary directory in ${tmp} (${why}); set TMPDIR to a directory fshare can write`;
      const env = { TMPDIR: tmp };
      const runs = [
        await cli.run(['--server', serve.url, 'push', src, '--name', 'tmpdir-other'], { env }),
        await cli.run(['--server', serve.url, 'pull', 'tmpdir-set', join(work, 'tmpdir-out')], {
          env,
        }),
        await cli.run(['--server', serve.url, 'upload', '-'], { env, input: 'x\n' }),
      ];
      for (const res of runs) {
        expect(res.exitCode).toBe(1);
        expect(res.stderr.trim()).toBe(line);
      }
    }
    const after = await cli.json<{ shares: unknown[] }>(['--server', serve.url, 'ls', '--all']);
    expect(after.shares).toHaveLength(before.shares.length);
  });
});

describe('pull temporary files', () => {
  it("a killed pull's .fshare-tmp-* files are removed by the next pull; a live pull's are neither removed nor counted by pull --delete into a directory above it, and a pull into its DIR waits for it", async () => {
    // Guards: a pull killed on the way left .fshare-tmp-* files in DIR that every later pull
    // kept for good, and pull --delete removed (and counted as the user's files) the temporary
    // files of another pull still running there. Two pulls into one DIR run one after the other
    // (its lock); a pull into a directory above it is another DIR, and runs at once.
    const cli = await signedIn();
    const big = randomBytes(24 * 1024 * 1024);
    const src = join(work, 'tmp-src');
    await mkdir(src, { recursive: true });
    await writeFile(join(src, 'big.bin'), big);
    await writeFile(join(src, 'small.txt'), 'small\n');
    // The same files one level down, as a set for the directory above.
    const srcAbove = join(work, 'tmp-src-above');
    await mkdir(join(srcAbove, 'sub'), { recursive: true });
    await writeFile(join(srcAbove, 'sub', 'big.bin'), big);
    await writeFile(join(srcAbove, 'sub', 'small.txt'), 'small\n');
    for (const [dir, name] of [
      [src, 'tmpset'],
      [srcAbove, 'tmpset-above'],
    ] as const) {
      const pushed = await cli.run(['--server', serve.url, 'push', dir, '--name', name]);
      expect(pushed.exitCode, pushed.stderr).toBe(0);
    }
    const above = join(work, 'tmp-above');
    const dest = join(above, 'sub');
    await mkdir(dest, { recursive: true });
    const temps = () => readdirSync(dest).filter((n) => n.startsWith('.fshare-tmp-'));
    const pullOf = (name: string, dir: string, ...more: string[]) =>
      cli.start(['--server', serve.url, '--json', 'pull', name, dir, ...more]);

    // A pull caught with its temporary file open, then stopped while other pulls run.
    const first = pullOf('tmpset', dest, '-p', '1');
    await waitFor('a temporary file of the first pull', () => temps().length > 0);
    first.kill('SIGSTOP');
    const live = temps();
    let waiting: ReturnType<typeof pullOf> | undefined;
    try {
      const second = await pullOf('tmpset-above', above, '--delete');
      expect(second.exitCode, String(second.stderr)).toBe(0);
      expect(
        (JSON.parse(String(second.stdout)) as { deleted: { files: number } }).deleted.files,
      ).toBe(0);
      for (const name of live) expect(existsSync(join(dest, name)), name).toBe(true);

      // Into the stopped pull's own DIR: it waits for that pull.
      waiting = pullOf('tmpset', dest, '--delete');
      let said = '';
      waiting.stderr!.on('data', (d: Buffer) => (said += d.toString()));
      await waitFor('the third pull to wait', () =>
        said.includes('waiting for another fshare pull'),
      );
    } finally {
      first.kill('SIGKILL');
      await first;
    }
    // Killed: the lock went with it, and nothing will finish its files; the waiting pull removes
    // them, counting none of them as the user's.
    const third = await waiting!;
    expect(third.exitCode, String(third.stderr)).toBe(0);
    expect((JSON.parse(String(third.stdout)) as { deleted: { files: number } }).deleted.files).toBe(
      0,
    );
    expect(temps()).toEqual([]);
    expect((await readFile(join(dest, 'big.bin'))).equals(big)).toBe(true);
    expect((await readdir(dest)).sort()).toEqual(['big.bin', 'small.txt']);
  }, 120_000);
});

describe('push hash cache', () => {
  it('a push-hashes.json that cannot be written (a full disk) leaves no .tmp beside it, and the push still succeeds', async (ctx) => {
    // Guards: a failed write of the push hash cache left push-hashes.json.<hex>.tmp in the config
    // directory for good. The cache is only a cache: the push's outcome does not change.
    const disk = await mountSmallDisk(1);
    if (typeof disk === 'string') return ctx.skip(disk);
    try {
      const cli = await createCli(join(disk.dir, 'config'));
      await signIn(cli, serve.url);
      const src = join(work, 'hash-src');
      await mkdir(src, { recursive: true });
      for (let i = 0; i < 300; i++) await writeFile(join(src, `f${i}.txt`), `file ${i}\n`);
      // A file changed within the last two seconds is not cached (its times could stay the same
      // through another change): these are cached, so the push writes the cache.
      await new Promise((resolve) => setTimeout(resolve, 2100));
      // Fill the disk: the cache (some 30 KiB for 300 paths) cannot be written.
      await writeFile(join(disk.dir, 'filler'), Buffer.alloc(1024 * 1024)).catch(() => undefined);
      const res = await cli.run(['--server', serve.url, 'push', src, '--name', 'hashcache']);
      expect(res.exitCode, res.stderr).toBe(0);
      expect(res.stdout).toMatch(/^Pushed hashcache: 300 files/);
      const left = (await readdir(cli.configDir)).filter((n) => n.startsWith('push-hashes'));
      expect(left).toEqual([]);
    } finally {
      await disk.unmount();
    }
  });
});

describe('get -o with a long name', () => {
  it('a NAME of 251-255 bytes downloads through a shortened .part that --continue, the lock and the link refusals all use', async () => {
    // Guards: `get -o NAME` with a valid 253-byte NAME failed with ENAMETOOLONG, since NAME.part
    // is 258 bytes. The partial file is now NAME cut to fit + "~" + 8 hex of NAME's sha256 +
    // ".part" (docs/CLI.md), and everything that guarded NAME.part guards it.
    const cli = await signedIn();
    const run = (args: string[]) => cli.run(['--server', serve.url, ...args]);
    const data = randomBytes(300_000);
    const src = join(work, 'long-src.bin');
    await writeFile(src, data);
    const up = await run(['upload', src]);
    expect(up.exitCode, up.stderr).toBe(0);
    const id = up.stdout.split(' ')[0]!;
    const dir = join(work, 'long');
    await mkdir(dir);
    const name = `${'é'.repeat(120)}${'L'.repeat(13)}`; // 253 bytes
    expect(Buffer.byteLength(name)).toBe(253);
    const out = join(dir, name);
    const tag = createHash('sha256').update(name).digest('hex').slice(0, 8);
    const part = join(dir, `${'é'.repeat(120)}L~${tag}.part`); // 241 bytes of NAME + 14
    expect(Buffer.byteLength(`${'é'.repeat(120)}L~${tag}.part`)).toBe(255);

    const got = await run(['get', id, '-o', out]);
    expect(got.exitCode, got.stderr).toBe(0);
    expect((await readFile(out)).equals(data)).toBe(true);
    expect(await readdir(dir)).toEqual([name]);
    await rm(out);

    // --continue finds the shortened .part again, and goes on from its bytes.
    await writeFile(part, data.subarray(0, 100_000));
    const resumed = await run(['get', id, '-o', out, '--continue']);
    expect(resumed.exitCode, resumed.stderr).toBe(0);
    expect(resumed.stdout).toMatch(/resumed at/);
    expect((await readFile(out)).equals(data)).toBe(true);
    expect(await readdir(dir)).toEqual([name]);
    await rm(out);

    // Another holder of the lock on it: the second download stops at once.
    await writeFile(part, '');
    const handle = await open(part, 'r+');
    try {
      expect(locks().tryLock(handle.fd)).toBe(true);
      const busy = await run(['get', id, '-o', out]);
      expect(busy.exitCode, busy.stderr).toBe(5);
      expect(busy.stderr.trim()).toBe(
        `fshare: another fshare is writing ${part}; wait for it or choose another -o`,
      );
    } finally {
      await handle.close();
    }
    await rm(part);

    // Planted as a symbolic link, or as a hard link to another file: never written through.
    const victim = join(work, 'long-victim.txt');
    await writeFile(victim, 'keep me\n');
    await symlink(victim, part);
    const viaSymlink = await run(['get', id, '-o', out]);
    expect(viaSymlink.exitCode, viaSymlink.stderr).toBe(1);
    expect(viaSymlink.stderr.trim()).toBe(
      `fshare: a symbolic link, which fshare never writes through: ${part}`,
    );
    await rm(part);
    await link(victim, part);
    const viaHardLink = await run(['get', id, '-o', out]);
    expect(viaHardLink.exitCode, viaHardLink.stderr).toBe(1);
    expect(viaHardLink.stderr.trim()).toBe(
      `fshare: a file with other names (a hard link), which fshare never writes through: ${part}`,
    );
    expect(await readFile(victim, 'utf8')).toBe('keep me\n');
    expect(existsSync(out)).toBe(false);
  });
});

/**
 * A proxy in front of the real server that answers GET /files/<id> with another sha256: the
 * share then seems to hold other bytes than those sent.
 */
async function startLyingProxy(target: string): Promise<{ url: string; close(): Promise<void> }> {
  const upstream = new URL(target);
  const server = createServer((req, res) => {
    // The stored content's sha256, wherever the server states it: the share, and the 201 that
    // completes an upload.
    const lie =
      (req.method === 'GET' && /^\/files\/[0-9a-f-]{36}$/.test(req.url ?? '')) ||
      /^\/files\/[0-9a-f-]{36}\/content$/.test(req.url ?? '');
    const forward = httpRequest(
      {
        host: upstream.hostname,
        port: upstream.port,
        method: req.method,
        path: req.url,
        headers: req.headers,
      },
      (up) => {
        if (!lie) {
          res.writeHead(up.statusCode ?? 502, up.headers);
          up.pipe(res);
          return;
        }
        const parts: Buffer[] = [];
        up.on('data', (d: Buffer) => parts.push(d));
        up.on('end', () => {
          const body = Buffer.from(
            Buffer.concat(parts)
              .toString()
              .replace(/"sha256":"[0-9a-f]{64}"/, `"sha256":"${'0'.repeat(64)}"`),
          );
          res.writeHead(up.statusCode ?? 502, { ...up.headers, 'content-length': body.length });
          res.end(body);
        });
      },
    );
    req.pipe(forward);
  });
  await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    close: () => new Promise<void>((done) => server.close(() => done())),
  };
}

describe('error lines name the path the user gave', () => {
  it('get names NAME, not NAME.part, when NAME cannot be made', async () => {
    // Guards: `get -o missing/x.bin` said "no such file or directory: missing/x.bin.part", and a
    // name too long for the file system named a NAME.part the user never typed.
    const cli = await signedIn();
    const run = (args: string[]) => cli.run(['--server', serve.url, ...args]);
    const src = join(work, 'naming-src.bin');
    await writeFile(src, randomBytes(2000));
    const up = await run(['upload', src]);
    expect(up.exitCode, up.stderr).toBe(0);
    const id = up.stdout.split(' ')[0]!;
    const missing = join(work, 'no-such-dir', 'x.bin');
    const res = await run(['get', id, '-o', missing]);
    expect(res.exitCode, res.stderr).toBe(1);
    expect(res.stderr.trim()).toBe(`fshare: no such file or directory: ${missing}`);
    const tooLong = join(work, 'z'.repeat(300));
    const long = await run(['get', id, '-o', tooLong]);
    expect(long.exitCode, long.stderr).toBe(1);
    expect(long.stderr.trim()).toBe(`fshare: file name too long: ${tooLong}`);
    expect(readdirSync(work).filter((n) => n.startsWith('zzz'))).toEqual([]);
  });

  it("pull names the set's file, not its .fshare-tmp-* file, when the disk is full", async (ctx) => {
    // Guards: a pull onto a full disk said "no space left on the device: DIR/.fshare-tmp-….part",
    // a file it had already removed, for a file of the set (whether a share of its own or in a
    // pack).
    const disk = await mountSmallDisk(1);
    if (typeof disk === 'string') return ctx.skip(disk);
    try {
      const cli = await signedIn();
      const run = (args: string[]) => cli.run(['--server', serve.url, ...args]);
      const src = join(work, 'full-src');
      await mkdir(join(src, 'packed'), { recursive: true });
      await writeFile(join(src, 'big.bin'), randomBytes(3 * 1024 * 1024));
      const pushed = await run(['push', src, '--name', 'fullset']);
      expect(pushed.exitCode, pushed.stderr).toBe(0);
      const big = await run(['pull', 'fullset', join(disk.dir, 'a')]);
      expect(big.exitCode, big.stderr).toBe(1);
      expect(big.stderr.trim()).toBe(
        `fshare: no space left on the device: ${join(disk.dir, 'a', 'big.bin')}`,
      );
      await rm(join(src, 'big.bin'));
      for (let i = 0; i < 4; i++)
        await writeFile(join(src, 'packed', `s${i}.bin`), randomBytes(400_000));
      const repushed = await run(['push', src, '--name', 'fullset', '--delete']);
      expect(repushed.exitCode, repushed.stderr).toBe(0);
      await rm(join(disk.dir, 'a'), { recursive: true, force: true });
      const packed = await run(['pull', 'fullset', join(disk.dir, 'b')]);
      expect(packed.exitCode, packed.stderr).toBe(1);
      expect(packed.stderr.trim()).toMatch(
        new RegExp(
          `^fshare: no space left on the device: ${join(disk.dir, 'b', 'packed')}/s\\d\\.bin$`,
        ),
      );
    } finally {
      await disk.unmount();
    }
  });

  it('upload - names standard input, not its spool file', async () => {
    // Guards: an upload of stdin that failed said "… than /tmp/fshare-stdin-…/stdin …", a file
    // the user never named and the command had already removed.
    const cli = await createCli();
    const proxy = await startLyingProxy(serve.url);
    try {
      await signIn(cli, proxy.url);
      const res = await cli.run(['--server', proxy.url, 'upload', '-'], { input: 'piped bytes\n' });
      expect(res.exitCode, res.stderr).toBe(7);
      expect(res.stderr).toMatch(
        /^fshare: the server stored other bytes than standard input \(sha256 0{64}/,
      );
      expect(res.stderr).not.toContain('fshare-stdin-');
    } finally {
      await proxy.close();
    }
  });
});
