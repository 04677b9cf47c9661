import type { Command } from 'commander';

export function registerServe(program: Command): void {
  program
    .command('serve')
    .description('run a share server backed by a local data directory')
    .action(async () => {
      throw new Error('serve: wired in the next commit');
    });
}
