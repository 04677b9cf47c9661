// Commands run at once (a CI job's parallel `fshare get`s, two logins) read, change and write back
// the same config.json and credentials.json. Each wrote back the copy it had read, so one
// process's change was lost: the validator of an interrupted download (its --continue then started
// over), or a token stored without the keychain. Now every change takes the file's lock first.
// Real processes, real files: 8 processes make 40 changes each, all at once.
import { readFile, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ROOT, tempDir } from '../helpers/cli.js';

const DIST = join(ROOT, 'dist');
const PROCESSES = 8;
const CHANGES = 40;

let dir: string;
beforeAll(async () => {
  dir = await tempDir('config-turns');
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** Runs `script` (an ES module body, with `who` and `n` in scope) in PROCESSES processes at once. */
async function atOnce(script: string): Promise<void> {
  const body = `const who = process.argv[1]; const n = ${CHANGES};\n${script}`;
  const runs = Array.from({ length: PROCESSES }, (_, who) =>
    execa('node', ['--input-type=module', '-e', body, String(who)], {
      env: { FSHARE_KEYRING: 'off' },
      input: '',
    }),
  );
  for (const run of await Promise.all(runs)) expect(run.exitCode, run.stderr).toBe(0);
}

describe('config.json and credentials.json under commands run at once', () => {
  it('every download validator that 8 processes record is kept (config.json)', async () => {
    const configDir = join(dir, 'config');
    await atOnce(`
      const { Config } = await import(${JSON.stringify(join(DIST, 'cli', 'config.js'))});
      const { partialValidators } = await import(${JSON.stringify(join(DIST, 'cli', 'context.js'))});
      const validators = partialValidators(new Config(${JSON.stringify(configDir)}));
      for (let j = 0; j < n; j++) validators.set('/tmp/p-' + who + '-' + j + '.part', { etag: '"e' + j + '"' });
    `);
    const config = JSON.parse(await readFile(join(configDir, 'config.json'), 'utf8')) as {
      partials: Record<string, unknown>;
    };
    expect(Object.keys(config.partials)).toHaveLength(PROCESSES * CHANGES);
  });

  it('every token that 8 processes store without a keychain is kept (credentials.json, 0600)', async () => {
    const configDir = join(dir, 'credentials');
    await atOnce(`
      const { createCredentialStore } = await import(${JSON.stringify(join(DIST, 'cli', 'credentials.js'))});
      const store = createCredentialStore(${JSON.stringify(configDir)}, () => {});
      for (let j = 0; j < n; j++) await store.saveToken('http://127.0.0.1:1', 'u' + who + '-' + j, 'token-' + who + '-' + j);
    `);
    const file = join(configDir, 'credentials.json');
    const tokens = JSON.parse(await readFile(file, 'utf8')) as Record<string, string>;
    expect(Object.keys(tokens)).toHaveLength(PROCESSES * CHANGES);
    expect(tokens['u3-7@http://127.0.0.1:1']).toBe('token-3-7');
    expect((await stat(file)).mode & 0o777).toBe(0o600);
  });
});
