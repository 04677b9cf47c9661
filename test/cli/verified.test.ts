// Transfers the client can prove (issue 10): the built binary against a real `fshare serve` and
// against a stand-in that answers as the reference server does (no size, no digest, no
// validators, zone-less times, multi-chunk uploads that never complete).
import { execFileSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { closeSync, createWriteStream, existsSync, openSync, readFileSync } from 'node:fs';
import {
  appendFile,
  link,
  lstat,
  readdir,
  readFile,
  rm,
  symlink,
  writeFile,
  open,
} from 'node:fs/promises';
import { once } from 'node:events';
import { createServer as createHttpServer } from 'node:http';
import { createServer, type AddressInfo } from 'node:net';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  BIN,
  cleanEnv,
  createCli,
  uploadRecordsOf,
  signIn,
  startServe,
  tempDir,
  type Cli,
  type Serve,
} from '../helpers/cli.js';
import { chunkCounter } from '../helpers/chunk-proxy.js';
import { mountSmallDisk } from '../helpers/mount.js';
import { startFaultProxy } from '../helpers/fault-proxy.js';
import { startStandIn, type StandIn } from '../helpers/standin.js';

const sha256 = (data: Buffer) => createHash('sha256').update(data).digest('hex');

interface Transfer {
  share_id: string;
  url: string;
  size: number;
  sha256: string | null;
  verified: boolean;
  resumed_bytes: number;
}

const recordsOf = (cli: Cli) => uploadRecordsOf<{ share_id: string; dzuuid: string }>(cli);

/** The first record that names its share (one is written before its share's create is answered). */
async function recordWithShare(cli: Cli) {
  return (await recordsOf(cli)).find((r) => typeof r.share_id === 'string');
}

