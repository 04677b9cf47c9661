// A pass-through proxy in front of `fshare serve` that sees each request and each chunk request
// (a non-GET on /files/<id>/content): it counts chunks, can hold them back (delayMs) so that a
// transfer is still running when a test stops it, can answer them 503 instead (refuseAfter), can
// hold back the server's answers to them until released (holdAnswers), and can hold any request
// forever, answer it 403 itself, or forward it and never give back the answer.
import {
  createServer,
  request,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from 'node:http';
import type { AddressInfo } from 'node:net';

export /** A pass-through proxy that counts chunk requests and can hold, refuse or swallow any. */
function chunkCounter(target: string) {
  const upstream = new URL(target);
  const state = {
    chunks: 0,
    chunkBytes: 0,
    refuseAfter: Infinity,
    delayMs: 0,
    /** The statuses of chunk requests, as the server answered them. */
    statuses: [] as (number | undefined)[],
    /** Every request: method, path and the status it was answered with. */
    seen: [] as { method: string; url: string; status?: number }[],
    /** Held forever (never forwarded, never answered); `held` counts them. */
    hold: (_req: IncomingMessage): boolean => false,
    held: 0,
    /** Answered by the proxy with `forbidStatus`, as the reference answers for another's share. */
    forbid: (_req: IncomingMessage): boolean => false,
    forbidStatus: 403,
    /** Forwarded, but the answer never given back (the server acts, the client never hears). */
    swallow: (_req: IncomingMessage): boolean => false,
    /** Chunk answers the server gave (`statuses` has them too); while set, kept until released. */
    holdAnswers: false,
  };
  let heldAnswers: (() => void)[] = [];
  let watchers: (() => void)[] = [];
  const changed = () => {
    const go = watchers;
    watchers = [];
    for (const watch of go) watch();
  };
  const server: Server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const entry: { method: string; url: string; status?: number } = {
      method: req.method ?? '',
      url: req.url ?? '',
    };
    state.seen.push(entry);
    if (state.hold(req)) {
      state.held++;
      return; // never answered
    }
    if (state.forbid(req)) {
      entry.status = state.forbidStatus;
      res.writeHead(state.forbidStatus, { 'content-type': 'application/json' });
      return void res.end('{"status":"fail","message":"Only the owner of the share may do this"}');
    }
    const isChunk =
      /^\/files\/[^/]+\/content$/.test(entry.url) &&
      entry.method !== 'GET' &&
      entry.method !== 'HEAD';
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
          entry.status = up.statusCode;
          if (isChunk) state.statuses.push(up.statusCode);
          if (state.swallow(req)) return void up.resume();
          const pass = () => {
            res.writeHead(up.statusCode ?? 502, up.headers);
            up.pipe(res);
          };
          if (isChunk && state.holdAnswers) heldAnswers.push(pass);
          else pass();
          changed();
        },
      );
      forward.on('error', () => res.destroy());
      req.on('error', () => forward.destroy());
      req.pipe(forward);
    };
    if (isChunk && state.delayMs) setTimeout(go, state.delayMs);
    else go();
    changed();
  });
  return {
    state,
    /** Gives back the chunk answers held, and holds none from now on. */
    releaseAnswers() {
      state.holdAnswers = false;
      const go = heldAnswers;
      heldAnswers = [];
      for (const pass of go) pass();
    },
    /** Resolves once `test()` holds (checked at each request and each chunk answer). */
    async until(test: () => boolean) {
      while (!test()) await new Promise<void>((done) => watchers.push(done));
    },
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
