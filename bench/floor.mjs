// `npm run bench:floor`: how close `fshare upload` comes to the least a Node client can do, side
// by side in one run against one `fshare serve`, with `curl -F` as the yardstick of issue 12.
//
// Six uploads of the same file, in a rotated order each round (the machine drifts):
//   curl-F          curl -F of the whole file as chunk 0 of 1, to a share created before the clock
//   node-raw        the same work by the least Node program we could write (bench/floor/raw-upload.mjs)
//   node-protocol   fshare's protocol at the CLI's defaults, verified, by the least Node program
//                   (bench/floor/protocol-upload.mjs): 8 MiB chunks, 4 going up at once and up to 3
//                   more awaiting their answers (as fshare since 2026-11-25), sha256, compare
//   node-unhashed   the same without hashing
//   node-ordered    node-protocol with the bodies in file order (each starts once the one before it
//                   is handed to its socket)
//   fshare          `fshare upload FILE --no-progress --json`
//   least-curl-F    curl -F of the whole file as one placed chunk, to the least server for the chunk
//                   protocol that keeps each chunk durable before its answer (bench/floor/least-server.mjs)
//   least-chunked   node-unhashed's chunks to the same least server
// The last two say how much of the gap between the chunks and one body any server that keeps the
// storage promise would have (bench/README.md, "what any server keeping the promise costs").
// Wall time from spawn to exit (Node's start included), client CPU from bash's `times`, server
// CPU from /proc/PID/stat. Every stored share's sha256 is checked against the file's.
//
//   npm run bench:floor                              512 MiB, 5 rounds, prints a table
//   npm run bench:floor -- --rounds 8 --drop-caches  (root) page cache dropped before each run
//   npm run bench:floor -- --json
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, rm, statfs, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
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
  sq,
  timedBash,
} from './common.mjs';
import { adminToken, startServe, stopServe } from './serve.mjs';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const BIN = join(ROOT, 'bin', 'fshare.js');
const RAW = join(ROOT, 'bench', 'floor', 'raw-upload.mjs');
const PROTOCOL = join(ROOT, 'bench', 'floor', 'protocol-upload.mjs');
const LEAST = join(ROOT, 'bench', 'floor', 'least-server.mjs');
const MB = 1e6;

const USAGE = `usage: node bench/floor.mjs [options]   (or: npm run bench:floor -- [options])

  --size SIZE      the file (default 512m)
  --rounds N       rounds of the six uploads, in a rotated order (default 5)
  --drop-caches    (root) before every upload, drop the page cache and read the file back
  --dir DIR        where the temporary directory goes (default: the OS temp dir)
  --json           print one JSON object on stdout instead of the table
  --keep-extra-ca  keep NODE_EXTRA_CA_CERTS for the processes measured (removed by default:
                   Node parses that bundle at every start; the output says what it costs)
  -h, --help`;

