// Hostile or malformed input is refused with a 4xx JSON error and changes nothing (a tester's
// findings): bodies that are not JSON, JSON that does not parse on routes that read no body.
import http from 'node:http';
import net from 'node:net';
import contentDisposition from 'content-disposition';
import { gzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  allShares,
  createShare,
  createShareWithContent,
  createUser,
  del,
  expectFail,
  expectStatus,
  get,
  patch,
  post,
  request,
  multipart,
  sendChunk,
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

/**
 * Sends one raw request to `base` (the server itself, not a balancer in front) and reads the
 * answer until the connection closes; the body parsed as JSON when it is JSON.
 */
function rawExchange(base: string, request: string | Buffer) {
  return new Promise<{ status: number; body: any }>((resolve, reject) => {
    const { hostname, port } = new URL(base);
    const socket = net.connect(Number(port), hostname);
    let answer = '';
    socket.on('data', (d) => (answer += d.toString('latin1')));
    socket.on('error', reject);
    socket.on('close', () => {
      const status = Number(/^HTTP\/1\.1 (\d+)/.exec(answer)?.[1] ?? 0);
      const text = answer.slice(answer.indexOf('\r\n\r\n') + 4);
      let body: unknown;
      try {
        body = JSON.parse(text);
      } catch {
        body = text;
      }
      resolve({ status, body });
    });
    socket.end(request);
  });
}

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

  // The public side of a link read its form and let a body declared JSON that did not parse
  // through (a 303 as if nothing were wrong). It is a 400 there too; a form still works.
  it('POST /l/<token> refuses JSON that does not parse', async () => {
    const id = await createShareWithContent(
      srv.url,
      alice.token,
      unique('linked'),
      Buffer.from('x'),
    );
    const made = await post(srv.url, `/files/${id}/links`, { token: alice.token, json: {} });
    expectStatus(made, 201);
    const path = new URL(made.body.url as string).pathname;
    for (const body of ['{', '[]', '"x"'])
      expectFail(
        await post(srv.url, path, {
          body,
          headers: { 'content-type': 'application/json', accept: 'application/json' },
        }),
        400,
      );
    const fine = await post(srv.url, path, {
      body: 'a=b',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
    });
    expect(fine.status).toBe(303);
  });
});

describe('JSON charsets', () => {
  // A JSON body is UTF-8 (RFC 8259 §8.1): another charset is a 415 that says so. Found from
  // outside: body-parser's own lower-case `unsupported charset "ISO-8859-1"`.
  it('refuses a JSON body in another charset with a 415 that names it, creating nothing', async () => {
    const before = (await allShares(srv.url, alice.token)).length;
    const res = await request(srv.url, 'POST', '/files', {
      token: alice.token,
      body: Buffer.from('{"file_name":"latin.txt"}'),
      headers: { 'content-type': 'application/json; charset=iso-8859-1' },
    });
    expectFail(res, 415);
    expect(res.body.message).toBe(
      'A JSON body is read as UTF-8, UTF-16 or UTF-32 (this one\'s Content-Type names charset "iso-8859-1")',
    );
    expect(await allShares(srv.url, alice.token)).toHaveLength(before);
  });
});

