import { readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, join } from 'node:path';
import { withFileLockSync } from '../shared/filelock.js';
import { ownedTempName, removeStaleTemps } from '../shared/owned-temp.js';
import { naming } from '../shared/syserr.js';
import { UsageError } from './output.js';
import { makeDirsSync } from '../shared/mkdirs.js';

/** Non-secret settings: where the last login went. Tokens live in credentials.ts. */
export interface ConfigSchema {
  server?: string;
  username?: string;
  /**
   * The validator (strong ETag or Last-Modified) each unfinished `get` started with, keyed by the
   * absolute `.part` path. A plain string is an ETag (written by fshare 0.1).
   */
  partials?: Record<string, string | { etag?: string; lastModified?: string }>;
}

/**
 * The settings file, `config.json` in fshare's config directory: the file and the place the
 * `conf` package used (fshare 0.1 read and wrote it with conf), kept so that existing settings
 * carry over. conf itself was replaced by these few lines because loading it (ajv and friends)
 * cost every command, `serve` included, about 16 MB of memory (README, dependency table).
 * Every change is written whole (temporary file, then rename), mode 0600.
 */
export class Config {
  readonly path: string;

  constructor(dir: string) {
    this.path = join(dir, 'config.json');
  }

  /** Set by tolerateDamage(): reads then see a damaged file as empty (writes still refuse). */
  private tolerant = false;

  /**
   * The settings, or ConfigDamagedError when the file is not what fshare writes: falling back to
   * the defaults would send a command to another server than the one configured, unsaid.
   */
  private read(strict = !this.tolerant): ConfigSchema {
    let text: string;
    try {
      text = readFileSync(this.path, 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return {};
      throw naming(err, this.path); // unreadable: "permission denied: PATH", never the defaults
    }
    const damage = configDamage(text);
    if (damage === undefined) return JSON.parse(text) as ConfigSchema;
    if (strict) throw new ConfigDamagedError(this.path, damage);
    return {};
  }

  /** Throws ConfigDamagedError (or the error reading the file) when the file is damaged. */
  check(): void {
    this.read(true);
  }

  /**
   * From now on a damaged file reads as empty (for a command told its server explicitly, which
   * has said so in a warning); changes still refuse to overwrite it.
   */
  tolerateDamage(): void {
    this.tolerant = true;
  }

  private write(data: ConfigSchema): void {
    writeWholeSync(this.path, `${JSON.stringify(data, null, '\t')}\n`);
  }

  get<K extends keyof ConfigSchema>(key: K): ConfigSchema[K] {
    return this.read()[key];
  }

  set<K extends keyof ConfigSchema>(key: K, value: ConfigSchema[K]): void {
    this.update(key, () => value);
  }

  /**
   * Sets several keys in one write under the lock: a login's server and user name, which two
   * logins run at once (to two servers) could otherwise interleave into one's server with the
   * other's user.
   */
  assign<K extends keyof ConfigSchema>(values: Pick<ConfigSchema, K>): Pick<ConfigSchema, K> {
    // Nothing is written when nothing changes: a login again as the same user on the same
    // server holds on a full disk, instead of failing on config.json.
    const before: Partial<ConfigSchema> = {};
    this.updateMany((data) => {
      let changed = false;
      for (const key of Object.keys(values) as K[]) {
        before[key] = data[key];
        if (data[key] === values[key]) continue;
        if (values[key] === undefined) delete data[key];
        else data[key] = values[key];
        changed = true;
      }
      return changed;
    });
    return before as Pick<ConfigSchema, K>;
  }

  delete(key: keyof ConfigSchema): void {
    this.update(key, () => undefined);
  }

  /**
   * Changes one key from its current value (`undefined` removes it), read and written under the
   * config's lock, so that commands run at once never write back each other's stale copies.
   */
  update<K extends keyof ConfigSchema>(
    key: K,
    change: (current: ConfigSchema[K]) => ConfigSchema[K],
  ): void {
    this.updateMany((data) => {
      const value = change(data[key]);
      if (value === undefined) {
        if (!(key in data)) return false;
        delete data[key];
      } else data[key] = value;
    });
  }

  /** Reads, changes (`false`: nothing to write) and writes the whole file under the lock. */
  private updateMany(change: (data: ConfigSchema) => unknown): void {
    try {
      makeDirsSync(dirname(this.path)); // for the lock file
    } catch {
      // write() says why, if there is anything to write
    }
    withFileLockSync(`${this.path}.lock`, () => {
      const data = this.read(true); // a damaged file is never written over
      if (change(data) !== false) this.write(data);
    });
  }
}

/** config.json is not what fshare writes: cut short, not JSON, or a field of the wrong type. */
export class ConfigDamagedError extends Error {
  override readonly name = 'ConfigDamagedError';
  constructor(
    readonly path: string,
    readonly reason: string,
  ) {
    super(`the config file ${path} is damaged (${reason}); fix it or remove it`);
  }
}

/** What is wrong with the text of config.json, or undefined when nothing is. */
export function configDamage(text: string): string | undefined {
  if (text.trim() === '') return 'it is empty';
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return 'it is not valid JSON';
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value))
    return 'it is not a JSON object';
  const data = value as Record<string, unknown>;
  for (const key of ['server', 'username'] as const)
    if (data[key] !== undefined && typeof data[key] !== 'string') return `"${key}" is not a string`;
  const partials = data.partials;
  if (partials !== undefined) {
    if (typeof partials !== 'object' || partials === null || Array.isArray(partials))
      return '"partials" is not an object';
    for (const entry of Object.values(partials))
      if (typeof entry !== 'string' && (typeof entry !== 'object' || entry === null))
        return 'an entry of "partials" is neither a string nor an object';
  }
  return undefined; // keys it does not know are left alone: a newer fshare may have written them
}

