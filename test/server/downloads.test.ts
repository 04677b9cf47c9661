// API.md "Content": GET/HEAD /files/<id>/content — headers, Content-Disposition for hostile names,
// single byte ranges per RFC 9110, If-Range, If-None-Match.
import { randomBytes, randomUUID } from 'node:crypto';
import { readdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { PutObjectCommand } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createShare,
  createShareWithContent,
  createUser,
  expectFail,
  expectStatus,
  get,
  post,
  request,
  sha256hex,
  upload,
  type Res,
} from '../helpers/http.js';
import { contentKeys, s3Client } from '../helpers/s3.js';
import { ADMIN, login, startServer, type TestServer } from '../helpers/server.js';
import { attachment } from '../../src/server/routes/content.js';

let srv: TestServer;
let base: string;
let admin: string;
let reader: string;
let id: string;
const DATA = randomBytes(1000);

const fetchContent = (headers: Record<string, string> = {}, method = 'GET', share = id) =>
  request(base, method, `/files/${share}/content`, { token: reader, headers });

beforeAll(async () => {
  srv = await startServer();
  base = srv.url;
  admin = await login(base, ADMIN.username, ADMIN.password);
  // The owner uploads; a different user with READ only downloads.
  id = await createShareWithContent(base, admin, 'notes.txt', DATA, 3);
  reader = (await createUser(base, admin, ['READ'])).token;
  // Its Last-Modified is sent once the second it was made in is over (a strong validator).
  await new Promise((r) => setTimeout(r, 1000));
});

afterAll(async () => {
  await srv?.close();
});

/** Parses `type; name=value; name="quoted \" value"` strictly; throws on anything else. */
function parseContentDisposition(value: string): { type: string; params: Record<string, string> } {
  const token = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+/;
  let rest = value;
  const typeMatch = token.exec(rest);
  if (!typeMatch) throw new Error(`no type in ${JSON.stringify(value)}`);
  const type = typeMatch[0].toLowerCase();
  rest = rest.slice(typeMatch[0].length);
  const params: Record<string, string> = {};
  while (rest.length > 0) {
    const sep = /^[ \t]*;[ \t]*/.exec(rest);
    if (!sep) throw new Error(`expected ';' at ${JSON.stringify(rest)}`);
    rest = rest.slice(sep[0].length);
    const name = token.exec(rest);
    if (!name) throw new Error(`expected a parameter name at ${JSON.stringify(rest)}`);
    rest = rest.slice(name[0].length);
    if (!rest.startsWith('=')) throw new Error(`expected '=' at ${JSON.stringify(rest)}`);
    rest = rest.slice(1);
    let val: string;
    if (rest.startsWith('"')) {
      let i = 1;
      val = '';
      for (;;) {
        if (i >= rest.length)
          throw new Error(`unterminated quoted string in ${JSON.stringify(value)}`);
        const c = rest[i]!;
        if (c === '\\') {
          val += rest[i + 1] ?? '';
          i += 2;
        } else if (c === '"') {
          i++;
          break;
        } else {
          val += c;
          i++;
        }
      }
      rest = rest.slice(i);
    } else {
      const tok = token.exec(rest);
      if (!tok) throw new Error(`expected a value at ${JSON.stringify(rest)}`);
      val = tok[0];
      rest = rest.slice(tok[0].length);
    }
    const key = name[0].toLowerCase();
    if (key in params) throw new Error(`duplicate parameter ${key}`);
    params[key] = val;
  }
  return { type, params };
}

function recoveredName(params: Record<string, string>): string {
  const star = params['filename*'];
  if (star !== undefined) {
    const m = /^UTF-8''(.*)$/i.exec(star);
    if (!m) throw new Error(`filename* is not UTF-8'': ${star}`);
    return decodeURIComponent(m[1]!);
  }
  return params['filename']!;
}

function headerCount(res: Res, name: string): number {
  return res.rawHeaders.filter((h, i) => i % 2 === 0 && h.toLowerCase() === name).length;
}

function expectRange(res: Res, start: number, end: number): void {
  expectStatus(res, 206);
  expect(res.headers['content-range']).toBe(`bytes ${start}-${end}/${DATA.length}`);
  expect(res.headers['content-length']).toBe(String(end - start + 1));
  expect(res.buf.equals(DATA.subarray(start, end + 1))).toBe(true);
}

