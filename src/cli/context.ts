import { resolve } from 'node:path';
import type { Command } from 'commander';
import { createClient, normalizeServer, type ApiClient } from '../client/http.js';
import type { ValidatorStore } from '../client/download.js';
import { parseShareRef } from '../client/refs.js';
import { openConfig, configDir, type Config } from './config.js';
import { createCredentialStore, type CredentialStore } from './credentials.js';
import { warn } from './output.js';

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
  const saved = config.get('server');
  return normalizeServer(opts.server || process.env.FSHARE_SERVER || saved || DEFAULT_SERVER);
}

export function openSession(cmd: Command): Session {
  const opts = globals(cmd);
  const config = openConfig();
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

  const client = async (target = server): Promise<ApiClient> => {
    const token = await credentials.getToken(target, usernameFor(target));
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

/** Keeps the validator of each unfinished download in the config, for --continue's If-Range. */
export function partialValidators(config: Config): ValidatorStore {
  return {
    get: (part) => {
      const stored = config.get('partials')?.[resolve(part)];
      return typeof stored === 'string' ? { etag: stored } : stored;
    },
    set: (part, validator) =>
      config.update('partials', (current) => {
        const partials = { ...current };
        if (validator === undefined) delete partials[resolve(part)];
        else partials[resolve(part)] = validator;
        return Object.keys(partials).length === 0 ? undefined : partials;
      }),
  };
}
