// Cron: the jobs with their schedules and last outcome; add and edit (an
// agent turn on a schedule), enable/disable, run now, delete, and each job's
// run log (`cron.*`, refreshed by `cron` events).

import { h, clear, field, button, heading, errorText, when, chip, duration, checkbox } from "./dom.js";

function describe(schedule = {}) {
  if (schedule.kind === "every") return `every ${duration(schedule.everyMs)}`;
  if (schedule.kind === "cron") return `cron ${schedule.expr}${schedule.tz ? ` (${schedule.tz})` : ""}`;
  if (schedule.kind === "at") return `once at ${schedule.at}`;
  return "—";
}

export default async function cron({ gw, notify }) {
  const table = h("div", { class: "scroll" });
  const form = h("form", { class: "card narrow", "aria-labelledby": "cron-form-title" });
  const runs = h("div");
  const el = h("section", {}, heading("Cron"), table, form, runs);

  async function act(method, params, message) {
    try {
      const r = await gw.request(method, params);
      notify(typeof message === "function" ? message(r) : message);
    } catch (err) {
      notify(errorText(err), "error");
    }
    await load();
  }

  async function load() {
    const list = await gw.request("cron.list", { includeDisabled: true });
    const jobs = list.jobs || [];
    clear(table, jobs.length ? h("table", {},
      h("thead", {}, h("tr", {}, ["Job", "Schedule", "State", "Next run", "Last run", "Actions"].map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", {}, jobs.map((job) => {
        const st = job.state || {};
        const last = st.lastStatus ? chip(st.lastStatus, st.lastStatus === "ok" ? "ok" : st.lastStatus === "error" ? "bad" : "warn") : "—";
        return h("tr", {}, h("td", {}, job.name), h("td", {}, describe(job.schedule)),
          h("td", {}, job.enabled ? chip("enabled", "ok") : chip("disabled", "off")), h("td", {}, when(st.nextRunAtMs)),
          h("td", {}, last, st.lastError ? h("div", { class: "error" }, st.lastError) : null),
          h("td", { class: "actions" },
            button("Run now", () => act("cron.run", { id: job.id, mode: "force" }, (r) => r.ran ? `Started ${job.name}` : `Not run: ${r.reason}`), { "aria-label": `Run ${job.name} now` }),
            button(job.enabled ? "Disable" : "Enable", () => act("cron.update", { id: job.id, patch: { enabled: !job.enabled } }, `${job.enabled ? "Disabled" : "Enabled"} ${job.name}`), { "aria-label": `${job.enabled ? "Disable" : "Enable"} ${job.name}` }),
            button("Edit", () => editor(job), { "aria-label": `Edit ${job.name}` }),
            button("Run log", () => showRuns(job), { "aria-label": `Run log of ${job.name}` }),
            button("Delete", () => confirm(`Delete ${job.name}?`) && act("cron.remove", { id: job.id }, `Deleted ${job.name}`), { class: "danger", "aria-label": `Delete ${job.name}` })));
      }))) : h("p", { class: "muted" }, "No jobs yet."));
  }

  function editor(job) {
    const editing = Boolean(job);
    const s = job?.schedule || { kind: "every", everyMs: 3600000 };
    const name = field("Name", { value: job?.name || "", required: true });
    const kind = field("Repeat", {}, "select", [["every", "Every N minutes"], ["cron", "Cron expression"], ["at", "Once, at a time"]]);
    kind.input.value = s.kind;
    const minutes = field("Minutes", { type: "number", min: 1, value: s.kind === "every" ? Math.round(s.everyMs / 60000) : 60 });
    const expr = field("Cron expression", { value: s.kind === "cron" ? s.expr : "0 9 * * *", "data-hint": "minute hour day month weekday, e.g. 0 9 * * 1-5" });
    const tz = field("Time zone", { value: s.kind === "cron" ? s.tz || "" : Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC" });
    const at = field("At", { type: "datetime-local" });
    const message = field("Message to the agent", { rows: 3, required: true }, "textarea");
    message.input.value = job?.payload?.message || job?.payload?.text || "";
    const enabled = checkbox("Enabled", { id: "cron-enabled", checked: job ? job.enabled : true });
    const error = h("p", { class: "error", role: "alert" });
    const sync = () => {
      minutes.wrap.hidden = kind.input.value !== "every";
      expr.wrap.hidden = tz.wrap.hidden = kind.input.value !== "cron";
      at.wrap.hidden = kind.input.value !== "at";
    };
    kind.input.addEventListener("change", sync);
    clear(form, h("h2", { id: "cron-form-title" }, editing ? `Edit ${job.name}` : "Add a job"),
      name.wrap, kind.wrap, minutes.wrap, expr.wrap, tz.wrap, at.wrap, message.wrap,
      enabled.wrap, error,
      h("div", { class: "row" }, h("button", { type: "submit", class: "primary" }, editing ? "Save job" : "Add job"), editing ? button("Cancel", () => editor()) : null));
    sync();
    form.onsubmit = async (ev) => {
      ev.preventDefault();
      error.textContent = "";
      let schedule;
      if (kind.input.value === "every") schedule = { kind: "every", everyMs: Math.max(1, Number(minutes.input.value)) * 60000 };
      else if (kind.input.value === "cron") schedule = { kind: "cron", expr: expr.input.value.trim(), ...(tz.input.value.trim() ? { tz: tz.input.value.trim() } : {}) };
      else schedule = { kind: "at", at: at.input.value ? new Date(at.input.value).toISOString() : "" };
      const fields = { name: name.input.value.trim(), enabled: enabled.input.checked, schedule, sessionTarget: "isolated",
        payload: { kind: "agentTurn", message: message.input.value.trim() } };
      try {
        if (editing) await gw.request("cron.update", { id: job.id, patch: fields });
        else await gw.request("cron.add", fields);
        notify(`${editing ? "Saved" : "Added"} ${fields.name}`);
        editor();
        await load();
      } catch (err) {
        error.textContent = errorText(err);
      }
    };
  }

  async function showRuns(job) {
    clear(runs, h("h2", { id: "runs-title", tabindex: "-1" }, `Run log: ${job.name}`), h("p", { class: "muted" }, "Loading…"));
    runs.querySelector("h2").focus();
    try {
      const r = await gw.request("cron.runs", { id: job.id, limit: 20 });
      const entries = r.entries || [];
      runs.lastChild.replaceWith(entries.length ? h("table", {},
        h("thead", {}, h("tr", {}, ["When", "Outcome", "Took", "Summary"].map((t) => h("th", { scope: "col" }, t)))),
        h("tbody", {}, entries.map((e) => h("tr", {}, h("td", {}, when(e.ts || e.runAtMs)),
          h("td", {}, chip(e.status || e.action || "—", e.status === "ok" ? "ok" : e.status === "error" ? "bad" : "off")),
          h("td", {}, e.durationMs != null ? duration(e.durationMs) : "—"),
          h("td", {}, e.error ? h("span", { class: "error" }, e.error) : e.summary || "—")))))
        : h("p", { class: "muted" }, "No runs yet."));
    } catch (err) {
      runs.lastChild.replaceWith(h("p", { class: "error" }, errorText(err)));
    }
  }

  const off = gw.on("cron", () => load().catch(() => {}));
  editor();
  await load();
  return { el, dispose: off };
}
