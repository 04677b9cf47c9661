/**
 * The shortest JWT signing secret fshare accepts: 256 bits, as RFC 7518 (3.2) asks of an HS256
 * key. A shorter one can be guessed offline from any token it signed, and then anyone can sign
 * in as anyone.
 */
export const MIN_SECRET_BYTES = 32;
