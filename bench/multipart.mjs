#!/usr/bin/env node
// How to build a chunk's multipart body (issue 12): the same upload (8 MiB chunks, 4 in flight,
// to a real `fshare serve`) with three bodies, measured side by side in one run:
//   hand-built  the preamble, a 1 MiB-buffered read stream of the chunk's range, the epilogue,
//               exact Content-Length, over node:http (what fshare uploads with)
//   form-data   the design card's `form-data` package over the same ranged read stream with
//               `knownLength`, piped into the same node:http request
//   undici      undici's FormData over fs.openAsBlob().slice(), sent with undici.request
//               (what fshare 0.1 sent)
// Prints MB/s and this process's CPU seconds per GiB (the server's work is the same for all).
//
//   node bench/multipart.mjs [--size 512m] [--rounds 2]
import { spawn } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { createReadStream, openAsBlob } from 'node:fs';
import { mkdtemp, open, rm } from 'node:fs/promises';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { Readable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import FormDataPackage from 'form-data';
import { Agent, FormData as UndiciFormData, request as undiciRequest } from 'undici';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const BIN = join(ROOT, 'bin', 'fshare.js');
const CHUNK = 8 * 1024 * 1024;
const PARALLEL = 4;

const { values } = parseArgs({
  options: { size: { type: 'string', default: '512m' }, rounds: { type: 'string', default: '2' } },
});
const size = Number(values.size.replace(/m$/i, '')) * 1024 * 1024;
const rounds = Number(values.rounds);

const dir = await mkdtemp(join(tmpdir(), 'fshare-multipart-'));
const src = join(dir, 'source.bin');
{
  const handle = await open(src, 'w');
  for (let done = 0; done < size; done += 1 << 24)
    await handle.write(randomBytes(Math.min(1 << 24, size - done)));
  await handle.close();
}

const password = randomBytes(12).toString('hex');
const server = spawn(
  process.execPath,
  [BIN, 'serve', '--port', '0', '--quiet', '--data-dir', join(dir, 'data')],
  {
    env: { ...process.env, FSHARE_ADMIN_USER: 'admin', FSHARE_ADMIN_PASSWORD: password },
    stdio: ['ignore', 'pipe', 'inherit'],
  },
);
const url = await new Promise((done) => {
  let out = '';
  server.stdout.on('data', (d) => {
    out += d;
    const m = /Listening on (http:\/\/\S+)/.exec(out);
    if (m) done(m[1]);
  });
});
const { auth_token: token } = await (
  await fetch(`${url}/users/login`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ username: 'admin', password }),
  })
).json();
const auth = { authorization: `Bearer ${token}` };
const agent = new http.Agent({ keepAlive: true, maxSockets: PARALLEL });
const undiciAgent = new Agent({ connections: PARALLEL });

const fieldsOf = (dzuuid, index, total) => ({
  dzuuid,
  dzchunkindex: String(index),
  dztotalchunks: String(total),
});

function post(path, headers, body) {
  return new Promise((done, fail) => {
    const req = http.request(`${url}${path}`, { method: 'POST', headers, agent }, (res) => {
      res.resume();
      res.on('end', () =>
        res.statusCode < 300 ? done(res.statusCode) : fail(new Error(`HTTP ${res.statusCode}`)),
      );
    });
    req.on('error', fail);
    body.on('error', fail);
    body.pipe(req);
  });
}

