// The least Node can do for the work `fshare upload` does at its defaults: create the share,
// send the file in 8 MiB chunks, 4 going up at once over keep-alive node:http, each body the
// multipart fields, the chunk's bytes (two 1 MiB buffers used in turn) and the epilogue, with an
// exact Content-Length and fshare's 70-character boundary; the file's sha256 on a worker thread that reads the file itself; the
// last chunk sent after the others with dzsha256; then the share's sha256 fetched and compared.
// No command-line parsing, configuration, progress, resume records or retries. With `nohash`,
// nothing is hashed (no dzsha256, no comparison). With `ordered`, the bodies go in file order:
// each one starts once the one before it has been handed to its socket, while others still wait
// for their answers. Measured by bench/floor.mjs and bench/floor/write-chain.mjs.
//
// With `readsync`, each piece is read with readSync instead of FileHandle.read (bench/README.md,
// "what the chunked upload costs").
//
// PARALLEL bodies go up at once, and a chunk whose body is all sent waits for its answer aside,
// up to PARALLEL − 1 of them, as `fshare upload` does (src/client/limit.ts, createChunkLimiter).
// With `strict`, at most PARALLEL requests are open, as fshare did before 2026-11-25.
//
// usage: FSHARE_TOKEN=… node protocol-upload.mjs URL FILE [CHUNK_BYTES] [PARALLEL] [nohash] [ordered] [readsync] [strict]
// prints the share's id
import { randomBytes, randomUUID } from 'node:crypto';
import { readSync } from 'node:fs';
import { open, stat } from 'node:fs/promises';
import http from 'node:http';
import { Worker } from 'node:worker_threads';

const [url, file, chunkArg, parallelArg, ...flags] = process.argv.slice(2);
const chunk = Number(chunkArg ?? 8 * 1024 * 1024);
const parallel = Number(parallelArg ?? 4);
const hashing = !flags.includes('nohash');
const ordered = flags.includes('ordered');
const syncReads = flags.includes('readsync');
const awaiting = flags.includes('strict') ? 0 : parallel - 1;
const base = new URL(url);
const agent = new http.Agent({ keepAlive: true, maxSockets: 64 });
const auth = { authorization: `Bearer ${process.env.FSHARE_TOKEN}` };

const write = (out, data) =>
  new Promise((resolve, reject) => out.write(data, (err) => (err ? reject(err) : resolve())));

function request(method, path, headers, writeBody, onSent) {
  return new Promise((resolve, reject) => {
    const req = http.request(new URL(path, base), {
      method,
      headers: { ...auth, ...headers },
      agent,
    });
    req.once('error', reject);
    req.once('response', (res) => {
      const parts = [];
      res.on('data', (d) => parts.push(d));
      res.on('end', () =>
        resolve({ status: res.statusCode, body: Buffer.concat(parts).toString() }),
      );
    });
    if (writeBody) writeBody(req).then(() => req.end((err) => err || onSent?.()), reject);
    else req.end();
  });
}

const size = (await stat(file)).size;
const sha256 = hashing
  ? new Promise((resolve, reject) => {
      const worker = new Worker(
        `const { parentPort, workerData } = require('node:worker_threads');
         const { openSync, readSync } = require('node:fs');
         const hash = require('node:crypto').createHash('sha256');
         const fd = openSync(workerData, 'r');
         const buffer = Buffer.allocUnsafe(1 << 20);
         for (let n; (n = readSync(fd, buffer, 0, buffer.length, null)) > 0; )
           hash.update(buffer.subarray(0, n));
         parentPort.postMessage(hash.digest('hex'));`,
        { eval: true, workerData: file },
      );
      worker.once('message', resolve).once('error', reject);
    })
  : Promise.resolve(null);

