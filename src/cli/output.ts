import { CommanderError } from 'commander';
import {
  ApiError,
  NoArtifactError,
  ClientInputError,
  NetworkError,
  ProxyError,
  TlsError,
  VerificationError,
} from '../client/errors.js';
import { FileExistsError, PartBusyError } from '../client/download.js';
import { UNSAFE_CHARACTERS } from '../client/filename.js';
import { retryAfterMs, withoutTokens } from '../client/http.js';
import { systemErrorText } from '../shared/syserr.js';
import { ConfigDamagedError } from './config.js';

/** CLI.md's exit codes. */
export const EXIT = {
  ok: 0,
  failure: 1,
  usage: 2,
  auth: 3,
  notFound: 4,
  conflict: 5,
  network: 6,
  verification: 7,
  interrupted: 130,
} as const;

/** A command line that cannot work: a missing argument, a bad size, no terminal to prompt on. */
export class UsageError extends Error {
  override readonly name = 'UsageError';
}

/** Not signed in where a token is needed before any request is made. */
export class AuthError extends Error {
  override readonly name = 'AuthError';
}

/** What the command names does not exist (a user not in the server's metadata): exit 4. */
export class NotFoundError extends Error {
  override readonly name = 'NotFoundError';
}

/** The user pressed Ctrl-C at a prompt. */
export class InterruptedError extends Error {
  override readonly name = 'InterruptedError';
}

export function exitCodeFor(err: unknown): number {
  if (err instanceof ApiError) {
    if (err.status === 401 || err.status === 403) return EXIT.auth;
    if (err.status === 404) return EXIT.notFound;
    if (err.status === 409 || err.status === 423) return EXIT.conflict;
    if (err.status === 422) return EXIT.verification; // dzsha256 refused by the server
    return EXIT.failure;
  }
  if (err instanceof VerificationError) return EXIT.verification;
  if (err instanceof NetworkError || err instanceof TlsError || err instanceof ProxyError)
    return EXIT.network;
  if (err instanceof UsageError || err instanceof ClientInputError) return EXIT.usage;
  if (err instanceof ConfigDamagedError) return EXIT.usage; // the user's own file needs fixing
  if (err instanceof AuthError) return EXIT.auth;
  if (err instanceof InterruptedError) return EXIT.interrupted;
  // Ctrl-C stopped a transfer (what was sent is kept, and the line says how to go on)
  if ((err as { name?: string } | null)?.name === 'AbortError') return EXIT.interrupted;
  if (err instanceof CommanderError) return err.exitCode === 0 ? EXIT.ok : EXIT.usage;
  if (err instanceof FileExistsError) return EXIT.failure;
  if (err instanceof PartBusyError) return EXIT.conflict; // another fshare holds NAME.part
  if (err instanceof NoArtifactError || err instanceof NotFoundError) return EXIT.notFound;
  return EXIT.failure;
}

let outputIsLog = false;

/**
 * For `serve`: its standard output is a log, like its standard error, and failing to write it
 * (a full disk, a reader that went away) never stops the server.
 */
export function treatOutputAsLog(): void {
  outputIsLog = true;
}

let outputIsContent = false;

/**
 * For `get -o -`: standard output carries a share's bytes, so a reader that goes away before the
 * end (`| head -c 100`) cuts the download short, unverified: a failure, not a quiet success.
 */
export function treatOutputAsContent(): void {
  outputIsContent = true;
}

/** Whether standard output carries a download's bytes (see treatOutputAsContent). */
export function outputIsADownload(): boolean {
  return outputIsContent;
}

/** Whether a failure to write standard output ends the command (every command but `serve`). */
export function outputFailuresAreFatal(): boolean {
  return !outputIsLog;
}

/** Why the standard output could not be written, in words (no path: it has none). */
export function outputErrorText(err: unknown): string {
  const e = err as NodeJS.ErrnoException | null;
  const text = systemErrorText(e?.syscall ? { ...e, path: undefined, dest: undefined } : e);
  return printable(text ?? (err instanceof Error ? err.message : String(err)));
}

let envTokenSent = false;

/**
 * The command sends the token in FSHARE_TOKEN: a 401 is mended there, since the variable wins
 * over the token `fshare login` stores.
 */
export function sendingEnvToken(): void {
  envTokenSent = true;
}

/** What to do next, for errors where there is one obvious step. */
function nextStep(err: unknown): string | undefined {
  if (err instanceof ApiError && err.status === 401 && err.hint !== null)
    return (
      err.hint ??
      (envTokenSent
        ? 'it came from FSHARE_TOKEN, which fshare login does not change: set the variable to a valid token, or unset it'
        : 'run `fshare login` (or set FSHARE_TOKEN)')
    );
  return undefined;
}

/**
 * The wait a 429 or 5xx's `Retry-After` asks for, when the message does not say it already (the
 * sign-in throttle's does): a command that gave up on it, or was never retried, says when to
 * come back.
 */
function askedWait(err: unknown, line: string): string | undefined {
  if (!(err instanceof ApiError) || (err.status !== 429 && err.status < 500)) return undefined;
  const ms = retryAfterMs(err.headers);
  if (!ms) return undefined;
  const wait = `${Math.ceil(ms / 1000)} s`;
  return line.includes(wait) ? undefined : `the server asks to wait ${wait}`;
}

/** `--debug` lines: what the command does on the way (a retry and its wait), tokens hidden. */
export function debugLine(line: string): void {
  process.stderr.write(`fshare: debug: ${printable(withoutTokens(line))}\n`);
}

