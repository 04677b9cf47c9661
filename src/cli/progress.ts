import type CliProgress from 'cli-progress';
import { createRequire } from 'node:module';
import { withoutTokens } from '../client/http.js';
import { formatSize } from '../shared/size.js';
import { printLine } from './output.js';

export interface ProgressBar {
  /** Bytes done so far (and the total, once it is known; and a new label, such as a count). */
  update(bytes: number, total?: number, label?: string): void;
  stop(): void;
}

export interface ProgressDisplay {
  /** Adds one bar, for one file. */
  bar(label: string, total: number): ProgressBar;
  /** A stderr line (an error for one file) drawn above the bars. */
  log(line: string): void;
  /** Prints a stdout line without tearing the bars: held back until `stop` while they are drawn. */
  print(line: string): void;
  /** Stops every bar, leaves the final state on screen, then prints the held lines. Idempotent. */
  stop(): void;
}

const noopBar: ProgressBar = { update() {}, stop() {} };

/**
 * cli-progress, loaded only when bars are drawn: it was a quarter of the CPU time that loading
 * the CLI's modules takes, in commands that mostly run without a terminal (scripts, CI).
 */
const loadCliProgress = () => createRequire(import.meta.url)('cli-progress') as typeof CliProgress;

/** Bars only when stderr is a terminal and --no-progress was not given (CLI.md). */
export function progressEnabled(progressOption: boolean | undefined): boolean {
  return progressOption !== false && process.stderr.isTTY === true;
}

function shortLabel(label: string, max: number): string {
  return label.length <= max ? label.padEnd(max) : `…${label.slice(-(max - 1))}`;
}

/** One multi-bar per command: bytes, rate and ETA for each file. */
export function createProgress(enabled: boolean): ProgressDisplay {
  const printNow = (line: string) => printLine(line);
  // Notices name files the server named: a token fshare sent shows as [token], as in warnings.
  const logNow = (line: string) => process.stderr.write(`${withoutTokens(line)}\n`);
  if (!enabled) return { bar: () => noopBar, print: printNow, log: logNow, stop() {} };
  // Fit one line of the terminal: about 50 columns of numbers, the rest for name and bar.
  const columns = process.stderr.columns || 80;
  const labelWidth = Math.min(28, Math.max(10, columns - 66));
  const barWidth = Math.min(40, Math.max(8, columns - 52 - labelWidth));
  const held: string[] = [];
  let stopped = false;
  const cliProgress = loadCliProgress();
  const multi = new cliProgress.MultiBar(
    {
      stream: process.stderr,
      format: '{label} {bar} {percentage}% {done}/{size} {rate}/s ETA {eta_formatted}',
      hideCursor: true,
      clearOnComplete: false,
      stopOnComplete: false,
      barsize: barWidth,
      etaBuffer: 50,
      fps: 10,
      autopadding: true,
    },
    cliProgress.Presets.shades_classic,
  );
  return {
    bar(label, total) {
      const started = Date.now();
      let shown = label;
      const payload = (bytes: number, size: number) => {
        const seconds = Math.max(0.001, (Date.now() - started) / 1000);
        return {
          label: shortLabel(withoutTokens(shown), labelWidth),
          done: formatSize(bytes),
          size: formatSize(size),
          rate: formatSize(Math.round(bytes / seconds)),
        };
      };
      let size = total;
      const bar = multi.create(Math.max(size, 1), 0, payload(0, size));
      return {
        update(bytes, newTotal, newLabel) {
          if (newLabel !== undefined) shown = newLabel;
          if (newTotal !== undefined && newTotal !== size) {
            size = newTotal;
            bar.setTotal(Math.max(size, 1));
          }
          bar.update(size === 0 ? 1 : bytes, payload(bytes, size));
        },
        stop() {
          bar.stop();
        },
      };
    },
    log(line) {
      if (stopped) logNow(line);
      else multi.log(`${withoutTokens(line)}\n`);
    },
    print(line) {
      if (stopped) printNow(line);
      else held.push(line);
    },
    stop() {
      if (stopped) return;
      stopped = true;
      multi.stop();
      // cli-progress writes logged lines only at its next redraw, and stop() does not redraw: a
      // line logged just before (the error of a failed upload) would never be seen.
      const pending = (multi as unknown as { loggingBuffer?: string[] }).loggingBuffer ?? [];
      for (const line of pending.splice(0)) process.stderr.write(line);
      for (const line of held.splice(0)) printNow(line);
    },
  };
}
