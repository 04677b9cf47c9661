// Where a chunked upload waits (bench/README.md, "where the chunked upload waits"). fshare serve
// writes an upload's bytes into one file, one write at a time (ext4 serialises the buffered
// writes of one file anyway), and answers a chunk only once it is on disk. This runs the same
// 512 MiB upload as one body and in the contract's 64 chunks of 8 MiB, and traces the server's
// system calls with `perf trace` (root, Debian's linux-perf): how much of the upload that chain
// of writes was busy, the idle gaps in it, and the syncs.
//
// Variants (bench/floor/protocol-upload.mjs, nothing hashed by the client, the server hashes):
//   one-body     the file as one chunk, as `curl -F` sends it
//   strict       64 × 8 MiB, at most 4 requests open (fshare before 2026-11-25)
//   pipelined    64 × 8 MiB, 4 bodies going up and up to 3 more waiting for their answers
//   fshare       `fshare upload FILE --no-progress --json` (verified; pipelined)
// Each round runs each variant twice: untraced (wall time) and traced (the chain).
//
// `--slow-sync MS` starts the server with every fsync and fdatasync made MS ms longer (an
// LD_PRELOAD shim built with Debian's gcc), as on storage whose flush is slower than this VM's:
// a disk with a volatile cache, or shared storage.
//
//   node bench/floor/write-chain.mjs [--size 512m] [--rounds 3] [--slow-sync MS] [--json]
import { spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import {
  commandExists,
  extraCaCerts,
  fail,
  makeRandomFile,
  median,
  note,
  parseSize,
  sleep,
} from '../common.mjs';
import { adminToken, startServe, stopServe } from '../serve.mjs';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
const BIN = join(ROOT, 'bin', 'fshare.js');
const PROTOCOL = join(ROOT, 'bench', 'floor', 'protocol-upload.mjs');
const PIECE = 256 * 1024; // the server's body writes (src/shared/copy.ts, WRITE_MAX)

const { values } = parseArgs({
  options: {
    size: { type: 'string', default: '512m' },
    rounds: { type: 'string', default: '3' },
    'slow-sync': { type: 'string' },
    json: { type: 'boolean', default: false },
  },
});
const size = parseSize(values.size);
const rounds = Number(values.rounds);
const slowSync = values['slow-sync'] === undefined ? 0 : Number(values['slow-sync']);
if (size === null || !(rounds >= 1) || !(slowSync >= 0)) {
  process.stderr.write(
    'usage: node bench/floor/write-chain.mjs [--size 512m] [--rounds 3] [--slow-sync MS] [--json]\n',
  );
  process.exit(2);
}
const traced = process.getuid?.() === 0 && commandExists('perf');
if (!traced) note('no perf or not root: wall times only (apt-get install linux-perf; run as root)');

const CHUNK = 8 * 1024 * 1024;
const VARIANTS = {
  'one-body': (c) => ['node', PROTOCOL, c.url, c.src, String(size), '1', 'nohash'],
  strict: (c) => ['node', PROTOCOL, c.url, c.src, String(CHUNK), '4', 'nohash', 'strict'],
  pipelined: (c) => ['node', PROTOCOL, c.url, c.src, String(CHUNK), '4', 'nohash'],
  fshare: (c) => ['node', BIN, 'upload', c.src, '--no-progress', '--json'],
};

const children = new Set();
let tmp = null;
let server = null;
async function cleanup() {
  for (const child of children) if (child !== server?.child) child.kill('SIGKILL');
  if (server) await stopServe(server, { children, note }).catch(() => undefined);
  if (tmp) await rm(tmp, { recursive: true, force: true }).catch(() => undefined);
}

/** Runs argv to its end; its wall time and stdout. */
function runTimed(argv, env) {
  return new Promise((done, reject) => {
    const t0 = performance.now();
    const child = spawn(argv[0], argv.slice(1), { env, stdio: ['ignore', 'pipe', 'pipe'] });
    children.add(child);
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (err += d));
    child.once('exit', (code) => {
      children.delete(child);
      if (code !== 0) reject(fail(`${argv.slice(0, 3).join(' ')} exited ${code}: ${err.trim()}`));
      else done({ seconds: (performance.now() - t0) / 1000, stdout: out });
    });
  });
}

