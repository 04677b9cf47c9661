import { readFileSync } from 'node:fs';
import http from 'node:http';
import type { Socket } from 'node:net';
import type { Limits } from './limits.js';
import { requestStarted } from './gc.js';

/** File descriptors kept for files (content, uploads, the journal) whatever the connections. */
const FDS_KEPT = 256;

/** The soft limit on open files (Linux), or null where it cannot be read. */
function openFilesLimit(): number | null {
  try {
    const m = /^Max open files\s+(\d+)/m.exec(readFileSync('/proc/self/limits', 'utf8'));
    return m ? Number(m[1]) : null;
  } catch {
    return null;
  }
}

/** Requests that expect 100-continue and have not been sent it yet. */
const awaitingContinue = new WeakSet<http.ServerResponse>();

/**
 * Sends `100 Continue` to a request that expects it (once), before its body is read: a handler
 * calls it when the checks the headers allow have passed. Does nothing for any other request.
 */
export function sendContinue(res: http.ServerResponse): void {
  if (awaitingContinue.delete(res) && !res.headersSent) res.writeContinue();
}

/** What a request must finish before the failure of its body is answered (`onBodyCut`). */
const cutStops = new WeakMap<http.IncomingMessage, () => Promise<void>>();

/** How long such an answer waits for the request to stop; after that it is sent regardless. */
const CUT_STOP_MAX_MS = 5_000;

/** A character of an HTTP token (RFC 9110 §5.6.2): what a method is made of. */
const TCHAR_CLASS = "[!#$%&'*+.^_`|~0-9A-Za-z-]";
const TCHAR = new RegExp(`^${TCHAR_CLASS}$`);
/** A request line so far (it may stop anywhere): METHOD, target, then HTTP/ and the rest. */
const LINE_SO_FAR = new RegExp(`^${TCHAR_CLASS}+(?:$| (?:$|[^ \\r\\n]+(?:$| (.*))))`, 's');
/** A whole request line, well-formed, in some HTTP version. */
const VERSIONED_LINE = new RegExp(`^${TCHAR_CLASS}+ [^ \\r\\n]+ HTTP/\\d\\.\\d\\r?$`);

/**
 * Registers what stops `req` when its body can no longer arrive whole (it stopped arriving, it
 * was cut off, its framing is not HTTP): the server's answer (408, 400) is sent once `stop` is
 * done (the storage has removed the chunk the body had begun), so the answer finds nothing left.
 */
export function onBodyCut(req: http.IncomingMessage, stop: () => Promise<void>): void {
  cutStops.set(req, stop);
}

/** Connections whose cut request is being stopped, its answer to follow. */
const stopping = new WeakSet<Socket>();

/**
 * Runs `answer` once `req`'s registered stop is done (at most CUT_STOP_MAX_MS), or at once.
 * Meanwhile the connection's later troubles (more bytes that do not parse) are left to it.
 */
function afterStop(socket: Socket, req: http.IncomingMessage, answer: () => void): void {
  if (stopping.has(socket)) return;
  const stop = cutStops.get(req);
  if (!stop) return answer();
  stopping.add(socket);
  let timer: NodeJS.Timeout | undefined;
  void Promise.race([
    stop().catch(() => undefined),
    new Promise<void>((done) => (timer = setTimeout(done, CUT_STOP_MAX_MS))),
  ]).then(() => {
    clearTimeout(timer);
    answer();
  });
}

/**
 * The HTTP server, hardened against slow and greedy clients (docs/API.md, "Limits"):
 * - headers must arrive within `headersTimeoutMs`, and a connection that moves no byte for
 *   `idleTimeoutMs` (a body that stalls, a reader that stops reading) is closed;
 * - at most `maxConnections` connections are open, and `maxConnectionsPerAddress` per client
 *   address; further ones are closed at once, with a log line (at most one a minute per cause);
 * - a request the HTTP parser refuses (headers too large, bad bytes) still gets a JSON error.
 */
