/** The server answered with an error status; `message` is the server's own sentence. */
export class ApiError extends Error {
  override readonly name = 'ApiError';
  /** The next step to suggest (undefined: the usual one for the status; null: none). */
  hint?: string | null;
  constructor(
    readonly status: number,
    message: string,
    readonly body?: unknown,
    readonly headers: Record<string, string | string[] | undefined> = {},
  ) {
    super(message);
  }
}

/**
 * What was transferred could not be proved right: the server's sha256 differs from the bytes
 * sent or received, or the server never confirmed an upload.
 */
export class VerificationError extends Error {
  override readonly name = 'VerificationError';
}

/** The server could not be reached, or the connection broke, after every retry. */
export class NetworkError extends Error {
  override readonly name = 'NetworkError';
  constructor(
    message: string,
    readonly attempts: number,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/** The HTTP proxy (HTTPS_PROXY…) refused the way to the server: no retry mends it (exit 6). */
export class ProxyError extends Error {
  override readonly name = 'ProxyError';
}

/** The caller passed something the client refuses before any request (a bad id, URL or range). */
export class ClientInputError extends Error {
  override readonly name = 'ClientInputError';
}

/** An artifact's manifest is wrong or hostile (a path out of the folder…): nothing is written. */
export class ManifestError extends Error {
  override readonly name = 'ManifestError';
}

/** No artifact of that name on the server. */
export class NoArtifactError extends Error {
  override readonly name = 'NoArtifactError';
}

/** The server lacks an fshare extension the command needs (share links, expiry). */
export class UnsupportedError extends Error {
  override readonly name = 'UnsupportedError';
}

/**
 * The server refused a field it does not know: the reference server answers an fshare field
 * (expires_in, max_expiry…) with 400 "Invalid data: {'expires_in': ['Unknown field.']}" rather
 * than ignoring it.
 */
export function unknownFieldRefused(err: unknown, field: string): boolean {
  return (
    err instanceof ApiError &&
    err.status === 400 &&
    err.message.includes(`'${field}': ['Unknown field.']`)
  );
}

const NETWORK_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ECONNABORTED',
  'EPIPE',
  'ETIMEDOUT',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'EHOSTDOWN',
  'ENETUNREACH',
  'ENETDOWN',
  'UND_ERR_SOCKET',
  'UND_ERR_CLOSED',
  'UND_ERR_CONNECT_TIMEOUT',
  'UND_ERR_HEADERS_TIMEOUT',
  'UND_ERR_BODY_TIMEOUT',
  'UND_ERR_RES_CONTENT_LENGTH_MISMATCH',
  'ERR_STREAM_PREMATURE_CLOSE',
  // The proxy answered CONNECT with a 5xx: it could not reach the server (proxy.ts).
  'EPROXYCONNECT',
]);

function codeOf(err: unknown): string | undefined {
  if (typeof err !== 'object' || err === null) return undefined;
  const code = (err as { code?: unknown }).code;
  return typeof code === 'string' ? code : undefined;
}

/** True for failures of the transport (refused, reset, timed out), which are worth retrying. */
export function isTransportError(err: unknown): boolean {
  if (err instanceof NetworkError) return true;
  const code = codeOf(err);
  if (code && NETWORK_CODES.has(code)) return true;
  // Happy-eyeballs connects fail with an AggregateError of the per-address errors.
  if (err instanceof AggregateError) return err.errors.some(isTransportError);
  const cause = (err as { cause?: unknown } | null)?.cause;
  return cause !== undefined && cause !== err && isTransportError(cause);
}

/** True when the request certainly never reached the server, so even a POST may be re-sent. */
export function isConnectError(err: unknown): boolean {
  const code = codeOf(err);
  if (code === 'ECONNREFUSED' || code === 'UND_ERR_CONNECT_TIMEOUT' || code === 'ENOTFOUND')
    return true;
  if (code === 'EAI_AGAIN' || code === 'EHOSTUNREACH' || code === 'ENETUNREACH') return true;
  if (code === 'EPROXYCONNECT') return true;
  if (err instanceof AggregateError) return err.errors.some(isConnectError);
  return false;
}

