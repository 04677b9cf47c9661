import { Router, type Request } from 'express';
import { isoNoZone } from '../../shared/dates.js';
import { hashPassword, need } from '../auth.js';
import type { Context } from '../context.js';
import { Errors } from '../errors.js';
import { paginate, route, success, userJson } from '../http.js';
import type { UserRecord } from '../store/index.js';
import {
  onlyFields,
  permissionsField,
  requireFields,
  requireObject,
  stringField,
  usernameField,
} from '../validate.js';

const FIELDS = ['username', 'password', 'permissions'] as const;
const READ_ONLY = ['register_date'];

export function userRoutes({ store }: Context): Router {
  const router = Router();

  /** ADMIN only, then the user must exist (404). */
  const target = async (req: Request): Promise<UserRecord> => {
    need(req, 'ADMIN', false);
    const user = await store.getUser(String(req.params.name));
    if (!user) throw Errors.userNotFound();
    return user;
  };

  const update = (complete: boolean) => async (req: Request, res: import('express').Response) => {
    const user = await target(req);
    const body = requireObject(req.body);
    onlyFields(body, FIELDS, READ_ONLY);
    if (complete) requireFields(body, FIELDS);
    const changes: Partial<UserRecord> = {};
    if ('username' in body) {
      const username = usernameField(body);
      if (username !== user.username && (await store.getUser(username))) throw Errors.userExists();
      changes.username = username;
    }
    if ('permissions' in body) changes.permissions = permissionsField(body, 'permissions');
    if ('password' in body)
      changes.password_hash = await hashPassword(stringField(body, 'password'));
    await store.updateUser(user.username, changes);
    success(res, 'User updated');
  };

  route(router, '/users', {
    get: async (req, res) => {
      need(req, 'ADMIN');
      const total = await store.userCount();
      res.json(await paginate(req, total, (o, l) => store.listUsers(o, l), userJson));
    },
    post: async (req, res) => {
      need(req, 'ADMIN');
      const body = requireObject(req.body);
      onlyFields(body, FIELDS, READ_ONLY);
      requireFields(body, FIELDS);
      const username = usernameField(body);
      const password = stringField(body, 'password');
      const permissions = permissionsField(body, 'permissions');
      if (await store.getUser(username)) throw Errors.userExists();
      const password_hash = await hashPassword(password);
      // The store refuses a second user of the same name (409) if one came in meanwhile.
      await store.addUser({ username, permissions, register_date: isoNoZone(), password_hash });
      res
        .status(201)
        .location(`/users/${username}`)
        .json({ status: 'success', url: `/users/${username}` });
    },
  });

  route(router, '/users/:name', {
    get: async (req, res) => {
      need(req, null, false);
      const name = String(req.params.name);
      const self = req.caller.username === name;
      // Not yourself and not ADMIN, or no such user: the same 403, so names can't be probed.
      const user =
        (self || req.caller.permissions.includes('ADMIN')) && (await store.getUser(name));
      if (!user) throw Errors.notYourUser();
      res.json(userJson(user));
    },
    patch: update(false),
    put: update(true),
    delete: async (req, res) => {
      const user = await target(req);
      await store.deleteUser(user.username);
      success(res, 'User deleted');
    },
  });

  return router;
}