function expectUnsatisfiable(res: Res, size = DATA.length): void {
  expectFail(res, 416);
  expect(res.headers['content-range']).toBe(`bytes */${size}`);
}

describe('GET /files/<id>/content', () => {
  it('streams the bytes with the contract headers', async () => {
    const res = await fetchContent();
    expectStatus(res, 200);
    expect(res.buf.equals(DATA)).toBe(true);
    expect(res.headers['content-length']).toBe('1000');
    expect(res.headers['accept-ranges']).toBe('bytes');
    expect(res.headers.etag).toMatch(/^(W\/)?".+"$/);
    expect(res.headers['last-modified']).toBeDefined();
    expect(Number.isNaN(Date.parse(res.headers['last-modified']!))).toBe(false);
    expect(res.headers['content-type']).toMatch(/^text\/plain/);
    expect(res.headers['x-content-type-options']).toBe('nosniff');
    const cd = parseContentDisposition(res.headers['content-disposition']!);
    expect(cd.type).toBe('attachment');
    expect(cd.params['filename']).toBe('notes.txt');
  });

  // Content-Disposition's name is sent as the reference server sends it: a name that is a token
  // unquoted (filename=notes.txt), as clients of the reference match it (its own suite checks
  // 'filename=content.bin' among the header's '; ' parts); found always quoted
  // (filename="notes.txt"). A name that is not a token stays quoted.
  it('a file name that is a token is sent unquoted, as the reference server sends it', async () => {
    const res = await fetchContent();
    expectStatus(res, 200);
    expect(res.headers['content-disposition']!.split('; ')).toContain('filename=notes.txt');
    expect(attachment('content.bin')).toBe('attachment; filename=content.bin');
    expect(attachment('with space.txt')).toBe('attachment; filename="with space.txt"');
    expect(attachment('café.pdf')).toBe(
      "attachment; filename=cafe.pdf; filename*=UTF-8''caf%C3%A9.pdf",
    );
  });

  it('the ETag is stable between reads', async () => {
    const a = await fetchContent();
    const b = await fetchContent();
    expect(a.headers.etag).toBe(b.headers.etag);
  });

  it('an uninitialized share → 404; unknown share → 404', async () => {
    const fresh = await createShare(base, admin, 'empty.txt');
    expectFail(await fetchContent({}, 'GET', fresh), 404);
    expectFail(await fetchContent({}, 'GET', randomUUID()), 404);
  });

  it('a multi-chunk upload of several MiB reads back byte for byte, also across chunk seams', async () => {
    const big = randomBytes(3 * 1024 * 1024 + 123);
    const bigId = await createShareWithContent(base, admin, 'big.bin', big, 4);
    const res = await fetchContent({}, 'GET', bigId);
    expectStatus(res, 200);
    expect(res.headers['content-length']).toBe(String(big.length));
    expect(res.buf.equals(big)).toBe(true);
    const seam = Math.ceil(big.length / 4);
    const part = await fetchContent({ range: `bytes=${seam - 10}-${seam + 9}` }, 'GET', bigId);
    expectStatus(part, 206);
    expect(part.buf.equals(big.subarray(seam - 10, seam + 10))).toBe(true);
  });
});

