import type { IncomingHttpHeaders } from 'node:http';
import net from 'node:net';

/**
 * A plain-HTTP GET/HEAD whose response body is read by the kernel straight into the memory of
 * whoever takes it (a download's ring of pieces), through `net.Socket`'s `onread`: no Buffer per
 * read, no HTTP parser or stream machinery per 64 KiB. Downloads are the one place the client
 * moves gigabytes, and this is what let `fshare get` keep up with curl (bench/README.md); every
 * other request goes through node:http. HTTPS downloads also use node:http.
 *
 * Only what a download needs of HTTP/1.1: one request per connection (`Connection: close`), a
 * body framed by Content-Length, chunked, or the end of the connection.
 */

/** Where a response body goes. */
export interface BodyTarget {
  /** Memory the next bytes may be read into (at least one byte). */
  space(): Buffer;
  /** `n` bytes were read into the last `space()`; a promise when the target must be waited for. */
  filled(n: number): Promise<void> | undefined;
  /**
   * Bytes that arrived elsewhere (with the headers, or inside chunked framing): copied in. The
   * buffer is the target's to keep: it is never written into again.
   */
  write(data: Buffer): Promise<void>;
}

export interface RawResponse {
  statusCode: number;
  headers: IncomingHttpHeaders;
  /** Reads the whole body into `target`; rejects with a transport error if the connection breaks. */
  readInto(target: BodyTarget): Promise<void>;
  text(): Promise<string>;
  dump(): Promise<void>;
}

const MAX_HEAD = 64 * 1024;
const SCRATCH = 64 * 1024;

function transportError(message: string, code = 'ECONNRESET'): Error {
  return Object.assign(new Error(message), { code });
}

/** The response head: status and headers (lower-case names; repeated ones joined by ", "). */
function parseHead(text: string): { statusCode: number; headers: IncomingHttpHeaders } {
  const lines = text.split('\r\n');
  const status = /^HTTP\/1\.[01] (\d{3})(?: |$)/.exec(lines[0] ?? '');
  if (!status) throw new Error('the server sent a response that is not HTTP/1.1');
  const headers: Record<string, string> = {};
  for (const line of lines.slice(1)) {
    const colon = line.indexOf(':');
    if (colon <= 0) throw new Error('the server sent a malformed response header');
    const name = line.slice(0, colon).trim().toLowerCase();
    const value = line.slice(colon + 1).trim();
    if (name === 'content-length' && headers[name] !== undefined && headers[name] !== value)
      throw new Error('the server sent two different Content-Length headers');
    headers[name] =
      headers[name] === undefined || name === 'content-length'
        ? value
        : `${headers[name]}, ${value}`;
  }
  return { statusCode: Number(status[1]), headers };
}

/** Decodes `Transfer-Encoding: chunked`, handing on the payload bytes. */
class ChunkedDecoder {
  private size = -1; // bytes left in the current chunk; -1 while reading its size line
  private line = '';
  private trailer = false;
  done = false;

  /** Feeds raw bytes; returns the payload slices they held. */
  feed(data: Buffer): Buffer[] {
    const out: Buffer[] = [];
    let at = 0;
    while (at < data.length && !this.done) {
      if (this.size > 0) {
        const n = Math.min(this.size, data.length - at);
        out.push(data.subarray(at, at + n));
        this.size -= n;
        at += n;
        if (this.size === 0) this.size = -2; // the CRLF after the chunk
        continue;
      }
      const nl = data.indexOf(10, at);
      const end = nl < 0 ? data.length : nl + 1;
      this.line += data.subarray(at, end).toString('latin1');
      at = end;
      if (nl < 0) {
        if (this.line.length > 4096) throw new Error('the server sent a malformed chunked body');
        continue;
      }
      const line = this.line.trim();
      this.line = '';
      if (this.size === -2) {
        if (line !== '') throw new Error('the server sent a malformed chunked body');
        this.size = -1;
      } else if (this.trailer) {
        if (line === '') this.done = true;
      } else {
        const size = /^([0-9a-fA-F]{1,12})(;.*)?$/.exec(line);
        if (!size) throw new Error('the server sent a malformed chunked body');
        this.size = parseInt(size[1]!, 16);
        if (this.size === 0) this.trailer = true;
      }
    }
    return out;
  }
}

