// Drives `broker mcp-gate` with the official MCP TypeScript SDK client (test only).
//
//   node client.mjs ELICIT -- COMMAND ARGS...
//
// ELICIT is "none" (no elicitation capability) or the action the user answers every
// elicitation with: "accept", "decline" or "cancel". Lists the tools, calls read_note and then
// write_note, and prints one JSON object on stdout: the tool names, each call's result and the
// elicitation messages seen.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { ElicitRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const [elicit, dashes, command, ...args] = process.argv.slice(2);
if (dashes !== "--" || !command) {
  console.error("usage: node client.mjs none|accept|decline|cancel -- COMMAND ARGS...");
  process.exit(2);
}
const capabilities = elicit === "none" ? {} : { elicitation: {} };
const client = new Client({ name: "broker-mcp-interop-ts", version: "0.0.0" }, { capabilities });
const seen = [];
if (elicit !== "none") {
  client.setRequestHandler(ElicitRequestSchema, async (request) => {
    seen.push(request.params.message);
    return { action: elicit };
  });
}
const transport = new StdioClientTransport({ command, args, stderr: "inherit" });
await client.connect(transport);
const tools = (await client.listTools()).tools.map((tool) => tool.name);
const read = await client.callTool({ name: "read_note", arguments: { name: "a" } });
const write = await client.callTool({ name: "write_note", arguments: { name: "a", text: "x" } });
console.log(JSON.stringify({ tools, read, write, seen }));
await client.close();
