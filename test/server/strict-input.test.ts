// Hostile or malformed input is refused with a 4xx JSON error and changes nothing (a tester's
// findings): bodies that are not JSON, JSON that does not parse on routes that read no body.
import http from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  allShares,
  createShare,
  createUser,
  del,
  expectFail,
  expectStatus,
  get,
  post,
  request,
  unique,
} from '../helpers/http.js';
import { ADMIN, login, startServer, type TestServer } from '../helpers/server.js';

let srv: TestServer;
let admin: string;
let alice: { username: string; token: string };
beforeAll(async () => {
  srv = await startServer();
  admin = await login(srv.url, ADMIN.username, ADMIN.password);
  alice = await createUser(srv.url, admin, ['CREATE', 'MODIFY', 'DELETE', 'LOCK', 'LIST', 'READ']);
});
afterAll(() => srv.close());

describe('JSON bodies', () => {
  // POST /files took any body that was not application/json as no body at all and made a share
  // named after its id (text/plain, no Content-Type, forms, +json, a malformed Content-Type): it
  // must refuse them as PATCH does, and still take an empty body.
  it('POST /files refuses a body that is not JSON and creates nothing', async () => {
    const before = (await allShares(srv.url, alice.token)).length;
    const name = unique('tp');
    const cases: [string | undefined, string][] = [
      ['text/plain', JSON.stringify({ file_name: name })],
      [undefined, JSON.stringify({ file_name: name })],
      ['application/x-www-form-urlencoded', `file_name=${name}`],
      [
        'multipart/form-data; boundary=x',
        `--x\r\nContent-Disposition: form-data; name="file_name"\r\n\r\n${name}\r\n--x--\r\n`,
      ],
      ['application/vnd.api+json', JSON.stringify({ file_name: name })],
      ['application/json, text/plain', JSON.stringify({ file_name: name })],
    ];
    for (const [type, body] of cases) {
      const res = await post(srv.url, '/files', {
        token: alice.token,
        body,
        headers: type === undefined ? {} : { 'content-type': type },
      });
      expectFail(res, 400);
      expect(res.body.message).toMatch(/JSON object body is required/);
    }
    // A body sent in chunks (no Content-Length) is refused too.
    const chunked = await new Promise<number>((resolve, reject) => {
      const url = new URL('/files', srv.url);
      const r = http.request(
        {
          host: url.hostname,
          port: url.port,
          path: '/files',
          method: 'POST',
          headers: { authorization: `Bearer ${alice.token}`, 'content-type': 'text/plain' },
        },
        (res) => {
          res.resume();
          resolve(res.statusCode ?? 0);
        },
      );
      r.on('error', reject);
      r.write('{"file_name":');
      r.end('"x"}');
    });
    expect(chunked).toBe(400);
    expect((await allShares(srv.url, alice.token)).length).toBe(before);
    // No body at all, and an empty one of any type, still make a share named by its id.
    const empty: Record<string, string>[] = [
      {},
      { 'content-type': 'text/plain', 'content-length': '0' },
    ];
    for (const headers of empty) {
      const res = await request(srv.url, 'POST', '/files', { token: alice.token, headers });
      expectStatus(res, 201);
    }
    expect((await allShares(srv.url, alice.token)).length).toBe(before + 2);
  });

  // lock, unlock, /users/extend and DELETE /files/<id> read no body and took `{`, `[]` or `x`
  // declared as JSON with a 200 (DELETE even deleted the share): a body declared JSON must parse
  // as an object on every route, else 400 and nothing changes.
  it('routes that read no body refuse JSON that does not parse, and change nothing', async () => {
    const id = await createShare(srv.url, alice.token, unique('nobody'));
    const json = (body: string) => ({
      token: alice.token,
      body,
      headers: { 'content-type': 'application/json' },
    });
    for (const body of ['{', '[]', 'x']) {
      expectFail(await post(srv.url, `/files/${id}/lock`, json(body)), 400);
      expectFail(await post(srv.url, `/users/extend`, json(body)), 400);
      expectFail(await del(srv.url, `/files/${id}`, json(body)), 400);
      expectFail(await del(srv.url, `/users/${alice.username}/tokens`, json(body)), 400);
    }
    const share = await get(srv.url, `/files/${id}`, { token: alice.token });
    expectStatus(share, 200);
    expect(share.body.locked).toBe(false);
    // Alice's token still works: the tokens were not revoked.
    expectStatus(await get(srv.url, '/whoami', { token: alice.token }), 200);
    expect((await get(srv.url, '/whoami', { token: alice.token })).body.username).toBe(
      alice.username,
    );
    // An object, or no body, is fine.
    expectStatus(await post(srv.url, `/files/${id}/lock`, json('{}')), 200);
    expectStatus(await post(srv.url, `/files/${id}/unlock`, { token: alice.token }), 200);
    expectStatus(await del(srv.url, `/files/${id}`, json('{}')), 200);
  });
});
