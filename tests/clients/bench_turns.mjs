// Load driver for scripts/bench (examples/vs_openclaw.rs): the published
// openclaw-node 0.14.0 client runs SESSIONS sessions at once, each on its own
// connection, each taking TURNS chat turns one after another (chat() read to
// the end of its stream). Works against any gateway that speaks OpenClaw's
// protocol: pincer and OpenClaw's own. Prints one JSON line: every turn's
// latency in ms (send to the end of the stream), the wall time of the whole
// load, and the first error text if a turn failed. It judges nothing.
//
//   node bench_turns.mjs --url ws://127.0.0.1:P --token T --sessions 4
//        --turns 10 --identity-dir DIR [--prefix bench]
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";

const STEP_TIMEOUT_MS = 120_000;
// OpenClaw answers connect.challenge before it is ready and closes sockets until then: connect retries.
const CONNECT_RETRY_FOR_MS = 120_000;
const CONNECT_RETRY_PAUSE_MS = 500;

const { values: args } = parseArgs({
  options: {
    url: { type: "string" },
    token: { type: "string" },
    sessions: { type: "string" },
    turns: { type: "string" },
    "identity-dir": { type: "string" },
    prefix: { type: "string", default: "bench" },
  },
});
for (const key of ["url", "token", "sessions", "turns", "identity-dir"]) {
  if (!args[key]) fail(`missing --${key}`);
}
const sessions = Number(args.sessions);
const turns = Number(args.turns);
if (!(sessions >= 1 && turns >= 1)) fail("--sessions and --turns must be positive numbers");

if (typeof globalThis.WebSocket === "undefined") {
  globalThis.WebSocket = (await import("ws")).WebSocket;
}
const { OpenClawClient } = await import("openclaw-node-v4");

function fail(message) {
  process.stderr.write(`bench_turns.mjs: ${message}\n`);
  process.exit(1);
}

function within(promise, what) {
  let timer;
  const deadline = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no answer within ${STEP_TIMEOUT_MS} ms`)), STEP_TIMEOUT_MS);
  });
  return Promise.race([promise, deadline]).finally(() => clearTimeout(timer));
}

mkdirSync(args["identity-dir"], { recursive: true });

async function connect(n) {
  const started = performance.now();
  for (;;) {
    try {
      return await connectOnce(n);
    } catch (error) {
      if (performance.now() - started > CONNECT_RETRY_FOR_MS) throw error;
      await new Promise((resolve) => setTimeout(resolve, CONNECT_RETRY_PAUSE_MS));
    }
  }
}

async function connectOnce(n) {
  const client = new OpenClawClient({
    url: args.url,
    token: args.token,
    autoReconnect: false,
    deviceIdentityPath: join(args["identity-dir"], `device-${n}.json`),
  });
  client.on("error", () => {});
  await within(client.connect(), "connect");
  return client;
}

async function session(client, n, latencies) {
  const key = `${args.prefix}-${n}`;
  for (let t = 0; t < turns; t++) {
    const sent = performance.now();
    let text = "";
    await within(
      (async () => {
        for await (const chunk of client.chat(`turn ${t} of session ${n}`, { sessionKey: key })) {
          if (chunk.type === "text") text += chunk.text;
          if (chunk.type === "error") throw new Error(`turn ${t} of ${key}: ${chunk.text ?? "error chunk"}`);
        }
      })(),
      `turn ${t} of ${key}`,
    );
    latencies.push(performance.now() - sent);
    if (!text) throw new Error(`turn ${t} of ${key}: empty reply`);
  }
}

try {
  const clients = await Promise.all(Array.from({ length: sessions }, (_, n) => connect(n)));
  const latencies = [];
  const started = performance.now();
  await Promise.all(clients.map((client, n) => session(client, n, latencies)));
  const elapsedMs = performance.now() - started;
  await Promise.all(clients.map((client) => client.disconnect()));
  process.stdout.write(`${JSON.stringify({ latenciesMs: latencies, elapsedMs })}\n`);
  process.exit(0);
} catch (error) {
  fail(error?.stack ?? String(error));
}
