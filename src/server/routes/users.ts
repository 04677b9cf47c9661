import { randomUUID } from 'node:crypto';
import { Router, type Request, type Response } from 'express';
import { isoNoZone } from '../../shared/dates.js';
import { need } from '../auth.js';
import type { Context } from '../context.js';
import { Errors } from '../errors.js';
import { paginate, route, success, userJson } from '../http.js';
import type { UserChanges, UserRecord } from '../store/index.js';
import {
  noJsonBody,
  onlyFields,
  permissionsField,
  quotaField,
  requireFields,
  requireObject,
  stringField,
  usernameField,
  type Body,
} from '../validate.js';

const FIELDS = ['username', 'password', 'permissions'] as const;
/** Additive: a storage quota in bytes (null for none), set by ADMIN. */
const EXTRA = ['quota'] as const;
const READ_ONLY = ['register_date', 'used'];

export function userRoutes({ store, passwords }: Context): Router {
  const router = Router();

  /** ADMIN only, then the user must exist (404). */
  const target = async (req: Request): Promise<UserRecord> => {
    need(req, 'ADMIN', false);
    const user = await store.getUser(String(req.params.name));
    if (!user) throw Errors.userNotFound();
    return user;
  };

  const withUsage = async (user: UserRecord) => userJson(user, await store.usageOf(user.id));

  const update = (complete: boolean) => async (req: Request, res: Response) => {
    const user = await target(req);
    const body = requireObject(req.body);
    onlyFields(body, [...FIELDS, ...EXTRA], READ_ONLY);
    if (complete) requireFields(body, FIELDS);
    const changes: UserChanges = {};
    // A name that is taken is refused by the store at the moment of writing (409).
    if ('username' in body) changes.username = usernameField(body);
    if ('permissions' in body) changes.permissions = permissionsField(body, 'permissions');
    if ('quota' in body) changes.quota = quotaField(body);
    if ('password' in body) {
      changes.password_hash = await passwords.hash(stringField(body, 'password'));
      changes.end_tokens = true; // a new password ends every older token
    }
    await store.updateUser(user.id, changes);
    success(res, 'User updated');
  };

  /** Self or ADMIN; anyone else, and an unknown name, get the same 403 (names can't be probed). */
  const selfOrAdmin = async (req: Request): Promise<UserRecord> => {
    need(req, null, false);
    const name = String(req.params.name);
    const self = req.caller.username === name;
    const user = (self || req.caller.permissions.includes('ADMIN')) && (await store.getUser(name));
    if (!user) throw Errors.notYourUser();
    return user;
  };

  const newUser = async (body: Body): Promise<UserRecord> => ({
    id: randomUUID(),
    username: usernameField(body),
    permissions: permissionsField(body, 'permissions'),
    register_date: isoNoZone(),
    password_hash: await passwords.hash(stringField(body, 'password')),
    token_gen: 0,
    quota: 'quota' in body ? quotaField(body) : null,
  });

  route(router, '/users', {
    get: async (req, res) => {
      need(req, 'ADMIN');
      const total = await store.userCount();
      const page = await paginate(
        req,
        total,
        (o, l) => store.listUsers(o, l),
        (u) => u,
      );
      res.json({ ...page, data: await Promise.all(page.data.map(withUsage)) });
    },
    post: async (req, res) => {
      need(req, 'ADMIN');
      const body = requireObject(req.body);
      onlyFields(body, [...FIELDS, ...EXTRA], READ_ONLY);
      requireFields(body, FIELDS);
      usernameField(body); // a bad name is a 400 before the (slow) password hash
      permissionsField(body, 'permissions');
      if (await store.getUser(String(body.username))) throw Errors.userExists();
      // The store refuses a second user of the same name (409) if one came in meanwhile.
      const user = await newUser(body);
      await store.addUser(user);
      const url = `/users/${user.username}`;
      res.status(201).location(url).json({ status: 'success', url });
    },
  });

  route(router, '/users/:name', {
    get: async (req, res) => {
      res.json(await withUsage(await selfOrAdmin(req)));
    },
    patch: update(false),
    put: update(true),
    delete: async (req, res) => {
      const user = await target(req);
      noJsonBody(req);
      await store.deleteUser(user.id);
      success(res, 'User deleted');
    },
  });

  // Additive: "sign out everywhere". Every token of the user issued so far stops working.
  route(router, '/users/:name/tokens', {
    delete: async (req, res) => {
      // An administrator naming no user gets 404, as from the other admin endpoints (GET keeps
      // the contract's 403 for unknown names); anyone else still cannot probe names.
      const user =
        req.caller.permissions.includes('ADMIN') && req.caller.username !== String(req.params.name)
          ? await target(req)
          : await selfOrAdmin(req);
      noJsonBody(req);
      await store.updateUser(user.id, { end_tokens: true });
      success(res, `Every token of ${user.username} was revoked`);
    },
  });

  return router;
}
