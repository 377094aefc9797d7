// Drives pincer's own Control UI in headless Chromium (Debian's, through
// puppeteer-core) against a running, unconfigured pincer gateway: first-run
// setup, a streamed chat turn, a Telegram DM pairing approved, a cron job
// added and run, a memory search and re-index, a config edit refused at its
// key path, the other pages, a keyboard and accessible-name pass, and a
// phone-width layout. Used by tests/pincer_ui.rs; prints one JSON line per
// finding and a final {"done": …} line; every assertion is in the Rust test.
//
// Usage: node pincer_ui.mjs <ui url> <screens dir> <settings JSON>
//   settings: {providerUrl, apiKey, model, botToken, botUsername, password, message, expected,
//              cronMessage, memoryQuery, badConfigFrom, badConfigTo}
// With PINCER_UI_MODE=bench it only loads the UI once with an empty cache and reports sizes and paint times.

import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import puppeteer from "puppeteer-core";

const [url, screensDir, settingsJson] = process.argv.slice(2);
if (!screensDir) {
  console.error("usage: pincer_ui.mjs <ui url> <screens dir> [settings JSON]");
  process.exit(2);
}
const settings = JSON.parse(settingsJson || "{}");
const CHROMIUM = process.env.PINCER_CHROMIUM || "/usr/bin/chromium";
const STEP_MS = 30000;
let step = "launch";
let shot = 0;

function emit(obj) {
  process.stdout.write(JSON.stringify(obj) + "\n");
}

fs.mkdirSync(screensDir, { recursive: true });
const profile = fs.mkdtempSync(path.join(os.tmpdir(), "pincer-ui-chromium-"));
const browser = await puppeteer.launch({
  executablePath: CHROMIUM,
  headless: true,
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", `--user-data-dir=${profile}`],
  defaultViewport: { width: 1280, height: 860 },
});
const page = await browser.newPage();
page.setDefaultTimeout(STEP_MS);
const problems = [];
page.on("console", (msg) => {
  if (msg.type() === "error" || msg.type() === "warn") {
    problems.push(`${msg.type()}: ${msg.text()}`);
    emit({ console: msg.type(), text: msg.text() });
  }
});
page.on("pageerror", (err) => { problems.push(`pageerror: ${err}`); emit({ pageerror: String(err) }); });

async function finish(ok, reason) {
  if (!ok) {
    try { await screenshot("failure"); } catch (_) { /* page gone */ }
    try { emit({ pageText: (await page.evaluate(() => document.body.innerText)).slice(0, 3000) }); } catch (_) { /* gone */ }
  }
  emit({ done: ok, reason, step, problems });
  await browser.close().catch(() => {});
  fs.rmSync(profile, { recursive: true, force: true });
  process.exit(ok ? 0 : 1);
}

async function screenshot(name, fullPage = true) {
  shot += 1;
  const file = path.join(screensDir, `${String(shot).padStart(2, "0")}-${name}.png`);
  await page.screenshot({ path: file, fullPage });
  emit({ screenshot: file });
}

const byName = (name) => page.locator(`::-p-aria(${name})`);

async function waitText(needle, what) {
  try {
    await page.waitForFunction((n) => document.body.innerText.includes(n), { timeout: STEP_MS }, needle);
  } catch (_) {
    throw new Error(`timed out waiting for ${what} (${JSON.stringify(needle)})`);
  }
}

async function go(hash, title) {
  await page.evaluate((h) => { location.hash = h; }, hash);
  await page.waitForFunction((t) => document.querySelector("main h1")?.textContent === t, {}, title);
}

async function pageMetrics(on = page) {
  return on.evaluate(() => {
    const nav = performance.getEntriesByType("navigation")[0];
    const resources = performance.getEntriesByType("resource").filter((r) => !r.name.includes("__pincer/"));
    const paint = Object.fromEntries(performance.getEntriesByType("paint").map((p) => [p.name, p.startTime]));
    return {
      transferBytes: (nav?.transferSize || 0) + resources.reduce((n, r) => n + (r.transferSize || 0), 0),
      encodedBytes: (nav?.encodedBodySize || 0) + resources.reduce((n, r) => n + (r.encodedBodySize || 0), 0),
      decodedBytes: (nav?.decodedBodySize || 0) + resources.reduce((n, r) => n + (r.decodedBodySize || 0), 0),
      files: 1 + resources.length,
      firstPaintMs: paint["first-paint"],
      firstContentfulPaintMs: paint["first-contentful-paint"],
      domContentLoadedMs: nav?.domContentLoadedEventEnd,
      resources: resources.map((r) => ({ name: r.name.replace(location.origin, ""), encoded: r.encodedBodySize })),
    };
  });
}