/** The one line CLI.md asks for: `fshare: <the server's message> (HTTP 403)`. */
export function errorLine(err: unknown): string {
  const message = systemErrorText(err) ?? (err instanceof Error ? err.message : String(err));
  let oneLine =
    printable(
      withoutTokens(message)
        .replace(/\s*[\r\n]+\s*/g, ' ')
        .trim(),
    ) || 'failed';
  if (err instanceof ApiError) oneLine += ` (HTTP ${err.status})`;
  const step = nextStep(err) ?? askedWait(err, oneLine);
  return step ? `fshare: ${oneLine}; ${step}` : `fshare: ${oneLine}`;
}

/** `--debug` or FSHARE_DEBUG=1: errors show what lies under them, with their stacks. */
export function debugEnabled(): boolean {
  return process.env.FSHARE_DEBUG === '1' || process.argv.includes('--debug');
}

/** Prints the error line on stderr (and, when debugging, the error itself) and returns the exit code. */
export function reportError(err: unknown): number {
  process.stderr.write(`${errorLine(err)}\n`);
  if (debugEnabled()) process.stderr.write(`${debugText(err)}\n`);
  return exitCodeFor(err);
}

/** The error and every cause under it, with stacks. */
export function debugText(err: unknown): string {
  const parts: string[] = [];
  for (let e: unknown = err, depth = 0; e !== undefined && depth < 8; depth++) {
    parts.push(e instanceof Error ? (e.stack ?? `${e.name}: ${e.message}`) : String(e));
    e = e instanceof Error ? e.cause : undefined;
    if (e !== undefined) parts.push('caused by:');
  }
  return withoutTokens(parts.join('\n'));
}

/**
 * A one-line warning on stderr (never stdout, which belongs to the command's output). Names in
 * it (a user name a server sent, a path) are made printable, as on stdout.
 */
export function warn(line: string): void {
  const text = printable(withoutTokens(line));
  process.stderr.write(text.startsWith('fshare:') ? `${text}\n` : `fshare: ${text}\n`);
}

/** Control characters from the server (names) shown as "?", so they cannot drive the terminal. */
export function printable(text: string): string {
  return text.replace(UNSAFE_CHARACTERS, '?');
}

/**
 * A token fshare sent is never part of what it prints (`[token]` instead), on stdout as in errors:
 * a server may put it into a name (a share's, a user's) that `ls` would hand to a CI log.
 * `fshare token` prints one on purpose: `secret` is for that alone.
 */
export type Printed = 'secret' | undefined;

/** The single JSON document of `--json`; tokens fshare sent, in keys or values, show as [token]. */
export function printJson(value: unknown, printed?: Printed): void {
  const hide = (_key: string, v: unknown): unknown => {
    if (printed === 'secret') return v;
    if (typeof v === 'string') return withoutTokens(v);
    if (typeof v === 'object' && v !== null && !Array.isArray(v))
      return Object.fromEntries(Object.entries(v).map(([k, x]) => [withoutTokens(k), x]));
    return v;
  };
  process.stdout.write(`${JSON.stringify(value, hide, 2)}\n`);
}

/** One human line on stdout; names from the server inside it are made printable, tokens hidden. */
export function printLine(line = '', printed?: Printed): void {
  writeLine(printable(printed === 'secret' ? line : withoutTokens(line)));
}

function writeLine(line: string): void {
  process.stdout.write(`${line}\n`);
}

/**
 * A table: aligned with a header on a terminal; tab-separated without a header when piped,
 * so `cut -f1` works (the way gh prints lists).
 */
export function printTable(columns: string[], rows: string[][], tty = process.stdout.isTTY): void {
  // Before measuring, and so a tab stays a separator.
  rows = rows.map((row) => row.map((cell) => printable(withoutTokens(cell))));
  if (!tty) {
    for (const row of rows) writeLine(row.join('\t'));
    return;
  }
  const widths = columns.map((c, i) => Math.max(c.length, ...rows.map((r) => (r[i] ?? '').length)));
  const format = (cells: string[]) =>
    cells
      .map((cell, i) => (i === cells.length - 1 ? cell : cell.padEnd(widths[i]!)))
      .join('  ')
      .trimEnd();
  writeLine(format(columns));
  for (const row of rows) writeLine(format(row));
}

/** "key: value" lines with the values aligned, for one object's details. */
export function printDetails(pairs: [string, string][]): void {
  const width = Math.max(...pairs.map(([k]) => k.length)) + 1;
  for (const [key, value] of pairs) printLine(`${`${key}:`.padEnd(width)} ${value}`);
}

/** Adds an Examples section to a command's --help. */
export function examples(lines: string[]): string {
  return `\nExamples:\n${lines.map((l) => `  ${l}`).join('\n')}\n`;
}

/** Runs `task` for each item, reporting failures as they happen; returns the first exit code. */
export async function eachReporting<T>(
  items: T[],
  task: (item: T) => Promise<void>,
  label?: (item: T) => string,
): Promise<number> {
  let code = 0;
  for (const item of items) {
    try {
      await task(item);
    } catch (err) {
      // Of several, the line names which one failed (`fshare rm A B` said "No share with this
      // id (HTTP 404)" for either, alike: found from outside).
      if (label && items.length > 1 && err instanceof Error && !(err instanceof UsageError))
        err.message = `${printable(label(item))}: ${err.message}`;
      const c = reportError(err);
      code ||= c;
    }
  }
  return code;
}
