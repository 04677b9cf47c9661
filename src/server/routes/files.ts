import { createHmac, randomUUID } from 'node:crypto';
import { Router, type Request, type Response } from 'express';
import { isoNoZone } from '../../shared/dates.js';
import { need } from '../auth.js';
import type { Context } from '../context.js';
import { Errors, HttpError } from '../errors.js';
import { fault } from '../faults.js';
import { endFormerUploads, unfinishedOf } from '../handover.js';
import { paginate, route, shareJson, success } from '../http.js';
import { removeShare } from '../remove-share.js';
import type { NewShare, ShareChanges, ShareRecord } from '../store/index.js';
import {
  expiryField,
  fileNameField,
  hasChars,
  noJsonBody,
  onlyFields,
  optionalObject,
  requireFields,
  requireObject,
  type Body,
} from '../validate.js';
import { checkOwner, findShare, isAdmin, refuseOrphan } from './shares.js';

/** A name filter of GET /files: absent, or a string of 1–1024 characters. */
function nameQuery(value: unknown, name: string): string | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'string' || !hasChars(value, 1024))
    throw Errors.badRequest(`"${name}" must be a string of 1 to 1024 characters`);
  return value;
}

/** What PUT requires: the reference's writable fields. */
const WRITABLE = ['file_name', 'owner_name'] as const;
/** Additive (docs/API.md "Expiry"): optional in every write. */
const EXPIRY = ['expires', 'expires_in'] as const;
const READ_ONLY = ['share_id', 'initialized', 'locked', 'create_date', 'size'];

