import { open, unlink } from 'node:fs/promises';
import { pipeline } from 'node:stream/promises';
import contentDisposition from 'content-disposition';
import { Router, type Request, type Response } from 'express';
import mime from 'mime-types';
import multer from 'multer';
import type { Context } from '../context.js';
import { Errors, HttpError } from '../errors.js';
import { route } from '../http.js';
import { KeyedMutex } from '../mutex.js';
import { parseRange } from '../ranges.js';
import { LayoutError, TotalMismatchError } from '../storage.js';
import type { ShareRecord } from '../store.js';
import { findShare } from './shares.js';

const MAX_TOTAL_CHUNKS = 1_000_000;

interface Chunk {
  uploadId: string;
  index: number;
  total: number;
  /** A chunk received as a file of its own, in incoming/ … */
  file?: string;
  /** … or one already written in place in the upload's data file. */
  placed?: { offset: number; length: number };
}

/** The dz* form fields of API.md's chunk protocol; a 400 naming the first that is wrong. */
function chunkFields(fields: Record<string, unknown>) {
  const int = (name: string): number => {
    const value = fields[name];
    if (typeof value !== 'string' || !/^\d{1,9}$/.test(value.trim())) {
      throw Errors.badRequest(`Form field "${name}" must be a non-negative integer`);
    }
    return Number(value.trim());
  };
  const uploadId = fields.dzuuid;
  if (typeof uploadId !== 'string' || uploadId.length === 0 || uploadId.length > 1024) {
    throw Errors.badRequest('Form field "dzuuid" must be a non-empty string');
  }
  const total = int('dztotalchunks');
  const index = int('dzchunkindex');
  if (total < 1 || total > MAX_TOTAL_CHUNKS) {
    throw Errors.badRequest(`"dztotalchunks" must be between 1 and ${MAX_TOTAL_CHUNKS}`);
  }
  if (index >= total)
    throw Errors.badRequest(`"dzchunkindex" must be below dztotalchunks (${total})`);
  return { uploadId, index, total };
}

function fieldsOrNull(fields: Record<string, unknown>): ReturnType<typeof chunkFields> | null {
  try {
    return chunkFields(fields);
  } catch {
    return null;
  }
}

/** API.md "Content and the chunk protocol". Reading order: here → storage.ts → store.ts. */
export function contentRoutes(
  { store, storage, maxChunkBytes }: Context,
  shareLocks: KeyedMutex,
): Router {
  const router = Router();
  const uploadLocks = new KeyedMutex();

  // Chunks without an offset stream to incoming/ under server-made names (never the client's).
  const loose = multer.diskStorage({ destination: storage.incomingDir });
  const targets = new WeakMap<Request, string>();

  /**
   * A chunk whose fields come before its data and name its byte offset (Dropzone's
   * `dzchunkbyteoffset`) is written straight to its place in the upload's data file, so the
   * upload needs no copy when it completes. Any other chunk takes the loose path.
   */
  const engine: multer.StorageEngine = {
    _handleFile(req, file, cb) {
      const shareId = targets.get(req);
      const fields = (req.body ?? {}) as Record<string, unknown>;
      const offset = fields.dzchunkbyteoffset;
      const chunk = shareId && fieldsOrNull(fields);
      if (!chunk || typeof offset !== 'string' || !/^\d{1,15}$/.test(offset)) {
        // Bad fields are reported after the body is read, in readChunk.
        loose._handleFile(req, file, cb);
        return;
      }
      const placedAt = Number(offset);
      storage.writePlaced(shareId, chunk.uploadId, placedAt, file.stream).then(
        (size) => cb(null, { size, placedAt } as Partial<Express.Multer.File>),
        (err: Error) => cb(err),
      );
    },
    _removeFile(req, file, cb) {
      // Unrecorded bytes in the data file are harmless: overwritten or cut off at assembly.
      if (file.path) loose._removeFile(req, file, cb);
      else cb(null);
    },
  };

  const receive = multer({
    storage: engine,
    limits: { fileSize: maxChunkBytes, files: 1, fields: 16, fieldSize: 4096, parts: 20 },
  }).single('upload');

  const readChunk = async (req: Request, res: Response, shareId: string): Promise<Chunk> => {
    targets.set(req, shareId);
    await new Promise<void>((resolve, reject) =>
      receive(req, res, (err) => (err ? reject(err) : resolve())),
    );
    const file = req.file?.path;
    const placedAt = (req.file as { placedAt?: number } | undefined)?.placedAt;
    try {
      const { uploadId, index, total } = chunkFields((req.body ?? {}) as Record<string, unknown>);
      if (placedAt !== undefined) {
        return { uploadId, index, total, placed: { offset: placedAt, length: req.file!.size } };
      }
      if (!file) throw Errors.badRequest('The file part "upload" is missing');
      return { uploadId, index, total, file };
    } catch (err) {
      if (file) await unlink(file).catch(() => undefined);
      throw err;
    }
  };

  /**
   * Files one chunk; the request that completes the upload joins it and replaces the content.
   * `stillAllowed` repeats the state check at the moment of replacement.
   */
  const acceptChunk = async (
    req: Request,
    res: Response,
    share: ShareRecord,
    stillAllowed: (s: ShareRecord) => void,
  ) => {
    const chunk = await readChunk(req, res, share.share_id);
    const { uploadId, index, total, file, placed } = chunk;
    const key = `${share.share_id}\0${uploadId}`;
    const done = await uploadLocks.run(key, async () => {
      let received: number;
      try {
        // The share may have been deleted while the body streamed in.
        if (!store.getShare(share.share_id)) throw Errors.shareNotFound();
        received = placed
          ? await storage.placeChunk(
              share.share_id,
              uploadId,
              index,
              total,
              placed.offset,
              placed.length,
            )
          : await storage.putChunk(share.share_id, uploadId, index, total, file!);
      } catch (err) {
        if (file) await unlink(file).catch(() => undefined);
        if (err instanceof TotalMismatchError) throw Errors.badRequest(err.message);
        throw err;
      }
      if (received < total) return false;
      await shareLocks.run(share.share_id, async () => {
        const current = store.getShare(share.share_id);
        if (!current) throw Errors.shareNotFound();
        stillAllowed(current);
        try {
          const { size } = await storage.assemble(share.share_id, uploadId, total);
          await store.updateShare(share.share_id, { initialized: true, size });
        } catch (err) {
          if (err instanceof LayoutError) throw Errors.badRequest(err.message);
          throw err;
        }
      });
      return true;
    });
    if (done) {
      res
        .status(201)
        .json({ status: 'success', message: `Upload complete (${chunk.total} chunks)` });
    } else {
      res.json({
        status: 'success',
        message: `Chunk ${chunk.index + 1} of ${chunk.total} received`,
      });
    }
  };

  const checkCreate = (s: ShareRecord) => {
    if (s.locked) throw Errors.locked();
    if (s.initialized) throw Errors.alreadyInitialized();
  };
  const checkReplace = (s: ShareRecord) => {
    if (s.locked) throw Errors.locked();
    if (!s.initialized) throw Errors.notInitialized();
  };

  route(router, '/files/:id/content', {
    post: async (req, res) => {
      const share = findShare(req, store, 'CREATE', true);
      checkCreate(share);
      await acceptChunk(req, res, share, checkCreate);
    },
    put: async (req, res) => {
      const share = findShare(req, store, 'MODIFY', true);
      checkReplace(share);
      await acceptChunk(req, res, share, checkReplace);
    },
    get: async (req, res) => {
      const share = findShare(req, store, 'READ');
      if (!share.initialized) throw Errors.noContent();
      await sendContent(req, res, share, storage.contentPath(share.share_id));
    },
  });

  return router;
}

