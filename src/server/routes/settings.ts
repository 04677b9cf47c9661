import { Router } from 'express';
import { need } from '../auth.js';
import type { Context } from '../context.js';
import { route, success } from '../http.js';
import { onlyFields, permissionsField, requireFields, requireObject } from '../validate.js';

export function settingsRoutes({ store }: Context): Router {
  const router = Router();

  const update = (complete: boolean) =>
    (async (req, res) => {
      need(req, 'ADMIN');
      const body = requireObject(req.body);
      onlyFields(body, ['default_permissions']);
      if (complete) requireFields(body, ['default_permissions']);
      const settings = { ...(await store.getSettings()) };
      if ('default_permissions' in body) {
        settings.default_permissions = permissionsField(body, 'default_permissions');
      }
      await store.setSettings(settings);
      success(res, 'Settings updated');
    }) satisfies Parameters<typeof route>[2]['put'];

  route(router, '/admin/settings', {
    get: async (req, res) => {
      need(req, 'ADMIN');
      res.json({ default_permissions: (await store.getSettings()).default_permissions });
    },
    patch: update(false),
    put: update(true),
  });
  return router;
}
