import { isUuid } from '../shared/ids.js';
import { ClientInputError } from './errors.js';
import { normalizeServer, type ApiClient } from './http.js';

/** A share named on the command line: its id, and the server when it was given as a URL. */
export interface ShareRef {
  id: string;
  /** Base URL taken from a full share URL; undefined for a bare id. */
  server?: string;
}

/**
 * An argument as an error line shows it: an empty one (a script's "$ID" unset) as `""`, not as
 * nothing after the colon.
 */
export function shownArgument(text: string): string {
  return text.trim() === '' ? JSON.stringify(text) : text;
}

/** Accepts a share id or a full URL such as http://host:5000/files/<uuid> (or …/content). */
export function parseShareRef(ref: string): ShareRef {
  const text = ref.trim();
  const shown = shownArgument(ref);
  if (isUuid(text)) return { id: text.toLowerCase() };
  if (/^https?:\/\//i.test(text)) {
    let url: URL;
    try {
      url = new URL(text);
    } catch {
      throw new ClientInputError(`not a share id or URL: ${shown}`);
    }
    // Never sent (the token signs the request), so never silently dropped either: a URL such as
    // http://files.example.com@evil.example/files/<id> is another host than it reads as (found
    // from outside: it downloaded from that host, exit 0). Not echoed, whatever else is wrong.
    if (url.username || url.password)
      throw new ClientInputError(
        `a user name or password in a share's URL is never sent: leave it out of ${url.origin}${url.pathname}`,
      );
    const match = /^(.*)\/files\/([^/]+)(?:\/content)?\/?$/.exec(url.pathname);
    if (match && isUuid(match[2]!))
      return { id: match[2]!.toLowerCase(), server: normalizeServer(url.origin + match[1]!) };
    // A share link's URL (what `fshare link` prints) names no share (only `fshare get` takes
    // one): say what it is, and how it downloads, rather than that it is no URL.
    if (/\/l\/[^/]+\/?$/i.test(url.pathname))
      throw new ClientInputError(
        `a share link, not a share id or URL: ${shown} (download a link with fshare get '${url.origin}${url.pathname}')`,
      );
  }
  throw new ClientInputError(`not a share id or URL: ${shown}`);
}

/** The URL people paste: <server>/files/<id>. */
export function shareUrl(server: string, id: string): string {
  return `${server}/files/${id}`;
}

/** The path of a share below the server: "/files/<id>". */
export function sharePath(id: string): string {
  return `/files/${encodeURIComponent(id)}`;
}

/** Same client, pointed at another server (used when a share was named by a full URL). */
export function withServer(
  client: ApiClient,
  server: string,
  token: string | undefined,
): ApiClient {
  return { ...client, server: normalizeServer(server), token };
}
