// Commands run at once (a CI job's parallel `fshare get`s, two logins) read, change and write back
// the same config.json and credentials.json. Each wrote back the copy it had read, so one
// process's change was lost: the validator of an interrupted download (its --continue then started
// over), or a token stored without the keychain. Now every change takes the file's lock first.
// Real processes, real files: 8 processes make 40 changes each, all at once.
import { readFile, rm, stat } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Config } from '../../src/cli/config.js';
import { partialValidators } from '../../src/cli/context.js';
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
  it('every download validator that 8 processes record is kept', async () => {
    const configDir = join(dir, 'validators');
    await atOnce(`
      const { Config } = await import(${JSON.stringify(join(DIST, 'cli', 'config.js'))});
      const { partialValidators } = await import(${JSON.stringify(join(DIST, 'cli', 'context.js'))});
      const validators = partialValidators(new Config(${JSON.stringify(configDir)}));
      for (let j = 0; j < n; j++) validators.set('/tmp/p-' + who + '-' + j + '.part', { etag: '"e' + j + '"' });
    `);
    const validators = partialValidators(new Config(configDir));
    for (let who = 0; who < PROCESSES; who++)
      for (let j = 0; j < CHANGES; j++)
        expect(validators.get(`/tmp/p-${who}-${j}.part`)).toEqual({ etag: `"e${j}"` });
    // Forgetting one leaves the others.
    validators.set('/tmp/p-3-7.part', undefined);
    expect(validators.get('/tmp/p-3-7.part')).toBeUndefined();
    expect(validators.get('/tmp/p-3-8.part')).toEqual({ etag: '"e8"' });
  });

  it('every change that 8 processes make to one key of config.json is kept', async () => {
    const configDir = join(dir, 'config');
    await atOnce(`
      const { Config } = await import(${JSON.stringify(join(DIST, 'cli', 'config.js'))});
      const config = new Config(${JSON.stringify(configDir)});
      for (let j = 0; j < n; j++)
        config.update('partials', (current) => ({ ...current, ['/tmp/q-' + who + '-' + j]: '"e"' }));
    `);
    const config = JSON.parse(await readFile(join(configDir, 'config.json'), 'utf8')) as {
      partials: Record<string, unknown>;
    };
    expect(Object.keys(config.partials)).toHaveLength(PROCESSES * CHANGES);
  });

  it("an earlier version's validators in config.json are still read, and forgotten when done", async () => {
    const configDir = join(dir, 'legacy');
    const config = new Config(configDir);
    config.set('partials', { [resolve('/tmp/old.part')]: '"v1"', '/tmp/other.part': '"v2"' });
    const validators = partialValidators(config);
    expect(validators.get('/tmp/old.part')).toEqual({ etag: '"v1"' });
    validators.set('/tmp/old.part', undefined);
    expect(validators.get('/tmp/old.part')).toBeUndefined();
    expect(config.get('partials')).toEqual({ '/tmp/other.part': '"v2"' });
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