/** Where conf put fshare's settings on each system (env-paths with no suffix). */
function defaultDir(): string {
  if (process.platform === 'win32' && process.env.APPDATA)
    return join(process.env.APPDATA, 'fshare', 'Config');
  if (process.platform !== 'darwin' && process.platform !== 'win32' && process.env.XDG_CONFIG_HOME)
    return join(process.env.XDG_CONFIG_HOME, 'fshare');
  const home = homeDir();
  if (process.platform === 'darwin') return join(home, 'Library', 'Preferences', 'fshare');
  if (process.platform === 'win32') return join(home, 'AppData', 'Roaming', 'fshare', 'Config');
  return join(home, '.config', 'fshare');
}

/**
 * The user's home directory. Without HOME, for a user the system has no entry for (a container
 * run with an arbitrary uid, `env -i`), Node throws "A system error occurred: uv_os_homedir
 * returned ENOENT": found from outside as every command's only line, FSHARE_TOKEN set or not.
 */
function homeDir(): string {
  try {
    return homedir();
  } catch {
    const uid = process.getuid?.();
    throw new UsageError(
      `no config directory: HOME is not set${uid === undefined ? '' : ` and user ${uid} has no home directory`}; set FSHARE_CONFIG_DIR (or HOME) to a directory of yours`,
    );
  }
}

/** The settings store; `FSHARE_CONFIG_DIR` moves it (tests use a temporary one). */
export function openConfig(): Config {
  return new Config(process.env.FSHARE_CONFIG_DIR || defaultDir());
}

export function configDir(config: Config): string {
  return dirname(config.path);
}

/** The files written whole (through ownedTempName) at the top of the config directory. */
const WHOLE_FILES = ['credentials.json', 'config.json', 'push-hashes.json'];

/**
 * Removes the temporary files a killed write of those files left (`NAME.<pid>-<host>-….tmp`, its
 * process gone; credentials.json's may hold a token): nothing else would. Only those names: the
 * rest of the directory is not ours to judge. Run before every command; never fails one.
 */
export function sweepConfigTemps(): void {
  try {
    removeStaleTemps(configDir(openConfig()), WHOLE_FILES);
  } catch {
    // A temp that cannot be removed now (a read-only directory) is tried again next time.
  }
}

/**
 * Writes a small file of the config directory whole or not at all: a 0600 temporary file beside
 * it, renamed over it (its directory made 0700 first). Errors name the file.
 */
export function writeWholeSync(path: string, text: string): void {
  const tmp = ownedTempName(path);
  try {
    makeDirsSync(dirname(path));
    writeFileSync(tmp, text, { mode: 0o600 });
    renameSync(tmp, path);
  } catch (err) {
    rmSync(tmp, { force: true });
    // A directory out of inodes refuses the temporary file by its name, which is not the file
    // being written.
    const failed = err as { path?: string };
    if (failed.path === tmp) failed.path = path;
    throw naming(err, path);
  }
}
