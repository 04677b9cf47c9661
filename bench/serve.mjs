// `fshare serve` for the benchmarks (bench/run.mjs, bench/artifacts.mjs): started from the built
// binary on a free port, stopped with SIGTERM (SIGKILL after 15 s).
import { spawn } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';

/**
 * Starts the server and resolves once it prints its URL: `{ child, pid, url, stderr, exited }`.
 * `children` (a Set) gets the process, for clean-up; `fail(message)` makes the error thrown;
 * `args` go after the fixed ones (`--database …`, `--storage …`).
 */
export async function startServe({
  bin,
  dataDir,
  adminPassword,
  env = {},
  nodeFlags = [],
  args = [],
  children,
  fail,
}) {
  const full = {
    ...process.env,
    FSHARE_ADMIN_USER: 'admin',
    FSHARE_ADMIN_PASSWORD: adminPassword,
    ...env,
  };
  delete full.FSHARE_SECRET;
  const child = spawn(
    process.execPath,
    [...nodeFlags, bin, 'serve', '--port', '0', '--quiet', '--data-dir', dataDir, ...args],
    { env: full, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  children.add(child);
  const s = { child, pid: child.pid, url: null, stderr: '', exited: null };
  child.stderr.on('data', (d) => (s.stderr = (s.stderr + d).slice(-4000)));
  child.once('exit', (code, signal) => (s.exited = code ?? signal));
  s.url = await new Promise((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => reject(fail('the server did not start within 30 s')), 30_000);
    child.stdout.on('data', (d) => {
      out += d;
      const m = /Listening on (http:\/\/\S+)/.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(fail(`the server exited (${code}) before listening:\n${s.stderr.trim()}`));
    });
  });
  return s;
}

/** SIGTERM, then SIGKILL if it has not exited within 15 s (`note` says so). */
export async function stopServe(s, { children, note }) {
  if (s.exited === null) {
    const exited = new Promise((r) => s.child.once('exit', r));
    s.child.kill('SIGTERM');
    // A cancellable wait: a plain sleep would keep the benchmark alive for 15 s after the end.
    const giveUp = new AbortController();
    const late = await Promise.race([
      exited.then(() => false),
      sleep(15_000, true, { signal: giveUp.signal }).catch(() => false),
    ]);
    giveUp.abort();
    if (late) {
      note('the server did not stop within 15 s of SIGTERM; killing it');
      s.child.kill('SIGKILL');
      await exited;
    }
  }
  children.delete(s.child);
}

/** Signs the administrator in to the server at `url`; its token, or `fail(message)` thrown. */
export async function adminToken(url, password, fail) {
  const login = await fetch(`${url}/users/login`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ username: 'admin', password }),
  });
  const token = (await login.json().catch(() => ({}))).auth_token;
  if (login.status !== 200 || !token) throw fail(`POST /users/login → ${login.status}`);
  return token;
}
