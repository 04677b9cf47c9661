import { createWriteStream } from 'node:fs';
import { rename, stat } from 'node:fs/promises';
import { once } from 'node:events';
import { join } from 'node:path';
import type { Writable } from 'node:stream';
import { finished } from 'node:stream/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Dispatcher } from 'undici';
import { getFile } from './api.js';
import {
  ApiError,
  ClientInputError,
  NetworkError,
  describeTransportError,
  isTransportError,
} from './errors.js';
import { filenameFromDisposition, sanitizeFileName } from './filename.js';
import { backoffDelay, send, toApiError, type ApiClient } from './http.js';
import { sharePath } from './refs.js';

const WRITE_BUFFER = 1024 * 1024;

/** `A-B` (inclusive), `A-` (from A to the end) or `-N` (the last N bytes). */
export type ByteRange = { start: number; end?: number } | { suffix: number };

export function parseByteRange(text: string): ByteRange {
  const match = /^\s*(\d*)\s*-\s*(\d*)\s*$/.exec(text);
  const bad = () => new ClientInputError(`not a byte range (A-B, A- or -N): ${text}`);
  if (!match || (match[1] === '' && match[2] === '')) throw bad();
  if (match[1] === '') {
    const suffix = Number(match[2]);
    if (!Number.isSafeInteger(suffix) || suffix < 1) throw bad();
    return { suffix };
  }
  const start = Number(match[1]);
  const end = match[2] === '' ? undefined : Number(match[2]);
  if (
    !Number.isSafeInteger(start) ||
    (end !== undefined && !(Number.isSafeInteger(end) && end >= start))
  )
    throw bad();
  return end === undefined ? { start } : { start, end };
}

/** Remembers the ETag a `.part` file was started with, so a resume can send it in If-Range. */
export interface ValidatorStore {
  get(partPath: string): Promise<string | undefined> | string | undefined;
  /** `undefined` forgets the entry (the download finished). */
  set(partPath: string, etag: string | undefined): Promise<void> | void;
}

export interface DownloadStart {
  /** Final path, or null when writing to a stream. */
  path: string | null;
  /** Bytes already present before this response (a resumed `.part`). */
  offset: number;
  /** Bytes the finished download will hold, when the server said. */
  totalBytes: number | undefined;
}

export interface DownloadOptions {
  /** A file path, an existing directory (name from the server), or "-" for `stdout`. */
  output?: string;
  /** Where "-" writes; default process.stdout. */
  stdout?: Writable;
  /** Directory for a name taken from Content-Disposition; default the current directory. */
  directory?: string;
  range?: ByteRange;
  /** Resume `NAME.part` with Range + If-Range. */
  resume?: boolean;
  /** Allow replacing an existing file whose name came from the server. */
  overwrite?: boolean;
  validators?: ValidatorStore;
  onStart?: (info: DownloadStart) => void;
  onProgress?: (receivedBytes: number, totalBytes: number | undefined) => void;
  /** Told why a partial download was discarded. */
  onRestart?: (reason: string) => void;
  signal?: AbortSignal;
}

export interface DownloadResult {
  path: string | null;
  /** Bytes in the finished file (or written to the stream). */
  bytes: number;
  /** Bytes that were already in the `.part` and not downloaded again. */
  resumedFrom: number;
}

/** The file exists and its name came from the server: we never overwrite it silently. */
export class FileExistsError extends Error {
  override readonly name = 'FileExistsError';
}

type Headers = Dispatcher.ResponseData['headers'];

function header(headers: Headers, name: string): string | undefined {
  const value = headers[name];
  return Array.isArray(value) ? value[0] : value;
}

function contentLength(headers: Headers): number | undefined {
  const text = header(headers, 'content-length');
  return text !== undefined && /^\d+$/.test(text) ? Number(text) : undefined;
}

function contentRange(headers: Headers): { start: number; end: number; size?: number } | undefined {
  const match = /^bytes (\d+)-(\d+)\/(\d+|\*)$/.exec(header(headers, 'content-range') ?? '');
  if (!match) return undefined;
  return {
    start: Number(match[1]),
    end: Number(match[2]),
    size: match[3] === '*' ? undefined : Number(match[3]),
  };
}

async function sizeOf(path: string): Promise<number | undefined> {
  try {
    return (await stat(path)).size;
  } catch {
    return undefined;
  }
}

