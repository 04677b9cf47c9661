import type { Readable } from 'node:stream';
import contentDisposition from 'content-disposition';
import { Router, type Request, type Response } from 'express';
import mime from 'mime-types';
import multer from 'multer';
import type { Context } from '../context.js';
import { Errors, HttpError } from '../errors.js';
import { onBodyCut, sendContinue } from '../connections.js';
import { pausePoint } from '../faults.js';
import { endFormerUploads, unfinishedOf } from '../handover.js';
import { route } from '../http.js';
import { LIMITS } from '../limits.js';
import { parseRange } from '../ranges.js';
import { parseHttpDate } from '../dates.js';
import {
  DamagedContentError,
  MissingContentError,
  StorageUnavailableError,
  type ChunkFields,
  type ContentStorage,
  type ReceivedChunk,
} from '../storage/index.js';
import {
  blobOf,
  MissingRecordError,
  type MetadataStore,
  type ShareRecord,
} from '../store/index.js';
import { hasChars, isWellFormed, toWellFormed, UNSAFE_NAME_CHAR } from '../validate.js';
import { checkOwner, findShare } from './shares.js';
import { stillAllowed } from '../auth.js';
import { isExpired } from '../expiry.js';
import type { Permission } from '../../shared/permissions.js';

/**
 * The chunk's form fields: API.md's dz* fields, plus Dropzone's layout fields and our dzsha256
 * (all additive, docs/API.md). A 400 names the first field that is wrong.
 */
