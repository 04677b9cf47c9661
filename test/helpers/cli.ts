import { existsSync } from 'node:fs';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { execa, type ResultPromise } from 'execa';

export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
export const BIN = join(ROOT, 'bin', 'fshare.js');
export const ADMIN = { username: 'admin', password: 'admin-password-123' };

/** The arguments after `node` that start `fshare serve` quietly, on a free port, on `dataDir`. */
export function serveArgs(dataDir: string): string[] {
  return [BIN, 'serve', '--port', '0', '--data-dir', dataDir, '--quiet', '--min-free', '16m'];
}

function assertBuilt(): void {
  if (!existsSync(join(ROOT, 'dist', 'bundle', 'main.js')))
    throw new Error(
      'dist/ is missing: run `npm run build` (npm test does it) before the CLI tests',
    );
}

/** The parent's environment without any FSHARE_* variable, so a developer's token never leaks in. */
export function cleanEnv(extra: Record<string, string> = {}): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [key, value] of Object.entries(process.env))
    if (value !== undefined && !key.startsWith('FSHARE_')) env[key] = value;
  return { ...env, ...extra };
}

/** The upload records in a CLI's configuration directory (`uploads/*.json`), parsed. */
export async function uploadRecordsOf<T = { share_id: string | null; dzuuid: string }>(
  cli: Cli,
): Promise<T[]> {
  const dir = join(cli.configDir, 'uploads');
  if (!existsSync(dir)) return [];
  const names = (await readdir(dir)).filter((n) => n.endsWith('.json'));
  return Promise.all(names.map(async (n) => JSON.parse(await readFile(join(dir, n), 'utf8')) as T));
}

export async function tempDir(prefix: string): Promise<string> {
  return mkdtemp(join(tmpdir(), `fshare-${prefix}-`));
}

export interface Serve {
  url: string;
  dataDir: string;
  /** The server's process id (for reading its memory from /proc). */
  pid: number;
  /** Everything it has written to standard output so far. */
  stdout(): string;
  /** SIGTERM, wait for the exit; removes the data directory. */
  stop(): Promise<void>;
}

/** Starts the built `fshare serve` on an ephemeral port and waits for its "Listening on" line. */
export async function startServe(
  options: { env?: Record<string, string>; nodeFlags?: string[]; args?: string[] } = {},
): Promise<Serve> {
  assertBuilt();
  const dataDir = await tempDir('data');
  const args = [...(options.nodeFlags ?? []), ...serveArgs(dataDir), ...(options.args ?? [])];
  const child = execa('node', args, {
    env: cleanEnv({
      FSHARE_ADMIN_USER: ADMIN.username,
      FSHARE_ADMIN_PASSWORD: ADMIN.password,
      ...options.env,
    }),
    extendEnv: false,
    stdin: 'ignore',
    reject: false,
    buffer: false,
  });
  let stderr = '';
  let stdout = '';
  child.stderr?.on('data', (d: Buffer) => (stderr += d.toString()));
  child.stdout?.on('data', (d: Buffer) => (stdout += d.toString()));
  const url = await new Promise<string>((resolveUrl, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`fshare serve did not start: ${stderr}`)),
      30_000,
    );
    child.stdout?.on('data', () => {
      const match = /Listening on (https?:\/\/\S+)/.exec(stdout);
      if (match) {
        clearTimeout(timer);
        resolveUrl(match[1]!);
      }
    });
    void child.then((res) => {
      clearTimeout(timer);
      reject(new Error(`fshare serve exited with ${res.exitCode} before listening: ${stderr}`));
    });
  });
  return {
    url,
    dataDir,
    pid: child.pid!,
    stdout: () => stdout,
    async stop() {
      child.kill('SIGTERM');
      await child;
      await rm(dataDir, { recursive: true, force: true });
    },
  };
}

export interface RunOptions {
  /** Standard input; default empty, so nothing can ever wait for a prompt. */
  input?: string | Uint8Array;
  env?: Record<string, string>;
  cwd?: string;
  /** An open file descriptor to be the command's standard output (as `> file` makes it). */
  stdoutFd?: number;
}

