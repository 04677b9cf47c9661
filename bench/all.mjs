// `npm run bench`: the transfer and metadata benchmark (bench/run.mjs), with every option given
// to npm, then the artifacts benchmark (bench/artifacts.mjs), the scale-out benchmark
// (bench/scale.mjs) and the upload floor (bench/floor.mjs) at their defaults. With --json, only
// run.mjs runs, so stdout stays one JSON document (`npm run bench:artifacts -- --json` and so on
// for the others); --skip-artifacts, --skip-scale and --skip-floor leave those out too.
import { spawnSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const skips = ['--skip-artifacts', '--skip-scale', '--skip-floor'];
const args = process.argv.slice(2).filter((a) => !skips.includes(a));
// Given to every benchmark, not only run.mjs (bench/common.mjs, extraCaCerts).
const keepCa = process.argv.includes('--keep-extra-ca') ? ['--keep-extra-ca'] : [];
const run = (script, argv) =>
  spawnSync(process.execPath, [join(here, script), ...argv], { stdio: 'inherit' }).status ?? 1;

let status = run('run.mjs', args);
const help = args.includes('--help') || args.includes('-h');
const more = status === 0 && !help && !args.includes('--json');
if (more && !process.argv.includes('--skip-artifacts')) status = run('artifacts.mjs', keepCa);
if (status === 0 && more && !process.argv.includes('--skip-scale'))
  status = run('scale.mjs', keepCa);
if (status === 0 && more && !process.argv.includes('--skip-floor'))
  status = run('floor.mjs', keepCa);
process.exit(status);
