import { openStore } from './backends.js';
import { PasswordHasher } from './passwords.js';
import { MissingRecordError } from './store/index.js';
import { hasChars, isWellFormed } from './validate.js';

/** The new password cannot be a password (the rules of `PATCH /users/<name>`). */
export class PasswordRefusedError extends Error {}

/**
 * `fshare admin passwd`: sets a user's password in the metadata itself, as `PATCH /users/<name>`
 * does (the same hash; every token of the user ends), for an administrator who cannot sign in.
 * The embedded store is opened as a server opens it, under the data directory's lock: with its
 * server running, this stops with the lock's one line and changes nothing. Throws
 * MissingRecordError for a user that does not exist.
 */
export async function setPassword(
  backend: { database?: string; dataDir: string },
  name: string,
  password: string,
  log: (line: string) => void,
): Promise<{ username: string }> {
  if (!hasChars(password, 1024))
    throw new PasswordRefusedError('a password must have 1 to 1024 characters');
  if (!isWellFormed(password))
    throw new PasswordRefusedError(
      'a password must be well-formed Unicode (it has a lone surrogate)',
    );
  const { store } = await openStore(
    { dataDir: backend.dataDir, database: backend.database },
    backend.dataDir,
    log,
  );
  const hasher = new PasswordHasher();
  try {
    const user = await store.getUser(name);
    if (!user) throw new MissingRecordError('user');
    await store.updateUser(user.id, {
      password_hash: await hasher.hash(password),
      end_tokens: true,
    });
    return { username: user.username };
  } finally {
    await hasher.close();
    await store.close();
  }
}
