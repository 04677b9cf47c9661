// `npm run bench`: the transfer and metadata benchmark (bench/run.mjs), with every option given
// to npm, then the artifacts benchmark (bench/artifacts.mjs) at its defaults. With --json, only
// run.mjs runs, so stdout stays one JSON document (`npm run bench:artifacts -- --json` for the
// other); --skip-artifacts leaves the second one out too.
import { spawnSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const args = process.argv.slice(2).filter((a) => a !== '--skip-artifacts');
const run = (script, argv) =>
  spawnSync(process.execPath, [join(here, script), ...argv], { stdio: 'inherit' }).status ?? 1;

let status = run('run.mjs', args);
const help = args.includes('--help') || args.includes('-h');
if (status === 0 && !help && !args.includes('--json') && !process.argv.includes('--skip-artifacts'))
  status = run('artifacts.mjs', []);
process.exit(status);
