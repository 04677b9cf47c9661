// The order of durable steps (issue 8), seen from the system calls the real server makes (strace):
// a power loss cannot be simulated here, but what survives one is decided by what was fsynced
// before the answer. New content must be fsynced, linked into content/, the content directory
// fsynced, and only then the record appended and fdatasynced; a delete must make its record
// durable before the content file goes.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { serveArgs } from '../helpers/cli.js';
import { createShare, del, expectStatus, sendChunk, sendParts } from '../helpers/http.js';
import { ROOT, ensureBuilt } from '../helpers/serve.js';
import { ADMIN, login } from '../helpers/server.js';

/** Whether strace can trace a child here (it is missing, or ptrace is forbidden, in some boxes). */
function straceWorks(): string | null {
  try {
    execFileSync('strace', ['-f', '-qq', '-e', 'trace=none', 'true'], { stdio: 'pipe' });
    return null;
  } catch (err) {
    const why = (err as { stderr?: Buffer }).stderr?.toString().trim() || String(err);
    return `strace cannot trace here (${why.split('\n')[0]}); install strace to include this test`;
  }
}

const unavailable = straceWorks();
if (unavailable) console.warn(`fsync-order tests skipped: ${unavailable}`);

let child: ChildProcess | undefined;
let root: string | undefined;
/**
 * Kills strace and the server it traces: strace runs in a process group of its own, and killing
 * strace alone would leave the traced server running after the tests.
 */
async function killTraced(): Promise<void> {
  const c = child;
  if (!c || c.exitCode !== null || c.signalCode !== null) return;
  const exited = new Promise((r) => c.once('exit', r));
  try {
    process.kill(-c.pid!, 'SIGKILL');
  } catch {
    c.kill('SIGKILL');
  }
  await exited;
}

afterAll(async () => {
  await killTraced();
  if (root) await rm(root, { recursive: true, force: true });
});

interface Call {
  line: number;
  name: string;
  args: string;
  result: string;
}

/** The system calls of a strace -f log, each at the position where it started. */
function parse(log: string): Call[] {
  const calls: Call[] = [];
  const pending = new Map<string, Call>();
  log.split('\n').forEach((text, line) => {
    const m = /^(\d+)\s+(.*)$/.exec(text);
    if (!m) return;
    const [, pid, rest] = m as unknown as [string, string, string];
    const resumed = /^<\.\.\. (\w+) resumed>(.*)\)\s+= (.*)$/.exec(rest);
    if (resumed) {
      const call = pending.get(`${pid}:${resumed[1]}`);
      if (call) {
        call.args += resumed[2];
        call.result = resumed[3]!;
        pending.delete(`${pid}:${resumed[1]}`);
      }
      return;
    }
    const unfinished = /^(\w+)\((.*) <unfinished \.\.\.>$/.exec(rest);
    if (unfinished) {
      const call = { line, name: unfinished[1]!, args: unfinished[2]!, result: '' };
      calls.push(call);
      pending.set(`${pid}:${call.name}`, call);
      return;
    }
    const done = /^(\w+)\((.*)\)\s+= (.*)$/.exec(rest);
    if (done) calls.push({ line, name: done[1]!, args: done[2]!, result: done[3]! });
  });
  return calls;
}

/** The fds a path was opened as (openat results), with the line each open happened at. */
function opens(calls: Call[], path: RegExp): { fd: string; line: number }[] {
  return calls
    .filter((c) => c.name === 'openat' && path.test(c.args) && /^\d+/.test(c.result))
    .map((c) => ({ fd: c.result.split(' ')[0]!, line: c.line }));
}

/**
 * The first fsync/fdatasync of `fd` after `after`, while `fd` still names what was opened there:
 * fds are reused, so a later open that returns the same fd ends the search (Infinity).
 */
function syncOf(calls: Call[], fd: string, after: number): number {
  for (const c of calls) {
    if (c.line <= after) continue;
    if ((c.name === 'fsync' || c.name === 'fdatasync') && c.args === fd) return c.line;
    if (c.name === 'openat' && c.result.split(' ')[0] === fd) return Infinity;
  }
  return Infinity;
}

/** Starts `fshare serve` under strace; the log holds every traced call, in order. */
async function startTraced(): Promise<{ url: string; log: string; dataDir: string }> {
  await ensureBuilt();
  root ??= await mkdtemp(join(tmpdir(), 'fshare-strace-'));
  const dataDir = join(root, `data-${randomBytes(4).toString('hex')}`);
  const log = join(root, `strace-${randomBytes(4).toString('hex')}.log`);
  child = spawn(
    'strace',
    [
      '-f',
      '-qq',
      '-o',
      log,
      '-e',
      'trace=openat,link,linkat,rename,renameat,renameat2,unlink,unlinkat,fsync,fdatasync',
      process.execPath,
      ...serveArgs(dataDir),
    ],
    {
      cwd: ROOT,
      env: {
        ...process.env,
        FSHARE_ADMIN_USER: ADMIN.username,
        FSHARE_ADMIN_PASSWORD: ADMIN.password,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    },
  );
  const url = await new Promise<string>((resolve, reject) => {
    let out = '';
    child!.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      const m = /Listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(out);
      if (m) resolve(m[1]!);
    });
    child!.once('exit', (code) => reject(new Error(`server exited ${code}`)));
  });
  return { url, log, dataDir };
}

