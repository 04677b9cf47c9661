// `fshare serve` (the built binary) and connections that close with answers still queued on
// them (HTTP/1.1 pipelining). Property guarded: a closed connection holds nothing open on the
// server. Found from outside: a client that sent two downloads on one connection and closed it
// during the first left the second's content file open (the answer queued behind the first gets
// no 'close' of its own, so its write waited for good), one per connection, until a garbage
// collection closed it with a warning that a later Node turns into an error.
import { randomBytes } from 'node:crypto';
import { readdir, readlink } from 'node:fs/promises';
import { connect } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN, startServe, type Serve } from '../helpers/cli.js';
import { createShareWithContent } from '../helpers/http.js';
import { login } from '../helpers/server.js';

let serve: Serve;
let token: string;

beforeAll(async () => {
  serve = await startServe();
  token = await login(serve.url, ADMIN.username, ADMIN.password);
});
afterAll(async () => {
  await serve?.stop();
});

/** The server's open descriptors on files under its content/ directory. */
async function openContent(): Promise<number> {
  const content = join(serve.dataDir, 'content');
  let n = 0;
  for (const fd of await readdir(`/proc/${serve.pid}/fd`)) {
    const target = await readlink(`/proc/${serve.pid}/fd/${fd}`).catch(() => '');
    if (target.startsWith(`${content}/`)) n++;
  }
  return n;
}

/** Two downloads sent at once on one connection, which is closed during the first. */
function pipelinedAndCut(port: number, first: string, second: string): Promise<void> {
  const get = (id: string) =>
    `GET /files/${id}/content HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${token}\r\n\r\n`;
  return new Promise((done) => {
    const socket = connect(port, '127.0.0.1', () => socket.write(get(first) + get(second)));
    let got = 0;
    socket.on('data', (data) => {
      got += data.length;
      if (got < 1024 * 1024) return;
      socket.pause();
      setTimeout(() => {
        socket.destroy();
        done();
      }, 100);
    });
    socket.on('error', () => done());
  });
}

describe('connections closed with answers queued on them', () => {
  it('leave no content file open on the server', async () => {
    const big = await createShareWithContent(
      serve.url,
      token,
      'big.bin',
      randomBytes(8 * 1024 * 1024),
    );
    const small = await createShareWithContent(serve.url, token, 'small.bin', randomBytes(1000));
    const port = Number(new URL(serve.url).port);
    await Promise.all(Array.from({ length: 10 }, () => pipelinedAndCut(port, big, small)));
    let open = await openContent();
    for (let i = 0; i < 100 && open > 0; i++) {
      await new Promise((r) => setTimeout(r, 50));
      open = await openContent();
    }
    expect(open).toBe(0);
    // The server still answers whole, on a connection of its own.
    const res = await fetch(`${serve.url}/files/${small}/content`, {
      headers: { authorization: `Bearer ${token}` },
    });
    expect(res.status).toBe(200);
    expect((await res.arrayBuffer()).byteLength).toBe(1000);
  });
});
