// System: the board and host, uptime, memory (the gateway's RSS), disk, the
// store's size, the sandbox layers this host provides, the version and the
// update status — read live from `system.info`, `status` and `update.status`.

import { h, clear, heading, bytes, duration, errorText, chip } from "./dom.js";

export default async function system({ gw }) {
  const facts = h("div");
  const el = h("section", {}, heading("System"), facts);
  const [info, status, update] = await Promise.all([
    gw.request("system.info"), gw.request("status"), gw.request("update.status").catch((err) => ({ error: errorText(err) })),
  ]);
  const board = status.board || {};
  const disk = info.diskTotalBytes ? `${bytes(info.diskAvailableBytes)} free of ${bytes(info.diskTotalBytes)} (${info.diskPath})` : "—";
  const sandbox = status.sandbox || {};
  const names = { namespaces: "Namespaces", proc: "/proc inside the sandbox", landlock: "Landlock", seccomp: "seccomp", cgroup: "cgroup limits" };
  const layers = Object.entries(names).filter(([key]) => typeof sandbox[key] === "string").map(([key, name]) => [name, sandbox[key]]);
  const available = update.updateAvailable;
  const row = (term, ...value) => [h("dt", {}, term), h("dd", {}, ...value)];
  clear(facts,
    h("div", { class: "card" }, h("h2", {}, "Box"), h("dl", { class: "facts" },
      row("Board", board.name || "—", board.model ? ` (${board.model})` : ""),
      row("Host", info.hostname),
      row("System", `${info.osLabel} · ${info.arch} · ${info.cpuCount} CPU${info.cpuCount === 1 ? "" : "s"}`, info.cpuModel ? ` · ${info.cpuModel}` : ""),
      row("Load", info.loadAverage ? info.loadAverage.map((n) => n.toFixed(2)).join(" / ") : "—"),
      row("Memory", `${bytes(info.memoryFreeBytes)} available of ${bytes(info.memoryTotalBytes)}`),
      row("Disk", disk))),
    h("div", { class: "card" }, h("h2", {}, "Gateway"), h("dl", { class: "facts" },
      row("Version", `pincer ${status.version}`),
      row("Uptime", duration(status.uptimeMs)),
      row("Memory (RSS)", bytes(info.processMemory?.rssBytes)),
      row("Store", status.store ? `${bytes(status.store.usedBytes)} used, file ${bytes(status.store.fileBytes)} (${status.store.path})` : "—"),
      row("Clients", String(status.clients)),
      row("Update", updateText(update, available)))),
    h("div", { class: "card" }, h("h2", {}, "Sandbox"), layers.length
      ? h("dl", { class: "facts" }, layers.map(([name, value]) => row(name, value === "available"
        ? chip("available", "ok") : [chip("missing", "bad"), ` ${value.replace(/^unavailable: /, "")}`])))
      : h("p", { class: "muted" }, "Not probed yet.")));
  return { el };
}

// What `update.status` says: RAUC's booted slot and the last installation's outcome, or why
// this host has no updater (not an appliance).
function updateText(update, available) {
  if (update.error) return h("span", { class: "error" }, update.error);
  const rauc = update.rauc || {};
  if (!rauc.available) return `No A/B updates here: ${rauc.reason || "RAUC is not running"}`;
  const parts = [`slot ${rauc.booted || "?"} booted`];
  if (rauc.operation && rauc.operation !== "idle") parts.push(`RAUC ${rauc.operation} ${rauc.progress?.percent ?? 0}%`);
  const last = rauc.lastUpdate;
  if (last) parts.push(`last update ${last.version || "?"} to ${last.slot}: ${last.outcome}`);
  const text = parts.join(" · ");
  if (available) return [chip(`${available.latestVersion} available`, "warn"), ` ${text}`];
  if (last?.outcome === "rolled-back") return [chip("rolled back", "bad"), ` ${text}`];
  return text;
}
