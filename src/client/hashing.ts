import { HashWorker } from '../shared/hasher.js';

let hasher: HashWorker | undefined;

/** The process's hashing thread: sha256 off the main thread, reading the files itself. */
export function fileHasher(): HashWorker {
  // FSHARE_BENCH_NO_DIGEST=1 (benchmarks only): the same transfer without hashing, to compare.
  hasher ??= new HashWorker({ disabled: process.env.FSHARE_BENCH_NO_DIGEST === '1' });
  return hasher;
}

/** The sha256 of bytes [start, end) of a file, computed on the hashing thread. */
export async function hashFile(path: string, start: number, end: number): Promise<string> {
  const hash = fileHasher().create(end - start);
  await hash.updateFromFile(path, start, end);
  return hash.digest();
}