// Every control with its accessible name, as Chromium computes it.
async function unnamedControls() {
  const tree = await page.accessibility.snapshot({ interestingOnly: false });
  const controls = new Set(["button", "link", "textbox", "searchbox", "combobox", "checkbox", "radio", "spinbutton", "slider", "menuitem", "tab"]);
  const missing = [];
  const walk = (node) => {
    if (!node) return;
    if (controls.has(node.role) && !String(node.name || "").trim()) missing.push(node.role);
    for (const child of node.children || []) walk(child);
  };
  walk(tree);
  return missing;
}

try {
  if (process.env.PINCER_UI_MODE === "bench") {
    // Each load in a fresh browser context with the cache off: every byte comes over the wire.
    const runs = Number(settings.runs || 10);
    const load = async (ctx, title, storage) => {
      const p = await ctx.newPage();
      if (storage) {
        // This browser's device key and token, as a signed-in browser keeps them.
        await p.evaluateOnNewDocument((kept) => {
          for (const [k, v] of Object.entries(JSON.parse(kept))) localStorage.setItem(k, v);
        }, storage);
      }
      const cdp = await p.createCDPSession();
      await cdp.send("Network.setCacheDisabled", { cacheDisabled: true });
      await p.goto(url, { waitUntil: "networkidle0" });
      await p.waitForFunction((t) => document.querySelector("main h1")?.textContent === t, {}, title);
      return p;
    };
    step = "bench first load";
    for (let i = 0; i < runs; i++) {
      const ctx = await browser.createBrowserContext();
      emit({ bench: "first-load", metrics: await pageMetrics(await load(ctx, settings.firstTitle)) });
      await ctx.close();
    }
    if (settings.password) {
      // Signed in once; then each cold load is a fresh context holding only that browser's
      // device key and token, opening straight onto the chat page.
      step = "bench signed-in";
      const first = await browser.createBrowserContext();
      const p = await load(first, "Sign in to pincer");
      await p.locator("::-p-aria(Gateway password)").fill(settings.password);
      await p.keyboard.press("Enter");
      await p.waitForFunction(() => document.querySelector("main h1")?.textContent === "Chat");
      const storage = await p.evaluate(() => JSON.stringify({ ...localStorage }));
      await first.close();
      for (let i = 0; i < runs; i++) {
        const ctx = await browser.createBrowserContext();
        const chat = await load(ctx, "Chat", storage);
        await chat.waitForSelector(".messages");
        emit({ bench: "signed-in", metrics: await pageMetrics(chat) });
        await ctx.close();
      }
    }
    await finish(true, "ok");
  }

  // --- First-run setup
  step = "setup";
  await page.goto(url, { waitUntil: "load" });
  await page.waitForFunction(() => document.querySelector("main h1")?.textContent === "Set up pincer");
  emit({ setupMetrics: await pageMetrics() });
  emit({ firstbootNotice: await page.evaluate(() => document.querySelector(".card.error")?.innerText || null) });
  await byName("OpenAI-compatible").click();
  await byName("Base URL").fill(settings.providerUrl);
  await byName("API key").fill(settings.apiKey);
  await byName("Model").fill(settings.model);
  await byName("Test the provider").click();
  await waitText("The model answered", "the provider test");
  await byName("Telegram bot token").fill(settings.botToken);
  await byName("Check Telegram").click();
  await waitText(`OK: @${settings.botUsername}`, "the Telegram token check");
  await byName("Gateway password").fill(settings.password);
  await byName("Password again").fill(settings.password);
  await waitText("Ready: the gateway will save this and restart.", "the finish button's reason");
  emit({ setupUnnamed: await unnamedControls() });
  await screenshot("setup");
  await byName("Finish setup").click();

  // --- Chat, after the restart, signed in with the password just set
  step = "chat";
  await page.waitForFunction(() => document.querySelector("main h1")?.textContent === "Chat", { timeout: 60000 });
  await waitText("Connected", "the connection status");
  await page.waitForSelector(".messages");
  emit({ deviceToken: await page.evaluate(() => Boolean(localStorage.getItem("pincer.deviceToken.v1"))) });
  // Every text the answer's bubble shows, from the first delta to the final answer.
  await page.evaluate(() => {
    window.__answerTexts = [];
    new MutationObserver(() => {
      const last = [...document.querySelectorAll(".msg.assistant")].pop()?.textContent;
      if (last && window.__answerTexts.at(-1) !== last) window.__answerTexts.push(last);
    }).observe(document.querySelector(".messages"), { childList: true, subtree: true, characterData: true });
  });
  await byName("Message").fill(settings.message);
  await page.keyboard.press("Enter");
  await waitText(settings.expected, "the streamed answer");
  await page.waitForSelector(".msg.tool");
  emit({ answerTexts: await page.evaluate(() => window.__answerTexts) });
  emit({ toolCalls: await page.evaluate(() => [...document.querySelectorAll(".msg.tool")].map((t) => t.textContent)) });
  await screenshot("chat");

  // --- Channels: the Telegram sender's DM pairing code, approved
  step = "channels";
  await go("#/channels", "Channels");
  const approve = await page.waitForSelector("button[aria-label^='Approve'][aria-label*='(code ']", { timeout: 45000 });
  const label = await approve.evaluate((el) => el.getAttribute("aria-label"));
  emit({ pairingRequest: label, pairingCode: label.match(/\(code ([A-Z0-9]+)\)/)?.[1] });
  await waitText("connected", "the Telegram account's state");
  await screenshot("channels-request");
  await approve.click();
  await waitText("No one is waiting", "the request to go");
  await screenshot("channels-approved");

  // --- Cron: a job added, run now, its run log
  step = "cron";
  await go("#/cron", "Cron");
  await byName("Name").fill("Morning note");
  await byName("Minutes").fill("60");
  await byName("Message to the agent").fill(settings.cronMessage);
  await byName("Add job").click();
  await waitText("Morning note", "the new job's row");
  await byName("Run Morning note now").click();
  await page.waitForFunction(() => [...document.querySelectorAll("td .chip")].some((c) => c.textContent === "ok"), { timeout: 45000 });
  await byName("Run log of Morning note").click();
  await page.waitForSelector("#runs-title + table");
  emit({ cronRunLog: await page.evaluate(() => document.querySelector("#runs-title + table").innerText) });
  await screenshot("cron");

  // --- Memory: a search with hits and scores, then a re-index with progress
  step = "memory";
  await go("#/memory", "Memory");
  await byName("Search memory").fill(settings.memoryQuery);
  await page.locator('::-p-aria([name="Search"][role="button"])').click();
  await page.waitForSelector(".hits li");
  emit({ memoryHits: await page.evaluate(() => [...document.querySelectorAll(".hits li")].map((li) => li.innerText)) });
  await byName("Re-index now").click();
  await page.waitForFunction(() => /Indexed \d+ file/.test(document.body.innerText), { timeout: 60000 });
  emit({ reindex: await page.evaluate(() => ({ text: document.querySelector("[role=status]:not(#conn)")?.textContent, value: document.querySelector("progress").value, max: document.querySelector("progress").max })) });
  await screenshot("memory");

  // --- Config: an invalid value refused at its key path, nothing written
  step = "config";
  await go("#/config", "Config");
  const original = await page.$eval("textarea.editor", (el) => el.value);
  if (!original.includes(settings.badConfigFrom)) throw new Error(`the config editor lacks ${settings.badConfigFrom}`);
  await page.$eval("textarea.editor", (el, [from, to]) => { el.value = el.value.replace(from, to); }, [settings.badConfigFrom, settings.badConfigTo]);
  await byName("Check and save").click();
  await page.waitForSelector(".issue-path");
  emit({ configIssue: await page.evaluate(() => ({
    path: document.querySelector(".issue-path").textContent,
    text: document.querySelector("#config-issues").innerText,
    invalid: document.querySelector("textarea.editor").getAttribute("aria-invalid"),
    selected: (() => { const t = document.querySelector("textarea.editor"); return t.value.slice(t.selectionStart, t.selectionEnd); })(),
  })) });
  await screenshot("config-refused");

  // --- Agents and models, with a real test call; logs; system
  step = "agents";
  await go("#/agents", "Agents & models");
  await byName("Test openai").click();
  await waitText("OK in", "the provider test");
  await screenshot("agents");
  step = "logs";
  await go("#/logs", "Logs");
  await page.waitForFunction(() => document.querySelector(".logs")?.textContent.includes("INFO"));
  await screenshot("logs");
  step = "system";
  await go("#/system", "System");
  await waitText("Memory (RSS)", "the system facts");
  emit({ systemText: await page.evaluate(() => document.querySelector("main").innerText) });
  await screenshot("system");

  // --- Sign out, a wrong password refused, then signed in again with the right one
  step = "sign-in";
  const kept = await page.evaluate(() => localStorage.getItem("pincer.deviceToken.v1"));
  await byName("Sign out").click();
  await page.waitForFunction(() => document.querySelector("main h1")?.textContent === "Sign in to pincer");
  emit({ tokenAfterSignOut: await page.evaluate(() => localStorage.getItem("pincer.deviceToken.v1")) });
  // The token signing out revoked no longer opens a session: put it back and reload.
  await page.evaluate((t) => localStorage.setItem("pincer.deviceToken.v1", t), kept);
  await page.reload({ waitUntil: "load" });
  await page.waitForFunction(() => document.querySelector("main h1")?.textContent === "Sign in to pincer");
  emit({ revokedTokenRefused: await page.evaluate(() => localStorage.getItem("pincer.deviceToken.v1") === null) });
  await byName("Gateway password").fill("not the password");
  await page.keyboard.press("Enter");
  await page.waitForFunction(() => document.querySelector("[role=alert]")?.textContent.length > 0);
  emit({ wrongPassword: await page.evaluate(() => document.querySelector("[role=alert]").textContent) });
  await screenshot("sign-in-refused");
  await byName("Gateway password").fill(settings.password);
  await page.keyboard.press("Enter");
  await page.waitForFunction(() => document.querySelector("main h1")?.textContent === "Chat");
  await page.waitForSelector(".messages");

  // --- Accessibility: every control named; the keyboard reaches the nav and opens a page
  step = "accessibility";
  const unnamed = {};
  for (const [hash, title] of [["#/chat", "Chat"], ["#/channels", "Channels"], ["#/agents", "Agents & models"], ["#/cron", "Cron"],
    ["#/memory", "Memory"], ["#/logs", "Logs"], ["#/config", "Config"], ["#/system", "System"]]) {
    await go(hash, title);
    unnamed[title] = await unnamedControls();
  }
  emit({ unnamed });
  await go("#/chat", "Chat");
  // From the page's heading (where a page puts focus), Tab through the page, past its end and round
  // through the skip link and the navigation, up to Sign out.
  const stops = [];
  for (let i = 0; i < 40 && stops.at(-1)?.name !== "Sign out"; i++) {
    await page.keyboard.press("Tab");
    const handle = await page.evaluateHandle(() => document.activeElement);
    const node = await page.accessibility.snapshot({ root: handle.asElement(), interestingOnly: false }).catch(() => null);
    stops.push({ tag: await handle.evaluate((el) => el.tagName.toLowerCase()), role: node?.role, name: node?.name || "" });
  }
  emit({ tabStops: stops });
  // From the chat page, Tab to the Cron link and open it with Enter.
  for (let i = 0; i < 20; i++) {
    const name = await page.evaluate(() => document.activeElement?.textContent);
    if (name === "Cron") break;
    await page.keyboard.press("Tab");
  }
  await page.keyboard.press("Enter");
  await page.waitForFunction(() => document.querySelector("main h1")?.textContent === "Cron");
  emit({ keyboardOpened: await page.evaluate(() => ({ hash: location.hash, focusedTag: document.activeElement?.tagName, focused: document.activeElement?.textContent })) });

  // --- Phone width
  step = "phone";
  await page.setViewport({ width: 390, height: 844, deviceScaleFactor: 2, isMobile: true, hasTouch: true });
  for (const [hash, title, name] of [["#/chat", "Chat", "phone-chat"], ["#/channels", "Channels", "phone-channels"], ["#/cron", "Cron", "phone-cron"], ["#/memory", "Memory", "phone-memory"]]) {
    await go(hash, title);
    await new Promise((r) => setTimeout(r, 300));
    emit({ phone: name, scrollWidth: await page.evaluate(() => document.documentElement.scrollWidth), width: 390 });
    await screenshot(name, false);
  }
  await finish(true, "ok");
} catch (err) {
  await finish(false, `step ${step}: ${err?.stack || err}`);
}
