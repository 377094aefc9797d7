// Chat: the sessions, one conversation with its history, answers streamed
// from `chat` events, the run's tool calls from `agent` events (this client
// asks for `tool-events`), abort, and new sessions.

import { h, clear, button, heading, errorText, ago, field } from "./dom.js";

function textOf(message) {
  const content = message?.content;
  if (typeof content === "string") return content;
  return (content || []).filter((c) => c.type === "text").map((c) => c.text).join("");
}

// A reply's images and audio: `input_image` blocks with `data:image/…` URLs and
// `attachment` blocks of kind audio with `data:audio/…` URLs (the gateway
// embeds the files a reply's MEDIA: lines name).
function imagesOf(message) {
  const content = Array.isArray(message?.content) ? message.content : [];
  const images = content
    .filter((c) => c.type === "input_image" && typeof c.image_url === "string" && c.image_url.startsWith("data:image/"))
    .map((c) => h("img", { src: c.image_url, alt: "Image from the assistant", class: "reply-image" }));
  const audio = content
    .filter((c) => c.type === "attachment" && c.attachment?.kind === "audio"
      && typeof c.attachment.url === "string" && c.attachment.url.startsWith("data:audio/"))
    .map((c) => h("audio", { src: c.attachment.url, controls: "", "aria-label": c.attachment.label || "Audio from the assistant" }));
  return images.concat(audio);
}