describe('dates from clients', () => {
  // Date.parse read "2030-02-30T00:00:00Z" as 2 March and stored it: an ISO date in a body must
  // name a real calendar date and time, else 400 and nothing is made or changed.
  it('refuses an "expires" that is no real date, on shares and links', async () => {
    const id = await createShare(srv.url, alice.token, unique('dates'));
    const before = (await allShares(srv.url, alice.token)).length;
    for (const expires of [
      '2030-02-30T00:00:00Z',
      '2029-02-29T00:00:00Z',
      '2030-13-01T00:00:00Z',
      '2030-01-01T24:00:00Z',
      '2030-01-01T12:60:00Z',
      '2030-01-01T12:00:60Z',
      '2030-01-01T12:00:00+24:00',
    ]) {
      const link = await post(srv.url, `/files/${id}/links`, {
        token: alice.token,
        json: { expires },
      });
      expectFail(link, 400);
      expect(link.body.message).toMatch(/real date/);
      expectFail(await post(srv.url, '/files', { token: alice.token, json: { expires } }), 400);
      expectFail(
        await patch(srv.url, `/files/${id}`, { token: alice.token, json: { expires } }),
        400,
      );
    }
    expect((await get(srv.url, `/files/${id}/links`, { token: alice.token })).body.data).toEqual(
      [],
    );
    expect((await get(srv.url, `/files/${id}`, { token: alice.token })).body.expires).toBeNull();
    expect((await allShares(srv.url, alice.token)).length).toBe(before);
    // A leap day and an offset are real.
    const ok = await post(srv.url, `/files/${id}/links`, {
      token: alice.token,
      json: { expires: '2028-02-29T12:00:00+02:00' },
    });
    expectStatus(ok, 201);
    expect(ok.body.expires).toBe('2028-02-29T10:00:00.000Z');
  });

  it('parses ISO times and HTTP-dates strictly', async () => {
    const { parseHttpDate, parseIsoWithZone } = await import('../../src/server/dates.js');
    expect(parseIsoWithZone('2030-02-30T00:00:00Z')).toBeNaN();
    expect(parseIsoWithZone('2030-01-01T12:00:00.5+01:30')).toBe(
      Date.parse('2030-01-01T10:30:00.500Z'),
    );
    const t = Date.parse('1994-11-06T08:49:37Z');
    expect(parseHttpDate('Sun, 06 Nov 1994 08:49:37 GMT')).toBe(t);
    expect(parseHttpDate('Sunday, 06-Nov-94 08:49:37 GMT')).toBe(t);
    expect(parseHttpDate('Sun Nov  6 08:49:37 1994')).toBe(t);
    for (const bad of [
      '0',
      '2099',
      '1994-11-06T08:49:37Z',
      'Sun, 31 Nov 1994 08:49:37 GMT',
      'Sun, 06 Nov 1994 24:00:00 GMT',
      'Sun, 06 Nov 1994 08:49:37 UTC',
      'sun, 06 nov 1994 08:49:37 GMT',
      'Sun, 6 Nov 1994 08:49:37 GMT',
      'Sun, 06 Nov 1994 08:49:37 GMT, Mon, 07 Nov 1994 08:49:37 GMT',
    ])
      expect(parseHttpDate(bad), bad).toBeNaN();
  });

  // "If-Unmodified-Since: 0" gave 412 and "If-Modified-Since: 2099" a 304: neither is an
  // HTTP-date, and RFC 9110 §13.1.3/§13.1.4 say such a header is ignored. An If-Range that is
  // not a valid date does not match (§13.1.5): the whole content is sent.
  it('ignores conditional headers whose date is not an HTTP-date', async () => {
    const data = Buffer.from('0123456789');
    const id = await createShareWithContent(srv.url, alice.token, unique('cond'), data);
    // Dates vouch for content only once its second is over (downloads.test.ts, "a date").
    await new Promise((r) => setTimeout(r, 1000));
    const path = `/files/${id}/content`;
    const at = (headers: Record<string, string>) =>
      get(srv.url, path, { token: alice.token, headers });
    for (const bad of ['0', '2099', '1', 'Thu, 31 Feb 2099 00:00:00 GMT', '2099-01-01']) {
      const unmodified = await at({ 'if-unmodified-since': bad });
      expectStatus(unmodified, 200);
      expect(unmodified.text).toBe('0123456789');
      expectStatus(await at({ 'if-modified-since': bad }), 200);
      const ranged = await at({ range: 'bytes=1-2', 'if-range': bad });
      expectStatus(ranged, 200);
      expect(ranged.text).toBe('0123456789');
    }
    // Real HTTP-dates still work, in all three forms.
    expectStatus(await at({ 'if-modified-since': 'Fri, 01 Jan 2100 00:00:00 GMT' }), 304);
    expectStatus(await at({ 'if-modified-since': 'Friday, 01-Jan-77 00:00:00 GMT' }), 200);
    expectStatus(await at({ 'if-unmodified-since': 'Sun Nov  6 08:49:37 1994' }), 412);
    const lastModified = (await at({})).headers['last-modified']!;
    const ranged = await at({ range: 'bytes=1-2', 'if-range': lastModified });
    expectStatus(ranged, 206);
    expect(ranged.text).toBe('12');
  });
});

