// What a failed or killed command leaves behind: nothing that later commands trust or keep
// forever, and nothing of the user's that the CLI silently ignores.
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, readdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createCli, signIn, startServe, tempDir, type Cli, type Serve } from '../helpers/cli.js';

let serve: Serve;
let work: string;

beforeAll(async () => {
  serve = await startServe();
  work = await tempDir('leftovers');
});

afterAll(async () => {
  await serve?.stop();
});

async function signedIn(): Promise<Cli> {
  const cli = await createCli();
  await signIn(cli, serve.url);
  return cli;
}

describe('damaged upload records', () => {
  it('are listed as damaged with their path, named once by an upload that meets them, and removed by uploads clean', async () => {
    // Guards: a record file cut short by a crash (or not JSON, or JSON that is not a record) was
    // skipped in silence by uploads, upload and uploads clean, and kept forever; `null` made
    // `fshare uploads` crash.
    const cli = await signedIn();
    const dir = join(cli.configDir, 'uploads');
    await mkdir(dir, { recursive: true });
    const cut = join(dir, 'a'.repeat(32) + '.json');
    const nul = join(dir, 'b'.repeat(32) + '.json');
    await writeFile(cut, '{"server": "http://127.0.0.1:1", "share_');
    await writeFile(nul, 'null');
    const run = (args: string[]) => cli.run(['--server', serve.url, ...args]);

    const listed = await run(['uploads']);
    expect(listed.exitCode, listed.stderr).toBe(0);
    const rows = listed.stdout.trim().split('\n');
    expect(rows).toEqual([`-\t${cut}\t-\tdamaged\t-\t-`, `-\t${nul}\t-\tdamaged\t-\t-`]);

    const json = await run(['--json', 'uploads']);
    expect(json.exitCode, json.stderr).toBe(0);
    const items = JSON.parse(json.stdout) as { record: string; kind: string; damaged: unknown }[];
    expect(items.map((i) => [i.record, i.kind, i.damaged])).toEqual([
      [cut, 'damaged', 'not JSON, or cut short'],
      [nul, 'damaged', 'not an upload record'],
    ]);

    const file = join(work, 'records.bin');
    await writeFile(file, randomBytes(3000));
    const up = await run(['upload', file]);
    expect(up.exitCode, up.stderr).toBe(0);
    const notices = up.stderr.split('\n').filter((l) => l.includes('damaged upload record'));
    expect(notices).toEqual([
      `fshare: damaged upload record (not JSON, or cut short), not used: ${cut}; fshare uploads clean removes it`,
      `fshare: damaged upload record (not an upload record), not used: ${nul}; fshare uploads clean removes it`,
    ]);

    const cleaned = await run(['uploads', 'clean']);
    expect(cleaned.exitCode, cleaned.stderr).toBe(0);
    expect(cleaned.stdout.trim().split('\n')).toEqual([
      `Removed the damaged upload record ${cut} (not JSON, or cut short; no share to delete)`,
      `Removed the damaged upload record ${nul} (not an upload record; no share to delete)`,
    ]);
    expect(existsSync(cut) || existsSync(nul)).toBe(false);
    expect(await readdir(dir)).toEqual([]);
    const after = await run(['--json', 'uploads']);
    expect(JSON.parse(after.stdout)).toEqual([]);
  });
});
