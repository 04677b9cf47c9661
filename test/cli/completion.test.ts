import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildProgram } from '../../src/cli/program.js';
import { createCli, tempDir, type Cli } from '../helpers/cli.js';

const TOP = buildProgram().commands.map((c) => c.name());

/** Sources the script, sets COMP_* as bash does for `words` (the last is the word under the cursor), prints COMPREPLY. */
const HARNESS = `
source "$1"
shift
COMP_WORDS=("$@")
COMP_CWORD=$((\${#COMP_WORDS[@]} - 1))
COMP_LINE="\${COMP_WORDS[*]}"
COMP_POINT=\${#COMP_LINE}
fn=$(complete -p fshare | sed -E 's/.*-F ([^ ]+).*/\\1/')
"$fn" fshare "\${COMP_WORDS[COMP_CWORD]}" "\${COMP_WORDS[COMP_CWORD - 1]}"
printf '%s\\n' "\${COMPREPLY[@]}"
`;

async function installed(shell: string): Promise<boolean> {
  return (await execa('sh', ['-c', `command -v ${shell}`], { reject: false })).exitCode === 0;
}

describe('fshare completion', () => {
  let cli: Cli;
  let work: string;
  const scripts: Record<string, string> = {};

  beforeAll(async () => {
    cli = await createCli();
    work = await tempDir('completion');
    for (const shell of ['bash', 'zsh', 'fish']) {
      const res = await cli.run(['completion', shell]);
      expect(res.exitCode, res.stderr).toBe(0);
      scripts[shell] = join(work, `fshare.${shell}`);
      await writeFile(scripts[shell], res.stdout);
    }
    await mkdir(join(work, 'files', 'photos'), { recursive: true });
    await writeFile(join(work, 'files', 'build.tar.gz'), '');
  });

  afterAll(async () => {
    if (cli) await rm(cli.configDir, { recursive: true, force: true });
    if (work) await rm(work, { recursive: true, force: true });
  });

  /** What bash offers at the end of `words` (the last word is the one being completed). */
  async function bash(...words: string[]): Promise<string[]> {
    const res = await execa(
      'bash',
      ['--norc', '--noprofile', '-c', HARNESS, 'bash', scripts.bash!, 'fshare', ...words],
      {
        cwd: join(work, 'files'),
        reject: false,
      },
    );
    expect(res.exitCode, res.stderr).toBe(0);
    return res.stdout.split('\n').filter(Boolean);
  }

  it('bash: the first word completes to every command it begins', async () => {
    expect(await bash('u')).toEqual(
      expect.arrayContaining(['users', 'uploads', 'upload', 'unlock']),
    );
    expect(await bash('u')).not.toContain('ls');
    expect(await bash('')).toEqual(expect.arrayContaining([...TOP, 'help']));
  });

  it('bash: after a command with subcommands only its subcommands are offered', async () => {
    const users = await bash('users', '');
    expect(users).toEqual(expect.arrayContaining(['ls', 'show', 'add', 'rm', 'perms', 'passwd']));
    expect(users).not.toContain('users');
    expect(users).not.toContain('upload');
    expect(await bash('users', 'p')).toEqual(['perms', 'passwd']);
    expect(await bash('token', '')).toEqual(['extend']);
  });

  it("bash: a flag completes from the current command's flags, global flags included", async () => {
    expect(await bash('upload', '--ch')).toEqual(['--chunk-size']);
    expect(await bash('users', 'ls', '--p')).toEqual(['--page', '--per-page']);
    expect(await bash('upload', '--js')).toEqual(['--json']);
    expect(await bash('upload', '--')).not.toContain('--page');
  });

  it("bash: a flag's value is never taken for a command", async () => {
    // `users` here is the server URL, so the commands offered are fshare's own
    expect(await bash('--server', 'users', '')).toEqual(expect.arrayContaining(TOP));
    expect(await bash('--server', 'http://x', 'users', 'a')).toEqual(['add']);
  });

  it("bash: arguments complete file names, and a flag's fixed values are offered", async () => {
    expect(await bash('upload', '')).toEqual(expect.arrayContaining(['build.tar.gz', 'photos']));
    expect(await bash('upload', 'b')).toEqual(['build.tar.gz']);
    expect(await bash('get', '-o', 'ph')).toEqual(['photos']);
    expect(await bash('serve', '--log-format', '')).toEqual(['pretty', 'json']);
    expect(await bash('serve', '--log-format', '=', 'j')).toEqual(['json']); // --log-format=j
    expect(await bash('help', 'se')).toEqual(['settings', 'serve']);
  });

  it('zsh and fish scripts name every top-level command and are valid where the shell exists', async () => {
    for (const shell of ['zsh', 'fish'] as const) {
      const script = await readFile(scripts[shell]!, 'utf8');
      for (const name of TOP)
        expect(script, `${shell}: ${name}`).toMatch(new RegExp(`'${name}[:']`));
      // .ci/run installs neither shell: check the syntax only where one is there
      if (await installed(shell)) {
        const check = await execa(shell, ['-n', scripts[shell]!], { reject: false });
        expect(check.exitCode, check.stderr).toBe(0);
      }
    }
    if (await installed('fish')) {
      const res = await execa('fish', [
        '-c',
        `source ${scripts.fish}; complete -C 'fshare users '`,
      ]);
      const offered = res.stdout.split('\n').map((l) => l.split('\t')[0]);
      expect(offered).toEqual(expect.arrayContaining(['add', 'ls', 'perms']));
      expect(offered).not.toContain('users');
    }
  });

  it('an unknown shell is a usage error: exit 2 and one line', async () => {
    const res = await cli.run(['completion', 'tcsh']);
    expect(res.exitCode).toBe(2);
    expect(res.stdout).toBe('');
    expect(res.stderr.trimEnd().split('\n')).toEqual([
      'fshare: unknown shell: tcsh (bash, zsh or fish)',
    ]);
  });

  it('completion --help shows how to install it for each shell', async () => {
    const res = await cli.run(['completion', '--help']);
    expect(res.exitCode).toBe(0);
    expect(res.stdout).toContain(
      'fshare completion bash > ~/.local/share/bash-completion/completions/fshare',
    );
    expect(res.stdout).toMatch(/fshare completion zsh > \S+_fshare/);
    expect(res.stdout).toContain('fshare completion fish > ~/.config/fish/completions/fshare.fish');
  });
});
