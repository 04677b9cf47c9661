// processAlive (src/shared/owned-temp.ts): whether the process that owns a temporary file, an
// upload record or a spool directory still runs on this host, against real processes.
import { execa } from 'execa';
import { readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { processAlive } from '../../src/shared/owned-temp.js';

const stateOf = (pid: number) => {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
};

describe('processAlive', () => {
  it('a running process is alive; one that exited is not', async () => {
    expect(processAlive(process.pid)).toBe(true);
    const child = execa('sleep', ['30']);
    expect(processAlive(child.pid!)).toBe(true);
    child.kill('SIGKILL');
    await child.catch(() => undefined);
    expect(processAlive(child.pid!)).toBe(false);
  });

  // Property: a process killed but not yet reaped (a zombie, which in a container whose first
  // process reaps nothing stays one for good) does not run. Found from outside: an upload killed
  // and not yet reaped counted as running, so running it again made a second share and
  // `uploads clean` left the first alone.
  it('a zombie (killed, never reaped by its parent) is not alive', async () => {
    // sh starts a child, then becomes `sleep`, which never waits for it: the child, once it
    // ends, stays a zombie until the sleep ends.
    const parent = execa('sh', ['-c', 'sleep 30 & echo $!; exec sleep 60']);
    const pid = await new Promise<number>((resolve) =>
      parent.stdout!.once('data', (d: Buffer) => resolve(Number(String(d).trim()))),
    );
    try {
      expect(processAlive(pid)).toBe(true);
      process.kill(pid, 'SIGKILL');
      for (let i = 0; i < 100 && stateOf(pid) !== 'Z'; i++) await sleep(20);
      expect(stateOf(pid)).toBe('Z');
      expect(processAlive(pid)).toBe(false);
    } finally {
      parent.kill('SIGKILL');
      await parent.catch(() => undefined);
    }
  });
});
