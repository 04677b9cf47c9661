import type { ErrorRequestHandler, RequestHandler } from 'express';
import multer from 'multer';
import { isOutOfSpace } from './fsutil.js';
import { BusyError } from './passwords.js';
import {
  ChunkRefusedError,
  DamagedContentError,
  MissingContentError,
  InsufficientStorageError,
  StorageUnavailableError,
} from './storage/index.js';
import {
  ChangedMeanwhileError,
  DuplicateUserError,
  LastAdminError,
  LockLostError,
  MissingRecordError,
  OutcomeUnknownError,
} from './store/index.js';
import { ThrottledError } from './throttle.js';
import { redactLinkPath } from './redact.js';

/** The one error type routes throw; the error handler turns it into API.md's error body. */
export class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
  }
}

/**
 * The challenge every 401 of the API carries (RFC 9110 §11.6.1 requires one; RFC 6750 §3 gives
 * Bearer's). Found from outside: no 401 had it.
 */
const challenge = (error?: 'invalid_token') => ({
  'WWW-Authenticate': `Bearer realm="fshare"${error ? `, error="${error}"` : ''}`,
});

/** The error table: every refusal the server gives, so messages stay consistent. */
export const Errors = {
  authRequired: () =>
    new HttpError(
      401,
      'Authentication required: send "Authorization: Bearer <token>"',
      challenge(),
    ),
  badAuthHeader: () =>
    new HttpError(401, 'The Authorization header must be "Bearer <token>"', challenge()),
  twoAuthHeaders: () =>
    new HttpError(401, 'The request has more than one Authorization header', challenge()),
  badToken: () =>
    new HttpError(401, 'The token is invalid, expired or revoked', challenge('invalid_token')),
  badCredentials: () => new HttpError(401, 'Wrong username or password', challenge()),
  forbidden: (permission: string) =>
    new HttpError(403, `Permission ${permission} is required for this action`),
  notOwner: () => new HttpError(403, 'Only the owner of the share may do this'),
  wrongPassword: () => new HttpError(403, 'The current password is wrong'),
  notYourUser: () => new HttpError(403, 'You may only read your own user record'),
  shareNotFound: () => new HttpError(404, 'No share with this id'),
  userNotFound: () => new HttpError(404, 'No user with this name'),
  linkNotFound: () => new HttpError(404, 'No link with this id'),
  noContent: () => new HttpError(404, 'The share has no content yet'),
  locked: () => new HttpError(423, 'The share is locked'),
  alreadyInitialized: () =>
    new HttpError(423, 'The share already has content: use PUT to replace it'),
  notInitialized: () =>
    new HttpError(423, 'The share has no content yet: use POST to upload it first'),
  userExists: () => new HttpError(409, 'A user with this name already exists'),
  badRequest: (message: string) => new HttpError(400, message),
  outOfSpace: () =>
    new HttpError(507, 'The server is out of storage space; nothing was changed, try again later'),
  tooManyUploads: (message: string) => new HttpError(429, message),
  quotaExceeded: (message: string) => new HttpError(413, message),
  overloaded: (message: string, retryAfter: number) =>
    new HttpError(503, message, { 'Retry-After': String(retryAfter) }),
} as const;

const CHUNK_STATUS: Record<ChunkRefusedError['reason'], number> = {
  invalid: 400,
  finished: 409,
  superseded: 409,
  digest: 422,
};

/**
 * PostgreSQL's codes for a connection that failed or a server that is shutting down, starting
 * or full (classes 08 and 57P, 53300), and the network's: the database is unreachable.
 */
const DATABASE_DOWN =
  /^(08\d{3}|08P01|57P0[1-4]|53300|ECONNREFUSED|ECONNRESET|ETIMEDOUT|EHOSTUNREACH|ENETUNREACH|EAI_AGAIN)$/;

/**
 * node-postgres's own errors for a connection that failed under a query, which carry no code.
 * Found from outside: a database stopped at once (`pg_ctl -m immediate`) while requests ran
 * answered some of them 500.
 */
const DATABASE_CONNECTION_LOST =
  /^(Connection terminated( unexpectedly| due to connection timeout)?|Client has encountered a connection error and is not queryable|Client was closed and is not queryable|timeout exceeded when trying to connect)$/;

/**
 * A system call on the server's own disk that failed for reasons no request causes: the data
 * directory was removed or made unreadable, the disk went read-only or reports I/O errors.
 * Client strings never become paths (STYLE.md), so such a failure is the operator's to fix, and
 * the request is answered 503 (with the system's message in the log), never 500.
 */
const DISK_FAILURE = /^(ENOENT|ENOTDIR|EACCES|EPERM|EROFS|EIO)$/;

function isDiskFailure(err: unknown): boolean {
  const e = err as { code?: unknown; syscall?: unknown } | null;
  return typeof e?.code === 'string' && typeof e.syscall === 'string' && DISK_FAILURE.test(e.code);
}

/** Whether `err` says the metadata database is not answering (a connection refused or lost). */
export function isDatabaseDown(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return (
    (typeof code === 'string' && DATABASE_DOWN.test(code)) ||
    (code === undefined && err instanceof Error && DATABASE_CONNECTION_LOST.test(err.message))
  );
}

