/**
 * The fshare API client: one function per endpoint of API.md, plus chunked uploads and
 * resumable downloads. The CLI is built on it; scripts can import it the same way.
 *
 *   const client = createClient({ server: 'http://127.0.0.1:5000', token });
 *   const share = await uploadFile(client, 'build.tar.gz', { parallel: 8 });
 */
export * from './api.js';
export * from './download.js';
export * from './errors.js';
export { filenameFromDisposition, sanitizeFileName } from './filename.js';
export {
  DEFAULT_RETRY,
  closeConnections,
  createClient,
  normalizeServer,
  type ApiClient,
  type ClientOptions,
  type RetryPolicy,
} from './http.js';
export { hashFile } from './hashing.js';
export { createChunkLimiter, createLimiter, type Limiter } from './limit.js';
export { parseShareRef, shareUrl, withServer, type ShareRef } from './refs.js';
export * from './upload.js';
export type * from '../shared/types.js';
export { PERMISSIONS, type Permission } from '../shared/permissions.js';
