import { existsSync } from 'node:fs';
import { builtinModules } from 'node:module';
import { cp, mkdir, readdir, readFile, rm, symlink } from 'node:fs/promises';
import { join } from 'node:path';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN, ROOT, cleanEnv, tempDir } from '../helpers/cli.js';

const pkg = JSON.parse(await readFile(join(ROOT, 'package.json'), 'utf8')) as {
  version: string;
  dependencies: Record<string, string>;
};

/** What `npm pack` needs from the repository; the copy builds its own dist/ (prepack). */
const SOURCES = [
  'package.json',
  'tsconfig.json',
  'tsconfig.build.json',
  'README.md',
  'bin',
  'src',
  'scripts',
];

/** Without the variables npm sets for `npm test`, which would point a nested npm at this checkout. */
function npmEnv(): Record<string, string> {
  const env = cleanEnv();
  for (const key of Object.keys(env))
    if (
      key === 'INIT_CWD' ||
      /^npm_(package_|lifecycle_|command|config_(local_|global_)?prefix)/i.test(key)
    )
      delete env[key];
  return env;
}

/** Every package a built file imports (`from 'x'`, `import('x')`), without node: builtins. */
async function importedPackages(dir: string): Promise<Set<string>> {
  const found = new Set<string>();
  for (const file of await readdir(dir, { recursive: true })) {
    if (!file.endsWith('.js')) continue;
    const code = await readFile(join(dir, file), 'utf8');
    for (const m of code.matchAll(/(?:\bfrom|\bimport\(|\brequire\()\s*['"]([^'"]+)['"]/g)) {
      const spec = m[1]!;
      if (spec.startsWith('.') || spec.startsWith('node:') || builtinModules.includes(spec))
        continue;
      found.add(spec.startsWith('@') ? spec.split('/').slice(0, 2).join('/') : spec.split('/')[0]!);
    }
  }
  return found;
}

describe('the npm package, installed globally on a machine with only Node', () => {
  let work: string;
  let prefix: string;
  let fshare: string;
  let elsewhere: string;

  beforeAll(async () => {
    work = await tempDir('package');
    prefix = join(work, 'prefix');
    elsewhere = join(work, 'elsewhere');
    // A copy, so the build prepack runs never rewrites the dist/ other CLI tests are running.
    const repo = join(work, 'repo');
    for (const name of SOURCES) await cp(join(ROOT, name), join(repo, name), { recursive: true });
    await symlink(join(ROOT, 'node_modules'), join(repo, 'node_modules'), 'dir');
    const pack = await execa('npm', ['pack', '--pack-destination', work], {
      cwd: repo,
      env: npmEnv(),
      extendEnv: false,
      stdin: 'ignore',
      reject: false,
    });
    expect(pack.exitCode, `npm pack: ${pack.stderr}`).toBe(0);
    const tarball = (await readdir(work)).find((f) => /^fshare-.*\.tgz$/.test(f));
    expect(tarball, 'npm pack made no fshare-*.tgz').toBeDefined();
    const install = await execa(
      'npm',
      ['install', '-g', '--prefix', prefix, '--no-audit', '--no-fund', join(work, tarball!)],
      { cwd: work, env: npmEnv(), extendEnv: false, stdin: 'ignore', reject: false },
    );
    expect(install.exitCode, `npm install -g: ${install.stderr}`).toBe(0);
    fshare = join(prefix, 'bin', 'fshare');
    await mkdir(elsewhere); // a working directory with no package.json above it
  }, 300_000);

  afterAll(async () => {
    if (work) await rm(work, { recursive: true, force: true });
  });

  it("fshare --version prints package.json's version from an unrelated directory", async () => {
    const res = await execa(fshare, ['--version'], {
      cwd: elsewhere,
      env: cleanEnv(),
      extendEnv: false,
    });
    expect(res.stdout.trim()).toBe(pkg.version);
  });

  it('the installed fshare serves, signs in and answers whoami with its runtime dependencies only', async () => {
    const data = join(work, 'data');
    const config = join(work, 'config');
    const server = execa(fshare, ['serve', '--port', '0', '--data-dir', data], {
      cwd: elsewhere,
      env: cleanEnv({ FSHARE_ADMIN_USER: ADMIN.username, FSHARE_ADMIN_PASSWORD: ADMIN.password }),
      extendEnv: false,
      stdin: 'ignore',
      reject: false,
      buffer: false,
    });
    try {
      const url = await new Promise<string>((resolve, reject) => {
        let out = '';
        server.stdout?.on('data', (d: Buffer) => {
          out += d.toString();
          const m = /Listening on (https?:\/\/\S+)/.exec(out);
          if (m) resolve(m[1]!);
        });
        void server.then((r) => reject(new Error(`fshare serve exited with ${r.exitCode}`)));
      });
      const env = cleanEnv({ FSHARE_CONFIG_DIR: config, FSHARE_KEYRING: 'off' });
      const run = (args: string[], input = '') =>
        execa(fshare, ['--server', url, ...args], {
          cwd: elsewhere,
          env,
          extendEnv: false,
          input,
          reject: false,
        });
      const login = await run(
        ['login', '-u', ADMIN.username, '--password-stdin'],
        `${ADMIN.password}\n`,
      );
      expect(login.exitCode, login.stderr).toBe(0);
      const whoami = await run(['whoami', '--json']);
      expect(whoami.exitCode, whoami.stderr).toBe(0);
      const me = JSON.parse(whoami.stdout) as { username: string; permissions: string[] };
      expect(me.username).toBe(ADMIN.username);
      expect(me.permissions).toContain('ADMIN');
    } finally {
      server.kill('SIGTERM');
    }
    expect((await server).exitCode).toBe(0);
  });

  it('man finds the installed page under the prefix and shows its NAME section', async () => {
    const env = cleanEnv({
      MANPATH: join(prefix, 'share', 'man'),
      MANPAGER: 'cat',
      MANWIDTH: '80',
    });
    const where = await execa('man', ['-w', 'fshare'], { cwd: elsewhere, env, extendEnv: false });
    // npm links share/man/man1/fshare.1 to the package's page, and man -w names the file behind it
    expect(where.stdout.trim()).toMatch(/\/fshare\.1$/);
    expect(where.stdout.trim().startsWith(prefix)).toBe(true);
    expect(existsSync(join(prefix, 'share', 'man', 'man1', 'fshare.1'))).toBe(true);
    const page = await execa('man', ['fshare'], { cwd: elsewhere, env, extendEnv: false });
    const head = page.stdout.split('\n').slice(0, 10).join('\n');
    expect(head).toMatch(/^NAME$/m);
    expect(head).toMatch(/fshare \S+ share files from the terminal/);
  });

  it('nothing in the installed package imports a package outside its runtime dependencies', async () => {
    const installed = join(prefix, 'lib', 'node_modules', 'fshare');
    const imported = await importedPackages(join(installed, 'dist'));
    expect([...imported].filter((name) => !(name in pkg.dependencies))).toEqual([]);
    expect(imported.has('commander')).toBe(true); // the scan does see imports
  });
});
