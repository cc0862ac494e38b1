// The README flow with openapi-typescript types (./gen/api.ts) and openapi-fetch, under
// `tsc --strict` and with no type assertion: tests/integration/test_generated_clients.py
// compiles (and runs) it. Usage: node fetch.js <base url> <api key>
import { createHash } from "node:crypto";
import createClient from "openapi-fetch";
import type { components, operations, paths } from "./gen/api";

type RunEvent = components["schemas"]["RunEvent"];
type MessageOut = components["schemas"]["MessageOut"];
/** An operation's error body at one status: the codes it declares there, and only those. */
type ErrorAt<Op extends keyof operations, Status extends keyof operations[Op]["responses"]> =
  operations[Op]["responses"][Status] extends { content: { "application/json": infer Body } } ? Body : never;

const [baseUrl = "http://127.0.0.1:8000", key = "dev-key"] = process.argv.slice(2);
const client = createClient<paths>({ baseUrl, headers: { Authorization: `Bearer ${key}` } });

function fail(what: string, error: components["schemas"]["ErrorBody"] | undefined): never {
  throw new Error(`${what}: ${error ? `${error.error} ${error.detail}` : "no body"}`);
}

/** The `data` of each server-sent event in `body` (comment lines are keep-alives). */
async function* sseData(body: ReadableStream<Uint8Array>): AsyncGenerator<string> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true }).replace(/\r\n?/g, "\n");
    let end: number;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const data = block
        .split("\n")
        .filter((line) => line.startsWith("data:"))
        .map((line) => line.slice(5).replace(/^ /, ""));
      if (data.length) yield data.join("\n");
    }
  }
}

/** Wait for dispatch: WaitRequest long-polls until a worker took the request and names its run
 * (or answers it still `queued` after `timeout` s: ask again). */
async function runOf(requestId: string): Promise<string> {
  for (let attempt = 0; attempt < 10; attempt++) {
    const { data, error } = await client.GET("/v1/requests/{request_id}/wait", {
      params: { path: { request_id: requestId }, query: { timeout: 30 } },
    });
    if (!data) return fail("WaitRequest", error);
    if (data.run_id !== null) return data.run_id;
    if (data.status === "cancelled") throw new Error("request cancelled");
  }
  throw new Error("never dispatched");
}

async function follow(threadId: string, runId: string): Promise<MessageOut[]> {
  // parseAs "stream": openapi-fetch hands over the body (its default, JSON, cannot read SSE).
  const { data: body, error } = await client.GET("/v1/runs/{run_id}/events", {
    params: { path: { run_id: runId } },
    parseAs: "stream",
  });
  if (!body) return fail("StreamRunEvents", error);
  const stored: MessageOut[] = [];
  for await (const text of sseData(body)) {
    const item: RunEvent = JSON.parse(text);
    switch (item.type) {
      case "delta":
        process.stdout.write(item.text);
        break;
      case "message": {
        const { data } = await client.GET("/v1/threads/{thread_id}/messages", {
          params: { path: { thread_id: threadId }, query: { after_seq: item.seq - 1, limit: 1 } },
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
  const compressed = await client.POST("/v1/threads/{thread_id}/context/compress", {
    params: { path: { thread_id: threadId } },
  });
  if (compressed.data) {
    const { before_tokens, after_tokens, offloaded } = compressed.data;
    console.log(`compressed: ${before_tokens} -> ${after_tokens} tokens, ${offloaded} offloaded`);
    return;
  }
  // nothing_to_compress, or an agent without manual compression: CompressContext's 422 codes.
  switch (compressed.error.error) {
    case "nothing_to_compress":
    case "not_supported": {
      const refused: ErrorAt<"CompressContext", 422> = compressed.error;
      console.log(`${compressed.response.status}: ${refused.error}`);
      break;
    }
    default:
      fail("CompressContext", compressed.error);
  }
}

async function main(): Promise<void> {
  const created = await client.POST("/v1/threads", { body: { title: "openapi-fetch" } });
  if (!created.data) return fail("CreateThread", created.error);
  const thread = created.data;

  const post = () =>
    client.POST("/v1/threads/{thread_id}/messages", {
      params: { path: { thread_id: thread.id }, header: { "Idempotency-Key": "fetch-1" } },
      body: { content: "What happens when a lease expires?" },
    });
  const posted = await post();
  if (!posted.data) return fail("PostMessage", posted.error);
  const replay = await post();
  if (replay.data?.request_id !== posted.data.request_id) throw new Error("not idempotent");

  const runId = await runOf(posted.data.request_id);
  const messages = await follow(thread.id, runId);
  const waited = await client.GET("/v1/runs/{run_id}/wait", { params: { path: { run_id: runId } } });
  if (!waited.data) return fail("WaitRun", waited.error);
  console.log("run:", waited.data.status, waited.data.input_tokens, "input tokens;", messages.length, "messages");

  // A typed 409: `error` is the union of ResumeRun's own error bodies, told apart by their code
  // (a code ResumeRun does not declare, `request_not_queued`, is a compile error in a case).
  const busy = await client.POST("/v1/runs/{run_id}/resume", {
    params: { path: { run_id: runId } },
    body: { decisions: [{ type: "approve" }] },
  });
  if (busy.error) {
    switch (busy.error.error) {
      case "thread_busy":
      case "invalid_state":
      case "agent_unavailable": {
        const conflict: ErrorAt<"ResumeRun", 409> = busy.error; // narrowed by the code: no cast
        console.log(`${busy.response.status}: ${conflict.error}`);
        break;
      }
      default:
        return fail("ResumeRun", busy.error);
    }
  }

  // The knowledge-base result is large: compression offloads it to the Workdir.
  await compress(thread.id);
  const state = await client.GET("/v1/threads/{thread_id}/agent-state", {
    params: { path: { thread_id: thread.id } },
  });
  if (!state.data) return fail("GetAgentState", state.error);
  for (const m of state.data.messages) {
    if (m.offload === null) continue;
    // A Workdir file with its hash: the offloaded original, checked against its SHA-256.
    const file = await client.GET("/v1/threads/{thread_id}/workdir/{path}", {
      params: { path: { thread_id: thread.id, path: m.offload.path } },
      parseAs: "text",
    });
    if (file.data === undefined) return fail("ReadWorkdirFile", file.error);
    const sha256 = createHash("sha256").update(file.data, "utf8").digest("hex");
    const etag = file.response.headers.get("etag");
    if (sha256 !== m.offload.sha256 || etag !== `"sha256-${sha256}"`) throw new Error(`${m.offload.path}: hash`);
    console.log(`workdir ${m.offload.path}: sha256 ok, ${m.offload.original_tokens} tokens`);
  }

  // A typed 422: all offloaded already, nothing more to compress.
  await compress(thread.id);
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
