#!/usr/bin/env node
// fshare scale-out benchmark (issue 15): the same transfers and creates against three setups,
// side by side in one run: the embedded server (data directory), one server on PostgreSQL and
// s3rver, and two servers on the same database and bucket behind a round-robin balancer. Plain
// Node ESM; `npm run bench:scale` builds dist/ first. See bench/README.md, "scale-out".
//
//   npm run bench:scale                               256 MiB, 3 runs, prints the tables
//   npm run bench:scale -- --write-readme             also writes them into bench/README.md
//   npm run -s bench:scale -- --json | jq .           one JSON object on stdout
//
// Units: MB = 10^6 bytes, GB = 10^9 bytes, MiB = 2^20. Progress notes go to stderr.

import { spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, statfs, writeFile } from 'node:fs/promises';
import { cpus, loadavg, release, tmpdir, totalmem } from 'node:os';
import { dirname, join, relative, resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { Pool } from 'undici';
import {
  S3_ENV,
  machineCpu,
  memory,
  startBalancer,
  startPostgres,
  startS3,
  usage,
} from './backends.mjs';
import {
  extraCaCerts,
  extraCaNote,
  fail,
  makeRandomFile,
  median,
  note,
  parseSize,
  sha256File,
  sleep,
} from './common.mjs';
import { startServe, stopServe } from './serve.mjs';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const BIN = join(ROOT, 'bin', 'fshare.js');
const README = join(ROOT, 'bench', 'README.md');
const SECTION = '## Latest results: scale-out (issue 15)';
/** Hand-written analysis under the section; kept as it is when the section is rewritten. */
const KEPT = '### What limits each figure';
const MB = 1e6;
const GB = 1e9;
const GNU_TIME = '/usr/bin/time';

const CONFIGS = {
  embedded: 'embedded',
  pg1: 'PostgreSQL + s3rver, 1 server',
  pg2: 'PostgreSQL + s3rver, 2 servers',
};

const USAGE = `usage: node bench/scale.mjs [options]   (or: npm run bench:scale -- [options])

  --size SIZE        file uploaded and downloaded (default 256m; binary units)
  --runs N           runs of every measurement; medians are reported (default 3)
  --creates N        shares created per run and setup (default 2000)
  --in-flight N      concurrent create requests, keep-alive (default 16)
  --clients N        uploads at once in the concurrent phase (default 4; 0 leaves it out)
  --configs LIST     comma-separated subset of ${Object.keys(CONFIGS).join(',')} (default all)
  --dir DIR          where the temporary directory goes (default: the OS temp dir)
  --profile DIR      run the servers, s3rver and the balancer under node --cpu-prof, profiles
                     into DIR (then: node bench/profile-top.mjs DIR/*.cpuprofile); slower
  --json             print one JSON object on stdout instead of the tables
  --write-readme     replace (or append) the section "${SECTION.slice(3)}" in bench/README.md
  --keep-extra-ca    keep NODE_EXTRA_CA_CERTS for the processes measured (removed by default:
                     Node parses that bundle at every start)
  -h, --help`;

// ---------------------------------------------------------------------------------------------
// Options

function count(text, name, min = 1) {
  const n = Number(text);
  if (!/^\d+$/.test(String(text)) || n < min) throw fail(`${name} must be an integer ≥ ${min}`);
  return n;
}

let opts;
try {
  const { values } = parseArgs({
    options: {
      size: { type: 'string', default: '256m' },
      runs: { type: 'string', default: '3' },
      creates: { type: 'string', default: '2000' },
      'in-flight': { type: 'string', default: '16' },
      clients: { type: 'string', default: '4' },
      profile: { type: 'string' },
      configs: { type: 'string', default: Object.keys(CONFIGS).join(',') },
      dir: { type: 'string' },
      json: { type: 'boolean', default: false },
      'write-readme': { type: 'boolean', default: false },
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
  if (size === null) throw fail(`not a size: ${values.size} (try 256m or 1g)`);
  const configs = values.configs.split(',').map((c) => c.trim());
  for (const c of configs) if (!CONFIGS[c]) throw fail(`unknown setup in --configs: ${c}`);
  opts = {
    size,
    runs: count(values.runs, '--runs'),
    creates: count(values.creates, '--creates'),
    inFlight: count(values['in-flight'], '--in-flight'),
    clients: count(values.clients, '--clients', 0),
    profile: values.profile ? resolve(values.profile) : null,
    configs: Object.keys(CONFIGS).filter((c) => configs.includes(c)),
    dir: resolve(values.dir ?? tmpdir()),
    json: values.json,
    keepExtraCa: values['keep-extra-ca'],
    writeReadme: values['write-readme'],
  };
  if (opts.profile && opts.writeReadme)
    throw fail('--profile slows every process down: its figures do not go into the README');
} catch (err) {
  process.stderr.write(`bench: ${err.message}\n${USAGE}\n`);
  process.exit(2);
}

// ---------------------------------------------------------------------------------------------
// Small helpers

const round = (x, digits = 1) =>
  x === null || x === undefined || !Number.isFinite(x) ? null : Number(x.toFixed(digits));
const mbps = (bytes, seconds) => bytes / MB / seconds;
const useGnuTime = existsSync(GNU_TIME);

// ---------------------------------------------------------------------------------------------
// Child processes and clean-up: every process and service is tracked, so that a failure or
// Ctrl-C stops all of it and removes the temp directories.

const children = new Set();
const services = []; // { stop() } of PostgreSQL, s3rver, balancers; stopped last to first
const servers = []; // startServe results still running
let tmpRoot;
let interrupted = false;

/** Runs a command to completion under GNU time (when installed): wall time and CPU seconds. */
async function run(cmd, args, { env } = {}) {
  const timeFile = useGnuTime ? join(tmpRoot, `time-${randomBytes(4).toString('hex')}`) : null;
  const [file, argv] = timeFile
    ? [GNU_TIME, ['-f', '%U %S %M', '-o', timeFile, cmd, ...args]]
    : [cmd, args];
  const started = performance.now();
  const child = spawn(file, argv, { env, stdio: ['ignore', 'pipe', 'pipe'] });
  children.add(child);
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d) => (stdout += d));
  child.stderr.on('data', (d) => (stderr += d));
  const code = await new Promise((resolve, reject) => {
    child.once('error', reject);
    child.once('close', (c, signal) => resolve(c ?? signal));
  });
  const seconds = (performance.now() - started) / 1000;
  children.delete(child);
  let cpu = null;
  let rss = null;
  if (timeFile) {
    const line = (await readFile(timeFile, 'utf8').catch(() => '')).trim().split('\n').at(-1);
    const [user, sys, kb] = (line ?? '').split(' ').map(Number);
    if (Number.isFinite(user) && Number.isFinite(sys)) cpu = user + sys;
    if (Number.isFinite(kb)) rss = kb * 1024;
    await rm(timeFile, { force: true });
  }
  if (code !== 0) {
    const why = stderr.trim().split('\n').slice(-5).join('\n  ');
    throw fail(`${cmd} ${args.slice(0, 3).join(' ')} … exited with ${code}:\n  ${why}`);
  }
  return { stdout, stderr, seconds, cpu, rss };
}

let cleaning = null;
function cleanup() {
  cleaning ??= (async () => {
    for (const child of children)
      if (!servers.some((s) => s.child === child)) child.kill('SIGTERM');
    await Promise.all(servers.splice(0).map((s) => stopServe(s, { children, note })));
    for (const service of services.splice(0).reverse()) await service.stop().catch(() => {});
    if (tmpRoot) await rm(tmpRoot, { recursive: true, force: true }).catch(() => {});
  })();
  return cleaning;
}

for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
  process.on(signal, () => {
    interrupted = true;
    note(`${signal}: cleaning up`);
    void cleanup().finally(() => process.exit(130));
  });
}

// ---------------------------------------------------------------------------------------------
// The setups

/**
 * Starts one `fshare serve` and keeps every line of its stderr that is not empty (startServe
 * keeps only the tail), so errors the server logs during the run can be reported.
 */
async function serve(name, args, env) {
  const dataDir = join(tmpRoot, `data-${name}`);
  const s = await startServe({
    bin: BIN,
    dataDir,
    adminPassword,
    env,
    args,
    nodeFlags: nodeFlags(),
    children,
    fail,
  });
  servers.push(s);
  s.name = name;
  s.errorLines = [];
  let partial = '';
  s.child.stderr.on('data', (d) => {
    const lines = (partial + d).split('\n');
    partial = lines.pop();
    for (const l of lines)
      if (l.trim() && !s.stopping && s.errorLines.length < 200)
        s.errorLines.push(`[${phaseNow}] ${l}`);
  });
  return s;
}

let adminPassword;
/** The phase running now, to tell when a server or client wrote something to stderr. */
let phaseNow = 'start-up';
/** What CLIs wrote to stderr (with --no-progress, only warnings, retries and errors). */
const clientLines = [];
/** What s3rver wrote to stderr: its 5xx answers. */
const s3Lines = [];

function phase(name, message) {
  phaseNow = name;
  if (message) note(message);
}
/** Node flags for the servers, s3rver and the balancer: the CPU profiler with --profile. */
const nodeFlags = () => (opts.profile ? ['--cpu-prof', '--cpu-prof-dir', opts.profile] : []);
/** PostgreSQL and s3rver, shared by the setups that use them (each has its own database, bucket). */
const backends = {};

/**
 * Starts a setup: `{ key, label, url, servers, components, balancer? }`, where `components` are
 * the processes whose CPU and disk I/O are measured in every phase.
 */
async function startConfig(key, backends, index) {
  if (key === 'embedded') {
    const s = await serve('embedded', [], {});
    return { key, label: CONFIGS[key], url: s.url, servers: [s], components: [proc('server', s)] };
  }
  const dbName = `fshare_bench_${index}`;
  const database = await backends.pg.createDatabase(dbName);
  const bucket = await backends.s3.createBucket(`fshare-bench-${index}`);
  const args = [
    '--database',
    database,
    '--storage',
    bucket,
    '--s3-endpoint',
    backends.s3.endpoint,
    '--s3-force-path-style',
  ];
  const env = { ...S3_ENV, AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true' };
  const shared = [
    { name: 's3rver', pid: backends.s3.pid },
    { name: 'postgres', pid: backends.pg.pid, tree: true },
  ];
  if (key === 'pg1') {
    const s = await serve(key, args, env);
    return {
      key,
      label: CONFIGS[key],
      url: s.url,
      servers: [s],
      dbName,
      components: [proc('server', s), ...shared],
    };
  }
  // Two servers on one new database: the first one fully up (schema, administrator) first.
  // Behind the balancer, as in production: client addresses from its X-Forwarded-For.
  const behind = [...args, '--trust-proxy', 'loopback'];
  const a = await serve(`${key}-a`, behind, env);
  const b = await serve(`${key}-b`, behind, env);
  const balancer = await startBalancer([a.url, b.url], { nodeFlags: nodeFlags() });
  services.push({ stop: () => balancer.close() });
  return {
    key,
    label: CONFIGS[key],
    url: balancer.url,
    servers: [a, b],
    dbName,
    balancer,
    components: [
      proc('server 1', a),
      proc('server 2', b),
      { name: 'balancer', pid: balancer.pid },
      ...shared,
    ],
  };
}

const proc = (name, s) => ({ name, pid: s.pid });

async function login(url) {
  const res = await fetch(`${url}/users/login`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ username: 'admin', password: adminPassword }),
  });
  const body = await res.json().catch(() => ({}));
  if (res.status !== 200 || !body.auth_token)
    throw fail(`sign-in at ${url} → HTTP ${res.status}: ${JSON.stringify(body)}`);
  return body.auth_token;
}

