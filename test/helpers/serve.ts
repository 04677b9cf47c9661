// The real `fshare serve` binary as a child process, for tests that kill it (SIGKILL at chosen
// points through FSHARE_FAULT) and restart it on the same data directory.
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll } from 'vitest';
import { serveArgs } from './cli.js';
import { walkFiles } from './http.js';
import { ADMIN } from './server.js';

export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
export const BIN = join(ROOT, 'bin', 'fshare.js');

export interface Running {
  url: string;
  child: ChildProcess;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** stdout up to and including the "Listening on" line. */
  output: string;
  /** Everything the process wrote to stderr so far. */
  stderr(): string;
}

const children = new Set<ChildProcess>();

/** Kills every child still running (for afterAll). */
export function killAll(): void {
  for (const child of children) child.kill('SIGKILL');
}

/**
 * For a test file that runs `serve`: builds first, and gives a temp directory (`fshare-NAME-*`)
 * for its data directories; after the file, every child still running is killed and the
 * directory removed. Returns a path below that directory.
 */
export function serveRoot(name: string): (path: string) => string {
  let root: string | undefined;
  beforeAll(async () => {
    await ensureBuilt();
    root = await mkdtemp(join(tmpdir(), `fshare-${name}-`));
  }, 120_000);
  afterAll(async () => {
    killAll();
    if (root) await rm(root, { recursive: true, force: true });
  });
  return (path) => join(root!, path);
}

/** Builds dist/ when it is missing or older than src/ (`npm test` builds first anyway). */
export async function ensureBuilt(): Promise<void> {
  const newest = async (dir: string) =>
    Math.max(
      0,
      ...(await Promise.all((await walkFiles(dir)).map(async (f) => (await stat(f)).mtimeMs))),
    );
  const built = join(ROOT, 'dist', 'bundle', 'main.js');
  if (existsSync(built) && (await newest(join(ROOT, 'dist'))) >= (await newest(join(ROOT, 'src'))))
    return;
  const step = (args: string[]) =>
    new Promise<void>((done) => execFile(process.execPath, args, { cwd: ROOT }, () => done()));
  // tsc may report errors in files others are editing; it still emits, so the exit code is ignored.
  await step([join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', 'tsconfig.build.json']);
  await step([join(ROOT, 'scripts', 'bundle.mjs')]);
}

/**
 * Starts `fshare serve` on a free port and resolves once it prints its URL; rejects with its
 * output if it exits first. `extraEnv` values that are undefined remove the variable.
 */
export function serve(
  dir: string,
  extraEnv: NodeJS.ProcessEnv = {},
  extraArgs: string[] = [],
): Promise<Running> {
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    FSHARE_ADMIN_USER: ADMIN.username,
    FSHARE_ADMIN_PASSWORD: ADMIN.password,
  };
  delete env.FSHARE_SECRET;
  delete env.FSHARE_FAULT;
  for (const [key, value] of Object.entries(extraEnv)) {
    if (value === undefined) delete env[key];
    else env[key] = value;
  }
  const child = spawn(process.execPath, [...serveArgs(dir), ...extraArgs], {
    cwd: ROOT,
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.add(child);
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((done) =>
    child.once('exit', (code, signal) => done({ code, signal })),
  );
  void exited.then(() => children.delete(child));
  let err = '';
  child.stderr!.on('data', (d: Buffer) => (err += d.toString()));
  return new Promise((resolveStart, reject) => {
    let out = '';
    child.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      const m = /Listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(out);
      if (m) resolveStart({ url: m[1]!, child, exited, output: out, stderr: () => err });
    });
    child.once('exit', (code, signal) =>
      reject(
        Object.assign(
          new Error(`fshare serve exited (${code ?? signal}) before listening:\n${out}\n${err}`),
          { code, stdout: out, stderr: err },
        ),
      ),
    );
  });
}

/** SIGKILL, and wait until the process is gone. */
export async function kill9(running: Running): Promise<void> {
  running.child.kill('SIGKILL');
  await running.exited;
}

/** SIGTERM, and wait for the exit. */
export async function stop(
  running: Running,
): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
  running.child.kill('SIGTERM');
  return running.exited;
}