describe('users', () => {
  // DELETE /users/<unknown>/tokens as ADMIN answered 403 "You may only read your own user
  // record", where every other admin endpoint answers 404 for a name that does not exist.
  it('DELETE /users/<unknown>/tokens is a 404 for an administrator, still 403 for others', async () => {
    const res = await del(srv.url, `/users/${unique('nobody')}/tokens`, { token: admin });
    expectFail(res, 404);
    expectFail(await del(srv.url, `/users/${unique('nobody')}`, { token: admin }), 404);
    expectFail(
      await del(srv.url, `/users/${unique('nobody')}/tokens`, { token: alice.token }),
      403,
    );
    expectFail(await del(srv.url, `/users/${ADMIN.username}/tokens`, { token: alice.token }), 403);
    // An administrator still signs another user out everywhere.
    const bob = await createUser(srv.url, admin, ['READ']);
    expectStatus(await del(srv.url, `/users/${bob.username}/tokens`, { token: admin }), 200);
    expectFail(await get(srv.url, `/users/${bob.username}`, { token: bob.token }), 401);
  });
});

describe('lengths in characters', () => {
  // A file_name of 513 emoji (1026 UTF-16 units) was refused, though the limit is 1024
  // characters: "characters" are counted as Unicode code points, for file_name, the name
  // filters of GET /files and dzuuid alike.
  it('counts file_name, name filters and dzuuid in code points', async () => {
    const name = '💥'.repeat(1024);
    const res = await post(srv.url, '/files', { token: alice.token, json: { file_name: name } });
    expectStatus(res, 201);
    const id = (res.body.url as string).split('/')[2]!;
    expect((await get(srv.url, `/files/${id}`, { token: alice.token })).body.file_name).toBe(name);
    expectFail(
      await post(srv.url, '/files', { token: alice.token, json: { file_name: `${name}x` } }),
      400,
    );
    expectStatus(
      await patch(srv.url, `/files/${id}`, { token: alice.token, json: { file_name: name } }),
      200,
    );
    const found = await get(srv.url, `/files?file_name=${encodeURIComponent(name)}`, {
      token: alice.token,
    });
    expectStatus(found, 200);
    expect(found.body.data.map((s: { share_id: string }) => s.share_id)).toEqual([id]);
    const dzuuid = '💥'.repeat(1024);
    expectStatus(
      await sendChunk(srv.url, alice.token, id, {
        dzuuid,
        index: 0,
        total: 2,
        data: Buffer.from('ab'),
      }),
      200,
    );
    expectStatus(
      await get(srv.url, `/files/${id}/uploads/${encodeURIComponent(dzuuid)}`, {
        token: alice.token,
      }),
      200,
    );
    expectFail(
      await sendChunk(srv.url, alice.token, id, {
        dzuuid: `${dzuuid}x`,
        index: 0,
        total: 2,
        data: Buffer.from('ab'),
      }),
      400,
    );
  });
});

describe('ranges', () => {
  // "Range: bytes=1-2," was a 416: RFC 9110 §5.6.1.2 says empty list elements are accepted and
  // ignored, so it is the range 1-2.
  it('accepts empty elements in a range list', async () => {
    const id = await createShareWithContent(
      srv.url,
      alice.token,
      unique('rng'),
      Buffer.from('0123456789'),
    );
    const at = (range: string) =>
      get(srv.url, `/files/${id}/content`, { token: alice.token, headers: { range } });
    for (const range of ['bytes=1-2,', 'bytes=,1-2', 'bytes=1-2, ,', 'bytes= , 1-2 ,']) {
      const res = await at(range);
      expectStatus(res, 206);
      expect(res.text, range).toBe('12');
      expect(res.headers['content-range']).toBe('bytes 1-2/10');
    }
    // Two ranges (with empty elements among them) still get the whole content.
    const two = await at('bytes=0-0,,3-4,');
    expectStatus(two, 200);
    expect(two.text).toBe('0123456789');
    // A list with no range at all, or a bad element, is still unsatisfiable.
    for (const range of ['bytes=,', 'bytes=', 'bytes=1-2,x']) expectFail(await at(range), 416);
  });
});