// ---------------------------------------------------------------------------------------------
// Measurement

/** CPU seconds and disk bytes of every component of a setup, now. */
function snapshot(cfg) {
  const out = {};
  for (const c of cfg.components) out[c.name] = usage(c.pid, { tree: c.tree });
  return out;
}

/**
 * Runs `fn` and measures, over it, the wall time, each component's CPU seconds and file bytes
 * written (gross, and net of what was deleted before it reached the disk), and the PostgreSQL
 * statements of the setup's database; `fn` resolves with `{ clientCpu, ... }`, the client's CPU.
 */
async function measured(cfg, fn) {
  // The statement counts are read outside the CPU window: the query is the benchmark's.
  const statements0 = cfg.dbName ? await backends.pg.statements(cfg.dbName) : null;
  const before = snapshot(cfg);
  const machine0 = machineCpu();
  const t0 = performance.now();
  const result = await fn();
  const seconds = (performance.now() - t0) / 1000;
  const machine1 = machineCpu();
  const after = snapshot(cfg);
  const statements = cfg.dbName ? (await backends.pg.statements(cfg.dbName)) - statements0 : null;
  const cpu = {};
  const written = {};
  const reached = {};
  for (const c of cfg.components) {
    const [a, b] = [after[c.name], before[c.name]];
    if (!a || !b) throw fail(`${c.name} of "${cfg.label}" died during the run`);
    cpu[c.name] = a.cpu - b.cpu;
    written[c.name] = a.write - b.write;
    reached[c.name] = a.write - a.cancelled - (b.write - b.cancelled);
  }
  cpu.client = result.clientCpu ?? null;
  // The machine as a whole over the phase, in cores: all of it busy, and the part that is not
  // this setup's processes (other sessions on the shared VM, the benchmark's own waiting).
  const ours = Object.values(cpu).reduce((sum, x) => sum + (x ?? 0), 0);
  const busy = machine1.busy - machine0.busy;
  const machine = {
    busy_cores: busy / seconds,
    others_cores: Math.max(0, busy - ours) / seconds,
    iowait_cores: (machine1.iowait - machine0.iowait) / seconds,
  };
  return {
    ...result,
    seconds,
    seconds_: { wall: seconds },
    cpu,
    written,
    reached,
    statements,
    machine,
  };
}