/** A short human description of a transport failure: "connection refused". */
export function describeTransportError(err: unknown): string {
  const code = codeOf(err) ?? (err instanceof AggregateError ? codeOf(err.errors[0]) : undefined);
  switch (code) {
    case 'ECONNREFUSED':
      return 'connection refused';
    case 'ECONNRESET':
    case 'UND_ERR_SOCKET':
    case 'UND_ERR_CLOSED':
      return 'connection reset';
    case 'ENOTFOUND':
    case 'EAI_AGAIN':
      return 'host not found';
    case 'ETIMEDOUT':
    case 'UND_ERR_CONNECT_TIMEOUT':
    case 'UND_ERR_HEADERS_TIMEOUT':
    case 'UND_ERR_BODY_TIMEOUT':
      return 'timed out';
    case 'UND_ERR_RES_CONTENT_LENGTH_MISMATCH':
      return 'response cut short';
    default:
      return err instanceof Error && err.message ? err.message : 'network error';
  }
}

/** The server's TLS certificate could not be trusted, or the server does not speak TLS. */
export class TlsError extends Error {
  override readonly name = 'TlsError';
}

const TLS_REASONS: Record<string, string> = {
  DEPTH_ZERO_SELF_SIGNED_CERT: 'its TLS certificate is self-signed',
  SELF_SIGNED_CERT_IN_CHAIN: 'its TLS certificate chain ends in a self-signed certificate',
  UNABLE_TO_GET_ISSUER_CERT_LOCALLY: 'its TLS certificate is signed by an unknown authority',
  UNABLE_TO_GET_ISSUER_CERT: 'its TLS certificate is signed by an unknown authority',
  UNABLE_TO_VERIFY_LEAF_SIGNATURE: 'its TLS certificate cannot be verified',
  CERT_HAS_EXPIRED: 'its TLS certificate has expired',
  CERT_NOT_YET_VALID: 'its TLS certificate is not valid yet',
  ERR_TLS_CERT_ALTNAME_INVALID: 'its TLS certificate is for another host name',
  CERT_REVOKED: 'its TLS certificate was revoked',
};

/**
 * A TLS failure in words, with the way on; undefined for other errors. `server` is the URL the
 * client was talking to.
 */
export function tlsError(server: string, err: unknown): TlsError | undefined {
  const code = codeOf(err);
  const message = err instanceof Error ? err.message : '';
  if (code && TLS_REASONS[code])
    return new TlsError(
      `cannot trust ${server}: ${TLS_REASONS[code]} (to trust its authority, set NODE_EXTRA_CA_CERTS to its CA certificate file)`,
      { cause: err },
    );
  if (
    code === 'EPROTO' ||
    code === 'ERR_SSL_WRONG_VERSION_NUMBER' ||
    /wrong version number/.test(message)
  )
    return new TlsError(
      `${server} does not speak TLS there (try http:// instead of https://, or another port)`,
      { cause: err },
    );
  return undefined;
}

/**
 * An answer that is not HTTP, in words; undefined for other errors. `server` is the URL the client
 * was talking to. Node's parser says only "Parse Error: Expected HTTP/, RTSP/ or ICE/".
 */
export function notHttpError(server: string, err: unknown): Error | undefined {
  const code = codeOf(err);
  if (code === 'HPE_INVALID_CONSTANT')
    // Its first bytes are not HTTP: another service on that port (an SSH server's banner, say).
    return new NetworkError(
      `${server} does not speak HTTP there (try another port${server.startsWith('http:') ? ', or https:// instead of http://' : ''})`,
      1,
      { cause: err },
    );
  if (code?.startsWith('HPE_'))
    return new Error(`the server's answer is not valid HTTP (${(err as Error).message})`, {
      cause: err,
    });
  return undefined;
}
