// Logs: the gateway's recent log lines (`logs.tail`, a bounded ring in the
// gateway), followed by polling with the cursor, filtered by level.

import { h, clear, field, heading, errorText, checkbox } from "./dom.js";

const LEVELS = ["ERROR", "WARN", "INFO", "DEBUG", "TRACE"];
const FOLLOW_MS = 1500;
const KEEP_LINES = 2000;

export default async function logs({ gw }) {
  const level = field("Level", {}, "select", [["TRACE", "Everything"], ["DEBUG", "Debug and above"], ["INFO", "Info and above"], ["WARN", "Warnings and errors"], ["ERROR", "Errors only"]]);
  level.input.value = "INFO";
  const followBox = checkbox("Follow", { id: "logs-follow", checked: true });
  const follow = followBox.input;
  const out = h("pre", { class: "logs", tabindex: "0", "aria-label": "Log lines" });
  const note = h("p", { class: "muted", role: "status" });
  const el = h("section", {}, heading("Logs"),
    h("div", { class: "toolbar" }, level.wrap, followBox.wrap), note, out);
  let cursor;
  let lines = [];
  let timer = null;

  function levelOf(line) {
    return line.split(" ", 3)[1] || "INFO";
  }

  function render() {
    const max = LEVELS.indexOf(level.input.value);
    const shown = lines.filter((l) => LEVELS.indexOf(levelOf(l)) <= max);
    clear(out, shown.map((l) => {
      const [ms, lvl, ...rest] = l.split(" ");
      const stamp = Number(ms) ? new Date(Number(ms)).toLocaleTimeString() : ms;
      return h("span", { class: `log-${lvl}` }, `${stamp} ${lvl} ${rest.join(" ")}\n`);
    }));
    note.textContent = `${shown.length} of ${lines.length} lines shown`;
    if (follow.checked) out.scrollTop = out.scrollHeight;
  }

  async function poll() {
    try {
      const r = await gw.request("logs.tail", cursor === undefined ? { limit: 500 } : { cursor, limit: 500 });
      if (r.reset) lines = [];
      lines = lines.concat(r.lines || []).slice(-KEEP_LINES);
      cursor = r.cursor;
      render();
    } catch (err) {
      note.textContent = errorText(err);
    }
  }

  function schedule() {
    clearInterval(timer);
    timer = follow.checked ? setInterval(poll, FOLLOW_MS) : null;
  }
  level.input.addEventListener("change", render);
  follow.addEventListener("change", () => { schedule(); if (follow.checked) poll(); });
  await poll();
  schedule();
  return { el, dispose: () => clearInterval(timer) };
}