async function settle() {
  spawnSync('sync');
  await sleep(300);
}

/** Each concurrent client has a config directory of its own, as on machines of their own. */
function cliEnv(cfg, client = 0) {
  const env = {
    ...process.env,
    FSHARE_CONFIG_DIR: join(tmpRoot, `config-${client}`),
    FSHARE_KEYRING: 'off',
    FSHARE_SERVER: cfg.url,
    FSHARE_TOKEN: cfg.token,
  };
  return env;
}

async function fshare(cfg, args, client = 0) {
  const r = await run(process.execPath, [BIN, ...args], { env: cliEnv(cfg, client) });
  for (const l of r.stderr.split('\n'))
    if (l.trim() && clientLines.length < 200)
      clientLines.push(`[${cfg.key}, ${phaseNow}] fshare ${args[0]}: ${l}`);
  return r;
}

async function deleteShare(cfg, id) {
  const res = await fetch(`${cfg.url}/files/${id}`, {
    method: 'DELETE',
    headers: { authorization: `Bearer ${cfg.token}` },
  });
  await res.arrayBuffer();
  if (res.status >= 300) throw fail(`DELETE /files/${id} → HTTP ${res.status}`);
}

async function verify(path, what) {
  if ((await sha256File(path)) !== source.digest)
    throw fail(`${what}: the downloaded bytes differ from the source (SHA-256)`);
  await rm(path, { force: true });
}

async function upload(cfg) {
  await settle();
  const m = await measured(cfg, async () => {
    const up = await fshare(cfg, ['upload', source.path, '--no-progress', '--json']);
    return { clientCpu: up.cpu, out: up.stdout };
  });
  const share = JSON.parse(m.out)[0];
  if (share?.size !== opts.size) throw fail(`unexpected upload output: ${m.out}`);
  if (share.sha256 && share.sha256 !== source.digest)
    throw fail(`the server's sha256 of the upload differs from the source's: ${share.sha256}`);
  return { ...m, id: share.share_id, mb_s: mbps(opts.size, m.seconds) };
}

async function get(cfg, id) {
  const out = join(tmpRoot, 'get.bin');
  await settle();
  const m = await measured(cfg, async () => {
    const r = await fshare(cfg, ['get', id, '-o', out, '--no-progress']);
    return { clientCpu: r.cpu };
  });
  await verify(out, 'fshare get');
  return { ...m, mb_s: mbps(opts.size, m.seconds) };
}

async function curl(cfg, id) {
  const out = join(tmpRoot, 'curl.bin');
  await settle();
  const m = await measured(cfg, async () => {
    const r = await run('curl', [
      '-sS',
      '-f',
      '-L',
      '-o',
      out,
      '-H',
      `@${headerFile(cfg)}`,
      `${cfg.url}/files/${id}/content`,
    ]);
    return { clientCpu: r.cpu };
  });
  await verify(out, 'curl');
  return { ...m, mb_s: mbps(opts.size, m.seconds) };
}

const headerFile = (cfg) => join(tmpRoot, `headers-${cfg.key}`);

/** `--creates` POST /files with `--in-flight` workers on keep-alive connections (as run.mjs). */
async function creates(cfg, round) {
  const pool = new Pool(cfg.url, {
    connections: opts.inFlight,
    pipelining: 1,
    keepAliveTimeout: 60_000,
  });
  const headers = { authorization: `Bearer ${cfg.token}`, 'content-type': 'application/json' };
  const statuses = {};
  try {
    const m = await measured(cfg, async () => {
      const cpu0 = process.cpuUsage();
      let next = 0;
      const worker = async () => {
        while (next < opts.creates) {
          const i = next++;
          const res = await pool.request({
            path: '/files',
            method: 'POST',
            headers,
            body: JSON.stringify({ file_name: `scale-${round}-${String(i).padStart(5, '0')}.txt` }),
          });
          const text = await res.body.text();
          statuses[res.statusCode] = (statuses[res.statusCode] ?? 0) + 1;
          if (res.statusCode !== 201) throw fail(`POST /files → ${res.statusCode}: ${text}`);
        }
      };
      await Promise.all(Array.from({ length: opts.inFlight }, worker));
      const { user, system } = process.cpuUsage(cpu0);
      return { clientCpu: (user + system) / 1e6 };
    });
    return { ...m, per_s: opts.creates / m.seconds };
  } finally {
    await pool.close();
  }
}

