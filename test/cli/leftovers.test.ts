// What a failed or killed command leaves behind: nothing that later commands trust or keep
// forever, and nothing of the user's that the CLI silently ignores.
import { randomBytes } from 'node:crypto';
import { existsSync, readdirSync } from 'node:fs';
import { mkdir, readdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  BIN,
  cleanEnv,
  createCli,
  signIn,
  startServe,
  tempDir,
  type Cli,
  type Serve,
} from '../helpers/cli.js';
import { mountSmallDisk } from '../helpers/mount.js';

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

/** Runs `fshare upload -` with TMPDIR of its own, stdin a pipe the test writes and keeps open. */
function uploadStdin(cli: Cli, tmp: string, extra: string[] = []) {
  return execa('node', [BIN, '--server', serve.url, 'upload', '-', ...extra], {
    env: cleanEnv({ FSHARE_CONFIG_DIR: cli.configDir, FSHARE_KEYRING: 'off', TMPDIR: tmp }),
    extendEnv: false,
    stdin: 'pipe',
    reject: false,
    timeout: 60_000,
  });
}

async function until(what: string, test: () => Promise<boolean> | boolean): Promise<void> {
  const deadline = Date.now() + 20_000;
  while (!(await test())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((done) => setTimeout(done, 25));
  }
}

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
      await until('the spool file', () =>
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
    const child = execa(
      'node',
      [BIN, '--server', serve.url, 'upload', '-', '--chunk-size', '64k', '-p', '1'],
      {
        env: cleanEnv({ FSHARE_CONFIG_DIR: cli.configDir, FSHARE_KEYRING: 'off', TMPDIR: tmp }),
        extendEnv: false,
        inputFile: input,
        reject: false,
        timeout: 60_000,
      },
    );
    const records = join(cli.configDir, 'uploads');
    await until(
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
});

describe('pull temporary files', () => {
  it("a killed pull's .fshare-tmp-* files are removed by the next pull; a live pull's are neither removed nor counted by pull --delete", async () => {
    // Guards: a pull killed on the way left .fshare-tmp-* files in DIR that every later pull
    // kept for good, and pull --delete removed (and counted as the user's files) the temporary
    // files of another pull still running into the same DIR.
    const cli = await signedIn();
    const src = join(work, 'tmp-src');
    await mkdir(src, { recursive: true });
    const big = randomBytes(24 * 1024 * 1024);
    await writeFile(join(src, 'big.bin'), big);
    await writeFile(join(src, 'small.txt'), 'small\n');
    const pushed = await cli.run(['--server', serve.url, 'push', src, '--name', 'tmpset']);
    expect(pushed.exitCode, pushed.stderr).toBe(0);
    const dest = join(work, 'tmp-dest');
    await mkdir(dest, { recursive: true });
    const temps = () => readdirSync(dest).filter((n) => n.startsWith('.fshare-tmp-'));

    // A pull caught with its temporary file open, then stopped while another pull runs.
    const first = execa('node', [BIN, '--server', serve.url, 'pull', 'tmpset', dest, '-p', '1'], {
      env: cleanEnv({ FSHARE_CONFIG_DIR: cli.configDir, FSHARE_KEYRING: 'off' }),
      extendEnv: false,
      reject: false,
      timeout: 60_000,
    });
    await until('a temporary file of the first pull', () => temps().length > 0);
    first.kill('SIGSTOP');
    const live = temps();
    try {
      const second = await cli.run([
        '--server',
        serve.url,
        '--json',
        'pull',
        'tmpset',
        dest,
        '--delete',
      ]);
      expect(second.exitCode, second.stderr).toBe(0);
      expect((JSON.parse(second.stdout) as { deleted: { files: number } }).deleted.files).toBe(0);
      for (const name of live) expect(existsSync(join(dest, name)), name).toBe(true);
    } finally {
      first.kill('SIGKILL');
      await first;
    }
    expect(temps().length).toBeGreaterThan(0);

    // Killed: nothing will finish its files; the next pull removes them.
    const third = await cli.run(['--server', serve.url, 'pull', 'tmpset', dest]);
    expect(third.exitCode, third.stderr).toBe(0);
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
