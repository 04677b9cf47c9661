import { createHash, randomUUID } from 'node:crypto';
import { Router, type Request, type Response } from 'express';
import { isoNoZone } from '../../shared/dates.js';
import { need } from '../auth.js';
import type { Context } from '../context.js';
import { Errors } from '../errors.js';
import { paginate, route, success, userJson } from '../http.js';
import {
  ChangedMeanwhileError,
  type UserChanges,
  type UserRecord,
  type UserState,
} from '../store/index.js';
import {
  noJsonBody,
  onlyFields,
  passwordField,
  permissionsField,
  quotaField,
  requireFields,
  requireObject,
  usernameField,
  type Body,
} from '../validate.js';

const FIELDS = ['username', 'password', 'permissions'] as const;
/** Additive: a storage quota in bytes (null for none), set by ADMIN. */
const EXTRA = ['quota'] as const;
const READ_ONLY = ['register_date', 'used'];

/**
 * A user's ETag (additive): stands for the account (its id) and its name, permissions and quota
 * (not `used`). Found from outside: without the id, a user deleted and made again under the same
 * name, or two users who swapped names, had the same tag, and an If-Match read from one applied
 * its change (ADMIN) to the other.
 */
function userTag(user: UserState & { id: string }): string {
  const state = JSON.stringify([user.id, user.username, user.permissions, user.quota ?? null]);
  return `"${createHash('sha256').update(state).digest('base64url').slice(0, 22)}"`;
}

/**
 * Whether the request has an If-Match to hold the change to (RFC 9110 §13.1.1): none, false; one
 * that does not match the user as it is now, 412 (ChangedMeanwhileError) before anything else.
 */
function matchesIfMatch(req: Request, user: UserState & { id: string }): boolean {
  const header = req.get('if-match');
  if (header === undefined) return false;
  const tags = header.split(',').map((t) => t.trim());
  if (tags.includes('*')) return false; // any current user: target() found one
  if (!tags.includes(userTag(user))) throw new ChangedMeanwhileError();
  return true;
}

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
    // Additive: If-Match with the ETag of GET /users/<name>: a read-modify-write (`fshare users
    // perms bob +READ`) applies only to the user as it was read, never over another's change.
    const expect = matchesIfMatch(req, user) ? user : undefined;
    const body = requireObject(req.body);
    onlyFields(body, [...FIELDS, ...EXTRA], READ_ONLY);
    if (complete) requireFields(body, FIELDS);
    const changes: UserChanges = {};
    // A name that is taken is refused by the store at the moment of writing (409).
    if ('username' in body) changes.username = usernameField(body);
    if ('permissions' in body) changes.permissions = permissionsField(body, 'permissions');
    if ('quota' in body) changes.quota = quotaField(body);
    if ('password' in body) {
      changes.password_hash = await passwords.hash(passwordField(body, 'password'));
      changes.end_tokens = true; // a new password ends every older token
    }
    await store.updateUser(user.id, changes, expect);
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
    password_hash: await passwords.hash(passwordField(body, 'password')),
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
      const user = await selfOrAdmin(req);
      res.set('ETag', userTag(user)).json(await withUsage(user));
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
