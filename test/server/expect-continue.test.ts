// A chunk upload that sends `Expect: 100-continue` (curl does for bodies over 1 MiB) is refused
// from its headers before its body is sent: the 4xx comes instead of 100 Continue, and 100 only
// once the checks the headers allow have passed. Found from outside: the server sent 100 Continue
// at once to every such request, so curl sent a whole chunk with a bad token, for an unknown or
// locked share, over the quota or over --max-chunk-size, only to have it refused at the end.
import net from 'node:net';
import { randomBytes, randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  content,
  createShare,
  createUser,
  expectStatus,
  get,
  multipart,
  patch,
  post,
} from '../helpers/http.js';
import {
  ADMIN,
  incomingFiles,
  login,
  startServer,
  storedUploads,
  type TestServer,
} from '../helpers/server.js';

const MAX_CHUNK = 64 * 1024;

/**
 * Sends a chunk's request head with `Expect: 100-continue` on a raw socket, and its body only if
 * the server answers 100 Continue (then with `Connection: close`, so that the server ends the
 * connection after its answer). Resolves with everything the server sent, once it has closed
 * the connection.
 */
function sendExpecting(
  srv: TestServer,
  method: 'POST' | 'PUT',
  path: string,
  token: string | undefined,
  declared: number,
  body?: { body: Buffer; contentType: string },
): Promise<string> {
  const { hostname, port } = new URL(srv.direct);
  const data = body ?? multipart([{ name: 'dzuuid', value: randomUUID() }]);
  return new Promise((resolve, reject) => {
    const socket = net.connect(Number(port), hostname);
    let text = '';
    let sent = false;
    socket.on('error', reject);
    socket.on('data', (bytes: Buffer) => {
      text += bytes.toString('latin1');
      if (sent || !text.includes('\r\n\r\n')) return;
      sent = true;
      // Only a 100 Continue lets the body go; without a body to send (a request that must be
      // refused), the client gives up (the old server then waited for a body).
      if (text.startsWith('HTTP/1.1 100 ') && body) socket.write(body.body);
      else if (text.startsWith('HTTP/1.1 100 ')) socket.destroy();
    });
    socket.on('close', () => resolve(text));
    socket.write(
      `${method} ${path} HTTP/1.1\r\nHost: ${hostname}:${port}\r\n` +
        (token ? `Authorization: Bearer ${token}\r\n` : '') +
        `Content-Type: ${data.contentType}\r\nContent-Length: ${declared}\r\n` +
        'Expect: 100-continue\r\n' +
        (body ? 'Connection: close\r\n' : '') +
        '\r\n',
    );
  });
}

const chunk = (bytes: Buffer) =>
  multipart([
    { name: 'dzuuid', value: randomUUID() },
    { name: 'dzchunkindex', value: '0' },
    { name: 'dztotalchunks', value: '1' },
    { name: 'upload', filename: 'b', data: bytes },
  ]);

describe('Expect: 100-continue on chunk uploads', () => {
  let srv: TestServer;
  let admin: string;
  beforeAll(async () => {
    srv = await startServer({ maxChunkBytes: MAX_CHUNK });
    admin = await login(srv.url, ADMIN.username, ADMIN.password);
  });
  afterAll(() => srv?.close());

  /** The answer is the refusal, never 100; the server closed the connection; nothing stored. */
  const expectRefused = async (answer: string, status: number, message: RegExp, id: string) => {
    expect(answer.split('\r\n')[0]).toMatch(new RegExp(`^HTTP/1\\.1 ${status} `));
    expect(answer).not.toContain('100 Continue');
    expect(answer).toMatch(/\r\nConnection: close\r\n/i);
    expect(answer).toMatch(/\r\nAccess-Control-Allow-Origin: \*\r\n/i);
    const json = JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4)) as {
      status: string;
      message: string;
    };
    expect(json.status).toBe('fail');
    expect(json.message).toMatch(message);
    expect(await storedUploads(srv, id)).toEqual([]);
    expect(await incomingFiles(srv)).toEqual([]);
  };

  it('a bad token, a missing permission, an unknown or locked share: the 4xx instead of 100 Continue, and nothing stored', async () => {
    const id = await createShare(srv.url, admin, 'refused.bin');
    const declared = 1024 * 1024 + 7;
    const path = `/files/${id}/content`;
    await expectRefused(
      await sendExpecting(srv, 'POST', path, 'not-a-token', declared),
      401,
      /token/,
      id,
    );
    const reader = await createUser(srv.url, admin, ['READ']);
    await expectRefused(
      await sendExpecting(srv, 'POST', path, reader.token, declared),
      403,
      /CREATE/,
      id,
    );
    await expectRefused(
      await sendExpecting(srv, 'POST', `/files/${randomUUID()}/content`, admin, declared),
      404,
      /No share/,
      id,
    );
    expectStatus(await post(srv.url, `/files/${id}/lock`, { token: admin }), 200);
    await expectRefused(await sendExpecting(srv, 'POST', path, admin, declared), 423, /locked/, id);
    expect((await get(srv.url, `/files/${id}`, { token: admin })).body.initialized).toBe(false);
  });

  it('a Content-Length over the quota or over the chunk size: 413 instead of 100 Continue', async () => {
    const user = await createUser(srv.url, admin, ['CREATE', 'READ']);
    expectStatus(
      await patch(srv.url, `/users/${user.username}`, { token: admin, json: { quota: 10_000 } }),
      200,
    );
    const mine = await createShare(srv.url, user.token, 'quota.bin');
    await expectRefused(
      await sendExpecting(srv, 'POST', `/files/${mine}/content`, user.token, 100_000),
      413,
      /quota/,
      mine,
    );
    const id = await createShare(srv.url, admin, 'large.bin');
    await expectRefused(
      await sendExpecting(srv, 'POST', `/files/${id}/content`, admin, 4 * MAX_CHUNK),
      413,
      /larger than the server accepts/,
      id,
    );
  });

  it('a chunk that passes the checks gets 100 Continue, then 201 once its body is stored', async () => {
    const id = await createShare(srv.url, admin, 'accepted.bin');
    const data = randomBytes(MAX_CHUNK);
    const body = chunk(data);
    const answer = await sendExpecting(
      srv,
      'POST',
      `/files/${id}/content`,
      admin,
      body.body.length,
      body,
    );
    expect(answer).toMatch(/^HTTP\/1\.1 100 Continue\r\n\r\nHTTP\/1\.1 201 /);
    expect((await content(srv.url, admin, id)).equals(data)).toBe(true);
  });
});
