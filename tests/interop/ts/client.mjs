// Drives `broker acp` with the official ACP TypeScript SDK client (@agentclientprotocol/sdk).
//
// Usage: node client.mjs CASE --cwd DIR [--cwd DIR] -- AGENT_COMMAND [ARG...]
//
// Spawns the agent, runs one case over its stdio with the SDK's client app (`client()` +
// `connectWith(ndJsonStream(...))`, the 2.x API), and prints ONE JSON object to stdout: what
// the client observed. It exits non-zero only when it could not run the case at all; the
// pytest side (tests/test_acp_interop_ts.py) asserts on the report.

import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { Readable, Writable } from "node:stream";
import { format } from "node:util";

import {
  PROTOCOL_VERSION,
  RequestError,
  client,
  methods,
  ndJsonStream,
} from "@agentclientprotocol/sdk";

const CASES = [
  "allow",
  "reject",
  "cancelled",
  "unknown-option",
  "error",
  "session-cancel",
  "two-sessions",
  "never-answers",
];
const PROMPT = "write escalated.txt";
// How long a permission handler waits for the SDK to report the agent's $/cancel_request
// (the request's AbortSignal) before answering anyway.
const CANCEL_WAIT_MS = 5000;
const EXIT_WAIT_MS = 10000;

function usage(message) {
  process.stderr.write(
    `client.mjs: ${message}\nusage: node client.mjs CASE --cwd DIR [--cwd DIR] -- AGENT...\n` +
      `cases: ${CASES.join(", ")}\n`,
  );
  process.exit(2);
}

function parseArgs(argv) {
  const [name, ...rest] = argv;
  if (!CASES.includes(name)) usage(`unknown case ${JSON.stringify(name)}`);
  const cwds = [];
  let i = 0;
  for (; i < rest.length && rest[i] !== "--"; i += 1) {
    if (rest[i] !== "--cwd" || i + 1 >= rest.length) usage(`unexpected ${rest[i]}`);
    i += 1;
    cwds.push(rest[i]);
  }
  const agent = rest.slice(i + 1);
  if (agent.length === 0) usage("missing the agent command after --");
  if (cwds.length !== (name === "two-sessions" ? 2 : 1)) usage("wrong number of --cwd");
  return { name, cwds, agent };
}

function sdkVersion() {
  // The package's exports do not include package.json; read the installed copy.
  const path = new URL("./node_modules/@agentclientprotocol/sdk/package.json", import.meta.url);
  return JSON.parse(readFileSync(path, "utf8")).version;
}

function aborted(signal, ms) {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve(true);
    const timer = setTimeout(() => resolve(false), ms);
    signal.addEventListener("abort", () => {
      clearTimeout(timer);
      resolve(true);
    });
  });
}

function selected(optionId) {
  return { outcome: { outcome: "selected", optionId } };
}

