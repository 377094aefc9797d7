// Drives OpenClaw's own Control UI (the npm `openclaw` package's
// dist/control-ui) in headless Chromium against a running pincer gateway.
// Used by tests/control_ui.rs; prints one JSON line per finding on stdout and
// a final {"done":…} line.
//
// Usage: node control_ui.mjs <control-ui dir> <ws url> <token> <message> <expected answer> <screens dir>
//
// It serves the UI's files itself (a tiny static server on a loopback port),
// opens it with #gatewayUrl=…&token=…, records every gateway request the page
// sends and every error answer (through the DevTools protocol's WebSocket
// frame events), waits for "Connected", sends a message from the composer,
// waits for the streamed answer, then opens the sessions view.

import http from "node:http";
import fs from "node:fs";
import path from "node:path";
import os from "node:os";
import puppeteer from "puppeteer-core";

const [uiDir, wsUrl, token, message, expected, screensDir] = process.argv.slice(2);
if (!screensDir) {
  console.error("usage: control_ui.mjs <ui dir> <ws url> <token> <message> <expected> <screens dir>");
  process.exit(2);
}
const CHROMIUM = process.env.PINCER_CHROMIUM || "/usr/bin/chromium";
const STEP_MS = 30000;

const TYPES = {
  ".html": "text/html", ".js": "text/javascript", ".css": "text/css", ".json": "application/json",
  ".svg": "image/svg+xml", ".png": "image/png", ".ico": "image/x-icon", ".webp": "image/webp",
  ".woff2": "font/woff2", ".webmanifest": "application/manifest+json", ".txt": "text/plain",
};

function serveStatic(root) {
  const base = path.resolve(root);
  return http.createServer((req, res) => {
    const url = new URL(req.url, "http://localhost");
    let file = path.resolve(base, "." + decodeURIComponent(url.pathname));
    if (!file.startsWith(base)) {
      res.writeHead(403).end();
      return;
    }
    // A route's page asks for its assets relative to the route (for example
    // /settings/assets/x.js): serve the file the shortest such suffix names,
    // and index.html for the routes themselves, as a single-page app server does.
    const isFile = (f) => fs.existsSync(f) && !fs.statSync(f).isDirectory();
    const segments = url.pathname.split("/").filter(Boolean);
    while (!isFile(file) && segments.length > 1) {
      segments.shift();
      file = path.resolve(base, "." + decodeURIComponent("/" + segments.join("/")));
      if (!file.startsWith(base)) break;
    }
    if (!file.startsWith(base) || !isFile(file)) file = path.join(base, "index.html");
    res.writeHead(200, { "content-type": TYPES[path.extname(file)] || "application/octet-stream" });
    fs.createReadStream(file).pipe(res);
  });
}

function emit(obj) {
  process.stdout.write(JSON.stringify(obj) + "\n");
}

const server = serveStatic(uiDir);
await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
const uiPort = server.address().port;
const profile = fs.mkdtempSync(path.join(os.tmpdir(), "pincer-chromium-"));

const browser = await puppeteer.launch({
  executablePath: CHROMIUM,
  headless: true,
  args: [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    `--user-data-dir=${profile}`,
  ],
  defaultViewport: { width: 1280, height: 860 },
});

const requests = new Map(); // id -> method
const called = [];
const errors = [];
const events = {}; // event name -> count received
let step = "open";
let shot = 0;

async function screenshot(page, name) {
  shot += 1;
  const file = path.join(screensDir, `${String(shot).padStart(2, "0")}-${name}.png`);
  await page.screenshot({ path: file });
  emit({ screenshot: file });
}

async function finish(ok, reason, page) {
  if (page) {
    try { await screenshot(page, ok ? "final" : "failure"); } catch (_) { /* page gone */ }
  }
  emit({ done: ok, reason, step, called, errors, events });
  await browser.close().catch(() => {});
  server.close();
  fs.rmSync(profile, { recursive: true, force: true });
  process.exit(ok ? 0 : 1);
}

const page = await browser.newPage();
page.on("console", (msg) => {
  if (msg.type() === "error" || msg.type() === "warning") emit({ console: msg.type(), text: msg.text() });
});
page.on("pageerror", (err) => emit({ pageerror: String(err) }));
const cdp = await page.createCDPSession();
await cdp.send("Network.enable");
cdp.on("Network.webSocketFrameSent", ({ response }) => {
  let frame;
  try { frame = JSON.parse(response.payloadData); } catch (_) { return; }
  if (frame.type === "req") {
    requests.set(frame.id, frame.method);
    called.push({ method: frame.method, step });
  }
});
cdp.on("Network.webSocketFrameReceived", ({ response }) => {
  let frame;
  try { frame = JSON.parse(response.payloadData); } catch (_) { return; }
  if (frame.type === "event") events[frame.event] = (events[frame.event] ?? 0) + 1;
  if (frame.type === "res" && frame.ok === false) {
    const error = { method: requests.get(frame.id), step, code: frame.error?.code, message: frame.error?.message };
    errors.push(error);
    emit({ errorAnswer: error });
  }
});

