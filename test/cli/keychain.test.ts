/**
 * The token store against a real Secret Service: gnome-keyring inside a private D-Bus session
 * (`dbus-run-session`, which ends the bus and with it the keyring daemon), checked from the
 * outside with `secret-tool`. `.ci/run` installs gnome-keyring, dbus and libsecret-tools.
 */
import { execa, type ResultPromise } from 'execa';
import { existsSync } from 'node:fs';
import { chmod, mkdir, mkdtemp, readFile, readdir, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { delimiter, join, resolve } from 'node:path';
import { afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';

const ROOT = resolve(import.meta.dirname, '../..');
const MODULE = join(ROOT, 'dist/cli/credentials.js');
const BIN = join(ROOT, 'bin/fshare.js');
const SERVER = 'http://127.0.0.1:5000';
const ADMIN = { username: 'admin', password: 'admin-password-123' };
const ACCOUNT = `bob@${SERVER}`;
const WARNING =
  /^fshare: no OS keychain available; token saved to (.+credentials\.json) \(mode 0600\)$/;

const TOOLS = ['dbus-run-session', 'gnome-keyring-daemon', 'secret-tool'];
const missingTools = TOOLS.filter((tool) => !onPath(tool));

/**
 * Starts an unlocked login keyring with the Secret Service component. The daemon forks, owns
 * org.freedesktop.secrets on the session bus and needs no exported variables; its stdio goes to
 * /dev/null so it never holds our pipes open.
 */
const UNLOCK_KEYRING =
  'echo -n test | gnome-keyring-daemon --unlock --components=secrets >/dev/null 2>&1';

/** Calls the built module: `node driver.mjs save|get|delete SERVER [USER]`, token in FSHARE_TEST_TOKEN. */
const DRIVER = `
import { createCredentialStore } from ${JSON.stringify(MODULE)};
const [op, server, user] = process.argv.slice(2);
const store = createCredentialStore(process.env.FSHARE_TEST_CONFIG, (line) => process.stderr.write(line + '\\n'));
if (op === 'save') console.log(await store.saveToken(server, user, process.env.FSHARE_TEST_TOKEN));
else if (op === 'get') console.log(JSON.stringify((await store.getToken(server, user)) ?? null));
else if (op === 'delete') { await store.deleteToken(server, user); console.log('deleted'); }
else throw new Error('unknown op ' + op);
`;

/** What a finished run left behind (execa's own Result type is generic over its options). */
interface Run {
  exitCode?: number;
  stdout: string;
  stderr: string;
}

let sandbox: string;
let configDir: string;
let runtimeDir: string;

function onPath(tool: string): boolean {
  return (process.env.PATH ?? '').split(delimiter).some((dir) => existsSync(join(dir, tool)));
}

/** A clean environment: HOME and XDG dirs in the sandbox, so the real user's keyring is never touched. */
function sandboxEnv(extra: Record<string, string> = {}): Record<string, string> {
  return {
    PATH: process.env.PATH ?? '/usr/bin:/bin',
    LANG: 'C.UTF-8',
    HOME: join(sandbox, 'home'),
    XDG_RUNTIME_DIR: runtimeDir,
    XDG_DATA_HOME: join(sandbox, 'home/.local/share'),
    XDG_CONFIG_HOME: join(sandbox, 'home/.config'),
    XDG_CACHE_HOME: join(sandbox, 'home/.cache'),
    FSHARE_TEST_CONFIG: configDir,
    FSHARE_CONFIG_DIR: configDir,
    ...extra,
  };
}

/** Runs a bash script inside a fresh D-Bus session; `$DRIVER` is the module driver. */
async function inSession(script: string, env: Record<string, string> = {}): Promise<Run> {
  const result = await execa(
    'dbus-run-session',
    ['--', 'bash', '-c', `set -euo pipefail\nDRIVER=${join(sandbox, 'driver.mjs')}\n${script}`],
    { env: sandboxEnv(env), extendEnv: false, input: '', reject: false, timeout: 60_000 },
  );
  expect(result.exitCode, `session failed:\n${result.stdout}\n${result.stderr}`).toBe(0);
  return result;
}

/** Runs the driver with no D-Bus session at all: the bus address names a socket that is not there. */
async function withoutBus(args: string[], env: Record<string, string> = {}): Promise<Run> {
  const result = await execa('node', [join(sandbox, 'driver.mjs'), ...args], {
    env: sandboxEnv({ DBUS_SESSION_BUS_ADDRESS: `unix:path=${join(sandbox, 'no-bus')}`, ...env }),
    extendEnv: false,
    input: '',
    reject: false,
    timeout: 30_000,
  });
  expect(result.exitCode, result.stderr).toBe(0);
  return result;
}

/** Our lines on stderr, without the chatter of dbus-daemon and of an activated gnome-keyring. */
function ourStderr(result: Run): string[] {
  return result.stderr.split('\n').filter((line) => line.startsWith('fshare'));
}

/** Every file under the config dir, concatenated: the token must not be anywhere in it. */
async function configDirText(): Promise<string> {
  if (!existsSync(configDir)) return '';
  const names = await readdir(configDir, { recursive: true });
  const texts = await Promise.all(
    names.map(async (name) => {
      const path = join(configDir, name);
      return (await stat(path)).isFile() ? readFile(path, 'utf8') : '';
    }),
  );
  return texts.join('\n');
}

async function writeCredentialsFile(tokens: Record<string, string>): Promise<void> {
  await mkdir(configDir, { recursive: true, mode: 0o700 });
  const file = join(configDir, 'credentials.json');
  await writeFile(file, JSON.stringify(tokens), { mode: 0o600 });
  await chmod(file, 0o600);
}

/** Pids of live processes started inside this test's sandbox (found by their XDG_RUNTIME_DIR). */
async function sandboxProcesses(): Promise<number[]> {
  const pids: number[] = [];
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const environ = await readFile(`/proc/${entry}/environ`, 'utf8');
      if (environ.split('\0').includes(`XDG_RUNTIME_DIR=${runtimeDir}`)) pids.push(Number(entry));
    } catch {
      // gone already, or a zombie: not running
    }
  }
  return pids;
}

