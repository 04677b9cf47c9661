import { describe, expect, it } from 'vitest';
import { parseByteRange } from '../../src/client/download.js';
import { ClientInputError } from '../../src/client/errors.js';
import { filenameFromDisposition, sanitizeFileName } from '../../src/client/filename.js';
import { normalizeServer } from '../../src/client/http.js';
import { parseShareRef } from '../../src/client/refs.js';
import { applyPermissionChanges, parsePermissionList } from '../../src/cli/commands/perms.js';
import { printable } from '../../src/cli/output.js';

const ID = '3f0c2a8e-1b2c-4d5e-8f90-a1b2c3d4e5f6';

describe('share references', () => {
  it('accepts an id or a full URL, and keeps the URL server', () => {
    expect(parseShareRef(ID)).toEqual({ id: ID });
    expect(parseShareRef(ID.toUpperCase())).toEqual({ id: ID });
    expect(parseShareRef(`http://host:5000/files/${ID}`)).toEqual({
      id: ID,
      server: 'http://host:5000',
    });
    expect(parseShareRef(`https://h.example/fs/files/${ID}/content`)).toEqual({
      id: ID,
      server: 'https://h.example/fs',
    });
  });

  it('refuses anything else', () => {
    for (const bad of [
      '',
      'abc',
      `${ID}x`,
      `http://host/users/${ID}`,
      `ftp://host/files/${ID}`,
      'http://host/files/abc',
    ])
      expect(() => parseShareRef(bad), bad).toThrow(ClientInputError);
  });

  it('normalises server URLs', () => {
    expect(normalizeServer('http://127.0.0.1:5000/')).toBe('http://127.0.0.1:5000');
    expect(normalizeServer('HTTP://Host:80/x//')).toBe('http://host/x');
    expect(() => normalizeServer('127.0.0.1:5000')).toThrow(ClientInputError);
  });
});

describe('byte ranges', () => {
  it('parses A-B, A- and -N', () => {
    expect(parseByteRange('0-99')).toEqual({ start: 0, end: 99 });
    expect(parseByteRange('100-')).toEqual({ start: 100 });
    expect(parseByteRange('-10')).toEqual({ suffix: 10 });
  });
  it('refuses the rest', () => {
    for (const bad of ['', '-', '9-3', '-0', 'a-b', '1-2-3', '1k-2k'])
      expect(() => parseByteRange(bad), bad).toThrow(ClientInputError);
  });
});

describe('file names from Content-Disposition', () => {
  it('prefers filename* and decodes it', () => {
    expect(
      filenameFromDisposition(`attachment; filename="caf?.txt"; filename*=UTF-8''caf%C3%A9.txt`),
    ).toBe('café.txt');
    expect(filenameFromDisposition('attachment; filename="a \\"b\\".txt"')).toBe('a "b".txt');
    expect(filenameFromDisposition('attachment; filename=plain.bin')).toBe('plain.bin');
    // Spaces after an extended value are not part of the name; spaces inside it are.
    expect(filenameFromDisposition(`attachment; filename*=UTF-8''a%20b.txt   ; x=1`)).toBe(
      'a b.txt',
    );
    const spaced = `attachment; filename*=UTF-8''a${' '.repeat(16_000)}b`;
    expect(filenameFromDisposition(spaced)).toBe(`a${' '.repeat(16_000)}b`);
    expect(filenameFromDisposition('attachment')).toBeUndefined();
    expect(filenameFromDisposition(undefined)).toBeUndefined();
  });

  it('can never leave the current directory, and keeps the whole name as browsers do', () => {
    // Issue 9: separators become "_", leading dots go; never only the last part of the name.
    expect(sanitizeFileName('../../etc/passwd-T.txt')).toBe('_.._etc_passwd-T.txt');
    expect(sanitizeFileName('..\\..\\boot.ini')).toBe('_.._boot.ini');
    expect(sanitizeFileName('/abs/path.txt')).toBe('_abs_path.txt');
    expect(sanitizeFileName('dir/..')).toBe('dir_..');
    expect(sanitizeFileName('.hidden')).toBe('hidden');
    // "." and ".." (as the reference server offers them): nothing left, the share id is used.
    expect(sanitizeFileName('.')).toBeUndefined();
    expect(sanitizeFileName('..')).toBeUndefined();
    expect(sanitizeFileName('evil\nname\u0007.txt')).toBe('evilname.txt');
    // A right-to-left override would show "invoice\u202Efdp.exe" as "invoiceexe.pdf".
    expect(sanitizeFileName('invoice\u202Efdp.exe')).toBe('invoicefdp.exe');
    expect(sanitizeFileName('a\u2066b\u2069\u200f\u061c.txt')).toBe('ab.txt');
    expect(sanitizeFileName('line\u2028break\u2029.txt')).toBe('linebreak.txt');
    for (const bad of ['', '.', '..', '...', ' \u0000 '])
      expect(sanitizeFileName(bad), bad).toBeUndefined();
    expect(Buffer.byteLength(sanitizeFileName('é'.repeat(400))!)).toBeLessThanOrEqual(240);
    // A long name keeps the longest run of whole characters from its start that fits 240 bytes
    // (a 64 KB name from a server took a minute of CPU, one character dropped at a time).
    const long = `a${'é😀'.repeat(32_000)}`;
    const kept = sanitizeFileName(long)!;
    expect(long.startsWith(kept)).toBe(true);
    expect(Buffer.byteLength(kept)).toBeLessThanOrEqual(240);
    const next = [...long.slice(kept.length)][0]!;
    expect(Buffer.byteLength(kept + next)).toBeGreaterThan(240);
    expect(Buffer.from(kept).toString()).toBe(kept); // never half of a surrogate pair
  });
});

describe('permissions and terminal output', () => {
  it('parses lists and +/- changes in API order', () => {
    expect(parsePermissionList(['read,list', 'CREATE'])).toEqual(['CREATE', 'LIST', 'READ']);
    expect(parsePermissionList(['none'])).toEqual([]);
    expect(parsePermissionList([''])).toEqual([]);
    expect(applyPermissionChanges(['READ', 'LIST'], ['+CREATE', '-LIST', '+read'])).toEqual([
      'CREATE',
      'READ',
    ]);
    expect(() => parsePermissionList(['FLY'])).toThrow(/unknown permission/);
    expect(() => applyPermissionChanges([], ['READ'])).toThrow(/\+PERM/);
  });

  it('shows control characters from the server as ?', () => {
    expect(printable('a\u001b[31mb\tc')).toBe('a?[31mb?c');
    expect(printable('invoice\u202Efdp.exe \u2067x\u2069')).toBe('invoice?fdp.exe ?x?');
    expect(printable('a\u2028b\u2029c')).toBe('a?b?c');
    expect(printable('日本語 é ü')).toBe('日本語 é ü');
  });
});
