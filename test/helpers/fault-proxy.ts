// A transparent proxy in front of a real server that injects failures (an error status, a
// dropped connection, a lost answer, an answer cut after N bytes), so that retries and resumption
// are exercised over real sockets, and records every request it sees.
import {
  createServer,
  request,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from 'node:http';

/**
 * What the proxy does with one request. lose201: forwards it, and loses the server's answer only
 * when it is 201 Created (the chunk that completed an upload). taken409: forwards it, and answers
 * 409 as fshare serve does to a copy of a chunk that another copy replaced.
 */
export type Fault =
  | 'pass'
  | 'http408'
  | 'http409'
  | 'http503'
  | 'http507'
  | 'drop'
  | 'loseAnswer'
  | 'lose201'
  | 'taken409'
  | { cutAfter: number };

export interface Seen {
  method: string;
  url: string;
  range?: string;
  ifRange?: string;
  /** The Authorization header sent, if any. */
  authorization?: string;
  status?: number;
}

/**
 * A transparent proxy in front of the real server that injects failures, so retries and
 * resumption are exercised over real sockets.
 */
export function startFaultProxy(
  target: string,
  decide: (req: IncomingMessage, n: number) => Fault | Promise<Fault>,
) {
  const seen: Seen[] = [];
  const upstream = new URL(target);
  const server: Server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const entry: Seen = {
      method: req.method ?? '',
      url: req.url ?? '',
      range: req.headers.range,
      ifRange: req.headers['if-range'] as string | undefined,
      authorization: req.headers.authorization,
    };
    seen.push(entry);
    // A decision may wait (for the test to change something before the request goes on).
    void (async () => {
      const fault = await decide(req, seen.length);
      if (fault === 'drop') {
        req.socket.destroy();
        return;
      }
      if (
        fault === 'http408' ||
        fault === 'http409' ||
        fault === 'http503' ||
        fault === 'http507'
      ) {
        const status = Number(fault.slice(4));
        req.resume();
        req.on('end', () => {
          entry.status = status;
          res.writeHead(status, { 'content-type': 'application/json' });
          res.end(JSON.stringify({ status: 'fail', message: `injected ${status}` }));
        });
        return;
      }
      const forward = request(
        {
          host: upstream.hostname,
          port: upstream.port,
          method: req.method,
          path: req.url,
          headers: req.headers,
        },
        (up) => {
          entry.status = up.statusCode;
          if (fault === 'taken409') {
            up.resume();
            up.on('end', () => {
              res.writeHead(409, { 'content-type': 'application/json' });
              res.end('{"status":"fail","message":"Another copy of this chunk was stored"}');
            });
            return;
          }
          if (fault === 'loseAnswer' || (fault === 'lose201' && up.statusCode === 201)) {
            // The server has done the work; its answer never reaches the client.
            up.resume();
            up.on('end', () => res.socket?.destroy());
            return;
          }
          res.writeHead(up.statusCode ?? 502, up.headers);
          if (fault === 'pass' || fault === 'lose201') {
            up.pipe(res);
            return;
          }
          let sent = 0;
          up.on('data', (chunk: Buffer) => {
            if (sent >= fault.cutAfter) return;
            const part = chunk.subarray(0, fault.cutAfter - sent);
            sent += part.length;
            const last = sent >= fault.cutAfter;
            // Cut only once the bytes are flushed, so the client really holds them.
            res.write(part, () => {
              if (last) res.socket?.destroy();
            });
            if (last) up.destroy();
          });
        },
      );
      forward.on('error', () => res.socket?.destroy());
      req.pipe(forward);
    })().catch(() => req.socket.destroy());
  });
  return {
    seen,
    url: new Promise<string>((resolve) =>
      server.listen(0, '127.0.0.1', () => {
        const address = server.address();
        resolve(`http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`);
      }),
    ),
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