export function fileRoutes(ctx: Context): Router {
  const { store, storage, clock, expiry } = ctx;
  const router = Router();

  /** The longest expiry this caller may give, in seconds; null for no limit (ADMIN). */
  const expiryCap = async (req: Request): Promise<number | null> =>
    isAdmin(req) ? null : ((await store.getSettings()).max_expiry ?? null);

  /** owner_name in a body: a user's name (stored as that user's id), or null for anonymous. */
  const ownerField = async (body: Body): Promise<string | null> => {
    const owner = body.owner_name;
    if (owner === null) return null;
    const user = typeof owner === 'string' ? await store.getUser(owner) : undefined;
    if (!user) {
      throw Errors.badRequest('Field "owner_name" must name an existing user, or be null');
    }
    return user.id;
  };

  const update = (complete: boolean) => async (req: Request, res: Response) => {
    const share = await findShare(req, ctx, 'MODIFY', true);
    if (share.locked) throw Errors.locked();
    const body = requireObject(req.body);
    onlyFields(body, [...WRITABLE, ...EXPIRY], READ_ONLY);
    if (complete) requireFields(body, WRITABLE);
    const changes: ShareChanges = {};
    if ('file_name' in body) changes.file_name = fileNameField(body);
    if ('owner_name' in body) changes.owner_id = await ownerField(body);
    const expires = expiryField(body, clock(), await expiryCap(req));
    if (expires !== undefined) changes.expires = expires;
    const recipient =
      changes.owner_id && changes.owner_id !== share.owner_id ? changes.owner_id : undefined;
    // Checked again under the lock: a LOCK may have come in meanwhile.
    const change = () =>
      store.withShareLock(share.share_id, async () => {
        const current = await store.getShare(share.share_id);
        if (!current) throw Errors.shareNotFound();
        if (current.locked) throw Errors.locked();
        checkOwner(req, current);
        if (recipient) await checkRecipientQuota(recipient, current);
        if (!('owner_id' in changes) || changes.owner_id === current.owner_id) {
          await store.updateShare(share.share_id, changes);
          return undefined;
        }
        // Recorded with the new owner: the uploads' ending below then happens even if this
        // server dies before it (at the next request for the share, or the next start).
        const mark = randomUUID();
        await store.updateShare(share.share_id, { ...changes, pending_handover: mark });
        return mark;
      });
    // A share handed to a user with a quota is counted against it under the lock their uploads'
    // quota checks take (content.ts), taken first as there, so neither can pass the other.
    const handover = recipient
      ? await store.withShareLock(`uploads of ${recipient}`, change)
      : await change();
    // An upload belongs to the owner it was started under: a handover ends the share's unfinished
    // uploads, so the new owner can neither finish one with the old owner's chunks nor be
    // counted for them; their late chunks are refused (409, the old owner's 403). After the
    // lock, as DELETE does: a completing chunk takes its upload's lock, then the share's.
    if (handover) {
      await fault('handover.after-record');
      await endFormerUploads(store, storage, share.share_id, handover).catch((err: unknown) =>
        ctx.log(
          `share ${share.share_id} was handed over, but its unfinished uploads could not be removed yet (${String(err)}); the next request for the share or start of a server removes them`,
        ),
      );
    }
    if (expires !== undefined) expiry.schedule();
    success(res, 'Share updated');
  };

  /**
   * A share handed over counts against its new owner's quota (its content, with what the owner
   * already has, the chunks of their unfinished uploads included; the share's own unfinished
   * uploads end with the handover): past it → 413, nothing changes.
   */
  const checkRecipientQuota = async (userId: string, share: ShareRecord) => {
    const user = await store.getUserById(userId);
    if (!user || user.quota === null) return;
    const pending = await unfinishedOf(store, await storage.unfinished(), user.id);
    const used = (await store.usageOf(user.id)) + pending.bytes;
    const bytes = share.size ?? 0;
    const room = Math.max(0, user.quota - used);
    if (bytes > room)
      throw Errors.quotaExceeded(
        `Handing this share (${bytes} bytes) to ${user.username} would exceed their storage quota (${user.quota} bytes; ${room} bytes are left)`,
      );
  };

  const setLocked = (locked: boolean) => async (req: Request, res: Response) => {
    const share = await findShare(req, ctx, 'LOCK');
    noJsonBody(req);
    // A share locked before its owner was deleted may still be unlocked, so it can be deleted.
    if (locked) await refuseOrphan(store, share);
    await store.withShareLock(share.share_id, () => store.updateShare(share.share_id, { locked }));
    success(res, locked ? 'Share locked' : 'Share unlocked');
  };

  route(router, '/files', {
    get: async (req, res) => {
      need(req, 'LIST');
      // Expired shares are deleted before they could be listed.
      await expiry.sweepDue();
      // Additive (docs/API.md "Finding shares by name"): ?file_name= (exact) or ?name_prefix=.
      const exact = nameQuery(req.query.file_name, 'file_name');
      const prefix = nameQuery(req.query.name_prefix, 'name_prefix');
      if (exact !== undefined && prefix !== undefined)
        throw Errors.badRequest('Give "file_name" or "name_prefix", not both');
      if (exact === undefined && prefix === undefined) {
        const total = await store.shareCount();
        res.json(await paginate(req, total, (o, l) => store.listShares(o, l), shareJson));
        return;
      }
      const matching: ShareRecord[] = [];
      for await (const share of store.eachShare())
        if (exact !== undefined ? share.file_name === exact : share.file_name.startsWith(prefix!))
          matching.push(share);
      res.json(
        await paginate(req, matching.length, async (o, l) => matching.slice(o, o + l), shareJson),
      );
    },
    post: async (req, res) => {
      need(req, 'CREATE');
      const body = await optionalObject(req);
      onlyFields(body, [...WRITABLE, ...EXPIRY], READ_ONLY);
      const key = idempotencyKeyOf(req);
      const share_id =
        key === undefined ? randomUUID() : keyedShareId(ctx.idempotencyKey, req.caller.userId, key);
      // A server-wide maximum also applies to shares made without an expiry.
      const cap = await expiryCap(req);
      const now = clock();
      const expires =
        expiryField(body, now, cap) ??
        (cap === null ? null : new Date(now + cap * 1000).toISOString());
      const file_name = 'file_name' in body ? fileNameField(body) : share_id;
      // A new share belongs to its creator; handing it over is a PATCH of owner_name.
      if ('owner_name' in body && body.owner_name !== req.caller.username) {
        throw Errors.badRequest(
          'A new share is owned by its creator; change owner_name afterwards',
        );
      }
      const share: NewShare = {
        share_id,
        file_name,
        owner_id: req.caller.userId,
        initialized: false,
        locked: false,
        create_date: isoNoZone(),
        size: null,
        sha256: null,
        expires,
      };
      let replayed = false;
      if (key === undefined) await store.addShare(share);
      else
        replayed = await store.withShareLock(share_id, async () => {
          // Additive: the same key from the same caller names the same share, so a create whose
          // answer was lost can be sent again without making a second one.
          const made = await store.getShare(share_id);
          if (!made) {
            await store.addShare(share);
            return false;
          }
          if (made.owner_id !== req.caller.userId)
            throw new HttpError(
              409,
              'The share this Idempotency-Key created has been handed to another owner',
            );
          if (made.file_name !== file_name)
            throw new HttpError(
              422,
              `This Idempotency-Key already created a share named ${JSON.stringify(made.file_name)}; use a new key for another request`,
            );
          return true;
        });
      if (expires && !replayed) expiry.schedule();
      const url = `/files/${share_id}`;
      // Additive: every keyed create says whether it was a repeat, so a client can tell a server
      // that takes the key (nothing made before: `false`) from one that ignores it (no header).
      if (key !== undefined) res.set('Idempotent-Replayed', replayed ? 'true' : 'false');
      res.status(201).location(url).json({ status: 'success', url });
    },
  });

  route(router, '/files/:id', {
    get: async (req, res) => {
      res.json(shareJson(await findShare(req, ctx, 'READ')));
    },
    patch: update(false),
    put: update(true),
    delete: async (req, res) => {
      const share = await findShare(req, ctx, 'DELETE');
      await removeShare(store, storage, ctx.log, share.share_id, (current) => {
        if (!current) throw Errors.shareNotFound();
        if (current.locked) throw Errors.locked();
        noJsonBody(req);
        return true;
      });
      success(res, 'Share deleted');
    },
  });

  route(router, '/files/:id/lock', { post: setLocked(true) });
  route(router, '/files/:id/unlock', { post: setLocked(false) });

  return router;
}

/**
 * The `Idempotency-Key` of a request (draft-ietf-httpapi-idempotency-key-header), when it has
 * one: 1 to 255 visible ASCII characters, else 400.
 */
function idempotencyKeyOf(req: Request): string | undefined {
  const raw = req.headers['idempotency-key'];
  if (raw === undefined) return undefined;
  const value = Array.isArray(raw) ? undefined : raw.trim().replace(/^"(.*)"$/, '$1');
  if (value === undefined || !/^[\x21-\x7e]{1,255}$/.test(value))
    throw Errors.badRequest(
      'The Idempotency-Key header must be one value of 1 to 255 visible ASCII characters',
    );
  return value;
}

/**
 * The share id a caller's key names: a UUID (version 8) made from an HMAC of the caller and the
 * key with the server's secret, so nobody can guess the id another caller's key leads to.
 */
function keyedShareId(secret: Buffer, userId: string | null, key: string): string {
  const b = createHmac('sha256', secret)
    .update(`${userId ?? 'anonymous'}\0${key}`)
    .digest()
    .subarray(0, 16);
  b[6] = (b[6]! & 0x0f) | 0x80;
  b[8] = (b[8]! & 0x3f) | 0x80;
  const hex = b.toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}