export interface RawRequestOptions {
  method: 'GET' | 'HEAD';
  headers: Record<string, string>;
  idleTimeoutMs: number;
  signal?: AbortSignal;
  /** An HTTP proxy to send it through (proxy.ts): the request names the whole URL to it. */
  proxy?: { host: string; port: number; authorization?: string };
}

/** Sends the request; resolves with the response once its head has arrived. */
export function rawRequest(url: URL, options: RawRequestOptions): Promise<RawResponse> {
  for (const [name, value] of Object.entries(options.headers))
    if (/[\r\n]/.test(name + value)) throw new Error(`header ${name} holds a line break`);
  const scratch = Buffer.allocUnsafe(SCRATCH);
  let head = Buffer.alloc(0);
  let target: BodyTarget | null = null;
  let onBody: ((n: number, buf: Buffer) => boolean) | null = null;
  let leftover: Buffer | null = null;
  let chunked = false;

  const { proxy } = options;
  const socket = net.connect({
    host: proxy?.host ?? url.hostname.replace(/^\[|\]$/g, ''),
    port: proxy?.port ?? Number(url.port || 80),
    onread: {
      buffer: () => (target && !chunked ? target.space() : scratch),
      callback: (n: number, buf: Uint8Array) => {
        const data = Buffer.from(buf.buffer, buf.byteOffset, buf.byteLength);
        if (onBody) return onBody(n, data);
        return onHead(data.subarray(0, n));
      },
    },
  });
  let headDone: (r: RawResponse) => void;
  let headFailed: (e: unknown) => void;
  const gotHead = new Promise<RawResponse>((resolve, reject) => {
    headDone = resolve;
    headFailed = reject;
  });
  /** Set while a body is read: ends it with success (null) or a failure. */
  let settleBody: ((err: unknown) => void) | null = null;
  let ended = false;

  const fail = (err: unknown) => {
    socket.destroy();
    if (settleBody) settleBody(err);
    else headFailed(err);
  };
  socket.on('error', fail);
  socket.once('end', () => {
    ended = true;
    if (settleBody) endOfBody();
    else if (!onBody) headFailed(transportError('the server closed the connection'));
  });
  socket.setTimeout(options.idleTimeoutMs, () => fail(transportError('timed out', 'ETIMEDOUT')));
  const onAbort = () => fail(options.signal!.reason ?? transportError('aborted', 'ECONNABORTED'));
  options.signal?.addEventListener('abort', onAbort, { once: true });
  socket.once('close', () => options.signal?.removeEventListener('abort', onAbort));

  let remaining = -1; // Content-Length bytes still to come; -1: until the connection ends
  let endOfBody: () => void = () => undefined;
  const decoder = new ChunkedDecoder();

  const onHead = (data: Buffer): boolean => {
    head = Buffer.concat([head, data]);
    // Not HTTP from its first bytes (another service on that port): said as node:http says it.
    const start = Math.min(head.length, 5);
    if (!head.subarray(0, start).equals(Buffer.from('HTTP/').subarray(0, start))) {
      fail(Object.assign(new Error('not HTTP'), { code: 'HPE_INVALID_CONSTANT' }));
      return false;
    }
    const end = head.indexOf('\r\n\r\n');
    if (end < 0) {
      if (head.length > MAX_HEAD) fail(new Error('the server sent over 64 KiB of headers'));
      return true;
    }
    let parsed: ReturnType<typeof parseHead>;
    try {
      parsed = parseHead(head.subarray(0, end).toString('latin1'));
    } catch (err) {
      fail(err);
      return false;
    }
    const rest = head.subarray(end + 4);
    head = Buffer.alloc(0);
    if (parsed.statusCode >= 100 && parsed.statusCode < 200) return onHead(rest); // 100 Continue
    const { statusCode, headers } = parsed;
    const noBody = options.method === 'HEAD' || statusCode === 204 || statusCode === 304;
    const te = String(headers['transfer-encoding'] ?? '').toLowerCase();
    chunked = !noBody && te.includes('chunked');
    const length = headers['content-length'];
    if (noBody) remaining = 0;
    else if (!chunked && length !== undefined) {
      if (!/^\d{1,15}$/.test(length)) {
        fail(new Error('the server sent a malformed Content-Length'));
        return false;
      }
      remaining = Number(length);
    }
    leftover = Buffer.from(rest); // a copy: the scratch buffer is read into again
    onBody = () => false; // nothing is read until someone takes the body
    headDone(response(statusCode, headers));
    return false; // paused until then
  };

  const response = (statusCode: number, headers: IncomingHttpHeaders): RawResponse => {
    const readInto = (to: BodyTarget): Promise<void> =>
      new Promise<void>((resolve, reject) => {
        const finish = (err: unknown) => {
          settleBody = null;
          socket.destroy();
          if (err) reject(err);
          else resolve();
        };
        settleBody = finish;
        endOfBody = () => {
          if (chunked ? decoder.done : remaining <= 0) finish(null);
          else
            finish(transportError('the server closed the connection before the end of the body'));
        };
        /** Waits for the target (the socket is paused meanwhile), then reads on. */
        const wait = (pending: Promise<void> | undefined): boolean => {
          if (!pending) return true;
          pending.then(
            () => {
              if (!settleBody) return;
              if (bodyComplete()) finish(null);
              else if (ended) endOfBody();
              else socket.resume();
            },
            (err: unknown) => settleBody && finish(err),
          );
          return false;
        };
        const bodyComplete = () => (chunked ? decoder.done : remaining === 0);
        /** Takes bytes that are not in the target's memory: copies them in. */
        const take = (data: Buffer): Promise<void> | undefined => {
          if (chunked) {
            let payload: Buffer[];
            try {
              payload = decoder.feed(data);
            } catch (err) {
              finish(err);
              return undefined;
            }
            if (payload.length === 0) return undefined;
            return payload.reduce<Promise<void>>(
              (p, piece) => p.then(() => to.write(Buffer.from(piece))),
              Promise.resolve(),
            );
          }
          const n = remaining < 0 ? data.length : Math.min(remaining, data.length);
          if (remaining >= 0) remaining -= n;
          return n > 0 ? to.write(data.subarray(0, n)) : undefined;
        };
        target = to;
        onBody = (n, buf) => {
          if (!settleBody) return false;
          let pending: Promise<void> | undefined;
          // The read that follows the head still used the scratch memory (the next read's
          // memory is chosen when a read ends): those bytes are copied in, from a copy of their
          // own, since the scratch is read into again at once and a taker may keep what it is
          // given (an asynchronous stdout did, and wrote later bytes in their place).
          if (chunked || buf.buffer === scratch.buffer)
            pending = take(Buffer.from(buf.subarray(0, n)));
          else {
            // Read into the target's own memory; bytes past the body are not counted.
            const counted = remaining < 0 ? n : Math.min(remaining, n);
            if (remaining >= 0) remaining -= counted;
            pending = counted > 0 ? to.filled(counted) : undefined;
          }
          if (!settleBody) return false;
          if (!pending && bodyComplete()) {
            finish(null);
            return false;
          }
          return wait(pending);
        };
        const first = leftover && leftover.length > 0 ? take(leftover) : undefined;
        leftover = null;
        if (!settleBody) return;
        if (first) wait(first);
        else if (bodyComplete()) finish(null);
        else if (ended) endOfBody();
        else socket.resume();
      });

    const collect = async (): Promise<Buffer> => {
      const pieces: Buffer[] = [];
      let size = 0;
      await readInto({
        space: () => scratch,
        filled: (n) => {
          if (size < 1024 * 1024) pieces.push(Buffer.from(scratch.subarray(0, n)));
          size += n;
          return undefined;
        },
        write: async (data) => {
          if (size < 1024 * 1024) pieces.push(Buffer.from(data));
          size += data.length;
        },
      });
      return Buffer.concat(pieces);
    };
    return {
      statusCode,
      headers,
      readInto,
      text: async () => (await collect()).toString('utf8'),
      dump: async () => {
        socket.destroy();
      },
    };
  };

  const lines = [
    `${options.method} ${proxy ? url.href : `${url.pathname}${url.search}`} HTTP/1.1`,
    `Host: ${url.host}`,
    ...(proxy?.authorization ? [`Proxy-Authorization: ${proxy.authorization}`] : []),
    ...Object.entries(options.headers).map(([name, value]) => `${name}: ${value}`),
    'Accept-Encoding: identity',
    'Connection: close',
    '',
    '',
  ];
  socket.write(lines.join('\r\n'));
  return gotHead;
}