/** `--clients` uploads of the file at once: the aggregate rate, from first spawn to last exit. */
async function concurrent(cfg) {
  await settle();
  const m = await measured(cfg, async () => {
    const ups = await Promise.all(
      Array.from({ length: opts.clients }, (_, i) =>
        fshare(cfg, ['upload', source.path, '--no-progress', '--json'], i),
      ),
    );
    return { clientCpu: ups.reduce((sum, u) => sum + (u.cpu ?? 0), 0), outs: ups };
  });
  const shares = m.outs.map((u) => JSON.parse(u.stdout)[0]);
  for (const s of shares) {
    if (s?.size !== opts.size) throw fail(`unexpected upload output: ${JSON.stringify(s)}`);
    if (s.sha256 && s.sha256 !== source.digest)
      throw fail('a concurrent upload has a wrong sha256');
  }
  const slowest = Math.max(...m.outs.map((u) => u.seconds));
  for (const s of shares) await deleteShare(cfg, s.share_id);
  delete m.outs;
  return {
    ...m,
    mb_s: mbps(opts.clients * opts.size, m.seconds),
    per_client_mb_s: mbps(opts.size, slowest),
  };
}

/** Resident set of every server: now, and its peak so far (VmHWM). */
function serverMemory(cfg) {
  return Object.fromEntries(cfg.servers.map((s) => [s.name, memory(s.pid)]));
}

// ---------------------------------------------------------------------------------------------
// Machine facts

function machine() {
  const cpuList = cpus();
  const git = (...args) => {
    const r = spawnSync('git', ['-C', ROOT, ...args], { encoding: 'utf8' });
    return r.status === 0 ? r.stdout.trim() : null;
  };
  const commit = git('rev-parse', '--short', 'HEAD');
  const dirty = git('status', '--porcelain', '--', 'src', 'bin');
  return {
    nproc: Number(spawnSync('nproc', { encoding: 'utf8' }).stdout.trim()) || cpuList.length,
    cpu_model: cpuList[0]?.model?.trim() ?? null,
    memory_gib: round(totalmem() / 2 ** 30, 0),
    node: process.version,
    linux: release(),
    curl: spawnSync('curl', ['--version'], { encoding: 'utf8' }).stdout?.split(' ')[1] ?? null,
    commit: commit
      ? `${commit}${dirty ? ' (with uncommitted changes in src/ or bin/)' : ''}`
      : null,
  };
}

function commandLine() {
  const args = process.argv.slice(2).join(' ');
  if (process.env.npm_lifecycle_event === 'bench:scale')
    return `npm run bench:scale${args ? ` -- ${args}` : ''}`;
  return `node bench/scale.mjs${args ? ` ${args}` : ''}`;
}

// ---------------------------------------------------------------------------------------------
// Main

const source = { path: null, digest: null };

async function main() {
  await mkdir(opts.dir, { recursive: true });
  tmpRoot = await mkdtemp(join(opts.dir, 'fshare-bench-scale-'));
  if (!existsSync(join(ROOT, 'dist', 'bundle', 'main.js')))
    throw fail('dist/ is missing: run `npm run build` (npm run bench:scale does it)');
  const usesBackends = opts.configs.some((c) => c !== 'embedded');
  if (usesBackends) {
    const help = spawnSync(process.execPath, [BIN, 'serve', '--help'], { encoding: 'utf8' });
    if (!/--database\b/.test(help.stdout) || !/--storage\b/.test(help.stdout))
      throw fail(
        'the built server has no --database/--storage yet (npm run build?); try --configs embedded',
      );
  }
  // The source, what the servers hold (embedded: one copy; s3rver: staged parts and the object),
  // the concurrent uploads' copies, one download at a time.
  const fsStat = await statfs(tmpRoot);
  const need = (4 + 3 * opts.clients) * opts.size + 512 * MB;
  if (fsStat.bavail * fsStat.bsize < need)
    throw fail(`${tmpRoot} needs about ${(need / GB).toFixed(1)} GB free (try a smaller --size)`);

  const extraCa = extraCaCerts(opts.keepExtraCa);
  note(extraCaNote(extraCa));
  const loadStart = loadavg();
  const date = new Date();
  note(
    `node ${process.version}, ${cpus().length} CPUs, load ${loadStart.map((x) => x.toFixed(2))}`,
  );
  source.path = join(tmpRoot, 'source.bin');
  note(`writing ${(opts.size / MB).toFixed(0)} MB of random bytes`);
  source.digest = await makeRandomFile(source.path, opts.size);
  adminPassword = randomBytes(18).toString('base64url');

  if (usesBackends) {
    note('starting PostgreSQL');
    backends.pg = await startPostgres();
    services.push(backends.pg);
    note(`${backends.pg.version} at ${backends.pg.url}`);
    backends.s3 = await startS3({
      nodeFlags: nodeFlags(),
      onLine: (l) => s3Lines.length < 200 && s3Lines.push(`[${phaseNow}] ${l}`),
    });
    services.push(backends.s3);
    note(`s3rver ${backends.s3.version} at ${backends.s3.endpoint}`);
  }

  const configs = [];
  for (const [i, key] of opts.configs.entries()) {
    phase(`start-up of ${key}`, `starting "${CONFIGS[key]}"`);
    const cfg = await startConfig(key, backends, i + 1);
    cfg.token = await login(cfg.url);
    await writeFile(headerFile(cfg), `Authorization: Bearer ${cfg.token}\n`, { mode: 0o600 });
    cfg.runs = [];
    cfg.memory = { start: serverMemory(cfg) };
    configs.push(cfg);
  }

  // Run by run, every setup in turn: a change in the machine's load hits all three alike.
  for (let r = 1; r <= opts.runs; r++) {
    for (const cfg of configs) {
      const tag = `${cfg.label}, run ${r} of ${opts.runs}`;
      const rd = {};
      phase(`upload, run ${r}`, `fshare upload (${tag})`);
      rd.upload = await upload(cfg);
      phase(`get, run ${r}`, `fshare get (${tag})`);
      rd.get = await get(cfg, rd.upload.id);
      phase(`curl, run ${r}`, `curl (${tag})`);
      rd.curl = await curl(cfg, rd.upload.id);
      await deleteShare(cfg, rd.upload.id);
      phase(`creates, run ${r}`, `${opts.creates} creates, ${opts.inFlight} in flight (${tag})`);
      rd.creates = await creates(cfg, r);
      if (opts.clients > 0) {
        phase(`concurrent, run ${r}`, `${opts.clients} uploads at once (${tag})`);
        rd.concurrent = await concurrent(cfg);
      }
      phase(`after run ${r}`);
      cfg.runs.push(rd);
      cfg.memory[`run${r}`] = serverMemory(cfg);
    }
  }

  for (const cfg of configs)
    if (cfg.dbName) cfg.topStatements = await backends.pg.topStatements(cfg.dbName);
  note('stopping the servers');
  for (const cfg of configs) {
    // What the servers wrote before shutdown (which they announce on stderr) is what counts.
    for (const s of cfg.servers) s.stopping = true;
    if (cfg.balancer) cfg.balancerTallies = await cfg.balancer.close();
    for (const s of cfg.servers) {
      await stopServe(s, { children, note });
      servers.splice(servers.indexOf(s), 1);
    }
  }
  return report(configs, {
    date,
    loadStart,
    extraCa,
    machine: machine(),
    versions: {
      node: process.version,
      postgres: backends.pg?.version ?? null,
      s3rver: backends.s3?.version ?? null,
    },
  });
}

