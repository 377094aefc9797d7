// Agents and models: the agents and the providers they use, each provider's
// key shown only as set or missing (never its value), an editor that writes
// a provider through `config.patch` (a blank key keeps the stored one), and
// a test that makes one real call (`models.probe`).

import { h, clear, field, button, heading, errorText, chip, checkbox } from "./dom.js";

const APIS = [["openai-completions", "OpenAI-compatible"], ["anthropic-messages", "Anthropic Messages"], ["ollama", "Ollama"]];
const REDACTED = "__OPENCLAW_REDACTED__";

export default async function agents({ gw, notify }) {
  const agentList = h("div", { class: "scroll" });
  const providers = h("div");
  const form = h("form", { class: "card narrow", "aria-labelledby": "provider-form-title" });
  const el = h("section", {}, heading("Agents & models"), h("h2", {}, "Agents"), agentList,
    h("h2", {}, "Providers"), providers, form);
  let snapshot = null;

  async function load() {
    const [agentsRes, config] = await Promise.all([gw.request("agents.list"), gw.request("config.get")]);
    snapshot = config;
    clear(agentList, h("table", {}, h("thead", {}, h("tr", {}, ["Agent", "Model", ""].map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", {}, (agentsRes.agents || []).map((a) => h("tr", {}, h("td", {}, a.name || a.id), h("td", { class: "mono" }, a.model?.primary || a.model || "—"),
        h("td", {}, a.default ? chip("default", "ok") : ""))))));
    const file = config.parsed || {};
    const configured = file.models?.providers || {};
    const primary = config.config?.agents?.defaults?.model;
    const primaryRef = typeof primary === "string" ? primary : primary?.primary;
    clear(providers, Object.keys(configured).length ? Object.entries(configured).map(([id, p]) => providerCard(id, p, primaryRef))
      : h("p", { class: "muted" }, "No provider is configured."));
    editor();
  }

  function providerCard(id, p, primaryRef) {
    const result = h("p", { role: "status" });
    const keySet = p.apiKey === REDACTED || (typeof p.apiKey === "string" && p.apiKey.startsWith("${"));
    return h("div", { class: "card" },
      h("div", { class: "row" }, h("strong", {}, id), chip(keySet ? "key set" : "no key", keySet ? "ok" : "off"),
        primaryRef?.startsWith(`${id}/`) ? chip(`default model: ${primaryRef.slice(id.length + 1)}`, "ok") : null),
      h("dl", { class: "facts" }, h("dt", {}, "API"), h("dd", {}, p.api || "openai-completions"), h("dt", {}, "Base URL"), h("dd", { class: "mono" }, p.baseUrl),
        h("dt", {}, "Models"), h("dd", {}, (p.models || []).map((m) => m.id).join(", ") || "—")),
      h("div", { class: "row" }, button(`Test ${id}`, async () => {
        result.className = "muted";
        result.textContent = "Asking the model…";
        try {
          const r = await gw.request("models.probe", { provider: id }, 70000);
          const first = r.results?.[0] || {};
          result.className = r.status === "ok" ? "ok" : "error";
          result.textContent = r.status === "ok"
            ? `OK in ${r.latencyMs} ms (${first.label}): “${first.reply ?? ""}”`
            : `${r.error || r.status}${first.detail ? ` — ${first.detail}` : ""}`;
        } catch (err) {
          result.className = "error";
          result.textContent = errorText(err);
        }
      }), button(`Edit ${id}`, () => editor(id, p, primaryRef))), result);
  }

  function editor(id = "", p = {}, primaryRef = "") {
    const editing = Boolean(id);
    const idField = field("Provider id", { value: id, required: true, readonly: editing, pattern: "[A-Za-z0-9_-]+", "data-hint": "Models are named <provider id>/<model>." });
    const api = field("API", {}, "select", APIS);
    api.input.value = p.api || "openai-completions";
    const baseUrl = field("Base URL", { type: "url", value: p.baseUrl || "", required: true });
    const key = field("API key", { type: "password", autocomplete: "off", placeholder: editing && p.apiKey ? "unchanged" : "", "data-hint": "Write-only: the stored key is never shown; leave blank to keep it." });
    const model = field("Model", { value: (p.models || [])[0]?.id || "", required: true });
    const makeDefault = checkbox("Make this the default model", { id: "make-default", checked: !editing || primaryRef?.startsWith(`${id}/`) });
    const error = h("p", { class: "error", role: "alert" });
    clear(form, h("h2", { id: "provider-form-title" }, editing ? `Edit ${id}` : "Add a provider"),
      idField.wrap, api.wrap, baseUrl.wrap, key.wrap, model.wrap,
      makeDefault.wrap, error,
      h("div", { class: "row" }, h("button", { type: "submit", class: "primary" }, "Save provider"),
        editing ? button("Cancel", () => editor()) : null));
    form.onsubmit = async (ev) => {
      ev.preventDefault();
      error.textContent = "";
      const pid = idField.input.value.trim();
      const modelId = model.input.value.trim();
      const models = (p.models || []).filter((m) => m.id !== modelId);
      const provider = { baseUrl: baseUrl.input.value.trim(), api: api.input.value, models: [{ id: modelId }, ...models] };
      if (key.input.value.trim()) provider.apiKey = key.input.value.trim();
      const patch = { models: { providers: { [pid]: provider } } };
      if (makeDefault.input.checked) patch.agents = { defaults: { model: { primary: `${pid}/${modelId}` } } };
      try {
        await gw.request("config.patch", { raw: JSON.stringify(patch), baseHash: snapshot.hash });
        notify(`Saved provider ${pid}`);
        await load();
      } catch (err) {
        const issue = err.details?.issues?.[0];
        error.textContent = issue?.path ? `${issue.path}: ${issue.message}` : errorText(err);
      }
    };
  }

  await load();
  return { el };
}
