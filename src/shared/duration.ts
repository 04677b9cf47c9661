/** Longest expiry a share or link may be given, in seconds (ten years; docs/API.md "Expiry"). */
export const MAX_EXPIRY_SECONDS = 10 * 366 * 24 * 3600;

/** "2 weeks", "7 days", "12 hours", "90 seconds": for people (CLI output, server messages). */
export function formatDuration(seconds: number): string {
  for (const [unit, size] of [
    ['week', 604800],
    ['day', 86400],
    ['hour', 3600],
    ['minute', 60],
  ] as const)
    if (seconds >= size && seconds % size === 0) {
      const n = seconds / size;
      return `${n} ${unit}${n === 1 ? '' : 's'}`;
    }
  return `${seconds} second${seconds === 1 ? '' : 's'}`;
}