export function chunkFields(fields: Record<string, unknown>, maxChunks: number): ChunkFields {
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
  if (typeof uploadId !== 'string' || !hasChars(uploadId, LIMITS.maxUploadIdChars)) {
    throw Errors.badRequest(
      `Form field "dzuuid" must be a string of 1 to ${LIMITS.maxUploadIdChars} characters`,
    );
  }
  // A part may name its charset (UTF-16): a lone surrogate would be U+FFFD in the upload's key,
  // so that two different ids named one upload.
  if (!isWellFormed(uploadId))
    throw Errors.badRequest(
      'Form field "dzuuid" must be well-formed Unicode (it has a lone surrogate)',
    );
  // Dropzone names the count dztotalchunkcount: taken where dztotalchunks is absent (additive),
  // so a Dropzone page needs no mapping of its own.
  const total = int(
    fields.dztotalchunks === undefined && fields.dztotalchunkcount !== undefined
      ? 'dztotalchunkcount'
      : 'dztotalchunks',
  )!;
  if (fields.dztotalchunks !== undefined && fields.dztotalchunkcount !== undefined) {
    if (int('dztotalchunkcount') !== total)
      throw Errors.badRequest('"dztotalchunks" and "dztotalchunkcount" must be the same number');
  }
  const index = int('dzchunkindex')!;
  if (total < 1 || total > maxChunks) {
    throw Errors.badRequest(`"dztotalchunks" must be between 1 and ${maxChunks}`);
  }
  if (index >= total)
    throw Errors.badRequest(`"dzchunkindex" must be below dztotalchunks (${total})`);
  const chunk: ChunkFields = { uploadId, index, total };
  chunk.offset = int('dzchunkbyteoffset', true);
  const chunkSize = int('dzchunksize', true);
  const fileSize = int('dztotalfilesize', true);
  if (chunkSize !== undefined) {
    if (chunkSize < 1) throw Errors.badRequest('"dzchunksize" must be at least 1');
    chunk.chunkSize = chunkSize;
  }
  if (fileSize !== undefined) chunk.fileSize = fileSize;
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

/** What a multipart body may hold besides its file part (fields, part headers, boundaries). */
const MULTIPART_SLACK = 64 * 1024;

interface WithReceived {
  received?: ReceivedChunk;
}

/** API.md "Content and the chunk protocol". Reading order: here → storage/ → store/. */
export function contentRoutes(ctx: Context): Router {
  const { store, storage, limits } = ctx;
  const { maxChunkBytes } = limits;
  const router = Router();
  const targets = new WeakMap<Request, { shareId: string; max: number }>();
  /**
   * The storage's work for each body (receiving it, discarding it). multer can answer a
   * malformed body before that work is over (a file part cut short errors its stream, and multer
   * stops waiting for the engine): the answer waits for it, so that a 400 finds nothing left.
   */
  const storageWork = new WeakMap<Request, Promise<unknown>[]>();
  const track = (req: Request, work: Promise<unknown>) => {
    const all = storageWork.get(req) ?? [];
    all.push(work);
    storageWork.set(req, all);
  };
  const storageDone = async (req: Request) => {
    const all = storageWork.get(req) ?? [];
    // Settling one piece of work may start another (multer discarding a chunk it had taken).
    for (let seen = 0; seen < all.length;) {
      seen = all.length;
      await Promise.allSettled(all);
    }
  };
  /** Requests whose body could not arrive whole, answered by connections.ts. */
  const cut = new WeakSet<Request>();
  const fieldsOf = (req: Request) =>
    chunkFields((req.body ?? {}) as Record<string, unknown>, limits.maxChunksPerUpload);

  /**
   * Hands the file part to the storage as it streams in. When the fields came first, it knows
   * the chunk's upload and place (and can write a placed chunk straight where it belongs);
   * otherwise the bytes wait in a file of their own until the fields are known.
   */
  const engine: multer.StorageEngine = {
    _handleFile(req, file, cb) {
      const { shareId, max } = targets.get(req)!;
      let fields: ChunkFields | null = null;
      try {
        fields = fieldsOf(req);
      } catch {
        // Reported after the body is read, in readChunk.
      }
      const receiving = storage.receive(shareId, fields, file.stream, max);
      track(
        req,
        receiving.then(
          (received) =>
            cb(null, { size: received.bytes, received } as Partial<Express.Multer.File>),
          (err: Error) => cb(err),
        ),
      );
      // A body that stops arriving, is cut off or breaks HTTP gets its answer (connections.ts)
      // once its chunk is gone, and the chunk is never committed, even if the rest came after all.
      onBodyCut(req, async () => {
        cut.add(req);
        file.stream.destroy(new Error("The request's body was cut off"));
        await storageDone(req);
        const received = await receiving.catch(() => undefined);
        if (received) await storage.discard(received);
      });
    },
    _removeFile(req, file, cb) {
      const { received } = file as WithReceived;
      if (!received) return cb(null);
      track(
        req,
        storage.discard(received).then(() => cb(null), cb),
      );
    },
  };

  const receive = multer({
    storage: engine,
    limits: { fileSize: maxChunkBytes, files: 1, fields: 16, fieldSize: 4096, parts: 20 },
  }).single('upload');

  /** Reads the chunk's fields and bytes; `max` bytes are stored, the excess is left out. */
  const readChunk = async (req: Request, res: Response, shareId: string, max: number) => {
    // A body in an encoding the server does not decode would be stored as sent: refused before
    // a byte of it is read (RFC 9110 §15.5.16), as the JSON endpoints refuse one.
    const encodings = (req.get('content-encoding') ?? '')
      .split(',')
      .map((e) => e.trim().toLowerCase())
      .filter((e) => e !== '' && e !== 'identity');
    if (encodings.length > 0)
      throw new HttpError(
        415,
        `A chunk is sent without a Content-Encoding (this one is ${encodings.join(', ')}, which the server does not decode)`,
        { 'Accept-Encoding': 'identity' },
      );
    // multer passes any other body over silently, and the error would then name a missing field.
    if (!req.is('multipart/form-data'))
      throw Errors.badRequest(
        `A chunk is sent as multipart/form-data (fields dzuuid, dzchunkindex, dztotalchunks and the file part "upload"), not as ${req.get('content-type')?.split(';')[0]?.trim() || 'a body without a Content-Type'}`,
      );
    targets.set(req, { shareId, max });
    // Everything the headers tell has been checked: a client that waits for 100 Continue
    // (Expect: 100-continue) sends its body now, and one refused above never sent it.
    sendContinue(res);
    const refused = await new Promise<unknown>((resolve) => receive(req, res, resolve));
    await storageDone(req);
    if (cut.has(req))
      throw Errors.badRequest("The request's body did not arrive whole, and nothing was stored");
    if (refused) throw refused;
    // multer passes over, unread, a multipart type whose parameters it cannot parse (a trailing
    // ";", an empty boundary, an unclosed quote): the error would then name a missing field.
    if (req.body === undefined)
      throw Errors.badRequest(
        `The Content-Type of a chunk must be multipart/form-data with a boundary parameter; ${JSON.stringify(req.get('content-type')?.slice(0, 200))} cannot be read`,
      );
    const received = (req.file as WithReceived | undefined)?.received;
    try {
      const fields = fieldsOf(req);
      if (!received) throw Errors.badRequest('The file part "upload" is missing');
      return { fields, received };
    } catch (err) {
      if (received) await storage.discard(received);
      throw err;
    }
  };

  /**
   * The caller's storage quota (additive): bytes still free for them, counting their shares'
   * content and the chunks of their unfinished uploads (for a replacement, not the content it
   * replaces). Infinity for anonymous callers and users without a quota.
   */
  const quotaRoom = async (req: Request, share: ShareRecord, replacing: boolean) => {
    const owner = req.caller.userId ? await store.getUserById(req.caller.userId) : undefined;
    if (!owner || owner.quota === null) return { room: Infinity, owner: undefined };
    let used = await store.usageOf(owner.id);
    if (replacing) used -= share.size ?? 0;
    used += (await unfinishedOf(store, await storage.unfinished(), owner.id)).bytes;
    return { room: Math.max(0, owner.quota - used), owner };
  };

  const overQuota = (owner: { username: string; quota: number | null }, room: number) =>
    Errors.quotaExceeded(
      `This upload would exceed the storage quota of ${owner.username} (${owner.quota} bytes; ${room} bytes are left)`,
    );

  /** A chunk that starts a new upload: the share's and the user's unfinished uploads are bounded. */
  const checkNewUpload = async (
    req: Request,
    share: ShareRecord,
    fields: ChunkFields,
    quota: { room: number; owner: { username: string; quota: number | null } | undefined },
    received: number,
  ) => {
    if (await storage.isUnfinished(share.share_id, fields.uploadId)) return;
    // A file declared whole at its first chunk (dztotalfilesize) that cannot fit is refused now,
    // not after the client has sent what fits: past the owner's quota 413, past the disk 507.
    if (fields.layout) {
      const { fileSize } = fields.layout;
      if (quota.owner && fileSize > quota.room) throw overQuota(quota.owner, quota.room);
      await storage.holdsMore?.(Math.max(0, fileSize - received));
    }
    const all = await storage.unfinished();
    if ((all.get(share.share_id)?.uploads ?? 0) >= limits.maxUploadsPerShare)
      throw Errors.tooManyUploads(
        `This share has ${limits.maxUploadsPerShare} unfinished uploads, the most it may have; finish one, or wait for it to expire`,
      );
    if (share.owner_id === null) return;
    const mine = (await unfinishedOf(store, all, share.owner_id)).uploads;
    if (mine >= limits.maxUploadsPerUser)
      throw Errors.tooManyUploads(
        `You have ${limits.maxUploadsPerUser} unfinished uploads, the most a user may have; finish one, or wait for it to expire`,
      );
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
    permission: Permission,
  ) => {
    const declared = Number(req.headers['content-length']);
    const length = Number.isSafeInteger(declared) && declared > 0 ? declared : 0;
    // The quota is enforced before anything is written: by the declared length up front, and
    // by cutting the body off where the quota ends (a body without a length).
    const { room, owner } = await quotaRoom(req, share, share.initialized);
    if (owner && length > room + MULTIPART_SLACK) throw overQuota(owner, room);
    // So is the chunk size, before a byte is read (the 100 Continue a client may wait for).
    if (length > maxChunkBytes + MULTIPART_SLACK)
      throw new HttpError(413, 'The chunk is larger than the server accepts');
    const release = await storage.reserve(length);
    let outcome: 'stored' | 'complete';
    let fields: ChunkFields;
    // What the completing chunk published: its answer says so (a GET afterwards may already
    // show another upload's content).
    let published: { size: number; sha256: string } | undefined;
    try {
      // One byte over: enough to know. The declared length bounds it too (the file part lies
      // within the body), which tells the storage that a small upload is small.
      const max = Math.min(room, maxChunkBytes, length || Infinity) + 1;
      const chunk = await readChunk(req, res, share.share_id, max);
      const chunkFields = chunk.fields;
      fields = chunkFields;
      try {
        // The quota and the bounds on unfinished uploads count what other requests committed:
        // checked and committed under one lock per user (per share for an anonymous caller), so
        // chunks that race cannot all pass a check that only one of them may.
        // A quota an ADMIN gave the caller (on any server) while the body streamed in counts
        // too, as one lowered meanwhile does.
        const quotaSince =
          owner === undefined &&
          req.caller.userId !== null &&
          ((await store.getUserById(req.caller.userId))?.quota ?? null) !== null;
        const guarded =
          owner !== undefined ||
          quotaSince ||
          !(await storage.isUnfinished(share.share_id, fields.uploadId));
        const checkAndCommit = async () => {
          // A replacement is credited with the content the share holds now, which another
          // upload may have replaced while this body streamed in, not with what it held then.
          const current = await store.getShare(share.share_id);
          const quota =
            guarded && (owner || quotaSince)
              ? await quotaRoom(req, current ?? share, share.initialized)
              : { room, owner };
          if (
            quota.owner &&
            (chunk.received.bytes > quota.room ||
              (chunk.received.overflow && quota.room < maxChunkBytes))
          )
            throw overQuota(quota.owner, quota.room);
          // The share may have been deleted, expired or handed over while the body streamed in:
          // a chunk is only ever committed for the share's owner (a handover ends their uploads).
          if (!current || isExpired(current, ctx.clock())) throw Errors.shareNotFound();
          checkOwner(req, current);
          // So is the caller: deleted, signed out everywhere or without the permission by now,
          // its chunk is not committed (a deleted user's shares take no content).
          await stillAllowed(req, store, permission);
          // A handover whose server died before it ended the old owner's uploads ends them now,
          // before this chunk could continue one or start one that it would end.
          if (current.pending_handover)
            await endFormerUploads(store, storage, share.share_id, current.pending_handover);
          await checkNewUpload(req, share, chunkFields, quota, chunk.received.bytes);
          const stored = await commitChunk(
            req,
            share,
            chunkFields,
            chunk.received,
            allowed,
            permission,
            (content) => (published = content),
          ).catch(async (err: unknown) => {
            // If-Match no longer holds: this upload can never complete. It goes, as one whose
            // digest failed does, and holds no quota for the day it would wait to be swept.
            if (err instanceof HttpError && err.status === 412)
              await storage.removeUpload(share.share_id, chunkFields.uploadId);
            throw err;
          });
          // A handover (or DELETE) in the middle of this commit may have looked for the share's
          // uploads before this chunk started one: it goes now, as theirs did. Content that was
          // published is the share's: nothing is read after it (the lock's connection may have
          // dropped after the publish was written).
          if (stored === 'complete') return stored;
          const after = await store.getShare(share.share_id);
          if (after?.owner_id !== req.caller.userId) {
            await storage.removeUpload(share.share_id, chunkFields.uploadId);
            throw after ? Errors.notOwner() : Errors.shareNotFound();
          }
          return stored;
        };
        outcome = guarded
          ? await store.withShareLock(
              `uploads of ${req.caller.userId ?? share.share_id}`,
              checkAndCommit,
            )
          : await checkAndCommit();
      } finally {
        await storage.discard(chunk.received);
      }
    } finally {
      release();
    }
    if (outcome === 'complete') {
      res.status(201).json({
        status: 'success',
        message: `Upload complete (${fields.total} chunks)`,
        ...(published && {
          size: published.size,
          ...(published.sha256 && { sha256: published.sha256 }),
        }),
      });
    } else {
      res.json({
        status: 'success',
        message: `Chunk ${fields.index + 1} of ${fields.total} received`,
      });
    }
  };

  /** Commits a checked chunk; the one that completes the upload publishes the new content. */
  const commitChunk = (
    req: Request,
    share: ShareRecord,
    fields: ChunkFields,
    received: ReceivedChunk,
    allowed: (s: ShareRecord) => void,
    permission: Permission,
    onPublished: (content: { size: number; sha256: string }) => void,
  ) =>
    storage.commit(share.share_id, fields, received, (content) =>
      store.withShareLock(share.share_id, async () => {
        const current = await store.getShare(share.share_id);
        // Expired while the body streamed in or the upload was joined: it is gone for every
        // request (findShare) even before the sweeper deletes it, and takes no content.
        if (!current || isExpired(current, ctx.clock())) throw Errors.shareNotFound();
        checkOwner(req, current);
        // Joining a large upload takes seconds: the caller may have been deleted, signed out or
        // stripped of the permission meanwhile (on any server). Then nothing is published.
        await stillAllowed(req, store, permission);
        // The same content published again (the storage finishing a completion a crash
        // cut short after publishing): the upload did complete; nothing changes.
        if (current.initialized && blobOf(current) === content.blob) {
          onPublished(content);
          return undefined;
        }
        allowed(current);
        // Read before the update, which changes the record in place.
        const replaced = current.initialized ? blobOf(current) : undefined;
        if (replaced && replaced !== content.blob) await storage.releasing?.(replaced);
        await pausePoint('publish.before-record');
        await store.updateShare(share.share_id, {
          initialized: true,
          size: content.size,
          sha256: content.sha256 || null,
          blob: content.blob,
        });
        onPublished(content);
        return replaced;
      }),
    );

  const checkCreate = (s: ShareRecord) => {
    if (s.locked) throw Errors.locked();
    if (s.initialized) throw Errors.alreadyInitialized();
  };
  /**
   * Additive: a replacement with `If-Match` replaces only the content it names (the strong ETag
   * of GET, which is `"<sha256>"`, or `*`). Checked before a chunk's body is read, and again when
   * the upload completes, under the share's lock: a read-modify-write (`fshare push` of a set)
   * never lands over another's replacement made in between.
   */
  const replaceCheck = (ifMatch: string | undefined) => (s: ShareRecord) => {
    if (s.locked) throw Errors.locked();
    if (!s.initialized) throw Errors.notInitialized();
    if (ifMatch === undefined) return;
    const etag = s.sha256 ? `"${s.sha256}"` : undefined;
    if (etag !== undefined && matchesEtag(ifMatch, etag, true)) return;
    if (ifMatch.trim() === '*') return;
    throw new HttpError(
      412,
      etag
        ? `The content is not the version this replacement was made for (If-Match): its ETag is now ${etag}`
        : 'The content has no sha256 yet to match If-Match against; read it again later',
      etag ? { ETag: etag } : {},
    );
  };

  route(router, '/files/:id/content', {
    post: async (req, res) => {
      const share = await findShare(req, ctx, 'CREATE', true);
      checkCreate(share);
      await acceptChunk(req, res, share, checkCreate, 'CREATE');
    },
    put: async (req, res) => {
      const share = await findShare(req, ctx, 'MODIFY', true);
      const checkReplace = replaceCheck(req.get('if-match'));
      checkReplace(share);
      await acceptChunk(req, res, share, checkReplace, 'MODIFY');
    },
    get: async (req, res) => {
      const share = await findShare(req, ctx, 'READ');
      if (!share.initialized) throw Errors.noContent();
      await sendContent(req, res, share, storage, store);
    },
  });

  // Additive (docs/API.md): which chunks of an unfinished upload the server holds, so that a
  // client can resume it after a restart by sending only the others.
  route(router, '/files/:id/uploads/:upload', {
    get: async (req, res) => {
      const permission = req.caller.permissions.includes('CREATE') ? 'CREATE' : 'MODIFY';
      const share = await findShare(req, ctx, permission, true);
      const uploadId = String(req.params.upload);
      if (!hasChars(uploadId, LIMITS.maxUploadIdChars) || !isWellFormed(uploadId))
        throw Errors.badRequest(
          `An upload id (dzuuid) has 1 to ${LIMITS.maxUploadIdChars} characters of well-formed Unicode`,
        );
      // The old owner's uploads of a handover cut short are not the new owner's to resume.
      if (share.pending_handover)
        await endFormerUploads(store, storage, share.share_id, share.pending_handover);
      const status = await storage.uploadStatus(share.share_id, uploadId);
      if (status === null) throw new HttpError(404, 'No unfinished upload with this dzuuid');
      if (status === 'finished')
        throw new HttpError(410, 'This upload has finished; its chunks are no longer accepted');
      res.json({ dzuuid: uploadId, ...status });
    },
  });

  return router;
}

/**
 * Invisible format characters (Unicode Cf) a name may hold, matched in the last group: the bidi
 * marks LRM, RLM and ALM (U+200E, U+200F, U+061C), zero-width spaces, U+FEFF, soft hyphens, tags.
 * Matched first, and kept: the joiners ZWNJ and ZWJ (Persian and Indic words, emoji sequences),
 * the visible number signs of Arabic, Syriac and Kaithi, and the tags of an emoji flag.
 */
const INVISIBLE =
  /\u{1F3F4}[\u{E0020}-\u{E007E}]+\u{E007F}|[\u200C\u200D\u0600-\u0605\u06DD\u070F\u0890\u0891\u08E2\u{110BD}\u{110CD}]|(\p{Cf})/gu;

/**
 * A stored name as it may be shown (the share-link page) or offered: names stored before control
 * and bidi characters were refused have "_" in their place (a U+202E before "gpj.exe" shows it as
 * "exe.jpg"), and so do invisible format characters, still accepted in names, which would hide
 * in what is shown and saved ("invoice\u200Fexe.pdf" shows as "invoiceexe.pdf"); a lone
 * surrogate becomes U+FFFD.
 */
export function shownName(fileName: string): string {
  return toWellFormed(
    fileName
      .replace(new RegExp(UNSAFE_NAME_CHAR.source, 'g'), '_')
      .replace(INVISIBLE, (kept, hidden?: string) => (hidden ? '_' : kept)),
  );
}

/**
 * The name a download is saved under: the whole stored name with "/" and "\\" made "_" (what
 * browsers do, and what the reference's browser client saves), never only its last part, and
 * never "." or ".."; any
 * lone surrogate (names stored before names were checked) becomes U+FFFD, so the header can
 * always be made.
 */
export function downloadName(fileName: string): string {
  const name = shownName(fileName.replace(/[/\\]/g, '_'));
  // "." and ".." name a directory wherever they are saved: `curl -OJ` failed ("Is a
  // directory"). They are offered as "_" and "__".
  return name === '.' || name === '..' ? name.replace(/\./g, '_') : name;
}

/**
 * `Content-Disposition: attachment` for a stored name. Any name beyond ASCII gets `filename*`
 * (UTF-8) beside a plain-ASCII `filename`: given only a Latin-1 `filename`, which the library
 * would otherwise send for names such as "café.pdf", Chromium mangles the name.
 */
export function attachment(fileName: string): string {
  const name = downloadName(fileName);
  const header = contentDisposition(name, {
    type: 'attachment',
    // What clients without filename* (curl -J) use: accents dropped ("cafe.pdf"), the rest "_".
    fallback: name
      .normalize('NFKD')
      .replace(/[\u0300-\u036f]/g, '')
      .replace(/[^\x20-\x7e]/g, '_'),
  });
  // A name that is an RFC 9110 token goes unquoted (filename=report.pdf), as the reference server
  // sends it: clients written against it match that text. Others stay quoted.
  return header.replace(
    /^attachment; filename="([!#$%&'*+.0-9A-Z^_`a-z|~-]+)"/,
    'attachment; filename=$1',
  );
}

/** The strong validator of content: its sha256 when known, else one from the file itself. */
function etagOf(share: ShareRecord, size: number, mtimeMs: number): string {
  if (share.sha256) return `"${share.sha256}"`;
  return `"${size.toString(36)}-${Math.floor(mtimeMs).toString(36)}"`;
}

/**
 * Streams content with validators, its digest, and one optional byte range (RFC 9110).
 * `beforeBody` runs once the answer is known to carry bytes (not for HEAD, 304 or 416), before
 * any header is sent: a share link counts its download there, and may still refuse.
 */
export async function sendContent(
  req: Request,
  res: Response,
  found: ShareRecord,
  storage: ContentStorage,
  store: MetadataStore,
  {
    beforeBody,
    headers: extra = {},
    sha256,
  }: {
    /** `blob` names the content being sent (the record may have been read again for it). */
    beforeBody?: (range: {
      start: number;
      end: number;
      size: number;
      blob: string;
    }) => Promise<void>;
    /** Headers that replace the defaults (a share link's `Cache-Control: no-store`). */
    headers?: Record<string, string>;
    /** Only content with this sha256 (what a link's page showed); other content is a 412. */
    sha256?: string;
  } = {},
) {
  // The record names the content and its digest together; if that content was replaced between
  // reading the record and opening it, the record is read again (old bytes or new, never a mix).
  let share = found;
  let reader = await storage.open(blobOf(share));
  if (!reader) {
    const again = await store.getShare(share.share_id);
    // Deleted since it was found (its content with it): gone, not "no content yet".
    if (!again) throw new MissingRecordError('share');
    if (again.initialized) {
      share = again;
      reader = await storage.open(blobOf(share));
      // The record names content the storage does not hold (an older db.json restored; a lost
      // mount is StorageUnavailableError from open): the server's fault, said as such (503 and
      // a log line), not "no content yet".
      if (!reader)
        throw new MissingContentError(
          `the content of share ${share.share_id} is missing from the storage (${blobOf(share)})`,
        );
    }
  }
  if (!reader) throw Errors.noContent();
  let streaming = false;
  let body: Readable | undefined;
  try {
    const { size } = reader;
    // Content is never changed once stored: a size other than its record's is damage on the disk
    // (a file cut short, or grown). Served, it was a 200 whose bytes the ETag and Repr-Digest
    // did not describe, which a client that does not hash took as the file.
    if (share.size != null && size !== share.size)
      throw new DamagedContentError(
        `the content of share ${share.share_id} is damaged: the storage holds ${size} bytes of it, its record ${share.size} (${blobOf(share)})`,
      );
    const etag = etagOf(share, size, reader.mtimeMs);
    const lastModified = new Date(Math.floor(reader.mtimeMs / 1000) * 1000);
    // RFC 9110 §8.8.2.2: a modification date is a strong validator only once its second is over
    // (two versions made in one second share it). Until then it is not sent, and a date a client
    // names can only be an older version's of that second: it never vouches for this content.
    const dated = Math.floor(Date.now() / 1000) * 1000 > lastModified.getTime();
    const headers: Record<string, string> = {
      'Accept-Ranges': 'bytes',
      ETag: etag,
      ...(dated ? { 'Last-Modified': lastModified.toUTCString() } : {}),
      'Content-Type': mime.lookup(share.file_name) || 'application/octet-stream',
      'Content-Disposition': attachment(share.file_name),
      'X-Content-Type-Options': 'nosniff',
      // Content is anyone's bytes on the server's origin: should a browser ever show it instead of
      // saving it (an .html or .svg share), it runs no script and loads nothing, as a document of
      // no origin (docs/API.md "Downloads").
      'Content-Security-Policy': "default-src 'none'; sandbox",
      'Cache-Control': 'private, no-cache',
      ...extra,
    };
    // RFC 9530: the digest of the whole representation, also on a 206.
    if (share.sha256)
      headers['Repr-Digest'] = `sha-256=:${Buffer.from(share.sha256, 'hex').toString('base64')}:`;

    if (sha256 !== undefined && share.sha256 !== sha256) {
      res.set(headers);
      throw new HttpError(
        412,
        'The file was replaced after its page was shown, so it is not the one the page gave the sha256 of; open the link again to download the new one',
      );
    }
    // RFC 9110 §13.2.2: If-Match, else If-Unmodified-Since (412); then If-None-Match, else
    // If-Modified-Since (304); then Range with If-Range.
    const ifMatch = req.get('if-match');
    const ifUnmodifiedSince = req.get('if-unmodified-since');
    if (
      ifMatch !== undefined
        ? !matchesEtag(ifMatch, etag, true)
        : ifUnmodifiedSince !== undefined &&
          !unmodifiedSince(httpDate(ifUnmodifiedSince), lastModified, dated)
    ) {
      res.set(headers);
      throw new HttpError(
        412,
        ifMatch !== undefined
          ? `The content is not the version asked for (If-Match): its ETag is now ${etag}`
          : `The content changed after the time given in If-Unmodified-Since (${lastModified.toUTCString()})`,
      );
    }
    const ifNoneMatch = req.get('if-none-match');
    const ifModifiedSince = req.get('if-modified-since');
    if (
      ifNoneMatch !== undefined
        ? matchesEtag(ifNoneMatch, etag, false)
        : ifModifiedSince !== undefined &&
          dated &&
          lastModified.getTime() <= httpDate(ifModifiedSince)
    ) {
      // RFC 9110 §15.4.5: the validators and caching fields, not the representation's metadata
      // (found from outside: Content-Type, Content-Disposition and Repr-Digest were sent). The
      // sandbox stays: a cache that takes the 304's fields over keeps content sandboxed.
      const kept = [
        'ETag',
        'Last-Modified',
        'Cache-Control',
        'Content-Security-Policy',
        'X-Content-Type-Options',
        ...Object.keys(extra),
      ];
      res
        .status(304)
        .set(Object.fromEntries(Object.entries(headers).filter(([name]) => kept.includes(name))))
        .end();
      return;
    }
    let range = parseRange(req.headers.range, size);
    const ifRange = req.get('if-range');
    if (
      range.kind !== 'none' &&
      ifRange !== undefined &&
      !ifRangeHolds(ifRange, etag, dated ? lastModified : null)
    ) {
      range = { kind: 'none' };
    }
    if (range.kind === 'unsatisfiable') {
      res.set(headers);
      throw new HttpError(416, `The range cannot be satisfied: the content has ${size} bytes`, {
        'Content-Range': `bytes */${size}`,
      });
    }
    let start = 0;
    let end = size - 1;
    if (range.kind === 'range') ({ start, end } = range);
    // Bytes read from a stream (S3) are asked for before anything is counted or sent: storage
    // that cannot give them is a 503 that changed nothing, not an answer cut before its status.
    body =
      req.method !== 'HEAD' && end >= start && !reader.writeTo
        ? reader.stream(start, end)
        : undefined;
    body?.on('error', () => {
      if (streaming) res.destroy();
    });
    if (body) await firstBytes(body, share);
    if (req.method !== 'HEAD' && beforeBody)
      await beforeBody({ start, end, size, blob: blobOf(share) });
    res.set(headers);
    if (range.kind === 'range')
      res.status(206).set('Content-Range', `bytes ${start}-${end}/${size}`);
    res.set('Content-Length', String(end - start + 1));
    if (req.method === 'HEAD' || end < start) {
      res.end();
      return;
    }
    streaming = true;
    const gone = connectionGone(req, res);
    if (reader.writeTo) {
      // A failure here is the client going away (or the disk failing mid-answer): the answer
      // cannot be changed any more, so the connection is cut and the request log says so.
      reader.writeTo(res, start, end, gone).then(
        () => res.end(),
        () => res.destroy(),
      );
      return;
    }
    const stream = body!;
    gone.addEventListener('abort', () => stream.destroy());
    stream.pipe(res);
  } finally {
    if (!streaming) {
      body?.destroy();
      await reader.close();
    }
  }
}

/**
 * Aborts when the answer's connection closes before the answer is done. An answer queued behind
 * another on its connection (HTTP/1.1 pipelining) gets no 'close' of its own when the connection
 * goes: found from outside, its writes waited for good, its content file open, one per such
 * connection, until a garbage collection closed it with a warning (DEP0137).
 */
function connectionGone(req: Request, res: Response): AbortSignal {
  const gone = new AbortController();
  const socket = req.socket;
  const abort = () => gone.abort();
  const done = () => {
    socket.off('close', abort);
    res.off('close', abort);
  };
  if (socket.destroyed) abort();
  else {
    socket.once('close', abort);
    res.once('close', abort);
    res.once('finish', done);
    gone.signal.addEventListener('abort', done);
  }
  return gone.signal;
}

/** Resolves once a content stream has bytes to give (or has ended); rejects if it fails first. */
function firstBytes(body: Readable, share: ShareRecord): Promise<void> {
  return new Promise((resolve, reject) => {
    const settle = (err?: Error) => {
      body.off('readable', ready);
      body.off('error', settle);
      if (!err) resolve();
      else if (err instanceof StorageUnavailableError) reject(err);
      else
        reject(
          new StorageUnavailableError(
            `the content of share ${share.share_id} could not be read: ${err.message}`,
          ),
        );
    };
    const ready = () => settle();
    body.once('readable', ready);
    body.once('error', settle);
  });
}

/**
 * Whether an If-Match (`strong`: a weak tag never matches) or If-None-Match (weak comparison)
 * list names the current ETag; `*` names any current content.
 */
function matchesEtag(header: string, etag: string, strong: boolean): boolean {
  if (header.trim() === '*') return true;
  return header
    .split(',')
    .map((t) => t.trim())
    .some((t) => (strong ? t : t.replace(/^W\//, '')) === etag);
}

/**
 * An HTTP-date in milliseconds (RFC 9110 §5.6.7, nothing else): a value that is not one is
 * ignored (NaN compares false), as RFC 9110 §13.1.3/§13.1.4 require.
 */
function httpDate(value: string): number {
  return parseHttpDate(value.trim());
}

/**
 * If-Range: a strong ETag must match exactly; a date must equal Last-Modified, and only a
 * Last-Modified that is a strong validator (`null`: not yet) can match.
 */
function ifRangeHolds(header: string, etag: string, lastModified: Date | null): boolean {
  const value = header.trim();
  if (value.startsWith('"') || value.startsWith('W/')) return value === etag;
  // Not an HTTP-date: no match, so the whole content is sent (RFC 9110 §13.1.5).
  const date = parseHttpDate(value);
  return lastModified !== null && !Number.isNaN(date) && date === lastModified.getTime();
}

/**
 * If-Unmodified-Since: true (the content is sent) when the date is not an HTTP-date (ignored),
 * or when the content was not modified after it; content modified in the current second cannot
 * be vouched for by any date (an older version of that second has the same one).
 */
function unmodifiedSince(date: number, lastModified: Date, dated: boolean): boolean {
  if (Number.isNaN(date)) return true;
  return dated && lastModified.getTime() <= date;
}
