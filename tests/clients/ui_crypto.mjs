// Checks the Control UI's own SHA-256, SHA-512 and Ed25519 (ui/assets/crypto.js, what the browser signs its
// device identity with) against FIPS 180-4 and RFC 8032 test vectors and against Node's own crypto for
// random keys and messages of every length around the block boundaries. Used by tests/ui_crypto.rs;
// prints {"ok": true} or the first mismatch.
//
// Usage: node ui_crypto.mjs <path to ui/assets/crypto.js>

import crypto from "node:crypto";
import { pathToFileURL } from "node:url";

const ui = await import(pathToFileURL(process.argv[2]).href);
const fromHex = (h) => Uint8Array.from(h.match(/../g) || [], (x) => parseInt(x, 16));
const fail = (what) => { console.log(JSON.stringify({ ok: false, what })); process.exit(1); };

if (ui.hex(ui.sha256(ui.utf8("abc"))) !== "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad") fail("sha256(abc)");
if (ui.hex(ui.sha512(ui.utf8("abc"))) !== "ddaf35a193617abacc417349ae20413112e6fa4e89a97ea20a9eeee64b55d39a2192992a274fc1a836ba3c23a3feebbd454d4423643ce80e2a9ac94fa54ca49f") fail("sha512(abc)");
// RFC 8032 section 7.1, tests 1 and 2.
const vectors = [
  ["9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60", "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a", "",
    "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"],
  ["4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb", "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c", "72",
    "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00"],
];
for (const [seed, pub, msg, sig] of vectors) {
  if (ui.hex(ui.publicKey(fromHex(seed))) !== pub) fail(`public key of ${seed}`);
  if (ui.hex(ui.sign(fromHex(seed), fromHex(msg))) !== sig) fail(`signature with ${seed}`);
}
for (let n = 0; n <= 300; n++) {
  const m = crypto.randomBytes(n);
  if (ui.hex(ui.sha256(m)) !== crypto.createHash("sha256").update(m).digest("hex")) fail(`sha256 of ${n} bytes`);
  if (ui.hex(ui.sha512(m)) !== crypto.createHash("sha512").update(m).digest("hex")) fail(`sha512 of ${n} bytes`);
}
for (let i = 0; i < 8; i++) {
  const { privateKey } = crypto.generateKeyPairSync("ed25519");
  const jwk = privateKey.export({ format: "jwk" });
  const seed = Buffer.from(jwk.d, "base64url");
  const message = crypto.randomBytes(40 + i * 37);
  if (ui.hex(ui.publicKey(seed)) !== Buffer.from(jwk.x, "base64url").toString("hex")) fail("public key vs node");
  if (ui.hex(ui.sign(seed, message)) !== crypto.sign(null, message, privateKey).toString("hex")) fail("signature vs node");
}
const bytes = crypto.randomBytes(33);
if (ui.hex(ui.fromBase64url(ui.base64url(bytes))) !== bytes.toString("hex") || ui.base64url(bytes) !== bytes.toString("base64url")) fail("base64url");
console.log(JSON.stringify({ ok: true }));