// Property guarded: a download's bytes are the content its ETag and Repr-Digest name, or there is
// no 200. A stored file whose size is not its record's (cut short or grown on the disk) was served
// as a 200 of that many bytes, which curl or a browser took as the whole file.
describe('stored content damaged on the disk', () => {
  /** Replaces the stored bytes of share `share` (found by its name's prefix) with `bytes`. */
  async function damage(share: string, bytes: Buffer) {
    if (!srv.storage) {
      const dir = join(srv.dataDir, 'content');
      const name = (await readdir(dir)).find((n) => n.startsWith(`${share}.`))!;
      await writeFile(join(dir, name), bytes);
      return;
    }
    const key = `content/${(await contentKeys(srv.s3Endpoint!, srv.storage)).find((n) => n.startsWith(`${share}.`))!}`;
    const client = s3Client(srv.s3Endpoint!);
    try {
      await client.send(
        new PutObjectCommand({ Bucket: srv.storage.slice('s3://'.length), Key: key, Body: bytes }),
      );
    } finally {
      client.destroy();
    }
  }

  for (const [what, cut] of [
    ['cut short', (d: Buffer) => d.subarray(0, 600)],
    ['grown', (d: Buffer) => Buffer.concat([d, Buffer.alloc(10)])],
  ] as const)
    it(`${what}: 503 with a JSON error, for a whole, ranged or HEAD request`, async () => {
      const data = randomBytes(1000);
      const share = await createShareWithContent(base, admin, 'damaged.bin', data);
      await damage(share, cut(data));
      for (const [headers, method] of [
        [{}, 'GET'],
        [{ range: 'bytes=0-99' }, 'GET'],
        [{}, 'HEAD'],
      ] as const) {
        const res = await fetchContent(headers, method, share);
        expect(res.status, `${method} ${JSON.stringify(headers)}`).toBe(503);
        // No Retry-After: waiting does not mend it.
        expect(res.headers['retry-after']).toBeUndefined();
        if (method === 'GET')
          expect(res.body.message).toMatch(/stored content of this share is damaged/);
      }
      // Whole again (restored from a backup): served as before.
      await damage(share, data);
      const res = await fetchContent({}, 'GET', share);
      expectStatus(res, 200);
      expect(res.buf.equals(data)).toBe(true);
    });
});

describe('Content-Type from the file name', () => {
  const cases: Array<[string, RegExp]> = [
    ['a.txt', /^text\/plain/],
    ['a.png', /^image\/png$/],
    ['a.json', /^application\/json/],
    ['a.html', /^text\/html/],
    ['a.PDF', /^application\/pdf$/],
    ['archive.zzqx', /^application\/octet-stream$/],
  ];
  for (const [name, type] of cases) {
    it(`${name} → ${type.source}`, async () => {
      const share = await createShareWithContent(base, admin, name, Buffer.from('x'));
      const res = await fetchContent({}, 'GET', share);
      expectStatus(res, 200);
      expect(res.headers['content-type']).toMatch(type);
      expect(res.headers['x-content-type-options']).toBe('nosniff');
    });
  }

  // Anyone's bytes are served from the server's own origin, where the share-link pages and their
  // grant cookies live. Content-Disposition: attachment makes browsers save them, but an .html or
  // .svg share shown inline anyway (a proxy that drops the header, a browser that ignores it)
  // would run its script as the server's origin: found without a sandboxing CSP. Every answer
  // of content (200, 206, HEAD, 304, and a share link's download) now sandboxes it.
  it('content is sandboxed by its Content-Security-Policy, also through a share link', async () => {
    const markup = Buffer.from(
      '<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>',
    );
    const share = await createShareWithContent(base, admin, 'x.svg', markup);
    const res = await post(base, `/files/${share}/links`, { token: admin, json: {} });
    expectStatus(res, 201);
    const link = new URL(res.body.download_url as string);
    const answers = [
      await fetchContent({}, 'GET', share),
      await fetchContent({ range: 'bytes=0-9' }, 'GET', share),
      await fetchContent({}, 'HEAD', share),
      await fetchContent({ 'if-none-match': `"${sha256hex(markup)}"` }, 'GET', share),
      await request(base, 'GET', link.pathname + link.search),
    ];
    expect(answers.map((a) => a.status)).toEqual([200, 206, 200, 304, 200]);
    for (const answer of answers) {
      const csp = (answer.headers['content-security-policy'] ?? '') as string;
      const directives = csp.split(';').map((d) => d.trim().split(/\s+/));
      // `sandbox` with no flags: no script, no same origin, no forms, no popups.
      expect(directives).toContainEqual(['sandbox']);
      expect(directives).toContainEqual(['default-src', "'none'"]);
    }
  });

  it('a share named after its id (no extension) → application/octet-stream', async () => {
    const share = await createShare(base, admin);
    await upload(base, admin, share, Buffer.from('x'));
    const res = await fetchContent({}, 'GET', share);
    expect(res.headers['content-type']).toMatch(/^application\/octet-stream$/);
  });
});