/** A real `fshare serve` on an ephemeral port, outside any D-Bus session. */
async function startServe(): Promise<{ url: string; stop: () => Promise<void> }> {
  const dataDir = join(sandbox, 'data');
  const serve: ResultPromise = execa(
    'node',
    [BIN, 'serve', '--port', '0', '--data-dir', dataDir, '--quiet', '--min-free', '16m'],
    {
      env: {
        ...sandboxEnv(),
        FSHARE_ADMIN_USER: ADMIN.username,
        FSHARE_ADMIN_PASSWORD: ADMIN.password,
      },
      extendEnv: false,
      stdin: 'ignore',
      reject: false,
    },
  );
  const url = await new Promise<string>((done, fail) => {
    let seen = '';
    serve.stdout?.on('data', (chunk: Buffer) => {
      seen += chunk.toString();
      const match = /Listening on (http:\/\/\S+)/.exec(seen);
      if (match?.[1]) done(match[1]);
    });
    void serve.then((r) => fail(new Error(`fshare serve exited: ${r.stderr}`)));
  });
  return {
    url,
    async stop() {
      serve.kill('SIGTERM');
      await serve;
    },
  };
}

describe.skipIf(missingTools.length > 0 && !process.env.CI)('credential store', () => {
  beforeAll(() => {
    expect(missingTools, 'install gnome-keyring dbus libsecret-tools (.ci/run does)').toEqual([]);
    expect(existsSync(MODULE), 'run `npm run build` first').toBe(true);
  });

  beforeEach(async () => {
    sandbox = await mkdtemp(join(tmpdir(), 'fshare-keychain-'));
    configDir = join(sandbox, 'config');
    runtimeDir = join(sandbox, 'run');
    await mkdir(join(sandbox, 'home'), { recursive: true });
    await mkdir(runtimeDir, { mode: 0o700 });
    await writeFile(join(sandbox, 'driver.mjs'), DRIVER);
  });

  afterEach(async () => {
    // dbus-run-session ends the bus; the keyring daemon follows it within moments.
    const deadline = Date.now() + 10_000;
    let left = await sandboxProcesses();
    while (left.length > 0 && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 100));
      left = await sandboxProcesses();
    }
    expect(left, 'processes left running by the test').toEqual([]);
    await rm(sandbox, { recursive: true, force: true });
  });

  describe('with an unlocked gnome-keyring', () => {
    it('saves the token in the keychain, and not on disk', async () => {
      const result = await inSession(
        `${UNLOCK_KEYRING}
node "$DRIVER" save ${SERVER}/ bob
echo "lookup=$(secret-tool lookup service fshare username '${ACCOUNT}')"
node "$DRIVER" get ${SERVER} bob`,
        { FSHARE_TEST_TOKEN: 'tok-in-keychain' },
      );
      expect(result.stdout.split('\n')).toEqual([
        'keychain',
        'lookup=tok-in-keychain',
        '"tok-in-keychain"',
      ]);
      expect(ourStderr(result)).toEqual([]);
      expect(existsSync(join(configDir, 'credentials.json'))).toBe(false);
      expect(await configDirText()).not.toContain('tok-in-keychain');
    });

    it('one account per server and user', async () => {
      const result = await inSession(
        `${UNLOCK_KEYRING}
FSHARE_TEST_TOKEN=t-bob-a node "$DRIVER" save http://a.example:8080 bob
FSHARE_TEST_TOKEN=t-amy-a node "$DRIVER" save http://a.example:8080 amy
FSHARE_TEST_TOKEN=t-bob-b node "$DRIVER" save https://b.example/files bob
secret-tool lookup service fshare username bob@http://a.example:8080; echo
secret-tool lookup service fshare username amy@http://a.example:8080; echo
secret-tool lookup service fshare username bob@https://b.example/files; echo
node "$DRIVER" get HTTP://A.EXAMPLE:8080/ amy
node "$DRIVER" get https://b.example/files/ bob`,
      );
      expect(result.stdout.split('\n')).toEqual([
        'keychain',
        'keychain',
        'keychain',
        't-bob-a',
        't-amy-a',
        't-bob-b',
        '"t-amy-a"',
        '"t-bob-b"',
      ]);
    });

    it('a keychain save removes a stale copy from the fallback file', async () => {
      await writeCredentialsFile({ [ACCOUNT]: 'tok-stale', [`amy@${SERVER}`]: 'tok-amy' });
      const result = await inSession(
        `${UNLOCK_KEYRING}
node "$DRIVER" save ${SERVER} bob`,
        { FSHARE_TEST_TOKEN: 'tok-fresh' },
      );
      expect(result.stdout).toBe('keychain');
      const file = JSON.parse(await readFile(join(configDir, 'credentials.json'), 'utf8'));
      expect(file).toEqual({ [`amy@${SERVER}`]: 'tok-amy' });
      expect(await configDirText()).not.toContain('tok-fresh');
    });

    it('reads the keychain before the file; delete removes both', async () => {
      await writeCredentialsFile({ [ACCOUNT]: 'tok-file' });
      const result = await inSession(
        `${UNLOCK_KEYRING}
echo -n tok-keychain | secret-tool store --label=test service fshare username '${ACCOUNT}'
node "$DRIVER" get ${SERVER} bob
node "$DRIVER" delete ${SERVER} bob
echo "lookup=$(secret-tool lookup service fshare username '${ACCOUNT}' || echo none)"
node "$DRIVER" get ${SERVER} bob
node "$DRIVER" delete ${SERVER} bob`,
      );
      expect(result.stdout.split('\n')).toEqual([
        '"tok-keychain"',
        'deleted',
        'lookup=none',
        'null',
        'deleted',
      ]);
      expect(existsSync(join(configDir, 'credentials.json'))).toBe(false);
    });

    // Property guarded: a stored token is sent only if a header can carry it. A damaged entry
    // (a line break, non-ASCII) failed every command with undici's "Invalid character in header
    // content" and no way out; now it is one warning, not used, and login replaces it.
    it('a keychain entry that is not a token is not used: one warning, and a save replaces it', async () => {
      const result = await inSession(
        `${UNLOCK_KEYRING}
FSHARE_TEST_TOKEN="$(printf 'tok\\nen')" node "$DRIVER" save ${SERVER} bob
echo "lookup=$(secret-tool lookup service fshare username '${ACCOUNT}' | od -An -c | tr -s ' ')"
node "$DRIVER" get ${SERVER} bob
FSHARE_TEST_TOKEN=tok-new node "$DRIVER" save ${SERVER} bob
node "$DRIVER" get ${SERVER} bob`,
      );
      expect(result.stdout.split('\n')).toEqual([
        'keychain',
        'lookup= t o k \\n e n',
        'null',
        'keychain',
        '"tok-new"',
      ]);
      expect(ourStderr(result)).toEqual([
        `fshare: the OS keychain's entry "${ACCOUNT}" (service fshare) is damaged (it is not a token) and is not used; fshare login replaces it`,
      ]);
    });

    it('FSHARE_TOKEN overrides the keychain and the file', async () => {
      await writeCredentialsFile({ [ACCOUNT]: 'tok-file' });
      const result = await inSession(
        `${UNLOCK_KEYRING}
FSHARE_TEST_TOKEN=tok-keychain node "$DRIVER" save ${SERVER} bob
FSHARE_TOKEN=tok-env node "$DRIVER" get ${SERVER} bob
FSHARE_TOKEN=tok-env node "$DRIVER" get ${SERVER}
node "$DRIVER" get ${SERVER} bob`,
      );
      expect(result.stdout.split('\n')).toEqual([
        'keychain',
        '"tok-env"',
        '"tok-env"',
        '"tok-keychain"',
      ]);
    });

    it('FSHARE_KEYRING=off uses the file silently and leaves the keychain alone', async () => {
      const result = await inSession(
        `${UNLOCK_KEYRING}
node "$DRIVER" save ${SERVER} bob
echo "lookup=$(secret-tool lookup service fshare username '${ACCOUNT}' || echo none)"
node "$DRIVER" get ${SERVER} bob`,
        { FSHARE_KEYRING: 'off', FSHARE_TEST_TOKEN: 'tok-file-only' },
      );
      expect(result.stdout.split('\n')).toEqual(['file', 'lookup=none', '"tok-file-only"']);
      expect(ourStderr(result)).toEqual([]);
      const file = join(configDir, 'credentials.json');
      expect((await stat(file)).mode & 0o777).toBe(0o600);
    });

    it('a Secret Service that stops answering falls back to the file within seconds', async () => {
      // SIGSTOP freezes the daemon while it keeps its bus name: calls to it get no reply.
      const result = await inSession(
        `${UNLOCK_KEYRING}
for p in /proc/[0-9]*; do
  if [ "$(cat "$p/comm" 2>/dev/null)" = gnome-keyring-d ] &&
     grep -qxz "XDG_RUNTIME_DIR=$XDG_RUNTIME_DIR" "$p/environ" 2>/dev/null; then
    pid=\${p#/proc/}
  fi
done
trap 'kill -CONT $pid' EXIT
kill -STOP "$pid"
start=$(date +%s%N)
node "$DRIVER" save ${SERVER} bob
echo "ms=$(( ($(date +%s%N) - start) / 1000000 ))"`,
        { FSHARE_TEST_TOKEN: 'tok-frozen' },
      );
      const [where, ms] = result.stdout.split('\n');
      expect(where).toBe('file');
      expect(Number(ms?.replace('ms=', ''))).toBeLessThan(10_000);
      expect(ourStderr(result)).toEqual([expect.stringMatching(WARNING)]);
    });
  });

  describe('without a keychain', () => {
    it('falls back to a 0600 file with a one-line warning', async () => {
      const saved = await withoutBus(['save', SERVER, 'bob'], { FSHARE_TEST_TOKEN: 'tok-file' });
      expect(saved.stdout).toBe('file');
      const lines = saved.stderr.split('\n');
      expect(lines).toHaveLength(1);
      const file = WARNING.exec(lines[0] ?? '')?.[1];
      expect(file).toBe(join(configDir, 'credentials.json'));
      expect(saved.stderr).not.toContain('tok-file');

      expect((await stat(configDir)).mode & 0o777).toBe(0o700);
      expect((await stat(join(configDir, 'credentials.json'))).mode & 0o777).toBe(0o600);
      // No temp file left behind; the lock that changes take turns on is an empty 0600 file.
      expect((await readdir(configDir)).sort()).toEqual([
        'credentials.json',
        'credentials.json.lock',
      ]);
      const lock = await stat(join(configDir, 'credentials.json.lock'));
      expect([lock.size, lock.mode & 0o777]).toEqual([0, 0o600]);

      const read = await withoutBus(['get', SERVER, 'bob']);
      expect(read.stdout).toBe('"tok-file"');
      expect(read.stderr).toBe('');
      // With no saved username, the server's only account is the one meant.
      expect((await withoutBus(['get', SERVER])).stdout).toBe('"tok-file"');
      expect((await withoutBus(['get', 'http://other:5000', 'bob'])).stdout).toBe('null');

      await withoutBus(['delete', SERVER, 'bob']);
      expect(existsSync(join(configDir, 'credentials.json'))).toBe(false);
    });

    it('FSHARE_TOKEN overrides the file', async () => {
      await withoutBus(['save', SERVER, 'bob'], { FSHARE_TEST_TOKEN: 'tok-file' });
      const read = await withoutBus(['get', SERVER, 'bob'], { FSHARE_TOKEN: 'tok-env' });
      expect(read.stdout).toBe('"tok-env"');
    });

    it('a D-Bus session without an unlocked keyring is no keychain either', async () => {
      // The bus activates gnome-keyring on demand, but it has no login keyring and cannot prompt.
      const result = await inSession(`node "$DRIVER" save ${SERVER} bob`, {
        FSHARE_TEST_TOKEN: 'tok-locked',
      });
      expect(result.stdout).toBe('file');
      expect(ourStderr(result)).toEqual([expect.stringMatching(WARNING)]);
    });

    it('a session bus that never answers does not hang', async () => {
      // A listening socket that never speaks: libdbus would block in its handshake forever.
      const socket = join(sandbox, 'silent-bus');
      const { createServer } = await import('node:net');
      const silent = createServer(() => undefined);
      await new Promise<void>((done) => silent.listen(socket, done));
      try {
        const started = Date.now();
        const saved = await execa('node', [join(sandbox, 'driver.mjs'), 'save', SERVER, 'bob'], {
          env: sandboxEnv({
            DBUS_SESSION_BUS_ADDRESS: `unix:path=${socket}`,
            FSHARE_TEST_TOKEN: 'tok-silent',
          }),
          extendEnv: false,
          input: '',
          timeout: 30_000,
        });
        expect(saved.stdout).toBe('file');
        expect(saved.stderr).toMatch(WARNING);
        expect(Date.now() - started).toBeLessThan(10_000);
      } finally {
        silent.close();
      }
    });
  });

  describe('fshare login through the real binary', () => {
    let serve: { url: string; stop: () => Promise<void> };
    beforeEach(async () => {
      serve = await startServe();
    });
    afterEach(async () => {
      await serve.stop();
    });

    it('keeps the token in the keychain, uses it, and logout removes it', async () => {
      const account = `${ADMIN.username}@${serve.url}`;
      const result = await inSession(
        `${UNLOCK_KEYRING}
printf %s "$PW" | node ${BIN} --server ${serve.url} login -u ${ADMIN.username} --password-stdin
echo "lookup=$(secret-tool lookup service fshare username '${account}')"
echo "token=$(node ${BIN} token)"
node ${BIN} whoami | head -n 1
node ${BIN} logout
echo "after=$(secret-tool lookup service fshare username '${account}' || echo none)"`,
        { PW: ADMIN.password },
      );
      const lines = result.stdout.split('\n');
      expect(lines[0]).toBe(
        `Signed in to ${serve.url} as ${ADMIN.username} (token kept in the OS keychain)`,
      );
      const stored = lines[1]?.replace('lookup=', '') ?? '';
      expect(stored).toMatch(/^\S{20,}$/);
      expect(lines.slice(2)).toEqual([
        `token=${stored}`,
        `${ADMIN.username} on ${serve.url}`,
        `Signed out of ${serve.url}`,
        'after=none',
      ]);
      expect(ourStderr(result)).toEqual([]);
      expect(existsSync(join(configDir, 'credentials.json'))).toBe(false);
      expect(await configDirText()).not.toContain(stored);
    });

    it('without a keychain, login warns once and keeps the token in the 0600 file', async () => {
      const env = sandboxEnv({ DBUS_SESSION_BUS_ADDRESS: `unix:path=${join(sandbox, 'no-bus')}` });
      const options = { env, extendEnv: false, timeout: 30_000 } as const;
      const login = await execa(
        'node',
        [BIN, '--server', serve.url, 'login', '-u', ADMIN.username, '--password-stdin'],
        { ...options, input: ADMIN.password },
      );
      expect(login.stderr.split('\n')).toEqual([expect.stringMatching(WARNING)]);
      expect(login.stdout).toContain('token kept in the config directory');
      const file = join(configDir, 'credentials.json');
      expect((await stat(file)).mode & 0o777).toBe(0o600);

      const { stdout: token } = await execa('node', [BIN, 'token'], { ...options, input: '' });
      const saved: unknown = JSON.parse(await readFile(file, 'utf8'));
      expect(saved).toEqual({ [`${ADMIN.username}@${serve.url}`]: token });
      const overridden = await execa('node', [BIN, 'token'], {
        ...options,
        env: { ...env, FSHARE_TOKEN: 'tok-from-env' },
        input: '',
      });
      expect(overridden.stdout).toBe('tok-from-env');
    });
  });
});
