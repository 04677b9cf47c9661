import { createHash } from 'node:crypto';
import { readFileSync, rmSync } from 'node:fs';
import { join, resolve } from 'node:path';
import type { Command } from 'commander';
import { createClient, normalizeServer, type ApiClient } from '../client/http.js';
import type { Validator, ValidatorStore } from '../client/download.js';
import { parseShareRef } from '../client/refs.js';
import { removeStaleTemps } from '../shared/owned-temp.js';
import {
  ConfigDamagedError,
  openConfig,
  configDir,
  writeWholeSync,
  type Config,
} from './config.js';
import { createCredentialStore, envToken, type CredentialStore } from './credentials.js';
import { sendingEnvToken, warn } from './output.js';

export const DEFAULT_SERVER = 'http://127.0.0.1:5000';

/** The program-wide options of main.ts. */
export interface GlobalOptions {
  server?: string;
  json?: boolean;
  progress?: boolean;
}

export function globals(cmd: Command): GlobalOptions {
  return cmd.optsWithGlobals<GlobalOptions>();
}

/** What every command needs: the server, the saved login and the token store. */
export interface Session {
  readonly opts: GlobalOptions;
  readonly config: Config;
  readonly server: string;
  readonly credentials: CredentialStore;
  /** The user of the last login, when that login was to `server`. */
  usernameFor(server: string): string | undefined;
  /** A client for `server` (default: the resolved one) carrying its stored token, if any. */
  client(server?: string): Promise<ApiClient>;
  /** A client without a token, e.g. for login. */
  anonymousClient(): ApiClient;
  /** A client and id for a share named by id or full URL (the URL's server wins). */
  shareClient(ref: string): Promise<{ client: ApiClient; id: string }>;
}

/** `--server` > FSHARE_SERVER > the server of the last login > http://127.0.0.1:5000. */
export function resolveServer(opts: GlobalOptions, config: Config): string {
  const explicit = opts.server || process.env.FSHARE_SERVER;
  if (explicit) return normalizeServer(explicit);
  const saved = config.get('server');
  if (!saved) return normalizeServer(DEFAULT_SERVER);
  try {
    return normalizeServer(saved);
  } catch (err) {
    throw new ConfigDamagedError(config.path, `"server": ${(err as Error).message}`);
  }
}

/**
 * A damaged config.json stops the command (exit 2) unless the server was named by `--server` or
 * FSHARE_SERVER: then the file cannot send it elsewhere, so one warning line says it is damaged
 * and the command goes on without what it holds (the user of the last login). A command that
 * saves a login there (`savesLogin`) always stops, before it asks the server for anything.
 */
function checkConfig(opts: GlobalOptions, config: Config, savesLogin: boolean): void {
  try {
    config.check();
  } catch (err) {
    const explicit = opts.server || process.env.FSHARE_SERVER;
    if (!(err instanceof ConfigDamagedError) || !explicit || savesLogin) throw err;
    warn(`${err.message}; going on with the server given, without its settings`);
    config.tolerateDamage();
  }
}

export function openSession(cmd: Command, { savesLogin = false } = {}): Session {
  const opts = globals(cmd);
  const config = openConfig();
  checkConfig(opts, config, savesLogin);
  const server = resolveServer(opts, config);
  const credentials = createCredentialStore(configDir(config), warn);

  const usernameFor = (target: string): string | undefined => {
    const saved = config.get('server');
    if (!saved) return undefined;
    try {
      return normalizeServer(saved) === target ? config.get('username') : undefined;
    } catch {
      return undefined;
    }
  };

  // FSHARE_TOKEN is the token for the command's server: a share URL naming another server (one
  // pasted from anywhere) gets that server's stored token or none, never the variable's.
  const withheldFrom = new Set<string>();
  const client = async (target = server): Promise<ApiClient> => {
    const other = normalizeServer(target);
    const foreign = other !== server;
    if (foreign && envToken() !== undefined && !withheldFrom.has(other)) {
      withheldFrom.add(other);
      warn(
        `FSHARE_TOKEN is not sent to ${other}, which is not the command's server (${server}); to use it there, set FSHARE_SERVER=${other}`,
      );
    }
    const token = await credentials.getToken(target, usernameFor(target), { stored: foreign });
    if (!foreign && token !== undefined && token === envToken()) sendingEnvToken();
    return createClient({ server: target, token });
  };

  return {
    opts,
    config,
    server,
    credentials,
    usernameFor,
    client,
    anonymousClient: () => createClient({ server }),
    async shareClient(ref) {
      const parsed = parseShareRef(ref);
      return { client: await client(parsed.server ?? server), id: parsed.id };
    },
  };
}

/**
 * Keeps the validator of each unfinished download, for --continue's If-Range: one small file per
 * `.part` in `<config dir>/partials/`, written whole (temporary file, rename) and removed when the
 * download ends. Parallel downloads never write the same file, so none can lose another's entry
 * (they shared one map in config.json, where fshare 0.1 and earlier versions kept it: still read).
 */
export function partialValidators(
  config: Config,
  options: { onDamaged?: (file: string, reason: string) => void } = {},
): ValidatorStore {
  const dir = join(configDir(config), 'partials');
  // A record write killed before its rename left NAME.json.<pid>-….tmp: nothing else removes it.
  let swept = false;
  const sweep = () => {
    if (!swept) removeStaleTemps(dir);
    swept = true;
  };
  const fileOf = (part: string) =>
    join(dir, `${createHash('sha256').update(resolve(part)).digest('hex').slice(0, 32)}.json`);
  const legacy = (part: string) => {
    const stored = config.get('partials')?.[resolve(part)];
    return typeof stored === 'string' ? { etag: stored } : stored;
  };
  return {
    get: (part) => {
      sweep();
      const file = fileOf(part);
      let text: string | undefined;
      try {
        text = readFileSync(file, 'utf8');
      } catch {
        // none: the older place, else none (--continue then decides without one)
      }
      if (text !== undefined) {
        // A damaged record is never skipped in silence (the download then records its own).
        let record: { part?: unknown; validator?: Validator } | null | undefined;
        try {
          record = JSON.parse(text) as typeof record;
        } catch {
          options.onDamaged?.(file, text === '' ? 'empty' : 'not JSON, or cut short');
        }
        if (record?.part === resolve(part) && record.validator) return record.validator;
        if (
          record !== undefined &&
          (typeof record !== 'object' ||
            record === null ||
            typeof record.part !== 'string' ||
            typeof record.validator !== 'object')
        )
          options.onDamaged?.(file, 'not a download record');
      }
      return legacy(part);
    },
    set: (part, validator) => {
      sweep();
      const file = fileOf(part);
      if (validator === undefined) {
        rmSync(file, { force: true });
        if (legacy(part))
          config.update('partials', (current) => {
            const partials = { ...current };
            delete partials[resolve(part)];
            return Object.keys(partials).length === 0 ? undefined : partials;
          });
        return;
      }
      writeWholeSync(file, `${JSON.stringify({ part: resolve(part), validator })}\n`);
    },
  };
}
