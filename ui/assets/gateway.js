// The gateway client: OpenClaw's WebSocket protocol (connect.challenge →
// connect → hello-ok, then req/res frames and events), as an operator with
// a device identity kept in this browser's localStorage (an Ed25519 key, as
// OpenClaw's Control UI keeps one), signing the challenge with upstream's v3
// device-auth payload. The device token the gateway issues is kept per
// device and used instead of the password next time.

import { base64url, fromBase64url, hex, publicKey, sha256, sign, utf8 } from "./crypto.js";

const IDENTITY_KEY = "pincer.device.v1";
const TOKEN_KEY = "pincer.deviceToken.v1";
export const CLIENT_ID = "openclaw-control-ui";
const CLIENT_MODE = "webchat";
const PLATFORM = "web";
export const SCOPES = ["operator.admin", "operator.read", "operator.write", "operator.approvals", "operator.pairing"];
const REQUEST_TIMEOUT_MS = 30000;
const CHALLENGE_TIMEOUT_MS = 5000;

export function deviceIdentity() {
  try {
    const stored = JSON.parse(localStorage.getItem(IDENTITY_KEY) || "null");
    if (stored?.version === 1 && stored.seed && stored.publicKey) {
      const pub = fromBase64url(stored.publicKey);
      return { id: hex(sha256(pub)), publicKey: stored.publicKey, seed: fromBase64url(stored.seed) };
    }
  } catch (_) { /* a damaged entry is replaced */ }
  const seed = crypto.getRandomValues(new Uint8Array(32));
  const pub = publicKey(seed);
  localStorage.setItem(IDENTITY_KEY, JSON.stringify({ version: 1, seed: base64url(seed), publicKey: base64url(pub), createdAtMs: Date.now() }));
  return { id: hex(sha256(pub)), publicKey: base64url(pub), seed };
}

function storedToken(deviceId) {
  try {
    const t = JSON.parse(localStorage.getItem(TOKEN_KEY) || "null");
    return t?.deviceId === deviceId && t.role === "operator" ? t.token : null;
  } catch (_) {
    return null;
  }
}

export function forgetDeviceToken() {
  localStorage.removeItem(TOKEN_KEY);
}

export function hasDeviceToken() {
  return Boolean(storedToken(deviceIdentity().id));
}

export class GatewayError extends Error {
  constructor(error) {
    super(error?.message || "request failed");
    this.code = error?.code;
    this.details = error?.details;
  }
}

export class Gateway {
  constructor(url) {
    this.url = url;
    this.ws = null;
    this.pending = new Map();
    this.listeners = new Map();
    this.nextId = 1;
    this.hello = null;
    this.auth = {};
    this.stopped = true;
    this.backoff = 800;
    this.onstate = () => {};
  }

  // Connects with `auth` ({password} | {token} | {} for a setup session or a
  // stored device token); resolves with hello-ok, rejects with the refusal.
  connect(auth = {}) {
    this.auth = auth;
    this.stopped = false;
    return this.open();
  }

  open() {
    return new Promise((resolve, reject) => {
      let settled = false;
      const done = (fn, value) => { if (!settled) { settled = true; fn(value); } };
      const ws = new WebSocket(this.url);
      this.ws = ws;
      this.onstate("connecting");
      const timer = setTimeout(() => { ws.close(); done(reject, new Error("the gateway sent no challenge")); }, CHALLENGE_TIMEOUT_MS);
      ws.onmessage = (ev) => {
        let frame;
        try { frame = JSON.parse(ev.data); } catch (_) { return; }
        if (frame.type === "event" && frame.event === "connect.challenge") {
          clearTimeout(timer);
          this.sendConnect(frame.payload).then((hello) => {
            this.hello = hello;
            // From now on this browser reconnects with its device token, not the secret.
            if (hello?.auth?.deviceToken) this.auth = {};
            this.backoff = 800;
            this.onstate("connected", hello);
            done(resolve, hello);
          }, (err) => { done(reject, err); });
          return;
        }
        this.dispatch(frame);
      };
      ws.onclose = (ev) => {
        clearTimeout(timer);
        if (this.ws === ws) this.ws = null;
        for (const [, p] of this.pending) p.reject(new Error(`connection closed (${ev.code})`));
        this.pending.clear();
        done(reject, new Error(ev.reason || `connection closed (${ev.code})`));
        if (this.hello && !this.stopped && ev.code !== 1008) {
          this.onstate("reconnecting", ev);
          setTimeout(() => this.reopen(), this.backoff);
          this.backoff = Math.min(this.backoff * 1.7, 15000);
        } else if (!this.stopped) {
          this.onstate("disconnected", ev);
        }
      };
    });
  }