describe('Content-Disposition never breaks, whatever the file name', () => {
  // Names a client can recover exactly (from filename*, or filename when no filename* is sent).
  const exact = [
    'with space.txt',
    'quote"inside.txt',
    '"fully quoted".txt',
    'semi;colon=x.txt',
    "it's 100%.txt",
    'percent%20encoded.txt',
    'résumé.txt',
    'naïve café.pdf',
    '日本語のファイル.txt',
    'emoji-😀.txt',
    'Ωmega',
  ];
  // Names with control characters: refused as file names now, but a name stored before that
  // rule must still make a well-formed header, without them.
  const controls = [
    'line\r\nbreak.txt',
    'x.txt\r\nX-Injected: yes',
    'cr\ronly.txt',
    'lf\nonly.txt',
    'tab\there.txt',
    'nul\u0000.txt',
    'del\u007f.txt',
    '\u202egpj.exe',
  ];
  for (const name of controls) {
    it(`${JSON.stringify(name)} is refused, and a stored one is left out of the header`, async () => {
      expectFail(await post(base, '/files', { token: admin, json: { file_name: name } }), 400);
      const value = attachment(name);
      expect(value).toMatch(/^[\x20-\x7e]+$/);
      expect(value).not.toMatch(/%0[0-9a-f]|%1[0-9a-f]|%7f|%e2%80%ae/i);
      expect(parseContentDisposition(value).type).toBe('attachment');
    });
  }
  // Names whose only promise is a well-formed header.
  const hostile = [
    '../../etc/passwd',
    '..\\..\\boot.ini',
    // A backslash may be taken for a path separator and cut, like '/'.
    'back\\slash.txt',
  ];

  for (const name of [...exact, ...hostile]) {
    it(JSON.stringify(name), async () => {
      const share = await createShare(base, admin, name);
      await upload(base, admin, share, Buffer.from('payload'));
      for (const method of ['GET', 'HEAD']) {
        const res = await fetchContent({}, method, share);
        expectStatus(res, 200);
        expect(headerCount(res, 'content-disposition')).toBe(1);
        expect(res.headers['x-injected']).toBeUndefined();
        const value = res.headers['content-disposition']!;
        // No control characters; nothing outside ISO-8859-1 (RFC 6266 filename=).
        expect(value).toMatch(/^[\x20-\x7e\x80-\xff]+$/);
        const cd = parseContentDisposition(value);
        expect(cd.type).toBe('attachment');
        expect(cd.params['filename'], 'a plain filename= for old clients').toBeDefined();
        if (/[^\x00-\xff]/.test(name)) {
          expect(
            cd.params['filename*'],
            'filename* when filename= cannot hold the name',
          ).toBeDefined();
        }
        if (exact.includes(name)) expect(recoveredName(cd.params)).toBe(name);
        if (method === 'GET') expect(res.buf.toString()).toBe('payload');
        else expect(res.buf.length).toBe(0);
      }
    });
  }
});

describe('a share named "." or ".." is offered under a name that can be saved', () => {
  // `curl -OJ` saved a share named ".." as "..", a directory: "Failed to open the file ..: Is a
  // directory", exit 23. Such names are offered as "_" and "__", with nothing else to recover.
  for (const [name, offered] of [
    ['.', '_'],
    ['..', '__'],
  ] as const) {
    it(`${JSON.stringify(name)} → ${JSON.stringify(offered)}`, async () => {
      const share = await createShare(base, admin, name);
      await upload(base, admin, share, Buffer.from('payload'));
      const res = await fetchContent({}, 'GET', share);
      expectStatus(res, 200);
      const cd = parseContentDisposition(res.headers['content-disposition']!);
      expect(cd.type).toBe('attachment');
      expect(recoveredName(cd.params)).toBe(offered);
      expect(cd.params['filename']).toBe(offered);
      expect(res.buf.toString()).toBe('payload');
    });
  }
});

