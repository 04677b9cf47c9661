#!/usr/bin/env node
// fshare benchmark (issue 4): transfer speed against cp and curl, peak RSS, metadata throughput.
// Plain Node ESM, no build step; `npm run bench` builds dist/ first. See bench/README.md.
//
//   npm run bench                              1 GiB file, prints a table
//   npm run bench -- --size 512m --json        one JSON object on stdout
//
// Units: MB = 10^6 bytes everywhere (rates and RSS). Progress notes go to stderr.

import { spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { link, mkdir, mkdtemp, readFile, readdir, rm, statfs, writeFile } from 'node:fs/promises';
import { availableParallelism, cpus, loadavg, release, tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { Pool } from 'undici';
import {
  commandExists,
  cpuSeconds,
  extraCaCerts,
  extraCaNote,
  fail,
  makeRandomFile,
  median,
  note,
  parseSize,
  prng,
  sha256File,
  sleep,
} from './common.mjs';
import { startServe, stopServe } from './serve.mjs';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const BIN = join(ROOT, 'bin', 'fshare.js');
const MB = 1e6;
const GNU_TIME = '/usr/bin/time';

// Issue 12's targets (issue 4's looser ones are kept where issue 12 has none).
const TARGETS = {
  upload_vs_digest_bound: 0.8,
  get_vs_digest_bound: 0.8,
  upload_vs_curl_form: 0.9,
  upload_cpu_vs_curl: 3,
  serve_vs_nginx: 0.8,
  upload_vs_cp: 0.6,
  get_vs_curl: 0.9,
  server_idle_rss_mb: 70,
  server_logins_rss_mb: 90,
  server_transfer_rss_mb: 110,
  cli_rss_mb: 100,
  shares_rss_mb: 200,
  create_per_s: 2000,
  list_p99_ms: 10,
};

const USAGE = `usage: node bench/run.mjs [options]   (or: npm run bench -- [options])

  --size SIZE          test file size: 512m, 1g, 100000000 ... (binary units; default 1g)
  --json               print one JSON object on stdout instead of the table
  --shares N           shares created in the metadata phase (default 100000)
  --in-flight N        concurrent create requests, keep-alive (default 16)
  --list-requests N    timed GET /files?page=N&per_page=P requests (default 500)
  --per-page P         page size of the timed listing (default 100)
  --repeat N           transfer rounds (cp, upload, curl, get); medians are reported (default 1)
  --chunk-size SIZE    passed to fshare upload (default: the CLI's default)
  --parallel N         passed to fshare upload (default: the CLI's default)
  --dir DIR            where the temporary directory goes (default: the OS temp dir)
  --profile DIR        run the server and the CLI under node --cpu-prof, profiles into DIR
  --skip-transfer      only the metadata phase
  --skip-abuse         no download latency under a login flood and stalled connections
  --skip-meta          only the transfer phases
  --upload-only        only cp and upload (for sweeps of --chunk-size and --parallel)
  --no-sha-ni          every process hashes without the CPU's SHA instructions
                       (OPENSSL_ia32cap), like machines that lack them
  --plain-sha256       every process hashes with OpenSSL's plain x86-64 code: no SHA, AVX, AVX2
                       or SSSE3 instructions (OPENSSL_ia32cap); slower than --no-sha-ni, nearer
                       the brief's machines (one core hashes about 240 MB/s there)
  --drop-caches        (root) before every timed phase, drop the page cache and read back the
                       files the phase reads: every run then meets the same memory (see
                       bench/README.md, "Memory noise"); the phases themselves are unchanged
  --keep-extra-ca      keep NODE_EXTRA_CA_CERTS for the processes measured (by default it is
                       removed: Node parses that bundle at every start; the output says what
                       it costs here)
  -h, --help`;

// ---------------------------------------------------------------------------------------------
// Small helpers

function positiveInt(text, name) {
  const n = Number(text);
  if (!/^\d+$/.test(String(text)) || n < 1) throw fail(`${name} must be a positive integer`);
  return n;
}

const round = (x, digits = 1) => (x === null || x === undefined ? null : Number(x.toFixed(digits)));
const mbps = (bytes, seconds) => bytes / MB / seconds;

/** Nearest-rank percentile of an unsorted array of numbers. */
function percentile(values, p) {
  const sorted = [...values].sort((a, b) => a - b);
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length, Math.max(1, rank)) - 1];
}

/** VmHWM (peak resident set) of a live process, in bytes; null once it has gone. */
function peakRss(pid) {
  try {
    const m = /^VmHWM:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) * 1024 : null;
  } catch {
    return null;
  }
}

function currentRss(pid) {
  try {
    const m = /^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) * 1024 : null;
  } catch {
    return null;
  }
}

/** Resets VmHWM to the current RSS (Linux ≥ 4.0), so the next read is the peak of one phase. */
function resetPeakRss(pid) {
  try {
    writeFileSync(`/proc/${pid}/clear_refs`, '5');
    return true;
  } catch {
    return false;
  }
}

// ---------------------------------------------------------------------------------------------
// Child processes: every one is tracked so a failure or Ctrl-C can stop it.

const children = new Set();

/**
 * Runs a command to completion and measures its wall time and peak RSS: with GNU time
 * (`%M`, the child's ru_maxrss) when installed, otherwise by polling VmHWM until it exits.
 */
async function run(cmd, args, { env, input, measureRss = false } = {}) {
  const rssFile =
    measureRss && useGnuTime ? join(tmpRoot, `rss-${randomBytes(4).toString('hex')}`) : null;
  const [file, argv] = rssFile
    ? [GNU_TIME, ['-f', '%M %U %S', '-o', rssFile, cmd, ...args]]
    : [cmd, args];
  const started = performance.now();
  const child = spawn(file, argv, { env, stdio: ['pipe', 'pipe', 'pipe'] });
  children.add(child);
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d) => (stdout += d));
  child.stderr.on('data', (d) => (stderr += d));
  let polled = 0;
  const poller =
    measureRss && !rssFile
      ? setInterval(() => (polled = Math.max(polled, peakRss(child.pid) ?? 0)), 20)
      : null;
  // A command that exits before reading its input (sync) must not crash the bench with EPIPE.
  child.stdin.on('error', () => {});
  child.stdin.end(input ?? '');
  const code = await new Promise((resolve, reject) => {
    child.once('error', reject);
    child.once('close', (c, signal) => resolve(c ?? signal));
  });
  const ended = performance.now();
  const seconds = (ended - started) / 1000;
  children.delete(child);
  if (poller) clearInterval(poller);
  let rss = null;
  let cpu = null;
  if (rssFile) {
    const lines = (await readFile(rssFile, 'utf8').catch(() => '')).trim().split('\n');
    const [kb, user, sys] = (lines.at(-1) ?? '').split(' ').map(Number);
    rss = Number.isFinite(kb) && kb > 0 ? kb * 1024 : null;
    cpu = Number.isFinite(user) && Number.isFinite(sys) ? user + sys : null;
    await rm(rssFile, { force: true });
  } else if (measureRss) rss = polled || null;
  return { code, stdout, stderr, seconds, ended, rss, cpu };
}

function checked(what, result) {
  if (result.code !== 0) {
    const why = result.stderr.trim().split('\n').slice(-5).join('\n  ');
    throw fail(`${what} exited with ${result.code}${why ? `:\n  ${why}` : ''}`);
  }
  return result;
}

// ---------------------------------------------------------------------------------------------
// Options and state