const created = await request('POST', '/files', { 'content-type': 'application/json' }, (r) =>
  write(r, JSON.stringify({ file_name: 'floor.bin' })),
);
if (created.status !== 201) throw new Error(`POST /files: ${created.status} ${created.body}`);
const id = JSON.parse(created.body).url.split('/').pop();
const uploadId = randomUUID();
const total = Math.max(1, Math.ceil(size / chunk));
const handle = await open(file, 'r');

// ordered: whose body may go now. A chunk waits for its turn, and passes it on once its bytes
// are handed to the socket (its answer may still be on its way).
let turn = 0;
const waiting = new Map();
const myTurn = (index) =>
  !ordered || turn === index ? null : new Promise((go) => waiting.set(index, go));
const passTurn = () => {
  turn++;
  waiting.get(turn)?.();
  waiting.delete(turn);
};

async function sendChunk(index, digest, onSent) {
  const start = index * chunk;
  const end = Math.min(size, start + chunk);
  const boundary = `-----------floor${randomBytes(27).toString('hex')}`;
  const part = (name) => `--${boundary}\r\nContent-Disposition: form-data; name="${name}"\r\n\r\n`;
  const fields = {
    dzuuid: uploadId,
    dzchunkindex: index,
    dztotalchunks: total,
    dzchunkbyteoffset: start,
    dzchunksize: chunk,
    dztotalfilesize: size,
  };
  const head = Buffer.from(
    Object.entries(fields)
      .map(([name, value]) => `${part(name)}${value}\r\n`)
      .join('') +
      `--${boundary}\r\nContent-Disposition: form-data; name="upload"; filename="floor.bin"\r\n` +
      'Content-Type: application/octet-stream\r\n\r\n',
  );
  const tail = Buffer.from(
    `\r\n${digest ? `${part('dzsha256')}${digest}\r\n` : ''}--${boundary}--\r\n`,
  );
  const res = await request(
    'POST',
    `/files/${id}/content`,
    {
      'content-type': `multipart/form-data; boundary=${boundary}`,
      'content-length': String(head.length + (end - start) + tail.length),
    },
    async (out) => {
      await myTurn(index);
      await write(out, head);
      const buffers = [Buffer.allocUnsafeSlow(1 << 20), Buffer.allocUnsafeSlow(1 << 20)];
      let writing;
      for (let at = start, turn = 0; at < end; turn ^= 1) {
        const want = Math.min(1 << 20, end - at);
        const bytesRead = syncReads
          ? readSync(handle.fd, buffers[turn], 0, want, at)
          : (await handle.read(buffers[turn], 0, want, at)).bytesRead;
        if (bytesRead === 0) throw new Error('the file got shorter');
        await writing;
        writing = write(out, buffers[turn].subarray(0, bytesRead));
        at += bytesRead;
      }
      await writing;
      if (ordered) passTurn();
      await write(out, tail);
    },
    onSent,
  );
  if (res.status >= 300) throw new Error(`chunk ${index}: ${res.status} ${res.body}`);
}

// Every chunk but the last: `parallel` bodies going up at once, and up to `awaiting` more whose
// bodies are sent, waiting for their answers. Then the last, carrying the file's sha256.
await new Promise((resolve, reject) => {
  let next = 0;
  let sending = 0;
  let open = 0;
  let done = 0;
  const more = () => {
    if (done === total - 1) return resolve();
    while (next < total - 1 && sending < parallel && open < parallel + awaiting) {
      let sent = false;
      sending++;
      open++;
      const handOver = () => {
        if (sent || awaiting === 0) return;
        sent = true;
        sending--;
        more();
      };
      sendChunk(next++, undefined, handOver).then(() => {
        if (!sent) sending--;
        open--;
        done++;
        more();
      }, reject);
    }
  };
  more();
});
await sendChunk(total - 1, await sha256);
if (hashing) {
  const share = await request('GET', `/files/${id}`, { accept: 'application/json' });
  if (JSON.parse(share.body).sha256 !== (await sha256)) throw new Error('the sha256 differs');
}
await handle.close();
agent.destroy();
process.stdout.write(`${id}\n`);
