import { Command } from 'commander';
import { registerServe } from './commands/serve.js';

const program = new Command();
program
  .name('fshare')
  .description('Share files from the terminal, and run the share server they live on.')
  .version('0.1.0')
  .showHelpAfterError()
  .addHelpText(
    'after',
    `
Examples:
  fshare serve                      run a share server on http://127.0.0.1:5000
  fshare login -u alice             sign in and keep the token in the OS keychain
  fshare upload build.tar.gz        share a file; prints its id and URL`,
  );

registerServe(program);

await program.parseAsync(process.argv);
