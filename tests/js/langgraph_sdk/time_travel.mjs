// Issue 36: Agent Chat UI's Refresh and Edit with the official JS SDK against a running
// Threadkeeper (TK_URL, TK_KEY), as the UI sends them: the parent checkpoint of the state where
// a message first appeared (from getHistory), no input (Refresh) or the edited question (Edit).
// Prints one JSON summary line; tests/integration/test_langgraph_js_sdk.py checks it.
import { Client } from "@langchain/langgraph-sdk";

const client = new Client({ apiUrl: process.env.TK_URL, apiKey: process.env.TK_KEY });
const ids = (state) => (state.values?.messages ?? []).map((m) => m.id);
const firstSeen = (history, id) => history.filter((s) => ids(s).includes(id)).at(-1);
const last = async (stream) => {
  let values = null;
  for await (const part of stream) if (part.event === "values") values = part.data;
  return values;
};

const thread = await client.threads.create();
const tid = thread.thread_id;
for (const [text, id] of [["When does a lease expire?", "q1"], ["And what renews it?", "q2"]]) {
  await client.runs.wait(tid, "default", { input: { messages: [{ type: "human", content: text, id }] } });
}
const before = await client.threads.getState(tid);
const oldAnswer = before.values.messages.at(-1);
let history = await client.threads.getHistory(tid, { limit: 1000 });
const refreshed = await last(
  client.runs.stream(tid, "default", {
    input: undefined,
    checkpoint: firstSeen(history, oldAnswer.id).parent_checkpoint,
    streamMode: ["values"],
  }),
);
history = await client.threads.getHistory(tid, { limit: 1000 });
const edited = await last(
  client.runs.stream(tid, "default", {
    input: { messages: [{ type: "human", content: "What renews a lease?", id: "q2-edit" }] },
    checkpoint: firstSeen(history, "q2").parent_checkpoint,
    streamMode: ["values"],
  }),
);
const after = await client.threads.getState(tid);
const old = await client.threads.getState(tid, before.checkpoint.checkpoint_id);
history = await client.threads.getHistory(tid, { limit: 1000 });
const children = {};
for (const s of history) {
  const parent = s.parent_checkpoint?.checkpoint_id;
  if (parent) children[parent] = (children[parent] ?? 0) + 1;
}
console.log(
  JSON.stringify({
    before: ids(before),
    refreshed: refreshed.messages.map((m) => m.id),
    edited: edited.messages.map((m) => m.id),
    after: ids(after),
    old: ids(old),
    forks: Object.values(children).filter((n) => n > 1).length,
  }),
);