// ---------------------------------------------------------------------------------------------
// Report

const PHASES = ['upload', 'get', 'curl', 'creates', 'concurrent'];

/** One unit of a phase's work, for the per-unit figures: a GB moved, or 1,000 creates. */
function units(phase) {
  if (phase === 'creates') return opts.creates / 1000;
  return ((phase === 'concurrent' ? opts.clients : 1) * opts.size) / GB;
}

/** Medians over the runs of one phase of one setup. */
function summarise(phase, runs) {
  const rate = phase === 'creates' ? 'per_s' : 'mb_s';
  const digits = phase === 'creates' ? 0 : 1;
  const med = (f) => median(runs.map(f));
  const perComponent = (field, scale, d) =>
    Object.fromEntries(
      Object.keys(runs[0][field]).map((k) => [k, round(med((r) => r[field][k] ?? 0) / scale, d)]),
    );
  const rates = runs.map((r) => r[rate]);
  // Statements per request of the client: per create, per upload or download of the file.
  const requests = phase === 'creates' ? opts.creates : phase === 'concurrent' ? opts.clients : 1;
  const statements = runs[0].statements === null ? null : med((r) => r.statements);
  return {
    [rate]: round(median(rates), digits),
    runs: rates.map((x) => round(x, digits)),
    seconds: perComponent('seconds_', 1, 2).wall,
    machine: perComponent('machine', 1, 2),
    cpu_s: perComponent('cpu', 1, 2),
    cpu_per_unit: perComponent('cpu', units(phase), 2),
    unit: phase === 'creates' ? 'per 1,000 creates' : 'per GB',
    written_mb: perComponent('written', MB, 0),
    disk_mb: perComponent('reached', MB, 0),
    pg_statements: statements,
    pg_statements_each: statements === null ? null : round(statements / requests, 1),
    ...(phase === 'concurrent'
      ? {
          per_client_mb_s: round(
            med((r) => r.per_client_mb_s),
            1,
          ),
        }
      : {}),
  };
}

function report(configs, facts) {
  const out = {
    command: commandLine(),
    date: facts.date
      .toISOString()
      .replace(/:\d\d\.\d+Z$/, ' UTC')
      .replace('T', ' '),
    machine: facts.machine,
    versions: facts.versions,
    size_bytes: opts.size,
    chunks: Math.ceil(opts.size / (8 * 2 ** 20)),
    runs: opts.runs,
    creates: opts.creates,
    in_flight: opts.inFlight,
    clients: opts.clients,
    elapsed_s: round(performance.now() / 1000, 0),
    node_extra_ca_certs: facts.extraCa,
    loadavg_start: facts.loadStart.map((x) => round(x, 2)),
    loadavg_end: loadavg().map((x) => round(x, 2)),
    units: 'MB = 10^6 bytes, GB = 10^9 bytes; CPU in seconds (user + system)',
    configs: {},
  };
  for (const cfg of configs) {
    const c = { label: cfg.label };
    for (const phase of PHASES) {
      const runs = cfg.runs.map((r) => r[phase]).filter(Boolean);
      if (runs.length) c[phase] = summarise(phase, runs);
    }
    c.server_memory_mb = Object.fromEntries(
      Object.entries(cfg.memory).map(([when, byServer]) => [
        when,
        Object.fromEntries(
          Object.entries(byServer).map(([name, m]) => [
            name,
            m ? { rss: round(m.rss / MB), peak: round(m.hwm / MB) } : null,
          ]),
        ),
      ]),
    );
    c.server_stderr = Object.fromEntries(cfg.servers.map((s) => [s.name, s.errorLines]));
    if (cfg.balancerTallies) c.balancer = cfg.balancerTallies;
    if (cfg.topStatements) c.pg_top_statements = cfg.topStatements;
    out.configs[cfg.key] = c;
  }
  out.s3rver_errors = s3Lines;
  out.client_stderr = clientLines;
  return out;
}

