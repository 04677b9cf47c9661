import { randomUUID } from 'node:crypto';
import { Router, type Request, type Response } from 'express';
import { isoNoZone } from '../../shared/dates.js';
import { need } from '../auth.js';
import type { Context } from '../context.js';
import { Errors } from '../errors.js';
import { KeyedMutex } from '../mutex.js';
import { paginate, route, shareJson, success } from '../http.js';
import type { ShareRecord } from '../store.js';
import { onlyFields, requireFields, requireObject, stringField, type Body } from '../validate.js';
import { findShare } from './shares.js';

const WRITABLE = ['file_name', 'owner_name'] as const;
const READ_ONLY = ['share_id', 'initialized', 'locked', 'create_date', 'size'];
const MAX_FILE_NAME = 1024;

export function fileRoutes({ store, storage }: Context, shareLocks: KeyedMutex): Router {
  const router = Router();

  const ownerField = (body: Body): string | null => {
    const owner = body.owner_name;
    if (owner === null) return null;
    if (typeof owner !== 'string' || !store.getUser(owner)) {
      throw Errors.badRequest('Field "owner_name" must name an existing user, or be null');
    }
    return owner;
  };

  const update = (complete: boolean) => async (req: Request, res: Response) => {
    const share = findShare(req, store, 'MODIFY', true);
    if (share.locked) throw Errors.locked();
    const body = requireObject(req.body);
    onlyFields(body, WRITABLE, READ_ONLY);
    if (complete) requireFields(body, WRITABLE);
    const changes: Partial<ShareRecord> = {};
    if ('file_name' in body) changes.file_name = stringField(body, 'file_name', MAX_FILE_NAME);
    if ('owner_name' in body) changes.owner_name = ownerField(body);
    await store.updateShare(share.share_id, changes);
    success(res, 'Share updated');
  };

  const setLocked = (locked: boolean) => async (req: Request, res: Response) => {
    const share = findShare(req, store, 'LOCK');
    await shareLocks.run(share.share_id, () => store.updateShare(share.share_id, { locked }));
    success(res, locked ? 'Share locked' : 'Share unlocked');
  };

  route(router, '/files', {
    get: (req, res) => {
      need(req, 'LIST');
      res.json(paginate(req, store.shareCount(), (o, l) => store.listShares(o, l), shareJson));
    },
    post: async (req, res) => {
      need(req, 'CREATE');
      const body = requireObject(req.body, true);
      onlyFields(body, WRITABLE, READ_ONLY);
      const share_id = randomUUID();
      const file_name =
        'file_name' in body ? stringField(body, 'file_name', MAX_FILE_NAME) : share_id;
      // A new share belongs to its creator; handing it over is a PATCH of owner_name.
      if ('owner_name' in body && body.owner_name !== req.caller.username) {
        throw Errors.badRequest(
          'A new share is owned by its creator; change owner_name afterwards',
        );
      }
      await store.addShare({
        share_id,
        file_name,
        owner_name: req.caller.username,
        initialized: false,
        locked: false,
        create_date: isoNoZone(),
        size: null,
      });
      const url = `/files/${share_id}`;
      res.status(201).location(url).json({ status: 'success', url });
    },
  });

  route(router, '/files/:id', {
    get: (req, res) => {
      res.json(shareJson(findShare(req, store, 'READ')));
    },
    patch: update(false),
    put: update(true),
    delete: async (req, res) => {
      const share = findShare(req, store, 'DELETE');
      await shareLocks.run(share.share_id, async () => {
        if (share.locked) throw Errors.locked();
        await store.deleteShare(share.share_id);
        await storage.removeShare(share.share_id);
      });
      success(res, 'Share deleted');
    },
  });

  route(router, '/files/:id/lock', { post: setLocked(true) });
  route(router, '/files/:id/unlock', { post: setLocked(false) });

  return router;
}
