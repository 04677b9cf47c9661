// Which proxy a request goes through (src/client/proxy.ts), from an environment given whole: the
// variables as curl, git and pip read them. test/cli/proxy.test.ts runs the client through a real
// proxy; this covers every form of the variables, which that cannot do one server at a time.
import { describe, expect, it } from 'vitest';
import { proxyFor } from '../../src/client/proxy.js';

const shown = (server: string, env: Record<string, string>) => {
  const proxy = proxyFor(new URL(server), env);
  return proxy && `${proxy.shown} ${proxy.variable}`;
};

describe('proxyFor', () => {
  it('takes the scheme’s variable, lower case first, then ALL_PROXY; empty ones count as unset', () => {
    const env = {
      https_proxy: 'http://s.example:3128',
      HTTP_PROXY: 'http://h.example:8080',
      ALL_PROXY: 'a.example:1',
    };
    expect(shown('https://files.example.com', env)).toBe('http://s.example:3128 https_proxy');
    expect(shown('http://files.example.com', env)).toBe('http://h.example:8080 HTTP_PROXY');
    expect(shown('http://files.example.com', { http_proxy: ' ', ALL_PROXY: 'a.example:1' })).toBe(
      'http://a.example:1 ALL_PROXY',
    );
    expect(shown('http://files.example.com', { HTTPS_PROXY: 'http://s.example' })).toBeNull();
    expect(shown('http://files.example.com', {})).toBeNull();
  });

  it('never for this machine: localhost, 127.0.0.0/8, ::1, 127.0.0.1 written as IPv6', () => {
    const env = { ALL_PROXY: 'http://p.example:3128' };
    for (const server of [
      'http://localhost:5000',
      'http://api.localhost',
      'http://127.0.0.1:5000',
      'http://127.8.9.10',
      'http://[::1]:5000',
      'http://[::ffff:127.0.0.1]:5000',
    ])
      expect(shown(server, env), server).toBeNull();
    expect(shown('http://192.0.2.2:5000', env)).toBe('http://p.example:3128 ALL_PROXY');
  });

  it('NO_PROXY: *, names and the domains under them, addresses, ranges, ports', () => {
    const via = (server: string, noProxy: string) =>
      shown(server, { HTTPS_PROXY: 'http://p.example:3128', no_proxy: noProxy }) === null
        ? 'direct'
        : 'proxy';
    const cases: [string, string, 'direct' | 'proxy'][] = [
      ['https://files.example.com', '*', 'direct'],
      ['https://files.example.com', 'example.com', 'direct'],
      ['https://files.example.com', '.example.com', 'direct'],
      ['https://files.example.com', '*.example.com', 'direct'],
      ['https://example.com', '.example.com', 'direct'],
      ['https://files.example.com', 'ample.com', 'proxy'],
      ['https://files.example.com', 'other.org, files.example.com', 'direct'],
      ['https://files.example.com', 'other.org files.example.com', 'direct'],
      ['https://FILES.example.com', 'files.EXAMPLE.com', 'direct'],
      ['https://files.example.com:8443', 'files.example.com:8443', 'direct'],
      ['https://files.example.com:8443', 'files.example.com:443', 'proxy'],
      ['https://files.example.com', 'files.example.com:443', 'direct'],
      ['https://10.1.2.3', '10.0.0.0/8', 'direct'],
      ['https://11.1.2.3', '10.0.0.0/8', 'proxy'],
      ['https://10.1.2.3', '10.1.2.3', 'direct'],
      ['https://10.1.2.3', '1.2.3', 'proxy'],
      ['https://[fd00::2]', 'fd00::/8', 'direct'],
      ['https://[fd00::2]', 'fd00::2', 'direct'],
      ['https://[fd00::2]:8443', '[fd00::2]:8443', 'direct'],
      ['https://files.example.com', '10.0.0.0/8', 'proxy'],
      ['https://files.example.com', 'not/a/range', 'proxy'],
    ];
    for (const [server, noProxy, way] of cases)
      expect(via(server, noProxy), `${server} with NO_PROXY=${noProxy}`).toBe(way);
  });

  it('a proxy URL: HOST:PORT alone, port 80 when left out, a user and password, nothing else', () => {
    const route = proxyFor(new URL('https://files.example.com'), {
      HTTPS_PROXY: 'http://ci%40corp:p%3Ass@p.example:3128',
    })!;
    expect(route).toMatchObject({ host: 'p.example', port: 3128, shown: 'http://p.example:3128' });
    expect(Buffer.from(route.authorization!.replace('Basic ', ''), 'base64').toString()).toBe(
      'ci@corp:p:ss',
    );
    expect(proxyFor(new URL('https://f.example'), { HTTPS_PROXY: 'p.example' })).toMatchObject({
      host: 'p.example',
      port: 80,
    });
    expect(proxyFor(new URL('https://f.example'), { HTTPS_PROXY: '[fd00::9]:3128' })).toMatchObject(
      { host: 'fd00::9', port: 3128 },
    );
    for (const [value, message] of [
      ['socks5://p.example:1080', /names a socks5 proxy \(socks5:\/\/p\.example:1080\)/],
      ['https://p.example', /names a https proxy/],
      ['http://p.example/path', /is not a proxy URL/],
      ['http://[bad', /is not a proxy URL/],
    ] as const)
      expect(() => proxyFor(new URL('https://f.example'), { HTTPS_PROXY: value })).toThrow(message);
    // The password is never in a message.
    expect(() =>
      proxyFor(new URL('https://f.example'), { HTTPS_PROXY: 'socks5://u:secret@p.example' }),
    ).toThrow(/^(?!.*secret)/);
  });
});
