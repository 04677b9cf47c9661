/**
 * What the request log (and a 404's message) shows instead of a link's path: never the token.
 * Only the path of an absolute-form request (`GET http://host/l/…`) is kept, and whatever
 * follows a segment `l` is replaced, wherever it is (`/l//…`, `/./l/…` reach no link but carry
 * the token all the same).
 */
export function redactLinkPath(url: string, linkId: unknown): string {
  const path = url.replace(/^[a-z][a-z0-9+.-]*:\/\/[^/]*/i, '') || '/';
  const segments = path.split('/');
  const at = segments.findIndex((s, i) => i < segments.length - 1 && isLinkSegment(s));
  if (at < 0) return path;
  const shown = typeof linkId === 'string' ? `<link ${linkId}>` : '<no such link>';
  return [...segments.slice(0, at), 'l', shown].join('/');
}

function isLinkSegment(segment: string): boolean {
  try {
    return decodeURIComponent(segment).toLowerCase() === 'l';
  } catch {
    return false;
  }
}