let opts;
try {
  const { values } = parseArgs({
    options: {
      size: { type: 'string', default: '512m' },
      rounds: { type: 'string', default: '5' },
      'drop-caches': { type: 'boolean', default: false },
      dir: { type: 'string' },
      json: { type: 'boolean', default: false },
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
  if (!/^\d+$/.test(values.rounds) || Number(values.rounds) < 1)
    throw fail('--rounds must be an integer ≥ 1');
  if (values['drop-caches'] && process.getuid?.() !== 0)
    throw fail('--drop-caches needs root (it writes /proc/sys/vm/drop_caches)');
  opts = {
    size,
    sizeText: values.size,
    rounds: Number(values.rounds),
    dropCaches: values['drop-caches'],
    keepExtraCa: values['keep-extra-ca'],
    dir: resolve(values.dir ?? tmpdir()),
    json: values.json,
  };
} catch (err) {
  process.stderr.write(`bench: ${err.message}\n${USAGE}\n`);
  process.exit(2);
}

const children = new Set();
let tmpRoot = null;
let server = null;
/** The least server: { child, pid, url, dir }. */
let least = null;
/** Single-quoted for sh. */
const round = (x, digits = 2) => (Number.isFinite(x) ? Number(x.toFixed(digits)) : null);

async function cleanup() {
  for (const child of children) if (child !== server?.child) child.kill('SIGKILL');
  least = null;
  if (server) await stopServe(server, { children, note }).catch(() => undefined);
  server = null;
  if (tmpRoot) await rm(tmpRoot, { recursive: true, force: true }).catch(() => undefined);
}
for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'])
  process.on(signal, () => {
    note(`${signal}: cleaning up`);
    void cleanup().finally(() => process.exit(130));
  });

/** Before every upload: the dirty pages of the last one written out, optionally the cache dropped. */
async function settle(src) {
  await run('sync');
  if (opts.dropCaches) {
    await writeFile('/proc/sys/vm/drop_caches', '1\n');
    await run(`cat ${sq(src)} > /dev/null`);
  }
  await sleep(500);
}

/** Runs `script` under bash; wall time, its children's CPU (`times`), the server's CPU. */
async function run(script, env = process.env, serverPid = server?.pid) {
  const r = await timedBash(script, {
    env,
    dir: tmpRoot,
    shellOptions: 'set -e',
    serverPid,
    children,
  });
  if (r.code !== 0)
    throw fail(`${script.split('\n')[0]} exited with ${r.code}:\n  ${r.stderr.trim()}`);
  return {
    seconds: r.seconds,
    client_cpu_s: r.client_cpu_s,
    server_cpu_s: r.server_cpu_s,
    stdout: r.stdout,
  };
}

async function api(method, path, token, body) {
  const res = await fetch(`${server.url}${path}`, {
    method,
    headers: {
      authorization: `Bearer ${token}`,
      ...(body ? { 'content-type': 'application/json' } : {}),
    },
    body: body ? JSON.stringify(body) : undefined,
  });
  const text = await res.text();
  if (res.status >= 300) throw fail(`${method} ${path} → ${res.status} ${text}`);
  return text ? JSON.parse(text) : null;
}

const VARIANTS = [
  {
    name: 'curl-F',
    what: '`curl -F`, the whole file as chunk 0 of 1, share created before the clock',
    precreate: true,
    script: (v) =>
      `curl -sS -f -o /dev/null -H @${sq(v.headers)} -F dzuuid=${randomBytes(16).toString('hex')} ` +
      `-F dzchunkindex=0 -F dztotalchunks=1 -F ${sq(`upload=@${v.src};type=application/octet-stream`)} ` +
      `${sq(`${server.url}/files/${v.id}/content`)}`,
  },
  {
    name: 'node-raw',
    what: 'the same work by the least Node program (raw socket, `readSync`, `bench/floor/raw-upload.mjs`)',
    precreate: true,
    script: (v) => `node ${sq(RAW)} ${sq(server.url)} ${v.id} ${sq(v.src)}`,
  },
  {
    name: 'node-unhashed',
    what: "fshare's protocol (creates the share, 8 MiB × 4 going up, 3 more awaiting answers), nothing hashed, least Node",
    script: (v) => `node ${sq(PROTOCOL)} ${sq(server.url)} ${sq(v.src)} 8388608 4 nohash`,
  },
  {
    name: 'node-protocol',
    what: 'the same, verified: sha256 on a thread, dzsha256 on the last chunk, compared after',
    script: (v) => `node ${sq(PROTOCOL)} ${sq(server.url)} ${sq(v.src)} 8388608 4`,
  },
  {
    name: 'node-ordered',
    what: 'node-protocol with the bodies in file order (each once the one before it is sent)',
    script: (v) => `node ${sq(PROTOCOL)} ${sq(server.url)} ${sq(v.src)} 8388608 4 ordered`,
  },
  {
    name: 'fshare',
    what: '`fshare upload FILE --no-progress --json` (the same work, verified)',
    script: (v) => `node ${sq(BIN)} upload ${sq(v.src)} --no-progress --json`,
  },
  {
    name: 'least-curl-F',
    what: '`curl -F` of the whole file as one placed chunk, to the least server (`bench/floor/least-server.mjs`)',
    least: true,
    precreate: true,
    script: (v) =>
      `curl -sS -f -o /dev/null -F dzuuid=${randomBytes(16).toString('hex')} ` +
      `-F dzchunkindex=0 -F dztotalchunks=1 -F dzchunkbyteoffset=0 -F dzchunksize=${opts.size} ` +
      `-F dztotalfilesize=${opts.size} -F ${sq(`upload=@${v.src};type=application/octet-stream`)} ` +
      `${sq(`${least.url}/files/${v.id}/content`)}`,
  },
  {
    name: 'least-chunked',
    what: "node-unhashed's chunks to the least server: each durable (the data's `fdatasync`, a log line, its `fdatasync`) before its answer",
    least: true,
    script: (v) => `node ${sq(PROTOCOL)} ${sq(least.url)} ${sq(v.src)} 8388608 4 nohash`,
  },
];

/** Starts the least server on a folder of its own. */
async function startLeast() {
  const dir = join(tmpRoot, 'least');
  await mkdir(dir);
  const child = spawn(process.execPath, [LEAST, dir], { stdio: ['ignore', 'pipe', 'inherit'] });
  children.add(child);
  const url = await new Promise((resolve, reject) => {
    let out = '';
    child.stdout.on('data', (d) => {
      out += d;
      if (out.includes('\n')) resolve(out.trim());
    });
    child.once('exit', (code) => reject(fail(`the least server exited with ${code}`)));
  });
  return { child, pid: child.pid, url, dir };
}

async function main() {
  const extraCa = extraCaCerts(opts.keepExtraCa);
  note(extraCaNote(extraCa));
  tmpRoot = await mkdtemp(join(opts.dir, 'fshare-bench-floor-'));
  const { bavail, bsize } = await statfs(tmpRoot);
  if (bavail * bsize < opts.size * 3) throw fail(`${tmpRoot} needs about 3 × the file size free`);
  const src = join(tmpRoot, 'src.bin');
  note(`writing ${opts.size} random bytes`);
  const sha256 = await makeRandomFile(src, opts.size);
  const password = randomBytes(18).toString('base64url');
  server = await startServe({
    bin: BIN,
    dataDir: join(tmpRoot, 'data'),
    adminPassword: password,
    children,
    fail,
  });
  const token = await adminToken(server.url, password, fail);
  least = await startLeast();
  const headers = join(tmpRoot, 'headers');
  await writeFile(headers, `Authorization: Bearer ${token}\n`, { mode: 0o600 });
  const env = {
    ...process.env,
    FSHARE_TOKEN: token,
    FSHARE_SERVER: server.url,
    FSHARE_KEYRING: 'off',
    FSHARE_CONFIG_DIR: join(tmpRoot, 'config'),
  };

  const runs = [];
  for (let r = 0; r < opts.rounds; r++) {
    // Rotated, and reversed every other round: no variant always follows the same one.
    const order = VARIANTS.map((_, i) => VARIANTS[(i + r) % VARIANTS.length]);
    if (r % 2) order.reverse();
    for (const variant of order) {
      const id = !variant.precreate
        ? null
        : variant.least
          ? (await (await fetch(`${least.url}/files`, { method: 'POST' })).json()).url
              .split('/')
              .pop()
          : (await api('POST', '/files', token, { file_name: 'floor.bin' })).url.split('/').pop();
      await settle(src);
      note(`round ${r + 1}/${opts.rounds}: ${variant.name}`);
      const result = await run(
        variant.script({ src, headers, id }),
        env,
        variant.least ? least.pid : server.pid,
      );
      if (variant.least) {
        const stored = join(least.dir, id ?? result.stdout.trim().split('\n').pop());
        if ((await sha256File(stored)) !== sha256)
          throw fail(`${variant.name}: the stored file's sha256 is not the file's`);
        await rm(stored);
        runs.push({ variant: variant.name, round: r + 1, ...result, stdout: undefined });
        continue;
      }
      const stored =
        id ??
        (variant.name === 'fshare'
          ? JSON.parse(result.stdout)[0].share_id
          : result.stdout.trim().split('\n').pop());
      const share = await api('GET', `/files/${stored}`, token);
      if (share.sha256 !== sha256)
        throw fail(`${variant.name}: the stored sha256 ${share.sha256} is not the file's`);
      await api('DELETE', `/files/${stored}`, token);
      runs.push({ variant: variant.name, round: r + 1, ...result, stdout: undefined });
    }
  }

  const byName = Object.fromEntries(
    VARIANTS.map((v) => {
      const mine = runs.filter((x) => x.variant === v.name);
      const wall = median(mine.map((x) => x.seconds));
      return [
        v.name,
        {
          what: v.what,
          wall_s: round(wall, 3),
          wall_min_s: round(Math.min(...mine.map((x) => x.seconds)), 3),
          wall_max_s: round(Math.max(...mine.map((x) => x.seconds)), 3),
          mb_s: round(opts.size / MB / wall, 0),
          client_cpu_s: round(median(mine.map((x) => x.client_cpu_s))),
          server_cpu_s: round(median(mine.map((x) => x.server_cpu_s))),
        },
      ];
    }),
  );
  const curl = byName['curl-F'];
  for (const v of Object.values(byName)) {
    v.vs_curl_form = round(curl.wall_s / v.wall_s, 3);
    v.cpu_vs_curl = round(v.client_cpu_s / curl.client_cpu_s, 2);
  }
  // The chunks against one body, both to the least server: what the contract's chunks, each
  // durable before its answer, leave of `curl -F`'s speed on this machine's storage.
  const leastChunks = round(byName['least-curl-F'].wall_s / byName['least-chunked'].wall_s, 3);
  return {
    command: `node bench/floor.mjs --size ${opts.sizeText} --rounds ${opts.rounds}${opts.dropCaches ? ' --drop-caches' : ''}${opts.keepExtraCa ? ' --keep-extra-ca' : ''}`,
    date: new Date().toISOString(),
    size: opts.size,
    rounds: opts.rounds,
    drop_caches: opts.dropCaches,
    node_extra_ca_certs: extraCa,
    variants: byName,
    least_chunked_vs_least_curl_form: leastChunks,
    runs,
  };
}

function table(result) {
  const lines = [
    `${result.command} (${result.date}; wall and CPU are medians of ${result.rounds})`,
    '',
    '| upload | wall, s (min–max) | MB/s | × `curl -F` | client CPU, s | × curl | server CPU, s |',
    '| --- | --- | --- | --- | --- | --- | --- |',
  ];
  for (const [name, v] of Object.entries(result.variants))
    lines.push(
      `| ${name} | ${v.wall_s} (${v.wall_min_s}–${v.wall_max_s}) | ${v.mb_s} | ${v.vs_curl_form} | ${v.client_cpu_s} | ${v.cpu_vs_curl} | ${v.server_cpu_s} |`,
    );
  lines.push('', ...Object.entries(result.variants).map(([name, v]) => `- ${name}: ${v.what}`));
  lines.push(
    '',
    `The chunks against one body on the least server: ${result.least_chunked_vs_least_curl_form} × its \`curl -F\`.`,
  );
  lines.push('', extraCaNote(result.node_extra_ca_certs));
  return `${lines.join('\n')}\n`;
}

try {
  const result = await main();
  process.stdout.write(opts.json ? `${JSON.stringify(result, null, 2)}\n` : table(result));
} catch (err) {
  process.stderr.write(`bench: ${err.benchFailure ? err.message : err.stack}\n`);
  process.exitCode = 1;
} finally {
  await cleanup();
}
