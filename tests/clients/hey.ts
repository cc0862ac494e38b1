// The README flow with the @hey-api/openapi-ts client (generated into ./gen), under `tsc --strict`
// and with no type assertion: tests/integration/test_generated_clients.py compiles (and runs) it.
// Usage: node hey.js <base url> <api key>
import { createHash } from "node:crypto";
import { createClient, createConfig } from "./gen/client";
import {
  compressContext,
  createThread,
  getAgentState,
  listMessages,
  postMessage,
  readWorkdirFile,
  resumeRun,
  streamRunEvents,
  waitRequest,
  waitRun,
} from "./gen/sdk.gen";
import type {
  CompressContextErrors,
  ErrorBody,
  MessageOut,
  ResumeRunErrors,
  RunEvent,
  RunOut,
} from "./gen/types.gen";

const [baseUrl = "http://127.0.0.1:8000", key = "dev-key"] = process.argv.slice(2);
const client = createClient(createConfig({ baseUrl, auth: () => key }));

function fail(what: string, error: ErrorBody | undefined): never {
  throw new Error(`${what}: ${error ? `${error.error} ${error.detail}` : "no body"}`);
}

/** Wait for dispatch: WaitRequest long-polls until a worker took the request and names its run
 * (or answers it still `queued` after `timeout` s: ask again). */
async function runOf(requestId: string): Promise<string> {
  for (let attempt = 0; attempt < 10; attempt++) {
    const { data, error } = await waitRequest({
      client,
      path: { request_id: requestId },
      query: { timeout: 30 },
    });
    if (!data) return fail("WaitRequest", error);
    if (data.run_id !== null) return data.run_id;
    if (data.status === "cancelled") throw new Error("request cancelled");
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

/** CompressContext: what it did, or (a typed 422) why there was nothing to do. */
async function compress(threadId: string): Promise<void> {
  const compressed = await compressContext({ client, path: { thread_id: threadId } });
  if (compressed.data) {
    const { before_tokens, after_tokens, offloaded } = compressed.data;
    console.log(`compressed: ${before_tokens} -> ${after_tokens} tokens, ${offloaded} offloaded`);
    return;
  }
  // nothing_to_compress, or an agent without manual compression: CompressContext's 422 codes.
  switch (compressed.error.error) {
    case "nothing_to_compress":
    case "not_supported": {
      const refused: CompressContextErrors[422] = compressed.error;
      console.log(`${compressed.response?.status}: ${refused.error}`);
      break;
    }
    default:
      fail("CompressContext", compressed.error);
  }
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

  // A typed 409: a resume of a run not waiting for a decision. `error` is the union of
  // ResumeRun's own error bodies, told apart by their `error` code: a code ResumeRun does not
  // declare (`request_not_queued`) is a compile error in a case.
  const busy = await resumeRun({ client, path: { run_id: runId }, body: { decisions: [{ type: "approve" }] } });
  if (busy.error) {
    switch (busy.error.error) {
      case "thread_busy":
      case "invalid_state":
      case "agent_unavailable": {
        const conflict: ResumeRunErrors[409] = busy.error; // narrowed by the code: no cast
        console.log(`${busy.response?.status}: ${conflict.error}`);
        break;
      }
      default:
        return fail("ResumeRun", busy.error);
    }
  }

  // The knowledge-base result is large: compression offloads it to the Workdir.
  await compress(thread.id);
  const state = await getAgentState({ client, path: { thread_id: thread.id } });
  if (!state.data) return fail("GetAgentState", state.error);
  console.log("pressure:", state.data.context.pressure);
  for (const m of state.data.messages) {
    if (m.offload === null) continue;
    // A Workdir file with its hash: the offloaded original, checked against its SHA-256.
    const file = await readWorkdirFile({
      client,
      path: { thread_id: thread.id, path: m.offload.path },
      parseAs: "text",
    });
    if (file.data === undefined) return fail("ReadWorkdirFile", file.error);
    const sha256 = createHash("sha256").update(file.data, "utf8").digest("hex");
    const header = file.response?.headers.get("x-content-sha256");
    if (sha256 !== m.offload.sha256 || header !== sha256) throw new Error(`${m.offload.path}: hash`);
    console.log(`workdir ${m.offload.path}: sha256 ok, ${m.offload.original_tokens} tokens`);
  }

  // A typed 422: all offloaded already, nothing more to compress.
  await compress(thread.id);
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
