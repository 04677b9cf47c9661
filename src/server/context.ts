import type { Tokens } from './auth.js';
import type { ContentStorage } from './storage.js';
import type { Store } from './store.js';

/** What every route module is built from. */
export interface Context {
  store: Store;
  storage: ContentStorage;
  tokens: Tokens;
  maxChunkBytes: number;
}