let opts;
try {
  const { values } = parseArgs({
    options: {
      size: { type: 'string', default: '1g' },
      json: { type: 'boolean', default: false },
      shares: { type: 'string', default: '100000' },
      'in-flight': { type: 'string', default: '16' },
      'per-page': { type: 'string', default: '100' },
      'list-requests': { type: 'string', default: '500' },
      repeat: { type: 'string', default: '1' },
      'chunk-size': { type: 'string' },
      parallel: { type: 'string' },
      dir: { type: 'string' },
      profile: { type: 'string' },
      'skip-transfer': { type: 'boolean', default: false },
      'skip-meta': { type: 'boolean', default: false },
      'skip-abuse': { type: 'boolean', default: false },
      'upload-only': { type: 'boolean', default: false },
      'no-sha-ni': { type: 'boolean', default: false },
      'plain-sha256': { type: 'boolean', default: false },
      'drop-caches': { type: 'boolean', default: false },
      'keep-extra-ca': { type: 'boolean', default: false },
      help: { type: 'boolean', short: 'h', default: false },
    },
    strict: true,
  });
  if (values.help) {
    process.stdout.write(`${USAGE}\n`);
    process.exit(0);
  }
  const size = parseSize(values.size);
  if (size === null) throw fail(`not a size: ${values.size} (try 512m or 1g)`);
  opts = {
    size,
    json: values.json,
    shares: positiveInt(values.shares, '--shares'),
    inFlight: positiveInt(values['in-flight'], '--in-flight'),
    listRequests: positiveInt(values['list-requests'], '--list-requests'),
    perPage: positiveInt(values['per-page'], '--per-page'),
    repeat: positiveInt(values.repeat, '--repeat'),
    uploadArgs: [
      ...(values['chunk-size'] ? ['--chunk-size', values['chunk-size']] : []),
      ...(values.parallel ? ['--parallel', values.parallel] : []),
    ],
    dir: resolve(values.dir ?? tmpdir()),
    profile: values.profile ? resolve(values.profile) : null,
    transfer: !values['skip-transfer'],
    meta: !values['skip-meta'] && !values['upload-only'],
    abuse: !values['skip-abuse'] && !values['upload-only'],
    uploadOnly: values['upload-only'],
    noShaNi: values['no-sha-ni'] || values['plain-sha256'],
    plainSha: values['plain-sha256'],
    dropCaches: values['drop-caches'],
    keepExtraCa: values['keep-extra-ca'],
  };
  if (opts.dropCaches && process.getuid?.() !== 0)
    throw fail('--drop-caches needs root (it writes /proc/sys/vm/drop_caches)');
  // OpenSSL without its SHA instructions: the hashing speed of the CPUs the brief describes.
  if (opts.noShaNi) process.env.OPENSSL_ia32cap = ':~0x20000000';
  // And without AVX, AVX2 and SSSE3 (CPUID 1 ECX bits 28 and 9, CPUID 7 EBX bit 5): OpenSSL's
  // plain x86-64 sha256, about 300 MB/s on the AMD EPYC this was written on.
  if (opts.plainSha) process.env.OPENSSL_ia32cap = '~0x1000020000000000:~0x20000020';
} catch (err) {
  process.stderr.write(`bench: ${err.message}\n${USAGE}\n`);
  process.exit(2);
}

const useGnuTime = existsSync(GNU_TIME);
let tmpRoot;
let server = null; // { child, url, pid, stderr }

/** Node flags for every fshare process: the CPU profiler when --profile is given. */
const nodeFlags = () => (opts.profile ? ['--cpu-prof', '--cpu-prof-dir', opts.profile] : []);

// ---------------------------------------------------------------------------------------------
// The server

async function startServer(dataDir, adminPassword, extraEnv = {}) {
  server = null;
  const s = await startServe({
    bin: BIN,
    dataDir,
    adminPassword,
    env: extraEnv,
    nodeFlags: nodeFlags(),
    children,
    fail,
  });
  server = s;
  return s;
}

async function stopServer() {
  const s = server;
  if (!s) return;
  server = null;
  await stopServe(s, { children, note });
}

let cleaning = null;
function cleanup() {
  cleaning ??= (async () => {
    for (const child of children) if (child !== server?.child) child.kill('SIGTERM');
    await stopServer().catch(() => undefined);
    if (tmpRoot) await rm(tmpRoot, { recursive: true, force: true }).catch(() => undefined);
  })();
  return cleaning;
}

for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
  process.on(signal, () => {
    note(`${signal}: cleaning up`);
    void cleanup().finally(() => process.exit(130));
  });
}

// ---------------------------------------------------------------------------------------------
// Phases

/**
 * The single-core sha256 rate of this machine, in this Node (the server hashes with the same
 * OpenSSL): the best of three passes over 256 MiB held in memory, so no I/O is measured.
 */
function sha256Rate() {
  // In a child, so that it sees the same OpenSSL settings (OPENSSL_ia32cap) as the server.
  const code = `
    const { createHash, randomBytes } = require('node:crypto');
    const block = randomBytes(16 << 20);
    let best = Infinity;
    for (let pass = 0; pass < 3; pass++) {
      const t0 = performance.now();
      const hash = createHash('sha256');
      for (let i = 0; i < 16; i++) hash.update(block);
      hash.digest();
      best = Math.min(best, (performance.now() - t0) / 1000);
    }
    console.log((16 * block.length) / best / 1e6);`;
  const res = spawnSync(process.execPath, ['-e', code], { encoding: 'utf8' });
  if (res.status !== 0) throw fail(`measuring sha256 failed: ${res.stderr}`);
  return Number(res.stdout.trim());
}

/**
 * The least wall time in which this machine's cores can do `other` CPU seconds of work plus
 * `passes` sha256 passes of `hash` seconds each, every pass on one thread: never less than the
 * sum over the cores, nor than one pass.
 */
function leastTime(other, hash, passes) {
  return Math.max(hash, (other + passes * hash) / availableParallelism());
}

/**
 * The least CPU a verified upload's client spends reading the file and writing it to the server:
 * the smaller of curl's and `fshare upload`'s without its sha256 (`hash` seconds).
 */
function leastSendCpu(rd, hash) {
  return Math.max(0, Math.min(rd.curl_form_cpu_s, rd.upload_cpu_s - hash));
}

/**
 * The most any verified upload could reach against `curl -F` on this machine's cores, from what
 * one round measured. Such an upload makes the server do at least the work of `curl -F`'s upload
 * of the same bytes (receiving, writing, syncing and hashing them); its client must read the file
 * and write it to the server, as curl does, and hash the whole file besides, at best at the
 * single-core sha256 rate. Each of the two is taken as the smaller of what it cost in `curl -F`
 * and in `fshare upload` (without its sha256) this round, since this VM's page cache makes the
 * same work cost more in one run than in the next (bench/README.md, "Memory noise"): so the
 * upload measured can never beat its own bound. No schedule of that CPU on N cores takes less
 * than its sum over N, nor less than the client's sha256 on its one thread.
 */
function uploadBound(rd, size, shaRate) {
  const have = (...xs) => xs.every((x) => typeof x === 'number');
  if (!have(rd.curl_form_server_cpu_s, rd.upload_server_cpu_s, rd.curl_form_cpu_s, rd.upload_cpu_s))
    return null;
  if (!shaRate || !rd.curl_form_s) return null;
  const hash = size / MB / shaRate;
  const server = Math.min(rd.curl_form_server_cpu_s, rd.upload_server_cpu_s);
  const client = leastSendCpu(rd, hash);
  return rd.curl_form_s / leastTime(server + client, hash, 1);
}

/**
 * The most a verified transfer could reach in the units of its target, `min(sha256, the same
 * transfer unhashed)`, from what one round measured: it does at least the unhashed transfer's
 * work (client and server CPU, every thread; or the verified one's without its sha256 passes,
 * whichever cost less this round, see uploadBound) plus `hashes` sha256 passes over the file at
 * the single-core rate, each on one thread. No schedule of that CPU on N cores takes less than
 * its sum over N, nor less than one sha256 pass.
 */
function verifiedBound(size, shaRate, hashes, unhashed, verified, unhashedRate) {
  const work = (w) =>
    w && typeof w.client === 'number' && typeof w.server === 'number' ? w.client + w.server : null;
  const plain = work(unhashed);
  const full = work(verified);
  if (!shaRate || !unhashedRate || plain === null || full === null) return null;
  const hash = size / MB / shaRate;
  const rest = Math.max(0, Math.min(plain, full - hashes * hash));
  return size / MB / leastTime(rest, hash, hashes) / Math.min(shaRate, unhashedRate);
}

/**
 * A second server that hashes nothing (FSHARE_BENCH_NO_DIGEST=1), for the same upload without
 * the sha256 the real server computes while receiving. It runs for the whole benchmark, and one
 * untimed upload warms it before the first timed one: a server started for each round, as
 * before, measured a process whose code V8 had not yet optimised (its first 512 MiB upload took
 * 0.92–0.98 s against 0.82 s for the next ones). Without --drop-caches the unhashed upload can
 * still read slower than the hashed one: it writes into memory the hypervisor has just taken
 * back (bench/README.md, "Memory noise"), 0.98–1.17 s of server CPU against 0.66–0.72 with it.
 */
