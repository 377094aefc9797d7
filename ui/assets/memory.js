// Memory: the index's state (`memory.status`), a search with each hit's
// place and score (`memory.search`), and a re-index whose progress bar
// follows `pincer.memory.index.progress` events.

import { h, clear, field, button, heading, errorText, when, bytes, plural } from "./dom.js";

export default async function memory({ gw, notify }) {
  const status = h("div", { class: "card" });
  const query = field("Search memory", { type: "search", required: true, placeholder: "What do you want to recall?" });
  const results = h("div", { "aria-live": "polite" });
  const bar = h("progress", { id: "reindex-progress", max: 1, value: 0, hidden: true });
  const barText = h("span", { role: "status" });
  const reindex = button("Re-index now", start);
  const el = h("section", {}, heading("Memory"), status,
    h("div", { class: "card" }, h("div", { class: "row" }, reindex, barText), h("label", { for: "reindex-progress", class: "visually-hidden" }, "Re-index progress"), bar),
    h("form", { class: "row search", onsubmit: search, role: "search" }, query.wrap, h("button", { type: "submit", class: "primary" }, "Search")), results);

  async function load() {
    const s = await gw.request("memory.status");
    clear(status, h("dl", { class: "facts" },
      h("dt", {}, "Files"), h("dd", {}, s.files), h("dt", {}, "Chunks"), h("dd", {}, s.chunks),
      h("dt", {}, "Vectors"), h("dd", {}, s.vectors),
      h("dt", {}, "Search mode"), h("dd", {}, s.mode === "hybrid" ? "hybrid (keywords and embeddings)" : s.mode, s.keywordOnlyReason ? ` — ${s.keywordOnlyReason}` : ""),
      h("dt", {}, "Model"), h("dd", { class: "mono" }, s.model || "none (keywords only)"),
      h("dt", {}, "Workspace"), h("dd", { class: "mono" }, s.workspace),
      h("dt", {}, "Last sync"), h("dd", {}, when(s.lastSyncMs)),
      h("dt", {}, "Store file"), h("dd", {}, bytes(s.storeFileBytes))));
  }

  async function search(ev) {
    ev.preventDefault();
    const q = query.input.value.trim();
    if (!q) return;
    clear(results, h("p", { class: "muted" }, "Searching…"));
    try {
      const r = await gw.request("memory.search", { query: q });
      const hits = r.results || [];
      clear(results, h("h2", {}, plural(hits.length, "hit"), r.mode ? ` (${r.mode})` : ""),
        hits.length ? h("ol", { class: "hits" }, hits.map((hit) => h("li", {},
          h("div", { class: "row" }, h("strong", { class: "mono" }, `${hit.path}:${hit.startLine}–${hit.endLine}`),
            h("span", { class: "muted" }, `score ${Number(hit.score).toFixed(3)}`)),
          h("pre", {}, hit.snippet || hit.text || "")))) : h("p", { class: "muted" }, "Nothing matched."));
    } catch (err) {
      clear(results, h("p", { class: "error", role: "alert" }, errorText(err)));
    }
  }

  async function start() {
    reindex.disabled = true;
    bar.hidden = false;
    bar.removeAttribute("value");
    barText.textContent = "Starting…";
    try {
      await gw.request("pincer.memory.index", { force: true });
    } catch (err) {
      notify(errorText(err), "error");
      reindex.disabled = false;
      bar.hidden = true;
      barText.textContent = "";
    }
  }

  const off = gw.on("pincer.memory.index.progress", (p) => {
    bar.hidden = false;
    if (p.filesTotal) { bar.max = p.filesTotal; bar.value = p.filesDone; }
    barText.textContent = p.done
      ? (p.error ? `Failed: ${p.error}` : `Indexed ${plural(p.filesTotal, "file")}, ${plural(p.chunksWritten, "chunk")} written`)
      : `${p.filesDone} of ${p.filesTotal} files`;
    if (p.done) {
      reindex.disabled = false;
      load().catch(() => {});
    }
  });
  await load();
  return { el, dispose: off };
}
