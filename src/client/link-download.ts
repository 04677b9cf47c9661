import { ApiError, ClientInputError } from './errors.js';
import { hideSecret, isRecord, normalizeServer, send, toApiError, type ApiClient } from './http.js';
import { shownArgument } from './refs.js';
import type { ContentSource } from './download.js';

/** A link token as the server makes and accepts them (src/server/routes/links.ts TOKEN). */
const TOKEN = /^[A-Za-z0-9_-]{22,128}$/;

/** A share link named on the command line: `<server>/l/<token>` (what `fshare link` prints). */
export interface LinkRef {
  /** The server below which the link lives (its public URL, with any path prefix). */
  server: string;
  token: string;
  /** A sha256 the URL names (`?sha256=`, the link page's Download button): the content asked for. */
  sha256?: string;
}

/**
 * A share link's URL, or undefined for anything else (a share id or URL is parseShareRef's).
 * `?download` and `?sha256=` may follow, as on the link page's Download button.
 */
export function parseLinkRef(ref: string): LinkRef | undefined {
  const text = ref.trim();
  if (!/^https?:\/\//i.test(text)) return undefined;
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    return undefined;
  }
  const match = /^(.*)\/l\/([^/]+)\/?$/i.exec(url.pathname);
  if (!match) return undefined;
  // Never sent (a link needs none), so never silently dropped either; not echoed.
  if (url.username || url.password)
    throw new ClientInputError(
      `a user name or password in a share link's URL is never sent: leave it out of ${url.origin}${url.pathname}`,
    );
  const token = match[2]!;
  if (!TOKEN.test(token))
    throw new ClientInputError(`not a share link's token in ${shownArgument(ref)}`);
  const sha256 = url.searchParams.get('sha256') ?? undefined;
  if (sha256 !== undefined && !/^[0-9a-fA-F]{64}$/.test(sha256))
    throw new ClientInputError(`the link's sha256= is not a sha256: ${sha256}`);
  return {
    server: normalizeServer(url.origin + match[1]!),
    token,
    sha256: sha256?.toLowerCase(),
  };
}

/** What a link's page states (GET /l/<token> asking for JSON; docs/API.md "Share links"). */
export interface LinkView {
  file_name: string;
  size: number | null;
  sha256: string | null;
  expires: string | null;
  downloads_left: number | null;
}

const isLinkView = (body: unknown): body is LinkView =>
  isRecord(body) &&
  typeof body.file_name === 'string' &&
  (body.size === null || (Number.isSafeInteger(body.size) && (body.size as number) >= 0)) &&
  (body.sha256 === null ||
    (typeof body.sha256 === 'string' && /^[0-9a-f]{64}$/i.test(body.sha256))) &&
  (body.downloads_left === null ||
    body.downloads_left === undefined ||
    Number.isSafeInteger(body.downloads_left));

/** An opened link: what it states, and how its content downloads. */
export interface OpenedLink {
  view: LinkView;
  source: ContentSource;
}

/**
 * Opens a link for download: reads what it states (asking for its password when it has one, and
 * keeping the grant the server gives for it), and says how its content downloads. The download
 * names the sha256 the link stated (`?download&sha256=`), so content that replaced it in between
 * is a 412, never other bytes under the name verified; a link with no content yet is a 404.
 * No token of ours is ever sent: the client given carries none.
 */
export async function openLink(
  client: ApiClient,
  link: LinkRef,
  password: () => Promise<string>,
): Promise<OpenedLink> {
  // No line of ours shows the link's token (it is the link), --debug's included.
  hideSecret(link.token);
  const path = `/l/${link.token}`;
  const headers: Record<string, string> = {};
  let view: LinkView;
  try {
    view = await readView(client, path, headers);
  } catch (err) {
    if (!(err instanceof ApiError) || err.status !== 401) throw err;
    headers.cookie = await unlock(client, path, await password());
    view = await readView(client, path, headers);
  }
  if (view.size === null) throw new ApiError(404, 'The file has not been uploaded yet');
  const sha256 = link.sha256 ?? view.sha256?.toLowerCase();
  if (link.sha256 && view.sha256 && link.sha256 !== view.sha256.toLowerCase())
    throw new ApiError(
      412,
      `the link's content is no longer the one its URL names (sha256 ${link.sha256}): it now has sha256 ${view.sha256.toLowerCase()}; leave sha256= out of the URL to download it`,
    );
  const info = { size: view.size, sha256: sha256 ?? null };
  return {
    view,
    source: {
      path: `${path}?download${sha256 ? `&sha256=${sha256}` : ''}`,
      headers,
      info: () => Promise.resolve(info),
      pinned: sha256 !== undefined,
    },
  };
}

/** GET /l/<token> as JSON: the link's description, or the server's error. */
async function readView(
  client: ApiClient,
  path: string,
  headers: Record<string, string>,
): Promise<LinkView> {
  const res = await send(client, {
    method: 'GET',
    path,
    headers: { ...headers, accept: 'application/json' },
    idempotent: true,
    retryServerErrors: true,
    buffered: true,
  });
  if (res.statusCode >= 400) {
    const err = await toApiError(res);
    // A link's 401 asks for its password: no sign-in mends it.
    if (err.status === 401) err.hint = null;
    throw err;
  }
  const text = await res.text();
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    body = undefined;
  }
  if (!isLinkView(body))
    throw new ApiError(
      res.statusCode,
      `the server's answer for the link is not a share link's description (is ${client.server} an fshare server?)`,
      body,
    );
  return body;
}

/**
 * Gives the link's password (POST /l/<token>) and returns the grant the server sets for it, as
 * the Cookie header that carries it. The server answers a right password with 303 and the grant
 * (Set-Cookie, for this link's path); a wrong one with 401.
 */
async function unlock(client: ApiClient, path: string, password: string): Promise<string> {
  const body = JSON.stringify({ password });
  let res;
  try {
    res = await send(client, {
      method: 'POST',
      path,
      headers: { accept: 'application/json', 'content-type': 'application/json' },
      body: () => body,
      // A password check that is repeated counts one more guess and changes nothing else.
      idempotent: false,
      buffered: true,
    });
  } catch (err) {
    // fshare follows no redirect, so the 303 that carries the grant arrives as an error.
    if (err instanceof ApiError && err.status === 303) {
      const cookie = grantCookie(err.headers['set-cookie']);
      if (cookie) return cookie;
      throw new ApiError(
        502,
        'the server accepted the link password but gave no grant to download with',
      );
    }
    throw err;
  }
  if (res.statusCode >= 400) {
    const err = await toApiError(res);
    if (err.status === 401) err.hint = null;
    throw err;
  }
  await res.dump();
  throw new ApiError(
    res.statusCode,
    `the server answered the link password with ${res.statusCode}, not with a grant`,
  );
}

/** The `name=value` of the link grant among Set-Cookie headers (undefined without one). */
function grantCookie(setCookie: string | string[] | undefined): string | undefined {
  const all = Array.isArray(setCookie) ? setCookie : setCookie ? [setCookie] : [];
  for (const line of all) {
    const pair = line.split(';')[0]!.trim();
    if (/^fshare_link_[A-Za-z0-9_-]+=[^;\s]+$/.test(pair)) return pair;
  }
  return undefined;
}
