// SHA-256, SHA-512 and Ed25519 signing in plain JavaScript (BigInt), so the
// device identity works on pages served over plain HTTP on the LAN, where
// browsers withhold WebCrypto's `crypto.subtle`. Only randomness comes from
// the browser (`crypto.getRandomValues`, available everywhere). The round
// constants are derived at load time from the primes (fractional parts of
// their square and cube roots), as FIPS 180-4 defines them. Checked against
// FIPS 180-4 and RFC 8032 test vectors by tests/clients/ui_crypto.mjs.

const M64 = (1n << 64n) - 1n;

function primes(count) {
  const out = [];
  for (let n = 2; out.length < count; n++) {
    if (out.every((p) => n % p !== 0)) out.push(n);
  }
  return out;
}

// floor(x^(1/k)) for a non-negative BigInt, by Newton's method.
function iroot(x, k) {
  if (x < 2n) return x;
  const kb = BigInt(k);
  let r = 1n << (BigInt(x.toString(2).length) / kb + 1n);
  for (;;) {
    const next = ((kb - 1n) * r + x / r ** (kb - 1n)) / kb;
    if (next >= r) return r;
    r = next;
  }
}

// The first `bits` bits of the fractional parts of the k-th roots of the first `count` primes.
function fractions(count, k, bits) {
  const b = BigInt(bits);
  const mask = (1n << b) - 1n;
  return primes(count).map((p) => iroot(BigInt(p) << (b * BigInt(k)), k) & mask);
}

const K256 = fractions(64, 3, 32).map(Number);
const H256 = fractions(8, 2, 32).map(Number);
const K512 = fractions(80, 3, 64);
const H512 = fractions(8, 2, 64);

function pad(bytes, blockBytes, lengthBytes) {
  const total = Math.ceil((bytes.length + 1 + lengthBytes) / blockBytes) * blockBytes;
  const out = new Uint8Array(total);
  out.set(bytes);
  out[bytes.length] = 0x80;
  let bits = BigInt(bytes.length) * 8n;
  for (let i = total - 1; bits > 0n; i--, bits >>= 8n) out[i] = Number(bits & 0xffn);
  return out;
}

export function sha256(bytes) {
  const data = pad(bytes, 64, 8);
  const h = H256.slice();
  const w = new Uint32Array(64);
  const rotr = (x, n) => (x >>> n) | (x << (32 - n));
  for (let off = 0; off < data.length; off += 64) {
    for (let i = 0; i < 16; i++) {
      const j = off + i * 4;
      w[i] = (data[j] << 24) | (data[j + 1] << 16) | (data[j + 2] << 8) | data[j + 3];
    }
    for (let i = 16; i < 64; i++) {
      const s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >>> 3);
      const s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >>> 10);
      w[i] = (w[i - 16] + s0 + w[i - 7] + s1) | 0;
    }
    let [a, b, c, d, e, f, g, hh] = h;
    for (let i = 0; i < 64; i++) {
      const t1 = (hh + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + K256[i] + w[i]) | 0;
      const t2 = ((rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c))) | 0;
      hh = g; g = f; f = e; e = (d + t1) | 0; d = c; c = b; b = a; a = (t1 + t2) | 0;
    }
    [a, b, c, d, e, f, g, hh].forEach((v, i) => { h[i] = (h[i] + v) >>> 0; });
  }
  const out = new Uint8Array(32);
  h.forEach((v, i) => { out[i * 4] = v >>> 24; out[i * 4 + 1] = v >>> 16; out[i * 4 + 2] = v >>> 8; out[i * 4 + 3] = v; });
  return out;
}

export function sha512(bytes) {
  const data = pad(bytes, 128, 16);
  const h = H512.slice();
  const w = new Array(80);
  const rotr = (x, n) => ((x >> n) | (x << (64n - n))) & M64;
  for (let off = 0; off < data.length; off += 128) {
    for (let i = 0; i < 16; i++) {
      let v = 0n;
      for (let j = 0; j < 8; j++) v = (v << 8n) | BigInt(data[off + i * 8 + j]);
      w[i] = v;
    }
    for (let i = 16; i < 80; i++) {
      const s0 = rotr(w[i - 15], 1n) ^ rotr(w[i - 15], 8n) ^ (w[i - 15] >> 7n);
      const s1 = rotr(w[i - 2], 19n) ^ rotr(w[i - 2], 61n) ^ (w[i - 2] >> 6n);
      w[i] = (w[i - 16] + s0 + w[i - 7] + s1) & M64;
    }
    let [a, b, c, d, e, f, g, hh] = h;
    for (let i = 0; i < 80; i++) {
      const t1 = (hh + (rotr(e, 14n) ^ rotr(e, 18n) ^ rotr(e, 41n)) + ((e & f) ^ (~e & M64 & g)) + K512[i] + w[i]) & M64;
      const t2 = ((rotr(a, 28n) ^ rotr(a, 34n) ^ rotr(a, 39n)) + ((a & b) ^ (a & c) ^ (b & c))) & M64;
      hh = g; g = f; f = e; e = (d + t1) & M64; d = c; c = b; b = a; a = (t1 + t2) & M64;
    }
    [a, b, c, d, e, f, g, hh].forEach((v, i) => { h[i] = (h[i] + v) & M64; });
  }
  const out = new Uint8Array(64);
  h.forEach((v, i) => {
    for (let j = 7; j >= 0; j--, v >>= 8n) out[i * 8 + j] = Number(v & 0xffn);
  });
  return out;
}

