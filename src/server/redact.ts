/**
 * What the request log (and a 404's message) shows instead of a link's path: never the token.
 * Only the path of an absolute-form request (`GET http://host/l/…`) is kept, and whatever
 * follows a segment `l` is replaced, wherever it is (`/l//…`, `/./l/…` reach no link but carry
 * the token all the same), and so is a segment that only decoded shows `l` and a separator
 * (`/l%2F<token>`, `/l\<token>`, `/%256C/<token>`: a link URL mangled on its way).
 */
export function redactLinkPath(url: string, linkId: unknown): string {
  const path = url.replace(/^[a-z][a-z0-9+.-]*:\/\/[^/]*/i, '') || '/';
  const segments = path.split('/');
  const at = segments.findIndex(
    (s, i) => (i < segments.length - 1 && isLinkSegment(s)) || hidesLinkSegment(s),
  );
  if (at < 0) return path;
  const shown = typeof linkId === 'string' ? `<link ${linkId}>` : '<no such link>';
  return [...segments.slice(0, at), 'l', shown].join('/');
}

/** How many times a segment is decoded, at most, looking for an `l` (`%25` nests). */
const DECODINGS = 4;

/** The segment and what it decodes to, once, twice… (as long as that changes it). */
function decodings(segment: string): string[] {
  const found = [segment];
  for (let i = 0; i < DECODINGS; i++) {
    let next: string;
    try {
      next = decodeURIComponent(found[found.length - 1]!);
    } catch {
      break;
    }
    if (next === found[found.length - 1]) break;
    found.push(next);
  }
  return found;
}

function isLinkSegment(segment: string): boolean {
  return decodings(segment).some((s) => s.toLowerCase() === 'l');
}

/** A segment holding `l`, a slash or backslash and more: `l%2F<token>`, `x\l\<token>`. */
function hidesLinkSegment(segment: string): boolean {
  return decodings(segment).some((s) => {
    const parts = s.split(/[/\\]/);
    return parts.some((p, i) => i < parts.length - 1 && p.toLowerCase() === 'l');
  });
}
