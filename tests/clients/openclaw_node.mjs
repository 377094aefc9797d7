// Drives a published openclaw-node release (the real client library, pinned in
// package.json as openclaw-node-v3 = 0.1.0 and openclaw-node-v4 = 0.14.0)
// against a running gateway, and prints what the library returned as one JSON
// line on stdout. It asserts nothing about the gateway's answers itself:
// tests/openclaw_clients.rs does. It exits non-zero when a step throws or
// does not finish within its deadline.
//
//   node openclaw_node.mjs --lib v3|v4 --phase chat|abort --url ws://127.0.0.1:P
//        --token T --session KEY --message TEXT --identity FILE
//
// phase "chat":  connect, health(), chat() streamed to the end, sessions.list(),
//                sessions.history(KEY)
// phase "abort": connect, chat() until the first text chunk, chatAbort(KEY),
//                then read the stream to its end
import { parseArgs } from "node:util";

const STEP_TIMEOUT_MS = 20_000;

const { values: args } = parseArgs({
  options: {
    lib: { type: "string" },
    phase: { type: "string" },
    url: { type: "string" },
    token: { type: "string" },
    session: { type: "string" },
    message: { type: "string" },
    identity: { type: "string" },
  },
});
for (const key of ["lib", "phase", "url", "token", "session", "message", "identity"]) {
  if (!args[key]) fail(`missing --${key}`);
}

// openclaw-node reads the global WebSocket (send() checks WebSocket.OPEN even
// when it found an implementation), which Node 20 lacks: use the ws package.
if (typeof globalThis.WebSocket === "undefined") {
  globalThis.WebSocket = (await import("ws")).WebSocket;
}

const packages = { v3: "openclaw-node-v3", v4: "openclaw-node-v4" };
if (!packages[args.lib]) fail(`--lib must be v3 or v4, got ${args.lib}`);
const { OpenClawClient } = await import(packages[args.lib]);

function fail(message) {
  process.stderr.write(`openclaw_node.mjs: ${message}\n`);
  process.exit(1);
}

function within(promise, what) {
  let timer;
  const deadline = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no answer within ${STEP_TIMEOUT_MS} ms`)), STEP_TIMEOUT_MS);
  });
  return Promise.race([promise, deadline]).finally(() => clearTimeout(timer));
}

function chunkView(chunk) {
  return { type: chunk.type, text: chunk.text };
}

async function connect() {
  const client = new OpenClawClient({
    url: args.url,
    token: args.token,
    autoReconnect: false,
    deviceIdentityPath: args.identity,
  });
  const clientErrors = [];
  // Without a listener an "error" event would throw out of the library.
  client.on("error", (error) => clientErrors.push(String(error?.message ?? error)));
  const hello = await within(client.connect(), "connect");
  return { client, hello, clientErrors };
}

async function chatPhase() {
  const { client, hello, clientErrors } = await connect();
  const health = await within(client.health(), "health()");
  const chunks = [];
  await within(
    (async () => {
      for await (const chunk of client.chat(args.message, { sessionKey: args.session })) {
        chunks.push(chunkView(chunk));
      }
    })(),
    "chat() stream",
  );
  const sessions = await within(client.sessions.list(), "sessions.list()");
  const history = await within(client.sessions.history(args.session), "sessions.history()");
  await client.disconnect();
  return {
    hello: { type: hello.type, protocol: hello.protocol },
    health,
    chunks,
    text: chunks.filter((c) => c.type === "text").map((c) => c.text).join(""),
    sessions,
    history,
    clientErrors,
  };
}

async function abortPhase() {
  const { client, hello, clientErrors } = await connect();
  const stream = client.chat(args.message, { sessionKey: args.session })[Symbol.asyncIterator]();
  const before = [];
  for (;;) {
    const next = await within(stream.next(), "first text chunk of the run to abort");
    if (next.done) fail(`stream ended before any text: ${JSON.stringify(before)}`);
    before.push(chunkView(next.value));
    if (next.value.type === "text") break;
  }
  const abort = await within(client.chatAbort(args.session), "chatAbort()");
  const after = [];
  let ended = false;
  for (;;) {
    const next = await within(stream.next(), "end of the aborted stream");
    if (next.done) {
      ended = true;
      break;
    }
    after.push(chunkView(next.value));
  }
  await client.disconnect();
  return { hello: { type: hello.type, protocol: hello.protocol }, before, abort, after, ended, clientErrors };
}

try {
  const report = args.phase === "chat" ? await chatPhase() : args.phase === "abort" ? await abortPhase() : null;
  if (!report) fail(`--phase must be chat or abort, got ${args.phase}`);
  process.stdout.write(`${JSON.stringify(report)}\n`);
  process.exit(0);
} catch (error) {
  fail(error?.stack ?? String(error));
}