describe('quotas', () => {
  // PATCH owner_name handed a 100-byte share to a user with quota 0 (200, and the user then
  // showed "quota":0,"used":100): a share handed over must fit the recipient's quota, else 413
  // naming it, and nothing changes.
  it("handing a share over is refused past the recipient's quota", async () => {
    const q0 = unique('q0');
    expectStatus(
      await post(srv.url, '/users', {
        token: admin,
        json: { username: q0, password: 'qqqqqqqqqq', permissions: ['READ'], quota: 150 },
      }),
      201,
    );
    const id = await createShareWithContent(srv.url, alice.token, unique('big'), Buffer.alloc(100));
    const small = await createShareWithContent(srv.url, alice.token, unique('s'), Buffer.alloc(60));
    // 60 bytes fit into 150.
    expectStatus(
      await patch(srv.url, `/files/${small}`, { token: alice.token, json: { owner_name: q0 } }),
      200,
    );
    // 100 more do not (90 are left).
    for (const res of [
      await patch(srv.url, `/files/${id}`, { token: alice.token, json: { owner_name: q0 } }),
      await request(srv.url, 'PUT', `/files/${id}`, {
        token: alice.token,
        json: { owner_name: q0, file_name: 'renamed' },
      }),
    ]) {
      expectFail(res, 413);
      expect(res.body.message).toContain(q0);
      expect(res.body.message).toMatch(/quota \(150 bytes; 90 bytes are left\)/);
    }
    const share = await get(srv.url, `/files/${id}`, { token: alice.token });
    expect(share.body.owner_name).toBe(alice.username);
    expect(share.body.file_name).not.toBe('renamed');
    const user = await get(srv.url, `/users/${q0}`, { token: admin });
    expect(user.body).toMatchObject({ quota: 150, used: 60 });
    // A share without content fits anyone, and other changes are not affected.
    const empty = await createShare(srv.url, alice.token, unique('e'));
    expectStatus(
      await patch(srv.url, `/files/${empty}`, { token: alice.token, json: { owner_name: q0 } }),
      200,
    );
  });
});

describe('chunk encodings', () => {
  // A chunk sent with Content-Encoding: gzip was stored as sent (still compressed), the encoding
  // ignored: a chunk in any encoding but identity is now a 415 JSON, and nothing is stored.
  it('refuses a chunk with a Content-Encoding it does not decode, storing nothing', async () => {
    const id = await createShare(srv.url, alice.token, unique('enc'));
    const dzuuid = unique('u');
    const send = (encoding: string, data: Buffer) => {
      const { body, contentType } = multipart([
        { name: 'dzuuid', value: dzuuid },
        { name: 'dzchunkindex', value: '0' },
        { name: 'dztotalchunks', value: '1' },
        { name: 'upload', filename: 'blob', data },
      ]);
      return post(srv.url, `/files/${id}/content`, {
        token: alice.token,
        body,
        headers: { 'content-type': contentType, 'content-encoding': encoding },
      });
    };
    for (const encoding of ['gzip', 'br', 'deflate', 'x-custom', 'identity, gzip']) {
      const res = await send(encoding, gzipSync(Buffer.from('hello')));
      expectFail(res, 415);
      expect(res.headers['accept-encoding']).toBe('identity');
    }
    expect((await get(srv.url, `/files/${id}`, { token: alice.token })).body.initialized).toBe(
      false,
    );
    expectFail(await get(srv.url, `/files/${id}/uploads/${dzuuid}`, { token: alice.token }), 404);
    // identity is no encoding at all.
    expectStatus(await send('identity', Buffer.from('hello')), 201);
    expect((await get(srv.url, `/files/${id}/content`, { token: alice.token })).text).toBe('hello');
  });
});

