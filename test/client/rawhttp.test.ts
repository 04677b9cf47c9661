import { randomBytes } from 'node:crypto';
import net from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, describe, expect, it } from 'vitest';
import { isTransportError } from '../../src/client/errors.js';
import { rawRequest, type BodyTarget } from '../../src/client/rawhttp.js';

/**
 * The download transport reads bodies straight into its taker's memory; these tests hold it to
 * HTTP's framing over real sockets, with the bytes split and delayed the way networks do: every
 * body arrives whole and exact, and a cut connection is a transport error (so the download
 * resumes), never a short success.
 */

let servers: net.Server[] = [];
afterEach(async () => {
  for (const s of servers) s.close();
  servers = [];
});

/** A server that answers every connection with `pieces`, written one by one with pauses. */
async function serve(pieces: (Buffer | string)[], end = true): Promise<URL> {
  const server = net.createServer((socket) => {
    socket.on('error', () => undefined);
    socket.once('data', async () => {
      for (const piece of pieces) {
        if (socket.destroyed) return;
        socket.write(piece);
        await sleep(5);
      }
      if (end) socket.end();
      else socket.destroy();
    });
  });
  servers.push(server);
  await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
  const { port } = server.address() as net.AddressInfo;
  return new URL(`http://127.0.0.1:${port}/files/x/content`);
}

/** A taker with little memory, so bodies take many reads; it collects what it got. */
function collector(space = 1000): BodyTarget & { bytes(): Buffer } {
  const memory = Buffer.alloc(space);
  const got: Buffer[] = [];
  return {
    space: () => memory,
    filled: (n) => {
      got.push(Buffer.from(memory.subarray(0, n)));
      return n % 3 === 0 ? sleep(1) : undefined; // sometimes the taker makes the socket wait
    },
    write: async (data) => {
      got.push(Buffer.from(data));
    },
    bytes: () => Buffer.concat(got),
  };
}

const get = (url: URL) => rawRequest(url, { method: 'GET', headers: {}, idleTimeoutMs: 5000 });

/** Splits bytes into pieces of varying size. */
function split(data: Buffer, sizes = [1, 7, 300, 4096, 65536]): Buffer[] {
  const out: Buffer[] = [];
  for (let at = 0, i = 0; at < data.length; i++) {
    const n = sizes[i % sizes.length]!;
    out.push(data.subarray(at, at + n));
    at += n;
  }
  return out;
}

describe('raw HTTP downloads', () => {
  it('a Content-Length body, its head split across reads, arrives exact', async () => {
    const body = randomBytes(300_000);
    const head = Buffer.from(
      `HTTP/1.1 200 OK\r\nContent-Length: ${body.length}\r\nETag: "x"\r\n\r\n`,
    );
    const url = await serve(split(Buffer.concat([head, body])));
    const res = await get(url);
    expect(res.statusCode).toBe(200);
    expect(res.headers.etag).toBe('"x"');
    const target = collector();
    await res.readInto(target);
    expect(target.bytes().equals(body)).toBe(true);
  });

  it('bytes past Content-Length are not taken', async () => {
    const body = randomBytes(5000);
    const url = await serve([
      `HTTP/1.1 200 OK\r\nContent-Length: ${body.length}\r\n\r\n`,
      Buffer.concat([body, Buffer.from('garbage after the body')]),
    ]);
    const target = collector();
    await (await get(url)).readInto(target);
    expect(target.bytes().equals(body)).toBe(true);
  });

  it('a chunked body, with extensions and trailers, arrives exact', async () => {
    const body = randomBytes(100_000);
    const chunks = split(body, [10, 40_000, 3, 59_987]);
    const framed = Buffer.concat([
      Buffer.from('HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n'),
      ...chunks.map((c, i) =>
        Buffer.concat([
          Buffer.from(`${c.length.toString(16)}${i === 1 ? ';x=y' : ''}\r\n`),
          c,
          Buffer.from('\r\n'),
        ]),
      ),
      Buffer.from('0\r\nX-Trailer: 1\r\n\r\n'),
    ]);
    const url = await serve(split(framed, [5, 999, 17]), false);
    const target = collector();
    await (await get(url)).readInto(target);
    expect(target.bytes().equals(body)).toBe(true);
  });

  it('a body that ends with the connection arrives exact; 100 Continue is skipped', async () => {
    const body = randomBytes(50_000);
    const url = await serve([
      'HTTP/1.1 100 Continue\r\n\r\n',
      'HTTP/1.1 200 OK\r\n\r\n',
      ...split(body),
    ]);
    const target = collector();
    const res = await get(url);
    expect(res.statusCode).toBe(200);
    await res.readInto(target);
    expect(target.bytes().equals(body)).toBe(true);
  });

  it('a connection cut before Content-Length is a transport error, with the bytes before it kept', async () => {
    const body = randomBytes(20_000);
    const url = await serve([`HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n`, body], false);
    const target = collector();
    const err = await (await get(url)).readInto(target).then(
      () => null,
      (e: unknown) => e,
    );
    expect(isTransportError(err)).toBe(true);
    expect(target.bytes().equals(body)).toBe(true);
  });

  it('a chunked body cut before its last chunk is a transport error', async () => {
    const url = await serve(
      ['HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n', '5\r\nhello\r\n'],
      false,
    );
    const err = await (await get(url)).readInto(collector()).then(
      () => null,
      (e: unknown) => e,
    );
    expect(isTransportError(err)).toBe(true);
  });

  it('an error body is read as text; malformed heads and bodies are errors, not successes', async () => {
    const json = '{"status":"fail","message":"nope"}';
    const url = await serve([
      `HTTP/1.1 404 Not Found\r\nContent-Length: ${json.length}\r\n\r\n${json}`,
    ]);
    const res = await get(url);
    expect(res.statusCode).toBe(404);
    expect(await res.text()).toBe(json);
    await expect(get(await serve(['SMTP ready\r\n\r\n']))).rejects.toThrow(/not HTTP/);
    const badChunk = await serve(['HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n']);
    await expect((await get(badChunk)).readInto(collector())).rejects.toThrow(/malformed chunked/);
    const twoLengths = await serve([
      'HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab',
    ]);
    await expect(get(twoLengths)).rejects.toThrow(/two different Content-Length/);
  });

  it('refuses a header value with a line break before anything is sent', () => {
    expect(() =>
      rawRequest(new URL('http://127.0.0.1:9/'), {
        method: 'GET',
        headers: { authorization: 'Bearer x\r\nX-Evil: 1' },
        idleTimeoutMs: 1000,
      }),
    ).toThrow(/line break/);
  });
});
