/** ISO 8601 in UTC without a zone suffix and with microseconds, as the reference server prints. */
export function isoNoZone(date: Date = new Date()): string {
  return date.toISOString().replace('Z', '000');
}

/** Parses the zone-less timestamps the server prints, reading them as UTC. */
export function parseIsoNoZone(text: string): Date {
  return new Date(/[zZ]|[+-]\d\d:?\d\d$/.test(text) ? text : `${text}Z`);
}