describe('Range', () => {
  it('bytes=a-b → 206 with Content-Range', async () => {
    expectRange(await fetchContent({ range: 'bytes=0-99' }), 0, 99);
    expectRange(await fetchContent({ range: 'bytes=100-100' }), 100, 100);
    expectRange(await fetchContent({ range: 'bytes=0-999' }), 0, 999);
  });

  it('bytes=a- → to the end', async () => {
    expectRange(await fetchContent({ range: 'bytes=900-' }), 900, 999);
    expectRange(await fetchContent({ range: 'bytes=999-' }), 999, 999);
    expectRange(await fetchContent({ range: 'bytes=0-' }), 0, 999);
  });

  it('bytes=-n → the last n bytes; n past the size → the whole representation', async () => {
    expectRange(await fetchContent({ range: 'bytes=-100' }), 900, 999);
    expectRange(await fetchContent({ range: 'bytes=-1' }), 999, 999);
    expectRange(await fetchContent({ range: 'bytes=-5000' }), 0, 999);
  });

  it('an end past the last byte is cut to it', async () => {
    expectRange(await fetchContent({ range: 'bytes=990-2000' }), 990, 999);
    expectRange(await fetchContent({ range: 'bytes=500-1000' }), 500, 999);
  });

  it('206 responses keep the download headers', async () => {
    const res = await fetchContent({ range: 'bytes=10-19' });
    expectStatus(res, 206);
    expect(res.headers['accept-ranges']).toBe('bytes');
    expect(res.headers.etag).toBeDefined();
    expect(res.headers['content-type']).toMatch(/^text\/plain/);
    expect(res.headers['x-content-type-options']).toBe('nosniff');
    expect(res.headers['content-disposition']).toMatch(/^attachment/);
  });

  it('a start at or past the size → 416 with Content-Range: bytes */size', async () => {
    expectUnsatisfiable(await fetchContent({ range: 'bytes=1000-' }));
    expectUnsatisfiable(await fetchContent({ range: 'bytes=1000-1005' }));
    expectUnsatisfiable(await fetchContent({ range: 'bytes=5000-6000' }));
    expectUnsatisfiable(await fetchContent({ range: 'bytes=-0' }));
  });

  it('a start after the end → 416', async () => {
    expectUnsatisfiable(await fetchContent({ range: 'bytes=5-2' }));
    expectUnsatisfiable(await fetchContent({ range: 'bytes=999-998' }));
  });

  for (const garbage of [
    'bytes=abc',
    'bytes=',
    'bytes=-',
    'bytes=1-x',
    'bytes=--5',
    'bytes=0x10-0x20',
    'bytes 0-10',
    'bytes=1.5-3',
  ]) {
    it(`an unparsable range ${JSON.stringify(garbage)} → 416`, async () => {
      expectUnsatisfiable(await fetchContent({ range: garbage }));
    });
  }

  for (const other of ['items=0-9', 'pages = 1-2', 'x-rows=0-']) {
    it(`a range in a unit other than bytes (${JSON.stringify(other)}) is ignored: 200, the whole content (RFC 9110 §14.2)`, async () => {
      const res = await fetchContent({ range: other });
      expectStatus(res, 200);
      expect(res.buf.equals(DATA)).toBe(true);
      expect(res.headers['content-range']).toBeUndefined();
    });
  }

  it('a range with a start on an empty file → 416 with bytes */0; a suffix → 200, empty', async () => {
    const empty = await createShareWithContent(base, admin, 'empty.txt', Buffer.alloc(0));
    expectUnsatisfiable(await fetchContent({ range: 'bytes=0-' }, 'GET', empty), 0);
    expectUnsatisfiable(await fetchContent({ range: 'bytes=0-0' }, 'GET', empty), 0);
    expectUnsatisfiable(await fetchContent({ range: 'bytes=-0' }, 'GET', empty), 0);
    const full = await fetchContent({}, 'GET', empty);
    expectStatus(full, 200);
    expect(full.headers['content-length']).toBe('0');
    // RFC 9110 §14.1.1: a suffix range is the one satisfiable form on an empty representation
    // (found from outside: it was a 416). No 206 can state zero bytes: a 200 of nothing.
    for (const method of ['GET', 'HEAD'] as const) {
      const tail = await fetchContent({ range: 'bytes=-1' }, method, empty);
      expectStatus(tail, 200);
      expect(tail.headers['content-length']).toBe('0');
      expect(tail.headers['content-range']).toBeUndefined();
    }
  });
});

