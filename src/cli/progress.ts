import cliProgress from 'cli-progress';
import { formatSize } from '../shared/size.js';

export interface ProgressBar {
  /** Bytes done so far (and the total, once it is known). */
  update(bytes: number, total?: number): void;
  stop(): void;
}

export interface ProgressDisplay {
  /** Adds one bar, for one file. */
  bar(label: string, total: number): ProgressBar;
  /** Stops every bar and leaves the final state on screen. */
  stop(): void;
}

const noopBar: ProgressBar = { update() {}, stop() {} };

/** Bars only when stderr is a terminal and --no-progress was not given (CLI.md). */
export function progressEnabled(progressOption: boolean | undefined): boolean {
  return progressOption !== false && process.stderr.isTTY === true;
}

function shortLabel(label: string, max = 28): string {
  return label.length <= max ? label.padEnd(max) : `…${label.slice(-(max - 1))}`;
}

/** One multi-bar per command: bytes, rate and ETA for each file. */
export function createProgress(enabled: boolean): ProgressDisplay {
  if (!enabled) return { bar: () => noopBar, stop() {} };
  const multi = new cliProgress.MultiBar(
    {
      stream: process.stderr,
      format: '{label} {bar} {percentage}% | {done}/{size} | {rate}/s | ETA {eta_formatted}',
      hideCursor: true,
      clearOnComplete: false,
      stopOnComplete: false,
      barsize: 24,
      etaBuffer: 50,
      fps: 10,
      autopadding: true,
    },
    cliProgress.Presets.shades_classic,
  );
  return {
    bar(label, total) {
      const started = Date.now();
      const payload = (bytes: number, size: number) => {
        const seconds = Math.max(0.001, (Date.now() - started) / 1000);
        return {
          label: shortLabel(label),
          done: formatSize(bytes),
          size: formatSize(size),
          rate: formatSize(Math.round(bytes / seconds)),
        };
      };
      let size = total;
      const bar = multi.create(Math.max(size, 1), 0, payload(0, size));
      return {
        update(bytes, newTotal) {
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
    stop() {
      multi.stop();
    },
  };
}
