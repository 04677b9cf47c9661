// What `fshare upload` promises around its record and its file, found broken from outside: a run
// killed after the server's 201 made a second share on the next run; a token revoked mid-upload
// left an empty share no record named; a file moved over the path mid-upload was only caught by
// the server's digest. The built binary against a real `fshare serve`, through a small proxy.
import { randomBytes } from 'node:crypto';
import { mkdir, open, readdir, rename, rm, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createCli,
  uploadRecordsOf,
  signIn,
  startServe,
  tempDir,
  type Cli,
  type Serve,
} from '../helpers/cli.js';
import { chunkCounter } from '../helpers/chunk-proxy.js';
import { sha256hex } from '../helpers/http.js';
import { startStandIn } from '../helpers/standin.js';

interface Transfer {
  share_id: string;
  url: string;
  file_name: string;
  size: number;
  sha256: string;
  verified: boolean;
  resumed_bytes: number;
}

interface Record {
  /** null in a record written before its create was answered */
  share_id: string;
  create_key?: string;
  dzuuid: string;
  path: string;
}

const recordsOf = (cli: Cli) => uploadRecordsOf<Record>(cli);

describe('fshare upload: its record and its file', () => {
  let serve: Serve;
  let cli: Cli;
  let work: string;
  let proxy: ReturnType<typeof chunkCounter>;
  let via: string;

  beforeAll(async () => {
    serve = await startServe();
    proxy = chunkCounter(serve.url);
    via = await proxy.start();
    cli = await createCli();
    work = await tempDir('upload-integrity');
    await signIn(cli, via);
  });

  afterAll(async () => {
    await proxy?.close();
    await serve?.stop();
    for (const dir of [cli?.configDir, work])
      if (dir) await rm(dir, { recursive: true, force: true });
  });

  /** `fshare upload` as a process of its own (to be killed), through the proxy. */
  const background = (args: string[]) => cli.start(['--server', via, 'upload', ...args]);

  const sharesNamed = async (name: string) =>
    (
      await cli.json<{ shares: { share_id: string; file_name: string }[] }>([
        '--server',
        via,
        'ls',
        '--all',
      ])
    ).shares
      .filter((s) => s.file_name === name)
      .map((s) => s.share_id);

  /**
   * Uploads a new 1 MiB file in 128 KiB chunks, one at a time and slowed, and runs `change` on
   * it once the first chunk is stored. Its name, path and the run's result.
   */
  const changedMidUpload = async (label: string, change: (path: string) => Promise<void>) => {
    const name = `${label}-${Date.now()}.bin`;
    const path = join(work, name);
    await writeFile(path, randomBytes(1024 * 1024));
    proxy.state.seen.length = 0;
    proxy.state.delayMs = 100;
    try {
      const child = background([path, '--chunk-size', '128k', '--parallel', '1']);
      for (
        let i = 0;
        i < 600 && !proxy.state.seen.some((s) => s.url.endsWith('/content') && s.status === 200);
        i++
      )
        await sleep(20);
      await change(path);
      return { name, path, res: await child };
    } finally {
      proxy.state.delayMs = 0;
    }
  };

  /**
   * Runs `fshare upload path` and SIGKILLs it once the server has answered 201 to its last chunk,
   * an answer the proxy keeps from it (so it cannot have forgotten its record). Returns the
   * record it left.
   */
  const killAfter201 = async (path: string): Promise<Record> => {
    proxy.state.statuses = [];
    proxy.state.swallow = () => proxy.state.statuses.includes(201);
    proxy.state.seen.length = 0;
    const child = background([path, '--chunk-size', '64k']);
    for (let i = 0; i < 600 && !proxy.state.statuses.includes(201); i++) await sleep(20);
    await sleep(100); // and the answer is swallowed, not on its way
    child.kill('SIGKILL');
    await child;
    proxy.state.swallow = () => false;
    expect(proxy.state.statuses.filter((s) => s === 201)).toHaveLength(1);
    const records = (await recordsOf(cli)).filter((r) => r.path === path);
    expect(records).toHaveLength(1);
    return records[0]!;
  };

  // Property: an acknowledged upload is recognised as finished. A SIGKILL after the server's 201
  // to the last chunk but before the record was removed made the next `fshare upload FILE` create
  // a second share; now the share is asked for, its sha256 and size match the file's, and the run reports
  // it as a finished upload (same stdout and --json), forgets the record and makes no new share.
  it('a run killed after the last 201: the next run reports that share, and makes no second one', async () => {
    const name = `killed-after-201-${Date.now()}.bin`;
    const path = join(work, name);
    const data = randomBytes(300_000);
    await writeFile(path, data);

    const first = await killAfter201(path);
    expect(await sharesNamed(name)).toEqual([first.share_id]);
    proxy.state.seen.length = 0;
    const again = await cli.run(['--server', via, '--json', 'upload', path, '--chunk-size', '64k']);
    expect(again.exitCode, again.stderr).toBe(0);
    expect(again.stderr).toBe('');
    const [done] = JSON.parse(again.stdout) as Transfer[];
    expect(done).toMatchObject({
      share_id: first.share_id,
      url: `${via}/files/${first.share_id}`,
      file_name: name,
      size: data.length,
      sha256: sha256hex(data),
      verified: true,
      resumed_bytes: data.length,
    });
    expect(await sharesNamed(name)).toEqual([first.share_id]);
    expect(await recordsOf(cli)).toEqual([]);
    // Nothing was sent again, and nothing made.
    expect(proxy.state.seen.filter((s) => s.url.endsWith('/content'))).toEqual([]);
    expect(proxy.state.seen.filter((s) => s.method === 'POST' && s.url === '/files')).toEqual([]);

    // The human output is that of a finished upload: "id  url  name".
    const second = await killAfter201(path);
    const human = await cli.run(['--server', via, 'upload', path]);
    expect(human.exitCode, human.stderr).toBe(0);
    expect(human.stdout).toBe(`${second.share_id}  ${via}/files/${second.share_id}  ${name}`);
    expect((await sharesNamed(name)).sort()).toEqual([first.share_id, second.share_id].sort());
    expect(await recordsOf(cli)).toEqual([]);
  });

  // Property: a record whose share now holds other content (replaced since) or is gone is never
  // taken for a finished upload, nor silently replaced by a duplicate: one line says what was
  // found, the record goes, the other share is untouched, and the file is uploaded anew.
  it('a record whose share was replaced or deleted since: said in one line, uploaded anew', async () => {
    const name = `stale-${Date.now()}.bin`;
    const path = join(work, name);
    const data = randomBytes(200_000);
    await writeFile(path, data);
    const other = join(work, `${name}.other`);
    const otherData = randomBytes(200_000);
    await writeFile(other, otherData);

    const replaced = await killAfter201(path);
    const put = await cli.run(['--server', via, 'replace', replaced.share_id, other]);
    expect(put.exitCode, put.stderr).toBe(0);
    const anew = await cli.run(['--server', via, '--json', 'upload', path]);
    expect(anew.exitCode, anew.stderr).toBe(0);
    expect(anew.stderr.trimEnd().split('\n')).toEqual([
      `fshare: share ${replaced.share_id} of the earlier upload of ${path} holds other content now; uploading it again into a new share`,
    ]);
    const [fresh] = JSON.parse(anew.stdout) as Transfer[];
    expect(fresh).toMatchObject({ sha256: sha256hex(data), verified: true, resumed_bytes: 0 });
    expect(fresh!.share_id).not.toBe(replaced.share_id);
    const kept = await cli.runBinary(['--server', via, 'get', replaced.share_id, '-o', '-']);
    expect(kept.stdout.equals(otherData)).toBe(true);
    expect(await recordsOf(cli)).toEqual([]);

    const gone = await killAfter201(path);
    // Deleted behind this client's back (another machine, the web page): the record stays.
    const res = await fetch(`${serve.url}/files/${gone.share_id}`, {
      method: 'DELETE',
      headers: { authorization: `Bearer ${(await cli.run(['token'])).stdout.trim()}` },
    });
    expect(res.status).toBe(200);
    expect(await recordsOf(cli)).toHaveLength(1);
    const after = await cli.run(['--server', via, '--json', 'upload', path]);
    expect(after.exitCode, after.stderr).toBe(0);
    expect(after.stderr.trimEnd().split('\n')).toEqual([
      `fshare: share ${gone.share_id} of the earlier upload of ${path} is gone; uploading it again into a new share`,
    ]);
    expect(await recordsOf(cli)).toEqual([]);
  });

  // Property: what the client hashes is what it sends, and it checks that the path still names
  // the file it read. A file moved over the path mid-upload (`mv other FILE`) was read partly
  // from each (the path was opened again for the hash and every chunk) and caught only by the
  // server's digest (exit 7). Now one descriptor reads it all, and the end check sees another
  // file: "changed while it was uploading", exit 1, and the share it created is deleted.
  it('a file moved over the path mid-upload: "changed while it was uploading", exit 1, no share left', async () => {
    const { name, path, res } = await changedMidUpload('moved-over', async (at) => {
      const other = `${at}.new`;
      await writeFile(other, randomBytes(1024 * 1024));
      await rename(other, at);
    });
    expect(res.stderr.trimEnd().split('\n')).toEqual([
      `fshare: ${path} changed while it was uploading; run the command again (the share it had created was deleted)`,
    ]);
    expect(res.exitCode).toBe(1);
    // Every chunk came from the one file read: the server took them all, digest included.
    expect(proxy.state.seen.filter((s) => s.url.endsWith('/content')).map((s) => s.status)).toEqual(
      [200, 200, 200, 200, 200, 200, 200, 201],
    );
    expect(await sharesNamed(name)).toEqual([]);
    expect(await recordsOf(cli)).toEqual([]);
  });

  // Property: a file written to in place while it uploads (same file, same size) is said to have
  // changed, like one moved over the path. Found from outside: the hashing thread had read the
  // file ahead of the chunks, so the server's sha256 of the bytes sent refused them, and the
  // line was the server's "The uploaded bytes have sha256 …, not the … that dzsha256
  // announced" with exit 7, as if the network had damaged them.
  it('a file written to in place mid-upload: "changed while it was uploading", exit 1, no share left', async () => {
    const { name, path, res } = await changedMidUpload('written', async (at) => {
      // The last chunk's bytes, long hashed by now and not yet sent.
      const handle = await open(at, 'r+');
      await handle.write(randomBytes(1000), 0, 1000, 1024 * 1024 - 1000);
      await handle.close();
    });
    expect(res.stderr.trimEnd().split('\n')).toEqual([
      `fshare: ${path} changed while it was uploading; run the command again (the share it had created was deleted)`,
    ]);
    expect(res.exitCode).toBe(1);
    // The server took every chunk and refused the last by its sha256: the bytes sent were not
    // the bytes hashed.
    expect(proxy.state.seen.filter((s) => s.url.endsWith('/content')).map((s) => s.status)).toEqual(
      [200, 200, 200, 200, 200, 200, 200, 422],
    );
    expect(await sharesNamed(name)).toEqual([]);
    expect(await recordsOf(cli)).toEqual([]);
  });

  // Property: a replacement is verified by what its own completing chunk published. Found from
  // outside: two `fshare replace` of one share at once; the first to finish read the share
  // afterwards, found the other's content, and said "the server stored other bytes", exit 7,
  // although its upload had been stored whole (and was then replaced, as the second asked).
  // Here the first's 201 is held until another replacement has landed.
  it('two replaces of one share at once: each verified by its own 201, both exit 0, the share holds the last', async () => {
    const name = `raced-${Date.now()}.bin`;
    const path = join(work, name);
    await writeFile(path, randomBytes(100_000));
    const [up] = await cli.json<Transfer[]>(['--server', via, 'upload', path]);
    const mine = randomBytes(100_000);
    const theirs = randomBytes(100_000);
    await writeFile(join(work, 'mine.bin'), mine);
    await writeFile(join(work, 'theirs.bin'), theirs);
    proxy.state.statuses = [];
    proxy.state.holdAnswers = true;
    let first;
    try {
      first = cli.start([
        '--server',
        via,
        '--json',
        'replace',
        up!.share_id,
        join(work, 'mine.bin'),
      ]);
      await proxy.until(() => proxy.state.statuses.includes(201));
      // The other replacement while the first waits for its answer (held; no other is).
      proxy.state.holdAnswers = false;
      const other = await cli.run([
        '--server',
        via,
        'replace',
        up!.share_id,
        join(work, 'theirs.bin'),
      ]);
      expect(other.exitCode, other.stderr).toBe(0);
    } finally {
      proxy.releaseAnswers();
    }
    const res = await first;
    expect(res.stderr).toBe('');
    expect(res.exitCode).toBe(0);
    expect(JSON.parse(res.stdout)).toMatchObject({ sha256: sha256hex(mine), verified: true });
    const now = await cli.runBinary(['--server', via, 'get', up!.share_id, '-o', '-']);
    expect(sha256hex(now.stdout)).toBe(sha256hex(theirs));
  });

  // Property: from the moment a share exists there is a record of it. A 401 mid-upload (the
  // token revoked by `fshare logout` elsewhere) left an empty share that no record remembered, so
  // `fshare uploads` did not list it and `uploads clean` could not delete it. Now the line names
  // the share left, exit 3, the record stays, and once signed in again `uploads clean` deletes it.
  it('a token revoked mid-upload: exit 3 naming the empty share left, listed, and cleaned after signing in', async () => {
    const name = `revoked-${Date.now()}.bin`;
    const path = join(work, name);
    await writeFile(path, randomBytes(1024 * 1024));
    proxy.state.seen.length = 0;
    proxy.state.delayMs = 150;
    let child;
    try {
      child = background([path, '--chunk-size', '64k', '--parallel', '1']);
      for (
        let i = 0;
        i < 600 && !proxy.state.seen.some((s) => s.url.endsWith('/content') && s.status === 200);
        i++
      )
        await sleep(20);
      const out = await cli.run(['--server', via, 'logout']);
      expect(out.exitCode, out.stderr).toBe(0);
    } finally {
      proxy.state.delayMs = 0;
    }
    const res = await child;
    expect(res.exitCode).toBe(3);
    const records = await recordsOf(cli);
    expect(records).toHaveLength(1);
    const id = records[0]!.share_id;
    const lines = String(res.stderr).trimEnd().split('\n');
    expect(lines).toEqual([
      expect.stringMatching(
        new RegExp(
          `^fshare: .* \\(the share it had created, ${id}, is left empty\\) \\(HTTP 401\\); run \`fshare login\` \\(or set FSHARE_TOKEN\\)$`,
        ),
      ),
      `fshare: to resume: fshare upload ${path}; to give up: fshare uploads clean`,
    ]);
    const listed = await cli.json<{ share_id: string; path: string }[]>(['uploads']);
    expect(listed).toMatchObject([{ share_id: id, path }]);

    await signIn(cli, via);
    const info = await cli.json<{ initialized: boolean }>(['--server', via, 'info', id]);
    expect(info.initialized).toBe(false);
    const cleaned = await cli.run(['uploads', 'clean']);
    expect(cleaned.exitCode, cleaned.stderr).toBe(0);
    expect(cleaned.stdout).toBe(`Deleted share ${id} of the unfinished upload of ${path}`);
    expect((await cli.run(['--server', via, 'info', id])).exitCode).toBe(4);
    expect(await recordsOf(cli)).toEqual([]);
  });

  /**
   * Runs `fshare upload path` and SIGKILLs it once the server has answered its create (POST
   * /files), an answer the client never gets. Returns the share the server made.
   */
  const killAtCreate = async (path: string, name: string): Promise<string> => {
    proxy.state.seen.length = 0;
    proxy.state.swallow = (req) => req.method === 'POST' && req.url === '/files';
    try {
      const child = background([path]);
      for (
        let i = 0;
        i < 600 && !proxy.state.seen.some((s) => s.url === '/files' && s.status === 201);
        i++
      )
        await sleep(20);
      child.kill('SIGKILL');
      await child;
    } finally {
      proxy.state.swallow = () => false;
    }
    const made = await sharesNamed(name);
    expect(made).toHaveLength(1);
    return made[0]!;
  };

  // Property: from the moment a share exists, a record names it. A SIGKILL between the server
  // making the share (POST /files) and the client writing its record left a share no record
  // named: `fshare uploads` and `uploads clean` never saw it, and the next run made a second one.
  // Now the record (with the Idempotency-Key the create sends) is written first; the next run
  // sends the create again with that key, gets the same share and goes on in it; `uploads clean`
  // finds it the same way and deletes it.
  it('a run killed between the create and its answer: the next run goes on in that share, and uploads clean deletes it', async () => {
    const name = `killed-at-create-${Date.now()}.bin`;
    const path = join(work, name);
    const data = randomBytes(200_000);
    await writeFile(path, data);

    const id = await killAtCreate(path, name);
    const [record, ...others] = (await recordsOf(cli)).filter((r) => r.path === path);
    expect(others).toEqual([]);
    expect(record).toMatchObject({ share_id: null, create_key: expect.any(String) });
    const listed = await cli.json<{ share_id: string | null; url: string | null; path: string }[]>([
      'uploads',
    ]);
    expect(listed).toMatchObject([{ share_id: null, url: null, path }]);

    const again = await cli.run(['--server', via, '--json', 'upload', path]);
    expect(again.exitCode, again.stderr).toBe(0);
    expect(again.stderr.trimEnd().split('\n')).toEqual([
      `fshare: the earlier upload of ${path} was stopped while its share was being created; it goes on in that share, ${id}`,
    ]);
    const [done] = JSON.parse(again.stdout) as Transfer[];
    expect(done).toMatchObject({ share_id: id, sha256: sha256hex(data), verified: true });
    expect(await sharesNamed(name)).toEqual([id]);
    expect(await recordsOf(cli)).toEqual([]);

    // Given up instead: uploads clean finds the share by the key, and deletes it.
    const name2 = `${name}.2`;
    const path2 = join(work, name2);
    await writeFile(path2, data);
    const id2 = await killAtCreate(path2, name2);
    const cleaned = await cli.run(['--server', via, 'uploads', 'clean']);
    expect(cleaned.exitCode, cleaned.stderr).toBe(0);
    expect(cleaned.stderr).toBe('');
    expect(cleaned.stdout).toBe(`Deleted share ${id2} of the unfinished upload of ${path2}`);
    expect(await sharesNamed(name2)).toEqual([]);
    expect(await recordsOf(cli)).toEqual([]);
  });

  /** Runs `fshare upload path` and SIGKILLs it mid-upload (a chunk taken); returns its record. */
  /**
   * Runs `fshare upload path` and SIGKILLs it while the proxy holds its create (POST /files), so
   * the create never reaches the server. Returns the record it left.
   */
  const killBeforeCreate = async (path: string): Promise<Record> => {
    proxy.state.held = 0;
    proxy.state.hold = (req) => req.method === 'POST' && req.url === '/files';
    try {
      const child = background([path]);
      for (let i = 0; i < 600 && proxy.state.held === 0; i++) await sleep(20);
      child.kill('SIGKILL');
      await child;
    } finally {
      proxy.state.hold = () => false;
    }
    expect(proxy.state.held).toBe(1);
    const records = (await recordsOf(cli)).filter((r) => r.path === path);
    expect(records).toMatchObject([{ share_id: null, create_key: expect.any(String) }]);
    return records[0]!;
  };

  // Property: the client never tells the user something false. A run killed before its create
  // reached fshare serve left a record with its key; the next run (and `uploads clean`, and
  // `upload --restart`) sent the create again, fshare serve made a new share, and fshare warned
  // that "a server that does not take Idempotency-Key (the reference server) may have left an
  // empty share": false, fshare serve takes the key, so the earlier create made nothing. Now
  // fshare serve answers `Idempotent-Replayed: false` and that line is only for a server that
  // says nothing (the stand-in below still gets it).
  it('a run killed before its create reached fshare serve: no "may have left" line on the next run, uploads clean or --restart', async () => {
    const name = `killed-before-create-${Date.now()}.bin`;
    const path = join(work, name);
    const data = randomBytes(100_000);
    await writeFile(path, data);

    await killBeforeCreate(path);
    expect(await sharesNamed(name)).toEqual([]);
    const again = await cli.run(['--server', via, '--json', 'upload', path]);
    expect(again.exitCode, again.stderr).toBe(0);
    expect(again.stderr).toBe('');
    const [done] = JSON.parse(again.stdout) as Transfer[];
    expect(done).toMatchObject({ sha256: sha256hex(data), verified: true });
    expect(await sharesNamed(name)).toEqual([done!.share_id]);
    expect(await recordsOf(cli)).toEqual([]);

    // Given up instead: nothing to delete, nothing to warn of.
    const name2 = `${name}.2`;
    const path2 = join(work, name2);
    await writeFile(path2, data);
    await killBeforeCreate(path2);
    const cleaned = await cli.run(['--server', via, 'uploads', 'clean']);
    expect(cleaned.exitCode, cleaned.stderr).toBe(0);
    expect(cleaned.stderr).toBe('');
    expect(cleaned.stdout).toBe(`Forgot the unfinished upload of ${path2}`);
    expect(await sharesNamed(name2)).toEqual([]);
    expect(await recordsOf(cli)).toEqual([]);

    // Started over with --restart: the same, then one new share.
    await killBeforeCreate(path2);
    const restarted = await cli.run(['--server', via, '--json', 'upload', '--restart', path2]);
    expect(restarted.exitCode, restarted.stderr).toBe(0);
    expect(restarted.stderr).toBe('');
    const [fresh] = JSON.parse(restarted.stdout) as Transfer[];
    expect(await sharesNamed(name2)).toEqual([fresh!.share_id]);
    expect(await recordsOf(cli)).toEqual([]);
  });

  const killMidUpload = async (path: string): Promise<Record> => {
    proxy.state.seen.length = 0;
    proxy.state.delayMs = 100;
    try {
      const child = background([path, '--chunk-size', '64k', '--parallel', '1']);
      for (
        let i = 0;
        i < 600 && !proxy.state.seen.some((s) => s.url.endsWith('/content') && s.status === 200);
        i++
      )
        await sleep(20);
      child.kill('SIGKILL');
      await child;
    } finally {
      proxy.state.delayMs = 0;
    }
    const [record] = (await recordsOf(cli)).filter((r) => r.path === path);
    expect(record?.share_id).toEqual(expect.any(String));
    return record!;
  };

  // Property: uploads clean deletes only the user's own shares, and a share that is not the
  // user's any more never stops it. A share handed to another user since (fshare serve shows it
  // to anyone with READ) was deleted under its new owner; one the server answers 403 for (the
  // reference, for another's share) stopped the command there, exit 3, that record kept forever
  // and the records after it never handled. Now each such record is forgotten with one line saying
  // the share is no longer the user's (not deleted), the others are cleaned, and the exit is 0.
  it('uploads clean forgets, without deleting, a share handed to another user or answered 403, and cleans the rest', async () => {
    const stamp = Date.now();
    const paths = ['given', 'mine', 'forbidden'].map((n) => join(work, `clean-${n}-${stamp}.bin`));
    for (const p of paths) await writeFile(p, randomBytes(1024 * 1024));
    const records: Record[] = [];
    for (const p of paths) records.push(await killMidUpload(p));
    const bob = await cli.run(
      ['--server', via, 'users', 'add', `bob${stamp}`, '--perms', 'READ', '--password-stdin'],
      {
        input: 'bob-password-123\n',
      },
    );
    expect(bob.exitCode, bob.stderr).toBe(0);
    const chown = await cli.run(['--server', via, 'chown', records[0]!.share_id, `bob${stamp}`]);
    expect(chown.exitCode, chown.stderr).toBe(0);
    proxy.state.forbid = (req) =>
      req.method === 'GET' && req.url === `/files/${records[2]!.share_id}`;
    let cleaned;
    try {
      cleaned = await cli.run(['--server', via, 'uploads', 'clean']);
    } finally {
      proxy.state.forbid = () => false;
    }
    expect(cleaned.exitCode, cleaned.stderr).toBe(0);
    expect(cleaned.stderr).toBe('');
    expect(cleaned.stdout.split('\n')).toEqual([
      `Forgot the unfinished upload of ${paths[0]}: share ${records[0]!.share_id} is no longer yours (not deleted)`,
      `Deleted share ${records[1]!.share_id} of the unfinished upload of ${paths[1]}`,
      `Forgot the unfinished upload of ${paths[2]}: share ${records[2]!.share_id} is no longer yours (not deleted)`,
    ]);
    expect(await recordsOf(cli)).toEqual([]);
    const info = await cli.json<{ owner_name: string }>([
      '--server',
      via,
      'info',
      records[0]!.share_id,
    ]);
    expect(info.owner_name).toBe(`bob${stamp}`);
    expect((await cli.run(['--server', via, 'info', records[1]!.share_id])).exitCode).toBe(4);
    expect((await cli.run(['--server', via, 'info', records[2]!.share_id])).exitCode).toBe(0);
  });

  // Property: an upload never deletes a share that is not the user's. A share handed to another
  // user after a run was killed was taken up by the next run (fshare serve shows it to anyone
  // with READ); its chunks got 403, and the failure deleted the new owner's share. Now the run
  // sees the owner, says the share is not the user's any more and uploads into a new share; and
  // a chunk refused with 403 (a handover while it runs) leaves the share and its record, for
  // uploads clean to judge, instead of deleting it.
  it('an upload whose share was handed to another user since: a new share, the other untouched; a 403 on a chunk deletes nothing', async () => {
    const stamp = Date.now();
    const path = join(work, `handed-${stamp}.bin`);
    const data = randomBytes(1024 * 1024);
    await writeFile(path, data);
    const record = await killMidUpload(path);
    const user = `carol${stamp}`;
    const added = await cli.run(
      ['--server', via, 'users', 'add', user, '--perms', 'READ', '--password-stdin'],
      { input: 'carol-password-123\n' },
    );
    expect(added.exitCode, added.stderr).toBe(0);
    const chown = await cli.run(['--server', via, 'chown', record.share_id, user]);
    expect(chown.exitCode, chown.stderr).toBe(0);
    const again = await cli.run(['--server', via, '--json', 'upload', path]);
    expect(again.exitCode, again.stderr).toBe(0);
    expect(again.stderr.trimEnd().split('\n')).toEqual([
      `fshare: share ${record.share_id} of the earlier upload of ${path} is not yours any more; uploading it again into a new share`,
    ]);
    const [done] = JSON.parse(again.stdout) as Transfer[];
    expect(done).toMatchObject({ sha256: sha256hex(data), verified: true });
    expect(done!.share_id).not.toBe(record.share_id);
    const kept = await cli.json<{ owner_name: string; initialized: boolean }>([
      '--server',
      via,
      'info',
      record.share_id,
    ]);
    expect(kept).toMatchObject({ owner_name: user, initialized: false });
    expect(await recordsOf(cli)).toEqual([]);

    // Refused with 403 on the way: nothing deleted, the record kept for uploads clean.
    const other = join(work, `forbidden-${stamp}.bin`);
    await writeFile(other, data);
    proxy.state.forbid = (req) => req.method === 'POST' && /\/content$/.test(req.url ?? '');
    let res;
    try {
      res = await cli.run(['--server', via, 'upload', other]);
    } finally {
      proxy.state.forbid = () => false;
    }
    expect(res.exitCode).toBe(3);
    const [left] = (await recordsOf(cli)).filter((r) => r.path === other);
    expect(res.stderr.trim()).toBe(
      `fshare: Only the owner of the share may do this (the share it had created, ${left!.share_id}, is left as it is: fshare uploads clean deletes it if it is still yours) (HTTP 403)`,
    );
    expect((await cli.run(['--server', via, 'info', left!.share_id])).exitCode).toBe(0);
    const cleaned = await cli.run(['--server', via, 'uploads', 'clean']);
    expect(cleaned.stdout).toBe(
      `Deleted share ${left!.share_id} of the unfinished upload of ${other}`,
    );
  });

  // Property: what uploads clean did is said, even when a later record stops it. A failure (here
  // a 401 asking for the second share) ended the command before any line was printed, so the
  // share it had already deleted, and the record it had already removed, went unsaid.
  it('uploads clean stopped by a failure still says what it did before it', async () => {
    const stamp = Date.now();
    const paths = ['first', 'second'].map((n) => join(work, `partial-clean-${n}-${stamp}.bin`));
    for (const p of paths) await writeFile(p, randomBytes(1024 * 1024));
    const records: Record[] = [];
    for (const p of paths) records.push(await killMidUpload(p));
    proxy.state.forbidStatus = 401;
    proxy.state.forbid = (req) =>
      req.method === 'GET' && req.url === `/files/${records[1]!.share_id}`;
    let cleaned;
    try {
      cleaned = await cli.run(['--server', via, 'uploads', 'clean']);
    } finally {
      proxy.state.forbid = () => false;
      proxy.state.forbidStatus = 403;
    }
    expect(cleaned.exitCode).toBe(3);
    expect(cleaned.stdout).toBe(
      `Deleted share ${records[0]!.share_id} of the unfinished upload of ${paths[0]}`,
    );
    expect((await recordsOf(cli)).map((r) => r.path)).toEqual([paths[1]]);
    const again = await cli.run(['--server', via, 'uploads', 'clean']);
    expect(again.exitCode, again.stderr).toBe(0);
    expect(again.stdout).toBe(
      `Deleted share ${records[1]!.share_id} of the unfinished upload of ${paths[1]}`,
    );
  });
});

