/**
 * Runs at most `n` of the given tasks at once, in the order they came (one limiter may be shared
 * by every file of one `upload`). A task may call `handOver()` once what it holds the place for
 * is done while it still waits (a chunk whose bytes are all sent, waiting for the server's
 * answer): its place goes to the next task, and it stays one of at most `n + awaiting` tasks
 * under way. Without `awaiting`, handOver does nothing.
 */
export type Limiter = <T>(task: (handOver: () => void) => Promise<T>) => Promise<T>;

export function createLimiter(n: number, awaiting = 0): Limiter {
  let active = 0; // holding a place
  let underWay = 0; // started and not finished, handed over or not
  const waiting: (() => void)[] = [];
  const wake = () => {
    while (waiting.length > 0 && active < n && underWay < n + awaiting) {
      active++;
      underWay++;
      waiting.shift()!();
    }
  };
  return async <T>(task: (handOver: () => void) => Promise<T>): Promise<T> => {
    await new Promise<void>((resolve) => {
      waiting.push(resolve);
      wake();
    });
    let holding = true;
    const handOver = () => {
      if (!holding || awaiting === 0) return;
      holding = false;
      active--;
      wake();
    };
    try {
      return await task(handOver);
    } finally {
      if (holding) active--;
      underWay--;
      wake();
    }
  };
}

/**
 * The limiter of chunk uploads for `--parallel n`: at most n chunks going up at once, and up to
 * n − 1 more whose bytes are all sent, waiting for their answers (each chunk is durable on the
 * server before it is answered: while some wait for that, the next ones are already on their
 * way). `--parallel 1` stays one chunk request at a time. A chunk sent again after a lost or 5xx
 * answer goes up without taking a place back: still one of the 2n − 1 requests under way.
 */
export function createChunkLimiter(n: number): Limiter {
  return createLimiter(n, n - 1);
}
