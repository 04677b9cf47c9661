// The least server we could write for the chunk protocol's placed chunks, keeping the promise that
// a chunk is durable before its answer: how fast may 64 chunks of 8 MiB go, at best, against one
// body? No authentication, no metadata store, no hashing, no checks of what a client declares,
// no multipart parser: each body's fields are read from its head, the chunk's bytes are exactly
// the size its layout gives (`dzchunkbyteoffset`, `dzchunksize`, `dztotalfilesize`), and whatever
// follows them (the epilogue) is ignored. Each chunk's bytes go straight into their place in the
// upload's data file, in writes of 256 KiB at most, one at a time per body; once its body has
// ended, the data file's `fdatasync`, then a line in the upload's log and the log's `fdatasync`
// (the record a restarted server would need of which chunks it holds), then the answer: 200, or
// 201 for the chunk that completes the upload (the data file renamed into place, its folder
// synced). With `onesync`, no log: one `fdatasync` per chunk (a lower bound with nothing a
// restart could trust).
//
// usage: node least-server.mjs DIR [onesync]     prints the URL it listens on (127.0.0.1, a free port)
//   POST /files                  → 201 {"url": "/files/ID"}
//   POST /files/ID/content       a chunk, as bench/floor/protocol-upload.mjs and curl -F send it
// Measured by bench/floor.mjs, "node-protocol → least server".
import { randomUUID } from 'node:crypto';
import { closeSync, fdatasync, fsync, open, openSync, rename, write } from 'node:fs';
import http from 'node:http';
import { join } from 'node:path';
import { promisify } from 'node:util';

const [dir, ...flags] = process.argv.slice(2);
const oneSync = flags.includes('onesync');
const PIECE = 256 * 1024;
const pOpen = promisify(open);
const pWrite = promisify(write);
const pDatasync = promisify(fdatasync);
const pFsync = promisify(fsync);
const pRename = promisify(rename);

/** upload id → { fd, log, total, arrived: Set, ready: Promise } */
const uploads = new Map();

function uploadOf(share, dzuuid, total) {
  const key = `${share}/${dzuuid}`;
  let up = uploads.get(key);
  if (!up) {
    up = { key, total, arrived: new Set(), data: join(dir, `${randomUUID()}.part`) };
    up.ready = (async () => {
      up.fd = await pOpen(up.data, 'w');
      if (!oneSync) up.log = await pOpen(`${up.data}.log`, 'a');
    })();
    uploads.set(key, up);
  }
  return up;
}

function answer(res, status, body) {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': text.length });
  res.end(text);
}

async function receive(req, res, share) {
  const boundary = /boundary=(.+)$/.exec(req.headers['content-type'] ?? '')?.[1];
  if (!boundary) return answer(res, 400, { message: 'no boundary' });
  // The head: every part up to the end of the `upload` part's headers.
  // (The body's iterator is used by hand: leaving a `for await` early would destroy the stream.)
  const body = req[Symbol.asyncIterator]();
  let head = Buffer.alloc(0);
  let rest;
  for (let next; !(next = await body.next()).done;) {
    head = Buffer.concat([head, next.value]);
    const at = head.indexOf('filename=');
    const end = at < 0 ? -1 : head.indexOf('\r\n\r\n', at);
    if (end >= 0) {
      rest = head.subarray(end + 4);
      head = head.subarray(0, end).toString('latin1');
      break;
    }
    if (head.length > 64 * 1024) return answer(res, 400, { message: 'no upload part' });
  }
  if (rest === undefined) return answer(res, 400, { message: 'no upload part' });
  const field = (name) => {
    const m = new RegExp(`name="${name}"\\r\\n\\r\\n([^\\r]*)\\r\\n`).exec(head);
    return m ? (Number.isNaN(Number(m[1])) ? m[1] : Number(m[1])) : undefined;
  };
  const offset = field('dzchunkbyteoffset');
  const chunk = field('dzchunksize');
  const fileSize = field('dztotalfilesize');
  const total = field('dztotalchunks');
  const index = field('dzchunkindex');
  if ([offset, chunk, fileSize, total, index].some((v) => typeof v !== 'number'))
    return answer(res, 400, { message: 'the least server takes placed chunks only' });
  const up = uploadOf(share, field('dzuuid'), total);
  await up.ready;
  let left = Math.min(chunk, fileSize - offset);
  let at = offset;
  // Writes of at most 256 KiB, one at a time; the body waits (backpressure) while one runs.
  let pending = [];
  let pendingBytes = 0;
  const flush = async () => {
    if (pendingBytes === 0) return;
    const buf = pending.length === 1 ? pending[0] : Buffer.concat(pending, pendingBytes);
    pending = [];
    pendingBytes = 0;
    for (let done = 0; done < buf.length;) {
      const { bytesWritten } = await pWrite(up.fd, buf, done, buf.length - done, at);
      done += bytesWritten;
      at += bytesWritten;
    }
  };
  const take = async (piece) => {
    const mine = piece.subarray(0, left);
    left -= mine.length;
    for (let i = 0; i < mine.length;) {
      const part = mine.subarray(i, i + (PIECE - pendingBytes));
      pending.push(part);
      pendingBytes += part.length;
      i += part.length;
      if (pendingBytes === PIECE) await flush();
    }
  };
  if (rest.length) await take(rest);
  for (let next; !(next = await body.next()).done;) if (left > 0) await take(next.value);
  await flush();
  if (left > 0) return answer(res, 400, { message: 'the chunk is short' });
  await pDatasync(up.fd);
  if (!oneSync) {
    await pWrite(up.log, `${index}\n`);
    await pDatasync(up.log);
  }
  up.arrived.add(index);
  if (up.arrived.size < up.total) return answer(res, 200, { message: 'chunk stored' });
  uploads.delete(up.key);
  await pFsync(up.fd);
  closeSync(up.fd);
  if (up.log !== undefined) closeSync(up.log);
  await pRename(up.data, join(dir, share));
  const dirFd = openSync(dir, 'r');
  await pFsync(dirFd);
  closeSync(dirFd);
  answer(res, 201, { status: 'success', message: 'upload complete' });
}

const server = http.createServer((req, res) => {
  const m = /^\/files(?:\/([0-9a-f-]{36})\/content)?$/.exec(req.url);
  if (req.method === 'POST' && m && !m[1]) {
    req.resume();
    return answer(res, 201, { url: `/files/${randomUUID()}` });
  }
  if (req.method === 'POST' && m?.[1])
    return receive(req, res, m[1]).catch((err) => {
      if (!res.headersSent) answer(res, 500, { message: String(err) });
    });
  req.resume();
  answer(res, 404, { message: 'not here' });
});
server.keepAliveTimeout = 60_000;
server.listen(0, '127.0.0.1', () => {
  process.stdout.write(`http://127.0.0.1:${server.address().port}\n`);
});