describe('conditional requests', () => {
  it('If-Range with the current ETag → 206', async () => {
    const { headers } = await fetchContent();
    expectRange(await fetchContent({ range: 'bytes=0-9', 'if-range': headers.etag! }), 0, 9);
  });

  it('If-Range with a stale ETag → 200 with the whole content', async () => {
    const res = await fetchContent({ range: 'bytes=0-9', 'if-range': '"stale-etag"' });
    expectStatus(res, 200);
    expect(res.buf.equals(DATA)).toBe(true);
    expect(res.headers['content-range']).toBeUndefined();
  });

  it('If-Range after the content was replaced → 200 with the new content', async () => {
    const share = await createShareWithContent(base, admin, 'v.txt', Buffer.from('version one'));
    const first = await fetchContent({}, 'GET', share);
    await upload(base, admin, share, Buffer.from('version two!'), 1, 'PUT');
    const res = await fetchContent(
      { range: 'bytes=0-3', 'if-range': first.headers.etag! },
      'GET',
      share,
    );
    expectStatus(res, 200);
    expect(res.buf.toString()).toBe('version two!');
  });

  it('If-None-Match with the current ETag → 304 without a body', async () => {
    const { headers } = await fetchContent();
    const res = await fetchContent({ 'if-none-match': headers.etag! });
    expectStatus(res, 304);
    expect(res.buf.length).toBe(0);
    expect(res.headers.etag).toBe(headers.etag);
    expect(res.headers['cache-control']).toBe(headers['cache-control']);
    // RFC 9110 §15.4.5: no representation metadata (found from outside, it was all sent).
    for (const name of ['content-type', 'content-disposition', 'repr-digest', 'accept-ranges'])
      expect(res.headers[name], name).toBeUndefined();
    const listed = await fetchContent({ 'if-none-match': `"other", ${headers.etag!}` });
    expectStatus(listed, 304);
  });

  it('If-None-Match with another ETag → 200', async () => {
    const res = await fetchContent({ 'if-none-match': '"something-else"' });
    expectStatus(res, 200);
    expect(res.buf.equals(DATA)).toBe(true);
  });

  // A client that resumes or re-reads a share asks for the version it saw: If-Match (strong
  // comparison) and If-Unmodified-Since make any other version a 412, never other bytes.
  it('If-Match: the current ETag or * → the content; another ETag, or a weak one → 412 JSON', async () => {
    const { headers } = await fetchContent();
    expectRange(await fetchContent({ range: 'bytes=0-9', 'if-match': headers.etag! }), 0, 9);
    expectStatus(await fetchContent({ 'if-match': `"x", ${headers.etag!}` }), 200);
    expectStatus(await fetchContent({ 'if-match': '*' }), 200);
    for (const other of ['"x"', `W/${headers.etag!}`]) {
      const res = await fetchContent({ range: 'bytes=0-9', 'if-match': other });
      expectFail(res, 412);
      expect(res.headers['content-range']).toBeUndefined();
      expect(res.headers.etag).toBe(headers.etag);
    }
  });

  it('If-Match with the ETag of content since replaced → 412, not the new bytes', async () => {
    const share = await createShareWithContent(base, admin, 'm.txt', Buffer.from('version one'));
    const first = await fetchContent({}, 'GET', share);
    await upload(base, admin, share, Buffer.from('version two!'), 1, 'PUT');
    const res = await fetchContent({ 'if-match': first.headers.etag! }, 'GET', share);
    expectFail(res, 412);
    expect(res.buf.toString()).not.toContain('version two');
  });

  // Found from outside: Last-Modified has whole seconds, so content replaced within the second
  // it was made in had the same date; a resume with `If-Range: <that date>` got the new bytes
  // after the old ones (AAAAAAAAAABBBBBBBBBB), and If-Unmodified-Since passed. RFC 9110 §8.8.2.2:
  // such a date is weak. Property: a date never vouches for content made in the current second.
  it('a date from the second a version was made in never resumes into another version', async () => {
    // Start just after a second begins, so both versions fall in one second.
    await new Promise((r) => setTimeout(r, 1000 - (Date.now() % 1000) + 20));
    const share = await createShareWithContent(
      base,
      admin,
      'same-second.txt',
      Buffer.from('A'.repeat(20)),
    );
    const first = await fetchContent({ range: 'bytes=0-9' }, 'GET', share);
    expectStatus(first, 206);
    expect(first.headers['last-modified']).toBeUndefined(); // not yet a strong validator
    const seen = first.headers.date!; // the only date a client could have taken
    await upload(base, admin, share, Buffer.from('B'.repeat(20)), 1, 'PUT');
    const resumed = await fetchContent({ range: 'bytes=10-', 'if-range': seen }, 'GET', share);
    expectStatus(resumed, 200);
    expect(resumed.buf.toString()).toBe('B'.repeat(20));
    expectFail(await fetchContent({ 'if-unmodified-since': seen }, 'GET', share), 412);
    expectStatus(await fetchContent({ 'if-modified-since': seen }, 'GET', share), 200);
    // Once its second is over, the date is sent and resumes as before.
    await new Promise((r) => setTimeout(r, 1000));
    const later = await fetchContent({ range: 'bytes=0-9' }, 'GET', share);
    const date = later.headers['last-modified']!;
    expect(date).toBeDefined();
    const again = await fetchContent({ range: 'bytes=10-', 'if-range': date }, 'GET', share);
    expectStatus(again, 206);
    expect(again.buf.toString()).toBe('B'.repeat(10));
  });

  it('If-Unmodified-Since before Last-Modified → 412; at or after it, or not a date → the content', async () => {
    const { headers } = await fetchContent();
    const lastModified = Date.parse(headers['last-modified']!);
    const before = new Date(lastModified - 1000).toUTCString();
    expectFail(await fetchContent({ 'if-unmodified-since': before }), 412);
    expectStatus(await fetchContent({ 'if-unmodified-since': headers['last-modified']! }), 200);
    expectStatus(await fetchContent({ 'if-unmodified-since': 'yesterday' }), 200);
    // If-Match, when present, is the one that counts (RFC 9110 §13.1.4).
    expectStatus(
      await fetchContent({ 'if-match': headers.etag!, 'if-unmodified-since': before }),
      200,
    );
  });

  it('If-Modified-Since at or after Last-Modified → 304; before it → 200; If-None-Match wins', async () => {
    const { headers } = await fetchContent();
    const lastModified = Date.parse(headers['last-modified']!);
    const res = await fetchContent({ 'if-modified-since': headers['last-modified']! });
    expectStatus(res, 304);
    expect(res.buf.length).toBe(0);
    const earlier = new Date(lastModified - 1000).toUTCString();
    const changed = await fetchContent({ 'if-modified-since': earlier });
    expectStatus(changed, 200);
    expect(changed.buf.equals(DATA)).toBe(true);
    expectStatus(await fetchContent({ 'if-modified-since': 'not a date' }), 200);
    // A browser revalidating sends both; a different ETag means the content changed.
    expectStatus(
      await fetchContent({
        'if-none-match': '"other"',
        'if-modified-since': headers['last-modified']!,
      }),
      200,
    );
  });
});

