import type { Tokens } from './auth.js';
import type { ContentStorage } from './storage/index.js';
import type { MetadataStore } from './store/index.js';

/** What every route module is built from. */
export interface Context {
  store: MetadataStore;
  storage: ContentStorage;
  tokens: Tokens;
  maxChunkBytes: number;
}