async function startPlainServer(src, adminPassword, fshareEnv, uploadArgs) {
  const s = await startServe({
    bin: BIN,
    dataDir: join(tmpRoot, 'data-nodigest'),
    adminPassword,
    env: { FSHARE_BENCH_NO_DIGEST: '1' },
    nodeFlags: nodeFlags(),
    children,
    fail,
  });
  try {
    const res = await fetch(`${s.url}/users/login`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ username: 'admin', password: adminPassword }),
    });
    const { auth_token: token } = await res.json();
    // Neither side hashes: the client's hashing thread is off too.
    s.env = {
      ...fshareEnv,
      FSHARE_SERVER: s.url,
      FSHARE_TOKEN: token,
      FSHARE_BENCH_NO_DIGEST: '1',
    };
    s.uploadArgs = uploadArgs;
    note('warming the server that hashes nothing (one untimed upload)');
    await uploadWithoutDigest(s, src);
    return s;
  } catch (err) {
    await stopServe(s, { children, note });
    throw err;
  }
}

/** `fshare upload` of `src` to the server that hashes nothing; the share is removed after. */
async function uploadWithoutDigest(s, src) {
  const cpuBefore = cpuSeconds(s.pid);
  const up = checked(
    'fshare upload (no digest)',
    await run(
      process.execPath,
      [...nodeFlags(), BIN, 'upload', src, '--no-progress', '--json', ...s.uploadArgs],
      { env: s.env, measureRss: true },
    ),
  );
  const cpuAfter = cpuSeconds(s.pid);
  up.serverCpu = cpuBefore === null || cpuAfter === null ? null : cpuAfter - cpuBefore;
  const uploaded = JSON.parse(up.stdout);
  if (uploaded[0]?.size !== opts.size) throw fail(`unexpected upload output: ${up.stdout}`);
  checked(
    'fshare rm (no digest)',
    await run(process.execPath, [BIN, 'rm', uploaded[0].share_id], { env: s.env }),
  );
  return up;
}

/**
 * nginx from Debian's package, serving `root` on a free port as a single process (no privilege
 * drop, temp paths in the bench directory): the reference for serving a file over HTTP.
 */
async function startNginx(root) {
  if (!commandExists('nginx')) return null;
  const dir = join(tmpRoot, 'nginx');
  await mkdir(dir, { recursive: true });
  const port = 20000 + Math.floor(Math.random() * 20000);
  const conf = join(dir, 'nginx.conf');
  await writeFile(
    conf,
    `daemon off; master_process off; worker_processes 1; pid ${dir}/nginx.pid;
error_log ${dir}/error.log;
events { worker_connections 64; }
http {
  access_log off; sendfile on; tcp_nopush on;
  client_body_temp_path ${dir}/body; proxy_temp_path ${dir}/proxy;
  fastcgi_temp_path ${dir}/fastcgi; uwsgi_temp_path ${dir}/uwsgi; scgi_temp_path ${dir}/scgi;
  server { listen 127.0.0.1:${port}; root ${root}; }
}
`,
  );
  const child = spawn('nginx', ['-c', conf, '-p', dir], { stdio: ['ignore', 'ignore', 'pipe'] });
  children.add(child);
  for (let i = 0; i < 100; i++) {
    await sleep(50);
    const ok = await fetch(`http://127.0.0.1:${port}/`, { method: 'HEAD' }).then(
      () => true,
      () => false,
    );
    if (ok) break;
  }
  return {
    url: `http://127.0.0.1:${port}`,
    pid: child.pid,
    async stop() {
      child.kill('SIGTERM');
      await new Promise((r) => child.once('exit', r));
      children.delete(child);
    },
  };
}

/** One chunk carrying the whole file, sent by `curl -F` to a new share: the upload baseline. */
async function curlFormUpload(src, token, headerFile) {
  const res = await fetch(`${server.url}/files`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: JSON.stringify({ file_name: 'curl-form.bin' }),
  });
  const { url } = await res.json();
  const id = url.split('/').pop();
  const up = checked(
    'curl -F',
    await run(
      'curl',
      [
        '-sS',
        '-f',
        '-H',
        `@${headerFile}`,
        '-F',
        `dzuuid=${randomBytes(16).toString('hex')}`,
        '-F',
        'dzchunkindex=0',
        '-F',
        'dztotalchunks=1',
        '-F',
        `upload=@${src};type=application/octet-stream`,
        `${server.url}/files/${id}/content`,
      ],
      { measureRss: true },
    ),
  );
  await fetch(`${server.url}/files/${id}`, {
    method: 'DELETE',
    headers: { authorization: `Bearer ${token}` },
  });
  return up;
}

/**
 * The server's resident set idle, and after `count` sign-ins (each one a password hash), both
 * settled (below); the peak while signing in as well.
 */
async function loginRss(adminPassword, count) {
  const { rss: idle, series: idleSeries } = await settledRss(server.pid);
  resetPeakRss(server.pid);
  for (let i = 0; i < count; i++) {
    const res = await fetch(`${server.url}/users/login`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ username: 'admin', password: adminPassword }),
    });
    await res.arrayBuffer();
    if (res.status !== 200) throw fail(`sign-in ${i + 1} → ${res.status}`);
  }
  const peak = peakRss(server.pid);
  const { rss: logins } = await settledRss(server.pid);
  return { idle, idleSeries, logins, peak };
}

/**
 * The resident set of a server left alone: 20 s after the last request, read every second on
 * the way (`series`, MB). A hashing thread ends after 2 s without work, the server collects
 * its heap 5 s after its last request, and V8's memory reducer shrinks it once more about 8 s
 * after that; a server that idles for minutes sits there.
 */
async function settledRss(pid) {
  const series = [];
  for (let s = 1; s <= 20; s++) {
    await sleep(1000);
    series.push(currentRss(pid));
  }
  return { rss: series.at(-1), series: series.map((b) => round(b / MB, 1)) };
}

/**
 * Before every timed phase: the dirty pages earlier phases left are written out first, so that
 * no phase pays for another's writeback (a 512 MiB file written just before otherwise costs the
 * next transfer a third of its speed on these machines).
 */
async function settle() {
  checked('sync', await run('sync', []));
  if (opts.dropCaches) {
    // The page cache dropped is used again before the hypervisor takes the memory back, so no
    // phase writes into pages that must first be faulted in from the host.
    await writeFile('/proc/sys/vm/drop_caches', '1\n');
    const readBack = 'find "$DIR" -type f -size +1M -exec cat {} + > /dev/null';
    const env = { ...process.env, DIR: tmpRoot };
    checked('reading the files back', await run('sh', ['-c', readBack], { env }));
    await sleep(500);
    return;
  }
  await sleep(300);
}

/** cp of the file, then `sync FILE` (the server fsyncs what it joins, so the copy is synced too). */
async function measureCp(src, dst) {
  const cp = checked('cp', await run('cp', [src, dst]));
  const sync = checked('sync', await run('sync', [dst]));
  await rm(dst, { force: true });
  return { cp_s: cp.seconds, sync_s: sync.seconds };
}

async function verify(path, expected, what) {
  const actual = await sha256File(path);
  if (actual !== expected) throw fail(`${what}: downloaded bytes differ from the source (SHA-256)`);
}

/**
 * Diagnostic: when the server's join of the uploaded chunks began, seen as the first file in its
 * data-dir tmp/ (storage.ts joins there, then renames into content/). Null if never seen.
 */
function watchJoin(dir) {
  let seen = null;
  let busy = false;
  const timer = setInterval(async () => {
    if (seen !== null || busy) return;
    busy = true;
    const names = await readdir(dir).catch(() => []);
    if (names.length > 0) seen = performance.now();
    busy = false;
  }, 10);
  return {
    stop() {
      clearInterval(timer);
      return seen;
    },
  };
}