describe('transfer codings', () => {
  /** One raw request, its body sent in the given transfer codings (chunked framing last). */
  const rawCoded = (path: string, codings: string, contentType: string, body: Buffer) =>
    rawExchange(
      srv.direct,
      Buffer.concat([
        Buffer.from(
          `POST ${path} HTTP/1.1\r\nHost: ${new URL(srv.direct).hostname}\r\nAuthorization: Bearer ${alice.token}\r\n` +
            `Content-Type: ${contentType}\r\nTransfer-Encoding: ${codings}\r\nConnection: close\r\n\r\n` +
            `${body.length.toString(16)}\r\n`,
        ),
        body,
        Buffer.from('\r\n0\r\n\r\n'),
      ]),
    );

  // Node decodes chunked alone: a body sent as "gzip, chunked" reached the routes still
  // compressed (a JSON body read as unparsable, a chunk's bytes as a broken form, and a form that
  // happened to parse would have been stored compressed). Any coding but chunked is now a 501
  // JSON before the body is read, and nothing is made or stored.
  it('refuses a body in a transfer coding other than chunked with a 501 JSON, changing nothing', async () => {
    const before = (await allShares(srv.url, alice.token)).length;
    for (const codings of [
      'gzip, chunked',
      'deflate, chunked',
      'x-custom, chunked',
      'GZIP ,chunked',
    ]) {
      const res = await rawCoded(
        '/files',
        codings,
        'application/json',
        gzipSync(JSON.stringify({ file_name: unique('te') })),
      );
      expect({ codings, res }).toEqual({
        codings,
        res: { status: 501, body: { status: 'fail', message: expect.stringMatching(/chunked/) } },
      });
    }
    expect((await allShares(srv.url, alice.token)).length).toBe(before);

    const id = await createShare(srv.url, alice.token, unique('te'));
    const dzuuid = unique('u');
    const { body, contentType } = multipart([
      { name: 'dzuuid', value: dzuuid },
      { name: 'dzchunkindex', value: '0' },
      { name: 'dztotalchunks', value: '1' },
      { name: 'upload', filename: 'blob', data: Buffer.from('hello') },
    ]);
    const res = await rawCoded(
      `/files/${id}/content`,
      'gzip, chunked',
      contentType,
      gzipSync(body),
    );
    expect(res).toEqual({ status: 501, body: { status: 'fail', message: expect.any(String) } });
    expect((await get(srv.url, `/files/${id}`, { token: alice.token })).body.initialized).toBe(
      false,
    );
    expectFail(await get(srv.url, `/files/${id}/uploads/${dzuuid}`, { token: alice.token }), 404);
    // chunked alone is a transfer coding the server decodes.
    const plain = await rawCoded(`/files/${id}/content`, 'chunked', contentType, body);
    expect(plain.status).toBe(201);
    expect((await get(srv.url, `/files/${id}/content`, { token: alice.token })).text).toBe('hello');
  });
});

describe('file names', () => {
  // Names could be stored with NUL, CR/LF and bidi overrides and reached clients in
  // Content-Disposition (`nul%00.txt`, `x%0D%0ASet-Cookie…`, `%E2%80%AEtxt.exe`): create, rename
  // and PUT refuse C0 and C1 controls, DEL and the bidi embedding/override/isolate characters.
  it('refuses control and bidi characters in file_name', async () => {
    const id = await createShare(srv.url, alice.token, unique('ok'));
    const before = (await allShares(srv.url, alice.token)).length;
    for (const bad of [
      'nul\u0000.txt',
      'x\r\nSet-Cookie: a=b',
      'tab\there',
      'del\u007f',
      'c1\u0085',
      'c1\u009f',
      '\u202etxt.exe',
      'a\u202ab',
      'a\u2066b',
      'a\u2069b',
      'line\u2028break',
      'para\u2029graph',
    ]) {
      const made = await post(srv.url, '/files', { token: alice.token, json: { file_name: bad } });
      expectFail(made, 400);
      expect(made.body.message).toMatch(/control characters.*bidirectional/);
      expectFail(
        await patch(srv.url, `/files/${id}`, { token: alice.token, json: { file_name: bad } }),
        400,
      );
      expectFail(
        await request(srv.url, 'PUT', `/files/${id}`, {
          token: alice.token,
          json: { file_name: bad, owner_name: alice.username },
        }),
        400,
      );
    }
    expect((await allShares(srv.url, alice.token)).length).toBe(before);
    expect((await get(srv.url, `/files/${id}`, { token: alice.token })).body.file_name).toMatch(
      /^ok-/,
    );
    // Other characters beyond ASCII are still names (U+00A0, U+200F, emoji).
    expectStatus(
      await post(srv.url, '/files', {
        token: alice.token,
        json: { file_name: 'a\u00a0b\u200f💥' },
      }),
      201,
    );
  });

  // Names stored before the rule (old data) still download, without those characters.
  it('leaves control and bidi characters out of Content-Disposition', async () => {
    const { attachment } = await import('../../src/server/routes/content.js');
    for (const [stored, shown] of [
      ['nul\u0000.txt', 'nul_.txt'],
      ['x\r\nSet-Cookie: a=b', 'x__Set-Cookie: a=b'],
      ['\u202etxt.exe', '_txt.exe'],
      ['c1\u0085\u2066.bin', 'c1__.bin'],
      ['a\u2028b\u2029.txt', 'a_b_.txt'],
    ]) {
      const header = attachment(stored!);
      expect(header).not.toMatch(
        /[\x00-\x1f\x7f]|%00|%0D|%0A|%E2%80%AE|%C2%85|%E2%81%A6|%E2%80%A8|%E2%80%A9/i,
      );
      expect(contentDisposition.parse(header).parameters.filename).toBe(shown);
    }
  });
});

