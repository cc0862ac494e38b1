// The core flow with the official JS SDK against a running Threadkeeper (TK_URL, TK_KEY).
// Prints one JSON summary line; tests/integration/test_langgraph_js_sdk.py checks it.
import { Client } from "@langchain/langgraph-sdk";

const apiUrl = process.env.TK_URL;
const client = new Client({ apiUrl, apiKey: process.env.TK_KEY });
const fail = (why) => {
  console.error(why);
  process.exit(1);
};

const info = await (await fetch(`${apiUrl}/info`)).json();
const assistants = await client.assistants.search({ graphId: "default" });
const thread = await client.threads.create({ metadata: { source: "js" } });
if (!thread.thread_id) fail("no thread_id");

let createdRunId = null;
const parts = [];
for await (const part of client.runs.stream(thread.thread_id, "default", {
  input: { messages: [{ role: "user", content: [{ type: "text", text: "When does a lease expire?" }] }] },
  streamMode: ["values", "messages-tuple", "custom"],
  streamResumable: true,
  onRunCreated: ({ run_id }) => {
    createdRunId = run_id;
  },
})) {
  parts.push(part);
}
const runId = parts[0]?.data?.run_id;
const tuples = parts.filter((p) => p.event === "messages");
const values = parts.filter((p) => p.event === "values");
const lastValues = values[values.length - 1]?.data;

// Rejoin after the first half of the parts, as a client that lost its connection would.
const later = parts.slice(1);
const cut = Math.floor(later.length / 2);
const rejoined = [];
for await (const part of client.runs.joinStream(thread.thread_id, runId, {
  lastEventId: later[cut - 1].id,
  streamMode: ["values", "messages-tuple", "custom"],
})) {
  rejoined.push(part);
}

// Joined without modes: the run's own modes (issue 32).
const rejoinedOwn = [];
for await (const part of client.runs.joinStream(thread.thread_id, runId, {
  lastEventId: later[cut - 1].id,
})) {
  rejoinedOwn.push(part);
}
// The thread's agent is chosen at creation by graphId, shown (not stored) as metadata.
const chosen = await client.threads.create({ graphId: "default" });

const state = await client.threads.getState(thread.thread_id);
const history = await client.threads.getHistory(thread.thread_id, { limit: 10 });
const found = await client.threads.search({ metadata: { graph_id: "default" }, limit: 10 });
const run = await client.runs.get(thread.thread_id, runId);

console.log(
  JSON.stringify({
    info_has_version: typeof info.version === "string",
    assistants: assistants.map((a) => a.graph_id),
    thread_id: thread.thread_id,
    created_run_id: createdRunId,
    run_id: runId,
    events: parts.map((p) => p.event),
    tuple_nodes: tuples.map((p) => p.data[1].langgraph_node),
    tuple_chunk_types: tuples.map((p) => p.data[0].type),
    last_message: lastValues.messages[lastValues.messages.length - 1],
    later_ids: later.slice(cut).map((p) => p.id),
    rejoined_ids: rejoined.filter((p) => p.event !== "metadata").map((p) => p.id),
    rejoined_own_ids: rejoinedOwn.filter((p) => p.event !== "metadata").map((p) => p.id),
    chosen_metadata: chosen.metadata,
    chosen_id: chosen.thread_id,
    state_messages: state.values.messages.length,
    history_head_matches: history[0].checkpoint.checkpoint_id === state.checkpoint.checkpoint_id,
    found: found.map((t) => t.thread_id),
    run_status: run.status,
  }),
);
