// Drives OpenClaw's own Control UI (the npm `openclaw` package's
// dist/control-ui) in headless Chromium to link WhatsApp: opens the channels
// view, clicks the WhatsApp card's "Show QR", reports the QR image the page
// shows, clicks "Wait for scan" and waits for the card to say it is linked.
// Used by tests/e2e_whatsapp_login.rs (which plays the phone when the image is
// reported); prints one JSON line per finding and a final {"done":…} line.
//
// Usage: node control_ui_whatsapp.mjs <control-ui dir> <ws url> <token> <screens dir>

import http from "node:http";
import fs from "node:fs";
import path from "node:path";
import os from "node:os";
import puppeteer from "puppeteer-core";

const [uiDir, wsUrl, token, screensDir] = process.argv.slice(2);
if (!screensDir) {
  console.error("usage: control_ui_whatsapp.mjs <ui dir> <ws url> <token> <screens dir>");
  process.exit(2);
}
const CHROMIUM = process.env.PINCER_CHROMIUM || "/usr/bin/chromium";
const STEP_MS = 45000;

const TYPES = {
  ".html": "text/html", ".js": "text/javascript", ".css": "text/css", ".json": "application/json",
  ".svg": "image/svg+xml", ".png": "image/png", ".ico": "image/x-icon", ".webp": "image/webp",
  ".woff2": "font/woff2", ".webmanifest": "application/manifest+json", ".txt": "text/plain",
};

// The UI's files, with index.html for its routes (a single-page app server).
function serveStatic(root) {
  const base = path.resolve(root);
  return http.createServer((req, res) => {
    const url = new URL(req.url, "http://localhost");
    let file = path.resolve(base, "." + decodeURIComponent(url.pathname));
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
  defaultViewport: { width: 1280, height: 1400 },
});

const requests = new Map();
const called = [];
const errors = [];
let step = "open";

async function finish(ok, reason, page) {
  if (page) {
    try {
      await page.screenshot({ path: path.join(screensDir, ok ? "whatsapp-linked.png" : "whatsapp-failure.png") });
    } catch (_) { /* page gone */ }
  }
  emit({ done: ok, reason, step, called, errors });
  await browser.close().catch(() => {});
  server.close();
  fs.rmSync(profile, { recursive: true, force: true });
  process.exit(ok ? 0 : 1);
}

const page = await browser.newPage();
page.on("pageerror", (err) => emit({ pageerror: String(err) }));
const cdp = await page.createCDPSession();
await cdp.send("Network.enable");
cdp.on("Network.webSocketFrameSent", ({ response }) => {
  let frame;
  try { frame = JSON.parse(response.payloadData); } catch (_) { return; }
  if (frame.type === "req") {
    requests.set(frame.id, frame.method);
    called.push({ method: frame.method, step, params: frame.method.startsWith("web.login") ? frame.params : undefined });
  }
});
cdp.on("Network.webSocketFrameReceived", ({ response }) => {
  let frame;
  try { frame = JSON.parse(response.payloadData); } catch (_) { return; }
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
  emit({ pageTextTail: text.slice(-3000) });
  await finish(false, `timed out waiting for ${what} (${JSON.stringify(needle)})`, page);
}

// Clicks the first button whose text starts with `prefix`, shadow roots included.
async function clickButton(prefix, what) {
  const deadline = Date.now() + STEP_MS;
  while (Date.now() < deadline) {
    const clicked = await page.evaluate((pre) => {
      const visit = (root) => {
        for (const el of root.querySelectorAll("button")) {
          if (el.textContent.trim().startsWith(pre) && !el.disabled) return el;
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

// Clicks the innermost element whose whole text is `text`, shadow roots included.
async function clickText(text, what) {
  const deadline = Date.now() + STEP_MS;
  while (Date.now() < deadline) {
    const clicked = await page.evaluate((wanted) => {
      let best = null;
      const visit = (root) => {
        for (const el of root.querySelectorAll("*")) {
          if (el.shadowRoot) visit(el.shadowRoot);
          if (el.textContent.trim() === wanted && !["SCRIPT", "STYLE"].includes(el.tagName)) best = el;
        }
      };
      visit(document);
      if (!best) return false;
      best.click();
      return true;
    }, text);
    if (clicked) return;
    await new Promise((r) => setTimeout(r, 250));
  }
  await finish(false, `timed out waiting for ${what} (${JSON.stringify(text)})`, page);
}

// The `src` of the first <img> whose src is a PNG data URL, shadow roots included.
async function waitForQrImage() {
  const deadline = Date.now() + STEP_MS;
  while (Date.now() < deadline) {
    const src = await page.evaluate(() => {
      const visit = (root) => {
        for (const el of root.querySelectorAll("img")) {
          if ((el.getAttribute("src") || "").startsWith("data:image/png;base64,")) {
            return { src: el.getAttribute("src"), alt: el.getAttribute("alt"), width: el.naturalWidth };
          }
        }
        for (const el of root.querySelectorAll("*")) {
          if (el.shadowRoot) {
            const inner = visit(el.shadowRoot);
            if (inner) return inner;
          }
        }
        return null;
      };
      return visit(document);
    });
    if (src) return src;
    await new Promise((r) => setTimeout(r, 250));
  }
  emit({ pageTextTail: (await pageText()).slice(-3000) });
  await finish(false, "timed out waiting for the QR image", page);
}

try {
  const hash = `#gatewayUrl=${encodeURIComponent(wsUrl)}&token=${encodeURIComponent(token)}`;
  await page.goto(`http://127.0.0.1:${uiPort}/${hash}`, { waitUntil: "load", timeout: STEP_MS });
  await clickButton("Switch to", "the switch-gateway confirmation");
  step = "connect";
  await waitForText("Connected", "the connection status");
  step = "channels";
  await page.goto(`http://127.0.0.1:${uiPort}/settings/channels${hash}`, { waitUntil: "load", timeout: STEP_MS });
  await waitForText("Connected", "the connection status on the channels view");
  step = "open-card";
  await clickText("WhatsApp", "the WhatsApp row of the connected channels");
  await new Promise((r) => setTimeout(r, 1000));
  step = "show-qr";
  await clickButton("Show QR", "the WhatsApp card's Show QR button");
  const image = await waitForQrImage();
  emit({ qrImage: image });
  await page.screenshot({ path: path.join(screensDir, "whatsapp-qr.png") });
  step = "wait-for-scan";
  await clickButton("Wait for scan", "the WhatsApp card's Wait for scan button");
  await waitForText("Linked!", "the card's linked message");
  await finish(true, "ok", page);
} catch (err) {
  await finish(false, `driver error: ${err?.stack || err}`, page);
}
