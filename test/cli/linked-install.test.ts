// fshare run from an install whose packages are symbolic links, as pnpm lays them out (or a
// node_modules linked in from elsewhere), with its standard error a pipe, as under systemd or
// docker. Found from outside: there `fshare serve` imported jsonwebtoken (and content-disposition)
// as empty objects, and every sign-in was a 500 ("jwt.sign is not a function"); with a real
// node_modules, or standard error a file, it worked. The cause: the start's plain fstat of a pipe
// left a buffer that Node's realpath reads saying "pipe", and realpath then stopped following
// links (nodejs/node#51142); every stat in fshare is a bigint one now. Here the built package is
// copied beside a node_modules of links to this repository's packages, and a session runs
// through it.
import { randomBytes, createHash } from 'node:crypto';
import { cp, mkdir, readdir, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN, ROOT, cleanEnv, tempDir } from '../helpers/cli.js';

let root: string;
let bin: string;
let serve: ReturnType<typeof execa> | undefined;
let url: string;
let stderr = '';

const env = (config: string) => cleanEnv({ FSHARE_CONFIG_DIR: config, FSHARE_KEYRING: 'off' });

beforeAll(async () => {
  root = await tempDir('linked-install');
  for (const part of ['dist', 'bin', 'package.json'])
    await cp(join(ROOT, part), join(root, part), { recursive: true });
  await mkdir(join(root, 'node_modules'));
  for (const entry of await readdir(join(ROOT, 'node_modules')))
    await symlink(join(ROOT, 'node_modules', entry), join(root, 'node_modules', entry));
  bin = join(root, 'bin', 'fshare.js');
  const config = join(root, 'server-config');
  serve = execa(
    'node',
    [bin, 'serve', '--port', '0', '--data-dir', join(root, 'data'), '--min-free', '16m'],
    {
      env: {
        ...env(config),
        FSHARE_ADMIN_USER: ADMIN.username,
        FSHARE_ADMIN_PASSWORD: ADMIN.password,
      },
      extendEnv: false,
      stdin: 'ignore',
      stdout: 'pipe',
      stderr: 'pipe',
      reject: false,
      buffer: false,
    },
  );
  serve.stderr?.on('data', (d: Buffer) => (stderr += d.toString()));
  url = await new Promise<string>((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => reject(new Error(`serve did not start: ${stderr}`)), 30_000);
    serve!.stdout?.on('data', (d: Buffer) => {
      out += d.toString();
      const m = /Listening on (http:\/\/\S+)/.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]!);
      }
    });
  });
});

afterAll(async () => {
  serve?.kill('SIGTERM');
  await serve;
  if (root) await rm(root, { recursive: true, force: true });
});

describe('an install of symbolic links, its log a pipe', () => {
  it('signs in, uploads, downloads and verifies, adds a user and shares a link', async () => {
    const config = join(root, 'cli-config');
    const run = (args: string[], input = '') =>
      execa('node', [bin, '--server', url, ...args], {
        env: env(config),
        extendEnv: false,
        input,
        reject: false,
      });
    const login = await run(
      ['login', '-u', ADMIN.username, '--password-stdin'],
      `${ADMIN.password}\n`,
    );
    expect(login.exitCode, `${login.stderr}\n${stderr}`).toBe(0);
    const data = randomBytes(3 * 1024 * 1024 + 5);
    const file = join(root, 'payload.bin');
    await writeFile(file, data);
    const up = await run(['upload', file, '--chunk-size', '1m', '--json']);
    expect(up.exitCode, `${up.stderr}\n${stderr}`).toBe(0);
    const [shared] = JSON.parse(String(up.stdout)) as { share_id: string; verified: boolean }[];
    expect(shared!.verified).toBe(true);
    const out = join(root, 'back.bin');
    const got = await run(['get', shared!.share_id, '-o', out, '--json']);
    expect(got.exitCode, `${got.stderr}\n${stderr}`).toBe(0);
    expect(JSON.parse(String(got.stdout))).toMatchObject({ verified: true });
    expect(
      createHash('sha256')
        .update(await readFile(out))
        .digest('hex'),
    ).toBe(createHash('sha256').update(data).digest('hex'));
    const user = await run(
      ['users', 'add', 'linked-user', '--perms', 'READ', '--password-stdin'],
      'linked-pw-1\n',
    );
    expect(user.exitCode, `${user.stderr}\n${stderr}`).toBe(0);
    const link = await run(['link', shared!.share_id, '--json']);
    expect(link.exitCode, `${link.stderr}\n${stderr}`).toBe(0);
    const { url: linkUrl } = JSON.parse(String(link.stdout)) as { url: string };
    const viaLink = join(root, 'via-link.bin');
    const fetched = await run(['get', linkUrl, '-o', viaLink]);
    expect(fetched.exitCode, `${fetched.stderr}\n${stderr}`).toBe(0);
    expect((await readFile(viaLink)).equals(data)).toBe(true);
    expect(stderr).not.toMatch(/error:|TypeError/);
  });
});
