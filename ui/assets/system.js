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
      row("Update", update.error ? h("span", { class: "error" }, update.error)
        : available ? chip(`${available.latestVersion} available`, "warn") : "No update known (pincer has no updater yet)"))),
    h("div", { class: "card" }, h("h2", {}, "Sandbox"), layers.length
      ? h("dl", { class: "facts" }, layers.map(([name, value]) => row(name, value === "available"
        ? chip("available", "ok") : [chip("missing", "bad"), ` ${value.replace(/^unavailable: /, "")}`])))
      : h("p", { class: "muted" }, "Not probed yet.")));
  return { el };
}
