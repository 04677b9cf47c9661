import { Agent, createServer, request, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

/** Hop-by-hop headers: a proxy never forwards them. */
const HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'transfer-encoding',
  'upgrade',
  'te',
  'trailer',
]);

function forwardable(headers: IncomingHttpHeaders): IncomingHttpHeaders {
  const out: IncomingHttpHeaders = {};
  for (const [k, v] of Object.entries(headers)) if (!HOP.has(k) && v !== undefined) out[k] = v;
  return out;
}

export interface Balancer {
  url: string;
  /** How many requests each upstream was sent, in upstream order. */
  counts: number[];
  close(): Promise<void>;
}

/**
 * A round-robin HTTP load balancer in front of several fshare servers, the way one is run in
 * production (docs/DEPLOY.md): every request, even on one keep-alive connection, goes to the
 * next server in turn, so consecutive requests of a test (a login and the call that uses its
 * token, the chunks of one upload) reach different servers. Bodies are streamed both ways.
 */
export async function startBalancer(upstreams: string[]): Promise<Balancer> {
  const targets = upstreams.map((u) => new URL(u));
  const agents = targets.map(() => new Agent({ keepAlive: true, maxSockets: 64 }));
  const counts = targets.map(() => 0);
  let next = 0;
  const server: Server = createServer((req, res) => {
    const i = next++ % targets.length;
    counts[i]++;
    const target = targets[i];
    const upstream = request(
      {
        host: target.hostname,
        port: target.port,
        method: req.method,
        path: req.url,
        headers: {
          ...forwardable(req.headers),
          host: req.headers.host ?? target.host,
          // As production balancers do; the servers trust it from loopback (`trustProxy`).
          'x-forwarded-for': [req.headers['x-forwarded-for'], req.socket.remoteAddress]
            .filter(Boolean)
            .join(', '),
        },
        agent: agents[i],
      },
      (up) => {
        const headers = forwardable(up.headers);
        res.writeHead(up.statusCode ?? 502, up.statusMessage, headers);
        up.pipe(res);
        up.on('aborted', () => res.destroy());
        up.on('error', () => res.destroy());
      },
    );
    upstream.on('error', () => {
      if (res.headersSent) res.destroy();
      else {
        res.writeHead(502, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ status: 'fail', message: 'Bad gateway' }));
      }
    });
    // The client went away: so does the request to the server.
    req.on('aborted', () => upstream.destroy());
    res.on('close', () => {
      if (!res.writableFinished) upstream.destroy();
    });
    req.pipe(upstream);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    counts,
    async close() {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeAllConnections();
      await closed;
      for (const a of agents) a.destroy();
    },
  };
}