// Ed25519 (RFC 8032) over the field 2^255 - 19, extended coordinates.
const P = (1n << 255n) - 19n;
const L = (1n << 252n) + 27742317777372353535851937790883648493n;
const mod = (a, m = P) => ((a % m) + m) % m;
function pow(base, exp, m = P) {
  let result = 1n;
  base = mod(base, m);
  for (; exp > 0n; exp >>= 1n, base = (base * base) % m) if (exp & 1n) result = (result * base) % m;
  return result;
}
const inv = (a) => pow(a, P - 2n);
const D = mod(-121665n * inv(121666n));
const D2 = mod(2n * D);
const SQRT_M1 = pow(2n, (P - 1n) / 4n);

function baseX(y) {
  const u = mod((y * y - 1n) * inv(D * y * y + 1n));
  let x = pow(u, (P + 3n) / 8n);
  if (mod(x * x - u) !== 0n) x = mod(x * SQRT_M1);
  return x & 1n ? P - x : x;
}
const BY = mod(4n * inv(5n));
const BASE = [baseX(BY), BY, 1n, mod(baseX(BY) * BY)];

function add([x1, y1, z1, t1], [x2, y2, z2, t2]) {
  const a = mod((y1 - x1) * (y2 - x2));
  const b = mod((y1 + x1) * (y2 + x2));
  const c = mod(t1 * D2 * t2);
  const d = mod(2n * z1 * z2);
  const e = b - a, f = d - c, g = d + c, h = b + a;
  return [mod(e * f), mod(g * h), mod(f * g), mod(e * h)];
}

function multiply(scalar, point = BASE) {
  let result = [0n, 1n, 1n, 0n];
  for (let bit = BigInt(scalar.toString(2).length) - 1n; bit >= 0n; bit--) {
    result = add(result, result);
    if ((scalar >> bit) & 1n) result = add(result, point);
  }
  return result;
}

function encodePoint([x, y, z]) {
  const zi = inv(z);
  const out = toBytesLE(mod(y * zi), 32);
  out[31] |= Number(mod(x * zi) & 1n) << 7;
  return out;
}

function toBytesLE(n, length) {
  const out = new Uint8Array(length);
  for (let i = 0; i < length; i++, n >>= 8n) out[i] = Number(n & 0xffn);
  return out;
}

function fromBytesLE(bytes) {
  let n = 0n;
  for (let i = bytes.length - 1; i >= 0; i--) n = (n << 8n) | BigInt(bytes[i]);
  return n;
}

function concat(...parts) {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) { out.set(p, at); at += p.length; }
  return out;
}

function expand(seed) {
  const h = sha512(seed);
  const a = h.slice(0, 32);
  a[0] &= 248; a[31] &= 127; a[31] |= 64;
  return { scalar: fromBytesLE(a), prefix: h.slice(32) };
}

// The public key (32 bytes) of a 32-byte seed.
export function publicKey(seed) {
  return encodePoint(multiply(expand(seed).scalar));
}

// The 64-byte signature of `message` (bytes) with a 32-byte seed.
export function sign(seed, message) {
  const { scalar, prefix } = expand(seed);
  const pub = encodePoint(multiply(scalar));
  const r = mod(fromBytesLE(sha512(concat(prefix, message))), L);
  const big = encodePoint(multiply(r));
  const k = mod(fromBytesLE(sha512(concat(big, pub, message))), L);
  return concat(big, toBytesLE(mod(r + k * scalar, L), 32));
}

export const utf8 = (text) => new TextEncoder().encode(text);
export const hex = (bytes) => Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");

export function base64url(bytes) {
  let text = "";
  for (const b of bytes) text += String.fromCharCode(b);
  return btoa(text).replaceAll("+", "-").replaceAll("/", "_").replace(/=+$/, "");
}

export function fromBase64url(text) {
  const plain = atob(text.replaceAll("-", "+").replaceAll("_", "/") + "===".slice((text.length + 3) % 4));
  return Uint8Array.from(plain, (c) => c.charCodeAt(0));
}
