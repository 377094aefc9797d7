// The Control UI's shell: reads the gateway's bootstrap document, then shows
// first-run setup, the sign-in form, or the pages (routed by the URL's hash)
// once the WebSocket is connected. Pages load on first use.

import { Gateway, hasDeviceToken, forgetDeviceToken, deviceIdentity } from "./gateway.js";
import { h, clear, notify, errorText, field, button, heading } from "./dom.js";

const PAGES = [
  ["chat", "Chat", () => import("./chat.js")],
  ["channels", "Channels", () => import("./channels.js")],
  ["agents", "Agents & models", () => import("./agents.js")],
  ["cron", "Cron", () => import("./cron.js")],
  ["memory", "Memory", () => import("./memory.js")],
  ["logs", "Logs", () => import("./logs.js")],
  ["config", "Config", () => import("./config.js")],
  ["system", "System", () => import("./system.js")],
];

const base = location.pathname.replace(/[^/]*$/, "");
const wsUrl = `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}${base}`;
const main = document.getElementById("main");
const nav = document.getElementById("nav");
const state = document.getElementById("conn");
const gw = new Gateway(wsUrl);
let current = null;

gw.onstate = (s) => {
  const words = { connecting: "Connecting…", connected: "Connected", reconnecting: "Reconnecting…", disconnected: "Disconnected" };
  const again = state.dataset.state === "reconnecting" && s === "connected";
  state.textContent = words[s] || s;
  state.dataset.state = s;
  // Back after a restart or a dropped link: the page reads its data again.
  if (again) route();
};

async function bootstrap() {
  const response = await fetch(`${base}__pincer/bootstrap.json`, { cache: "no-store" });
  if (!response.ok) throw new Error(`bootstrap: HTTP ${response.status}`);
  return response.json();
}

async function start() {
  let boot;
  try {
    boot = await bootstrap();
  } catch (err) {
    return show(h("section", {}, heading("pincer"), h("p", { class: "error" }, `The gateway did not answer: ${errorText(err)}`)));
  }
  document.getElementById("version").textContent = `pincer ${boot.version}`;
  if (boot.setup?.needed) {
    if (!boot.setup.allowed) {
      return show(h("section", {}, heading("Set up pincer"),
        h("p", {}, "This gateway is not set up yet. First-run setup answers only on the local network: open this page from a computer on the same network as the box, not through a proxy or Tailscale.")));
    }
    const { default: setup } = await import("./setup.js");
    return show(await setup({ gw, done: (password) => signIn({ password }).catch((err) => login("password", describe(err))) }));
  }
  if (hasDeviceToken()) {
    try {
      await gw.connect({});
      return ready();
    } catch (_) { /* fall back to the password */ }
  }
  login(boot.authMode);
}

function login(mode, message) {
  const secretLabel = mode === "token" ? "Gateway token" : "Gateway password";
  const secret = field(secretLabel, { type: "password", autocomplete: "current-password", required: true });
  const error = h("p", { class: "error", role: "alert" }, message || "");
  const form = h("form", { class: "card narrow", onsubmit: async (ev) => {
    ev.preventDefault();
    error.textContent = "";
    const value = secret.input.value;
    try {
      await signIn(mode === "token" ? { token: value } : { password: value });
    } catch (err) {
      error.textContent = describe(err);
      secret.input.focus();
    }
  } }, secret.wrap, error, h("button", { type: "submit", class: "primary" }, "Sign in"));
  show(h("section", {}, heading("Sign in to pincer"), h("p", {}, "This browser keeps a device key; after the first sign-in it connects by itself."), form));
  secret.input.focus();
}

function describe(err) {
  const code = err?.details?.code;
  if (code === "PAIRING_REQUIRED") return "This browser is a new device: approve it on the Channels page of a signed-in browser, or with `pincer devices approve` on the box, then sign in again.";
  if (code === "CONTROL_UI_ORIGIN_NOT_ALLOWED") return "The gateway refuses pages from this address (gateway.controlUi.allowedOrigins).";
  return errorText(err);
}

async function signIn(auth) {
  await gw.connect(auth);
  ready();
}

function ready() {
  clear(nav, PAGES.map(([id, label]) => h("a", { href: `#/${id}`, "data-page": id }, label)),
    button("Sign out", signOut, { class: "link" }));
  nav.hidden = false;
  route();
}

// Signing out revokes this browser's device token at the gateway, then forgets it here.
async function signOut() {
  try {
    await gw.request("device.token.revoke", { deviceId: deviceIdentity().id, role: "operator" });
  } catch (err) {
    notify(`The gateway kept this browser's token: ${errorText(err)}`, "error");
  }
  forgetDeviceToken();
  gw.stop();
  location.hash = "";
  location.reload();
}

function show(el) {
  current?.dispose?.();
  current = null;
  clear(main, el);
  main.querySelector("h1")?.focus();
}

async function route() {
  if (!gw.hello) return;
  const id = (location.hash.match(/^#\/([a-z]+)/) || [])[1] || "chat";
  const page = PAGES.find(([pid]) => pid === id) || PAGES[0];
  for (const link of nav.querySelectorAll("a")) {
    if (link.dataset.page === page[0]) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  document.title = `${page[1]} · pincer`;
  document.getElementById("notices").replaceChildren();
  try {
    const { default: render } = await page[2]();
    current?.dispose?.();
    const view = await render({ gw, hello: gw.hello, notify });
    clear(main, view.el);
    current = view;
    main.querySelector("h1")?.focus();
  } catch (err) {
    show(h("section", {}, heading(page[1]), h("p", { class: "error", role: "alert" }, errorText(err))));
  }
}

addEventListener("hashchange", route);
start();