describe('links to expired shares', () => {
  // docs/API.md promised 410 for a link whose share expired, but the sweeper deletes the share
  // and its links at the expiry, so the link is unknown (404) a moment later. The docs now say
  // so, and the 404 tells the recipient that an expiry is one reason; a link's own expiry (its
  // record is kept) stays 410.
  it("answers 404 naming expiry once the share is swept; 410 for the link's own expiry", async () => {
    const data = Buffer.from('soon gone');
    const id = await createShareWithContent(srv.url, alice.token, unique('exp'), data);
    const expiring = await createShareWithContent(srv.url, alice.token, unique('exp'), data);
    const mk = async (share: string, json: Record<string, unknown>) => {
      const res = await post(srv.url, `/files/${share}/links`, { token: alice.token, json });
      expectStatus(res, 201);
      return new URL(res.body.url as string).pathname;
    };
    const ownExpiry = await mk(id, { expires_in: 1 });
    expectStatus(
      await patch(srv.url, `/files/${expiring}`, { token: alice.token, json: { expires_in: 1 } }),
      200,
    );
    const shareExpiry = await mk(expiring, {});
    await new Promise((r) => setTimeout(r, 1500));
    const json = { headers: { accept: 'application/json' } };
    const swept = await get(srv.url, shareExpiry, json);
    expectFail(swept, 404);
    expect(swept.body.message).toMatch(/expired/);
    expectFail(await get(srv.url, `${shareExpiry}?download`, json), 404);
    expectFail(await get(srv.url, ownExpiry, json), 410);
  });
});

