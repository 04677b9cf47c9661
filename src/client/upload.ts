import { randomUUID } from 'node:crypto';
import { openAsBlob } from 'node:fs';
import { stat } from 'node:fs/promises';
import { basename } from 'node:path';
import { FormData } from 'undici';
import { createFile, getFile, idFromUrl, lockFile } from './api.js';
import { ClientInputError } from './errors.js';
import { send, toApiError, type ApiClient } from './http.js';
import { createLimiter, type Limiter } from './limit.js';
import { sharePath, shareUrl } from './refs.js';

export const DEFAULT_CHUNK_SIZE = 8 * 1024 * 1024;
export const DEFAULT_PARALLEL = 4;

export interface ChunkOptions {
  /** Bytes per chunk; default 8 MiB. */
  chunkSize?: number;
  /** Chunk requests in flight at once; default 4. Ignored when `limiter` is given. */
  parallel?: number;
  /** Shares one concurrency budget between several uploads. */
  limiter?: Limiter;
  /** Called with the bytes confirmed by the server so far, after each chunk. */
  onProgress?: (sentBytes: number, totalBytes: number) => void;
  signal?: AbortSignal;
}

export interface ContentOptions extends ChunkOptions {
  /** POST for a share that has no content yet, PUT to replace existing content. */
  mode: 'create' | 'replace';
}

export interface ContentResult {
  size: number;
  chunks: number;
}

/** Size of a local regular file, with a clear error for a missing path or a directory. */
export async function localFileSize(path: string): Promise<number> {
  try {
    const info = await stat(path);
    if (!info.isFile()) throw new ClientInputError(`not a regular file: ${path}`);
    return info.size;
  } catch (err) {
    if (err instanceof ClientInputError) throw err;
    const code = (err as { code?: string }).code;
    if (code === 'ENOENT') throw new ClientInputError(`no such file: ${path}`);
    if (code === 'EACCES') throw new ClientInputError(`permission denied: ${path}`);
    throw err;
  }
}

/**
 * Uploads a local file as the content of share `id` with the dz* chunk protocol.
 * Chunks are Blob slices of the file on disk, so memory stays flat whatever the size.
 */
export async function uploadContent(
  client: ApiClient,
  id: string,
  path: string,
  options: ContentOptions,
): Promise<ContentResult> {
  const chunkSize = options.chunkSize ?? DEFAULT_CHUNK_SIZE;
  if (!Number.isSafeInteger(chunkSize) || chunkSize < 1)
    throw new ClientInputError(`chunk size must be a positive number of bytes`);
  const size = await localFileSize(path);
  const blob = await openAsBlob(path);
  const total = Math.max(1, Math.ceil(size / chunkSize));
  const uploadId = randomUUID();
  const method = options.mode === 'create' ? 'POST' : 'PUT';
  const limit = options.limiter ?? createLimiter(options.parallel ?? DEFAULT_PARALLEL);
  const partName = basename(path) || 'upload';
  const abort = new AbortController();
  const onOuterAbort = () => abort.abort(options.signal?.reason);
  options.signal?.addEventListener('abort', onOuterAbort, { once: true });

  let sent = 0;
  let completed = false;
  options.onProgress?.(0, size);

  const sendChunk = async (index: number): Promise<void> => {
    const start = index * chunkSize;
    const end = Math.min(size, start + chunkSize);
    const res = await send(client, {
      method,
      path: `${sharePath(id)}/content`,
      body: () => {
        const form = new FormData();
        form.append('dzuuid', uploadId);
        form.append('dzchunkindex', String(index));
        form.append('dztotalchunks', String(total));
        // Dropzone's layout fields, before the data: fshare serve writes the chunk in place.
        form.append('dzchunkbyteoffset', String(start));
        form.append('dzchunksize', String(chunkSize));
        form.append('dztotalfilesize', String(size));
        form.append('upload', blob.slice(start, end), partName);
        return form;
      },
      idempotent: true, // the protocol replaces a re-sent index
      retryServerErrors: true,
      signal: abort.signal,
    });
    if (res.statusCode >= 400) throw await toApiError(res);
    await res.body.dump();
    if (res.statusCode === 201) completed = true;
    sent += end - start;
    options.onProgress?.(sent, size);
  };

  const tasks: Promise<void>[] = [];
  for (let index = 0; index < total; index++) {
    tasks.push(
      limit(async () => {
        if (abort.signal.aborted) return;
        try {
          await sendChunk(index);
        } catch (err) {
          abort.abort(err); // fail fast: no point sending the rest
          throw err;
        }
      }),
    );
  }
  const results = await Promise.allSettled(tasks);
  options.signal?.removeEventListener('abort', onOuterAbort);
  const failure = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
  if (failure) throw abort.signal.reason ?? failure.reason;

  // The 201 can be lost when a completing chunk's answer is cut and the chunk is re-sent.
  if (!completed) {
    const share = await getFile(client, id);
    if (
      !share.initialized ||
      (share.size !== null && share.size !== undefined && share.size !== size)
    )
      throw new Error(`the server did not confirm the upload of ${path}`);
  }
  return { size, chunks: total };
}

export interface UploadFileOptions extends ChunkOptions {
  /** Share name; defaults to the file's base name. */
  name?: string;
  /** Lock the share once its content is complete. */
  lock?: boolean;
}

/** What `fshare upload --json` prints per file. */
export interface UploadedShare {
  share_id: string;
  url: string;
  file_name: string;
  size: number;
}

/** Creates a share for a local file and uploads its content (and locks it if asked). */
export async function uploadFile(
  client: ApiClient,
  path: string,
  options: UploadFileOptions = {},
): Promise<UploadedShare> {
  await localFileSize(path); // fail before creating an empty share
  const fileName = options.name ?? basename(path);
  const created = await createFile(client, fileName);
  const id = idFromUrl(created.url);
  const { size } = await uploadContent(client, id, path, { ...options, mode: 'create' });
  if (options.lock) await lockFile(client, id);
  return { share_id: id, url: shareUrl(client.server, id), file_name: fileName, size };
}

/** Replaces the content of an existing share with a local file (PUT content). */
export async function replaceFile(
  client: ApiClient,
  id: string,
  path: string,
  options: ChunkOptions = {},
): Promise<UploadedShare> {
  const { size } = await uploadContent(client, id, path, { ...options, mode: 'replace' });
  const share = await getFile(client, id).catch(() => undefined);
  return {
    share_id: id,
    url: shareUrl(client.server, id),
    file_name: share?.file_name ?? basename(path),
    size,
  };
}
