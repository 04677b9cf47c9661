import { Router } from 'express';
import { need } from '../auth.js';
import type { Context } from '../context.js';
import { Errors } from '../errors.js';
import { LIMITS } from '../limits.js';
import { route, success } from '../http.js';
import type { Settings } from '../store/index.js';
import {
  onlyFields,
  permissionsField,
  requireFields,
  requireObject,
  type Body,
} from '../validate.js';

/** Additive settings (docs/API.md "Settings"): optional in PUT, so old clients' bodies still work. */
const LIMIT_FIELDS = ['max_expiry', 'max_downloads'] as const;

function limitField(body: Body, key: (typeof LIMIT_FIELDS)[number]): number | null {
  const value = body[key];
  const max = key === 'max_expiry' ? LIMITS.maxExpirySeconds : Number.MAX_SAFE_INTEGER;
  if (value === null) return null;
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 1 || value > max)
    throw Errors.badRequest(
      key === 'max_expiry'
        ? `Field "max_expiry" must be a number of seconds from 1 to ${max}, or null for no limit`
        : 'Field "max_downloads" must be a whole number of 1 or more, or null for no limit',
    );
  return value;
}

export function settingsJson(s: Settings) {
  return {
    default_permissions: s.default_permissions,
    max_expiry: s.max_expiry ?? null,
    max_downloads: s.max_downloads ?? null,
  };
}

export function settingsRoutes({ store }: Context): Router {
  const router = Router();

  const update = (complete: boolean) =>
    (async (req, res) => {
      need(req, 'ADMIN');
      const body = requireObject(req.body);
      onlyFields(body, ['default_permissions', ...LIMIT_FIELDS]);
      if (complete) requireFields(body, ['default_permissions']);
      const changes: Partial<Settings> = {};
      if ('default_permissions' in body) {
        changes.default_permissions = permissionsField(body, 'default_permissions');
      }
      for (const key of LIMIT_FIELDS) if (key in body) changes[key] = limitField(body, key);
      // Only what the body names: another change made meanwhile stays.
      await store.updateSettings(changes);
      success(res, 'Settings updated');
    }) satisfies Parameters<typeof route>[2]['put'];

  route(router, '/admin/settings', {
    get: async (req, res) => {
      need(req, 'ADMIN');
      res.json(settingsJson(await store.getSettings()));
    },
    patch: update(false),
    put: update(true),
  });
  return router;
}