/** A markdown table laid out the way prettier lays it out (so `prettier --check` passes). */
function markdownTable(rawRows, header) {
  const rows = rawRows.map((r) => r.map((c) => String(c ?? '–').replaceAll('|', '\\|')));
  const widths = header.map((h, i) => Math.max(3, h.length, ...rows.map((r) => r[i].length)));
  const line = (cells) => `| ${cells.map((c, i) => c.padEnd(widths[i])).join(' | ')} |`;
  const rule = `| ${widths.map((w) => '-'.repeat(w)).join(' | ')} |`;
  return [line(header), rule, ...rows.map(line)].join('\n');
}

const FIGURES = {
  upload: ['mb_s', 'fshare upload', 'MB/s'],
  get: ['mb_s', 'fshare get (verified)', 'MB/s'],
  curl: ['mb_s', 'curl GET', 'MB/s'],
  creates: ['per_s', 'creates', '/s'],
  concurrent: ['mb_s', 'concurrent uploads, aggregate', 'MB/s'],
};

const labels = (r, keys) => keys.map((k) => r.configs[k].label);

/** The figures as rows (median, every run in brackets), the setups as columns. */
function figuresTable(r) {
  const keys = Object.keys(r.configs);
  const rows = [];
  for (const phase of PHASES) {
    if (!keys.some((k) => r.configs[k][phase])) continue;
    const [rate, label, unit] = FIGURES[phase];
    const name = phase === 'concurrent' ? `${r.clients} ${label}` : label;
    rows.push([
      `${name} (${unit})`,
      ...keys.map((k) => {
        const f = r.configs[k][phase];
        return f ? `**${f[rate]}** (${f.runs.join(', ')})` : 'not run';
      }),
    ]);
  }
  return markdownTable(rows, ['median (runs)', ...labels(r, keys)]);
}

/** Every component that any setup has in a phase, in order of first appearance. */
function componentsOf(r, keys, phase) {
  const names = [];
  for (const k of keys)
    for (const n of Object.keys(r.configs[k][phase].cpu_s)) if (!names.includes(n)) names.push(n);
  return names;
}

/**
 * CPU seconds of each component during one phase (medians), the same per GB moved (or per
 * 1,000 creates) in brackets; then wall time and PostgreSQL statements. Setups as columns.
 */
function cpuTable(r, phase) {
  const keys = Object.keys(r.configs).filter((k) => r.configs[k][phase]);
  const rows = componentsOf(r, keys, phase).map((n) => [
    n,
    ...keys.map((k) => {
      const f = r.configs[k][phase];
      return f.cpu_s[n] === undefined ? '–' : `${f.cpu_s[n]} (${f.cpu_per_unit[n]})`;
    }),
  ]);
  rows.push(['wall time', ...keys.map((k) => `${r.configs[k][phase].seconds} s`)]);
  const cores = (k) => {
    const m = r.configs[k][phase].machine;
    return `${m.busy_cores} (others ${m.others_cores}), iowait ${m.iowait_cores}`;
  };
  rows.push([`machine busy, cores of ${r.machine.nproc}`, ...keys.map(cores)]);
  const each = phase === 'creates' ? 'create' : phase === 'concurrent' ? 'upload' : 'transfer';
  if (keys.some((k) => r.configs[k][phase].pg_statements !== null))
    rows.push([
      `PostgreSQL statements (per ${each})`,
      ...keys.map((k) => {
        const f = r.configs[k][phase];
        return f.pg_statements === null ? '–' : `${f.pg_statements} (${f.pg_statements_each})`;
      }),
    ]);
  const unit = phase === 'creates' ? 'per 1,000 creates' : 'per GB';
  return markdownTable(rows, [`CPU s (${unit})`, ...labels(r, keys)]);
}

/** MB written to files during a phase, gross / reaching the disk, and × the bytes uploaded. */
function writesTable(r, phase) {
  const keys = Object.keys(r.configs).filter((k) => r.configs[k][phase]);
  const bytes = ((phase === 'concurrent' ? r.clients : 1) * r.size_bytes) / MB;
  const ratio = (mb) => `${round(mb / bytes, 2)} ×`;
  // PostgreSQL is left out: its write_bytes counts whole page-cache folios (up to 256 KB here)
  // for each 8 KB WAL page a commit rewrites, far more than it writes.
  const rows = componentsOf(r, keys, phase)
    .filter((n) => n !== 'client' && n !== 'postgres')
    .map((n) => [
      n,
      ...keys.map((k) => {
        const f = r.configs[k][phase];
        if (f.written_mb[n] === undefined) return '–';
        return `${f.written_mb[n]} / ${f.disk_mb[n]} (${ratio(f.written_mb[n])})`;
      }),
    ]);
  return markdownTable(rows, ['MB written / reaching disk', ...labels(r, keys)]);
}

/**
 * What 10× or 100× the traffic meets first: per component, its CPU per unit of work and what
 * one core of it would carry at that cost (1 / CPU per unit), for the setups on PostgreSQL.
 */
function ceilingsTable(r) {
  const keys = Object.keys(r.configs).filter((k) => k !== 'embedded' && r.configs[k].upload);
  const use = keys.length ? keys : Object.keys(r.configs);
  const phases = ['upload', 'get', 'curl', 'creates'].filter((p) => r.configs[use[0]][p]);
  const rows = [];
  for (const k of use)
    for (const n of componentsOf(r, [k], phases[0])) {
      if (n === 'client') continue;
      rows.push([
        r.configs[k].label,
        n,
        ...phases.map((p) => {
          const x = r.configs[k][p]?.cpu_per_unit[n];
          if (x === undefined || x === null) return '–';
          const ceiling = x > 0 ? round((p === 'creates' ? 1000 : GB / MB) / x, 0) : '∞';
          return `${x} → ${ceiling}${p === 'creates' ? '/s' : ' MB/s'}`;
        }),
      ]);
    }
  return markdownTable(rows, [
    'setup',
    'component',
    ...phases.map((p) => (p === 'creates' ? 'CPU s per 1,000 creates' : `${p}: CPU s per GB`)),
  ]);
}

