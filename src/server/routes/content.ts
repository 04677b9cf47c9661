import contentDisposition from 'content-disposition';
import { Router, type Request, type Response } from 'express';
import mime from 'mime-types';
import multer from 'multer';
import type { Context } from '../context.js';
import { Errors, HttpError } from '../errors.js';
import { route } from '../http.js';
import { parseRange } from '../ranges.js';
import type { ChunkFields, ContentStorage, ReceivedChunk } from '../storage/index.js';
import { blobOf, type MetadataStore, type ShareRecord } from '../store/index.js';
import { checkOwner, findShare } from './shares.js';

const MAX_TOTAL_CHUNKS = 1_000_000;

/**
 * The chunk's form fields: API.md's dz* fields, plus Dropzone's layout fields and our dzsha256
 * (all additive, docs/API.md). A 400 names the first field that is wrong.
 */
export function chunkFields(fields: Record<string, unknown>): ChunkFields {
  const int = (name: string, optional = false): number | undefined => {
    const value = fields[name];
    if (value === undefined && optional) return undefined;
    // 15 digits: every byte offset of a file we could hold, and never past 2^53.
    if (typeof value !== 'string' || !/^\d{1,15}$/.test(value.trim())) {
      throw Errors.badRequest(`Form field "${name}" must be a non-negative integer`);
    }
    return Number(value.trim());
  };
  const uploadId = fields.dzuuid;
  if (typeof uploadId !== 'string' || uploadId.length === 0 || uploadId.length > 1024) {
    throw Errors.badRequest('Form field "dzuuid" must be a non-empty string');
  }
  const total = int('dztotalchunks')!;
  const index = int('dzchunkindex')!;
  if (total < 1 || total > MAX_TOTAL_CHUNKS) {
    throw Errors.badRequest(`"dztotalchunks" must be between 1 and ${MAX_TOTAL_CHUNKS}`);
  }
  if (index >= total)
    throw Errors.badRequest(`"dzchunkindex" must be below dztotalchunks (${total})`);
  const chunk: ChunkFields = { uploadId, index, total };
  chunk.offset = int('dzchunkbyteoffset', true);
  const chunkSize = int('dzchunksize', true);
  const fileSize = int('dztotalfilesize', true);
  if (chunkSize !== undefined && fileSize !== undefined) {
    if (chunkSize < 1 || Math.max(1, Math.ceil(fileSize / chunkSize)) !== total)
      throw Errors.badRequest(
        `dzchunksize ${chunkSize} and dztotalfilesize ${fileSize} do not make ${total} chunks`,
      );
    chunk.layout = { chunkSize, fileSize };
  }
  const sha = fields.dzsha256;
  if (sha !== undefined) {
    if (typeof sha !== 'string' || !/^[0-9a-f]{64}$/i.test(sha.trim()))
      throw Errors.badRequest('Form field "dzsha256" must be 64 hexadecimal digits');
    chunk.sha256 = sha.trim().toLowerCase();
  }
  return chunk;
}

function fieldsOrNull(fields: Record<string, unknown>): ChunkFields | null {
  try {
    return chunkFields(fields);
  } catch {
    return null;
  }
}

interface WithReceived {
  received?: ReceivedChunk;
}