describe('Host', () => {
  /** One raw request to the server itself (no balancer), with the Host lines given. */
  const rawLink = (base: string, id: string, hosts: string[]) =>
    rawExchange(
      base,
      `POST /files/${id}/links HTTP/1.1\r\n` +
        hosts.map((h) => `Host: ${h}\r\n`).join('') +
        `Authorization: Bearer ${alice.token}\r\nContent-Type: application/json\r\n` +
        'Content-Length: 2\r\nConnection: close\r\n\r\n{}',
    );

  // Link URLs were built from any Host: "evil.example/path?x=" gave
  // http://evil.example/path?x=/l/<token>, and `a"b`, an empty Host and `user@evil` were taken
  // too. A Host that is not host[:port] (RFC 9112 §3.2) is a 400 JSON, and nothing is made.
  it('refuses an invalid Host with 400 and builds link URLs only from a valid one', async () => {
    const id = await createShareWithContent(srv.url, alice.token, unique('h'), Buffer.from('x'));
    for (const hosts of [
      ['evil.example/path?x='],
      ['a"b'],
      [''],
      ['user@evil'],
      ['a b'],
      ['localhost:99999'],
      ['[::1'],
      ['[not-v6]'],
      ['host:port'],
      ['a.example', 'b.example'],
    ]) {
      const res = await rawLink(srv.direct, id, hosts);
      expect(res, JSON.stringify(hosts)).toEqual({
        status: 400,
        body: { status: 'fail', message: expect.stringMatching(/Host/) },
      });
    }
    expect((await get(srv.url, `/files/${id}/links`, { token: alice.token })).body.data).toEqual(
      [],
    );
    for (const host of ['files.example.org', 'files.example.org:8443', '[::1]:8080', '10.0.0.1']) {
      const res = await rawLink(srv.direct, id, [host]);
      expect(res.status, host).toBe(201);
      expect(res.body.url).toMatch(
        new RegExp(`^http://${host.replace(/[.[\]]/g, '\\$&')}/l/[\\w-]+$`),
      );
    }
  });

  // An HTTP/1.1 request without Host got Node's own 400: no body, no JSON, no CORS header, not
  // in the request log (found by sending one with a raw socket). It is the 400 JSON of a bad Host.
  it('refuses an HTTP/1.1 request without Host with a 400 JSON, and makes nothing', async () => {
    const id = await createShareWithContent(srv.url, alice.token, unique('h'), Buffer.from('x'));
    const res = await rawLink(srv.direct, id, []);
    expect(res).toEqual({
      status: 400,
      body: { status: 'fail', message: expect.stringMatching(/Host/) },
    });
    expect((await get(srv.url, `/files/${id}/links`, { token: alice.token })).body.data).toEqual(
      [],
    );
  });

  it('builds link URLs from --public-url when it is set, whatever the Host', async () => {
    const other = await startServer({ publicUrl: 'https://share.example.com/' });
    try {
      const token = await login(other.url, ADMIN.username, ADMIN.password);
      const user = await createUser(other.url, token, ['CREATE', 'READ']);
      const id = await createShareWithContent(other.url, user.token, 'p', Buffer.from('x'));
      const res = await post(other.url, `/files/${id}/links`, {
        token: user.token,
        json: {},
        headers: { host: 'evil.example' },
      });
      expectStatus(res, 201);
      expect(res.body.url).toMatch(/^https:\/\/share\.example\.com\/l\/[\w-]+$/);
    } finally {
      await other.close();
    }
  });
});

describe('HEAD', () => {
  // RFC 9110 §9.3.2: a HEAD answer's Content-Length is that of the GET's body. Found from
  // outside: the 404 and 405 messages named the method, so HEAD's was one byte longer.
  it('answers 404 and 405 with the Content-Length of the GET', async () => {
    const id = await createShare(srv.url, admin, 'head.txt');
    for (const path of ['/no/such/route', `/files/${id}/lock`, `/files/${id}/unlock`]) {
      const answer = async (method: string) => {
        const res = await fetch(new URL(path, srv.url), {
          method,
          headers: { authorization: `Bearer ${admin}` },
        });
        return {
          status: res.status,
          length: res.headers.get('content-length'),
          body: Buffer.from(await res.arrayBuffer()),
        };
      };
      const [getAnswer, headAnswer] = [await answer('GET'), await answer('HEAD')];
      expect([404, 405]).toContain(getAnswer.status);
      expect(headAnswer.status).toBe(getAnswer.status);
      expect(getAnswer.length).toBe(String(getAnswer.body.length));
      expect(headAnswer.length).toBe(getAnswer.length);
      expect(headAnswer.body.length).toBe(0);
    }
  });
});

