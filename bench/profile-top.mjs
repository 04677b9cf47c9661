#!/usr/bin/env node
// Summarises a V8 .cpuprofile (from `node --cpu-prof`, e.g. `npm run bench -- --profile DIR`):
// the functions with the most self time, and the same grouped by package or source file.
//
//   node bench/profile-top.mjs DIR/CPU.*.cpuprofile [--top 25]

import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';

const { values, positionals } = parseArgs({
  options: { top: { type: 'string', default: '25' } },
  allowPositionals: true,
});
if (positionals.length === 0) {
  process.stderr.write('usage: node bench/profile-top.mjs FILE.cpuprofile... [--top N]\n');
  process.exit(2);
}
const top = Number(values.top);

/** node_modules/<pkg>, dist/<dir>/<file>, node:internal/…, or the special V8 nodes. */
function groupOf(url, name) {
  if (!url) return `(${name.replace(/[()]/g, '') || 'native'})`;
  const nm = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url);
  if (nm) return nm[1];
  const dist = /\/dist\/(.+)$/.exec(url);
  if (dist) return `fshare ${dist[1]}`;
  return url.replace(/^node:/, '').replace(/^file:\/\/.*\//, '');
}

for (const file of positionals) {
  const profile = JSON.parse(readFileSync(file, 'utf8'));
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const self = new Map();
  // timeDeltas[i] is the time before sample i; attribute it to that sample's node.
  for (let i = 0; i < profile.samples.length; i++) {
    const dt = profile.timeDeltas[i] ?? 0;
    self.set(profile.samples[i], (self.get(profile.samples[i]) ?? 0) + dt);
  }
  const total = [...self.values()].reduce((a, b) => a + b, 0);
  const fns = new Map();
  const groups = new Map();
  for (const [id, us] of self) {
    const { callFrame: f } = byId.get(id);
    const name = f.functionName || '(anonymous)';
    const where = f.url
      ? `${f.url.replace(/^file:\/\/.*?\/(node_modules|dist)\//, '$1/')}:${f.lineNumber + 1}`
      : '';
    const key = `${name} ${where}`.trim();
    fns.set(key, (fns.get(key) ?? 0) + us);
    const g = groupOf(f.url, name);
    groups.set(g, (groups.get(g) ?? 0) + us);
  }
  const idle = [...self].filter(([id]) => byId.get(id).callFrame.functionName === '(idle)');
  const idleUs = idle.reduce((a, [, us]) => a + us, 0);
  const pct = (us) => `${((100 * us) / total).toFixed(1).padStart(5)}%`;
  const ms = (us) => `${(us / 1000).toFixed(0).padStart(7)} ms`;
  process.stdout.write(
    `${file}\n  ${(total / 1e6).toFixed(2)} s sampled, ${(idleUs / 1e6).toFixed(2)} s idle, ` +
      `${((total - idleUs) / 1e6).toFixed(2)} s on the CPU (main thread)\n\n  by package or file:\n`,
  );
  for (const [g, us] of [...groups].sort((a, b) => b[1] - a[1]).slice(0, 12))
    process.stdout.write(`  ${ms(us)} ${pct(us)}  ${g}\n`);
  process.stdout.write('\n  by function (self time):\n');
  for (const [k, us] of [...fns].sort((a, b) => b[1] - a[1]).slice(0, top))
    process.stdout.write(`  ${ms(us)} ${pct(us)}  ${k}\n`);
  process.stdout.write('\n');
}
