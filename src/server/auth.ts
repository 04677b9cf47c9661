import {
  createSecretKey,
  randomBytes,
  randomUUID,
  scrypt,
  timingSafeEqual,
  type KeyObject,
} from 'node:crypto';
import { promisify } from 'node:util';
import type { Request, RequestHandler } from 'express';
import jwt from 'jsonwebtoken';
import type { Permission } from '../shared/permissions.js';
import { Errors } from './errors.js';
import type { MetadataStore, UserRecord } from './store/index.js';

const scryptAsync = promisify(scrypt) as (
  password: string,
  salt: Buffer,
  keylen: number,
  options: { N: number; r: number; p: number; maxmem: number },
) => Promise<Buffer>;

const SCRYPT = { N: 16384, r: 8, p: 1, maxmem: 64 * 1024 * 1024 };
const KEYLEN = 64;

/** `scrypt$N$r$p$salt$hash`, base64 parts: a slow salted hash, parameters kept for later changes. */
export async function hashPassword(password: string): Promise<string> {
  const salt = randomBytes(16);
  const hash = await scryptAsync(password, salt, KEYLEN, SCRYPT);
  return [
    'scrypt',
    SCRYPT.N,
    SCRYPT.r,
    SCRYPT.p,
    salt.toString('base64'),
    hash.toString('base64'),
  ].join('$');
}

// A hash to compare against for unknown users, so "no such user" takes as long as "wrong password".
const DUMMY_HASH = hashPassword(randomBytes(16).toString('hex'));

export async function verifyPassword(
  password: string,
  stored: string | undefined,
): Promise<boolean> {
  const [scheme, n, r, p, salt, hash] = (stored ?? (await DUMMY_HASH)).split('$');
  if (scheme !== 'scrypt' || !salt || !hash) return false;
  const expected = Buffer.from(hash, 'base64');
  const actual = await scryptAsync(password, Buffer.from(salt, 'base64'), expected.length, {
    N: Number(n),
    r: Number(r),
    p: Number(p),
    maxmem: SCRYPT.maxmem,
  });
  return timingSafeEqual(actual, expected) && stored !== undefined;
}

export interface TokenClaims {
  sub: string;
  jti: string;
  iat: number;
  exp: number;
}

/** Who is calling: a user with their permissions, or anonymous with `default_permissions`. */
export interface Caller {
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
  ) {
    this.key = createSecretKey(Buffer.from(secret));
  }

  issue(username: string): string {
    return jwt.sign({}, this.key, {
      algorithm: 'HS256',
      subject: username,
      jwtid: randomUUID(),
      expiresIn: this.lifetimeSeconds,
    });
  }

  /** Verifies signature (HS256 only), expiry and revocation; returns claims or null. */
  async verify(token: string): Promise<TokenClaims | null> {
    let claims: string | jwt.JwtPayload;
    try {
      claims = jwt.verify(token, this.key, { algorithms: ['HS256'] });
    } catch {
      return null;
    }
    if (typeof claims !== 'object' || typeof claims.sub !== 'string') return null;
    if (typeof claims.jti !== 'string' || typeof claims.exp !== 'number') return null;
    if (await this.store.isRevoked(claims.jti)) return null;
    return claims as TokenClaims;
  }
}

/** API.md rules 1 and 2, for every endpoint: identifies the caller or refuses with 401. */
export function identify(tokens: Tokens, store: MetadataStore): RequestHandler {
  return async (req, _res, next) => {
    const header = req.headers.authorization;
    if (header === undefined) {
      req.caller = { username: null, permissions: (await store.getSettings()).default_permissions };
      next();
      return;
    }
    const match = /^Bearer +(\S+) *$/i.exec(header);
    if (!match) throw Errors.badAuthHeader();
    const claims = await tokens.verify(match[1]!);
    const user = claims && (await store.getUser(claims.sub));
    if (!claims || !user) throw Errors.badToken();
    req.caller = { username: user.username, permissions: user.permissions, token: claims };
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
  if (caller.username === null) {
    if (!anonymous || !has) throw Errors.authRequired();
    return;
  }
  if (!has) throw Errors.forbidden(permission!);
}

/** The signed-in user (for endpoints that never allow anonymous use). */
export async function signedIn(req: Request, store: MetadataStore): Promise<UserRecord> {
  need(req, null, false);
  const user = await store.getUser(req.caller.username!);
  if (!user) throw Errors.badToken(); // deleted while this request was on its way
  return user;
}