export function createHttpServer(
  app: http.RequestListener,
  limits: Limits,
  log: (line: string) => void,
  /** Trusted proxies: many clients' connections come from one of them, so no per-address limit. */
  isProxy: (address: string) => boolean = () => false,
): http.Server {
  const server = http.createServer(
    {
      headersTimeout: limits.headersTimeoutMs,
      // No limit on a whole request: a large upload on a slow link may take hours. Stalls are
      // caught by the idle timeout instead.
      requestTimeout: 0,
      maxHeaderSize: limits.maxHeaderBytes,
      connectionsCheckingInterval: Math.min(1000, limits.headersTimeoutMs),
      // Node would answer a missing Host itself, with an empty 400: hostProblem gives the JSON.
      requireHostHeader: false,
    },
    app,
  );
  server.timeout = limits.idleTimeoutMs;
  // A client that sends its request and then closes its side (nc -N, ncat, shutdown(SHUT_WR))
  // still gets the answer. Node's default aborts a request whose answer is not ready yet; a body
  // cut short by the close is still an error that ends the request.
  (server as unknown as { httpAllowHalfOpen: boolean }).httpAllowHalfOpen = true;
  // Connections must never take the file descriptors that content and uploads need.
  const fds = openFilesLimit();
  let maxConnections = limits.maxConnections;
  if (fds !== null && fds - FDS_KEPT < maxConnections) {
    maxConnections = Math.max(16, fds - FDS_KEPT);
    log(
      `at most ${maxConnections} connections: the process may open ${fds} files (raise it with ulimit -n)`,
    );
  }
  server.keepAliveTimeout = Math.min(5000, limits.idleTimeoutMs);

  const lastSaid = new Map<string, number>();
  const say = (cause: string, line: string) => {
    const now = Date.now();
    if ((lastSaid.get(cause) ?? 0) > now - 60_000) return;
    lastSaid.set(cause, now);
    log(line);
  };

  let open = 0;
  const perAddress = new Map<string, number>();
  server.on('connection', (socket: Socket) => {
    const address = socket.remoteAddress ?? 'unknown';
    const fromThere = perAddress.get(address) ?? 0;
    if (open >= maxConnections) {
      say('total', `refusing connections: ${open} are open (the limit, --max-connections)`);
      socket.destroy();
      return;
    }
    if (fromThere >= limits.maxConnectionsPerAddress && !isProxy(address)) {
      say(
        `address ${address}`,
        `refusing connections from ${address}: ${fromThere} are open (the limit per address, --max-connections-per-address)`,
      );
      socket.destroy();
      return;
    }
    open++;
    perAddress.set(address, fromThere + 1);
    socket.once('close', () => {
      open--;
      const left = (perAddress.get(address) ?? 1) - 1;
      if (left > 0) perAddress.set(address, left);
      else perAddress.delete(address);
    });
  });

  // Sockets with a request in progress: only a stall of one of those is worth a log line; an
  // idle keep-alive connection (a balancer keeps many) simply ends.
  const busy = new WeakSet<Socket>();
  server.on('request', (req: http.IncomingMessage, res: http.ServerResponse) => {
    busy.add(req.socket);
    const ended = requestStarted();
    res.once('close', () => {
      busy.delete(req.socket);
      ended();
    });
  });

  server.on('timeout', (socket: Socket) => {
    if (busy.has(socket))
      say(
        'idle',
        `closed a connection from ${socket.remoteAddress} that sent or read nothing for ${limits.idleTimeoutMs / 1000} s`,
      );
    // A body that stopped coming is answered, as headers that never finish are (clientError):
    // the request can never complete, and its handler sees it aborted when the connection ends.
    // Not once the answer has begun (a reader that stopped), nor a second time (that one is
    // not read either): then the connection is only cut.
    const reading = (socket as Parsed).parser?.incoming;
    const answerable = () =>
      reading &&
      !reading.complete &&
      !(socket as Parsed)._httpMessage?.headersSent &&
      socket.writable &&
      !socket.writableEnded;
    if (!answerable()) {
      socket.destroy();
      return;
    }
    const answer = () => {
      if (!answerable()) {
        socket.destroy();
        return;
      }
      socket.end(
        rawAnswer(
          408,
          `The request's body stopped arriving: nothing for ${limits.idleTimeoutMs / 1000} s`,
        ),
      );
      // Once handed to the kernel (which still delivers it), the connection ends, and with it
      // the request, now, not when the client gets round to closing.
      socket.once('finish', () => socket.destroy());
    };
    // What the body had begun is gone before the answer says it failed.
    afterStop(socket, reading!, answer);
  });

  // Expect: 100-continue (curl sends it with bodies over 1 MiB): the app answers first what the
  // headers alone decide (a bad token, no such share, a chunk over a limit) and the client then
  // sends no body; `sendContinue` lets the body come once those checks have passed. A final
  // answer without 100 closes the connection (Node), as the body may still come.
  server.on('checkContinue', (req: http.IncomingMessage, res: http.ServerResponse) => {
    awaitingContinue.add(res);
    server.emit('request', req, res);
  });

  // An Expect other than 100-continue: HTTP says 417, and every error here has a JSON body.
  server.on('checkExpectation', (req: http.IncomingMessage, res: http.ServerResponse) => {
    const body = JSON.stringify({
      status: 'fail',
      message: 'The server meets no expectation but "100-continue"',
    });
    res.writeHead(417, {
      'Content-Type': 'application/json; charset=utf-8',
      'Content-Length': Buffer.byteLength(body),
      'Access-Control-Allow-Origin': '*',
      Connection: 'close',
    });
    res.end(body);
  });

  // CONNECT asks for a tunnel, which only a proxy makes: Node would close the connection without
  // a word when nobody listens for it. Every error has a JSON body, this one too.
  server.on('connect', (_req: http.IncomingMessage, socket: Socket) => {
    // Node has taken its own listeners off the socket: a reset must not be an uncaught error.
    socket.on('error', () => socket.destroy());
    socket.end(
      rawAnswer(405, 'CONNECT is not allowed: the server is not a proxy', {
        Allow: 'GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS',
      }),
    );
  });

  /**
   * A request line whose method is a token Node's parser does not know (`FOO`, a lower-case
   * `get`): RFC 9110 §9.1 answers 501. Found from outside: it was the 400 of bytes that are not
   * HTTP at all (a TLS handshake on the plain port), which it still is. The parser stops inside
   * the method (`bytesParsed`); the line is read from the start of that token (an earlier
   * request's body may end right before it) to the end of what arrived, which may stop anywhere
   * in the line (a method split across packets): so far, it must read as `METHOD TARGET HTTP/`.
   */
  const unknownMethod = (
    err: NodeJS.ErrnoException & { rawPacket?: unknown; bytesParsed?: unknown },
  ) => {
    if (err.code !== 'HPE_INVALID_METHOD' || !Buffer.isBuffer(err.rawPacket)) return false;
    const packet = err.rawPacket;
    const at = typeof err.bytesParsed === 'number' ? Math.min(err.bytesParsed, packet.length) : 0;
    let start = at;
    while (start > 0 && TCHAR.test(String.fromCharCode(packet[start - 1]!))) start--;
    const line = packet.subarray(start, start + 8192).toString('latin1');
    const m = LINE_SO_FAR.exec(line);
    if (!m) return false;
    const version = m[1];
    return (
      version === undefined ||
      /^HTTP\/\d\.\d\r?\n/.test(version) ||
      'HTTP/1.1\r\n'.startsWith(version)
    );
  };

  /**
   * A well-formed request line in an HTTP version Node's parser does not take (it takes 1.0, 1.1
   * and 2.0, the last a 505 from the routes): `HTTP/1.2`, `HTTP/3.0`. A line that is not
   * well-formed (`HTTP/1`, a trailing space) is the 400 of bytes that are not HTTP.
   */
  const otherVersion = (err: NodeJS.ErrnoException) =>
    err.code === 'HPE_INVALID_VERSION' && VERSIONED_LINE.test(requestLine(err));

  server.on('clientError', (err: NodeJS.ErrnoException, socket: Socket) => {
    if (!socket.writable || socket.destroyed) {
      socket.destroy();
      return;
    }
    const [status, message] =
      err.code === 'HPE_HEADER_OVERFLOW'
        ? [431, 'The request headers are too large']
        : err.code === 'ERR_HTTP_REQUEST_TIMEOUT'
          ? [408, 'The request headers did not arrive in time']
          : err.code === 'HPE_INVALID_EOF_STATE'
            ? [400, 'The request was cut off before it ended']
            : unknownMethod(err)
              ? [501, 'The request method is not one the server knows (methods are case-sensitive)']
              : otherVersion(err)
                ? [505, "The server speaks HTTP/1.1; this request's line names another version"]
                : [400, 'The request is not valid HTTP'];
    // A HEAD's answer has no body (the request line is all a HEAD can be told by here).
    const answer = rawAnswer(status, message, {}, requestLine(err).startsWith('HEAD '));
    const reading = (socket as Parsed).parser?.incoming;
    if (reading && !reading.complete) {
      // The request being read can never complete (its body was cut off, or is not HTTP): it is
      // answered, once what its body had begun is gone, and the connection ends, which tells its
      // handler it was aborted. An answer already on its way is never broken into: then the
      // connection is only cut.
      if ((socket as Parsed)._httpMessage?.headersSent) socket.destroy();
      else
        afterStop(socket, reading, () => {
          if (socket.writable && !socket.destroyed) socket.end(answer);
          else socket.destroy();
        });
      return;
    }
    // Bytes after a complete request (pipelined, or a body longer than its Content-Length) that
    // do not parse, or headers that never finish: written now, this answer would be taken for an
    // earlier request's (a chunk that is then stored, answered 400) or land in the middle of a
    // download's bytes. It goes after every earlier answer, in order, then the connection closes
    // (the idle limit still cuts an earlier answer whose reader stopped).
    const answerInTurn = () => {
      const pending = (socket as Parsed)._httpMessage;
      if (pending) {
        pending.once('finish', answerInTurn);
        return;
      }
      if (socket.writable && !socket.destroyed) socket.end(answer);
      else socket.destroy();
    };
    answerInTurn();
  });
  return server;
}