function memoryTable(r) {
  const rows = [];
  for (const k of Object.keys(r.configs))
    for (const [when, byServer] of Object.entries(r.configs[k].server_memory_mb))
      rows.push([
        r.configs[k].label,
        when === 'start' ? 'start' : `run ${when.slice(3)}`,
        Object.entries(byServer)
          .map(([n, x]) => (x ? `${n}: ${x.rss} (peak ${x.peak})` : `${n}: gone`))
          .join(', '),
      ]);
  return markdownTable(rows, ['setup', 'after', 'RSS in MB (peak so far)']);
}

/** Errors and oddities seen on the way: servers' stderr, the balancer's statuses, s3rver. */
function findings(r) {
  const out = [];
  const clip = (l) => (l.length > 140 ? `${l.slice(0, 140)}…` : l);
  // Lines grouped by what they say (numbers, ids and the phase aside), with where they came.
  const grouped = (lines, kindOf) => {
    const kinds = new Map();
    for (const l of lines) {
      const [, when, text] = /^\[([^\]]*)\] (.*)$/.exec(l) ?? [null, '?', l];
      const kind = kindOf(text);
      const k = kinds.get(kind) ?? { n: 0, example: text, phases: new Set() };
      k.n++;
      k.phases.add(when.replace(/, run \d+$| run \d+$/, '').replace(/^start-up of .*/, 'start-up'));
      kinds.set(kind, k);
    }
    return [...kinds.values()].map(
      (k) => `${k.n} × \`${clip(k.example)}\` (${[...k.phases].join(', ')})`,
    );
  };
  const plain = (text) => text.replace(/[0-9a-f-]{8,}/g, 'ID').replace(/\d+/g, 'N');
  for (const c of Object.values(r.configs)) {
    for (const [n, lines] of Object.entries(c.server_stderr))
      for (const g of grouped(lines, plain)) out.push(`- ${c.label}, ${n} on stderr: ${g}`);
    if (c.balancer) {
      const { requests, statuses, errors } = c.balancer;
      out.push(
        `- ${c.label}, balancer: ${requests.join(' + ')} requests, statuses ` +
          `${Object.entries(statuses)
            .map(([code, n]) => `${code} × ${n}`)
            .join(', ')}; ${errors} upstream errors`,
      );
    }
  }
  for (const g of grouped(r.client_stderr, (t) => plain(t.replace(/^[^:]*: /, ''))))
    out.push(`- CLI on stderr: ${g}`);
  // s3rver: by status, method, operation (the query's keys) and the error's first words.
  const s3Kind = (t) => {
    const m = /^s3rver: (\d+) (\S+) \S*?(\?[^:\s]*)?: (?:Error: )?([^,:|]*)/.exec(t);
    return m ? `${m[1]} ${m[2]} ${(m[3] ?? '').replace(/=[^&]*/g, '')} ${m[4]}` : plain(t);
  };
  for (const g of grouped(r.s3rver_errors, s3Kind)) out.push(`- s3rver answered: ${g}`);
  return out;
}

function text(r) {
  const size = `${(r.size_bytes / 2 ** 20).toFixed(0)} MiB`;
  const parts = [
    `fshare scale-out benchmark: ${size} file, ${r.runs} run(s), ${r.creates} creates at ${r.in_flight} in flight; MB = 10^6 bytes`,
    '',
    figuresTable(r),
  ];
  for (const phase of PHASES) {
    if (!Object.values(r.configs).some((c) => c[phase])) continue;
    parts.push(
      '',
      `${phase}: CPU seconds per process (median of the runs)`,
      '',
      cpuTable(r, phase),
    );
  }
  const notes = findings(r);
  if (notes.length) parts.push('', ...notes);
  parts.push('', `${r.elapsed_s} s in all`);
  return `${parts.join('\n')}\n`;
}

