import type { ContentStorage } from './storage/index.js';
import { removeShare } from './remove-share.js';
import type { MetadataStore, ShareRecord } from './store/index.js';

/** Checked at least this often, so that a clock moved by tests (or NTP) is noticed. */
const RECHECK_MS = 60_000;

/** True once a share's expiry has passed: it is gone for every request from then on. */
export function isExpired(share: { expires?: string | null }, now: number): boolean {
  return !!share.expires && Date.parse(share.expires) <= now;
}

/**
 * Deletes shares whose expiry has passed: the record first (durably), then the content, as
 * DELETE does. Requests stop seeing an expired share at once (findShare); the sweep is the
 * clean-up. Expiry lives in the metadata, so a restart loses nothing: the first sweep runs at
 * start.
 */
export class ShareExpiry {
  private timer: NodeJS.Timeout | undefined;
  private sweeping: Promise<void> | null = null;
  private again = false;
  private stopped = false;
  /** A deletion failed (a disk error): the next try waits RECHECK_MS instead of looping. */
  private failed = false;

  constructor(
    private readonly store: MetadataStore,
    private readonly storage: ContentStorage,
    private readonly clock: () => number,
    private readonly log: (line: string) => void,
  ) {}

  /** Sweeps what is due now; resolves when every due share is deleted. */
  sweepDue(): Promise<void> {
    if (this.sweeping) {
      this.again = true;
      return this.sweeping;
    }
    this.sweeping = (async () => {
      this.failed = false;
      do {
        this.again = false;
        for (const share of await this.store.expiredShares(this.clock())) {
          if (this.stopped) return;
          await this.expire(share).catch((err: Error) => {
            this.failed = true;
            this.log(`expiry of share ${share.share_id}: ${err.message}; tried again later`);
          });
        }
      } while (this.again && !this.stopped);
    })().finally(() => {
      this.sweeping = null;
      this.schedule();
    });
    return this.sweeping;
  }

  private async expire(share: ShareRecord): Promise<void> {
    // Its expiry may have been moved meanwhile.
    await removeShare(
      this.store,
      this.storage,
      this.log,
      share.share_id,
      (current) => !!current && isExpired(current, this.clock()),
    );
  }

  /** Sets the timer for the next expiry; call after any change of an expiry. */
  schedule(): void {
    if (this.stopped) return;
    void this.store.nextExpiry().then((next) => {
      if (this.stopped) return;
      clearTimeout(this.timer);
      const wait = next === null || this.failed ? RECHECK_MS : Math.max(0, next - this.clock());
      this.timer = setTimeout(
        () => void this.sweepDue().catch(this.later),
        Math.min(wait, RECHECK_MS) + 5,
      );
      this.timer.unref();
    }, this.later);
  }

  /**
   * A sweep or a look at the next expiry that failed (the database not answering): said, and
   * tried again in RECHECK_MS. Found from outside: the rejection was unhandled, and a database
   * restart ended the server.
   */
  private readonly later = (err: unknown): void => {
    if (this.stopped) return;
    this.failed = true;
    this.log(`expiry: ${(err as Error).message}; tried again in ${RECHECK_MS / 1000} s`);
    clearTimeout(this.timer);
    this.timer = setTimeout(() => void this.sweepDue().catch(this.later), RECHECK_MS);
    this.timer.unref();
  };

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.sweeping;
  }
}