describe('fshare upload against a server without Idempotency-Key (the reference stand-in)', () => {
  // Property: a record written before its create still works where the key is ignored: the next
  // run cannot get the earlier share back, says so in one line naming what to look for, and
  // uploads into a new share (never worse than before: the share the kill left is the only one
  // not named, as it always was there).
  it('a record without a share id: one line says a share may be left, and the upload goes on', async () => {
    const standIn = await startStandIn();
    const cli = await createCli();
    const work = await tempDir('standin-pending');
    try {
      const path = join(work, 'pending.txt');
      await writeFile(path, 'pending bytes\n');
      const dir = join(cli.configDir, 'uploads');
      await mkdir(dir, { recursive: true });
      const info = await stat(path);
      const key = 'a3c1e8f0-0b1e-4a57-9d1c-5b8f4c2e7a10';
      // Where fshare keeps it: named by server, key, path and mode.
      const named = sha256hex(Buffer.from(`${standIn.url}\0${key}\0${path}\0create`)).slice(0, 32);
      await writeFile(
        join(dir, `${named}.json`),
        JSON.stringify({
          server: standIn.url,
          share_id: null,
          create_key: key,
          dzuuid: 'f1d2c3b4-0000-4000-8000-000000000001',
          path,
          size: info.size,
          mtimeMs: info.mtimeMs,
          ino: info.ino,
          chunk_size: 8 * 1024 * 1024,
          mode: 'create',
          file_name: 'pending.txt',
          started: new Date().toISOString(),
          pid: 999_999_999,
        }),
      );
      const res = await cli.run(['--server', standIn.url, '--json', 'upload', path], {
        env: { FSHARE_TOKEN: 'any-token' },
      });
      expect(res.exitCode, res.stderr).toBe(0);
      expect(res.stderr.trimEnd().split('\n')).toEqual([
        `fshare: the earlier upload of ${path} was stopped while its share was being created; a server that does not take Idempotency-Key (the reference server) may have left an empty share named pending.txt then, which fshare cannot tell from others: fshare ls shows it`,
        `fshare: ${path}: uploaded, but not verified (the server gives no sha256); the file's is ${sha256hex(Buffer.from('pending bytes\n'))}`,
      ]);
      const [done] = JSON.parse(res.stdout) as Transfer[];
      expect(standIn.shares.get(done!.share_id)?.content.toString()).toBe('pending bytes\n');
      expect(await readdir(dir)).toEqual([]);
    } finally {
      await standIn.close();
      await rm(work, { recursive: true, force: true });
    }
  });
});
