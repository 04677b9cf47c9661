import { setFlagsFromString } from 'node:v8';

/**
 * V8 flags a process sets for itself at run time, kept set. Setting up a V8 isolate's heap, as
 * every worker thread's start does, can change flags that hold for the whole process: V8 raises
 * `--semi-space-growth-factor` back to at least 2 there (seen on Node 20: a factor of 1 set
 * before `new Worker()` no longer held once the worker was online). Whoever starts a worker
 * calls setKeptFlagsAgain once it is online.
 */
const kept = new Set<string>();

/** Sets `flag` now, and again after every worker thread starts. */
export function keepV8Flag(flag: string): void {
  kept.add(flag);
  setFlagsFromString(flag);
}

/** Sets every kept flag again (a worker thread has just started). */
export function setKeptFlagsAgain(): void {
  for (const flag of kept) setFlagsFromString(flag);
}
