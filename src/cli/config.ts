import { dirname } from 'node:path';
import Conf from 'conf';

/** Non-secret settings: where the last login went. Tokens live in credentials.ts. */
export interface ConfigSchema {
  server?: string;
  username?: string;
  /** ETag each unfinished `get` started with, keyed by the absolute `.part` path. */
  partials?: Record<string, string>;
}

export type Config = Conf<ConfigSchema>;

/** The conf store; `FSHARE_CONFIG_DIR` moves it (tests use a temporary one). */
export function openConfig(): Config {
  const cwd = process.env.FSHARE_CONFIG_DIR || undefined;
  return new Conf<ConfigSchema>({
    projectName: 'fshare',
    projectSuffix: '',
    configName: 'config',
    ...(cwd ? { cwd } : {}),
    accessPropertiesByDotNotation: false, // keys are paths and URLs, which contain dots
  });
}

export function configDir(config: Config): string {
  return dirname(config.path);
}