async function main() {
  const { name, cwds, agent } = parseArgs(process.argv.slice(2));
  const report = {
    sdk: "@agentclientprotocol/sdk",
    sdkVersion: sdkVersion(),
    case: name,
    initialize: null,
    sessions: [],
    updates: [],
    permissionRequests: [],
    cancelRequestsSeen: [],
    sdkLog: [],
    errors: [],
    agentExit: null,
  };
  // The SDK reports what it cannot handle (a session/update that fails its schema, a response
  // to an unknown request) with console.error and carries on: keep those for the report.
  console.error = (...args) => report.sdkLog.push(format(...args));
  const child = spawn(agent[0], agent.slice(1), { stdio: ["pipe", "pipe", "inherit"] });
  const exited = new Promise((resolve) => {
    child.on("exit", (code, signal) => resolve({ code, signal }));
  });
  child.on("error", (err) => report.errors.push(`spawn: ${err.message}`));
  // A write after the agent exited must not crash the client: the SDK reports it instead.
  child.stdin.on("error", (err) => report.errors.push(`agent stdin: ${err.message}`));
  const wire = ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
  // Tap the messages both ways: incoming, to see the agent's $/cancel_request notifications
  // (the SDK handles them itself: it aborts the matching handler's signal); outgoing, to know
  // when our answers to the agent's requests have been written.
  const responsesSent = new Set();
  const incoming = new TransformStream({
    transform(message, controller) {
      if (message.method === methods.protocol.cancelRequest) {
        report.cancelRequestsSeen.push(message.params?.requestId);
      }
      controller.enqueue(message);
    },
  });
  const outgoing = new TransformStream({
    transform(message, controller) {
      if (!("method" in message)) responsesSent.add(message.id);
      controller.enqueue(message);
    },
  });
  const piped = outgoing.readable.pipeTo(wire.writable).catch(() => {});
  const stream = { writable: outgoing.writable, readable: wire.readable.pipeThrough(incoming) };

  const allowed = new Set(); // two-sessions: session ids whose requests we allow

  const app = client({ name: "broker-interop-ts" })
    .onNotification(methods.client.session.update, ({ params }) => {
      report.updates.push(params);
    })
    .onRequest(methods.client.session.requestPermission, (ctx) => {
      const seen = {
        requestId: ctx.requestId,
        params: ctx.params,
        answer: null,
        cancelSignalled: false,
      };
      report.permissionRequests.push(seen);
      ctx.signal.addEventListener("abort", () => {
        // The SDK aborts a handler's signal when the agent sends $/cancel_request for it.
        seen.cancelSignalled = true;
      });
      const answer = (value) => {
        seen.answer = value;
        return value;
      };
      switch (name) {
        case "allow":
          return answer(selected("allow-once"));
        case "reject":
          return answer(selected("reject-once"));
        case "cancelled":
          return answer({ outcome: { outcome: "cancelled" } });
        case "unknown-option":
          return answer(selected("maybe-later"));
        case "error":
          seen.answer = "error";
          throw new RequestError(-32603, "no UI attached");
        case "two-sessions":
          return answer(selected(allowed.has(ctx.params.sessionId) ? "allow-once" : "reject-once"));
        case "never-answers":
          seen.answer = "never";
          return new Promise(() => {});
        case "session-cancel": {
          // As the ACP spec asks of a client: send session/cancel, then answer every pending
          // permission request of the session with the `cancelled` outcome. We answer once the
          // agent has withdrawn the request ($/cancel_request) so the answer is a late one.
          return (async () => {
            await ctx.agent.notify(methods.agent.session.cancel, {
              sessionId: ctx.params.sessionId,
            });
            await aborted(ctx.signal, CANCEL_WAIT_MS);
            return answer({ outcome: { outcome: "cancelled" } });
          })();
        }
        default:
          throw new Error(`unhandled case ${name}`);
      }
    });

  try {
    await app.connectWith(stream, async (agentCtx) => {
      report.initialize = await agentCtx.request(methods.agent.initialize, {
        protocolVersion: PROTOCOL_VERSION,
        clientCapabilities: { fs: { readTextFile: false, writeTextFile: false }, terminal: false },
        clientInfo: { name: "broker-interop-ts", version: "0.0.0" },
      });
      const sessions = [];
      for (const cwd of cwds) {
        const session = await agentCtx.buildSession(cwd).start();
        sessions.push(session);
        report.sessions.push({ sessionId: session.sessionId, cwd, stopReason: null });
      }
      if (name === "two-sessions") allowed.add(sessions[0].sessionId);
      await Promise.all(
        sessions.map(async (session, index) => {
          try {
            const response = await session.prompt(PROMPT);
            report.sessions[index].stopReason = response.stopReason;
          } catch (err) {
            report.sessions[index].error = `${err.code ?? ""} ${err.message}`.trim();
          } finally {
            session.dispose();
          }
        }),
      );
      // Hang up only once every answer is written (session-cancel: the prompt can end first).
      if (name !== "never-answers") {
        const ids = report.permissionRequests.map((p) => p.requestId);
        const deadline = Date.now() + CANCEL_WAIT_MS;
        while (!ids.every((id) => responsesSent.has(id))) {
          if (Date.now() > deadline) throw new Error(`answers ${ids} not written in time`);
          await new Promise((resolve) => setTimeout(resolve, 10));
        }
      }
    });
  } catch (err) {
    report.errors.push(`connection: ${err.stack ?? err}`);
  }
  // Flush what the SDK queued (our late answer, say) to the agent, then hang up: stdin EOF.
  await outgoing.writable.close().catch(() => {});
  await piped;
  child.stdin.end();
  const timeout = new Promise((resolve) => setTimeout(() => resolve(null), EXIT_WAIT_MS).unref());
  report.agentExit = await Promise.race([exited, timeout]);
  if (report.agentExit === null) {
    report.errors.push(`the agent did not exit within ${EXIT_WAIT_MS} ms of stdin EOF`);
    child.kill("SIGKILL");
    await exited;
  }
  process.stdout.write(`${JSON.stringify(report)}\n`);
}

main().catch((err) => {
  process.stderr.write(`client.mjs: ${err.stack ?? err}\n`);
  process.exit(1);
});