/** Peak RSS of the server during `fn`: VmHWM reset before, read after. */
async function serverPhase(peaks, name, fn) {
  const resettable = resetPeakRss(server.pid);
  const cpuBefore = cpuSeconds(server.pid);
  const result = await fn();
  const cpuAfter = cpuSeconds(server.pid);
  // The server's CPU (all its threads) over the phase, for the two-core bound of the upload.
  if (result && typeof result === 'object')
    result.serverCpu = cpuBefore === null || cpuAfter === null ? null : cpuAfter - cpuBefore;
  const peak = peakRss(server.pid);
  if (peak === null) throw fail(`the server died during ${name}:\n${server.stderr.trim()}`);
  peaks[name] = Math.max(peaks[name] ?? 0, peak);
  if (!resettable) peaks._monotonic = true;
  return result;
}

async function metadata(url, token, peaks) {
  const pool = new Pool(url, {
    connections: opts.inFlight,
    pipelining: 1,
    keepAliveTimeout: 60_000,
  });
  const headers = { authorization: `Bearer ${token}`, 'content-type': 'application/json' };
  try {
    // Creates: `in-flight` workers, each one request at a time over its keep-alive connection.
    const createLatencies = [];
    let next = 0;
    const worker = async () => {
      while (next < opts.shares) {
        const i = next++;
        const t0 = performance.now();
        const res = await pool.request({
          path: '/files',
          method: 'POST',
          headers,
          body: JSON.stringify({ file_name: `bench-${String(i).padStart(5, '0')}.txt` }),
        });
        const text = await res.body.text();
        if (res.statusCode !== 201) throw fail(`POST /files → ${res.statusCode}: ${text}`);
        createLatencies.push(performance.now() - t0);
      }
    };
    note(`creating ${opts.shares} shares, ${opts.inFlight} in flight`);
    const createSeconds = await serverPhase(peaks, 'create', async () => {
      const t0 = performance.now();
      await Promise.all(Array.from({ length: opts.inFlight }, worker));
      return (performance.now() - t0) / 1000;
    });

    // Listing: one request at a time (latency, not throughput), pages drawn across the list.
    const get = async (page) => {
      const t0 = performance.now();
      const res = await pool.request({
        path: `/files?page=${page}&per_page=${opts.perPage}`,
        method: 'GET',
        headers: { authorization: headers.authorization },
      });
      const body = await res.body.json();
      const ms = performance.now() - t0;
      if (res.statusCode !== 200) throw fail(`GET /files?page=${page} → ${res.statusCode}`);
      return { ms, body };
    };
    note('listing');
    const first = await get(1);
    const pages = first.body.pages;
    const random = prng(4);
    const listLatencies = await serverPhase(peaks, 'list', async () => {
      for (let i = 0; i < 20; i++) await get(1 + Math.floor(random() * pages)); // warm-up
      const out = [];
      for (let i = 0; i < opts.listRequests; i++) {
        const page = 1 + Math.floor(random() * pages);
        const { ms, body } = await get(page);
        if (body.data.length === 0 || body.data.length > opts.perPage)
          throw fail(`page ${page} has ${body.data.length} shares`);
        out.push(ms);
      }
      return out;
    });
    // What holding every share costs the server once the burst is over: V8 returns the heap it
    // grew for the burst's garbage some seconds after the allocations stop, so the resident set
    // is sampled for 30 s and its lowest value kept (the burst's peak is reported as well).
    const sharesPeak = peakRss(server.pid);
    let sharesRss = currentRss(server.pid);
    for (let i = 0; i < 30; i++) {
      await sleep(1000);
      sharesRss = Math.min(sharesRss, currentRss(server.pid));
    }
    return {
      shares_rss: sharesRss,
      shares_peak_rss: sharesPeak,
      create_per_s: opts.shares / createSeconds,
      create_s: createSeconds,
      create_p50_ms: percentile(createLatencies, 50),
      create_p99_ms: percentile(createLatencies, 99),
      list_pages: pages,
      list_p50_ms: percentile(listLatencies, 50),
      list_p99_ms: percentile(listLatencies, 99),
      list_max_ms: Math.max(...listLatencies),
    };
  } finally {
    await pool.close();
  }
}

/**
 * Issue 9: the latency of a download (8 MiB, time to the last byte, one at a time) when the
 * server is idle, during a flood of sign-ins (32 at once, with the right password, so every one
 * costs a password hash: the worst case for the hashes' queue), and with 2,000 connections
 * open that sent half a request and then nothing (from 40 loopback addresses, 50 each).
 */
async function underAbuse(url, token, adminPassword) {
  const net = await import('node:net');
  const pool = new Pool(url, { connections: 1, keepAliveTimeout: 60_000 });
  const auth = { authorization: `Bearer ${token}` };
  try {
    const body = randomBytes(8 << 20);
    let res = await pool.request({
      path: '/files',
      method: 'POST',
      headers: { ...auth, 'content-type': 'application/json' },
      body: JSON.stringify({ file_name: 'latency.bin' }),
    });
    const { url: sharePath } = await res.body.json();
    const form = new FormData();
    form.append('dzuuid', 'latency');
    form.append('dzchunkindex', '0');
    form.append('dztotalchunks', '1');
    form.append('upload', new Blob([body]), 'latency.bin');
    res = await fetch(`${url}${sharePath}/content`, { method: 'POST', headers: auth, body: form });
    if (res.status !== 201) throw fail(`uploading the latency file: HTTP ${res.status}`);
    const download = async () => {
      const t0 = performance.now();
      const r = await pool.request({ path: `${sharePath}/content`, method: 'GET', headers: auth });
      let n = 0;
      for await (const chunk of r.body) n += chunk.length;
      if (r.statusCode !== 200 || n !== body.length) throw fail(`download: HTTP ${r.statusCode}`);
      return performance.now() - t0;
    };
    const sample = async (count) => {
      const ms = [];
      for (let i = 0; i < count; i++) ms.push(await download());
      return { p50: percentile(ms, 50), p95: percentile(ms, 95), max: Math.max(...ms) };
    };
    for (let i = 0; i < 5; i++) await download(); // warm-up
    note('download latency: idle');
    const idle = await sample(30);

    note('download latency: during a sign-in flood');
    let flooding = true;
    const outcome = { ok: 0, busy: 0, other: 0 };
    const loginPool = new Pool(url, { connections: 32, keepAliveTimeout: 60_000 });
    const flood = Array.from({ length: 32 }, async () => {
      while (flooding) {
        const r = await loginPool.request({
          path: '/users/login',
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ username: 'admin', password: adminPassword }),
        });
        await r.body.dump();
        if (r.statusCode === 200) outcome.ok++;
        else if (r.statusCode === 503) outcome.busy++;
        else outcome.other++;
      }
    });
    await sleep(500);
    const t0 = performance.now();
    const during = await sample(30);
    const floodSeconds = (performance.now() - t0) / 1000;
    flooding = false;
    await Promise.all(flood);
    await loginPool.close();

    note('download latency: with 2,000 stalled connections');
    const sockets = [];
    const { port } = new URL(url);
    for (let a = 0; a < 40; a++) {
      const batch = await Promise.all(
        Array.from(
          { length: 50 },
          () =>
            new Promise((resolve) => {
              const s = net.connect(
                { host: '127.0.0.1', port, localAddress: `127.0.9.${a + 1}` },
                () => {
                  s.write('POST /files HTTP/1.1\r\nHost: x\r\n'); // and then nothing
                  resolve(s);
                },
              );
              s.on('error', () => resolve(s));
            }),
        ),
      );
      sockets.push(...batch);
    }
    const stalledOpen = sockets.filter((s) => !s.destroyed).length;
    // Measured within the 15 s the server gives a request's headers.
    const stalled = await sample(20);
    for (const s of sockets) s.destroy();
    return {
      download_idle_p50_ms: round(idle.p50, 1),
      download_idle_p95_ms: round(idle.p95, 1),
      download_flood_p50_ms: round(during.p50, 1),
      download_flood_p95_ms: round(during.p95, 1),
      flood_logins_per_s: round(outcome.ok / floodSeconds, 0),
      flood_busy_per_s: round(outcome.busy / floodSeconds, 0),
      flood_other: outcome.other,
      download_stalled_p50_ms: round(stalled.p50, 1),
      download_stalled_p95_ms: round(stalled.p95, 1),
      stalled_connections: stalledOpen,
    };
  } finally {
    await pool.close();
  }
}