/** What Node's server keeps on a socket: the answer being written, the request being read. */
type Parsed = Socket & {
  _httpMessage?: http.ServerResponse | null;
  parser?: { incoming?: http.IncomingMessage | null } | null;
};

/** A whole HTTP answer with a JSON error, written on the socket itself; the connection closes. */
/** The line of the packet the parser stopped in (bytesParsed), without its line end. */
function requestLine(err: object): string {
  const { rawPacket: packet, bytesParsed } = err as { rawPacket?: unknown; bytesParsed?: unknown };
  if (!Buffer.isBuffer(packet)) return '';
  const at = typeof bytesParsed === 'number' ? Math.min(bytesParsed, packet.length) : 0;
  const start = at > 0 ? packet.lastIndexOf(10, at - 1) + 1 : 0;
  const end = packet.indexOf(10, start);
  return packet.subarray(start, end === -1 ? start + 8192 : end).toString('latin1');
}

function rawAnswer(
  status: number,
  message: string,
  headers: Record<string, string> = {},
  head = false,
): string {
  const body = JSON.stringify({ status: 'fail', message });
  return (
    `HTTP/1.1 ${status} ${http.STATUS_CODES[status]}\r\n` +
    'Content-Type: application/json; charset=utf-8\r\n' +
    `Content-Length: ${Buffer.byteLength(body)}\r\n` +
    Object.entries(headers)
      .map(([name, value]) => `${name}: ${value}\r\n`)
      .join('') +
    // Every answer allows any origin (API.md "CORS"): a browser page then reads this error.
    'Access-Control-Allow-Origin: *\r\n' +
    'Connection: close\r\n\r\n' +
    (head ? '' : body)
  );
}