  reopen() {
    if (this.stopped) return;
    this.open().catch(() => {});
  }

  stop() {
    this.stopped = true;
    this.hello = null;
    this.ws?.close();
  }

  async sendConnect(challenge) {
    const device = deviceIdentity();
    const nonce = String(challenge?.nonce || "");
    const signedAt = Number(challenge?.ts) || Date.now();
    const auth = { ...this.auth };
    const deviceToken = storedToken(device.id);
    if (deviceToken && !auth.password && !auth.token && !auth.setup) auth.deviceToken = deviceToken;
    delete auth.setup;
    const signedToken = auth.token ?? auth.deviceToken ?? "";
    const payload = ["v3", device.id, CLIENT_ID, CLIENT_MODE, "operator", SCOPES.join(","), signedAt, signedToken, nonce, PLATFORM, ""].join("|");
    const params = {
      minProtocol: 3,
      maxProtocol: 4,
      client: { id: CLIENT_ID, version: "pincer-ui", platform: PLATFORM, mode: CLIENT_MODE, displayName: "pincer Control UI" },
      role: "operator",
      scopes: SCOPES,
      caps: ["tool-events"],
      auth,
      device: { id: device.id, publicKey: device.publicKey, signature: base64url(sign(device.seed, utf8(payload))), signedAt, nonce },
      userAgent: navigator.userAgent,
      locale: navigator.language,
    };
    try {
      const hello = await this.request("connect", params);
      if (hello?.auth?.deviceToken) {
        localStorage.setItem(TOKEN_KEY, JSON.stringify({ deviceId: device.id, role: "operator", token: hello.auth.deviceToken }));
      }
      return hello;
    } catch (err) {
      if (auth.deviceToken && err.details?.code === "AUTH_DEVICE_TOKEN_MISMATCH") forgetDeviceToken();
      throw err;
    }
  }

  dispatch(frame) {
    if (frame.type === "res") {
      const pending = this.pending.get(frame.id);
      if (!pending) return;
      this.pending.delete(frame.id);
      clearTimeout(pending.timer);
      if (frame.ok) pending.resolve(frame.payload);
      else pending.reject(new GatewayError(frame.error));
    } else if (frame.type === "event") {
      for (const fn of this.listeners.get(frame.event) || []) {
        try { fn(frame.payload); } catch (err) { console.error(err); }
      }
    }
  }

  request(method, params = {}, timeoutMs = REQUEST_TIMEOUT_MS) {
    if (!this.ws || this.ws.readyState !== WebSocket.OPEN) return Promise.reject(new Error("not connected to the gateway"));
    const id = `ui-${this.nextId++}`;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new Error(`${method}: no answer within ${timeoutMs / 1000} s`));
      }, timeoutMs);
      this.pending.set(id, { resolve, reject, timer });
      this.ws.send(JSON.stringify({ type: "req", id, method, params }));
    });
  }

  // Calls `fn(payload)` for every `event`; returns the function that stops it.
  on(event, fn) {
    if (!this.listeners.has(event)) this.listeners.set(event, new Set());
    this.listeners.get(event).add(fn);
    return () => this.listeners.get(event)?.delete(fn);
  }
}