describe('request methods', () => {
  // RFC 9110 §9.1: a method the server does not know is a 501. Found from outside: `FOO` and a
  // lower-case `get` got the 400 of bytes that are not HTTP, which a TLS handshake still gets.
  it('answers a method it does not know with 501 JSON, and bytes that are not HTTP with 400', async () => {
    for (const line of ['FOO /files HTTP/1.1', 'get /files HTTP/1.1', 'BREW /files/x HTTP/1.0']) {
      const res = await rawExchange(srv.direct, `${line}\r\nHost: x\r\nConnection: close\r\n\r\n`);
      expect(res.status, line).toBe(501);
      expect(res.body).toEqual({
        status: 'fail',
        message: 'The request method is not one the server knows (methods are case-sensitive)',
      });
    }
    // RFC 9110 §15.6.6: another major version is a 505 (it was served as HTTP/1.1).
    const two = await rawExchange(srv.direct, 'GET /files HTTP/2.0\r\nHost: x\r\n\r\n');
    expect(two.status).toBe(505);
    expect(two.body).toEqual({
      status: 'fail',
      message: "The server speaks HTTP/1.1 (this request's line says HTTP/2.0)",
    });
    // The same whatever the packets: the method split across two, or right after an earlier
    // request's body with no line end of its own (found from outside: both were 400).
    const statuses = async (parts: string[]) => {
      const { hostname, port } = new URL(srv.direct);
      const socket = net.connect(Number(port), hostname);
      let answer = '';
      socket.on('data', (d) => (answer += d.toString('latin1')));
      const closed = new Promise((resolve) => socket.on('close', resolve));
      socket.on('error', () => undefined);
      for (const part of parts) {
        socket.write(part);
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      await closed;
      return [...answer.matchAll(/HTTP\/1\.1 (\d{3}) /g)].map((m) => Number(m[1]));
    };
    expect(await statuses(['FO', 'O /files HTTP/1.1\r\nHost: x\r\n\r\n'])).toEqual([501]);
    expect(await statuses(['get /fi', 'les HTTP/1.1\r\nHost: x\r\n\r\n'])).toEqual([501]);
    const login = JSON.stringify({ username: ADMIN.username, password: ADMIN.password });
    expect(
      await statuses([
        `POST /users/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n` +
          `Content-Length: ${login.length}\r\n\r\n${login}FOO /files HTTP/1.1\r\nHost: x\r\n\r\n`,
      ]),
    ).toEqual([200, 501]);
    for (const version of ['HTTP/1.2', 'HTTP/3.0', 'HTTP/9.9']) {
      const other = await rawExchange(srv.direct, `GET /files ${version}\r\nHost: x\r\n\r\n`);
      expect(other.status, version).toBe(505);
      expect(other.body).toEqual({
        status: 'fail',
        message: "The server speaks HTTP/1.1; this request's line names another version",
      });
    }
    // A version that is not well-formed is not another version: 400 (found by a probe: 505,
    // saying the line named another version). A HEAD's answer has no body.
    for (const line of ['GET /files HTTP/1.1 ', 'GET /files HTTP/1', 'GET /files HTTP/1.1x']) {
      const odd = await rawExchange(srv.direct, `${line}\r\nHost: x\r\n\r\n`);
      expect(odd.status, JSON.stringify(line)).toBe(400);
    }
    const head = await rawExchange(srv.direct, 'HEAD /files HTTP/1.2\r\nHost: x\r\n\r\n');
    expect(head.status).toBe(505);
    expect(head.body).toBe('');
    const hello = Buffer.from('16030100f4010000f00303', 'hex');
    const garbage = await rawExchange(srv.direct, hello);
    expect(garbage.status).toBe(400);
    expect(garbage.body).toEqual({ status: 'fail', message: 'The request is not valid HTTP' });
  });
});

describe('401 answers', () => {
  // RFC 9110 §11.6.1: a 401 carries a WWW-Authenticate challenge. Found from outside: none did.
  it('every 401 names its challenge: Bearer for the API, the form for a link password', async () => {
    const id = await createShare(srv.url, admin, 'challenge.txt');
    const cases: [string, Promise<{ status: number; headers: Record<string, any> }>][] = [
      ['no token', get(srv.url, '/files')],
      ['bad token', get(srv.url, '/files', { token: 'not-a-token' })],
      ['not Bearer', get(srv.url, '/files', { headers: { authorization: 'Basic eDp5' } })],
      [
        'wrong password',
        post(srv.url, '/users/login', { json: { username: ADMIN.username, password: 'nope' } }),
      ],
    ];
    for (const [what, answer] of cases) {
      const res = await answer;
      expect(res.status, what).toBe(401);
      expect(res.headers['www-authenticate'], what).toMatch(/^Bearer realm="fshare"/);
    }
    expect(
      (await get(srv.url, '/files', { token: 'not-a-token' })).headers['www-authenticate'],
    ).toBe('Bearer realm="fshare", error="invalid_token"');
    const link = await post(srv.url, `/files/${id}/links`, {
      token: admin,
      json: { password: 'link-pw-1' },
    });
    expectStatus(link, 201);
    const page = await get(srv.url, new URL(link.body.url as string).pathname);
    expect(page.status).toBe(401);
    expect(page.headers['www-authenticate']).toBe('Form realm="fshare link"');
  });
});
