import { Router, type Request } from 'express';
import { signedIn } from '../auth.js';
import type { Context } from '../context.js';
import { Errors } from '../errors.js';
import { route, success } from '../http.js';
import type { UserRecord } from '../store/index.js';
import {
  noJsonBody,
  onlyFields,
  passwordField,
  requireFields,
  requireObject,
  stringField,
} from '../validate.js';

/**
 * The client's address: failed sign-ins, link passwords and link resumes are counted against it.
 * Behind a trusted proxy (`trustProxy`), the one it forwarded; otherwise the connection's.
 */
export function clientAddress(req: Request): string {
  return req.ip ?? req.socket.remoteAddress ?? 'unknown';
}

export function authRoutes({ store, tokens, passwords, throttle }: Context): Router {
  const router = Router();

  const issue = (user: UserRecord, message: string) => ({
    status: 'success',
    message,
    username: user.username,
    auth_token: tokens.issue(user),
  });

  /**
   * A password check that counts against the sign-in limits: refused (429) while they are used
   * up, before any hashing; a wrong password is counted; a right one clears the caller's count.
   */
  const checkPassword = async (
    req: Request,
    username: string,
    password: string,
    stored?: string,
  ) => {
    const address = clientAddress(req);
    const attempt = await throttle.attempt(username, address, req.socket);
    let ok: boolean;
    try {
      // Same work for an unknown user as for a wrong password.
      ok = await passwords.verify(password, stored);
    } catch (err) {
      await attempt.unchecked();
      throw err;
    }
    if (ok) await attempt.succeeded();
    else attempt.failed();
    return ok;
  };

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
        if (!(await checkPassword(req, username, password, user?.password_hash)) || !user) {
          throw Errors.badCredentials();
        }
        // A hash made with older parameters is replaced while the password is at hand. The
        // token generation stays: this is the same password. Busy (503) → next time.
        if (passwords.outdated(user.password_hash)) {
          const rehashed = await passwords.hash(password).catch(() => null);
          if (rehashed) await store.updateUser(user.id, { password_hash: rehashed });
        }
        res.json(issue(user, 'Signed in'));
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
        noJsonBody(req);
        res.json(issue(user, 'Token renewed; the old token stays valid until it expires'));
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
        const owner = claims && (await tokens.userOf(claims));
        if (!claims || !owner)
          throw Errors.badRequest('The token is invalid, expired or already revoked');
        if (owner.id !== caller.id && !caller.permissions.includes('ADMIN')) {
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
        const newPassword = passwordField(body, 'new');
        if (!(await checkPassword(req, user.username, oldPassword, user.password_hash))) {
          throw Errors.wrongPassword();
        }
        // Every other token issued before ends here. The caller's goes on working, as on the
        // reference server, whose clients keep using it (sachet-ui does); the caller also gets
        // a new one (additive field). A token of fshare 0.1 (no generation) is not kept.
        const password_hash = await passwords.hash(newPassword);
        const claims = req.caller.token;
        const token_gen = await store.updateUser(user.id, {
          password_hash,
          end_tokens: true,
          ...(claims?.gen !== undefined && { keep_token: { jti: claims.jti, gen: claims.gen } }),
        });
        res.json(
          issue(
            { ...user, password_hash, token_gen },
            'Password changed; every other token was revoked',
          ),
        );
      },
    },
    true,
  );

  return router;
}
