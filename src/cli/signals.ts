import { removeLiveTempDirs } from '../shared/owned-temp.js';
import { EXIT } from './output.js';

const SIGNALS: NodeJS.Signals[] = ['SIGINT', 'SIGTERM', 'SIGHUP'];

/**
 * Runs a command whose temporary directories (push's fshare-push-*, the fshare-manifest-* of a
 * manifest being read) must not outlive it: a SIGINT, SIGTERM or SIGHUP removes them first, then
 * ends the command as fshare does (Ctrl-C: exit 130; the others: by that signal). Without this,
 * the signal ended the process before any cleanup, and the directories stayed for good.
 */
export function removingTempsOnSignals<A extends unknown[]>(
  action: (...args: A) => Promise<void>,
): (...args: A) => Promise<void> {
  return async (...args: A) => {
    const onSignal = (signal: NodeJS.Signals) => {
      removeLiveTempDirs();
      unguard();
      if (signal === 'SIGINT') process.exit(EXIT.interrupted);
      process.kill(process.pid, signal);
    };
    const unguard = () => {
      for (const signal of SIGNALS) process.off(signal, onSignal);
    };
    for (const signal of SIGNALS) process.on(signal, onSignal);
    try {
      await action(...args);
    } finally {
      unguard();
    }
  };
}
