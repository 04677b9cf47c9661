/**
 * The journal's line format and its reader.
 *
 * A line is `<crc32 of the JSON, 8 hex digits> <JSON>\n`. Lines written by fshare 0.1 are bare
 * JSON (`{...}\n`) and are still read. Only whole lines count: a line is whole when it ends in
 * "\n", its checksum matches and its JSON parses.
 *
 * What a crash can leave is a cut (or, after a power loss, zero-filled) end: everything after the
 * last whole line is "torn" and dropped. Damage anywhere else, a bad line followed by good ones,
 * is not something a crash makes, so the reader reports it instead of guessing.
 */

const CRC_TABLE = (() => {
  const table = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    table[n] = c >>> 0;
  }
  return table;
})();

export function crc32(bytes: Uint8Array): number {
  let crc = 0xffffffff;
  for (let i = 0; i < bytes.length; i++) crc = CRC_TABLE[(crc ^ bytes[i]!) & 0xff]! ^ (crc >>> 8);
  return (crc ^ 0xffffffff) >>> 0;
}

/** One journal entry: a sequence number and an operation (the store defines the operations). */
export interface Entry {
  seq: number;
  op: string;
  [key: string]: unknown;
}

export function encodeLine(entry: Entry): string {
  const json = JSON.stringify(entry);
  const crc = crc32(Buffer.from(json)).toString(16).padStart(8, '0');
  return `${crc} ${json}\n`;
}

export interface ReadLine {
  /** 1-based line number in the file. */
  line: number;
  entry: Entry;
}

export interface BadLine {
  line: number;
  reason: string;
}

export interface JournalContents {
  /** Every whole line, in order. */
  lines: ReadLine[];
  /** Lines that are not whole and are followed by whole ones: damage, not a crash. */
  damaged: BadLine[];
  /** The cut end a crash left (dropped), if any. */
  torn?: BadLine;
  /** Bytes from the start up to the end of the last whole line: where appends continue. */
  goodBytes: number;
}

function decode(text: string): Entry | string {
  let json = text;
  if (!text.startsWith('{')) {
    const m = /^([0-9a-f]{8}) (.*)$/s.exec(text);
    if (!m) return 'not a journal line';
    json = m[2]!;
    if (crc32(Buffer.from(json)) !== parseInt(m[1]!, 16)) return 'checksum mismatch';
  }
  let value: unknown;
  try {
    value = JSON.parse(json);
  } catch {
    return 'not valid JSON';
  }
  if (
    typeof value !== 'object' ||
    value === null ||
    typeof (value as Entry).seq !== 'number' ||
    typeof (value as Entry).op !== 'string'
  )
    return 'not a journal entry';
  return value as Entry;
}

/** Splits a journal into whole lines, damaged lines and a torn end. */
export function readJournal(buf: Buffer): JournalContents {
  const lines: ReadLine[] = [];
  const bad: BadLine[] = [];
  let goodBytes = 0;
  let start = 0;
  let lineNo = 0;
  while (start < buf.length) {
    const nl = buf.indexOf(0x0a, start);
    lineNo++;
    if (nl === -1) {
      // No newline: a cut end, unless it is only the zeros a power loss can leave.
      const rest = buf.subarray(start);
      if (rest.some((b) => b !== 0)) bad.push({ line: lineNo, reason: 'cut short' });
      break;
    }
    const text = buf.toString('utf8', start, nl);
    start = nl + 1;
    if (text.length === 0 || /^\0+$/.test(text)) {
      if (text.length > 0) bad.push({ line: lineNo, reason: 'zero bytes' });
      continue;
    }
    const entry = decode(text);
    if (typeof entry === 'string') {
      bad.push({ line: lineNo, reason: entry });
      continue;
    }
    lines.push({ line: lineNo, entry });
    goodBytes = start;
  }
  // Bad lines after the last whole line are what a crash leaves; any before it are damage.
  const lastGood = lines.length ? lines[lines.length - 1]!.line : 0;
  const damaged = bad.filter((b) => b.line < lastGood);
  const tail = bad.filter((b) => b.line > lastGood);
  return { lines, damaged, torn: tail[0], goodBytes };
}