/** Errors of the store and the storage, in HTTP terms; anything else is left as it is. */
export function asHttpError(err: unknown): unknown {
  if (err instanceof HttpError) return err;
  if (err instanceof ChunkRefusedError) return new HttpError(CHUNK_STATUS[err.reason], err.message);
  if (err instanceof InsufficientStorageError) return new HttpError(507, err.message);
  if (isOutOfSpace(err)) return Errors.outOfSpace();
  if (err instanceof ThrottledError)
    return new HttpError(429, err.message, { 'Retry-After': String(err.retryAfter) });
  if (err instanceof BusyError) return Errors.overloaded(err.message, 1);
  const code = (err as { code?: unknown } | null)?.code;
  if (code === 'EMFILE' || code === 'ENFILE')
    return Errors.overloaded('The server has too many open files right now; try again', 5);
  // Not "not answering; try again": no retry brings it back (found from outside, after an older
  // db.json was restored).
  if (err instanceof MissingContentError)
    return new HttpError(
      503,
      "The stored content of this share is missing (its record names a file the storage does not hold); the server's administrator must restore it from a backup",
    );
  if (err instanceof DamagedContentError)
    return new HttpError(
      503,
      "The stored content of this share is damaged (it is not the size its record says); the server's administrator must restore it from a backup",
    );
  if (err instanceof StorageUnavailableError)
    return Errors.overloaded('The content storage is not answering right now; try again', 5);
  if (isDiskFailure(err))
    return Errors.overloaded('The server cannot use its storage right now; try again', 5);
  if (err instanceof LockLostError)
    return Errors.overloaded(
      'The server lost its lock on this share (its database connection dropped) and stopped this change; try again',
      1,
    );
  if (err instanceof OutcomeUnknownError)
    return Errors.overloaded(
      'The metadata database stopped answering while this change was written, so whether it was made is unknown; check, then try again',
      5,
    );
  if (isDatabaseDown(err))
    return Errors.overloaded('The metadata database is not answering right now; try again', 5);
  // Each kind says what is missing: a link revoked while a request used it is no missing user.
  if (err instanceof MissingRecordError)
    return err.kind === 'share'
      ? Errors.shareNotFound()
      : err.kind === 'link'
        ? Errors.linkNotFound()
        : Errors.userNotFound();
  if (err instanceof DuplicateUserError) return Errors.userExists();
  if (err instanceof LastAdminError) return new HttpError(409, err.message);
  if (err instanceof ChangedMeanwhileError) return new HttpError(412, err.message);
  return err;
}

/**
 * The method an error message names: a HEAD is answered with the headers of the GET, so its
 * Content-Length must be that of the GET's message (RFC 9110 §9.3.2); found from outside, "HEAD"
 * made it one byte longer.
 */
const namedMethod = (req: { method: string }) => (req.method === 'HEAD' ? 'GET' : req.method);

export const notFound: RequestHandler = (req) => {
  throw new HttpError(
    404,
    `No route for ${namedMethod(req)} ${redactLinkPath(req.path, undefined)}`,
  );
};

/** Answers 405 with an Allow header for a known path with another method. */
export function methodNotAllowed(allowed: string[]): RequestHandler {
  const allow = allowed.join(', ');
  return (req) => {
    throw new HttpError(405, `Method ${namedMethod(req)} is not allowed here (allowed: ${allow})`, {
      Allow: allow,
    });
  };
}

/** What busboy (under multer) throws for a malformed multipart body: the client's fault, a 400. */
const BUSBOY_ERRORS =
  /^(Malformed (content type|part header|urlencoded form)|Missing Content-Type|Multipart: Boundary not found|Unexpected end of (file|form))$/;

interface StatusCarrier {
  status?: unknown;
  statusCode?: unknown;
  type?: unknown;
  expose?: unknown;
}

/** Turns anything thrown into `{status: "fail", message}` with the right code; never a stack. */
export function errorHandler(log?: (line: string) => void): ErrorRequestHandler {
  return (thrown: unknown, _req, res, next) => {
    if (res.headersSent) {
      next(thrown);
      return;
    }
    const err = asHttpError(thrown);
    let status = 500;
    let message = 'Internal server error';
    let headers: Record<string, string> = {};
    if (err instanceof HttpError) {
      ({ status, message, headers } = err);
    } else if (err instanceof multer.MulterError) {
      status = err.code === 'LIMIT_FILE_SIZE' ? 413 : 400;
      message =
        err.code === 'LIMIT_FILE_SIZE'
          ? 'The chunk is larger than the server accepts'
          : `Bad multipart body: ${err.message}`;
    } else if (err && typeof err === 'object') {
      // body-parser and busboy errors carry a 4xx status and a safe message.
      const e = err as StatusCarrier & Error;
      const code = Number(e.status ?? e.statusCode);
      if (code >= 400 && code < 500) {
        status = code;
        message =
          e.type === 'entity.parse.failed'
            ? 'The request body is not valid JSON'
            : e.type === 'entity.too.large'
              ? 'The request body is too large'
              : e.type === 'charset.unsupported'
                ? `A JSON body is read as UTF-8, UTF-16 or UTF-32 (this one's Content-Type names charset ${JSON.stringify(String((e as { charset?: unknown }).charset ?? '').slice(0, 40))})`
                : String(e.message);
      } else if (/^Request (aborted|closed)$/.test(String(e.message))) {
        // The client went away in the middle of its body: nobody is left to answer.
        status = 400;
        message = 'The request was cut off before its body ended';
      } else if (BUSBOY_ERRORS.test(String(e.message))) {
        status = 400;
        message = `Bad multipart body: ${e.message}`;
      }
    }
    // A bug is worth a stack trace; a full disk (507) is an expected condition, said in a line,
    // and so is a database or object store that does not answer (503), with what it said.
    if (status === 500 && log) log(`error: ${err instanceof Error ? err.stack : String(err)}`);
    else if (status === 503 && log && !(thrown instanceof HttpError))
      log(`unavailable: ${thrown instanceof Error ? thrown.message : String(thrown)}`);
    else if (status === 507 && log) log(`refused with 507: ${message}`);
    // Headers a download set before failing must not describe the error body.
    res.removeHeader('Content-Disposition');
    res.status(status).set(headers).type('application/json').json({ status: 'fail', message });
  };
}
