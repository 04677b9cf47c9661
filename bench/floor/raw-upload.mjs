// The least Node can do for the work `curl -F` does in the upload comparison: one multipart body
// holding the whole file as chunk 0 of 1, to a share created before the clock starts, nothing
// hashed. A raw socket (no node:http), the request written by hand (with fshare's 70-character
// boundary), the file read with readSync into two 1 MiB buffers used in turn. Measured by bench/floor.mjs; not a client anyone should
// use (no retries, no TLS, no checks beyond the status line).
//
// usage: FSHARE_TOKEN=… node raw-upload.mjs URL SHARE_ID FILE
import { randomBytes } from 'node:crypto';
import { closeSync, fstatSync, openSync, readSync } from 'node:fs';
import net from 'node:net';

const [url, id, file] = process.argv.slice(2);
const base = new URL(url);
const fd = openSync(file, 'r');
const size = fstatSync(fd).size;
const boundary = `-----------floor${randomBytes(27).toString('hex')}`;
const part = (name) => `--${boundary}\r\nContent-Disposition: form-data; name="${name}"\r\n\r\n`;
const head = Buffer.from(
  `${part('dzuuid')}${randomBytes(16).toString('hex')}\r\n` +
    `${part('dzchunkindex')}0\r\n${part('dztotalchunks')}1\r\n` +
    `--${boundary}\r\nContent-Disposition: form-data; name="upload"; filename="floor.bin"\r\n` +
    'Content-Type: application/octet-stream\r\n\r\n',
);
const tail = Buffer.from(`\r\n--${boundary}--\r\n`);

const socket = net.connect({ host: base.hostname, port: Number(base.port) });
await new Promise((resolve, reject) => socket.once('connect', resolve).once('error', reject));
let response = '';
const ended = new Promise((resolve, reject) => {
  socket.on('data', (d) => (response += d));
  socket.once('end', resolve).once('error', reject);
});
const write = (data) =>
  new Promise((resolve, reject) => socket.write(data, (err) => (err ? reject(err) : resolve())));

socket.write(
  `POST /files/${id}/content HTTP/1.1\r\nHost: ${base.host}\r\n` +
    `Authorization: Bearer ${process.env.FSHARE_TOKEN}\r\nConnection: close\r\n` +
    `Content-Type: multipart/form-data; boundary=${boundary}\r\n` +
    `Content-Length: ${head.length + size + tail.length}\r\n\r\n`,
);
await write(head);
const buffers = [Buffer.allocUnsafeSlow(1 << 20), Buffer.allocUnsafeSlow(1 << 20)];
let writing;
for (let at = 0, turn = 0; at < size; turn ^= 1) {
  const n = readSync(fd, buffers[turn], 0, Math.min(1 << 20, size - at), at);
  if (n === 0) throw new Error('the file got shorter');
  await writing; // the other buffer's write: this one is free
  writing = write(buffers[turn].subarray(0, n));
  at += n;
}
await writing;
await write(tail);
await ended;
closeSync(fd);
const status = /^HTTP\/1\.1 (\d{3})/.exec(response)?.[1];
if (status !== '200' && status !== '201') {
  process.stderr.write(`raw-upload: ${response.split('\r\n')[0] || 'no response'}\n`);
  process.exit(1);
}
