import { BlockList, isIP } from 'node:net';
import { ClientInputError } from './errors.js';

/**
 * The HTTP proxy a request goes through, from the environment as curl, git and pip read it:
 * `https_proxy`/`HTTPS_PROXY` for https servers, `http_proxy`/`HTTP_PROXY` for http ones, else
 * `all_proxy`/`ALL_PROXY`; `no_proxy`/`NO_PROXY` lists the hosts reached directly. A server on
 * this machine (localhost, 127.0.0.0/8, ::1) is always reached directly, as Go's clients do: a
 * CI job's proxy is for the world outside, and cannot reach the runner's own loopback.
 *
 * Found from outside: fshare read none of them, so in a network where only the proxy leads out
 * (a company's CI) every command failed with "cannot reach", and where the proxy was there to
 * watch what leaves, fshare went around it.
 */
export interface ProxyRoute {
  host: string;
  port: number;
  /** `Proxy-Authorization` for the user and password in the proxy's URL. */
  authorization?: string;
  /** The proxy as messages name it: scheme, host and port, never its password. */
  shown: string;
  /** The variable it came from. */
  variable: string;
}

const cache = new Map<string, ProxyRoute | null>();

/** The proxy for requests to `url`, or null to connect directly. */
export function proxyFor(url: URL, env: NodeJS.ProcessEnv = process.env): ProxyRoute | null {
  const key = `${url.protocol}//${url.host}`;
  if (env === process.env && cache.has(key)) return cache.get(key)!;
  const proxy = findProxy(url, env);
  if (env === process.env) cache.set(key, proxy);
  return proxy;
}

function findProxy(url: URL, env: NodeJS.ProcessEnv): ProxyRoute | null {
  const names =
    url.protocol === 'https:'
      ? ['https_proxy', 'HTTPS_PROXY', 'all_proxy', 'ALL_PROXY']
      : ['http_proxy', 'HTTP_PROXY', 'all_proxy', 'ALL_PROXY'];
  const variable = names.find((n) => env[n]?.trim());
  if (!variable) return null;
  const host = url.hostname.replace(/^\[|\]$/g, '').toLowerCase();
  const port = Number(url.port || (url.protocol === 'https:' ? 443 : 80));
  if (isLoopback(host) || bypassed(host, port, env.no_proxy?.trim() || env.NO_PROXY || ''))
    return null;
  return parseProxy(variable, env[variable]!.trim());
}

const LOOPBACK = new BlockList();
LOOPBACK.addSubnet('127.0.0.0', 8, 'ipv4');
LOOPBACK.addAddress('::1', 'ipv6');
LOOPBACK.addSubnet('::ffff:7f00:0', 104, 'ipv6'); // 127.0.0.0/8 written as IPv6

function isLoopback(host: string): boolean {
  if (host === 'localhost' || host.endsWith('.localhost')) return true;
  const family = isIP(host);
  return family !== 0 && LOOPBACK.check(host, family === 4 ? 'ipv4' : 'ipv6');
}

/** Whether NO_PROXY names the host: `*`, a name or a domain under it, an address, a CIDR range. */
function bypassed(host: string, port: number, list: string): boolean {
  for (let entry of list.split(/[\s,]+/).filter(Boolean)) {
    entry = entry.toLowerCase();
    if (entry === '*') return true;
    if (entry.includes('/')) {
      const [base, bits] = entry.split('/');
      const family = isIP(base!.replace(/^\[|\]$/g, ''));
      if (!family || !isIP(host) || !/^\d+$/.test(bits!)) continue;
      const range = new BlockList();
      try {
        range.addSubnet(
          base!.replace(/^\[|\]$/g, ''),
          Number(bits),
          family === 4 ? 'ipv4' : 'ipv6',
        );
        if (range.check(host, isIP(host) === 4 ? 'ipv4' : 'ipv6')) return true;
      } catch {
        // not a range after all: it names nothing
      }
      continue;
    }
    // A port may follow the name (`example.com:8443`, `[::1]:8080`); a bare IPv6 address has none.
    const withPort = /^(\[[^\]]+\]|[^:]+):(\d+)$/.exec(entry);
    let name = entry;
    if (withPort) {
      if (Number(withPort[2]) !== port) continue;
      name = withPort[1]!;
    }
    name = name.replace(/^\[|\]$/g, '').replace(/^\*?\./, '');
    if (host === name || (!isIP(host) && host.endsWith(`.${name}`))) return true;
  }
  return false;
}

function parseProxy(variable: string, value: string): ProxyRoute {
  let url: URL;
  try {
    url = new URL(/^[a-z][a-z0-9+.-]*:\/\//i.test(value) ? value : `http://${value}`);
  } catch {
    throw new ClientInputError(`${variable} is not a proxy URL (http://HOST:PORT)`);
  }
  const shown = `${url.protocol}//${url.host}`;
  if (url.protocol !== 'http:')
    throw new ClientInputError(
      `${variable} names a ${url.protocol.slice(0, -1)} proxy (${shown}); fshare goes through http:// proxies only`,
    );
  if (!url.hostname || (url.pathname !== '/' && url.pathname !== '') || url.search)
    throw new ClientInputError(`${variable} is not a proxy URL (http://HOST:PORT): ${shown}`);
  const proxy: ProxyRoute = {
    host: url.hostname.replace(/^\[|\]$/g, ''),
    port: Number(url.port || 80),
    shown,
    variable,
  };
  if (url.username || url.password) {
    const user = decodeURIComponent(url.username);
    const password = decodeURIComponent(url.password);
    proxy.authorization = `Basic ${Buffer.from(`${user}:${password}`).toString('base64')}`;
  }
  return proxy;
}