export default async function chat({ gw, hello }) {
  const defaults = hello.snapshot?.sessionDefaults || {};
  let key = sessionStorage.getItem("pincer.chat.session") || defaults.mainSessionKey || "agent:main:main";
  let running = null; // runId of the answer being streamed
  let bubble = null;
  const tools = new Map();

  const list = h("ul", { "aria-label": "Sessions" });
  const messages = h("div", { class: "messages", role: "log", "aria-live": "polite", "aria-label": "Conversation" });
  const input = field("Message", { rows: 2, placeholder: "Write a message… (Enter sends, Shift+Enter: new line)" }, "textarea");
  input.wrap.querySelector("label").className = "visually-hidden";
  const send = h("button", { type: "submit", class: "primary" }, "Send");
  const abort = button("Abort", stop, { hidden: true, class: "danger" });
  const title = h("h2", { class: "visually-hidden" });
  const el = h("section", {}, heading("Chat"),
    h("div", { class: "chat" },
      h("aside", { class: "sessions", "aria-label": "Sessions" },
        button("New session", newSession, { class: "primary" }), list),
      h("div", { class: "conversation" }, title, messages,
        h("form", { class: "composer", onsubmit: submit }, input.wrap, send, abort))));

  input.input.addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) { ev.preventDefault(); submit(ev); }
  });

  function add(role, text) {
    const item = h("div", { class: `msg ${role}` }, text);
    messages.append(item);
    messages.scrollTop = messages.scrollHeight;
    return item;
  }

  async function loadSessions() {
    const res = await gw.request("sessions.list", { limit: 50 });
    const rows = res.sessions || [];
    if (!rows.some((r) => r.key === key)) rows.unshift({ key, updatedAt: null });
    clear(list, rows.map((row) => h("li", {},
      sessionButton(row))));
  }

  function sessionButton(row) {
    const name = row.displayName || row.label || row.key.replace(/^agent:[^:]+:/, "");
    const label = `${name}, ${row.updatedAt ? `updated ${ago(row.updatedAt)}` : "new"}`;
    return h("button", { type: "button", "aria-current": String(row.key === key), "aria-label": label, title: row.key, onclick: () => open(row.key) }, name);
  }

  async function open(next) {
    key = next;
    sessionStorage.setItem("pincer.chat.session", key);
    running = null; bubble = null; tools.clear();
    abort.hidden = true;
    title.textContent = `Session ${key}`;
    clear(messages, h("p", { class: "muted" }, "Loading…"));
    try {
      const res = await gw.request("chat.history", { sessionKey: key, limit: 100 });
      key = res.sessionKey || key;
      clear(messages);
      for (const m of res.messages || []) {
        const text = textOf(m);
        if (m.role === "user" || (m.role === "assistant" && text)) add(m.role, text);
        else if (m.role !== "assistant") messages.append(h("details", { class: "msg tool" }, h("summary", {}, `Tool result (${text.length} characters)`), h("pre", {}, text)));
      }
      if (!res.messages?.length) messages.append(h("p", { class: "muted" }, "No messages yet."));
    } catch (err) {
      clear(messages, h("p", { class: "error" }, errorText(err)));
    }
    await loadSessions().catch(() => {});
  }

  function newSession() {
    const id = `ui-${new Date().toISOString().slice(0, 19).replace(/[-:T]/g, "")}`;
    open(`agent:${defaults.defaultAgentId || "main"}:${id}`);
    input.input.focus();
  }

  async function submit(ev) {
    ev?.preventDefault();
    const text = input.input.value.trim();
    if (!text || running) return;
    input.input.value = "";
    messages.querySelector("p.muted")?.remove();
    add("user", text);
    const runId = crypto.randomUUID ? crypto.randomUUID() : `run-${Date.now()}-${Math.random().toString(36).slice(2)}`;
    running = runId;
    bubble = add("assistant", "…");
    bubble.setAttribute("aria-busy", "true");
    abort.hidden = false;
    send.disabled = true;
    try {
      const ack = await gw.request("chat.send", { sessionKey: key, message: text, idempotencyKey: runId });
      // /stop, /new and /reset are answered at once, with no run to stream.
      if (ack?.status !== "started" && ack?.status !== "in_flight") {
        finish();
        if (ack?.entry || ack?.key) await open(key);
      }
    } catch (err) {
      finish();
      add("error", errorText(err));
    }
  }

  async function stop() {
    try { await gw.request("chat.abort", { sessionKey: key, runId: running || undefined }); } catch (err) { add("error", errorText(err)); }
  }

  function finish() {
    running = null;
    bubble?.removeAttribute("aria-busy");
    bubble = null;
    abort.hidden = true;
    send.disabled = false;
  }

  const offChat = gw.on("chat", (p) => {
    if (p.sessionKey !== key) return;
    if (running && p.runId !== running) return;
    if (!bubble) bubble = add("assistant", "");
    const text = textOf(p.message);
    if (p.state === "delta") { bubble.textContent = text; messages.scrollTop = messages.scrollHeight; return; }
    if (p.state === "final") {
      bubble.textContent = text || "(no answer)";
      for (const img of imagesOf(p.message)) bubble.append(h("br"), img);
    }
    if (p.state === "aborted") bubble.textContent = `${text}\n(aborted)`;
    if (p.state === "error") { bubble.className = "msg error"; bubble.textContent = p.errorMessage || "the run failed"; }
    finish();
    loadSessions().catch(() => {});
  });
  const offAgent = gw.on("agent", (p) => {
    if (p.sessionKey !== key || p.stream !== "tool") return;
    const d = p.data || {};
    let item = tools.get(d.toolCallId);
    if (!item) {
      item = h("div", { class: "msg tool" });
      tools.set(d.toolCallId, item);
      messages.insertBefore(item, bubble && bubble.parentNode === messages ? bubble : null);
    }
    if (d.phase === "start") item.dataset.args = d.args ? JSON.stringify(d.args).slice(0, 200) : "";
    const outcome = d.phase === "result" ? `${d.isError ? "failed" : "done"}${d.meta?.chars != null ? ` (${d.meta.chars} characters)` : ""}` : "running…";
    clear(item, "Tool ", h("strong", {}, d.name), item.dataset.args ? h("code", {}, ` ${item.dataset.args}`) : "", ` — ${outcome}`);
  });

  await open(key);
  return { el, dispose: () => { offChat(); offAgent(); } };
}