/** Streams content with validators and one optional byte range (RFC 9110). */
async function sendContent(req: Request, res: Response, share: ShareRecord, path: string) {
  // Open first: a concurrent replacement renames over the path, and this handle keeps the old bytes.
  const handle = await open(path, 'r').catch(() => {
    throw Errors.noContent();
  });
  let streaming = false;
  try {
    const info = await handle.stat();
    const size = info.size;
    const etag = `"${info.ino.toString(36)}-${size.toString(36)}-${Math.floor(info.mtimeMs).toString(36)}"`;
    const lastModified = new Date(Math.floor(info.mtimeMs / 1000) * 1000);
    res.set({
      'Accept-Ranges': 'bytes',
      ETag: etag,
      'Last-Modified': lastModified.toUTCString(),
      'Content-Type': mime.lookup(share.file_name) || 'application/octet-stream',
      'Content-Disposition': contentDisposition(share.file_name, { type: 'attachment' }),
      'X-Content-Type-Options': 'nosniff',
      'Cache-Control': 'private, no-cache',
    });

    if (matchesEtag(req.headers['if-none-match'], etag)) {
      res.status(304).end();
      return;
    }
    let range = parseRange(req.headers.range, size);
    const ifRange = req.get('if-range');
    if (
      range.kind !== 'none' &&
      ifRange !== undefined &&
      !ifRangeHolds(ifRange, etag, lastModified)
    ) {
      range = { kind: 'none' };
    }
    if (range.kind === 'unsatisfiable') {
      throw new HttpError(416, `The range cannot be satisfied: the content has ${size} bytes`, {
        'Content-Range': `bytes */${size}`,
      });
    }
    let start = 0;
    let end = size - 1;
    if (range.kind === 'range') {
      ({ start, end } = range);
      res.status(206).set('Content-Range', `bytes ${start}-${end}/${size}`);
    }
    res.set('Content-Length', String(end - start + 1));
    if (req.method === 'HEAD' || end < start) {
      res.end();
      return;
    }
    streaming = true;
    try {
      // The stream owns the handle from here and closes it, also when the client goes away.
      await pipeline(handle.createReadStream({ start, end }), res);
    } catch {
      // The client went away mid-download: nothing to answer, nothing stored is affected.
      res.destroy();
    }
  } finally {
    if (!streaming) await handle.close();
  }
}

function matchesEtag(header: string | undefined, etag: string): boolean {
  if (!header) return false;
  if (header.trim() === '*') return true;
  return header.split(',').some((t) => t.trim().replace(/^W\//, '') === etag);
}

/** If-Range: a strong ETag must match exactly; a date must equal Last-Modified. */
function ifRangeHolds(header: string, etag: string, lastModified: Date): boolean {
  const value = header.trim();
  if (value.startsWith('"') || value.startsWith('W/')) return value === etag;
  const date = Date.parse(value);
  return !Number.isNaN(date) && date === lastModified.getTime();
}
