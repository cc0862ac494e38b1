// The README flow with the @hey-api/openapi-ts client (generated into ./gen), under `tsc --strict`
// and with no type assertion: tests/integration/test_generated_clients.py compiles (and runs) it.
// Usage: node hey.js <base url> <api key>
import { createClient, createConfig } from "./gen/client";
import {
  compressContext,
  createThread,
  getAgentState,
  getRequest,
  listMessages,
  postMessage,
  readWorkdirFile,
  resumeRun,
  streamRunEvents,
  waitRun,
} from "./gen/sdk.gen";
import type { ErrorBody, MessageOut, RunEvent, RunOut } from "./gen/types.gen";

const [baseUrl = "http://127.0.0.1:8000", key = "dev-key"] = process.argv.slice(2);
const client = createClient(createConfig({ baseUrl, auth: () => key }));

function fail(what: string, error: ErrorBody | undefined): never {
  throw new Error(`${what}: ${error ? `${error.error} ${error.detail}` : "no body"}`);
}

/** Wait for dispatch: the request names its run once a worker took it. */
async function runOf(requestId: string): Promise<string> {
  for (let i = 0; i < 600; i++) {
    const { data, error } = await getRequest({ client, path: { request_id: requestId } });
    if (!data) return fail("GetRequest", error);
    if (data.run_id !== null) return data.run_id;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  throw new Error("never dispatched");
}

/** Follow the run live: each item is a typed RunEvent, told apart by `type`. */
async function follow(threadId: string, runId: string): Promise<MessageOut[]> {
  const stored: MessageOut[] = [];
  const { stream } = await streamRunEvents({
    client,
    path: { run_id: runId },
    sseMaxRetryAttempts: 1, // an error answer (404, 429) is not retried forever
  });
  for await (const event of stream) {
    if (!event) continue; // the 204 answer (a stream already over) yields no event
    const item: RunEvent = event;
    switch (item.type) {
      case "delta":
        process.stdout.write(item.text);
        break;
      case "message": {
        // The event names the stored message; its content is read from the history.
        const { data } = await listMessages({
          client,
          path: { thread_id: threadId },
          query: { after_seq: item.seq - 1, limit: 1 },
        });
        stored.push(...(data?.items ?? []));
        break;
      }
      case "compression":
        console.log(`compressed (${item.reason}): ${item.before_tokens} -> ${item.after_tokens}`);
        break;
      case "status":
        if (item.interrupt !== null) {
          console.log("waiting for:", item.interrupt.action_requests.map((a) => a.name));
        }
        if (item.final) console.log(`run ${item.status}${item.error_code ? ` (${item.error_code})` : ""}`);
        break;
    }
  }
  return stored;
}

async function main(): Promise<void> {
  const created = await createThread({ client, body: { title: "hey-api" } });
  if (!created.data) return fail("CreateThread", created.error);
  const thread = created.data;

  const post = () =>
    postMessage({
      client,
      path: { thread_id: thread.id },
      body: { content: "What happens when a lease expires?" },
      headers: { "Idempotency-Key": "hey-1" },
    });
  const posted = await post();
  if (!posted.data) return fail("PostMessage", posted.error);
  const replay = await post(); // idempotent: the same request
  if (replay.data?.request_id !== posted.data.request_id) throw new Error("not idempotent");

  const runId = await runOf(posted.data.request_id);
  const messages = await follow(thread.id, runId);
  const waited = await waitRun({ client, path: { run_id: runId } });
  const run: RunOut | undefined = waited.data;
  if (!run) return fail("WaitRun", waited.error);
  console.log("run:", run.status, run.input_tokens, "input tokens;", messages.length, "messages");

  // A typed 409: a second message while the thread is busy, or a resume of a run not waiting.
  const busy = await resumeRun({ client, path: { run_id: runId }, body: { decisions: [{ type: "approve" }] } });
  if (busy.error && busy.response?.status === 409) console.log("409:", busy.error.error);

  const state = await getAgentState({ client, path: { thread_id: thread.id } });
  if (!state.data) return fail("GetAgentState", state.error);
  console.log("pressure:", state.data.context.pressure);
  for (const m of state.data.messages) {
    if (m.offload === null) continue;
    // A Workdir file with its hash: the offloaded original and its SHA-256.
    const file = await readWorkdirFile({
      client,
      path: { thread_id: thread.id, path: m.offload.path },
      parseAs: "text",
    });
    console.log(m.offload.path, m.offload.sha256, m.offload.original_tokens, typeof file.data);
  }

  const compressed = await compressContext({ client, path: { thread_id: thread.id } });
  if (compressed.data) console.log("compressed to", compressed.data.after_tokens);
  // A typed 422: nothing (more) to compress.
  else if (compressed.response?.status === 422 && compressed.error) console.log("422:", compressed.error.error);
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