describe('verified transfers against fshare serve', () => {
  let serve: Serve;
  let admin: Cli;
  let work: string;
  let token: string;

  beforeAll(async () => {
    serve = await startServe();
    admin = await createCli();
    work = await tempDir('verified');
    await signIn(admin, serve.url);
    token = (await admin.run(['token'])).stdout.trim();
  });

  afterAll(async () => {
    await serve?.stop();
    for (const dir of [admin?.configDir, work])
      if (dir) await rm(dir, { recursive: true, force: true });
  });

  /** `fshare upload` through `via` as a process of its own, to be stopped by a signal. */
  const uploadInBackground = (via: string, path: string, args: string[]) =>
    admin.start(['--server', via, 'upload', path, ...args], { env: { FSHARE_TOKEN: token } });

  const state = async (shareId: string, dzuuid: string) => {
    const res = await fetch(`${serve.url}/files/${shareId}/uploads/${dzuuid}`, {
      headers: { authorization: `Bearer ${token}` },
    });
    return {
      status: res.status,
      body: (await res.json()) as { received?: number[]; total?: number },
    };
  };

  /**
   * Waits (up to 30 s) until the upload record of a run in the background names its share and the
   * server holds `count` of its chunks; returns what was seen last.
   */
  const untilServerHolds = async (count: number) => {
    let record: { share_id: string; dzuuid: string } | undefined;
    let held: number[] = [];
    for (let i = 0; i < 600 && held.length < count; i++) {
      await sleep(50);
      record ??= await recordWithShare(admin);
      if (record) held = (await state(record.share_id, record.dzuuid)).body.received ?? [];
    }
    return { record, held };
  };

  // Both sizes: up to 4 MiB the client hashes on its main thread, above on the hashing thread.
  it.each([
    ['300 KB', 300_000],
    ['6 MiB', 6 * 1024 * 1024],
  ])(
    'get of %s damaged on the server exits 7 and keeps the bytes only as .part',
    async (label, size) => {
      const data = randomBytes(size);
      await writeFile(join(work, 'damaged.bin'), data);
      const [up] = await admin.json<Transfer[]>([
        'upload',
        join(work, 'damaged.bin'),
        '--chunk-size',
        '64k',
      ]);
      expect(up).toMatchObject({ verified: true, sha256: sha256(data), resumed_bytes: 0 });
      // One byte flipped in the stored content, behind the server's back.
      const blob = (await readdir(join(serve.dataDir, 'content'))).find((n) =>
        n.startsWith(up!.share_id),
      )!;
      const handle = await open(join(serve.dataDir, 'content', blob), 'r+');
      await handle.write(Buffer.from([data[1234]! ^ 0xff]), 0, 1, 1234);
      await handle.close();

      const out = join(work, `out-${label}`);
      const res = await admin.run(['get', up!.share_id, '-o', out]);
      expect(res.exitCode).toBe(7);
      expect(res.stderr.trim().split('\n')).toHaveLength(1);
      expect(res.stderr).toMatch(/sha256/);
      expect(existsSync(out)).toBe(false);
      expect(existsSync(`${out}.part`)).toBe(true);

      // Undamaged content is verified and says so.
      const [good] = await admin.json<Transfer[]>(['upload', join(work, 'damaged.bin')]);
      const ok = await admin.json<Transfer>([
        'get',
        good!.share_id,
        '-o',
        join(work, `good-${label}.bin`),
      ]);
      expect(ok).toMatchObject({ verified: true, sha256: sha256(data) });
      const verbose = await admin.run([
        'get',
        good!.share_id,
        '-o',
        join(work, `good2-${label}.bin`),
        '--verbose',
      ]);
      expect(verbose.stderr).toContain(`verified sha256 ${sha256(data)}`);
    },
  );

  // Property: a --continue that fails its sha256 says the way out. Found from outside: a .part
  // damaged after its download broke off failed every later --continue (exit 7, "they are kept
  // in NAME.part") without a word that a download without --continue starts afresh.
  it('a damaged NAME.part: --continue is exit 7 saying how to download it whole, and a plain get does', async () => {
    const disk = await mountSmallDisk(4);
    if (typeof disk === 'string') throw new Error(disk); // CI runs as root: a tmpfs always mounts
    try {
      const data = randomBytes(6 * 1024 * 1024);
      await writeFile(join(work, 'damaged-part.bin'), data);
      const [up] = await admin.json<Transfer[]>(['upload', join(work, 'damaged-part.bin')]);
      const out = join(disk.dir, 'damaged-part.bin');
      expect((await admin.run(['get', up!.share_id, '-o', out])).exitCode).toBe(1);
      const kept = (await readFile(`${out}.part`)).length;
      expect(kept).toBeGreaterThan(0);
      const part = await open(`${out}.part`, 'r+');
      await part.write(Buffer.from([0x55]), 0, 1, 0);
      await part.close();

      execFileSync('mount', ['-o', 'remount,size=32m', disk.dir]);
      const res = await admin.run(['get', up!.share_id, '-o', out, '--continue']);
      expect(res.exitCode).toBe(7);
      expect(res.stderr.trim().split('\n')).toEqual([
        expect.stringMatching(
          new RegExp(
            `^fshare: the downloaded bytes have sha256 [0-9a-f]{64}, not the server's ${sha256(data)}; they are kept in ${out}\\.part \\(the first ${kept} of them from an earlier run: without --continue it downloads whole again\\)$`,
          ),
        ),
      ]);
      expect(existsSync(out)).toBe(false);
      const done = await admin.json<Transfer>(['get', up!.share_id, '-o', out]);
      expect(done).toMatchObject({ verified: true, sha256: sha256(data), resumed_bytes: 0 });
      expect((await readFile(out)).equals(data)).toBe(true);
    } finally {
      await disk.unmount();
    }
  });

  // Property: a failed download leaves nothing it cannot use. Found from outside: a share
  // deleted while its download was being resumed in the same run (a cut connection) ended in
  // the server's 404, exit 4, with NAME.part and its record in the config directory left behind,
  // unsaid, though no download could ever finish them.
  it('a share deleted while its download resumes: exit 4, one line, no .part and no record left', async () => {
    const data = randomBytes(3 * 1024 * 1024);
    await writeFile(join(work, 'deleted-meanwhile.bin'), data);
    const [up] = await admin.json<Transfer[]>(['upload', join(work, 'deleted-meanwhile.bin')]);
    const id = up!.share_id;
    const proxy = startFaultProxy(serve.url, async (req) => {
      if (req.method !== 'GET' || !req.url?.endsWith(`/files/${id}/content`)) return 'pass';
      if (!req.headers.range) return { cutAfter: 1024 * 1024 };
      // The resume comes after the share was deleted.
      const removed = await admin.run(['rm', id]);
      expect(removed.exitCode, removed.stderr).toBe(0);
      return 'pass';
    });
    // The records of unfinished downloads (one file each): none is left for this one.
    const records = async () =>
      existsSync(join(admin.configDir, 'partials'))
        ? (await readdir(join(admin.configDir, 'partials'))).sort()
        : [];
    const recordsBefore = await records();
    try {
      const out = join(work, 'deleted-meanwhile-out.bin');
      const res = await admin.run(['--server', await proxy.url, 'get', id, '-o', out], {
        env: { FSHARE_TOKEN: token },
      });
      expect(res.exitCode).toBe(4);
      expect(res.stderr.trim().split('\n')).toEqual(['fshare: No share with this id (HTTP 404)']);
      // It was resumed: the second request asked for the rest.
      const gets = proxy.seen.filter((r) => r.url.endsWith('/content'));
      expect(gets.map((r) => r.range)).toEqual([undefined, expect.stringMatching(/^bytes=\d+-/)]);
      expect(existsSync(out)).toBe(false);
      expect(existsSync(`${out}.part`)).toBe(false);
      expect(await records()).toEqual(recordsBefore);
    } finally {
      await proxy.close();
    }
  });

  // Property: a download is checked against the share's record, or it fails: it is never saved
  // unchecked because the record could not be read. Found from outside: with GET /files/<id>
  // answering 503 (or 401, or a reset), the bytes were saved, exit 0, "the server gives no
  // sha256". Once the record can be read, --continue checks what was kept.
  it('a share whose record cannot be read: the download fails, nothing saved under its name; then it is verified', async () => {
    const data = randomBytes(3 * 1024 * 1024);
    await writeFile(join(work, 'no-record.bin'), data);
    const [up] = await admin.json<Transfer[]>(['upload', join(work, 'no-record.bin')]);
    const id = up!.share_id;
    for (const fault of ['http503', 'drop'] as const) {
      const proxy = startFaultProxy(serve.url, (req) =>
        req.method === 'GET' && req.url === `/files/${id}` ? fault : 'pass',
      );
      try {
        const out = join(work, `no-record-${fault}.bin`);
        const res = await admin.run(['--server', await proxy.url, 'get', id, '-o', out, '--json'], {
          env: { FSHARE_TOKEN: token },
        });
        expect(res.exitCode, res.stderr).toBe(fault === 'drop' ? 6 : 1);
        const lines = res.stderr.trim().split('\n');
        expect(lines, res.stderr).toHaveLength(1);
        expect(lines[0]).toMatch(
          /^fshare: the share's size and sha256, which the download is checked against, could not be read: /,
        );
        expect(res.stdout).toBe('');
        expect(existsSync(out)).toBe(false);
        const again = await admin.json<Transfer>(['get', id, '-o', out, '--continue']);
        expect(again).toMatchObject({ verified: true, sha256: sha256(data) });
        expect((await readFile(out)).equals(data)).toBe(true);
      } finally {
        await proxy.close();
      }
    }
  });

  // Property: every sha256 the server states is checked: the answer's Repr-Digest and the
  // share's record. A record that names other bytes than the answer (a server that contradicts
  // itself, or a share replaced while it downloaded) is exit 7, the bytes kept only as .part.
  it("a share record whose sha256 is not the answer's Repr-Digest: exit 7, nothing saved under its name", async () => {
    const data = randomBytes(200_000);
    await writeFile(join(work, 'two-digests.bin'), data);
    const [up] = await admin.json<Transfer[]>(['upload', join(work, 'two-digests.bin')]);
    const id = up!.share_id;
    const other = 'f'.repeat(64);
    // Passes everything through, with the share record's sha256 replaced.
    const liar = createHttpServer((req, res) => {
      void (async () => {
        const upstream = await fetch(`${serve.url}${req.url}`, {
          method: req.method,
          headers: { authorization: req.headers.authorization ?? '' },
        });
        const body = Buffer.from(await upstream.arrayBuffer());
        const headers = Object.fromEntries(
          [...upstream.headers].filter(([k]) => k !== 'content-length' && k !== 'content-encoding'),
        );
        if (req.url === `/files/${id}`) {
          const record = JSON.parse(body.toString()) as { sha256: string };
          res.writeHead(upstream.status, headers);
          res.end(JSON.stringify({ ...record, sha256: other }));
          return;
        }
        res.writeHead(upstream.status, headers);
        res.end(body);
      })();
    });
    await new Promise<void>((done) => liar.listen(0, '127.0.0.1', done));
    try {
      const via = `http://127.0.0.1:${(liar.address() as AddressInfo).port}`;
      const out = join(work, 'two-digests-out.bin');
      const res = await admin.run(['--server', via, 'get', id, '-o', out], {
        env: { FSHARE_TOKEN: token },
      });
      expect(res.exitCode, res.stderr).toBe(7);
      expect(res.stderr.trim().split('\n')).toEqual([
        `fshare: the downloaded bytes have sha256 ${sha256(data)}, not the server's ${other} (the answer and the record of the share disagree: was it replaced during the download?); they are kept in ${out}.part`,
      ]);
      expect(existsSync(out)).toBe(false);
    } finally {
      liar.closeAllConnections();
      await new Promise<void>((done) => liar.close(() => done()));
    }
  });

  // Property: a download that runs out of disk is a failure, never a short file under the
  // target name: one line naming the .part, exit 1, and once there is room `--continue` finishes
  // it from the bytes already written, verified.
  it('get onto a full disk exits 1 naming the .part, and --continue finishes it verified', async () => {
    const disk = await mountSmallDisk(8);
    if (typeof disk === 'string') throw new Error(disk); // CI runs as root: a tmpfs always mounts
    try {
      const data = randomBytes(12 * 1024 * 1024);
      await writeFile(join(work, 'big.bin'), data);
      const [up] = await admin.json<Transfer[]>(['upload', join(work, 'big.bin')]);
      const out = join(disk.dir, 'big.bin');
      const res = await admin.run(['get', up!.share_id, '-o', out]);
      expect(res.exitCode).toBe(1);
      expect(res.stderr.trim().split('\n')).toEqual([
        `fshare: no space left on the device: ${out}.part`,
      ]);
      expect(existsSync(out)).toBe(false);
      const kept = (await readFile(`${out}.part`)).length;
      expect(kept).toBeGreaterThan(0);
      expect(kept).toBeLessThan(data.length);
      // What was written is the start of the content, byte for byte.
      expect((await readFile(`${out}.part`)).equals(data.subarray(0, kept))).toBe(true);

      execFileSync('mount', ['-o', 'remount,size=32m', disk.dir]);
      const done = await admin.json<Transfer>(['get', up!.share_id, '-o', out, '--continue']);
      expect(done).toMatchObject({ verified: true, sha256: sha256(data), resumed_bytes: kept });
      expect((await readFile(out)).equals(data)).toBe(true);
      expect(existsSync(`${out}.part`)).toBe(false);
    } finally {
      await disk.unmount();
    }
  });

  // Property: `upload -` keeps standard input in TMPDIR before it sends it; when that is full the
  // command fails in one line that says where and what to do, and nothing reaches the server.
  // It said only "fshare: no space left on the device", naming neither the place nor TMPDIR.
  it('upload of standard input whose TMPDIR is full: exit 1, one line naming TMPDIR, no share, nothing left there', async () => {
    const disk = await mountSmallDisk(1);
    if (typeof disk === 'string') throw new Error(disk); // CI runs as root: a tmpfs always mounts
    try {
      const before = await admin.json(['ls', '--all']);
      const res = await admin.run(['upload', '-', '--name', 'stdin-full.bin'], {
        input: 'x'.repeat(3 * 1024 * 1024),
        env: { TMPDIR: disk.dir },
      });
      expect(res.exitCode).toBe(1);
      expect(res.stderr.trim().split('\n')).toEqual([
        `fshare: standard input could not be kept in ${disk.dir} to upload it (no space left on the device); set TMPDIR to a directory with room for all of it`,
      ]);
      expect(await admin.json(['ls', '--all'])).toEqual(before);
      expect(await readdir(disk.dir)).toEqual([]);
    } finally {
      await disk.unmount();
    }
  });

  // Property: output that does not fit is a failure, never a success with the output cut short.
  // Node writes standard output redirected to a file with one write() per piece and ignores a
  // short count, so the free space ending inside the last piece used to lose its tail with exit 0
  // (and `get -o -` into a full disk waited forever for a 'drain', exit 13 without a word).
  it('standard output onto a full disk: exit 1 and one line, for a download and for --json', async () => {
    const disk = await mountSmallDisk(1);
    if (typeof disk === 'string') throw new Error(disk); // CI runs as root: a tmpfs always mounts
    try {
      // 96 KiB left: a 160 KiB share is written in one piece that does not fit.
      await writeFile(join(disk.dir, 'filler'), Buffer.alloc(1024 * 1024 - 96 * 1024));
      const data = randomBytes(160 * 1024);
      await writeFile(join(work, 'out.bin'), data);
      const [up] = await admin.json<Transfer[]>(['upload', join(work, 'out.bin')]);
      const target = join(disk.dir, 'stdout.bin');
      const fd = openSync(target, 'w');
      const res = await admin
        .run(['get', up!.share_id, '-o', '-'], { stdoutFd: fd })
        .finally(() => closeSync(fd));
      expect(res.exitCode).toBe(1);
      expect(res.stderr.trim().split('\n')).toEqual([
        'fshare: cannot write to standard output: no space left on the device',
      ]);
      const kept = await readFile(target);
      expect(kept.length).toBeLessThan(data.length);
      expect(kept.equals(data.subarray(0, kept.length))).toBe(true);

      // 4 KiB left and a listing longer than that, written in one piece: it used to be cut to
      // 4 KiB with exit 0.
      await rm(target);
      await writeFile(join(disk.dir, 'filler2'), Buffer.alloc(92 * 1024));
      const files = Array.from({ length: 20 }, (_, i) => join(work, `listed-${i}.txt`));
      await Promise.all(files.map((f) => writeFile(f, 'x')));
      expect((await admin.run(['upload', ...files])).exitCode).toBe(0);
      const listing = await admin.run(['ls', '--json', '--per-page', '100']);
      expect(listing.stdout.length).toBeGreaterThan(8 * 1024);
      const fd2 = openSync(join(disk.dir, 'list.json'), 'w');
      const list = await admin
        .run(['ls', '--json', '--per-page', '100'], { stdoutFd: fd2 })
        .finally(() => closeSync(fd2));
      expect(list.exitCode).toBe(1);
      expect(list.stderr.trim().split('\n')).toEqual([
        'fshare: cannot write to standard output: no space left on the device',
      ]);
    } finally {
      await disk.unmount();
    }
  });

  it('a client killed mid-upload resumes by sending only the chunks the server lacks', async () => {
    const path = join(work, 'big.bin');
    const hash = createHash('sha256');
    const stream = createWriteStream(path);
    for (let i = 0; i < 200; i++) {
      const piece = randomBytes(1024 * 1024);
      hash.update(piece);
      if (!stream.write(piece))
        await new Promise<void>((done) => stream.once('drain', () => done()));
    }
    await new Promise<void>((done) => stream.end(done));
    const digest = hash.digest('hex');
    const proxy = chunkCounter(serve.url);
    const via = await proxy.start();
    proxy.state.delayMs = 100; // slow enough to stop it in the middle
    try {
      const child = uploadInBackground(via, path, ['--chunk-size', '8m', '--parallel', '2']);
      const { record, held } = await untilServerHolds(4);
      child.kill('SIGKILL');
      await child;
      expect(record).toBeDefined();
      // A chunk the proxy had whole when the client died still reaches the server after its
      // delay: what the server holds is read once those held-back requests are over.
      await sleep(500);
      const before = (await state(record!.share_id, record!.dzuuid)).body;
      expect(before.total).toBe(25);
      const kept = before.received!;
      expect(kept.length).toBeGreaterThanOrEqual(4);
      expect(kept.length).toBeLessThan(25);

      proxy.state.chunks = 0;
      proxy.state.statuses = [];
      proxy.state.chunkBytes = 0;
      proxy.state.delayMs = 0;
      const rerun = await admin.run(
        ['--server', via, '--json', 'upload', path, '--chunk-size', '8m'],
        {
          env: { FSHARE_TOKEN: token },
        },
      );
      expect(rerun.exitCode, rerun.stderr).toBe(0);
      expect(rerun.stderr).toMatch(/resuming the upload/);
      const [done] = JSON.parse(rerun.stdout) as Transfer[];
      expect(done).toMatchObject({ share_id: record!.share_id, sha256: digest, verified: true });
      const keptBytes = kept.reduce(
        (n, i) => n + Math.min(200 * 2 ** 20 - i * 8 * 2 ** 20, 8 * 2 ** 20),
        0,
      );
      expect(done!.resumed_bytes).toBe(keptBytes);
      // Only the missing chunks went over the wire again.
      expect(proxy.state.chunks).toBe(25 - kept.length);
      expect(proxy.state.statuses.filter((s) => s === 200)).toHaveLength(24 - kept.length);
      expect(proxy.state.chunkBytes).toBeLessThan(200 * 2 ** 20 - keptBytes + 25 * 4096);
      const info = await admin.json<{ sha256: string; size: number }>(['info', record!.share_id]);
      expect(info).toMatchObject({ sha256: digest, size: 200 * 2 ** 20 });
      expect(await recordsOf(admin)).toEqual([]);
      // --restart would have started afresh: checked by the record being gone and a new share.
    } finally {
      await proxy.close();
      await rm(path, { force: true });
    }
  });

  // Property: an upload whose process was killed does not run, reaped or not. Found from
  // outside: killed and not yet reaped (a zombie, for good in a container whose first process
  // reaps nothing), it counted as running: the same command again made a second share, silently,
  // and `uploads clean` left the first alone ("fshare process N is still running it").
  it('an upload killed and never reaped (a zombie) is resumed by the same command, not made again', async () => {
    const data = randomBytes(24 * 1024 * 1024);
    const path = join(work, 'zombie.bin');
    await writeFile(path, data);
    const proxy = chunkCounter(serve.url);
    const via = await proxy.start();
    proxy.state.delayMs = 100;
    // sh starts the upload, then becomes `sleep`, which never reaps it.
    const parent = execa(
      'sh',
      ['-c', 'node "$0" "$@" & echo $!; exec sleep 120', BIN, '--server', via, 'upload', path],
      {
        env: cleanEnv({
          FSHARE_CONFIG_DIR: admin.configDir,
          FSHARE_KEYRING: 'off',
          FSHARE_TOKEN: token,
        }),
        extendEnv: false,
        reject: false,
      },
    );
    try {
      const pid = await new Promise<number>((resolve) =>
        parent.stdout!.once('data', (d: Buffer) => resolve(Number(String(d).trim()))),
      );
      const { record } = await untilServerHolds(1);
      expect(record).toBeDefined();
      process.kill(pid, 'SIGKILL');
      for (let i = 0; i < 100 && !readFileSync(`/proc/${pid}/stat`, 'utf8').includes(') Z '); i++)
        await sleep(20);
      expect(readFileSync(`/proc/${pid}/stat`, 'utf8')).toContain(') Z ');
      await sleep(500); // chunks the proxy held back reach the server

      proxy.state.delayMs = 0;
      const rerun = await admin.run(['--server', via, '--json', 'upload', path], {
        env: { FSHARE_TOKEN: token },
      });
      expect(rerun.exitCode, rerun.stderr).toBe(0);
      expect(rerun.stderr).toMatch(/resuming the upload/);
      const [done] = JSON.parse(rerun.stdout) as Transfer[];
      expect(done).toMatchObject({
        share_id: record!.share_id,
        sha256: sha256(data),
        verified: true,
      });
      expect(await recordsOf(admin)).toEqual([]);
    } finally {
      parent.kill('SIGKILL');
      await parent;
      await proxy.close();
      await rm(path, { force: true });
    }
  });

  // Property: a resume sends only what the file still holds: an edit between two runs, even one
  // whose mtime was put back, starts the upload over. Found from outside: the run after such an
  // edit resumed, and the server refused the whole (exit 7, its share deleted).
  it('a file edited between runs, its mtime put back: the next run starts over, verified', async () => {
    const path = join(work, 'edited-between.bin');
    const data = randomBytes(24 * 1024 * 1024);
    await writeFile(path, data);
    // Its times, to the nanosecond, kept on a file beside it (a Date holds milliseconds only).
    const stamp = `${path}.stamp`;
    execFileSync('touch', ['-r', path, stamp]);
    const { mtimeMs } = await lstat(path);
    const proxy = chunkCounter(serve.url);
    const via = await proxy.start();
    proxy.state.delayMs = 100;
    try {
      const child = uploadInBackground(via, path, ['--chunk-size', '1m', '--parallel', '2']);
      const { record, held } = await untilServerHolds(2);
      child.kill('SIGKILL');
      await child;
      expect(held.length).toBeGreaterThanOrEqual(2);
      await sleep(500); // chunks the proxy held back reach the server
      // Three bytes of the first chunk (which the server holds) change; the mtime is put back.
      const handle = await open(path, 'r+');
      await handle.write(Buffer.from('new'), 0, 3, 100);
      await handle.close();
      data.write('new', 100);
      execFileSync('touch', ['-r', stamp, path]);
      expect((await lstat(path)).mtimeMs).toBe(mtimeMs);

      proxy.state.delayMs = 0;
      const rerun = await admin.run(
        ['--server', via, '--json', 'upload', path, '--chunk-size', '1m'],
        {
          env: { FSHARE_TOKEN: token },
        },
      );
      expect(rerun.exitCode, rerun.stderr).toBe(0);
      expect(rerun.stderr).toContain(
        `${path} changed since the earlier upload began; starting over`,
      );
      const [done] = JSON.parse(rerun.stdout) as Transfer[];
      expect(done).toMatchObject({ sha256: sha256(data), verified: true, resumed_bytes: 0 });
      expect(await recordsOf(admin)).toEqual([]);
    } finally {
      await proxy.close();
      await rm(path, { force: true });
      await rm(stamp, { force: true });
    }
  });

  it('two uploads of the same file at once, from one config directory: each fills its own share', async () => {
    // A CI job running two steps at once: the second must not take over (and race) the first's
    // upload just because its record is there; it makes a share of its own.
    const path = join(work, 'twice.bin');
    const data = randomBytes(6 * 1024 * 1024);
    await writeFile(path, data);
    const proxy = chunkCounter(serve.url);
    const via = await proxy.start();
    proxy.state.delayMs = 150; // the first is still running when the second starts
    try {
      const first = uploadInBackground(via, path, [
        '--json',
        '--chunk-size',
        '512k',
        '--parallel',
        '1',
      ]);
      let record: { share_id: string } | undefined;
      for (let i = 0; i < 200 && !record; i++) {
        await sleep(50);
        record = await recordWithShare(admin);
      }
      expect(record).toBeDefined();
      const second = await admin.run(
        ['--server', via, '--json', 'upload', path, '--chunk-size', '512k'],
        {
          env: { FSHARE_TOKEN: token },
        },
      );
      const done = await first;
      expect(done.exitCode, done.stderr).toBe(0);
      expect(second.exitCode, second.stderr).toBe(0);
      expect(second.stderr).not.toMatch(/resuming/);
      const [a] = JSON.parse(done.stdout) as Transfer[];
      const [b] = JSON.parse(second.stdout) as Transfer[];
      expect(a!.share_id).toBe(record!.share_id);
      expect(b!.share_id).not.toBe(a!.share_id);
      for (const t of [a!, b!]) expect(t).toMatchObject({ sha256: sha256(data), verified: true });
      expect(await recordsOf(admin)).toEqual([]);
    } finally {
      await proxy.close();
      await rm(path, { force: true });
    }
  });

  it('Ctrl-C stops an upload with exit 130, keeps what was sent, and says how to resume', async () => {
    const path = join(work, 'ctrl-c.bin');
    await writeFile(path, randomBytes(8 * 1024 * 1024));
    const proxy = chunkCounter(serve.url);
    const via = await proxy.start();
    proxy.state.delayMs = 200;
    try {
      const child = uploadInBackground(via, path, ['--chunk-size', '512k', '--parallel', '1']);
      let record: { share_id: string; dzuuid: string } | undefined;
      for (let i = 0; i < 400; i++) {
        await sleep(25);
        record ??= await recordWithShare(admin);
        if (
          record &&
          ((await state(record.share_id, record.dzuuid)).body.received ?? []).length > 0
        )
          break;
      }
      child.kill('SIGINT');
      const res = await child;
      expect(res.exitCode).toBe(130);
      expect(String(res.stderr)).toContain(`to resume: fshare upload ${path}`);
      expect((await recordsOf(admin)).map((r) => r.share_id)).toContain(record!.share_id);
      // and it resumes: the same share, complete
      proxy.state.delayMs = 0;
      const again = await admin.run(
        ['--server', via, '--json', 'upload', path, '--chunk-size', '512k'],
        {
          env: { FSHARE_TOKEN: token },
        },
      );
      expect(again.exitCode, again.stderr).toBe(0);
      const [done] = JSON.parse(again.stdout) as Transfer[];
      expect(done!.share_id).toBe(record!.share_id);
      expect(done!.resumed_bytes).toBeGreaterThan(0);
      expect(done!.verified).toBe(true);
    } finally {
      await proxy.close();
    }
  });

  it('a file that shrinks while it uploads: one line saying it changed, exit 1, no share left', async () => {
    const path = join(work, 'shrinks.bin');
    await writeFile(path, randomBytes(4 * 1024 * 1024));
    const proxy = chunkCounter(serve.url);
    const via = await proxy.start();
    proxy.state.delayMs = 150;
    try {
      const before = await admin.json<{ shares: unknown[] }>(['ls', '--all']);
      const child = uploadInBackground(via, path, ['--chunk-size', '512k', '--parallel', '1']);
      for (let i = 0; i < 400 && proxy.state.statuses.length === 0; i++) await sleep(10);
      const handle = await open(path, 'r+');
      await handle.truncate(1024 * 1024 + 100); // chunks past here can no longer be read
      await handle.close();
      const res = await child;
      expect(res.exitCode).toBe(1);
      const lines = String(res.stderr).trim().split('\n');
      expect(lines).toHaveLength(1);
      expect(lines[0]).toMatch(/changed while it was uploading; run the command again/);
      expect(lines[0]).toContain(path);
      expect(String(res.stderr)).not.toMatch(/blob|ERR_|\n\s+at /);
      const after = await admin.json<{ shares: unknown[] }>(['ls', '--all']);
      expect(after.shares).toHaveLength(before.shares.length);
    } finally {
      await proxy.close();
    }
  });

  /** Fills the small disk at `dir` to its last byte. */
  const fillUp = async (dir: string) => {
    await writeFile(join(dir, 'filler'), Buffer.alloc(1024 * 1024 - 8 * 1024)).catch(
      () => undefined,
    );
    while (
      await appendFile(join(dir, 'filler'), Buffer.alloc(512)).then(
        () => true,
        () => false,
      )
    );
  };

  // Property: the resume record (and a download's validator) is a convenience. Its disk being
  // full must neither fail the transfer nor leave an empty share behind that no record names
  // (an upload did both: exit 1 with a pathless "no space left on the device", after the share
  // was created; a download stopped before its first byte).
  it('a full disk under the config directory: an upload and a download go on, verified, and say they cannot resume', async () => {
    const disk = await mountSmallDisk(1);
    if (typeof disk === 'string') throw new Error(disk); // CI runs as root: a tmpfs always mounts
    try {
      const config = join(disk.dir, 'config');
      const cli = await createCli(config);
      await fillUp(disk.dir);
      const data = randomBytes(3 * 64 * 1024 + 5);
      await writeFile(join(work, 'home-full.bin'), data);
      const res = await cli.run(
        [
          '--server',
          serve.url,
          'upload',
          join(work, 'home-full.bin'),
          '--chunk-size',
          '64k',
          '--json',
        ],
        { env: { FSHARE_TOKEN: token } },
      );
      expect(res.exitCode, res.stderr).toBe(0);
      expect(res.stderr.trim().split('\n')).toEqual([
        expect.stringMatching(
          new RegExp(
            `^fshare: cannot keep a record to resume this upload \\(no space left on the device: ${config}/uploads/[0-9a-f]+\\.json\\); it goes on, but could not be resumed if interrupted$`,
          ),
        ),
      ]);
      const [up] = JSON.parse(res.stdout) as Transfer[];
      expect(up).toMatchObject({ verified: true, sha256: sha256(data), size: data.length });
      expect((await admin.runBinary(['get', up!.share_id, '-o', '-'])).stdout.equals(data)).toBe(
        true,
      );
      // No temporary record left on the full disk.
      expect(await readdir(join(config, 'uploads'))).toEqual([]);

      // The same for a download: what --continue needs cannot be kept; the download goes on.
      const out = join(work, 'home-full.out');
      const got = await cli.run(['--server', serve.url, 'get', up!.share_id, '-o', out], {
        env: { FSHARE_TOKEN: token },
      });
      expect(got.exitCode, got.stderr).toBe(0);
      const lines = got.stderr.trim().split('\n');
      expect(lines).toHaveLength(1);
      expect(lines[0]).toMatch(
        /^fshare: cannot keep what --continue needs \(no space left on the device: .+\/partials\/[0-9a-f]{32}\.json\); the download goes on, but could not be continued if interrupted$/,
      );
      expect(lines[0]).toContain(`${config}/partials/`);
      expect((await readFile(out)).equals(data)).toBe(true);
    } finally {
      await disk.unmount();
    }
  });

  // Found from outside: the same full disk, and the upload then broke off (the server went
  // away). The line said "to resume: fshare upload FILE; to give up: fshare uploads clean", but
  // no record named the share it had created: running it again made a second share, and
  // `uploads clean` knew nothing of the first, which no line named. Property: an upload that
  // leaves a share it cannot resume names that share and how to remove it, and offers no resume.
  it('a full disk under the config directory, then a broken upload: the share left is named, no resume offered', async () => {
    const disk = await mountSmallDisk(1);
    if (typeof disk === 'string') throw new Error(disk);
    const proxy = startFaultProxy(serve.url, (req) =>
      req.method === 'POST' && req.url?.endsWith('/content') ? 'drop' : 'pass',
    );
    try {
      const config = join(disk.dir, 'config');
      const cli = await createCli(config);
      await fillUp(disk.dir);
      await writeFile(join(work, 'home-full-broken.bin'), randomBytes(100_000));
      const res = await cli.run(
        ['--server', await proxy.url, 'upload', join(work, 'home-full-broken.bin')],
        { env: { FSHARE_TOKEN: token } },
      );
      expect(res.exitCode).toBe(6);
      const lines = res.stderr.trim().split('\n');
      expect(lines).toHaveLength(2);
      expect(lines[0]).toMatch(/^fshare: cannot keep a record to resume this upload/);
      const left =
        /the share it had created, ([0-9a-f-]{36}), is left as it is, and no record of it could be kept to resume the upload; fshare rm \1 removes it\)$/.exec(
          lines[1]!,
        );
      expect(left, lines[1]).not.toBeNull();
      expect(res.stderr).not.toMatch(/to resume:|uploads clean/);
      const share = await admin.json<{ share_id: string; initialized: boolean }>([
        'info',
        left![1]!,
      ]);
      expect(share).toMatchObject({ share_id: left![1], initialized: false });
    } finally {
      await proxy.close();
      await disk.unmount();
    }
  });

  // Property: a download writes only the file it names. A NAME.part planted as a symbolic link
  // (in /tmp, in a workspace other jobs can write) led the bytes into the file it pointed at,
  // which was then overwritten, with exit 0.
  it('a NAME.part that is a symbolic link is never written through, with or without --continue', async () => {
    const data = randomBytes(70_000);
    await writeFile(join(work, 'linked.bin'), data);
    const [up] = await admin.json<Transfer[]>(['upload', join(work, 'linked.bin')]);
    const dir = await tempDir('planted');
    const victim = join(work, 'victim.txt');
    await writeFile(victim, 'precious');
    await symlink(victim, join(dir, 'linked.bin.part'));
    for (const extra of [[], ['--continue']]) {
      const res = await admin.run(['get', up!.share_id, ...extra], { cwd: dir });
      expect(res.exitCode, res.stderr).toBe(1);
      expect(res.stderr.trim().split('\n')).toEqual([
        'fshare: a symbolic link, which fshare never writes through: linked.bin.part',
      ]);
      expect(await readFile(victim, 'utf8')).toBe('precious');
      expect(existsSync(join(dir, 'linked.bin'))).toBe(false);
    }
    // With the link gone, the same command works.
    await rm(join(dir, 'linked.bin.part'));
    expect((await admin.run(['get', up!.share_id], { cwd: dir })).exitCode).toBe(0);
    expect((await readFile(join(dir, 'linked.bin'))).equals(data)).toBe(true);
    await rm(dir, { recursive: true, force: true });
  });

  // Property: a download that starts from byte 0 leaves exactly the share's bytes. A `.part` is
  // cut to zero only when it holds bytes (an empty one is not, since truncating a file to 0 on
  // ext4 makes its close allocate and flush it); a longer leftover must still never leave its tail.
  it('a download from byte 0 over a longer leftover NAME.part leaves exactly the share', async () => {
    const data = randomBytes(50_000);
    await writeFile(join(work, 'shorter.bin'), data);
    const [up] = await admin.json<Transfer[]>(['upload', join(work, 'shorter.bin')]);
    const dir = await tempDir('leftover-part');
    await writeFile(join(dir, 'shorter.bin.part'), randomBytes(200_000));
    const res = await admin.run(['get', up!.share_id], { cwd: dir });
    expect(res.exitCode, res.stderr).toBe(0);
    expect((await readFile(join(dir, 'shorter.bin'))).equals(data)).toBe(true);
    expect(existsSync(join(dir, 'shorter.bin.part'))).toBe(false);
    await rm(dir, { recursive: true, force: true });
  });

  // Property: -o names a place to write, and a device or a FIFO stays one. Found from outside:
  // `get -o /dev/null` (run as root) wrote /dev/null.part beside it and renamed it over
  // /dev/null, which became a regular file holding the share; `-o FIFO` replaced the FIFO (its
  // reader got nothing) and `-o /dev/stdout` failed to make a .part, or replaced the link.
  it('get -o a FIFO or /dev/stdout writes the bytes into it, verified, and leaves it as it was', async () => {
    const data = randomBytes(300_000);
    await writeFile(join(work, 'streamed.bin'), data);
    const [up] = await admin.json<Transfer[]>(['upload', join(work, 'streamed.bin')]);
    const dir = await tempDir('fifo');
    const fifo = join(dir, 'pipe');
    execFileSync('mkfifo', [fifo]);
    const reader = execa('cat', [fifo], {
      encoding: 'buffer',
      stripFinalNewline: false, // bytes, not lines
      reject: false,
      timeout: 30_000,
    });
    try {
      const res = await admin.run(['get', up!.share_id, '-o', fifo]);
      expect(res.exitCode, res.stderr).toBe(0);
      expect((await lstat(fifo)).isFIFO()).toBe(true);
      expect(await readdir(dir)).toEqual(['pipe']);
      const got = Buffer.from((await reader).stdout as unknown as Uint8Array);
      expect(sha256(got)).toBe(sha256(data));
    } finally {
      reader.kill();
      await rm(dir, { recursive: true, force: true });
    }
    // Standard output by another name (as /dev/stdout is): the bytes and nothing else.
    const out = await admin.runBinary(['get', up!.share_id, '-o', '/proc/self/fd/1']);
    expect(out.exitCode, out.stderr).toBe(0);
    expect(sha256(out.stdout)).toBe(sha256(data));
    // A FIFO nobody reads yet: the download waits for a reader, and Ctrl-C still ends it (an
    // open() blocked in a thread would have kept the process alive).
    const alone = await tempDir('fifo-alone');
    const lonely = join(alone, 'pipe');
    execFileSync('mkfifo', [lonely]);
    const child = admin.start(['--server', serve.url, 'get', up!.share_id, '-o', lonely], {
      timeout: 20_000,
    });
    await sleep(1500);
    child.kill('SIGINT');
    const stopped = await child;
    expect(stopped.exitCode, String(stopped.stderr)).toBe(130);
    expect((await lstat(lonely)).isFIFO()).toBe(true);
    // A socket cannot be opened to write into: one line naming it, and it stays a socket.
    const sock = join(alone, 'sock');
    const listener = createServer().listen(sock);
    await once(listener, 'listening');
    try {
      const res = await admin.run(['get', up!.share_id, '-o', sock]);
      expect(res.exitCode).toBe(1);
      expect(res.stderr.trim()).toBe(`fshare: no such device or address: ${sock}`);
      expect((await lstat(sock)).isSocket()).toBe(true);
    } finally {
      listener.close();
    }
    await rm(alone, { recursive: true, force: true });
  });

  // Property: a download into a device that refuses its bytes fails with one line and exit 1.
  // Found from outside: `get -o /dev/full` of a share small enough to go in one write died with
  // a Node stack trace (the write's failure came after the last write was handed over, as an
  // 'error' event nobody listened to); a larger share gave the line.
  it('get -o /dev/full: exit 1 and one line naming it, small share or large, with or without --json', async () => {
    const small = join(work, 'small-full.txt');
    const large = join(work, 'large-full.bin');
    await writeFile(small, 'six b\n');
    await writeFile(large, randomBytes(3_000_000));
    const ups = await admin.json<Transfer[]>(['upload', small, large]);
    for (const up of ups)
      for (const json of [[], ['--json']]) {
        const res = await admin.run(['get', up.share_id, '-o', '/dev/full', ...json]);
        expect(res.exitCode, res.stderr).toBe(1);
        expect(res.stderr.trim().split('\n')).toEqual([
          'fshare: no space left on the device: /dev/full',
        ]);
        expect(res.stdout).toBe('');
      }
    // A path that exists but whose folder makes no files: the file that could not be made is
    // named, not the existing one ("no such file or directory: /proc/version" was untrue).
    const proc = await admin.run(['get', ups[0]!.share_id, '-o', '/proc/version']);
    expect(proc.exitCode).toBe(1);
    expect(proc.stderr.trim()).toBe('fshare: no such file or directory: /proc/version.part');
  });

  // Found from outside: a NAME.part planted as a hard link to another file was truncated and
  // written in place, so the other file got the download's bytes, with exit 0.
  it('a NAME.part that is a hard link is never written through, with or without --continue', async () => {
    const data = randomBytes(70_000);
    await writeFile(join(work, 'hard.bin'), data);
    const [up] = await admin.json<Transfer[]>(['upload', join(work, 'hard.bin')]);
    const dir = await tempDir('hard');
    const victim = join(dir, 'victim.txt');
    await writeFile(victim, 'precious');
    await link(victim, join(dir, 'hard.bin.part'));
    for (const extra of [[], ['--continue']]) {
      const res = await admin.run(['get', up!.share_id, ...extra], { cwd: dir });
      expect(res.exitCode, res.stderr).toBe(1);
      expect(res.stderr.trim().split('\n')).toEqual([
        'fshare: a file with other names (a hard link), which fshare never writes through: hard.bin.part',
      ]);
      expect(await readFile(victim, 'utf8')).toBe('precious');
      expect(existsSync(join(dir, 'hard.bin'))).toBe(false);
    }
    await rm(join(dir, 'hard.bin.part'));
    expect((await admin.run(['get', up!.share_id], { cwd: dir })).exitCode).toBe(0);
    expect((await readFile(join(dir, 'hard.bin'))).equals(data)).toBe(true);
    await rm(dir, { recursive: true, force: true });
  });

  it('an upload refused for good (413 over quota) leaves no share and no record', async () => {
    const add = await admin.run(
      ['users', 'add', 'quinn', '--password-stdin', '--perms', 'CREATE,READ,LIST,DELETE'],
      {
        input: 'quinn-password\n',
      },
    );
    expect(add.exitCode, add.stderr).toBe(0);
    expect((await admin.run(['users', 'quota', 'quinn', '100k'])).exitCode).toBe(0);
    const quinn = await createCli();
    await quinn.run(['--server', serve.url, 'login', '-u', 'quinn', '--password-stdin'], {
      input: 'quinn-password\n',
    });
    await writeFile(join(work, 'large.bin'), randomBytes(300_000));
    const res = await quinn.run(['upload', join(work, 'large.bin'), '--chunk-size', '64k']);
    expect(res.exitCode).toBe(1);
    expect(res.stderr).toMatch(/quota/);
    expect(res.stderr).toMatch(/deleted/);
    const listed = await quinn.json<{ shares: { owner_name: string }[] }>(['ls', '--all']);
    expect(listed.shares.filter((s) => s.owner_name === 'quinn')).toEqual([]);
    expect(await recordsOf(quinn)).toEqual([]);
    await rm(quinn.configDir, { recursive: true, force: true });

    // Without DELETE the share cannot go: the line says so, never that it was deleted.
    await admin.run(['users', 'add', 'rae', '--password-stdin', '--perms', 'CREATE,READ,LIST'], {
      input: 'rae-password\n',
    });
    await admin.run(['users', 'quota', 'rae', '100k']);
    const rae = await createCli();
    await rae.run(['--server', serve.url, 'login', '-u', 'rae', '--password-stdin'], {
      input: 'rae-password\n',
    });
    const refused = await rae.run(['upload', join(work, 'large.bin'), '--chunk-size', '64k']);
    expect(refused.exitCode).toBe(1);
    expect(refused.stderr).toMatch(/could not be deleted/);
    expect(refused.stderr).not.toMatch(/was deleted/);
    await rm(rae.configDir, { recursive: true, force: true });
  });

  // Found from outside: `uploads clean` in another terminal deleted the share of an upload that
  // was still running (it then died with exit 4). A record whose process is alive on this host
  // belongs to that upload: clean leaves it, and says so.
  it('uploads clean leaves an upload that is still running alone; it finishes, verified', async () => {
    const proxy = chunkCounter(serve.url);
    const via = await proxy.start();
    proxy.state.delayMs = 400;
    try {
      await writeFile(join(work, 'running.bin'), randomBytes(256 * 1024));
      const running = admin.run(
        [
          '--json',
          '--server',
          via,
          'upload',
          join(work, 'running.bin'),
          '--chunk-size',
          '64k',
          '-p',
          '1',
        ],
        { env: { FSHARE_TOKEN: token } },
      );
      for (let i = 0; i < 200 && !(await recordWithShare(admin)); i++)
        await new Promise((r) => setTimeout(r, 25));
      const record = await recordWithShare(admin);
      expect(record).toBeDefined();
      const listed = await admin.json<{ running: boolean }[]>(['uploads']);
      expect(listed).toMatchObject([{ running: true }]);
      const cleaned = await admin.json<
        { share_deleted: boolean; running: boolean; message: string }[]
      >(['uploads', 'clean'], { env: { FSHARE_TOKEN: token } });
      expect(cleaned).toMatchObject([{ share_deleted: false, running: true }]);
      expect(cleaned[0]!.message).toMatch(
        /^Left the upload of .*running\.bin alone: fshare process \d+ is still running it$/,
      );
      const done = await running;
      expect(done.exitCode, done.stderr).toBe(0);
      expect(JSON.parse(done.stdout)).toMatchObject([{ verified: true }]);
      expect(await recordsOf(admin)).toEqual([]);
    } finally {
      await proxy.close();
    }
  });

  it('an interrupted upload keeps its share, says how to resume or remove it, and uploads clean removes it', async () => {
    const proxy = chunkCounter(serve.url);
    const via = await proxy.start();
    proxy.state.refuseAfter = 1; // the first chunk is stored, every later one fails with 503
    try {
      await writeFile(join(work, 'cut.bin'), randomBytes(200_000));
      const res = await admin.run(
        [
          '--server',
          via,
          'upload',
          join(work, 'cut.bin'),
          '--chunk-size',
          '64k',
          '--parallel',
          '1',
        ],
        {
          env: { FSHARE_TOKEN: token },
        },
      );
      expect(res.exitCode).toBe(1); // a server error (503) after every retry
      expect(res.stderr).toContain(`fshare upload ${join(work, 'cut.bin')}`);
      expect(res.stderr).toContain('fshare uploads clean');
      const listed = await admin.json<{ share_id: string; path: string }[]>(['uploads']);
      expect(listed).toHaveLength(1);
      expect(listed[0]!.path).toBe(join(work, 'cut.bin'));
      const shareId = listed[0]!.share_id;
      expect((await admin.run(['info', shareId])).exitCode).toBe(0);

      // Without a token for that server it cannot check the share: it says so and forgets nothing.
      const refused = await admin.run(['uploads', 'clean']);
      expect(refused.exitCode).toBe(3);
      expect(await recordsOf(admin)).toHaveLength(1);
      // FSHARE_TOKEN is the token of the command's server only: the record's server is named.
      const cleaned = await admin.run(['--server', via, 'uploads', 'clean'], {
        env: { FSHARE_TOKEN: token },
      });
      expect(cleaned.exitCode, cleaned.stderr).toBe(0);
      expect((await admin.run(['info', shareId])).exitCode).toBe(4);
      expect(await admin.json<unknown[]>(['uploads'])).toEqual([]);

      // Interrupted again: `rm` of its share forgets it; --restart gives an earlier one up.
      const args = [
        '--server',
        via,
        'upload',
        join(work, 'cut.bin'),
        '--chunk-size',
        '64k',
        '--parallel',
        '1',
      ];
      proxy.state.chunks = 0;
      expect((await admin.run(args, { env: { FSHARE_TOKEN: token } })).exitCode).toBe(1);
      const [second] = await recordsOf(admin);
      expect(
        (
          await admin.run(['--server', via, 'rm', second!.share_id], {
            env: { FSHARE_TOKEN: token },
          })
        ).exitCode,
      ).toBe(0);
      expect(await recordsOf(admin)).toEqual([]);
      proxy.state.chunks = 0;
      expect((await admin.run(args, { env: { FSHARE_TOKEN: token } })).exitCode).toBe(1);
      const [third] = await recordsOf(admin);
      proxy.state.refuseAfter = Infinity;
      const restarted = await admin.run(['--json', ...args, '--restart'], {
        env: { FSHARE_TOKEN: token },
      });
      expect(restarted.exitCode, restarted.stderr).toBe(0);
      const [fresh] = JSON.parse(restarted.stdout) as Transfer[];
      expect(fresh).toMatchObject({ verified: true, resumed_bytes: 0 });
      expect(fresh!.share_id).not.toBe(third!.share_id);
      expect((await admin.run(['info', third!.share_id])).exitCode).toBe(4);
      expect(await recordsOf(admin)).toEqual([]);
    } finally {
      await proxy.close();
    }
  });
});

