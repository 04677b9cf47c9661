// The client on a USB drive's file system: exFAT (Debian's exfat-fuse on a loop device), which
// keeps no permissions, does not tell case apart, and takes no ":" or "?" in a name. The built
// binary against a real `fshare serve`. Each test names what was found from outside.
import { mkdir, readdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  ADMIN,
  createCli,
  signIn,
  startServe,
  tempDir,
  type Cli,
  type Serve,
} from '../helpers/cli.js';
import { mountExfat, type SmallDisk } from '../helpers/mount.js';

let serve: Serve;
let admin: Cli;
let work: string;
let disk: SmallDisk | string;

beforeAll(async () => {
  serve = await startServe();
  admin = await createCli();
  await signIn(admin, serve.url);
  work = await tempDir('exfat');
  disk = await mountExfat(32);
});
afterAll(async () => {
  if (typeof disk !== 'string') await disk.unmount();
  await serve?.stop();
});

/** The one line on stderr. */
function errorLine(stderr: string): string {
  const lines = stderr.trimEnd().split('\n');
  expect(lines, stderr).toHaveLength(1);
  return lines[0]!;
}

describe('fshare on exFAT', () => {
  // Found: with FSHARE_CONFIG_DIR there (and no keychain), login wrote the token into
  // credentials.json, which every user of the machine could read (0777 whatever fshare asked).
  // Property: no token is written where others could read it; the line says so and what to do.
  it('login with the config directory there stores no token, and says why (exit 1)', async (ctx) => {
    if (typeof disk === 'string') return ctx.skip(disk);
    const config = join(disk.dir, 'config');
    const cli = await createCli(config);
    const res = await cli.run(
      ['--server', serve.url, 'login', '-u', ADMIN.username, '--password-stdin'],
      { input: `${ADMIN.password}\n` },
    );
    expect(res.exitCode).toBe(1);
    expect(errorLine(res.stderr)).toBe(
      `fshare: ${config} is on a file system that keeps no file permissions (a file made 0600 there is 777), so other users could read the token: none was stored; set FSHARE_CONFIG_DIR to a directory on another file system`,
    );
    expect((await readdir(config)).filter((n) => n.startsWith('credentials.json'))).toEqual(
      (await readdir(config)).filter((n) => n === 'credentials.json.lock'),
    );
  });

  // Found: a credentials.json put there by hand (or by an older fshare) was used as it was,
  // readable by every user. Property: each command says, once, that its tokens can be read and
  // what to do, and goes on.
  it('a credentials.json there is named as readable by others by each command', async (ctx) => {
    if (typeof disk === 'string') return ctx.skip(disk);
    const config = join(disk.dir, 'config-copied');
    await mkdir(config);
    const file = join(config, 'credentials.json');
    await writeFile(file, await readFile(join(admin.configDir, 'credentials.json')));
    const cli = await createCli(config);
    for (let run = 0; run < 2; run++) {
      const who = await cli.run(['--server', serve.url, 'whoami']);
      expect(who.exitCode, who.stderr).toBe(0);
      expect(who.stdout).toMatch(/^admin on /);
      expect(errorLine(who.stderr)).toBe(
        `fshare: the credentials file ${file} is open to other users (mode 777) and could not be made 0600, so its tokens can be read: move it into a private FSHARE_CONFIG_DIR`,
      );
    }
  });

  // Found: `fshare get` of a share named a:b?.txt into a folder there said "no such file or
  // directory: a:b?.txt", exit 1, naming nothing missing. Property: the line says that the file
  // system refuses the name, and -o gets the bytes.
  it('get of a name the file system refuses says so; -o saves it', async (ctx) => {
    if (typeof disk === 'string') return ctx.skip(disk);
    const src = join(work, 'a:b?.txt');
    await writeFile(src, 'refused name\n');
    const up = await admin.json<{ share_id: string }[]>(['upload', src]);
    const id = up[0]!.share_id;
    const res = await admin.run(['get', id, '--no-progress'], { cwd: disk.dir });
    expect(res.exitCode).toBe(1);
    expect(errorLine(res.stderr)).toBe(
      `fshare: the file system of ${disk.dir} does not take the name a:b?.txt; save it under another name with -o`,
    );
    expect((await readdir(disk.dir)).filter((n) => n.includes('.part'))).toEqual([]);
    const saved = await admin.run(['get', id, '-o', join(disk.dir, 'a-b.txt'), '--no-progress']);
    expect(saved.exitCode, saved.stderr).toBe(0);
    expect(await readFile(join(disk.dir, 'a-b.txt'), 'utf8')).toBe('refused name\n');
  });

  // Found: exFAT counts a file's times in whole seconds, and a push right after a same-size edit
  // there said "unchanged" (5 times in 5): the hash cache took the file's times for its bytes,
  // and the set kept the old ones. Property: a push after an edit sends the new bytes, however
  // soon it comes.
  it('push right after a same-size edit sends the new bytes', async (ctx) => {
    if (typeof disk === 'string') return ctx.skip(disk);
    const dir = join(disk.dir, 'racy');
    await mkdir(dir);
    for (let round = 1; round <= 3; round++) {
      const name = `racy-${round}`;
      await writeFile(join(dir, 'f.txt'), `version A ${round}\n`);
      expect((await admin.run(['push', dir, '--name', name])).exitCode).toBe(0);
      await writeFile(join(dir, 'f.txt'), `version B ${round}\n`);
      const again = await admin.run(['push', dir, '--name', name]);
      expect(again.exitCode, again.stderr).toBe(0);
      expect(again.stdout).not.toMatch(/unchanged/);
      const out = join(work, `racy-out-${round}`);
      expect((await admin.run(['pull', name, out])).exitCode).toBe(0);
      expect(await readFile(join(out, 'f.txt'), 'utf8')).toBe(`version B ${round}\n`);
    }
  });

  // Found: a folder there holding Readme, pulled with --delete from a set holding README (one
  // name on exFAT): the pull said "2 files … 1 removed", exit 0, and README was gone: Readme was
  // removed as a file the set lacks, and it was README. Property: after pull --delete, every file
  // of the set is there with its bytes, and only what the set lacks is removed.
  it("pull --delete keeps a file whose name differs from the set's only in case", async (ctx) => {
    if (typeof disk === 'string') return ctx.skip(disk);
    const src = join(work, 'readme-src');
    await mkdir(src);
    await writeFile(join(src, 'README'), "the set's readme\n");
    await writeFile(join(src, 'other.txt'), 'other\n');
    expect((await admin.run(['push', src, '--name', 'readme'])).exitCode).toBe(0);
    for (const [round, old] of ["the set's readme\n", 'an older readme\n'].entries()) {
      const into = join(disk.dir, `readme-${round}`);
      await mkdir(into);
      await writeFile(join(into, 'Readme'), old);
      await writeFile(join(into, 'stray.txt'), 'not in the set\n');
      const res = await admin.run(['pull', 'readme', into, '--delete']);
      expect(res.exitCode, res.stderr).toBe(0);
      expect(await readFile(join(into, 'README'), 'utf8')).toBe("the set's readme\n");
      expect(await readFile(join(into, 'other.txt'), 'utf8')).toBe('other\n');
      expect((await readdir(into)).map((n) => n.toLowerCase()).sort()).toEqual([
        'other.txt',
        'readme',
      ]);
    }
  });

  // Found: a set holding A.txt and a.txt pulled there was written into one file ("4 files",
  // exit 0; the next pull found both "already there"); one holding sub/x:y.txt stopped halfway
  // through putting its files in place, the folder a mix of two versions, and every later pull
  // stopped at the same step. Property: names the file system cannot hold apart are refused
  // before anything is written; elsewhere the same sets pull whole.
  it('pull of a set whose names the file system cannot hold apart: refused, nothing written', async (ctx) => {
    if (typeof disk === 'string') return ctx.skip(disk);
    const cases = join(work, 'cases');
    const colon = join(work, 'colon');
    for (const [dir, files] of [
      [
        cases,
        { 'A.txt': 'upper\n', 'a.txt': 'lower\n', 'caf\u00e9': 'nfc\n', 'cafe\u0301': 'nfd\n' },
      ],
      [colon, { 'a.txt': 'a\n', 'sub/x:y.txt': 'colon\n', 'z.txt': 'z\n' }],
    ] as const) {
      for (const [rel, text] of Object.entries(files)) {
        await mkdir(join(dir, rel, '..'), { recursive: true });
        await writeFile(join(dir, rel), text);
      }
    }
    for (const [dir, name] of [
      [cases, 'cases'],
      [colon, 'colon'],
    ])
      expect((await admin.run(['push', dir, '--name', name])).exitCode).toBe(0);

    // On ext4 both sets pull whole: every name apart (the two forms of café too).
    for (const name of ['cases', 'colon']) {
      const out = join(work, `pulled-${name}`);
      const res = await admin.run(['pull', name, out]);
      expect(res.exitCode, res.stderr).toBe(0);
    }
    expect((await readdir(join(work, 'pulled-cases'))).sort()).toEqual(
      ['A.txt', 'a.txt', 'caf\u00e9', 'cafe\u0301'].sort(),
    );
    expect(await readFile(join(work, 'pulled-colon', 'sub', 'x:y.txt'), 'utf8')).toBe('colon\n');

    const intoCases = join(disk.dir, 'cases');
    const refused = await admin.run(['pull', 'cases', intoCases]);
    expect(refused.exitCode).toBe(1);
    expect(errorLine(refused.stderr)).toBe(
      `fshare: the set holds A.txt and a.txt, which are one name on the file system of ${intoCases} (it does not tell case or Unicode forms apart): nothing written; pull into a directory on a file system that does`,
    );
    expect(await readdir(intoCases)).toEqual([]);

    const intoColon = join(disk.dir, 'colon');
    const stopped = await admin.run(['pull', 'colon', intoColon]);
    expect(stopped.exitCode).toBe(1);
    expect(errorLine(stopped.stderr)).toBe(
      `fshare: sub/x:y.txt: the file system of ${intoColon} does not take ":" in a name: nothing written; pull into a directory on a file system that does`,
    );
    expect(await readdir(intoColon)).toEqual([]);
    // A file and a directory that are one name there (docs, Docs/x) stopped the commit halfway
    // (EISDIR): refused before anything is written. Two directories (Dir/x, dir/y) just merge.
    const shapes = join(work, 'shapes');
    const merged = join(work, 'merged');
    await mkdir(join(shapes, 'Docs'), { recursive: true });
    await mkdir(join(merged, 'Dir'), { recursive: true });
    await mkdir(join(merged, 'dir'), { recursive: true });
    await writeFile(join(shapes, 'docs'), 'a file\n');
    await writeFile(join(shapes, 'Docs', 'x'), 'in a directory\n');
    await writeFile(join(merged, 'Dir', 'x'), 'x\n');
    await writeFile(join(merged, 'dir', 'y'), 'y\n');
    expect((await admin.run(['push', shapes, '--name', 'shapes'])).exitCode).toBe(0);
    expect((await admin.run(['push', merged, '--name', 'merged'])).exitCode).toBe(0);
    const intoShapes = join(disk.dir, 'shapes');
    const shaped = await admin.run(['pull', 'shapes', intoShapes]);
    expect(shaped.exitCode).toBe(1);
    expect(errorLine(shaped.stderr)).toBe(
      `fshare: the set holds docs and Docs, which are one name on the file system of ${intoShapes} (it does not tell case or Unicode forms apart): nothing written; pull into a directory on a file system that does`,
    );
    expect(await readdir(intoShapes)).toEqual([]);
    const intoMerged = join(disk.dir, 'merged');
    const both = await admin.run(['pull', 'merged', intoMerged]);
    expect(both.exitCode, both.stderr).toBe(0);
    expect(await readFile(join(intoMerged, 'Dir', 'x'), 'utf8')).toBe('x\n');
    expect(await readFile(join(intoMerged, 'dir', 'y'), 'utf8')).toBe('y\n');

    // And nothing is left to finish: a pull of another set into it just works.
    const after = await admin.run(['pull', 'cases', join(work, 'pulled-again')]);
    expect(after.exitCode, after.stderr).toBe(0);
  });
});
