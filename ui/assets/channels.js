// Channels: every chat account's live state (`channels.status`, refreshed by
// `health` events), DM pairing requests (`channels.pairing.*`) and devices
// asking to pair (`device.pair.*`), each with approve and deny.

import { h, clear, button, heading, errorText, ago, chip } from "./dom.js";

function tone(account) {
  if (!account.configured) return ["not configured", "off"];
  if (account.connected) return ["connected", "ok"];
  if (account.running) return ["connecting", "warn"];
  return ["stopped", "bad"];
}

export default async function channels({ gw, notify }) {
  const accounts = h("div", { class: "scroll" });
  const dm = h("div", { class: "scroll" });
  const devices = h("div", { class: "scroll" });
  const el = h("section", {}, heading("Channels"),
    h("h2", {}, "Accounts"), accounts,
    h("h2", {}, "DM pairing requests"), dm,
    h("h2", {}, "Devices asking to pair"), devices);

  async function act(method, params, done) {
    try {
      await gw.request(method, params);
      notify(done);
    } catch (err) {
      notify(errorText(err), "error");
    }
    await refresh();
  }

  async function loadAccounts() {
    const s = await gw.request("channels.status");
    const rows = [];
    for (const id of s.channelOrder || []) {
      for (const a of s.channelAccounts?.[id] || []) {
        const [word, t] = tone(a);
        rows.push(h("tr", {}, h("td", {}, s.channelLabels?.[id] || id), h("td", {}, a.accountId), h("td", {}, chip(word, t)),
          h("td", {}, a.lastInboundAt ? ago(a.lastInboundAt) : "—"), h("td", { class: a.lastError ? "error" : "muted" }, a.lastError || "—")));
      }
    }
    clear(accounts, rows.length
      ? h("table", {}, h("thead", {}, h("tr", {}, ["Channel", "Account", "State", "Last message in", "Last error"].map((t) => h("th", { scope: "col" }, t)))), h("tbody", {}, rows))
      : h("p", { class: "muted" }, "No chat app is configured. Add one on the Config page (channels.telegram.botToken, …)."));
  }

  async function loadDm() {
    const list = await gw.request("channels.pairing.list");
    const rows = (list.requests || []).map((r) => {
      const who = r.metadata?.name ? `${r.metadata.name} (${r.senderId})` : r.senderId;
      const target = { channel: r.channel, accountId: r.accountId, requestId: r.requestId };
      return h("tr", {}, h("td", {}, r.channelLabel), h("td", {}, who), h("td", { class: "mono" }, r.requestId), h("td", {}, ago(Date.parse(r.createdAt))),
        h("td", { class: "actions" },
          button("Approve", () => act("channels.pairing.approve", target, `Approved ${who} on ${r.channelLabel}`), { class: "primary", "aria-label": `Approve ${who} (code ${r.requestId})` }),
          button("Deny", () => act("channels.pairing.dismiss", target, `Denied code ${r.requestId}`), { class: "danger", "aria-label": `Deny ${who} (code ${r.requestId})` })));
    });
    clear(dm, rows.length
      ? h("table", {}, h("thead", {}, h("tr", {}, ["Channel", "Sender", "Code", "Asked", "Decision"].map((t) => h("th", { scope: "col" }, t)))), h("tbody", {}, rows))
      : h("p", { class: "muted" }, "No one is waiting. A stranger who writes to the bot gets a code; it shows up here."));
  }

  async function loadDevices() {
    const list = await gw.request("device.pair.list");
    const rows = (list.pending || []).map((d) => {
      const name = d.displayName || d.clientId || d.deviceId.slice(0, 12);
      return h("tr", {}, h("td", {}, name), h("td", {}, d.platform || "—"), h("td", {}, d.remoteIp || "—"), h("td", {}, (d.scopes || []).join(", ")),
        h("td", { class: "actions" },
          button("Approve", () => act("device.pair.approve", { requestId: d.requestId }, `Paired ${name}`), { class: "primary", "aria-label": `Approve device ${name}` }),
          button("Deny", () => act("device.pair.reject", { requestId: d.requestId }, `Refused ${name}`), { class: "danger", "aria-label": `Deny device ${name}` })));
    });
    const paired = (list.paired || []).length;
    clear(devices, rows.length
      ? h("table", {}, h("thead", {}, h("tr", {}, ["Device", "Platform", "Address", "Scopes", "Decision"].map((t) => h("th", { scope: "col" }, t)))), h("tbody", {}, rows))
      : h("p", { class: "muted" }, "No device is waiting."), h("p", { class: "muted" }, `${paired} paired device${paired === 1 ? "" : "s"}.`));
  }

  async function refresh() {
    const results = await Promise.allSettled([loadAccounts(), loadDm(), loadDevices()]);
    for (const r of results) if (r.status === "rejected") notify(errorText(r.reason), "error");
  }

  const offs = [gw.on("health", () => loadAccounts().catch(() => {})),
    gw.on("device.pair.requested", () => loadDevices().catch(() => {})),
    gw.on("device.pair.resolved", () => loadDevices().catch(() => {}))];
  // DM pairing codes have no event: look again every few seconds while the page is open.
  const timer = setInterval(() => loadDm().catch(() => {}), 4000);
  await refresh();
  return { el, dispose: () => { offs.forEach((off) => off()); clearInterval(timer); } };
}