/** A share on the stand-in, made the way any client makes one. */
async function createShareOn(standIn: StandIn, fileName: string): Promise<{ share_id: string }> {
  const res = await fetch(`${standIn.url}/files`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ file_name: fileName }),
  });
  const { url } = (await res.json()) as { url: string };
  return { share_id: url.split('/').pop()! };
}

describe('against a server without our extensions (the reference stand-in)', () => {
  let standIn: StandIn;
  let cli: Cli;
  let work: string;
  const run = (args: string[], env: Record<string, string> = {}) =>
    cli.run(['--server', standIn.url, ...args], { env: { FSHARE_TOKEN: 'any-token', ...env } });

  beforeAll(async () => {
    standIn = await startStandIn();
    cli = await createCli();
    work = await tempDir('standin');
  });
  afterAll(async () => {
    await standIn?.close();
    for (const dir of [cli?.configDir, work])
      if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('a multi-chunk upload that never completes fails (exit 7) and leaves no share', async () => {
    await writeFile(join(work, 'multi.bin'), randomBytes(200_000));
    const res = await run(['upload', join(work, 'multi.bin'), '--chunk-size', '64k']);
    expect(res.exitCode).toBe(7);
    expect(res.stderr).toMatch(/did not confirm/);
    expect(res.stdout).toBe('');
    expect(standIn.shares.size).toBe(0);
  });

  it('a completed single-chunk upload says in one line that it could not be verified', async () => {
    const data = randomBytes(10_000);
    await writeFile(join(work, 'one.bin'), data);
    const res = await run(['--json', 'upload', join(work, 'one.bin')]);
    expect(res.exitCode, res.stderr).toBe(0);
    expect(res.stderr.trim().split('\n')).toHaveLength(1);
    expect(res.stderr).toMatch(/not verified/);
    const [up] = JSON.parse(res.stdout) as Transfer[];
    expect(up).toMatchObject({ verified: false, sha256: sha256(data) });
    expect(standIn.shares.get(up!.share_id)?.content.equals(data)).toBe(true);
  });

  it('replace of a multi-chunk file reports failure (exit 7) and the old content stays', async () => {
    const old = randomBytes(1000);
    await writeFile(join(work, 'old.bin'), old);
    const [up] = JSON.parse(
      (await run(['--json', 'upload', join(work, 'old.bin')])).stdout,
    ) as Transfer[];
    await writeFile(join(work, 'new.bin'), randomBytes(300_000));
    const res = await run(['replace', up!.share_id, join(work, 'new.bin'), '--chunk-size', '64k']);
    expect(res.exitCode).toBe(7);
    expect(standIn.shares.get(up!.share_id)?.content.equals(old)).toBe(true);
    expect(standIn.shares.has(up!.share_id)).toBe(true); // a replace never deletes the share
  });

  it('get --continue without a validator starts over from byte 0 and says so', async () => {
    const data = randomBytes(100_000);
    await writeFile(join(work, 'src.bin'), data);
    const [up] = JSON.parse(
      (await run(['--json', 'upload', join(work, 'src.bin'), '--name', 'resume.bin'])).stdout,
    ) as Transfer[];
    const dir = join(work, 'dl');
    await rm(dir, { recursive: true, force: true });
    await import('node:fs/promises').then((fs) => fs.mkdir(dir));
    // A .part of other bytes: appending to it would make a mixed file.
    await writeFile(join(dir, 'resume.bin.part'), randomBytes(40_000));
    const res = await cli.run(
      ['--server', standIn.url, '--json', 'get', up!.share_id, '--continue'],
      {
        cwd: dir,
        env: { FSHARE_TOKEN: 'any-token' },
      },
    );
    expect(res.exitCode, res.stderr).toBe(0);
    expect(res.stderr).toMatch(/starting over from byte 0/);
    expect((await readFile(join(dir, 'resume.bin'))).equals(data)).toBe(true);
    expect(JSON.parse(res.stdout)).toMatchObject({ resumed_bytes: 0, verified: false });
  });

  // Against the real reference (no ETag, no Last-Modified, no sha256), a download whose
  // connection broke and whose share was replaced before the rest was asked for was resumed with
  // Range alone and saved, exit 0, as the old bytes followed by the new ones: neither version, and
  // nothing could notice. A file now starts over from byte 0; a stream is not resumed (exit 6).
  it('a download cut short by a server with neither validator nor sha256 starts over, never mixing two versions', async () => {
    const before = randomBytes(100_000);
    const after = randomBytes(100_000);
    await writeFile(join(work, 'mix.bin'), before);
    const [up] = JSON.parse(
      (await run(['--json', 'upload', join(work, 'mix.bin'), '--name', 'mix.bin'])).stdout,
    ) as Transfer[];
    const share = standIn.shares.get(up!.share_id)!;
    let contentGets = 0;
    const proxy = startFaultProxy(standIn.url, (req) => {
      if (req.method !== 'GET' || !req.url?.endsWith('/content')) return 'pass';
      contentGets += 1;
      // Odd requests are cut after 40,000 bytes; the share is replaced before each even one.
      if (contentGets % 2 === 1) {
        share.content = before;
        return { cutAfter: 40_000 };
      }
      share.content = after;
      return 'pass';
    });
    try {
      const url = await proxy.url;
      const dir = join(work, 'dl-mix');
      await import('node:fs/promises').then((fs) => fs.mkdir(dir, { recursive: true }));
      const res = await cli.run(['--server', url, '--json', 'get', up!.share_id], {
        cwd: dir,
        env: { FSHARE_TOKEN: 'any-token' },
      });
      expect(res.exitCode, res.stderr).toBe(0);
      expect(res.stderr).toMatch(
        /broke off: .*; the server gives no validator \(ETag or Last-Modified\) or sha256 to resume it with; starting over from byte 0/,
      );
      expect((await readFile(join(dir, 'mix.bin'))).equals(after)).toBe(true);
      expect(JSON.parse(res.stdout)).toMatchObject({ size: 100_000, verified: false });
      const retried = proxy.seen.filter((r) => r.url.endsWith('/content')).slice(1);
      expect(retried.map((r) => r.range)).toEqual([undefined]);

      // To stdout the bytes already written cannot be taken back: not resumed, exit 6.
      const piped = await cli.runBinary(['--server', url, 'get', up!.share_id, '-o', '-'], {
        env: { FSHARE_TOKEN: 'any-token' },
      });
      expect(piped.exitCode).toBe(6);
      // Only bytes of the version it started with, and not all of them.
      expect(piped.stdout.length).toBeLessThan(before.length);
      expect(piped.stdout.equals(before.subarray(0, piped.stdout.length))).toBe(true);
      expect(piped.stderr).toMatch(
        /not resumed: the server gives no validator \(ETag or Last-Modified\)/,
      );
    } finally {
      await proxy.close();
    }
  });

  it('resume falls back to a fresh upload, and says so, on a server without upload state', async () => {
    const data = randomBytes(5000);
    const path = join(work, 'again.bin');
    await writeFile(path, data);
    const share = JSON.parse(
      (await run(['--json', 'info', (await createShareOn(standIn, 'again.bin')).share_id])).stdout,
    ) as { share_id: string };
    // The record an interrupted `fshare upload again.bin` would have left behind.
    const { stat, mkdir } = await import('node:fs/promises');
    const st = await stat(path);
    await mkdir(join(cli.configDir, 'uploads'), { recursive: true });
    await writeFile(
      // named as the client names it: by server, share, path and kind
      join(
        cli.configDir,
        'uploads',
        `${createHash('sha256').update(`${standIn.url}\0${share.share_id}\0${path}\0create`).digest('hex').slice(0, 32)}.json`,
      ),
      JSON.stringify({
        server: standIn.url,
        share_id: share.share_id,
        dzuuid: 'earlier-upload',
        path,
        size: st.size,
        mtimeMs: st.mtimeMs,
        ino: st.ino,
        chunk_size: 8 * 1024 * 1024,
        mode: 'create',
        file_name: 'again.bin',
        started: new Date().toISOString(),
      }),
    );
    const res = await run(['--json', 'upload', path]);
    expect(res.exitCode, res.stderr).toBe(0);
    expect(res.stderr).toMatch(/cannot resume the earlier upload .*; starting over/);
    const [up] = JSON.parse(res.stdout) as Transfer[];
    expect(up).toMatchObject({ share_id: share.share_id, resumed_bytes: 0 }); // the same share
    expect(standIn.shares.get(share.share_id)?.content.equals(data)).toBe(true);
    expect(await recordsOf(cli)).toEqual([]);
  });

  it('zone-less times are read as UTC: ISO with offset in --json, local time in tables', async () => {
    const [up] = JSON.parse(
      (await run(['--json', 'upload', join(work, 'one.bin'), '--name', 'time.bin'])).stdout,
    ) as Transfer[];
    const info = JSON.parse((await run(['--json', 'info', up!.share_id])).stdout) as {
      create_date: string;
    };
    expect(info.create_date).toBe('2026-11-20T10:00:00.123Z');
    const table = await run(['ls'], { TZ: 'Asia/Tokyo' });
    expect(table.stdout).toMatch(
      new RegExp(`^${up!.share_id}\\t.*\\t2026-11-20T19:00:00\\+09:00$`, 'm'),
    );
    const ny = await run(['ls'], { TZ: 'America/New_York' });
    expect(ny.stdout).toMatch(
      new RegExp(`^${up!.share_id}\\t.*\\t2026-11-20T05:00:00-05:00$`, 'm'),
    );
  });
});
