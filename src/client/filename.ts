import { createHash } from 'node:crypto';
import { basename } from 'node:path';

/** Reads the file name from a Content-Disposition header, preferring RFC 5987 `filename*`. */
export function filenameFromDisposition(header: string | undefined): string | undefined {
  if (!header) return undefined;
  const extended = /(?:^|;)\s*filename\*\s*=\s*([^;]*)/i.exec(header);
  if (extended) {
    // Trailing spaces trimmed after the match: a lazy `(.*?)\s*$` took 0.5 s on 16 KB of them.
    const match = /^\s*([\w!#$%&+^`{}~-]*)'[^']*'(.*)$/.exec(extended[1]!);
    if (match) {
      const bytes = percentDecode(match[2]!.trimEnd());
      return match[1]!.toLowerCase() === 'utf-8'
        ? bytes.toString('utf8')
        : bytes.toString('latin1');
    }
  }
  const plain = /(?:^|;)\s*filename\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^;]*))/i.exec(header);
  if (!plain) return undefined;
  return plain[1] !== undefined ? plain[1].replace(/\\(.)/g, '$1') : plain[2]!.trim();
}

/** Percent-decodes to raw bytes (the charset is applied afterwards). */
function percentDecode(text: string): Buffer {
  const bytes: number[] = [];
  for (let i = 0; i < text.length; i++) {
    if (text[i] === '%' && /^[0-9a-f]{2}$/i.test(text.slice(i + 1, i + 3))) {
      bytes.push(parseInt(text.slice(i + 1, i + 3), 16));
      i += 2;
    } else bytes.push(...Buffer.from(text[i]!, 'utf8'));
  }
  return Buffer.from(bytes);
}

/** The longest file name the usual file systems take, in bytes. */
const NAME_MAX = 255;
/** What a download adds while it runs. */
const PART_SUFFIX = '.part';
/** A name from the server is cut to this, or shorter where a suffix must fit too. */
const MAX_NAME_BYTES = 240;

/** The longest run of whole characters from the start of `text` that fits in `room` bytes. */
function cutToBytes(text: string, room: number): string {
  // In one pass: dropping one character at a time cost seconds to minutes for a 16–64 KB name.
  let kept = '';
  let bytes = 0;
  for (const ch of text) {
    bytes += Buffer.byteLength(ch);
    if (bytes > room) break;
    kept += ch;
  }
  return kept;
}

/** True when a file name is longer than the usual file systems take. */
export function nameTooLong(path: string): boolean {
  return Buffer.byteLength(basename(path)) > NAME_MAX;
}

/**
 * Where a download to `target` keeps its bytes until they are verified: `NAME.part`. A NAME too
 * long to take the suffix (251 to 255 bytes) gets NAME cut to fit, `~`, the first 8 hex digits of
 * NAME's sha256 and `.part`: recognisable, and always the same for the same NAME, so --continue
 * finds it again.
 */
export function partPathOf(target: string): string {
  const name = basename(target);
  if (Buffer.byteLength(name) + PART_SUFFIX.length <= NAME_MAX) return `${target}${PART_SUFFIX}`;
  const tag = `~${createHash('sha256').update(name).digest('hex').slice(0, 8)}${PART_SUFFIX}`;
  const dir = target.slice(0, target.length - name.length);
  return `${dir}${cutToBytes(name, NAME_MAX - tag.length)}${tag}`;
}

/**
 * Characters a name from the server may not bring to a terminal or a file name: C0 and C1
 * controls, the line and paragraph separators (U+2028, U+2029: line breaks to some terminals and
 * log viewers), and the bidirectional controls that make "invoice\u202Efdp.exe" read as
 * "invoiceexe.pdf".
 */
export const UNSAFE_CHARACTERS =
  /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;

/**
 * Turns a name chosen by the server into a safe single path component, the way browsers do:
 * the whole name is kept, with "/" and "\\" made "_", UNSAFE_CHARACTERS removed and leading dots
 * dropped (so "../../etc/passwd" becomes "_.._etc_passwd": never a directory, never hidden).
 * The name is cut to MAX_NAME_BYTES, and shorter when `suffix` (".0-1023" for a byte range), which
 * the caller appends, and ".part" would not fit in NAME_MAX with it.
 * Returns undefined when nothing safe is left.
 */
export function sanitizeFileName(name: string | undefined, suffix = ''): string | undefined {
  if (name === undefined) return undefined;
  let safe = name.replace(/[/\\]/g, '_').replace(UNSAFE_CHARACTERS, '').trim().replace(/^\.+/, '');
  if (safe === '') return undefined;
  const room = Math.min(
    MAX_NAME_BYTES,
    NAME_MAX - Buffer.byteLength(PART_SUFFIX) - Buffer.byteLength(suffix),
  );
  // A suffix too long for any name: the name is kept whole, and the file system's refusal
  // (ENAMETOOLONG) is the error.
  if (room > 0 && Buffer.byteLength(safe) > room) safe = cutToBytes(safe, room);
  return safe === '' ? undefined : safe;
}