async function isDirectory(path: string): Promise<boolean> {
  try {
    return (await stat(path)).isDirectory();
  } catch {
    return false;
  }
}

/** The safe local name for a response: Content-Disposition's name, else the share id. */
export function defaultFileName(headers: Headers, id: string): string {
  return sanitizeFileName(filenameFromDisposition(header(headers, 'content-disposition'))) ?? id;
}

/** An error for a failed HEAD (which has no body): ask GET /files/<id> for the server's words. */
async function headFailure(client: ApiClient, id: string, status: number): Promise<Error> {
  try {
    await getFile(client, id);
  } catch (err) {
    if (err instanceof ApiError) return err;
  }
  return new ApiError(status, status === 404 ? 'the share has no content yet' : `HTTP ${status}`);
}

/**
 * Downloads a share's content. Files are written to `NAME.part` and renamed once the byte count
 * matches what the server announced; a broken connection is resumed with Range + If-Range.
 */
export async function download(
  client: ApiClient,
  id: string,
  options: DownloadOptions = {},
): Promise<DownloadResult> {
  const toStream = options.output === '-';
  if (toStream && options.resume) throw new ClientInputError('--continue needs a file, not stdout');
  if (options.resume && options.range)
    throw new ClientInputError('--continue and --range cannot be combined');
  const path = `${sharePath(id)}/content`;

  let directory = options.directory ?? '.';
  let target: string | undefined;
  let nameFromServer = false;
  if (!toStream && options.output !== undefined) {
    if (/[/\\]$/.test(options.output) || (await isDirectory(options.output)))
      directory = options.output;
    else target = options.output;
  }

  let offset = 0; // bytes of the requested window already held
  let etag: string | undefined;
  let expected: number | undefined; // bytes the finished window holds
  let resumedFrom = 0;
  const restart = (reason: string) => {
    offset = 0;
    resumedFrom = 0;
    options.onRestart?.(reason);
  };

  if (options.resume) {
    const head = await send(client, {
      method: 'HEAD',
      path,
      idempotent: true,
      retryServerErrors: true,
    });
    await head.body.dump();
    if (head.statusCode >= 400) throw await headFailure(client, id, head.statusCode);
    if (target === undefined) {
      target = join(directory, defaultFileName(head.headers, id));
      nameFromServer = true;
    }
    const part = `${target}.part`;
    const have = (await sizeOf(part)) ?? 0;
    const headEtag = header(head.headers, 'etag');
    const stored = await options.validators?.get(part);
    const size = contentLength(head.headers);
    expected = size;
    etag = stored ?? headEtag;
    offset = have;
    resumedFrom = have;
    if (have > 0 && stored && headEtag && stored !== headEtag) {
      restart('the share changed since the partial download; starting over');
      etag = headEtag;
    } else if (size !== undefined && have > size) {
      restart('the partial file is larger than the share; starting over');
    } else if (size !== undefined && have === size && have > 0) {
      // Already complete: just finish the rename.
      await rename(part, target);
      await options.validators?.set(part, undefined);
      options.onStart?.({ path: target, offset: have, totalBytes: size });
      return { path: target, bytes: size, resumedFrom: have };
    }
  }

  /** A network failure that leaves data in the .part says how to pick it up again. */
  const resumeHint = async (err: unknown): Promise<unknown> => {
    const held = target === undefined ? 0 : ((await sizeOf(`${target}.part`)) ?? 0);
    if (err instanceof NetworkError && held > 0)
      err.message += `; ${held} bytes kept in ${target}.part, run again with --continue`;
    return err;
  };

  const range = options.range;
  let windowStart: number | undefined =
    range && 'start' in range ? range.start : range ? undefined : 0;
  const windowEnd = range && 'end' in range ? range.end : undefined;
  let started = false;
  let wroteFile = false;

  for (let attempt = 1; ; attempt++) {
    const headers: Record<string, string> = {};
    if (windowStart === undefined && range && 'suffix' in range)
      headers.range = `bytes=-${range.suffix}`;
    else if ((windowStart ?? 0) + offset > 0 || windowEnd !== undefined)
      headers.range = `bytes=${(windowStart ?? 0) + offset}-${windowEnd ?? ''}`;
    if (headers.range && offset > 0 && etag) headers['if-range'] = etag;

    const res = await send(client, {
      method: 'GET',
      path,
      headers,
      idempotent: true,
      retryServerErrors: true,
      signal: options.signal,
    }).catch(async (err: unknown) => {
      throw await resumeHint(err);
    });
    if (res.statusCode === 416 && options.resume && offset > 0 && !started) {
      await res.body.dump();
      restart('the partial file does not match the share; starting over');
      continue;
    }
    if (res.statusCode >= 400) throw await toApiError(res);

    if (res.statusCode === 206) {
      const cr = contentRange(res.headers);
      if (!cr) {
        await res.body.dump();
        throw new Error('the server sent a partial response without a valid Content-Range');
      }
      windowStart ??= cr.start;
      if (cr.start !== windowStart + offset) {
        await res.body.dump();
        throw new Error(`the server sent bytes from ${cr.start}, expected ${windowStart + offset}`);
      }
      expected = offset + (cr.end - cr.start + 1);
    } else {
      // 200: the whole content, because no range was asked or If-Range no longer matched.
      if (headers.range) {
        if (range || toStream) {
          await res.body.dump();
          throw new Error(
            offset > 0
              ? 'the share changed during the download'
              : 'the server ignored the byte range',
          );
        }
        restart('the share changed since the partial download; starting over');
      }
      windowStart = 0;
      const length = contentLength(res.headers);
      expected = length;
    }

    if (!toStream && target === undefined) {
      target = join(directory, defaultFileName(res.headers, id));
      nameFromServer = true;
    }
    if (
      !started &&
      target !== undefined &&
      nameFromServer &&
      !options.overwrite &&
      (await sizeOf(target)) !== undefined
    ) {
      await res.body.dump();
      throw new FileExistsError(
        `${target} already exists (choose another name with -o, or pass --clobber)`,
      );
    }
    const part = target === undefined ? undefined : `${target}.part`;
    const responseEtag = header(res.headers, 'etag');
    if (responseEtag) etag = responseEtag;
    // Remember the validator whenever the .part (re)starts, so a later --continue can check it.
    if (part && (!wroteFile || offset === 0)) await options.validators?.set(part, etag);
    if (!started) options.onStart?.({ path: target ?? null, offset, totalBytes: expected });
    started = true;

    const sink: Writable = part
      ? createWriteStream(part, {
          flags: offset > 0 ? 'r+' : 'w',
          start: offset,
          // Fewer, larger writes: the default 16 KiB made the disk writes the bottleneck.
          highWaterMark: WRITE_BUFFER,
        })
      : (options.stdout ?? process.stdout);
    wroteFile ||= part !== undefined;
    let sinkFailed = false;
    const onSinkError = () => {
      sinkFailed = true;
    };
    sink.on('error', onSinkError);
    let written = 0;
    try {
      for await (const data of res.body) {
        if (sink.errored) throw sink.errored;
        const bytes = data as Buffer;
        written += bytes.length;
        options.onProgress?.(offset + written, expected);
        // once() rejects if the sink fails while we wait for it to drain.
        if (!sink.write(bytes)) await once(sink, 'drain');
      }
      if (part) {
        sink.end();
        await finished(sink);
      }
      offset += written;
      sink.off('error', onSinkError);
      break;
    } catch (err) {
      sink.off('error', onSinkError);
      if (part) {
        // Keep every byte received before the cut: flush the .part rather than destroy it.
        if (sinkFailed) sink.destroy();
        else sink.end();
        await finished(sink).catch(() => undefined);
        offset = (await sizeOf(part)) ?? 0;
      } else offset += written;
      if (sinkFailed || !isTransportError(err)) throw err;
      if (attempt > client.retry.retries) {
        throw await resumeHint(
          new NetworkError(
            `download from ${client.server} broke off: ${describeTransportError(err)} (after ${attempt} attempts)`,
            attempt,
            { cause: err },
          ),
        );
      }
      await sleep(backoffDelay(client.retry, attempt), undefined, { signal: options.signal });
    }
  }

  if (target === undefined) return { path: null, bytes: offset, resumedFrom };
  const part = `${target}.part`;
  if (expected !== undefined && offset !== expected)
    throw new Error(
      `download incomplete: ${offset} of ${expected} bytes; run again with --continue`,
    );
  await rename(part, target);
  await options.validators?.set(part, undefined);
  return { path: target, bytes: offset, resumedFrom };
}
