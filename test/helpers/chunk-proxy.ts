// A pass-through proxy in front of `fshare serve` that sees each chunk request (a non-GET on
// /files/<id>/content): it counts them, can hold them back (delayMs) so that a transfer is still
// running when a test stops it, and can answer them 503 instead (refuseAfter).
import {
  createServer,
  request,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from 'node:http';
import type { AddressInfo } from 'node:net';

export /** A pass-through proxy that counts chunk requests (and can answer them 503 instead). */
function chunkCounter(target: string) {
  const upstream = new URL(target);
  const state = {
    chunks: 0,
    chunkBytes: 0,
    refuseAfter: Infinity,
    delayMs: 0,
    statuses: [] as (number | undefined)[],
  };
  const server: Server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const isChunk =
      /^\/files\/[^/]+\/content$/.test(req.url ?? '') &&
      req.method !== 'GET' &&
      req.method !== 'HEAD';
    const go = () => {
      if (isChunk) {
        state.chunks++;
        if (state.chunks > state.refuseAfter) {
          req.resume();
          req.on('end', () => {
            res.writeHead(503, { 'content-type': 'application/json' });
            res.end(JSON.stringify({ status: 'fail', message: 'injected failure' }));
          });
          return;
        }
        req.on('data', (d: Buffer) => (state.chunkBytes += d.length));
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
          if (isChunk) state.statuses.push(up.statusCode);
          res.writeHead(up.statusCode ?? 502, up.headers);
          up.pipe(res);
        },
      );
      forward.on('error', () => res.destroy());
      req.on('error', () => forward.destroy());
      req.pipe(forward);
    };
    if (isChunk && state.delayMs) setTimeout(go, state.delayMs);
    else go();
  });
  return {
    state,
    async start(): Promise<string> {
      await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
      return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    },
    close: () =>
      new Promise<void>((done) => {
        server.closeAllConnections();
        server.close(() => done());
      }),
  };
}