// ---------------------------------------------------------------------------------------------
// Main

async function main() {
  await mkdir(opts.dir, { recursive: true });
  tmpRoot = await mkdtemp(join(opts.dir, 'fshare-bench-'));
  const dataDir = join(tmpRoot, 'data');
  const configDir = join(tmpRoot, 'config');
  const src = join(tmpRoot, 'source.bin');
  const size = opts.size;
  if (opts.profile) await mkdir(opts.profile, { recursive: true });

  // Source, cp's copy, chunks + joined content at the moment of the join; downloads one at a time.
  const fs = await statfs(tmpRoot);
  const free = fs.bavail * fs.bsize;
  const need = (opts.transfer ? 3 * size : 0) + 256 * MB;
  if (free < need)
    throw fail(
      `${tmpRoot} has ${(free / 1e9).toFixed(1)} GB free; this run needs about ${(need / 1e9).toFixed(1)} GB (try a smaller --size or --dir elsewhere)`,
    );
  if (opts.transfer && !commandExists('curl'))
    throw fail('curl is needed to measure the download baseline (apt-get install curl)');
  if (!useGnuTime) note(`${GNU_TIME} not found (apt-get install time): polling VmHWM instead`);
  if (!existsSync(join(ROOT, 'dist', 'bundle', 'main.js')))
    throw fail('dist/ is missing: run `npm run build` (npm run bench does it)');

  const extraCa = extraCaCerts(opts.keepExtraCa);
  note(extraCaNote(extraCa));
  const loadStart = loadavg();
  note(
    `node ${process.version}, ${cpus().length} CPUs, Linux ${release()}, load ${loadStart
      .map((x) => x.toFixed(2))
      .join(' ')}, temp dir ${tmpRoot}`,
  );

  const peaks = {};
  const rounds = [];
  let meta = {};

  let digest;
  let shaRate = null;
  if (opts.transfer) {
    note(`writing ${(size / MB).toFixed(0)} MB of random bytes`);
    digest = await makeRandomFile(src, size);
    note('single-core sha256 rate');
    shaRate = sha256Rate();
  }

  const adminPassword = randomBytes(18).toString('base64url');
  await startServer(dataDir, adminPassword);
  peaks.start = peakRss(server.pid);
  note(`server at ${server.url} (pid ${server.pid})`);
  const cliEnv = {
    ...process.env,
    FSHARE_CONFIG_DIR: configDir,
    FSHARE_KEYRING: 'off',
    FSHARE_SERVER: server.url,
  };
  delete cliEnv.FSHARE_TOKEN;
  const fshare = (args, options = {}) =>
    run(process.execPath, [...nodeFlags(), BIN, ...args], { env: cliEnv, ...options });

  checked(
    'fshare login',
    await fshare(['login', '-u', 'admin', '--password-stdin'], { input: `${adminPassword}\n` }),
  );
  const token = checked('fshare token', await fshare(['token'])).stdout.trim();
  if (!token) throw fail('fshare token printed nothing');
  note('server RSS idle, then after 100 sign-ins');
  const loginMemory = await loginRss(adminPassword, 100);
  const headerFile = join(tmpRoot, 'curl-headers');
  // From a 0600 file, not argv: a token on the command line shows in ps.
  await writeFile(headerFile, `Authorization: Bearer ${token}\n`, { mode: 0o600 });
  let nginx = null;
  if (opts.transfer && !opts.uploadOnly) {
    await mkdir(join(tmpRoot, 'www'), { recursive: true });
    nginx = await startNginx(join(tmpRoot, 'www'));
    if (nginx) await link(src, join(tmpRoot, 'www', 'source.bin'));
    else note('nginx is not installed (apt-get install nginx): no nginx baseline');
  }

  const plain = opts.transfer
    ? await startPlainServer(src, adminPassword, cliEnv, opts.uploadArgs)
    : null;
  for (let r = 1; opts.transfer && r <= opts.repeat; r++) {
    const rd = {};
    const tag = opts.repeat > 1 ? ` (round ${r} of ${opts.repeat})` : '';

    note(`cp + sync${tag}`);
    const cp = await measureCp(src, join(tmpRoot, 'copy.bin'));
    rd.cp_mb_s = mbps(size, cp.cp_s + cp.sync_s);
    rd.cp_nosync_mb_s = mbps(size, cp.cp_s);

    // curl -F goes before the fshare uploads in even rounds, after them in odd ones (order
    // matters by up to a third here: see the fshare get phase).
    const curlForm = async () => {
      note(`curl -F of the whole file as one chunk${tag}`);
      await settle();
      const form = await serverPhase(peaks, 'curl_form', () =>
        curlFormUpload(src, token, headerFile),
      );
      rd.curl_form_mb_s = mbps(size, form.seconds);
      rd.curl_form_cpu_s = form.cpu;
      rd.curl_form_s = form.seconds;
      rd.curl_form_server_cpu_s = form.serverCpu;
    };
    if (r % 2 === 0) await curlForm();

    note(`fshare upload ${opts.uploadArgs.join(' ') || '(defaults)'}${tag}`);
    await settle();
    const joinWatch = watchJoin(join(dataDir, 'tmp'));
    const up = await serverPhase(peaks, 'upload', async () =>
      checked(
        'fshare upload',
        await fshare(['upload', src, '--no-progress', '--json', ...opts.uploadArgs], {
          measureRss: true,
        }),
      ),
    );
    const joinStarted = joinWatch.stop();
    const uploaded = JSON.parse(up.stdout);
    const id = uploaded[0]?.share_id;
    if (!id || uploaded[0].size !== size) throw fail(`unexpected upload output: ${up.stdout}`);
    rd.upload_mb_s = mbps(size, up.seconds);
    rd.upload_cpu_s = up.cpu;
    rd.upload_s = up.seconds;
    rd.upload_server_cpu_s = up.serverCpu;
    rd.upload_join_s = joinStarted === null ? null : (up.ended - joinStarted) / 1000;
    rd.upload_rss = up.rss;

    note(`fshare upload to a server that hashes nothing${tag}`);
    await settle();
    const unhashed = await uploadWithoutDigest(plain, src);
    rd.upload_nodigest_mb_s = mbps(size, unhashed.seconds);
    rd.upload_nodigest_cpu_s = unhashed.cpu;
    rd.upload_nodigest_server_cpu_s = unhashed.serverCpu;
    rd.upload_vs_digest_bound = rd.upload_mb_s / Math.min(shaRate, rd.upload_nodigest_mb_s);
    // Verified, both ends hash: the client its file, the server what it stores.
    rd.upload_verified_bound = verifiedBound(
      size,
      shaRate,
      2,
      { client: rd.upload_nodigest_cpu_s, server: rd.upload_nodigest_server_cpu_s },
      { client: rd.upload_cpu_s, server: rd.upload_server_cpu_s },
      rd.upload_nodigest_mb_s,
    );

    if (r % 2 === 1) await curlForm();
    rd.upload_vs_curl_form = rd.upload_mb_s / rd.curl_form_mb_s;
    rd.upload_bound_vs_curl_form = uploadBound(rd, size, shaRate);
    rd.upload_cpu_vs_curl =
      rd.upload_cpu_s !== null && rd.curl_form_cpu_s ? rd.upload_cpu_s / rd.curl_form_cpu_s : null;
    rd.upload_nodigest_cpu_vs_curl =
      rd.upload_nodigest_cpu_s !== null && rd.curl_form_cpu_s
        ? rd.upload_nodigest_cpu_s / rd.curl_form_cpu_s
        : null;

    if (opts.uploadOnly) {
      checked('fshare rm', await fshare(['rm', id]));
      rd.upload_vs_cp = rd.upload_mb_s / rd.cp_mb_s;
      rounds.push(rd);
      continue;
    }

    // Twice, the faster kept, like fshare get below (every other file written is slower here).
    const curlOut = join(tmpRoot, 'curl.bin');
    for (let i = 0; i < 2; i++) {
      note(`curl GET content${tag}`);
      await settle();
      const curl = await serverPhase(peaks, 'curl_get', async () =>
        checked(
          'curl',
          await run(
            'curl',
            [
              '-sS',
              '-f',
              '-o',
              curlOut,
              '-H',
              `@${headerFile}`,
              `${server.url}/files/${id}/content`,
            ],
            { measureRss: true },
          ),
        ),
      );
      rd.curl_get_mb_s = Math.max(rd.curl_get_mb_s ?? 0, mbps(size, curl.seconds));
      rd.curl_rss = curl.rss;
      await verify(curlOut, digest, 'curl');
      await rm(curlOut, { force: true });
    }

    if (nginx) {
      note(`curl GET from nginx${tag}`);
      await settle();
      const ng = checked(
        'curl (nginx)',
        await run('curl', ['-sS', '-f', '-o', curlOut, `${nginx.url}/source.bin`]),
      );
      rd.nginx_get_mb_s = mbps(size, ng.seconds);
      rd.serve_vs_nginx = rd.curl_get_mb_s / rd.nginx_get_mb_s;
      await rm(curlOut, { force: true });
    }

    // fshare get with and without hashing, three times each per round in ABBAAB order, keeping
    // each one's fastest run: on this VM a 512 MiB file written can take 1 s more of system time,
    // whichever command writes it, depending on whether the hypervisor has taken the free memory
    // back (bench/README.md, "Order matters"), so each variant gets runs on either side of that.
    const getOut = join(tmpRoot, 'get.bin');
    const timedGet = async () => {
      note(`fshare get${tag}`);
      await settle();
      const get = await serverPhase(peaks, 'get', async () =>
        checked(
          'fshare get',
          await fshare(['get', id, '-o', getOut, '--no-progress'], { measureRss: true }),
        ),
      );
      const rate = mbps(size, get.seconds);
      if (!(rd.get_mb_s >= rate)) {
        rd.get_mb_s = rate;
        rd.get_cpu_s = get.cpu;
        rd.get_server_cpu_s = get.serverCpu;
      }
      rd.get_rss = Math.max(rd.get_rss ?? 0, get.rss ?? 0) || get.rss;
      note('verifying the downloaded bytes');
      await verify(getOut, digest, 'fshare get');
      await rm(getOut, { force: true });
    };
    const unhashedGet = async () => {
      note(`fshare get without hashing${tag}`);
      await settle();
      const plain = await serverPhase(peaks, 'get', async () =>
        checked(
          'fshare get (no hashing)',
          await run(
            process.execPath,
            [...nodeFlags(), BIN, 'get', id, '-o', getOut, '--no-progress'],
            { env: { ...cliEnv, FSHARE_BENCH_NO_DIGEST: '1' }, measureRss: true },
          ),
        ),
      );
      const rate = mbps(size, plain.seconds);
      if (!(rd.get_nohash_mb_s >= rate)) {
        rd.get_nohash_mb_s = rate;
        rd.get_nohash_cpu_s = plain.cpu;
        rd.get_nohash_server_cpu_s = plain.serverCpu;
      }
      await rm(getOut, { force: true });
    };
    const [first, second] = r % 2 === 1 ? [timedGet, unhashedGet] : [unhashedGet, timedGet];
    for (const step of [first, second, second, first, first, second]) await step();
    rd.get_vs_digest_bound = rd.get_mb_s / Math.min(shaRate, rd.get_nohash_mb_s);
    rd.get_verified_bound = verifiedBound(
      size,
      shaRate,
      1,
      { client: rd.get_nohash_cpu_s, server: rd.get_nohash_server_cpu_s },
      { client: rd.get_cpu_s, server: rd.get_server_cpu_s },
      rd.get_nohash_mb_s,
    );
    // Each round uploads a new share: drop this one so the disk holds one copy at a time.
    checked('fshare rm', await fshare(['rm', id]));
    rd.upload_vs_cp = rd.upload_mb_s / rd.cp_mb_s;
    rd.get_vs_curl = rd.get_mb_s / rd.curl_get_mb_s;
    rounds.push(rd);
  }
  if (opts.transfer) {
    // Issue 12's peak is "during any transfer": uploads one after another too, as a CI job pushes
    // its artifacts. The server's peak once rose with each of them (bench/README.md, "uploads in
    // a row"), which the rounds above, with other work between their uploads, did not show.
    note('three fshare uploads in a row');
    await settle();
    await serverPhase(peaks, 'uploads_in_a_row', async () => {
      for (let i = 0; i < 3; i++) {
        const res = checked(
          'fshare upload',
          await fshare(['upload', src, '--no-progress', '--json', ...opts.uploadArgs]),
        );
        checked('fshare rm', await fshare(['rm', JSON.parse(res.stdout)[0].share_id]));
      }
    });
  }
  if (nginx) await nginx.stop();
  if (plain) await stopServe(plain, { children, note });
  if (opts.transfer) await rm(src, { force: true });

  if (opts.meta) meta = await metadata(server.url, token, peaks);
  let abuse = {};
  if (opts.abuse) abuse = await underAbuse(server.url, token, adminPassword);

  // Last read before SIGTERM: the server's peak over its whole life is the largest phase peak.
  peaks.end = peakRss(server.pid);
  note('stopping the server');
  await stopServer();

  const phasePeaks = Object.entries(peaks).filter(([k, v]) => !k.startsWith('_') && v !== null);
  const serverPeak = Math.max(...phasePeaks.map(([, v]) => v));
  // Issue 4's RSS target is about moving 1 GiB: start-up and the transfer phases only.
  const transferPhases = phasePeaks.filter(([k]) =>
    ['start', 'upload', 'curl_form', 'curl_get', 'get', 'uploads_in_a_row'].includes(k),
  );
  const serverTransferPeak =
    opts.transfer && !peaks._monotonic ? Math.max(...transferPhases.map(([, v]) => v)) : null;
  // Issue 12's is the peak "during any transfer": the transfer phases without start-up (whose
  // peak is the first administrator's password hash, reported as `start`).
  const movingPhases = transferPhases.filter(([k]) => k !== 'start');
  const serverMovingPeak =
    opts.transfer && !peaks._monotonic && movingPhases.length
      ? Math.max(...movingPhases.map(([, v]) => v))
      : null;
  const med = (key) => {
    const values = rounds.map((r) => r[key]).filter((v) => v !== undefined && v !== null);
    return values.length ? median(values) : null;
  };
  const max = (key) => (rounds.length ? Math.max(...rounds.map((r) => r[key] ?? 0)) : null);
  const mb = (bytes) => (bytes ? round(bytes / MB) : null);
  const fshareRss = opts.transfer ? Math.max(max('upload_rss'), max('get_rss')) : null;
  const out = {
    cp_mb_s: round(med('cp_mb_s')),
    upload_mb_s: round(med('upload_mb_s')),
    upload_nodigest_mb_s: round(med('upload_nodigest_mb_s')),
    sha256_mb_s: round(shaRate),
    no_sha_ni: opts.noShaNi,
    plain_sha256: opts.plainSha,
    drop_caches: opts.dropCaches,
    // The verified-vs-unverified ratios are taken from the medians of each rate: the two runs
    // of a pair alternate in order from round to round, and a single pair swings with the order
    // (see bench/README.md); the median of the per-round ratios is kept as *_per_round.
    upload_vs_digest_bound: round(
      med('upload_mb_s') / Math.min(shaRate, med('upload_nodigest_mb_s')),
      3,
    ),
    upload_vs_digest_bound_per_round: round(med('upload_vs_digest_bound'), 3),
    // What no verified transfer could reach here, in the same units (see verifiedBound).
    upload_verified_bound: round(med('upload_verified_bound'), 3),
    get_verified_bound: round(med('get_verified_bound'), 3),
    upload_nodigest_server_cpu_s: round(med('upload_nodigest_server_cpu_s'), 2),
    get_nohash_cpu_s: round(med('get_nohash_cpu_s'), 2),
    get_nohash_server_cpu_s: round(med('get_nohash_server_cpu_s'), 2),
    curl_get_mb_s: round(med('curl_get_mb_s')),
    get_mb_s: round(med('get_mb_s')),
    server_peak_rss_mb: mb(serverPeak),
    cli_peak_rss_mb: mb(fshareRss),
    create_per_s: round(meta.create_per_s, 0),
    list_p50_ms: round(meta.list_p50_ms, 2),
    list_p99_ms: round(meta.list_p99_ms, 2),
    // Extras. Ratios are the median of each round's ratio (cp and upload run back to back).
    server_transfer_peak_rss_mb: mb(serverTransferPeak),
    server_moving_peak_rss_mb: mb(serverMovingPeak),
    server_idle_rss_mb: mb(loginMemory.idle),
    server_idle_rss_series_mb: loginMemory.idleSeries,
    server_logins_rss_mb: mb(loginMemory.logins),
    server_logins_peak_rss_mb: mb(loginMemory.peak),
    shares_rss_mb: mb(meta.shares_rss),
    shares_peak_rss_mb: mb(meta.shares_peak_rss),
    curl_form_mb_s: round(med('curl_form_mb_s')),
    upload_vs_curl_form: round(med('upload_vs_curl_form'), 3),
    upload_cpu_s: round(med('upload_cpu_s'), 2),
    curl_form_cpu_s: round(med('curl_form_cpu_s'), 2),
    upload_cpu_vs_curl: round(med('upload_cpu_vs_curl'), 2),
    // What no verifying client can beat on this machine (see uploadBound): the most its upload
    // can reach against curl -F, and the least CPU its client spends against curl's: reading the
    // file and writing it to the server, as uploadBound counts it, plus its sha256.
    cores: availableParallelism(),
    upload_bound_vs_curl_form: round(med('upload_bound_vs_curl_form'), 3),
    upload_sha256_vs_curl:
      med('curl_form_cpu_s') && shaRate
        ? round(size / MB / shaRate / med('curl_form_cpu_s'), 2)
        : null,
    upload_cpu_bound_vs_curl:
      med('curl_form_cpu_s') && shaRate && med('upload_cpu_s') !== null
        ? round(
            (leastSendCpu(
              { curl_form_cpu_s: med('curl_form_cpu_s'), upload_cpu_s: med('upload_cpu_s') },
              size / MB / shaRate,
            ) +
              size / MB / shaRate) /
              med('curl_form_cpu_s'),
            2,
          )
        : null,
    curl_form_server_cpu_s: round(med('curl_form_server_cpu_s'), 2),
    upload_server_cpu_s: round(med('upload_server_cpu_s'), 2),
    // A verified get cannot end before one thread has hashed every byte.
    get_bound_vs_curl:
      med('curl_get_mb_s') && shaRate ? round(shaRate / med('curl_get_mb_s'), 3) : null,
    get_nohash_vs_curl:
      med('curl_get_mb_s') && med('get_nohash_mb_s')
        ? round(med('get_nohash_mb_s') / med('curl_get_mb_s'), 3)
        : null,
    upload_nodigest_cpu_vs_curl: round(med('upload_nodigest_cpu_vs_curl'), 2),
    upload_nodigest_cpu_s_per_gib: round((med('upload_nodigest_cpu_s') * 2 ** 30) / size, 2),
    upload_cpu_s_per_gib: round((med('upload_cpu_s') * 2 ** 30) / size, 2),
    curl_form_cpu_s_per_gib: round((med('curl_form_cpu_s') * 2 ** 30) / size, 2),
    nginx_get_mb_s: round(med('nginx_get_mb_s')),
    serve_vs_nginx: round(med('serve_vs_nginx'), 3),
    get_nohash_mb_s: round(med('get_nohash_mb_s')),
    get_vs_digest_bound:
      med('get_mb_s') === null
        ? null
        : round(med('get_mb_s') / Math.min(shaRate, med('get_nohash_mb_s')), 3),
    get_vs_digest_bound_per_round: round(med('get_vs_digest_bound'), 3),
    get_cpu_s: round(med('get_cpu_s'), 2),
    upload_vs_cp: round(med('upload_vs_cp'), 3),
    get_vs_curl: round(med('get_vs_curl'), 3),
    cp_nosync_mb_s: round(med('cp_nosync_mb_s')),
    upload_s: round(med('upload_s'), 2),
    upload_join_s: rounds.every((r) => r.upload_join_s !== null)
      ? round(med('upload_join_s'), 2)
      : null,
    upload_rss_mb: mb(max('upload_rss')),
    get_rss_mb: mb(max('get_rss')),
    curl_rss_mb: mb(max('curl_rss')),
    server_rss_by_phase_mb: peaks._monotonic
      ? 'VmHWM reset unavailable: cumulative'
      : Object.fromEntries(phasePeaks.map(([k, v]) => [k, mb(v)])),
    create_p50_ms: round(meta.create_p50_ms, 2),
    create_p99_ms: round(meta.create_p99_ms, 2),
    list_max_ms: round(meta.list_max_ms, 2),
    list_pages: meta.list_pages ?? null,
    ...abuse,
    size_bytes: opts.transfer ? size : null,
    repeat: opts.transfer ? opts.repeat : null,
    rounds: rounds.map((r) => ({
      cp_mb_s: round(r.cp_mb_s),
      upload_mb_s: round(r.upload_mb_s),
      upload_nodigest_mb_s: round(r.upload_nodigest_mb_s),
      curl_get_mb_s: round(r.curl_get_mb_s),
      get_mb_s: round(r.get_mb_s),
      get_nohash_mb_s: round(r.get_nohash_mb_s),
      curl_form_mb_s: round(r.curl_form_mb_s),
      upload_bound_vs_curl_form: round(r.upload_bound_vs_curl_form, 3),
      upload_join_s: round(r.upload_join_s, 2),
    })),
    shares: opts.meta ? opts.shares : null,
    per_page: opts.perPage,
    upload_args: opts.uploadArgs.join(' ') || 'defaults',
    rss_method: useGnuTime ? 'GNU time %M (ru_maxrss)' : 'VmHWM polled every 20 ms',
    loadavg_start: loadStart.map((x) => round(x, 2)),
    loadavg_end: loadavg().map((x) => round(x, 2)),
    node_extra_ca_certs: extraCa,
    units: 'MB = 10^6 bytes',
  };
  return out;
}

