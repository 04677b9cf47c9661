/** A range in a unit other than bytes: a token, then `=`. */
const OTHER_UNIT = /^\s*[!#$%&'*+.^_`|~0-9A-Za-z-]+\s*=/;

export type RangeResult =
  { kind: 'none' } | { kind: 'range'; start: number; end: number } | { kind: 'unsatisfiable' };

/**
 * One byte range per RFC 9110 §14.1.2, with API.md's choices: `a-b`, `a-`, `-n`; an end past the
 * last byte is cut to it; a start at or past the size, a start after the end, or an unparsable
 * header is unsatisfiable (416); `-n` of an empty content is that content (200). Several ranges
 * are answered with the whole content (RFC 9110 lets a server ignore Range), since fshare serves
 * one range per request, and so is a range in another unit (which RFC 9110 §14.2 says must be
 * ignored).
 */
export function parseRange(header: string | undefined, size: number): RangeResult {
  if (header === undefined) return { kind: 'none' };
  const match = /^\s*bytes\s*=\s*(.*)$/i.exec(header);
  // RFC 9110 §14.2: a range unit the server does not know ("items=0-9") is ignored, not refused.
  if (!match) return OTHER_UNIT.test(header) ? { kind: 'none' } : { kind: 'unsatisfiable' };
  // RFC 9110 §5.6.1.2: empty list elements are accepted and ignored ("bytes=1-2," is 1-2);
  // at least one range must remain.
  const parts = match[1]!
    .split(',')
    .map((p) => p.trim())
    .filter((p) => p !== '');
  if (parts.length > 1)
    return parts.every((p) => /^(\d+-\d*|-\d+)$/.test(p))
      ? { kind: 'none' }
      : { kind: 'unsatisfiable' };
  const m = /^(\d*)-(\d*)$/.exec(parts[0] ?? '');
  if (!m || (m[1] === '' && m[2] === '')) return { kind: 'unsatisfiable' };
  if (m[1] === '') {
    const suffix = Number(m[2]);
    if (suffix === 0) return { kind: 'unsatisfiable' };
    // RFC 9110 §14.1.1: on an empty representation a suffix range is the one satisfiable form;
    // no 206 can state zero bytes, so the answer is the whole (empty) content, a 200.
    if (size === 0) return { kind: 'none' };
    return { kind: 'range', start: Math.max(0, size - suffix), end: size - 1 };
  }
  const start = Number(m[1]);
  const end = m[2] === '' ? size - 1 : Math.min(Number(m[2]), size - 1);
  if (start >= size || (m[2] !== '' && start > Number(m[2]))) return { kind: 'unsatisfiable' };
  return { kind: 'range', start, end };
}