function readmeSection(r, kept) {
  const m = r.machine;
  const v = r.versions;
  const size = `${(r.size_bytes / 2 ** 20).toFixed(0)} MiB`;
  const lines = [
    SECTION,
    '',
    '`bench/scale.mjs` (`npm run bench:scale`) runs the same measurements, in one run, against',
    'three setups: the embedded server (`--data-dir`); one server with `--database postgres://…',
    '--storage s3://… --s3-endpoint … --s3-force-path-style`; and two such servers (plus',
    '`--trust-proxy loopback`) on the same database and bucket behind a round-robin balancer',
    '(`bench/backends.mjs`: each request to the next server, bodies streamed both ways, keep-alive',
    'agents, `X-Forwarded-For` added). PostgreSQL is a throwaway cluster',
    "of Debian's binaries (initdb in a temp dir, trust on 127.0.0.1, PostgreSQL's default settings,",
    'so fsync and synchronous_commit on, plus pg_stat_statements to count statements). s3rver and',
    'the balancer run in child processes of their own, so their CPU is measured apart from the',
    "benchmark's; s3rver with OpenSSL's legacy provider (its listing tokens use DES). Each setup",
    'has its own database and bucket; all are started first, then run by run every setup in turn:',
    "`fshare upload` of the file (the CLI's defaults: 8 MiB chunks, 4 in flight; `FSHARE_TOKEN`",
    'from a sign-in), `fshare get` (which verifies the sha256; the benchmark checks the bytes too),',
    '`curl -L -o` (checked), `--creates` `POST /files` from `--in-flight` keep-alive connections',
    '(as `bench/run.mjs` does), then `--clients` uploads of the file at once, each CLI with a',
    'config directory of its own (aggregate rate: all their bytes / time from the first start to',
    'the last exit). Each transfer starts after `sync` and 300 ms. CPU is utime + stime from',
    '`/proc/PID/stat` over the phase, per process (PostgreSQL: the postmaster, its children and',
    "its reaped children; clients by GNU time, the creates by the benchmark's own process);",
    '"machine busy" is all CPU time of `/proc/stat` over the phase, in cores, and "others" the',
    'part of it not spent by the setup\'s processes (other sessions on the shared VM). "Written"',
    'is `write_bytes` of `/proc/PID/io`, "reaching disk" the same less `cancelled_write_bytes`',
    '(files deleted before write-back); PostgreSQL is left out of those tables, as its',
    '`write_bytes` counts a whole page-cache folio (about 256 KiB here) for the WAL write of each commit.',
    '',
    '```sh',
    'npm run bench:scale                          # 256 MiB, 3 runs (builds dist/ first)',
    'npm run bench:scale -- --write-readme        # and rewrites this section (the analysis is kept)',
    'node bench/scale.mjs --size 64m --runs 1     # quicker; --help for every option',
    'node bench/scale.mjs --profile DIR           # servers, s3rver, balancer under --cpu-prof',
    '```',
    '',
    '### Results',
    '',
    `\`${r.command}\`, ${r.date}, ${r.elapsed_s} s in all. ${m.nproc} cores (\`nproc\`; ${m.cpu_model}, ${m.memory_gib} GiB),`,
    `Node ${m.node.replace(/^v/, '')}, ${v.postgres ?? 'no PostgreSQL'}, s3rver ${v.s3rver ?? '–'}, curl ${m.curl},`,
    `Linux ${m.linux}, code at \`${m.commit}\`. Load average ${r.loadavg_start.join(' ')} at the`,
    `start, ${r.loadavg_end.join(' ')} at the end (the 2 cores are shared with other sessions). ${size}`,
    `file (${r.chunks} chunks); median of ${r.runs} runs, every run in brackets; ${r.creates} creates per`,
    `run at ${r.in_flight} in flight; ${r.clients} uploads at once. MB = 10^6 bytes, GB = 10^9.`,
    '',
    figuresTable(r),
    '',
    'CPU seconds per process during one `fshare upload` (median; per GB uploaded in brackets):',
    '',
    cpuTable(r, 'upload'),
  ];
  for (const [phase, what] of [
    ['concurrent', `${r.clients} uploads at once (per GB uploaded)`],
    ['get', 'one `fshare get` (per GB downloaded)'],
    ['curl', 'one `curl` download (per GB downloaded)'],
    ['creates', `${r.creates} creates (per 1,000)`],
  ])
    if (Object.values(r.configs).some((c) => c[phase]))
      lines.push('', `The same during ${what}:`, '', cpuTable(r, phase));
  lines.push(
    '',
    'Extrapolating: CPU seconds per unit of work of each shared component, and what one core of',
    'it carries at that cost (1 / CPU per unit); servers scale out, PostgreSQL, s3rver and the',
    'balancer are one each here:',
    '',
    ceilingsTable(r),
    '',
    'Files written during the uploads (MB written / MB reaching the disk, and written × the bytes',
    'uploaded):',
    '',
    writesTable(r, 'upload'),
  );
  if (Object.values(r.configs).some((c) => c.concurrent))
    lines.push('', `The same for ${r.clients} uploads at once:`, '', writesTable(r, 'concurrent'));
  const top = Object.values(r.configs).filter((c) => c.pg_top_statements);
  if (top.length)
    lines.push(
      '',
      'The statements each PostgreSQL database ran most often over the whole run',
      '(pg_stat_statements; BEGIN and COMMIT included):',
      '',
      markdownTable(
        top.flatMap((c) =>
          c.pg_top_statements.map((t) => [
            c.label,
            t.calls,
            `\`${t.query.length > 90 ? `${t.query.slice(0, 90)}…` : t.query}\``,
          ]),
        ),
        ['setup', 'calls', 'statement'],
      ),
    );
  lines.push('', 'Server resident set after each run:', '', memoryTable(r));
  const notes = findings(r);
  lines.push('', ...(notes.length ? notes : ['- No server wrote to stderr; no 5xx.']), '');
  if (kept) lines.push(kept.trimEnd(), '');
  return lines.join('\n');
}

/** Replaces the section in bench/README.md (keeping its analysis), or appends it. */
async function writeReadme(r) {
  const text = await readFile(README, 'utf8');
  const lines = text.split('\n');
  const start = lines.findIndex((l) => l.trim() === SECTION);
  let out;
  if (start >= 0) {
    let end = lines.findIndex((l, i) => i > start && /^## /.test(l));
    if (end < 0) end = lines.length;
    const old = lines.slice(start, end);
    const k = old.findIndex((l) => l.trim() === KEPT);
    const kept = k >= 0 ? old.slice(k).join('\n') : null;
    const section = readmeSection(r, kept).trimEnd().split('\n');
    const tail = lines.slice(end);
    out = [...lines.slice(0, start), ...section, ...(tail.length ? ['', ...tail] : [''])];
  } else {
    out = [...lines.join('\n').trimEnd().split('\n'), '', ...readmeSection(r, null).split('\n')];
  }
  await writeFile(README, out.join('\n').replace(/\n*$/, '\n'));
  note(`wrote "${SECTION.slice(3)}" into ${relative(process.cwd(), README) || README}`);
}

try {
  const result = await main();
  process.stdout.write(opts.json ? `${JSON.stringify(result, null, 2)}\n` : text(result));
  if (opts.writeReadme) await writeReadme(result);
  await cleanup();
  note('done');
  // stopServe (bench/serve.mjs) leaves its 15 s SIGKILL timer running: do not wait for it.
  process.exit(0);
} catch (err) {
  if (interrupted) await new Promise(() => {}); // the signal handler exits with 130
  const detail = err.benchFailure ? err.message : (err.stack ?? String(err));
  process.stderr.write(`bench: failed: ${detail}\n`);
  for (const s of servers)
    if (s.stderr.trim()) process.stderr.write(`bench: ${s.name} stderr:\n${s.stderr.trim()}\n`);
  const s3Errors = backends.s3?.stderr().trim();
  if (s3Errors) process.stderr.write(`bench: s3rver stderr:\n${s3Errors}\n`);
  await cleanup();
  process.exit(1);
}
