import type { Tokens } from './auth.js';
import type { Limits } from './limits.js';
import type { PasswordHasher } from './passwords.js';
import type { ContentStorage } from './storage/index.js';
import type { MetadataStore } from './store/index.js';
import type { LoginThrottle } from './throttle.js';

/** What every route module is built from. */
export interface Context {
  store: MetadataStore;
  storage: ContentStorage;
  tokens: Tokens;
  passwords: PasswordHasher;
  throttle: LoginThrottle;
  limits: Limits;
}
