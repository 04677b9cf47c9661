import { Router } from 'express';
import { hashPassword, signedIn, verifyPassword } from '../auth.js';
import type { Context } from '../context.js';
import { Errors } from '../errors.js';
import { route, success } from '../http.js';
import { onlyFields, requireFields, requireObject, stringField } from '../validate.js';

export function authRoutes({ store, tokens }: Context): Router {
  const router = Router();

  const issue = (username: string, message: string) => ({
    status: 'success',
    message,
    username,
    auth_token: tokens.issue(username),
  });

  // These paths are POST-only; other methods fall through to /users/<name> (a user lookup).
  route(
    router,
    '/users/login',
    {
      post: async (req, res) => {
        const body = requireObject(req.body);
        onlyFields(body, ['username', 'password']);
        requireFields(body, ['username', 'password']);
        const username = stringField(body, 'username');
        const password = stringField(body, 'password');
        const user = await store.getUser(username);
        // Same answer, and same work, for an unknown user as for a wrong password.
        if (!(await verifyPassword(password, user?.password_hash)) || !user) {
          throw Errors.badCredentials();
        }
        res.json(issue(user.username, 'Signed in'));
      },
    },
    true,
  );

  route(
    router,
    '/users/extend',
    {
      post: async (req, res) => {
        const user = await signedIn(req, store);
        res.json(issue(user.username, 'Token renewed; the old token stays valid until it expires'));
      },
    },
    true,
  );

  route(
    router,
    '/users/logout',
    {
      post: async (req, res) => {
        const caller = await signedIn(req, store);
        const body = requireObject(req.body);
        onlyFields(body, ['token']);
        requireFields(body, ['token']);
        const claims = await tokens.verify(stringField(body, 'token', 8192));
        if (!claims) throw Errors.badRequest('The token is invalid, expired or already revoked');
        if (claims.sub !== caller.username && !caller.permissions.includes('ADMIN')) {
          throw Errors.forbidden('ADMIN');
        }
        await store.revoke(claims.jti, claims.exp);
        success(res, 'Token revoked');
      },
    },
    true,
  );

  route(
    router,
    '/users/password',
    {
      post: async (req, res) => {
        const user = await signedIn(req, store);
        const body = requireObject(req.body);
        onlyFields(body, ['old', 'new']);
        requireFields(body, ['old', 'new']);
        const oldPassword = stringField(body, 'old');
        const newPassword = stringField(body, 'new');
        if (!(await verifyPassword(oldPassword, user.password_hash))) {
          throw Errors.wrongPassword();
        }
        await store.updateUser(user.username, { password_hash: await hashPassword(newPassword) });
        success(res, 'Password changed');
      },
    },
    true,
  );

  return router;
}