// Text anywhere in the page, shadow roots included.
async function pageText() {
  return page.evaluate(() => {
    const parts = [];
    const walk = (node) => {
      if (node.shadowRoot) walk(node.shadowRoot);
      for (const child of node.childNodes) {
        if (child.nodeType === 3) parts.push(child.textContent);
        else if (child.nodeType === 1 || child.nodeType === 11) walk(child);
      }
    };
    walk(document.body);
    return parts.join(" ").replace(/\s+/g, " ");
  });
}

async function waitForText(needle, what) {
  const deadline = Date.now() + STEP_MS;
  let text = "";
  while (Date.now() < deadline) {
    text = await pageText();
    if (text.includes(needle)) return;
    await new Promise((r) => setTimeout(r, 250));
  }
  emit({ pageTextTail: text.slice(-2000) });
  await finish(false, `timed out waiting for ${what} (${JSON.stringify(needle)})`, page);
}

// The first element matching `selector` anywhere, shadow roots included.
async function deepHandle(selector) {
  return page.evaluateHandle((sel) => {
    const visit = (root) => {
      const found = root.querySelector(sel);
      if (found) return found;
      for (const el of root.querySelectorAll("*")) {
        if (el.shadowRoot) {
          const inner = visit(el.shadowRoot);
          if (inner) return inner;
        }
      }
      return null;
    };
    return visit(document);
  }, selector);
}

// Clicks the first button whose text starts with `prefix`, shadow roots included.
async function clickButton(prefix, what) {
  const deadline = Date.now() + STEP_MS;
  while (Date.now() < deadline) {
    const clicked = await page.evaluate((pre) => {
      const visit = (root) => {
        for (const el of root.querySelectorAll("button")) {
          if (el.textContent.trim().startsWith(pre)) return el;
        }
        for (const el of root.querySelectorAll("*")) {
          if (el.shadowRoot) {
            const inner = visit(el.shadowRoot);
            if (inner) return inner;
          }
        }
        return null;
      };
      const button = visit(document);
      if (!button) return false;
      button.click();
      return true;
    }, prefix);
    if (clicked) return;
    await new Promise((r) => setTimeout(r, 250));
  }
  await finish(false, `timed out waiting for ${what} (a button starting ${JSON.stringify(prefix)})`, page);
}

try {
  const url = `http://127.0.0.1:${uiPort}/#gatewayUrl=${encodeURIComponent(wsUrl)}&token=${encodeURIComponent(token)}`;
  await page.goto(url, { waitUntil: "load", timeout: STEP_MS });
  // A link naming another gateway asks first, as it would a user.
  await clickButton("Switch to", "the switch-gateway confirmation");
  step = "connect";
  await waitForText("Connected", "the connection status");
  // Give the views the UI opens with time to ask their questions.
  await new Promise((r) => setTimeout(r, 3000));
  await screenshot(page, "connected");

  step = "chat";
  const composer = await deepHandle("textarea");
  if (!(await composer.evaluate((el) => el !== null))) await finish(false, "no composer textarea", page);
  await composer.asElement().click();
  await page.keyboard.type(message);
  await screenshot(page, "typed");
  await page.keyboard.press("Enter");
  await waitForText(expected, "the streamed answer");
  await screenshot(page, "answered");

  step = "sessions";
  const base = `http://127.0.0.1:${uiPort}`;
  await page.goto(`${base}/sessions#gatewayUrl=${encodeURIComponent(wsUrl)}&token=${encodeURIComponent(token)}`, {
    waitUntil: "load", timeout: STEP_MS,
  });
  await waitForText("Connected", "the connection status on the sessions view");
  await new Promise((r) => setTimeout(r, 2000));
  emit({ sessionsText: (await pageText()).slice(0, 4000) });
  await screenshot(page, "sessions");

  // The other views the test opens: cron, approvals, channels, config.
  for (const [name, route] of [
    ["cron", "/automations"], ["approvals", "/settings/approvals"],
    ["channels", "/settings/channels"], ["config", "/settings/advanced"],
  ]) {
    step = name;
    await page.goto(`${base}${route}#gatewayUrl=${encodeURIComponent(wsUrl)}&token=${encodeURIComponent(token)}`, {
      waitUntil: "load", timeout: STEP_MS,
    });
    await waitForText("Connected", `the connection status on the ${name} view`);
    await new Promise((r) => setTimeout(r, 2000));
    await screenshot(page, name);
  }
  await finish(true, "ok", null);
} catch (err) {
  await finish(false, `driver error: ${err?.stack || err}`, page);
}