export interface StartOptions extends RunOptions {
  /** Standard input read from this file instead. */
  inputFile?: string;
  /** Standard input as a pipe the test writes to (`child.stdin`) instead. */
  stdin?: 'pipe';
  /** How long before the command is killed (default 60 s). */
  timeout?: number;
}

export interface RunResult {
  exitCode: number;
  stdout: string;
  stderr: string;
}

export interface BinaryResult {
  exitCode: number;
  stdout: Buffer;
  stderr: string;
}

/** A user of the CLI: its own config directory, no keychain. */
export interface Cli {
  configDir: string;
  run(args: string[], options?: RunOptions): Promise<RunResult>;
  /** Like run, with stdout kept as bytes (for `get -o -`). */
  runBinary(args: string[], options?: RunOptions): Promise<BinaryResult>;
  /** `run --json` and parse stdout, failing loudly on a non-zero exit. */
  json<T>(args: string[], options?: RunOptions): Promise<T>;
  /**
   * The command as a process of its own, returned while it runs: to be killed or signalled at a
   * chosen moment, fed through a pipe, or run beside others. Awaiting it gives execa's result.
   */
  start(args: string[], options?: StartOptions): Started;
}

/** A command started by `Cli.start`: its output is text, and a failure resolves, never throws. */
export type Started = ResultPromise<{ reject: false; encoding: 'utf8' }>;

function spawn(
  configDir: string,
  args: string[],
  options: StartOptions,
  binary: boolean,
): ResultPromise {
  const stdin =
    options.inputFile !== undefined
      ? { inputFile: options.inputFile }
      : options.stdin === 'pipe'
        ? { stdin: 'pipe' as const }
        : { input: options.input ?? '' };
  return execa('node', [BIN, ...args], {
    env: cleanEnv({ FSHARE_CONFIG_DIR: configDir, FSHARE_KEYRING: 'off', ...options.env }),
    extendEnv: false,
    ...stdin,
    cwd: options.cwd,
    reject: false,
    timeout: options.timeout ?? 60_000,
    encoding: binary ? 'buffer' : 'utf8',
    // Bytes are bytes: execa strips a final newline by default, even from a buffer, and so cut
    // the last byte off one download in 256 (random content ending in 0x0a; CI saw it once).
    stripFinalNewline: !binary,
    // A descriptor the child inherits as is (execa's types do not list plain numbers).
    ...(options.stdoutFd === undefined ? {} : ({ stdout: options.stdoutFd } as object)),
  });
}

export async function createCli(configDir?: string): Promise<Cli> {
  assertBuilt();
  const dir = configDir ?? (await tempDir('config'));
  const cli: Cli = {
    configDir: dir,
    async run(args, options = {}) {
      const res = await spawn(dir, args, options, false);
      return {
        exitCode: res.exitCode ?? -1,
        stdout: String(res.stdout),
        stderr: String(res.stderr),
      };
    },
    async runBinary(args, options = {}) {
      const res = await spawn(dir, args, options, true);
      return {
        exitCode: res.exitCode ?? -1,
        stdout: Buffer.from(res.stdout as unknown as Uint8Array),
        stderr: Buffer.from(res.stderr as unknown as Uint8Array).toString(),
      };
    },
    async json<T>(args: string[], options: RunOptions = {}) {
      const res = await cli.run(['--json', ...args], options);
      if (res.exitCode !== 0)
        throw new Error(`fshare ${args.join(' ')} exited ${res.exitCode}: ${res.stderr}`);
      return JSON.parse(res.stdout) as T;
    },
    start(args, options = {}) {
      return spawn(dir, args, options, false) as Started;
    },
  };
  return cli;
}

/** A loopback port with nothing listening on it (for "server down"). */
export async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
  const address = server.address();
  await new Promise<void>((done) => server.close(() => done()));
  if (typeof address !== 'object' || address === null) throw new Error('no port');
  return address.port;
}

/** Signs `cli` in to `url` (the administrator unless told), and fails loudly if it cannot. */
export async function signIn(
  cli: Cli,
  url: string,
  user: { username: string; password: string } = ADMIN,
): Promise<void> {
  const res = await cli.run(['--server', url, 'login', '-u', user.username, '--password-stdin'], {
    input: `${user.password}\n`,
  });
  if (res.exitCode !== 0) throw new Error(`login as ${user.username} failed: ${res.stderr}`);
}