describe.skipIf(Boolean(unavailable))('durable steps, in order', () => {
  it('content: synced, linked, directory synced, then recorded; delete: recorded, then removed', async () => {
    const { url, log } = await startTraced();
    const token = await login(url, ADMIN.username, ADMIN.password);
    const id = await createShare(url, token, 'traced.bin');
    expectStatus(
      await sendChunk(url, token, id, { dzuuid: 'u', index: 0, total: 1, data: randomBytes(5000) }),
      201,
    );
    const uploadAnswered = (await readFile(log, 'utf8')).split('\n').length;
    expectStatus(await del(url, `/files/${id}`, { token }), 200);
    const deleteAnswered = (await readFile(log, 'utf8')).split('\n').length;
    await killTraced();
    const calls = parse(await readFile(log, 'utf8'));

    const journal = opens(calls, /db\.journal"/).at(-1)!;
    const link = calls.find((c) => /^link/.test(c.name) && c.args.includes(`/content/${id}.`))!;
    expect(link, 'the new content is linked into content/').toBeDefined();
    // The chunk file was fsynced before it was linked (through one of its opens: it is also
    // opened to be read, by the hash).
    const chunkSyncs = opens(calls, /\/uploads\/[^"]+\/s\.[0-9a-f]+"/).map((o) =>
      syncOf(calls, o.fd, o.line),
    );
    expect(Math.min(...chunkSyncs)).toBeLessThan(link.line);
    // content/ was fsynced after the link, before the record was made durable, before the answer.
    const contentDir = opens(calls, /\/content", O_RDONLY/).find((o) => o.line > link.line)!;
    const dirSync = syncOf(calls, contentDir.fd, contentDir.line);
    const recordSync = syncOf(calls, journal.fd, dirSync);
    expect(dirSync).toBeLessThan(recordSync);
    expect(recordSync).toBeLessThan(uploadAnswered);
    // Delete: the record is durable before the content file is unlinked.
    const unlink = calls.find(
      (c) => /^unlink/.test(c.name) && c.args.includes(`/content/${id}.`) && c.line > recordSync,
    )!;
    expect(unlink, 'the content file is removed').toBeDefined();
    expect(unlink.line).toBeLessThan(deleteAnswered);
    const deleteSync = calls.find(
      (c) => c.name === 'fdatasync' && c.args === journal.fd && c.line > recordSync,
    )!;
    expect(deleteSync.line).toBeLessThan(unlink.line);
  });

  it('a chunk is answered only after its bytes and then its log line are durable (group commit)', async () => {
    const { url, log } = await startTraced();
    const token = await login(url, ADMIN.username, ADMIN.password);
    const id = await createShare(url, token, 'placed.bin');
    const data = randomBytes(10_000);
    // Chunk 0 of 2, placed (Dropzone's layout fields): answered 200, not yet complete.
    const res = await sendParts(url, token, id, [
      { name: 'dzuuid', value: 'placed' },
      { name: 'dzchunkindex', value: '0' },
      { name: 'dztotalchunks', value: '2' },
      { name: 'dzchunkbyteoffset', value: '0' },
      { name: 'dzchunksize', value: '6000' },
      { name: 'dztotalfilesize', value: String(data.length) },
      { name: 'upload', filename: 'blob', data: data.subarray(0, 6000) },
    ]);
    expectStatus(res, 200);
    const answered = (await readFile(log, 'utf8')).split('\n').length;
    await killTraced();
    const calls = parse(await readFile(log, 'utf8'));
    const dataSyncs = opens(calls, /\/uploads\/[^"]+\/data"/).map((o) =>
      syncOf(calls, o.fd, o.line),
    );
    const dataSync = Math.min(...dataSyncs);
    const append = opens(calls, /\/uploads\/[^"]+\/log", O_WRONLY\|O_CREAT\|O_APPEND/).at(-1)!;
    expect(append, 'the log line is appended').toBeDefined();
    const logSync = Math.min(
      ...opens(calls, /\/uploads\/[^"]+\/log"/)
        .filter((o) => o.line >= append.line)
        .map((o) => syncOf(calls, o.fd, o.line)),
    );
    // The bytes are durable before the line that counts them is written …
    expect(dataSync).toBeLessThan(append.line);
    // … and that line is durable before the answer.
    expect(logSync).toBeLessThan(answered);
  });
});