/** `perf trace` of the server's writes and syncs while `work` runs; the calls it saw. */
async function trace(work) {
  const out = join(tmp, 'trace.txt');
  await rm(out, { force: true });
  const perf = spawn(
    'perf',
    ['trace', '-p', String(server.pid), '-e', 'pwrite64,fdatasync', '-o', out],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  children.add(perf);
  let perfErr = '';
  perf.stderr.on('data', (d) => (perfErr += d));
  const exited = new Promise((r) => perf.once('exit', r));
  await sleep(1500); // perf attaches to every thread of the server
  const result = await work();
  await sleep(200);
  perf.kill('SIGINT');
  // perf trace sometimes spins instead of exiting (seen with the server's threads coming and
  // going): what it traced is in the file already.
  const code = await Promise.race([exited, sleep(5000).then(() => 'stuck')]);
  if (code === 'stuck') perf.kill('SIGKILL');
  children.delete(perf);
  if (code !== 0 && code !== null && code !== 'stuck')
    throw fail(`perf trace exited ${code}: ${perfErr.trim()}`);
  // "  58.538 ( 0.289 ms): node/10230 pwrite64(fd: 32, …) = 262144", or its "... [continued]:
  // pwrite64()) = 262144" line (same start, its duration) when another thread's call came between.
  const calls = [];
  for (const line of (await readFile(out, 'utf8')).split('\n')) {
    const m =
      /^\s*([\d.]+) \(\s*([\d.]+) ms\): \S+\s+(?:\.\.\. \[continued\]: )?(\w+)\(.*= (-?\d+)/.exec(
        line,
      );
    if (m) calls.push({ start: Number(m[1]), ms: Number(m[2]), call: m[3], ret: Number(m[4]) });
  }
  return { result, calls };
}

/** The chain of body writes: its span, busy time, idle gaps over 1 ms; the syncs. */
function chain(calls) {
  const writes = calls
    .filter((c) => c.call === 'pwrite64' && c.ret === PIECE)
    .sort((a, b) => a.start - b.start);
  const syncs = calls.filter((c) => c.call === 'fdatasync');
  if (writes.length === 0) return null;
  let busy = 0;
  let end = writes[0].start;
  let gaps = 0;
  let gapMs = 0;
  for (const w of writes) {
    if (w.start - end > 1) {
      gaps++;
      gapMs += w.start - end;
    }
    const stop = w.start + w.ms;
    busy += Math.max(0, stop - Math.max(w.start, end));
    end = Math.max(end, stop);
  }
  const span = end - writes[0].start;
  return {
    writes: writes.length,
    write_ms_median: median(writes.map((w) => w.ms)),
    span_ms: span,
    busy_ms: busy,
    busy_share: busy / span,
    gaps_over_1ms: gaps,
    gap_ms: gapMs,
    syncs: syncs.length,
    sync_ms: syncs.reduce((s, c) => s + c.ms, 0),
  };
}

async function main() {
  tmp = await mkdtemp(join(tmpdir(), 'fshare-bench-chain-'));
  const src = join(tmp, 'src.bin');
  note(`writing ${size} random bytes`);
  await makeRandomFile(src, size);
  const extraCa = extraCaCerts(false); // removed from every process started (bench/README.md)
  const env = { ...process.env };
  const serverEnv = {};
  if (slowSync > 0) {
    if (!commandExists('cc')) throw fail('--slow-sync needs a C compiler (apt-get install gcc)');
    const c = join(tmp, 'slow.c');
    await writeFile(
      c,
      `#define _GNU_SOURCE
#include <dlfcn.h>
#include <time.h>
static void nap(void) { struct timespec t = { 0, ${Math.round(slowSync * 1e6)}L }; nanosleep(&t, 0); }
int fdatasync(int fd) { static int (*f)(int); if (!f) f = dlsym(RTLD_NEXT, "fdatasync"); int r = f(fd); nap(); return r; }
int fsync(int fd) { static int (*f)(int); if (!f) f = dlsym(RTLD_NEXT, "fsync"); int r = f(fd); nap(); return r; }
`,
    );
    const so = join(tmp, 'slow.so');
    const cc = spawnSync('cc', ['-shared', '-fPIC', '-O2', '-o', so, c, '-ldl'], {
      encoding: 'utf8',
    });
    if (cc.status !== 0) throw fail(`building the slow-sync shim failed: ${cc.stderr}`);
    serverEnv.LD_PRELOAD = so;
  }
  const password = randomBytes(18).toString('base64url');
  server = await startServe({
    bin: BIN,
    dataDir: join(tmp, 'data'),
    adminPassword: password,
    env: serverEnv,
    children,
    fail,
  });
  const token = await adminToken(server.url, password, fail);
  Object.assign(env, {
    FSHARE_TOKEN: token,
    FSHARE_SERVER: server.url,
    FSHARE_KEYRING: 'off',
    FSHARE_CONFIG_DIR: join(tmp, 'config'),
  });
  const remove = async (stdout, name) => {
    const id = name === 'fshare' ? JSON.parse(stdout)[0].share_id : stdout.trim().split('\n').pop();
    await fetch(`${server.url}/files/${id}`, {
      method: 'DELETE',
      headers: { authorization: `Bearer ${token}` },
    });
  };
  const rows = [];
  for (let r = 0; r < rounds; r++) {
    const names = Object.keys(VARIANTS);
    if (r % 2) names.reverse();
    for (const name of names) {
      const argv = VARIANTS[name]({ url: server.url, src });
      spawnSync('sync');
      await sleep(300);
      note(`round ${r + 1}/${rounds}: ${name}`);
      const plain = await runTimed(argv, env);
      await remove(plain.stdout, name);
      let seen = null;
      if (traced) {
        spawnSync('sync');
        await sleep(300);
        const { result, calls } = await trace(() => runTimed(argv, env));
        await remove(result.stdout, name);
        seen = chain(calls);
      }
      rows.push({ name, round: r + 1, seconds: plain.seconds, chain: seen });
    }
  }
  const summary = {};
  for (const name of Object.keys(VARIANTS)) {
    const mine = rows.filter((x) => x.name === name);
    const med = (f) => {
      const xs = mine.map(f).filter((x) => typeof x === 'number');
      return xs.length ? median(xs) : null;
    };
    summary[name] = {
      wall_s: med((x) => x.seconds),
      traced_span_ms: med((x) => x.chain?.span_ms),
      write_busy_ms: med((x) => x.chain?.busy_ms),
      write_busy_share: med((x) => x.chain?.busy_share),
      write_ms_median: med((x) => x.chain?.write_ms_median),
      idle_gaps_over_1ms: med((x) => x.chain?.gaps_over_1ms),
      idle_gap_ms: med((x) => x.chain?.gap_ms),
      syncs: med((x) => x.chain?.syncs),
      sync_ms: med((x) => x.chain?.sync_ms),
    };
  }
  return {
    command: `node bench/floor/write-chain.mjs --size ${values.size} --rounds ${rounds}${slowSync ? ` --slow-sync ${slowSync}` : ''}`,
    date: new Date().toISOString(),
    traced,
    node_extra_ca_certs: extraCa,
    summary,
    rows,
  };
}

const fmt = (x, d = 3) => (typeof x === 'number' ? x.toFixed(d) : '–');
try {
  const result = await main();
  if (values.json) process.stdout.write(`${JSON.stringify(result, null, 2)}\n`);
  else {
    process.stdout.write(`${result.command}  (${result.date})\n`);
    process.stdout.write(
      'variant     wall s   span ms  writes busy ms (share)  write ms  gaps>1ms (ms)  syncs (ms)\n',
    );
    for (const [name, s] of Object.entries(result.summary))
      process.stdout.write(
        `${name.padEnd(10)} ${fmt(s.wall_s).padStart(6)}  ${fmt(s.traced_span_ms, 0).padStart(8)}  ` +
          `${fmt(s.write_busy_ms, 0).padStart(8)} (${fmt(s.write_busy_share, 2)})   ${fmt(s.write_ms_median).padStart(7)}  ` +
          `${fmt(s.idle_gaps_over_1ms, 0).padStart(4)} (${fmt(s.idle_gap_ms, 0).padStart(4)})  ${fmt(s.syncs, 0).padStart(4)} (${fmt(s.sync_ms, 0)})\n`,
      );
  }
} catch (err) {
  process.stderr.write(`bench: ${err.message}\n`);
  process.exitCode = 1;
} finally {
  await cleanup();
}
