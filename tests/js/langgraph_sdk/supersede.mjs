// Issue 32 items 5 and 6 with the official JS SDK against a running Threadkeeper (TK_URL,
// TK_KEY) whose agent asks approval for query_kb: a new message while the approval is pending
// supersedes it; a run field Threadkeeper cannot honour is refused by name; cancel with wait.
// Prints one JSON summary line; tests/integration/test_langgraph_js_sdk.py checks it.
import { Client } from "@langchain/langgraph-sdk";

const client = new Client({ apiUrl: process.env.TK_URL, apiKey: process.env.TK_KEY });
const human = (text) => ({ messages: [{ type: "human", content: text }] });
const last = async (stream) => {
  let values = null;
  for await (const part of stream) if (part.event === "values") values = part.data;
  return values;
};

const tid = (await client.threads.create()).thread_id;
const first = await last(
  client.runs.stream(tid, "default", { input: human("When does a lease expire?"), streamMode: ["values"] }),
);
const statusWaiting = (await client.threads.get(tid)).status;
// As Agent Chat UI sends the next message: a plain submit while the approval is pending.
const second = await last(
  client.runs.stream(tid, "default", { input: human("How is it renewed?"), streamMode: ["values"] }),
);
const runs = await client.runs.list(tid);

let refused = null;
try {
  await client.runs.create(tid, "default", { input: human("x"), interruptBefore: ["tools"] });
} catch (error) {
  refused = { status: error.status, body: error.body ?? null, message: String(error.message) };
}

// Cancel the waiting run and wait for it to have stopped.
const waiting = runs[0];
await client.runs.cancel(tid, waiting.run_id, true);
const afterCancel = (await client.threads.get(tid)).status;

console.log(
  JSON.stringify({
    first_interrupted: Boolean(first.__interrupt__),
    status_waiting: statusWaiting,
    second: second.messages.map((m) => [m.type, m.content]),
    second_interrupted: Boolean(second.__interrupt__),
    run_statuses: runs.map((r) => r.status),
    refused,
    after_cancel: afterCancel,
  }),
);
