import { createSecretKey, randomUUID, type KeyObject } from 'node:crypto';
import type { Request, RequestHandler } from 'express';
import jwt from 'jsonwebtoken';
import type { Permission } from '../shared/permissions.js';
import { Errors } from './errors.js';
import { MIN_SECRET_BYTES } from '../shared/secrets.js';
import { tokenSpeaks, type MetadataStore, type UserRecord } from './store/index.js';

export interface TokenClaims {
  /** The user's name when the token was issued (for people reading a token; never trusted). */
  sub: string;
  /** The user's id: the token's identity. Absent in tokens of fshare 0.1. */
  uid?: string;
  /** The user's token generation when the token was issued. */
  gen?: number;
  jti: string;
  iat: number;
  exp: number;
}

/** Who is calling: a user with their permissions, or anonymous with `default_permissions`. */
export interface Caller {
  /** Null for anonymous callers. */
  userId: string | null;
  username: string | null;
  permissions: Permission[];
  token?: TokenClaims;
}

declare module 'express-serve-static-core' {
  interface Request {
    caller: Caller;
  }
}

export class Tokens {
  // A KeyObject made once: given a string, jsonwebtoken first tries (and fails) to parse it as a
  // PEM public key on every call before treating it as a secret.
  private readonly key: KeyObject;

  constructor(
    secret: string,
    private readonly lifetimeSeconds: number,
    private readonly store: MetadataStore,
    /** Milliseconds since the epoch; injectable for tests. */
    private readonly clock: () => number = Date.now,
  ) {
    // Whatever the source (FSHARE_SECRET, the secret file, the database, a caller of
    // createServer): a key that could be guessed is never used.
    if (Buffer.byteLength(secret) < MIN_SECRET_BYTES)
      throw new Error(`the token signing secret must be at least ${MIN_SECRET_BYTES} bytes`);
    this.key = createSecretKey(Buffer.from(secret));
  }

  issue(user: UserRecord): string {
    const iat = Math.floor(this.clock() / 1000);
    return jwt.sign(
      { uid: user.id, gen: user.token_gen, iat, exp: iat + this.lifetimeSeconds },
      this.key,
      { algorithm: 'HS256', subject: user.username, jwtid: randomUUID() },
    );
  }

  /** Verifies signature (HS256 only), expiry and revocation; returns claims or null. */
  async verify(token: string): Promise<TokenClaims | null> {
    let claims: string | jwt.JwtPayload;
    try {
      claims = jwt.verify(token, this.key, {
        algorithms: ['HS256'],
        clockTimestamp: Math.floor(this.clock() / 1000),
      });
    } catch {
      return null;
    }
    if (typeof claims !== 'object' || typeof claims.sub !== 'string') return null;
    if (typeof claims.jti !== 'string' || typeof claims.exp !== 'number') return null;
    if (
      claims.uid !== undefined &&
      (typeof claims.uid !== 'string' || typeof claims.gen !== 'number')
    )
      return null;
    if (await this.store.isRevoked(claims.jti)) return null;
    return claims as TokenClaims;
  }

  /**
   * The user a valid token speaks for, or null: the user with the token's id, if the token is of
   * the user's current generation. A token of fshare 0.1 (no id) speaks for the user it names
   * only while that user still accepts such tokens (carried over, never renamed, generation 0).
   */
  async userOf(claims: TokenClaims): Promise<UserRecord | null> {
    const user = await (claims.uid !== undefined
      ? this.store.getUserById(claims.uid)
      : this.store.getUser(claims.sub));
    return user && speaksFor(claims, user) ? user : null;
  }
}

/**
 * Whether a token still speaks for this user (see Tokens.userOf): a token of the user's current
 * generation, or the one the user's own password change kept.
 */
function speaksFor(claims: TokenClaims, user: UserRecord): boolean {
  if (claims.uid !== undefined)
    return user.id === claims.uid && tokenSpeaks(user, { jti: claims.jti, gen: claims.gen! });
  return user.username === claims.sub && Boolean(user.legacy_tokens) && user.token_gen === 0;
}

function authorizationCount(raw: string[]): number {
  let n = 0;
  for (let i = 0; i < raw.length; i += 2) if (raw[i]!.toLowerCase() === 'authorization') n++;
  return n;
}

/** API.md rules 1 and 2, for every endpoint: identifies the caller or refuses with 401. */
export function identify(tokens: Tokens, store: MetadataStore): RequestHandler {
  return async (req, _res, next) => {
    const header = req.headers.authorization;
    if (header === undefined) {
      const { default_permissions } = await store.getSettings();
      req.caller = { userId: null, username: null, permissions: default_permissions };
      next();
      return;
    }
    const match = /^Bearer +(\S+) *$/i.exec(header);
    // Node keeps the first of repeated Authorization headers; a proxy may pass on the last.
    if (authorizationCount(req.rawHeaders) > 1) throw Errors.twoAuthHeaders();
    if (!match) throw Errors.badAuthHeader();
    const claims = await tokens.verify(match[1]!);
    const user = claims && (await tokens.userOf(claims));
    if (!claims || !user) throw Errors.badToken();
    req.caller = {
      userId: user.id,
      username: user.username,
      permissions: user.permissions,
      token: claims,
    };
    next();
  };
}

/**
 * API.md rules 3 and 4: anonymous callers pass only where the endpoint allows anonymous use and
 * `default_permissions` holds the permission (401 otherwise); signed-in callers need it (403).
 */
export function need(req: Request, permission: Permission | null, anonymous = true): void {
  const { caller } = req;
  const has = permission === null || caller.permissions.includes(permission);
  if (caller.userId === null) {
    if (!anonymous || !has) throw Errors.authRequired();
    return;
  }
  if (!has) throw Errors.forbidden(permission!);
}

/** The signed-in user (for endpoints that never allow anonymous use). */
export async function signedIn(req: Request, store: MetadataStore): Promise<UserRecord> {
  need(req, null, false);
  const user = await store.getUserById(req.caller.userId!);
  // Deleted, or every token of the user ended (a new password, "sign out everywhere"), or this
  // token revoked (a logout, possibly on another server), while this request was on its way:
  // else a token ended meanwhile could still be renewed by extend or commit a chunk.
  const token = req.caller.token;
  if (!user || (token && (!speaksFor(token, user) || (await store.isRevoked(token.jti)))))
    throw Errors.badToken();
  return user;
}

/**
 * Checks again, where a slow request makes its change, that its caller still may: a user
 * deleted, signed out (everywhere, or this token) (401) or stripped of the permission (403), or
 * an anonymous caller whose permission left default_permissions (401), while the request's body
 * streamed in changes nothing.
 */
export async function stillAllowed(
  req: Request,
  store: MetadataStore,
  permission: Permission,
): Promise<void> {
  if (req.caller.userId === null) {
    // An anonymous caller holds what default_permissions hold now (an ADMIN may have taken the
    // permission away, on any server, while the body streamed in): 401 as for a new request.
    const { default_permissions } = await store.getSettings();
    if (!default_permissions.includes(permission)) throw Errors.authRequired();
    return;
  }
  const user = await signedIn(req, store);
  if (!user.permissions.includes(permission)) throw Errors.forbidden(permission);
}
