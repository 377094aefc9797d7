// One published openclaw-node 0.14.0 client held connected, for scripts/bench (examples/rss_bench.rs,
// examples/scale_bench.rs): connects, prints {"connected":true}, then answers each stdin line, a JSON
// {"method":M,"params":P}, with one stdout line {"ok":true,"payload":…} or {"ok":false,"error":…}. Exits
// when stdin ends. It judges nothing.
//
//   node hold_client.mjs --url ws://127.0.0.1:P --token T --identity FILE
import { createInterface } from "node:readline";
import { parseArgs } from "node:util";

const { values: args } = parseArgs({
  options: { url: { type: "string" }, token: { type: "string" }, identity: { type: "string" } },
});
for (const key of ["url", "token", "identity"]) {
  if (!args[key]) fail(`missing --${key}`);
}
if (typeof globalThis.WebSocket === "undefined") {
  globalThis.WebSocket = (await import("ws")).WebSocket;
}
const { OpenClawClient } = await import("openclaw-node-v4");

function fail(message) {
  process.stderr.write(`hold_client.mjs: ${message}\n`);
  process.exit(1);
}

const client = new OpenClawClient({
  url: args.url,
  token: args.token,
  autoReconnect: false,
  deviceIdentityPath: args.identity,
});
client.on("error", () => {});
try {
  await client.connect();
} catch (error) {
  fail(`connect: ${error?.message ?? error}`);
}
process.stdout.write(`${JSON.stringify({ connected: true })}\n`);
for await (const line of createInterface({ input: process.stdin })) {
  if (!line.trim()) continue;
  try {
    const { method, params } = JSON.parse(line);
    // request() resolves with the whole `res` frame.
    const frame = await client.request(method, params ?? {});
    if (frame?.ok === false) throw new Error(JSON.stringify(frame.error ?? frame));
    const payload = frame?.type === "res" ? frame.payload : frame;
    process.stdout.write(`${JSON.stringify({ ok: true, payload })}\n`);
  } catch (error) {
    process.stdout.write(`${JSON.stringify({ ok: false, error: String(error?.message ?? error) })}\n`);
  }
}
await client.disconnect();
process.exit(0);