describe('HEAD /files/<id>/content', () => {
  it('answers the same headers as GET, without a body', async () => {
    const getRes = await fetchContent();
    const head = await fetchContent({}, 'HEAD');
    expectStatus(head, 200);
    expect(head.buf.length).toBe(0);
    for (const name of [
      'content-length',
      'accept-ranges',
      'etag',
      'last-modified',
      'content-type',
      'content-disposition',
      'x-content-type-options',
    ]) {
      expect(head.headers[name], name).toBeDefined();
      expect(head.headers[name], name).toBe(getRes.headers[name]);
    }
    expect(head.headers['content-length']).toBe('1000');
  });

  it('needs READ like GET: anonymous 401, uninitialized 404', async () => {
    const anon = await request(base, 'HEAD', `/files/${id}/content`);
    expect(anon.status).toBe(401);
    const fresh = await createShare(base, admin, 'e.txt');
    const res = await fetchContent({}, 'HEAD', fresh);
    expect(res.status).toBe(404);
  });
});

describe('who may download', () => {
  it('READ is enough for any share; without READ → 403', async () => {
    const res = await get(base, `/files/${id}/content`, { token: reader });
    expectStatus(res, 200);
    const noRead = await createUser(base, admin, ['LIST', 'CREATE']);
    expectFail(await get(base, `/files/${id}/content`, { token: noRead.token }), 403);
  });
});
