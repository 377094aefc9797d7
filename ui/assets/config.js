// Config: the config file's own keys (secrets shown as the redaction
// placeholder, which keeps the stored value when saved back), edited as
// JSON5 and saved with `config.set`. The gateway checks the whole file
// before it writes anything; a refused value is shown at its key path, and
// the editor jumps to that key.

import { h, field, button, heading, errorText } from "./dom.js";

// The line of `text` where the key path `path` (a.b[0].c) is written, if found.
export function lineOf(text, path) {
  const keys = path.split(/\.|\[\d+\]/).filter(Boolean);
  const lines = text.split("\n");
  let from = 0;
  let found = -1;
  for (const key of keys) {
    const pattern = new RegExp(`(^|[\\s{,])["']?${key.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}["']?\\s*:`);
    const at = lines.findIndex((line, i) => i >= from && pattern.test(line));
    if (at < 0) break;
    found = at;
    from = at + 1;
  }
  return found;
}

export default async function config({ gw, notify }) {
  const editor = field("Config file (JSON5)", { rows: 24, spellcheck: false, class: "editor", "aria-describedby": "config-issues" }, "textarea");
  const issues = h("div", { id: "config-issues", role: "alert" });
  const where = h("p", { class: "muted" });
  const save = h("button", { type: "submit", class: "primary" }, "Check and save");
  const el = h("section", {}, heading("Config"), where,
    h("form", { onsubmit: submit }, editor.wrap, issues, h("div", { class: "row" }, save, button("Reload", load))));
  let hash = null;

  async function load() {
    const r = await gw.request("config.get");
    hash = r.hash;
    where.textContent = r.path ? `File: ${r.path}` : "No config file yet: saving creates one.";
    editor.input.value = JSON.stringify(r.parsed || {}, null, 2);
    editor.input.removeAttribute("aria-invalid");
    issues.replaceChildren();
  }

  function showIssues(err) {
    const list = err.details?.issues || [];
    editor.input.setAttribute("aria-invalid", "true");
    issues.replaceChildren(h("p", { class: "error" }, "Not saved: the gateway refused this config."),
      h("ul", { class: "issues" }, (list.length ? list : [{ path: "", message: errorText(err) }]).map((issue) => {
        const line = issue.path ? lineOf(editor.input.value, issue.path) : -1;
        return h("li", { class: "error" }, issue.path ? h("code", { class: "issue-path" }, issue.path) : null,
          issue.path ? ": " : "", issue.message, line >= 0 ? ` (line ${line + 1})` : "");
      })));
    const first = list.find((i) => i.path);
    const line = first ? lineOf(editor.input.value, first.path) : -1;
    if (line >= 0) {
      const lines = editor.input.value.split("\n");
      const start = lines.slice(0, line).reduce((n, l) => n + l.length + 1, 0);
      editor.input.focus();
      editor.input.setSelectionRange(start, start + lines[line].length);
    }
  }

  async function submit(ev) {
    ev.preventDefault();
    save.disabled = true;
    issues.replaceChildren();
    try {
      const r = await gw.request("config.set", { raw: editor.input.value, baseHash: hash });
      hash = r.hash;
      editor.input.removeAttribute("aria-invalid");
      notify(r.restart?.required ? `Saved; the gateway restarts for: ${r.restart.paths.join(", ")}` : "Saved and applied");
      await load();
    } catch (err) {
      showIssues(err);
    }
    save.disabled = false;
  }

  await load();
  return { el };
}