const bodies = {
  async 'hand-built'(path, fields, start, end) {
    const boundary = `----fshare${randomBytes(12).toString('hex')}`;
    const head = Buffer.from(
      Object.entries(fields)
        .map(
          ([n, v]) =>
            `--${boundary}\r\nContent-Disposition: form-data; name="${n}"\r\n\r\n${v}\r\n`,
        )
        .join('') +
        `--${boundary}\r\nContent-Disposition: form-data; name="upload"; filename="source.bin"\r\n` +
        'Content-Type: application/octet-stream\r\n\r\n',
    );
    const tail = Buffer.from(`\r\n--${boundary}--\r\n`);
    const body = Readable.from(
      (async function* () {
        yield head;
        yield* createReadStream(src, { start, end: end - 1, highWaterMark: 1 << 20 });
        yield tail;
      })(),
      { objectMode: false },
    );
    return post(
      path,
      {
        ...auth,
        'content-type': `multipart/form-data; boundary=${boundary}`,
        'content-length': String(head.length + (end - start) + tail.length),
      },
      body,
    );
  },
  async 'form-data'(path, fields, start, end) {
    const form = new FormDataPackage();
    for (const [n, v] of Object.entries(fields)) form.append(n, v);
    form.append('upload', createReadStream(src, { start, end: end - 1, highWaterMark: 1 << 20 }), {
      filename: 'source.bin',
      contentType: 'application/octet-stream',
      knownLength: end - start,
    });
    return post(
      path,
      { ...auth, ...form.getHeaders(), 'content-length': String(form.getLengthSync()) },
      form,
    );
  },
  async undici(path, fields, start, end) {
    const blob = await openAsBlob(src);
    const form = new UndiciFormData();
    for (const [n, v] of Object.entries(fields)) form.append(n, v);
    form.append('upload', blob.slice(start, end), 'source.bin');
    const res = await undiciRequest(`${url}${path}`, {
      method: 'POST',
      headers: auth,
      body: form,
      dispatcher: undiciAgent,
    });
    await res.body.dump();
    if (res.statusCode >= 300) throw new Error(`HTTP ${res.statusCode}`);
  },
};

async function uploadWith(kind) {
  const res = await fetch(`${url}/files`, {
    method: 'POST',
    headers: { ...auth, 'content-type': 'application/json' },
    body: JSON.stringify({ file_name: `${kind}.bin` }),
  });
  const id = (await res.json()).url.split('/').pop();
  const total = Math.ceil(size / CHUNK);
  const dzuuid = randomUUID();
  let next = 0;
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: PARALLEL }, async () => {
      while (next < total) {
        const i = next++;
        await bodies[kind](
          `/files/${id}/content`,
          fieldsOf(dzuuid, i, total),
          i * CHUNK,
          Math.min(size, (i + 1) * CHUNK),
        );
      }
    }),
  );
  const seconds = (performance.now() - t0) / 1000;
  const cpu = process.cpuUsage(cpu0);
  const info = await (await fetch(`${url}/files/${id}`, { headers: auth })).json();
  if (info.size !== size) throw new Error(`${kind}: stored ${info.size} bytes`);
  await fetch(`${url}/files/${id}`, { method: 'DELETE', headers: auth });
  return {
    mbps: size / 1e6 / seconds,
    cpuPerGib: ((cpu.user + cpu.system) / 1e6) * (2 ** 30 / size),
  };
}

const results = Object.fromEntries(Object.keys(bodies).map((k) => [k, []]));
try {
  for (let r = 0; r < rounds; r++) {
    const order = Object.keys(bodies);
    if (r % 2) order.reverse(); // alternate, so no body always goes first
    for (const kind of order) results[kind].push(await uploadWith(kind));
  }
  const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  process.stdout.write(
    `multipart bodies: ${size / 2 ** 20} MiB, ${CHUNK / 2 ** 20} MiB chunks, ${PARALLEL} in flight, ${rounds} round(s), median\n`,
  );
  for (const [kind, rs] of Object.entries(results))
    process.stdout.write(
      `  ${kind.padEnd(11)} ${median(rs.map((r) => r.mbps))
        .toFixed(0)
        .padStart(5)} MB/s   client CPU ${median(rs.map((r) => r.cpuPerGib)).toFixed(2)} s/GiB\n`,
    );
} finally {
  const exited = new Promise((done) => server.once('exit', done));
  server.kill('SIGTERM');
  await exited;
  agent.destroy();
  await undiciAgent.close();
  await rm(dir, { recursive: true, force: true });
}
