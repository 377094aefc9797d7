// First-run setup: a provider (OpenAI-compatible, Anthropic or Ollama on the
// LAN) tested with one real call, optional chat tokens checked with their
// platforms, and the gateway password. The gateway writes its config file,
// pairs this browser and restarts; then this page signs in with the password.

import { h, clear, field, button, heading, errorText, chip } from "./dom.js";

const MODELS = { openai: "gpt-4o-mini", anthropic: "claude-sonnet-4-5", ollama: "qwen3:4b" };
const LABELS = { openai: "OpenAI-compatible", anthropic: "Anthropic", ollama: "Ollama on the LAN" };

export default async function setup({ gw, done }) {
  await gw.connect({ setup: true });
  const conn = document.getElementById("conn");
  conn.textContent = "Setup";
  const status = await gw.request("pincer.setup.status");
  const kinds = status.providers;
  const el = h("section", { class: "setup" }, heading("Set up pincer"));
  el.append(h("p", {}, "Nothing is configured yet. Choose the model provider, test it, add a chat app if you like, and set the password this page will ask for from now on."));
  for (const refused of status.firstboot || []) {
    el.append(h("div", { class: "card error", role: "alert" },
      h("strong", {}, `${refused.file} from the boot partition was refused`),
      refused.keyPath ? h("p", {}, "At ", h("code", {}, refused.keyPath), `: ${refused.error}`) : h("p", {}, refused.error),
      refused.keptAs ? h("p", { class: "muted" }, `Kept as ${refused.keptAs}. Fix it there and boot again, or set up here.`) : null));
  }

  // 1. Provider
  let tested = null;
  const kindField = h("fieldset", { class: "field" }, h("legend", {}, "Provider"),
    h("div", { class: "choices" }, kinds.map((k, i) => h("label", {},
      h("input", { type: "radio", name: "kind", value: k.kind, checked: i === 0, onchange: () => pick(k.kind) }), LABELS[k.kind] || k.kind))));
  const baseUrl = field("Base URL", { type: "url", required: true, "data-hint": "The provider's API address (for Ollama, the LAN machine running it)." });
  const apiKey = field("API key", { type: "password", autocomplete: "off", "data-hint": "Stored in the config file on the box, never shown again." });
  const model = field("Model", { required: true });
  const testResult = h("p", { role: "status", class: "muted" });
  const testButton = button("Test the provider", test);
  const provider = h("div", { class: "card narrow" }, h("h2", {}, "1. Model provider"), kindField, baseUrl.wrap, apiKey.wrap, model.wrap, h("div", { class: "row" }, testButton), testResult);

  function kind() {
    return el.querySelector("input[name=kind]:checked")?.value || kinds[0].kind;
  }
  function pick(k) {
    const info = kinds.find((x) => x.kind === k);
    baseUrl.input.value = info.baseUrl;
    model.input.value = MODELS[k] || "";
    apiKey.input.required = info.needsKey;
    apiKey.wrap.querySelector("label").textContent = info.needsKey ? "API key" : "API key (optional)";
    invalidate();
  }
  function choice() {
    return { kind: kind(), baseUrl: baseUrl.input.value.trim(), apiKey: apiKey.input.value.trim() || undefined, model: model.input.value.trim() };
  }
  function invalidate() {
    tested = null;
    testResult.textContent = "";
    update();
  }
  for (const f of [baseUrl, apiKey, model]) f.input.addEventListener("input", invalidate);
  async function test() {
    testButton.disabled = true;
    testResult.className = "muted";
    testResult.textContent = "Asking the model…";
    try {
      const r = await gw.request("pincer.setup.test", { provider: choice() });
      if (r.ok) {
        tested = JSON.stringify(choice());
        testResult.className = "ok";
        testResult.textContent = `The model answered in ${r.latencyMs} ms: “${r.reply}”`;
      } else {
        testResult.className = "error";
        testResult.textContent = `Test failed (${r.status}): ${r.error || "no answer"}`;
      }
    } catch (err) {
      testResult.className = "error";
      testResult.textContent = errorText(err);
    }
    testButton.disabled = false;
    update();
  }

  // 2. Chat apps
  const telegram = field("Telegram bot token", { type: "password", autocomplete: "off", "data-hint": "From @BotFather. Checked with Telegram's getMe." });
  const discord = field("Discord bot token", { type: "password", autocomplete: "off" });
  const slackBot = field("Slack bot token (xoxb-…)", { type: "password", autocomplete: "off" });
  const slackApp = field("Slack app token (xapp-…)", { type: "password", autocomplete: "off" });
  const checks = {};
  function checker(channel, inputs) {
    const out = h("span", { role: "status" });
    const check = async () => {
      out.replaceChildren("Checking…");
      const [token, appToken] = inputs.map((f) => f.input.value.trim());
      try {
        const r = await gw.request("pincer.setup.channel", { channel, token, appToken });
        checks[channel] = r.ok;
        out.replaceChildren(r.ok ? chip(r.username ? `OK: @${r.username}` : "OK", "ok") : chip(`Refused: ${r.error}`, "bad"));
      } catch (err) {
        checks[channel] = false;
        out.replaceChildren(chip(errorText(err), "bad"));
      }
      update();
    };
    for (const f of inputs) f.input.addEventListener("input", () => { delete checks[channel]; out.replaceChildren(); update(); });
    return h("div", { class: "row" }, button(`Check ${channel[0].toUpperCase()}${channel.slice(1)}`, check), out);
  }
  const chats = h("div", { class: "card narrow" }, h("h2", {}, "2. Chat apps (optional)"),
    telegram.wrap, checker("telegram", [telegram]),
    h("hr"), discord.wrap, checker("discord", [discord]),
    h("hr"), slackBot.wrap, slackApp.wrap, checker("slack", [slackBot, slackApp]));

  // 3. Password
  const password = field("Gateway password", { type: "password", autocomplete: "new-password", minlength: status.minPasswordChars, required: true, "data-hint": `At least ${status.minPasswordChars} characters. OpenClaw's apps and the CLI sign in with it too.` });
  const again = field("Password again", { type: "password", autocomplete: "new-password", required: true });
  for (const f of [password, again]) f.input.addEventListener("input", update);
  const why = h("p", { class: "muted", id: "finish-why" });
  const finish = h("button", { type: "submit", class: "primary", "aria-describedby": "finish-why" }, "Finish setup");
  const form = h("form", { onsubmit: apply }, provider, chats,
    h("div", { class: "card narrow" }, h("h2", {}, "3. Password"), password.wrap, again.wrap, why, finish));
  el.append(form);

  function blocker() {
    if (tested !== JSON.stringify(choice())) return "Test the provider first.";
    for (const [channel, filled] of [["telegram", telegram.input.value], ["discord", discord.input.value], ["slack", slackBot.input.value]]) {
      if (filled.trim() && checks[channel] !== true) return `Check the ${channel} token first (or clear it).`;
    }
    if (password.input.value.length < status.minPasswordChars) return `The password needs at least ${status.minPasswordChars} characters.`;
    if (password.input.value !== again.input.value) return "The passwords differ.";
    return "";
  }
  function update() {
    const reason = blocker();
    why.textContent = reason || "Ready: the gateway will save this and restart.";
    finish.disabled = Boolean(reason);
    again.input.setAttribute("aria-invalid", String(Boolean(again.input.value) && password.input.value !== again.input.value));
  }

  async function apply(ev) {
    ev.preventDefault();
    if (blocker()) return update();
    finish.disabled = true;
    const channels = {};
    if (telegram.input.value.trim()) channels.telegram = { botToken: telegram.input.value.trim() };
    if (discord.input.value.trim()) channels.discord = { token: discord.input.value.trim() };
    if (slackBot.input.value.trim()) channels.slack = { botToken: slackBot.input.value.trim(), appToken: slackApp.input.value.trim() };
    const secret = password.input.value;
    try {
      await gw.request("pincer.setup.apply", { provider: choice(), channels, password: secret });
    } catch (err) {
      why.className = "error";
      why.textContent = errorText(err);
      finish.disabled = false;
      return;
    }
    gw.stop();
    const waiting = h("p", { role: "status" }, "Saved. The gateway is restarting…");
    clear(el, heading("Set up pincer"), waiting);
    el.querySelector("h1").focus();
    for (let i = 0; i < 60; i++) {
      await new Promise((r) => setTimeout(r, 500));
      try {
        const boot = await (await fetch("__pincer/bootstrap.json", { cache: "no-store" })).json();
        if (!boot.setup?.needed) return done(secret);
      } catch (_) { /* still restarting */ }
    }
    waiting.textContent = "The gateway did not come back within 30 s: reload this page.";
  }

  pick(kinds[0].kind);
  return el;
}