function targets(r) {
  const met = (ok) => (ok === null ? 'n/a' : ok ? 'met' : 'MISSED');
  const have = (...xs) => xs.every((x) => x !== null && x !== undefined);
  const atLeast = (x, t) => met(have(x) ? x >= t : null);
  const atMost = (x, t) => met(have(x) ? x <= t : null);
  // A missed target that no verifying client could meet here says so, with the bound.
  const boundedLeast = (x, t, bound) =>
    have(x, bound) && x < t && bound < t ? `MISSED, bound ${bound} < ${t}` : atLeast(x, t);
  const boundedMost = (x, t, bound) =>
    have(x, bound) && x > t && bound > t ? `MISSED, bound ${bound} > ${t}` : atMost(x, t);
  return [
    [
      'upload ≥ 0.9 × curl -F of one chunk',
      `${r.upload_vs_curl_form} × ${r.curl_form_mb_s} MB/s; any verified upload ≤ ${r.upload_bound_vs_curl_form} × on ${r.cores} cores`,
      boundedLeast(r.upload_vs_curl_form, TARGETS.upload_vs_curl_form, r.upload_bound_vs_curl_form),
    ],
    [
      'upload client CPU ≤ 3 × curl -F',
      `${r.upload_cpu_vs_curl} × (${r.upload_cpu_s_per_gib} vs ${r.curl_form_cpu_s_per_gib} s/GiB); its sha256 alone ${r.upload_sha256_vs_curl} ×, with curl's own work ${r.upload_cpu_bound_vs_curl} ×`,
      boundedMost(r.upload_cpu_vs_curl, TARGETS.upload_cpu_vs_curl, r.upload_cpu_bound_vs_curl),
    ],
    [
      'serve → curl ≥ 0.8 × nginx → curl',
      r.nginx_get_mb_s ? `${r.serve_vs_nginx} × ${r.nginx_get_mb_s} MB/s` : 'no nginx',
      atLeast(r.serve_vs_nginx, TARGETS.serve_vs_nginx),
    ],
    [
      'fshare get ≥ 0.9 × curl',
      `${r.get_vs_curl} × curl (unhashed ${r.get_nohash_vs_curl} ×); any verified get ≤ ${r.get_bound_vs_curl} ×`,
      boundedLeast(r.get_vs_curl, TARGETS.get_vs_curl, r.get_bound_vs_curl),
    ],
    [
      'verified upload ≥ 0.8 × min(sha256, unhashed upload)',
      `${r.upload_vs_digest_bound} × min(${r.sha256_mb_s}, ${r.upload_nodigest_mb_s}); any ≤ ${r.upload_verified_bound} ×`,
      boundedLeast(
        r.upload_vs_digest_bound,
        TARGETS.upload_vs_digest_bound,
        r.upload_verified_bound,
      ),
    ],
    [
      'verified get ≥ 0.8 × min(sha256, unhashed get)',
      `${r.get_vs_digest_bound} × min(${r.sha256_mb_s}, ${r.get_nohash_mb_s}); any ≤ ${r.get_verified_bound} ×`,
      boundedLeast(r.get_vs_digest_bound, TARGETS.get_vs_digest_bound, r.get_verified_bound),
    ],
    [
      'serve RSS idle ≤ 70 MB',
      `${r.server_idle_rss_mb} MB`,
      atMost(r.server_idle_rss_mb, TARGETS.server_idle_rss_mb),
    ],
    [
      'serve RSS after 100 sign-ins ≤ 90 MB',
      `${r.server_logins_rss_mb} MB`,
      atMost(r.server_logins_rss_mb, TARGETS.server_logins_rss_mb),
    ],
    [
      'serve peak RSS in a transfer ≤ 110 MB',
      `${r.server_moving_peak_rss_mb} MB`,
      atMost(r.server_moving_peak_rss_mb, TARGETS.server_transfer_rss_mb),
    ],
    [
      'CLI peak RSS ≤ 100 MB',
      `${r.cli_peak_rss_mb} MB`,
      atMost(r.cli_peak_rss_mb, TARGETS.cli_rss_mb),
    ],
    [
      `serve RSS holding ${r.shares} shares ≤ 200 MB`,
      `${r.shares_rss_mb} MB`,
      atMost(r.shares_rss_mb, TARGETS.shares_rss_mb),
    ],
    [
      'creates ≥ 2,000/s (16 in flight, durable)',
      `${r.create_per_s}/s`,
      atLeast(r.create_per_s, TARGETS.create_per_s),
    ],
    [
      `list p99 ≤ 10 ms (per_page ${r.per_page})`,
      `${r.list_p99_ms} ms`,
      atMost(r.list_p99_ms, TARGETS.list_p99_ms),
    ],
    [
      'upload ≥ 0.6 × cp (issue 4)',
      `${r.upload_vs_cp} × cp`,
      atLeast(r.upload_vs_cp, TARGETS.upload_vs_cp),
    ],
  ];
}