/** API.md "Content and the chunk protocol". Reading order: here → storage/ → store/. */
export function contentRoutes({ store, storage, maxChunkBytes }: Context): Router {
  const router = Router();
  const targets = new WeakMap<Request, string>();

  /**
   * Hands the file part to the storage as it streams in. When the fields came first, it knows
   * the chunk's upload and place (and can write a placed chunk straight where it belongs);
   * otherwise the bytes wait in a file of their own until the fields are known.
   */
  const engine: multer.StorageEngine = {
    _handleFile(req, file, cb) {
      const shareId = targets.get(req)!;
      const fields = fieldsOrNull((req.body ?? {}) as Record<string, unknown>);
      // One byte over the limit is enough to know it is too large (multer then answers 413).
      storage.receive(shareId, fields, file.stream, maxChunkBytes + 1).then(
        (received) => cb(null, { size: received.bytes, received } as Partial<Express.Multer.File>),
        (err: Error) => cb(err),
      );
    },
    _removeFile(_req, file, cb) {
      const { received } = file as WithReceived;
      if (!received) return cb(null);
      storage.discard(received).then(() => cb(null), cb);
    },
  };

  const receive = multer({
    storage: engine,
    limits: { fileSize: maxChunkBytes, files: 1, fields: 16, fieldSize: 4096, parts: 20 },
  }).single('upload');

  const readChunk = async (req: Request, res: Response, shareId: string) => {
    targets.set(req, shareId);
    await new Promise<void>((resolve, reject) =>
      receive(req, res, (err) => (err ? reject(err) : resolve())),
    );
    const received = (req.file as WithReceived | undefined)?.received;
    try {
      const fields = chunkFields((req.body ?? {}) as Record<string, unknown>);
      if (!received) throw Errors.badRequest('The file part "upload" is missing');
      return { fields, received };
    } catch (err) {
      if (received) await storage.discard(received);
      throw err;
    }
  };

  /**
   * Files one chunk; the request that completes the upload publishes the new content.
   * `allowed` repeats the state checks at the moment of publishing, under the share's lock.
   */
  const acceptChunk = async (
    req: Request,
    res: Response,
    share: ShareRecord,
    allowed: (s: ShareRecord) => void,
  ) => {
    const declared = Number(req.headers['content-length']);
    const release = await storage.reserve(
      Number.isSafeInteger(declared) && declared > 0 ? declared : maxChunkBytes,
    );
    let outcome: 'stored' | 'complete';
    let fields: ChunkFields;
    try {
      const chunk = await readChunk(req, res, share.share_id);
      fields = chunk.fields;
      try {
        // The share may have been deleted while the body streamed in.
        if (!(await store.getShare(share.share_id))) throw Errors.shareNotFound();
        outcome = await storage.commit(share.share_id, fields, chunk.received, (content) =>
          store.withShareLock(share.share_id, async () => {
            const current = await store.getShare(share.share_id);
            if (!current) throw Errors.shareNotFound();
            checkOwner(req, current);
            allowed(current);
            // Read before the update, which changes the record in place.
            const replaced = current.initialized ? blobOf(current) : undefined;
            await store.updateShare(share.share_id, {
              initialized: true,
              size: content.size,
              sha256: content.sha256 || null,
              blob: content.blob,
            });
            return replaced;
          }),
        );
      } finally {
        await storage.discard(chunk.received);
      }
    } finally {
      release();
    }
    if (outcome === 'complete') {
      res
        .status(201)
        .json({ status: 'success', message: `Upload complete (${fields.total} chunks)` });
    } else {
      res.json({
        status: 'success',
        message: `Chunk ${fields.index + 1} of ${fields.total} received`,
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
      const share = await findShare(req, store, 'CREATE', true);
      checkCreate(share);
      await acceptChunk(req, res, share, checkCreate);
    },
    put: async (req, res) => {
      const share = await findShare(req, store, 'MODIFY', true);
      checkReplace(share);
      await acceptChunk(req, res, share, checkReplace);
    },
    get: async (req, res) => {
      const share = await findShare(req, store, 'READ');
      if (!share.initialized) throw Errors.noContent();
      await sendContent(req, res, share, storage, store);
    },
  });

  return router;
}

/** The strong validator of content: its sha256 when known, else one from the file itself. */
function etagOf(share: ShareRecord, size: number, mtimeMs: number): string {
  if (share.sha256) return `"${share.sha256}"`;
  return `"${size.toString(36)}-${Math.floor(mtimeMs).toString(36)}"`;
}

/** Streams content with validators, its digest, and one optional byte range (RFC 9110). */
async function sendContent(
  req: Request,
  res: Response,
  found: ShareRecord,
  storage: ContentStorage,
  store: MetadataStore,
) {
  // The record names the content and its digest together; if that content was replaced between
  // reading the record and opening it, the record is read again (old bytes or new, never a mix).
  let share = found;
  let reader = await storage.open(blobOf(share));
  if (!reader) {
    const again = await store.getShare(share.share_id);
    if (again?.initialized) {
      share = again;
      reader = await storage.open(blobOf(share));
    }
  }
  if (!reader) throw Errors.noContent();
  let streaming = false;
  try {
    const { size } = reader;
    const etag = etagOf(share, size, reader.mtimeMs);
    const lastModified = new Date(Math.floor(reader.mtimeMs / 1000) * 1000);
    res.set({
      'Accept-Ranges': 'bytes',
      ETag: etag,
      'Last-Modified': lastModified.toUTCString(),
      'Content-Type': mime.lookup(share.file_name) || 'application/octet-stream',
      'Content-Disposition': contentDisposition(share.file_name, { type: 'attachment' }),
      'X-Content-Type-Options': 'nosniff',
      'Cache-Control': 'private, no-cache',
    });
    // RFC 9530: the digest of the whole representation, also on a 206.
    if (share.sha256)
      res.set('Repr-Digest', `sha-256=:${Buffer.from(share.sha256, 'hex').toString('base64')}:`);

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
    const body = reader.stream(start, end);
    body.on('error', () => res.destroy());
    res.on('close', () => body.destroy());
    body.pipe(res);
  } finally {
    if (!streaming) await reader.close();
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