function table(r) {
  const rows = [
    ['cp + sync (disk limit)', `${r.cp_mb_s} MB/s`, `cp alone ${r.cp_nosync_mb_s} MB/s`],
    ['fshare upload', `${r.upload_mb_s} MB/s`, `${r.upload_vs_cp} × cp (${r.upload_args})`],
    [
      'fshare upload, nothing hashed',
      `${r.upload_nodigest_mb_s} MB/s`,
      `FSHARE_BENCH_NO_DIGEST=1; client CPU ${r.upload_nodigest_cpu_s_per_gib} s/GiB, ${r.upload_nodigest_cpu_vs_curl} × curl`,
    ],
    [
      'sha256, one core',
      `${r.sha256_mb_s} MB/s`,
      `in memory, best of 3${r.plain_sha256 ? ', plain x86-64 code' : r.no_sha_ni ? ', no SHA instructions' : ''}`,
    ],
    [
      'curl -F, one chunk',
      `${r.curl_form_mb_s} MB/s`,
      `client CPU ${r.curl_form_cpu_s_per_gib} s/GiB (fshare upload ${r.upload_cpu_s_per_gib}); server CPU ${r.curl_form_server_cpu_s} s (fshare upload ${r.upload_server_cpu_s})`,
    ],
    ['curl GET content', `${r.curl_get_mb_s} MB/s`, `curl RSS ${r.curl_rss_mb} MB`],
    ['curl GET from nginx', r.nginx_get_mb_s ? `${r.nginx_get_mb_s} MB/s` : 'n/a', 'sendfile on'],
    ['fshare get', `${r.get_mb_s} MB/s`, `${r.get_vs_curl} × curl`],
    ['fshare get, no hashing', `${r.get_nohash_mb_s} MB/s`, 'FSHARE_BENCH_NO_DIGEST=1'],
    [
      'serve RSS idle / after 100 sign-ins',
      `${r.server_idle_rss_mb} / ${r.server_logins_rss_mb} MB`,
      `VmRSS 20 s after the last request (idle: ${r.server_idle_rss_series_mb?.[4]} at 5 s, ${r.server_idle_rss_series_mb?.[11]} at 12 s); peak while signing in ${r.server_logins_peak_rss_mb} MB`,
    ],
    [
      'serve RSS holding the shares',
      `${r.shares_rss_mb} MB`,
      `${r.shares} shares, lowest over 30 s after the creates; peak during them ${r.shares_peak_rss_mb} MB`,
    ],
    [
      'server peak RSS (whole run)',
      `${r.server_peak_rss_mb} MB`,
      typeof r.server_rss_by_phase_mb === 'object'
        ? Object.entries(r.server_rss_by_phase_mb)
            .map(([k, v]) => `${k} ${v}`)
            .join(', ')
        : r.server_rss_by_phase_mb,
    ],
    [
      'server peak RSS (transfers)',
      `${r.server_moving_peak_rss_mb} MB`,
      `upload, curl, get; with start-up ${r.server_transfer_peak_rss_mb} MB`,
    ],
    ['CLI peak RSS', `${r.cli_peak_rss_mb} MB`, `upload ${r.upload_rss_mb}, get ${r.get_rss_mb}`],
    ['creates', `${r.create_per_s}/s`, `p50 ${r.create_p50_ms} ms, p99 ${r.create_p99_ms} ms`],
    ['list p50', `${r.list_p50_ms} ms`, `${r.list_pages} pages of ${r.per_page}`],
    ['list p99', `${r.list_p99_ms} ms`, `max ${r.list_max_ms} ms`],
    ...(r.download_idle_p50_ms === undefined
      ? []
      : [
          [
            '8 MiB download, idle',
            `${r.download_idle_p50_ms} ms`,
            `p95 ${r.download_idle_p95_ms} ms`,
          ],
          [
            '… during a sign-in flood',
            `${r.download_flood_p50_ms} ms`,
            `p95 ${r.download_flood_p95_ms} ms; ${r.flood_logins_per_s} sign-ins/s, ${r.flood_busy_per_s}/s answered 503`,
          ],
          [
            '… with stalled connections',
            `${r.download_stalled_p50_ms} ms`,
            `p95 ${r.download_stalled_p95_ms} ms; ${r.stalled_connections} connections stalled`,
          ],
        ]),
  ];
  const fmt = (rows, header) => {
    const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
    const line = (cells) =>
      cells
        .map((c, i) => c.padEnd(widths[i]))
        .join('  ')
        .trimEnd();
    return [line(header), line(widths.map((w) => '-'.repeat(w))), ...rows.map(line)].join('\n');
  };
  const size = r.size_bytes ? `${(r.size_bytes / 2 ** 20).toFixed(0)} MiB file` : 'no transfer';
  return (
    `fshare benchmark (${size}, ${r.repeat ?? 0} round(s)${r.drop_caches ? ', page cache dropped before each phase' : ''}; MB = 10^6 bytes; RSS by ${r.rss_method})\n\n` +
    fmt(rows, ['measure', 'value', 'detail']) +
    '\n\n' +
    fmt(targets(r), ['target', 'measured', 'status']) +
    `\n\n${extraCaNote(r.node_extra_ca_certs)}\n`
  );
}

try {
  const result = await main();
  process.stdout.write(opts.json ? `${JSON.stringify(result, null, 2)}\n` : table(result));
  await cleanup();
} catch (err) {
  const detail = err.benchFailure ? err.message : (err.stack ?? String(err));
  process.stderr.write(`bench: failed: ${detail}\n`);
  if (server?.stderr.trim())
    process.stderr.write(`bench: server stderr:\n${server.stderr.trim()}\n`);
  await cleanup();
  process.exitCode = 1;
}
