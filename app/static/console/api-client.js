// GENERATED FILE, DO NOT EDIT.
// API client for Threadkeeper 0.1.0, generated from its OpenAPI document
// (GET /schema/openapi.json) by scripts/generate_console_client.py. Regenerate with:
//   .venv/bin/python scripts/generate_console_client.py
// tests/unit/test_console_client.py fails when this file no longer matches the API.

/**
 * @typedef {Object} ClientConfig
 * @property {string} [baseUrl] Prefix of every path; "" (default) means the page's own origin.
 * @property {string | (() => string)} [apiKey] Bearer API key, or a function returning it.
 * @property {typeof fetch} [fetch] The fetch implementation (default: globalThis.fetch).
 */

/**
 * @typedef {Object} RequestOptions
 * @property {AbortSignal} [signal] Aborts the request.
 * @property {boolean} [raw] Resolve with the `Response` itself (streams, headers); errors still throw.
 * @property {Record<string, string>} [headers] Extra request headers.
 */

/** A non-2xx answer. `code` is the API's stable error code (`thread_busy`, `not_found`, ...). */
export class ApiError extends Error {
  /**
   * @param {number} status
   * @param {string} code
   * @param {string} detail
   * @param {unknown} body
   */
  constructor(status, code, detail, body) {
    super(detail ? `${code}: ${detail}` : code);
    this.name = "ApiError";
    this.status = status;
    this.code = code;
    this.detail = detail;
    this.body = body;
  }
}

/** @param {unknown} value */
function encodePathValue(value) {
  // Segment-wise, so a workdir path such as "results/a.json" keeps its slashes.
  return String(value).split("/").map(encodeURIComponent).join("/");
}

/**
 * @param {Response} response
 * @returns {Promise<ApiError>}
 */
async function toApiError(response) {
  const text = await response.text();
  let body = text;
  try {
    body = JSON.parse(text);
  } catch {
    // not JSON: keep the text
  }
  const isObject = typeof body === "object" && body !== null;
  const code = isObject && typeof body.error === "string" ? body.error : `http_${response.status}`;
  const detail = isObject && typeof body.detail === "string" ? body.detail : String(text);
  return new ApiError(response.status, code, detail, body);
}

/**
 * @typedef {Object} Operation
 * @property {string} method
 * @property {string} path
 * @property {string[]} pathParams
 * @property {string[]} queryParams
 * @property {boolean} hasBody
 * @property {boolean} auth
 */

/**
 * @param {ClientConfig} config
 * @param {Operation} op
 * @param {Record<string, any>} args
 * @param {RequestOptions} options
 */
async function request(config, op, args, options) {
  let path = op.path;
  for (const name of op.pathParams) {
    if (args[name] === undefined || args[name] === null) {
      throw new TypeError(`missing path parameter ${name}`);
    }
    path = path.replace(`{${name}}`, encodePathValue(args[name]));
  }
  const query = new URLSearchParams();
  for (const name of op.queryParams) {
    const value = args[name];
    if (value === undefined || value === null) continue;
    for (const item of Array.isArray(value) ? value : [value]) query.append(name, String(item));
  }
  const qs = query.toString();
  const headers = { Accept: "application/json", ...(options.headers || {}) };
  if (op.auth) {
    const key = typeof config.apiKey === "function" ? config.apiKey() : config.apiKey;
    if (key) headers.Authorization = `Bearer ${key}`;
  }
  /** @type {RequestInit} */
  const init = { method: op.method, headers, signal: options.signal };
  if (op.hasBody) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(args.body ?? {});
  }
  const doFetch = config.fetch || globalThis.fetch.bind(globalThis);
  const response = await doFetch(`${config.baseUrl || ""}${path}${qs ? `?${qs}` : ""}`, init);
  if (!response.ok) throw await toApiError(response);
  if (options.raw) return response;
  if (response.status === 204) return undefined;
  const type = response.headers.get("Content-Type") || "";
  return type.includes("json") ? response.json() : response.text();
}

// --- schemas ---------------------------------------------------------------------------------------

/**
 * @typedef {Object} ActionRequest
 * @property {string} name
 * @property {Record<string, any>} args
 * @property {(string | null)} description
 */

/**
 * @typedef {Object} AddDocumentIn
 * @property {string} title length 1..500
 * @property {string} content length 1..500000
 * @property {string} [source] Default: `""`. (length 0..500)
 * @property {string} [url] Default: `""`. (length 0..2000)
 * @property {number} [chunk_chars] Default: `1200`. (200..20000)
 */

/**
 * @typedef {Object} AgentBudget
 * @property {number} summary_threshold
 * @property {number} tool_result_preview_tokens
 * @property {number} summary_keep_recent_tokens
 * @property {number} summary_max_tokens
 * @property {number} summary_timeout_seconds
 */

/**
 * @typedef {Object} AgentList
 * @property {Array<AgentOut>} items
 * @property {string} default_agent_id
 */

/**
 * @typedef {Object} AgentOut
 * @property {string} id
 * @property {string} name
 * @property {string} description
 * @property {string} model
 * @property {string} summarizer
 * @property {string} knowledge_base
 * @property {Array<string>} capabilities
 * @property {AgentBudget} budget
 * @property {number} recursion_limit
 * @property {Array<AgentTool>} tools
 * @property {boolean} available
 * @property {(string | null)} unavailable_reason
 */

/**
 * @typedef {Object} AgentStateOut
 * @property {string} thread_id uuid
 * @property {string} agent_id
 * @property {Array<StateMessage>} messages
 * @property {SummaryInfo} summary
 * @property {ContextInfo} context
 * @property {Capabilities} capabilities
 * @property {Array<string>} next
 */

/**
 * @typedef {Object} AgentTool
 * @property {string} name
 * @property {string} description
 * @property {Record<string, any>} parameters
 * @property {boolean} needs_approval
 */

/**
 * @typedef {("first" | "edit" | "regenerate")} BranchKind
 */

/**
 * @typedef {Object} BranchOut
 * @property {string} id uuid
 * @property {(string | null)} parent_id uuid
 * @property {number} fork_seq
 * @property {BranchKind} kind
 * @property {(string | null)} checkpoint_id
 * @property {boolean} current
 * @property {(string | null)} created_at date-time
 */

/**
 * @typedef {Object} BranchPage
 * @property {Array<BranchOut>} items
 */

/**
 * @typedef {Object} Capabilities
 * @property {ManualCompression} manual_compression
 */

/**
 * The `error` codes CheckpointNotForkableError carries: `checkpoint_not_forkable`: checkpoint_not_forkable.
 * @typedef {("checkpoint_not_forkable")} CheckpointNotForkableCode
 */

/**
 * An ErrorBody whose `error` is `checkpoint_not_forkable`.
 * @typedef {Object} CheckpointNotForkableError
 * @property {CheckpointNotForkableCode} error
 * @property {string} detail
 * @property {(Array<FieldError> | null)} fields
 */

/**
 * @typedef {Object} CompressOut
 * @property {number} before_tokens
 * @property {number} after_tokens
 * @property {number} offloaded
 * @property {boolean} summarized
 */

/**
 * @typedef {Object} CompressionEvent
 * @property {"compression"} type
 * @property {CompressionReason} reason
 * @property {number} before_tokens
 * @property {number} after_tokens
 * @property {number} offloaded
 * @property {boolean} summarized
 * @property {(number | null)} offload_failed
 * @property {(string | null)} offload_error
 * @property {(string | null)} over_threshold
 * @property {(number | null)} threshold
 */

/**
 * The `error` codes CompressionFailedError carries: `compression_failed`: the summarizer failed; nothing was written.
 * @typedef {("compression_failed")} CompressionFailedCode
 */

/**
 * An ErrorBody whose `error` is `compression_failed`.
 * @typedef {Object} CompressionFailedError
 * @property {CompressionFailedCode} error
 * @property {string} detail
 * @property {(Array<FieldError> | null)} fields
 */

/**
 * @typedef {("threshold" | "overflow" | "manual")} CompressionReason
 */

/**
 * @typedef {Object} ContextInfo
 * @property {number} input_tokens
 * @property {number} summary_threshold
 * @property {(number | null)} pressure
 * @property {boolean} compression_suggested
 * @property {(string | null)} pressure_reason
 */

/**
 * @typedef {Object} CreateThreadIn
 * @property {string} [title] Default: `""`. (length 0..500)
 * @property {(string | null)} [agent_id] length 1..100; pattern ^[A-Za-z0-9_.-]+$
 * @property {Record<string, any>} [metadata]
 */

/**
 * @typedef {Object} CustomEvent
 * @property {"custom"} type
 * @property {any} [data]
 */

/**
 * The `error` codes DatabaseUnavailableOrDatabaseNotMigratedOrIdentityProviderUnavailableError carries: `database_unavailable`: the database cannot be reached right now; retry after `Retry-After` s / `database_not_migrated`: the schema is not migrated yet; retry after `Retry-After` s / `identity_provider_unavailable`: the token's signing key cannot be fetched from the identity provider right now; retry after `Retry-After` s.
 * @typedef {("database_unavailable" | "database_not_migrated" | "identity_provider_unavailable")} DatabaseUnavailableOrDatabaseNotMigratedOrIdentityProviderUnavailableCode
 */

/**
 * An ErrorBody whose `error` is `database_unavailable`, `database_not_migrated` or `identity_provider_unavailable`.
 * @typedef {Object} DatabaseUnavailableOrDatabaseNotMigratedOrIdentityProviderUnavailableError
 * @property {DatabaseUnavailableOrDatabaseNotMigratedOrIdentityProviderUnavailableCode} error
 * @property {string} detail
 * @property {(Array<FieldError> | null)} fields
 */

/**
 * The `error` codes DatabaseUnavailableOrDatabaseNotMigratedOrStreamsUnavailableOrIdentityProviderUnavailableError carries: `database_unavailable`: the database cannot be reached right now; retry after `Retry-After` s / `database_not_migrated`: the schema is not migrated yet; retry after `Retry-After` s / `streams_unavailable`: this process follows as many runs as it can or is shutting down; refused before the stream starts, retry / `identity_provider_unavailable`: the token's signing key cannot be fetched from the identity provider right now; retry after `Retry-After` s.
 * @typedef {("database_unavailable" | "database_not_migrated" | "streams_unavailable" | "identity_provider_unavailable")} DatabaseUnavailableOrDatabaseNotMigratedOrStreamsUnavailableOrIdentityProviderUnavailableCode
 */

/**
 * An ErrorBody whose `error` is `database_unavailable`, `database_not_migrated`, `streams_unavailable` or `identity_provider_unavailable`.
 * @typedef {Object} DatabaseUnavailableOrDatabaseNotMigratedOrStreamsUnavailableOrIdentityProviderUnavailableError
 * @property {DatabaseUnavailableOrDatabaseNotMigratedOrStreamsUnavailableOrIdentityProviderUnavailableCode} error
 * @property {string} detail
 * @property {(Array<FieldError> | null)} fields
 */

/**
 * @typedef {Object} Decision
 * @property {DecisionType} type
 * @property {(string | null)} [message]
 * @property {(EditedAction | null)} [edited_action]
 * @property {(Record<string, any> | null)} [args]
 */

/**
 * @typedef {("approve" | "reject" | "edit" | "respond")} DecisionType
 */

/**
 * @typedef {Object} DeltaEvent
 * @property {"delta"} type
 * @property {(string | null)} lc_id
 * @property {string} text
 * @property {(string | null)} node
 */

/**
 * @typedef {Object} DocumentInfo
 * @property {string} id uuid
 * @property {string} kb
 * @property {string} title
 * @property {string} source
 * @property {string} url
 * @property {number} chunks
 * @property {string} created_at date-time
 */

/**
 * @typedef {Object} DocumentOut
 * @property {string} id uuid
 * @property {string} kb
 * @property {string} title
 * @property {number} chunks
 */

/**
 * @typedef {Object} DocumentPage
 * @property {Array<DocumentInfo>} items
 * @property {(string | null)} next_cursor
 */

/**
 * @typedef {Object} EditMessageIn
 * @property {string} content length 1..200000
 */

/**
 * @typedef {Object} EditedAction
 * @property {Record<string, any>} args
 * @property {(string | null)} [name]
 */

/**
 * @typedef {Object} ErrorBody
 * @property {ErrorCode} error
 * @property {string} detail
 * @property {(Array<FieldError> | null)} fields
 */

/**
 * Every ``error`` value the API answers with (tests/unit/test_error_codes.py keeps it complete: an enum a client generated must never meet a value it does not know).
 * @typedef {("validation_error" | "unauthorized" | "invalid_token" | "forbidden" | "not_found" | "method_not_allowed" | "conflict" | "thread_busy" | "invalid_state" | "request_not_queued" | "payload_too_large" | "request_header_too_large" | "request_timeout" | "unsupported_media_type" | "unprocessable" | "nothing_to_compress" | "not_supported" | "webhook_refused" | "not_implemented" | "unknown_agent" | "agent_unavailable" | "agent_mismatch" | "idempotency_key_reused" | "checkpoint_not_found" | "checkpoint_not_forkable" | "invalid_tool_arguments" | "rate_limited" | "too_many_streams" | "internal_error" | "compression_failed" | "unavailable" | "database_unavailable" | "database_not_migrated" | "streams_unavailable" | "identity_provider_unavailable" | "workdir_unavailable" | "http_error")} ErrorCode
 */

/**
 * @typedef {Object} FieldError
 * @property {string} field
 * @property {string} message
 */

/**
 * @typedef {Object} ForkOut
 * @property {string} request_id uuid
 * @property {string} message_id uuid
 * @property {string} branch_id uuid
 * @property {"queued"} status default "queued"
 */

/**
 * @typedef {Object} GraphStreamEvent
 * @property {"graph"} type
 * @property {string} mode
 * @property {any} [data]
 */

/**
 * @typedef {Object} HITLRequest
 * @property {Array<ActionRequest>} action_requests
 * @property {Array<ReviewConfig>} review_configs
 */

/**
 * @typedef {Object} HealthOut
 * @property {HealthStatus} status
 * @property {string} detail default ""
 */

/**
 * @typedef {("ok" | "ready" | "starting" | "unavailable" | "migrating")} HealthStatus
 */

/**
 * The `error` codes IdempotencyKeyReusedError carries: `idempotency_key_reused`: the Idempotency-Key was used on this thread with another body.
 * @typedef {("idempotency_key_reused")} IdempotencyKeyReusedCode
 */

/**
 * An ErrorBody whose `error` is `idempotency_key_reused`.
 * @typedef {Object} IdempotencyKeyReusedError
 * @property {IdempotencyKeyReusedCode} error
 * @property {string} detail
 * @property {(Array<FieldError> | null)} fields
 */

/**
 * An ErrorBody whose `error` is `internal_error`.
 * @typedef {Object} InternalError
 * @property {InternalErrorCode} error
 * @property {string} detail
 * @property {(Array<FieldError> | null)} fields
 */

/**
 * The `error` codes InternalError carries: `internal_error`: a server bug; the response's X-Request-ID names it in the log.
 * @typedef {("internal_error")} InternalErrorCode
 */

/**
 * The `error` codes InvalidToolArgumentsError carries: `invalid_tool_arguments`: edited tool arguments do not fit the tool's argument schema.
 * @typedef {("invalid_tool_arguments")} InvalidToolArgumentsCode
 */

/**
 * An ErrorBody whose `error` is `invalid_tool_arguments`.
 * @typedef {Object} InvalidToolArgumentsError
 * @property {InvalidToolArgumentsCode} error
 * @property {string} detail
 * @property {(Array<FieldError> | null)} fields
 */

/**
 * @typedef {Object} KbResult
 * @property {string} id
 * @property {string} doc_id
 * @property {string} source
 * @property {string} title
 * @property {string} url
 * @property {number} score
 * @property {string} content
 */

/**
 * @typedef {Object} KbSearchOut
 * @property {string} query
 * @property {number} count
 * @property {Array<KbResult>} results
 */

/**
 * @typedef {Object} ManualCompression
 * @property {boolean} available
 * @property {(string | null)} reason
 * @property {(string | null)} detail
 */

/**
 * @typedef {Object} MessageAddedEvent
 * @property {"message"} type
 * @property {string} message_id uuid
 * @property {number} seq
 * @property {MessageRole} role
 */

/**
 * @typedef {Object} MessageOut
 * @property {string} id uuid
 * @property {number} seq
 * @property {MessageRole} role
 * @property {string} content
 * @property {(Array<ToolCall> | null)} tool_calls
 * @property {(string | null)} tool_call_id
 * @property {(string | null)} tool_name
 * @property {(string | null)} run_id uuid
 * @property {(string | null)} request_id uuid
 * @property {boolean} withdrawn default false
 * @property {string} created_at date-time
 */

/**
 * @typedef {Object} MessagePage
 * @property {Array<MessageOut>} items
 * @property {(number | null)} next_after_seq
 */

/**
 * @typedef {("user" | "assistant" | "tool")} MessageRole
 */

/**
 * The `error` codes MethodNotAllowedError carries: `method_not_allowed`: the path does not take this method.
 * @typedef {("method_not_allowed")} MethodNotAllowedCode
 */

/**
 * An ErrorBody whose `error` is `method_not_allowed`.
 * @typedef {Object} MethodNotAllowedError
 * @property {MethodNotAllowedCode} error
 * @property {string} detail
 * @property {(Array<FieldError> | null)} fields
 */

/**
 * The `error` codes NotFoundError carries: `not_found`: no such resource for this principal.
 * @typedef {("not_found")} NotFoundCode
 */

/**
 * An ErrorBody whose `error` is `not_found`.
 * @typedef {Object} NotFoundError
 * @property {NotFoundCode} error
 * @property {string} detail
 * @property {(Array<FieldError> | null)} fields
 */

/**
 * The `error` codes NotFoundOrCheckpointNotFoundError carries: `not_found`: no such resource for this principal / `checkpoint_not_found`: checkpoint_not_found.
 * @typedef {("not_found" | "checkpoint_not_found")} NotFoundOrCheckpointNotFoundCode
 */

/**
 * An ErrorBody whose `error` is `not_found` or `checkpoint_not_found`.
 * @typedef {Object} NotFoundOrCheckpointNotFoundError
 * @property {NotFoundOrCheckpointNotFoundCode} error
 * @property {string} detail
 * @property {(Array<FieldError> | null)} fields
 */

/**
 * The `error` codes NothingToCompressOrNotSupportedError carries: `nothing_to_compress`: nothing could be offloaded or summarized / `not_supported`: the thread's agent does not declare the capability this needs, or the request names a feature Threadkeeper does not do (`fields` names it).
 * @typedef {("nothing_to_compress" | "not_supported")} NothingToCompressOrNotSupportedCode
 */

/**
 * An ErrorBody whose `error` is `nothing_to_compress` or `not_supported`.
 * @typedef {Object} NothingToCompressOrNotSupportedError
 * @property {NothingToCompressOrNotSupportedCode} error
 * @property {string} detail
 * @property {(Array<FieldError> | null)} fields
 */

/**
 * @typedef {Object} Offload
 * @property {string} path
 * @property {string} sha256
 * @property {number} chars
 * @property {number} bytes
 * @property {number} original_tokens
 */

/**
 * The `error` codes PayloadTooLargeError carries: `payload_too_large`: the body is over the server's limit (THREADKEEPER_MAX_REQUEST_BYTES).
 * @typedef {("payload_too_large")} PayloadTooLargeCode
 */

/**
 * An ErrorBody whose `error` is `payload_too_large`.
 * @typedef {Object} PayloadTooLargeError
 * @property {PayloadTooLargeCode} error
 * @property {string} detail
 * @property {(Array<FieldError> | null)} fields
 */

/**
 * @typedef {Object} PostMessageIn
 * @property {string} content length 1..200000
 */

/**
 * @typedef {Object} PostMessageOut
 * @property {string} request_id uuid
 * @property {string} message_id uuid
 * @property {"queued"} status default "queued"
 * @property {(string | null)} superseded_run_id uuid
 */

/**
 * @typedef {Object} ProviderRetryEvent
 * @property {"provider_retry"} type
 * @property {ProviderRetryOutcome} outcome
 * @property {number} attempt
 * @property {number} wait_seconds
 * @property {(number | null)} provider_status
 * @property {(string | null)} provider_code
 * @property {string} model default ""
 * @property {(string | null)} discarded_lc_id
 */

/**
 * @typedef {("retrying" | "gave_up")} ProviderRetryOutcome
 */

/**
 * The `error` codes RateLimitedError carries: `rate_limited`: this principal's request rate is over the limit; retry after `Retry-After` s.
 * @typedef {("rate_limited")} RateLimitedCode
 */

/**
 * An ErrorBody whose `error` is `rate_limited`.
 * @typedef {Object} RateLimitedError
 * @property {RateLimitedCode} error
 * @property {string} detail
 * @property {(Array<FieldError> | null)} fields
 */

/**
 * The `error` codes RateLimitedOrTooManyStreamsError carries: `rate_limited`: this principal's request rate is over the limit; retry after `Retry-After` s / `too_many_streams`: this principal's open event streams and long-polls are at the limit; retry after `Retry-After` s.
 * @typedef {("rate_limited" | "too_many_streams")} RateLimitedOrTooManyStreamsCode
 */

/**
 * An ErrorBody whose `error` is `rate_limited` or `too_many_streams`.
 * @typedef {Object} RateLimitedOrTooManyStreamsError
 * @property {RateLimitedOrTooManyStreamsCode} error
 * @property {string} detail
 * @property {(Array<FieldError> | null)} fields
 */

/**
 * @typedef {Object} RegenerateIn
 * @property {(string | null)} [message_id] uuid
 */

/**
 * The `error` codes RequestHeaderTooLargeError carries: `request_header_too_large`: the request line and headers exceed the server's limit.
 * @typedef {("request_header_too_large")} RequestHeaderTooLargeCode
 */

/**
 * An ErrorBody whose `error` is `request_header_too_large`.
 * @typedef {Object} RequestHeaderTooLargeError
 * @property {RequestHeaderTooLargeCode} error
 * @property {string} detail
 * @property {(Array<FieldError> | null)} fields
 */

/**
 * @typedef {Object} RequestOut
 * @property {string} id uuid
 * @property {string} thread_id uuid
 * @property {string} message_id uuid
 * @property {RequestStatus} status
 * @property {(string | null)} run_id uuid
 * @property {(RunStatus | null)} run_status
 * @property {string} created_at date-time
 */

/**
 * @typedef {("queued" | "dispatched" | "cancelled")} RequestStatus
 */

/**
 * The `error` codes RequestTimeoutError carries: `request_timeout`: the request head did not arrive in time (the connection is closed).
 * @typedef {("request_timeout")} RequestTimeoutCode
 */

/**
 * An ErrorBody whose `error` is `request_timeout`.
 * @typedef {Object} RequestTimeoutError
 * @property {RequestTimeoutCode} error
 * @property {string} detail
 * @property {(Array<FieldError> | null)} fields
 */

/**
 * @typedef {Object} ResumeIn
 * @property {(Array<Decision> | null)} [decisions]
 * @property {any} [resume]
 */

/**
 * @typedef {Object} ReviewConfig
 * @property {string} action_name
 * @property {Array<DecisionType>} allowed_decisions
 * @property {(Record<string, any> | null)} args_schema
 */

/**
 * @typedef {("provider_error" | "context_overflow" | "database_unavailable" | "tool_error" | "internal_error" | "lease_expired" | "worker_stopped" | "cancelled" | "agent_unavailable" | "graph_error" | "superseded")} RunErrorCode
 */

/**
 * One StreamRunEvents frame's `data`; its `type` is the frame's `event`.
 * @typedef {(StatusEvent | DeltaEvent | MessageAddedEvent | CompressionEvent | ProviderRetryEvent)} RunEvent
 */

/**
 * @typedef {("running" | "interrupted" | "resumed" | "completed" | "failed" | "cancelled")} RunEventStatus
 */

/**
 * @typedef {Object} RunList
 * @property {Array<RunOut>} items
 */

/**
 * @typedef {Object} RunOut
 * @property {string} id uuid
 * @property {string} thread_id uuid
 * @property {string} request_id uuid
 * @property {RunStatus} status
 * @property {(string | null)} error
 * @property {(RunErrorCode | null)} error_code
 * @property {(number | null)} provider_status
 * @property {(string | null)} provider_code
 * @property {(HITLRequest | null)} interrupt
 * @property {any} interrupt_value
 * @property {number} input_tokens default 0
 * @property {number} output_tokens default 0
 * @property {number} model_calls default 0
 * @property {string} created_at date-time
 * @property {(string | null)} started_at date-time
 * @property {(string | null)} finished_at date-time
 */

/**
 * @typedef {("running" | "interrupted" | "completed" | "failed" | "cancelled")} RunStatus
 */

/**
 * @typedef {Object} StateEvent
 * @property {"state"} type
 * @property {Record<string, any>} [values]
 */

/**
 * @typedef {Object} StateMessage
 * @property {(string | null)} id
 * @property {StateMessageType} type
 * @property {string} content
 * @property {(string | null)} name
 * @property {(Array<ToolCall> | null)} tool_calls
 * @property {(string | null)} tool_call_id
 * @property {(Offload | null)} offload
 * @property {boolean} is_summary default false
 */

/**
 * @typedef {("human" | "ai" | "tool" | "system")} StateMessageType
 */

/**
 * @typedef {Object} StatusEvent
 * @property {"status"} type
 * @property {RunEventStatus} status
 * @property {boolean} final default false
 * @property {(string | null)} error
 * @property {(RunErrorCode | null)} error_code
 * @property {(number | null)} provider_status
 * @property {(string | null)} provider_code
 * @property {(HITLRequest | null)} interrupt
 * @property {any} interrupt_value
 * @property {(string | null)} request_id uuid
 * @property {boolean} handoff default false
 */

/**
 * @typedef {Object} StreamTokenOut
 * @property {string} token
 * @property {string} run_id uuid
 * @property {string} expires_at date-time
 */

/**
 * @typedef {Object} SummaryInfo
 * @property {boolean} present
 * @property {number} summarized_messages default 0
 * @property {(string | null)} text
 */

/**
 * The `error` codes ThreadBusyError carries: `thread_busy`: the thread has a running or interrupted run or queued input, or its lock is held; retry after `Retry-After` s.
 * @typedef {("thread_busy")} ThreadBusyCode
 */

/**
 * An ErrorBody whose `error` is `thread_busy`.
 * @typedef {Object} ThreadBusyError
 * @property {ThreadBusyCode} error
 * @property {string} detail
 * @property {(Array<FieldError> | null)} fields
 */

/**
 * The `error` codes ThreadBusyOrAgentUnavailableError carries: `thread_busy`: the thread has a running or interrupted run or queued input, or its lock is held; retry after `Retry-After` s / `agent_unavailable`: the thread's agent is not registered any more, or cannot run now (an MCP server it uses does not answer: retried, `Retry-After` names the next attempt).
 * @typedef {("thread_busy" | "agent_unavailable")} ThreadBusyOrAgentUnavailableCode
 */

/**
 * An ErrorBody whose `error` is `thread_busy` or `agent_unavailable`.
 * @typedef {Object} ThreadBusyOrAgentUnavailableError
 * @property {ThreadBusyOrAgentUnavailableCode} error
 * @property {string} detail
 * @property {(Array<FieldError> | null)} fields
 */

/**
 * The `error` codes ThreadBusyOrInvalidStateError carries: `thread_busy`: the thread has a running or interrupted run or queued input, or its lock is held; retry after `Retry-After` s / `invalid_state`: the run is not in a state that allows this.
 * @typedef {("thread_busy" | "invalid_state")} ThreadBusyOrInvalidStateCode
 */

/**
 * An ErrorBody whose `error` is `thread_busy` or `invalid_state`.
 * @typedef {Object} ThreadBusyOrInvalidStateError
 * @property {ThreadBusyOrInvalidStateCode} error
 * @property {string} detail
 * @property {(Array<FieldError> | null)} fields
 */

/**
 * The `error` codes ThreadBusyOrInvalidStateOrAgentUnavailableError carries: `thread_busy`: the thread has a running or interrupted run or queued input, or its lock is held; retry after `Retry-After` s / `invalid_state`: the run is not in a state that allows this / `agent_unavailable`: the thread's agent is not registered any more, or cannot run now (an MCP server it uses does not answer: retried, `Retry-After` names the next attempt).
 * @typedef {("thread_busy" | "invalid_state" | "agent_unavailable")} ThreadBusyOrInvalidStateOrAgentUnavailableCode
 */

/**
 * An ErrorBody whose `error` is `thread_busy`, `invalid_state` or `agent_unavailable`.
 * @typedef {Object} ThreadBusyOrInvalidStateOrAgentUnavailableError
 * @property {ThreadBusyOrInvalidStateOrAgentUnavailableCode} error
 * @property {string} detail
 * @property {(Array<FieldError> | null)} fields
 */

/**
 * The `error` codes ThreadBusyOrRequestNotQueuedError carries: `thread_busy`: the thread has a running or interrupted run or queued input, or its lock is held; retry after `Retry-After` s / `request_not_queued`: a run already took this request; cancel the run instead.
 * @typedef {("thread_busy" | "request_not_queued")} ThreadBusyOrRequestNotQueuedCode
 */

/**
 * An ErrorBody whose `error` is `thread_busy` or `request_not_queued`.
 * @typedef {Object} ThreadBusyOrRequestNotQueuedError
 * @property {ThreadBusyOrRequestNotQueuedCode} error
 * @property {string} detail
 * @property {(Array<FieldError> | null)} fields
 */

/**
 * @typedef {Object} ThreadOut
 * @property {string} id uuid
 * @property {string} title
 * @property {string} agent_id
 * @property {ThreadStatus} status
 * @property {Record<string, any>} metadata
 * @property {string} created_at date-time
 * @property {string} updated_at date-time
 */

/**
 * @typedef {Object} ThreadPage
 * @property {Array<ThreadOut>} items
 * @property {(string | null)} next_cursor
 */

/**
 * @typedef {("idle" | "running" | "interrupted" | "queued")} ThreadStatus
 */

/**
 * @typedef {Object} ToolCall
 * @property {(string | null)} id
 * @property {string} name
 * @property {Record<string, any>} args
 */

/**
 * The `error` codes UnauthorizedOrInvalidTokenError carries: `unauthorized`: no credential: send `Authorization: Bearer <API key or token>` / `invalid_token`: the bearer credential was refused: an unknown API key, or a token that is invalid, expired or not issued for this service (`WWW-Authenticate: Bearer error="invalid_token"`).
 * @typedef {("unauthorized" | "invalid_token")} UnauthorizedOrInvalidTokenCode
 */

/**
 * An ErrorBody whose `error` is `unauthorized` or `invalid_token`.
 * @typedef {Object} UnauthorizedOrInvalidTokenError
 * @property {UnauthorizedOrInvalidTokenCode} error
 * @property {string} detail
 * @property {(Array<FieldError> | null)} fields
 */

/**
 * The `error` codes UnknownAgentError carries: `unknown_agent`: `agent_id` names no registered agent (ListAgents lists them).
 * @typedef {("unknown_agent")} UnknownAgentCode
 */

/**
 * An ErrorBody whose `error` is `unknown_agent`.
 * @typedef {Object} UnknownAgentError
 * @property {UnknownAgentCode} error
 * @property {string} detail
 * @property {(Array<FieldError> | null)} fields
 */

/**
 * @typedef {Object} UpdateEvent
 * @property {"update"} type
 * @property {string} node
 * @property {any} [update]
 */

/**
 * @typedef {Object} UpdateThreadIn
 * @property {(string)} [title] length 0..500
 * @property {(Record<string, any>)} [metadata]
 */

/**
 * An ErrorBody whose `error` is `validation_error`.
 * @typedef {Object} ValidationError
 * @property {ValidationErrorCode} error
 * @property {string} detail
 * @property {(Array<FieldError> | null)} fields
 */

/**
 * The `error` codes ValidationError carries: `validation_error`: malformed JSON, an unknown field, a bad value, parameter or id, two Authorization headers.
 * @typedef {("validation_error")} ValidationErrorCode
 */

/**
 * The `error` codes WorkdirUnavailableError carries: `workdir_unavailable`: the Workdir could not be written; nothing was changed.
 * @typedef {("workdir_unavailable")} WorkdirUnavailableCode
 */

/**
 * An ErrorBody whose `error` is `workdir_unavailable`.
 * @typedef {Object} WorkdirUnavailableError
 * @property {WorkdirUnavailableCode} error
 * @property {string} detail
 * @property {(Array<FieldError> | null)} fields
 */

// --- operations -----------------------------------------------------------------------------------

/**
 * AddDocument: POST /v1/knowledge-bases/{kb}/documents (201)
 *
 * @param {ClientConfig} config
 * @param {{kb: string, body: AddDocumentIn}} args
 *   - kb: pattern ^[A-Za-z0-9_.-]{1,100}$
 * @param {RequestOptions} [options]
 * @returns {Promise<DocumentOut>}
 * @throws {ApiError} 400 validation_error
 * @throws {ApiError} 401 unauthorized / invalid_token
 * @throws {ApiError} 405 method_not_allowed
 * @throws {ApiError} 408 request_timeout
 * @throws {ApiError} 413 payload_too_large
 * @throws {ApiError} 429 rate_limited
 * @throws {ApiError} 431 request_header_too_large
 * @throws {ApiError} 500 internal_error
 * @throws {ApiError} 503 database_unavailable / database_not_migrated / identity_provider_unavailable
 */
export function addDocument(config, args = {}, options = {}) {
  return request(config, {"method": "POST", "path": "/v1/knowledge-bases/{kb}/documents", "pathParams": ["kb"], "queryParams": [], "hasBody": true, "auth": true}, args, options);
}

/**
 * CancelRequest: POST /v1/requests/{request_id}/cancel (200)
 *
 * Withdraw a queued message before any run takes it: the request becomes `cancelled`, the user message stays in ListMessages with `withdrawn: true` and never reaches the model. Repeating it answers the same. Once dispatched: 409 `request_not_queued` (cancel the run with CancelRun instead).
 *
 * @param {ClientConfig} config
 * @param {{request_id: string}} args
 *   - request_id: uuid
 * @param {RequestOptions} [options]
 * @returns {Promise<RequestOut>}
 * @throws {ApiError} 400 validation_error
 * @throws {ApiError} 401 unauthorized / invalid_token
 * @throws {ApiError} 404 not_found
 * @throws {ApiError} 405 method_not_allowed
 * @throws {ApiError} 408 request_timeout
 * @throws {ApiError} 409 thread_busy / request_not_queued
 * @throws {ApiError} 429 rate_limited
 * @throws {ApiError} 431 request_header_too_large
 * @throws {ApiError} 500 internal_error
 * @throws {ApiError} 503 database_unavailable / database_not_migrated / identity_provider_unavailable
 */
export function cancelRequest(config, args = {}, options = {}) {
  return request(config, {"method": "POST", "path": "/v1/requests/{request_id}/cancel", "pathParams": ["request_id"], "queryParams": [], "hasBody": false, "auth": true}, args, options);
}

/**
 * CancelRun: POST /v1/runs/{run_id}/cancel (200)
 *
 * @param {ClientConfig} config
 * @param {{run_id: string}} args
 *   - run_id: uuid
 * @param {RequestOptions} [options]
 * @returns {Promise<RunOut>}
 * @throws {ApiError} 400 validation_error
 * @throws {ApiError} 401 unauthorized / invalid_token
 * @throws {ApiError} 404 not_found
 * @throws {ApiError} 405 method_not_allowed
 * @throws {ApiError} 408 request_timeout
 * @throws {ApiError} 409 thread_busy / invalid_state
 * @throws {ApiError} 429 rate_limited
 * @throws {ApiError} 431 request_header_too_large
 * @throws {ApiError} 500 internal_error
 * @throws {ApiError} 503 database_unavailable / database_not_migrated / identity_provider_unavailable
 */
export function cancelRun(config, args = {}, options = {}) {
  return request(config, {"method": "POST", "path": "/v1/runs/{run_id}/cancel", "pathParams": ["run_id"], "queryParams": [], "hasBody": false, "auth": true}, args, options);
}

/**
 * CompressContext: POST /v1/threads/{thread_id}/context/compress (200)
 *
 * Synchronous manual compression with the thread's own agent (its summarizer and budget). Allowed only when the thread has no running or interrupted run and no queued request; otherwise 409 thread_busy (never queued). 422 not_supported: the agent lacks the manual_compression capability; 409 agent_unavailable: the thread's agent is not registered or could not start. 507 workdir_unavailable: large tool results had to be offloaded but the Workdir could not be written; nothing was changed.
 *
 * @param {ClientConfig} config
 * @param {{thread_id: string}} args
 *   - thread_id: uuid
 * @param {RequestOptions} [options]
 * @returns {Promise<CompressOut>}
 * @throws {ApiError} 400 validation_error
 * @throws {ApiError} 401 unauthorized / invalid_token
 * @throws {ApiError} 404 not_found
 * @throws {ApiError} 405 method_not_allowed
 * @throws {ApiError} 408 request_timeout
 * @throws {ApiError} 409 thread_busy / agent_unavailable
 * @throws {ApiError} 422 nothing_to_compress / not_supported
 * @throws {ApiError} 429 rate_limited
 * @throws {ApiError} 431 request_header_too_large
 * @throws {ApiError} 500 internal_error
 * @throws {ApiError} 502 compression_failed
 * @throws {ApiError} 503 database_unavailable / database_not_migrated / identity_provider_unavailable
 * @throws {ApiError} 507 workdir_unavailable
 */
export function compressContext(config, args = {}, options = {}) {
  return request(config, {"method": "POST", "path": "/v1/threads/{thread_id}/context/compress", "pathParams": ["thread_id"], "queryParams": [], "hasBody": false, "auth": true}, args, options);
}

/**
 * CreateStreamToken: POST /v1/runs/{run_id}/stream-token (200)
 *
 * A short-lived token that lets a browser's native EventSource (which cannot send an Authorization header) follow this run: `new EventSource(`/v1/runs/{run_id}/events?stream_token=<token>`)`. It is accepted by StreamRunEvents of this run only, starts (or resumes) a stream until `expires_at`, and never reveals the API key. After it expires, get a new one and reconnect with `after=<last event id>`.
 *
 * @param {ClientConfig} config
 * @param {{run_id: string}} args
 *   - run_id: uuid
 * @param {RequestOptions} [options]
 * @returns {Promise<StreamTokenOut>}
 * @throws {ApiError} 400 validation_error
 * @throws {ApiError} 401 unauthorized / invalid_token
 * @throws {ApiError} 404 not_found
 * @throws {ApiError} 405 method_not_allowed
 * @throws {ApiError} 408 request_timeout
 * @throws {ApiError} 429 rate_limited
 * @throws {ApiError} 431 request_header_too_large
 * @throws {ApiError} 500 internal_error
 * @throws {ApiError} 503 database_unavailable / database_not_migrated / identity_provider_unavailable
 */
export function createStreamToken(config, args = {}, options = {}) {
  return request(config, {"method": "POST", "path": "/v1/runs/{run_id}/stream-token", "pathParams": ["run_id"], "queryParams": [], "hasBody": false, "auth": true}, args, options);
}

/**
 * CreateThread: POST /v1/threads (201)
 *
 * 422 unknown_agent: `agent_id` names no registered agent (ListAgents).
 *
 * @param {ClientConfig} config
 * @param {{body: CreateThreadIn}} args
 * @param {RequestOptions} [options]
 * @returns {Promise<ThreadOut>}
 * @throws {ApiError} 400 validation_error
 * @throws {ApiError} 401 unauthorized / invalid_token
 * @throws {ApiError} 405 method_not_allowed
 * @throws {ApiError} 408 request_timeout
 * @throws {ApiError} 413 payload_too_large
 * @throws {ApiError} 422 unknown_agent
 * @throws {ApiError} 429 rate_limited
 * @throws {ApiError} 431 request_header_too_large
 * @throws {ApiError} 500 internal_error
 * @throws {ApiError} 503 database_unavailable / database_not_migrated / identity_provider_unavailable
 */
export function createThread(config, args = {}, options = {}) {
  return request(config, {"method": "POST", "path": "/v1/threads", "pathParams": [], "queryParams": [], "hasBody": true, "auth": true}, args, options);
}

/**
 * DeleteDocument: DELETE /v1/knowledge-bases/{kb}/documents/{document_id} (204)
 *
 * @param {ClientConfig} config
 * @param {{kb: string, document_id: string}} args
 *   - kb: pattern ^[A-Za-z0-9_.-]{1,100}$
 *   - document_id: uuid
 * @param {RequestOptions} [options]
 * @returns {Promise<void>}
 * @throws {ApiError} 400 validation_error
 * @throws {ApiError} 401 unauthorized / invalid_token
 * @throws {ApiError} 404 not_found
 * @throws {ApiError} 405 method_not_allowed
 * @throws {ApiError} 408 request_timeout
 * @throws {ApiError} 429 rate_limited
 * @throws {ApiError} 431 request_header_too_large
 * @throws {ApiError} 500 internal_error
 * @throws {ApiError} 503 database_unavailable / database_not_migrated / identity_provider_unavailable
 */
export function deleteDocument(config, args = {}, options = {}) {
  return request(config, {"method": "DELETE", "path": "/v1/knowledge-bases/{kb}/documents/{document_id}", "pathParams": ["kb", "document_id"], "queryParams": [], "hasBody": false, "auth": true}, args, options);
}

/**
 * DeleteThread: DELETE /v1/threads/{thread_id} (204)
 *
 * @param {ClientConfig} config
 * @param {{thread_id: string}} args
 *   - thread_id: uuid
 * @param {RequestOptions} [options]
 * @returns {Promise<void>}
 * @throws {ApiError} 400 validation_error
 * @throws {ApiError} 401 unauthorized / invalid_token
 * @throws {ApiError} 404 not_found
 * @throws {ApiError} 405 method_not_allowed
 * @throws {ApiError} 408 request_timeout
 * @throws {ApiError} 409 thread_busy
 * @throws {ApiError} 429 rate_limited
 * @throws {ApiError} 431 request_header_too_large
 * @throws {ApiError} 500 internal_error
 * @throws {ApiError} 503 database_unavailable / database_not_migrated / identity_provider_unavailable
 */
export function deleteThread(config, args = {}, options = {}) {
  return request(config, {"method": "DELETE", "path": "/v1/threads/{thread_id}", "pathParams": ["thread_id"], "queryParams": [], "hasBody": false, "auth": true}, args, options);
}

/**
 * EditMessage: POST /v1/threads/{thread_id}/messages/{message_id}/edit (202)
 *
 * @param {ClientConfig} config
 * @param {{thread_id: string, message_id: string, body: EditMessageIn}} args
 *   - thread_id: uuid
 *   - message_id: uuid
 * @param {RequestOptions} [options]
 * @returns {Promise<ForkOut>}
 * @throws {ApiError} 400 validation_error
 * @throws {ApiError} 401 unauthorized / invalid_token
 * @throws {ApiError} 404 not_found / checkpoint_not_found
 * @throws {ApiError} 405 method_not_allowed
 * @throws {ApiError} 408 request_timeout
 * @throws {ApiError} 409 thread_busy / agent_unavailable
 * @throws {ApiError} 413 payload_too_large
 * @throws {ApiError} 422 checkpoint_not_forkable
 * @throws {ApiError} 429 rate_limited
 * @throws {ApiError} 431 request_header_too_large
 * @throws {ApiError} 500 internal_error
 * @throws {ApiError} 503 database_unavailable / database_not_migrated / identity_provider_unavailable
 */
export function editMessage(config, args = {}, options = {}) {
  return request(config, {"method": "POST", "path": "/v1/threads/{thread_id}/messages/{message_id}/edit", "pathParams": ["thread_id", "message_id"], "queryParams": [], "hasBody": true, "auth": true}, args, options);
}

/**
 * GetAgent: GET /v1/agents/{agent_id} (200)
 *
 * @param {ClientConfig} config
 * @param {{agent_id: string}} args
 *   - agent_id: pattern ^[A-Za-z0-9_.-]{1,100}$
 * @param {RequestOptions} [options]
 * @returns {Promise<AgentOut>}
 * @throws {ApiError} 400 validation_error
 * @throws {ApiError} 401 unauthorized / invalid_token
 * @throws {ApiError} 404 not_found
 * @throws {ApiError} 405 method_not_allowed
 * @throws {ApiError} 408 request_timeout
 * @throws {ApiError} 429 rate_limited
 * @throws {ApiError} 431 request_header_too_large
 * @throws {ApiError} 500 internal_error
 * @throws {ApiError} 503 database_unavailable / database_not_migrated / identity_provider_unavailable
 */
export function getAgent(config, args = {}, options = {}) {
  return request(config, {"method": "GET", "path": "/v1/agents/{agent_id}", "pathParams": ["agent_id"], "queryParams": [], "hasBody": false, "auth": true}, args, options);
}

/**
 * GetAgentState: GET /v1/threads/{thread_id}/agent-state (200)
 *
 * @param {ClientConfig} config
 * @param {{thread_id: string}} args
 *   - thread_id: uuid
 * @param {RequestOptions} [options]
 * @returns {Promise<AgentStateOut>}
 * @throws {ApiError} 400 validation_error
 * @throws {ApiError} 401 unauthorized / invalid_token
 * @throws {ApiError} 404 not_found
 * @throws {ApiError} 405 method_not_allowed
 * @throws {ApiError} 408 request_timeout
 * @throws {ApiError} 429 rate_limited
 * @throws {ApiError} 431 request_header_too_large
 * @throws {ApiError} 500 internal_error
 * @throws {ApiError} 503 database_unavailable / database_not_migrated / identity_provider_unavailable
 */
export function getAgentState(config, args = {}, options = {}) {
  return request(config, {"method": "GET", "path": "/v1/threads/{thread_id}/agent-state", "pathParams": ["thread_id"], "queryParams": [], "hasBody": false, "auth": true}, args, options);
}

/**
 * GetRequest: GET /v1/requests/{request_id} (200)
 *
 * PostMessage's `request_id`: `queued` until a worker takes it, then `dispatched` with the `run_id` answering it (wait for it with WaitRun); `cancelled` if withdrawn.
 *
 * @param {ClientConfig} config
 * @param {{request_id: string}} args
 *   - request_id: uuid
 * @param {RequestOptions} [options]
 * @returns {Promise<RequestOut>}
 * @throws {ApiError} 400 validation_error
 * @throws {ApiError} 401 unauthorized / invalid_token
 * @throws {ApiError} 404 not_found
 * @throws {ApiError} 405 method_not_allowed
 * @throws {ApiError} 408 request_timeout
 * @throws {ApiError} 429 rate_limited
 * @throws {ApiError} 431 request_header_too_large
 * @throws {ApiError} 500 internal_error
 * @throws {ApiError} 503 database_unavailable / database_not_migrated / identity_provider_unavailable
 */
export function getRequest(config, args = {}, options = {}) {
  return request(config, {"method": "GET", "path": "/v1/requests/{request_id}", "pathParams": ["request_id"], "queryParams": [], "hasBody": false, "auth": true}, args, options);
}

/**
 * GetRun: GET /v1/runs/{run_id} (200)
 *
 * @param {ClientConfig} config
 * @param {{run_id: string}} args
 *   - run_id: uuid
 * @param {RequestOptions} [options]
 * @returns {Promise<RunOut>}
 * @throws {ApiError} 400 validation_error
 * @throws {ApiError} 401 unauthorized / invalid_token
 * @throws {ApiError} 404 not_found
 * @throws {ApiError} 405 method_not_allowed
 * @throws {ApiError} 408 request_timeout
 * @throws {ApiError} 429 rate_limited
 * @throws {ApiError} 431 request_header_too_large
 * @throws {ApiError} 500 internal_error
 * @throws {ApiError} 503 database_unavailable / database_not_migrated / identity_provider_unavailable
 */
export function getRun(config, args = {}, options = {}) {
  return request(config, {"method": "GET", "path": "/v1/runs/{run_id}", "pathParams": ["run_id"], "queryParams": [], "hasBody": false, "auth": true}, args, options);
}

/**
 * GetThread: GET /v1/threads/{thread_id} (200)
 *
 * @param {ClientConfig} config
 * @param {{thread_id: string}} args
 *   - thread_id: uuid
 * @param {RequestOptions} [options]
 * @returns {Promise<ThreadOut>}
 * @throws {ApiError} 400 validation_error
 * @throws {ApiError} 401 unauthorized / invalid_token
 * @throws {ApiError} 404 not_found
 * @throws {ApiError} 405 method_not_allowed
 * @throws {ApiError} 408 request_timeout
 * @throws {ApiError} 429 rate_limited
 * @throws {ApiError} 431 request_header_too_large
 * @throws {ApiError} 500 internal_error
 * @throws {ApiError} 503 database_unavailable / database_not_migrated / identity_provider_unavailable
 */
export function getThread(config, args = {}, options = {}) {
  return request(config, {"method": "GET", "path": "/v1/threads/{thread_id}", "pathParams": ["thread_id"], "queryParams": [], "hasBody": false, "auth": true}, args, options);
}

/**
 * Health: GET /health (200)
 *
 * @param {ClientConfig} config
 * @param {{}} [args]
 * @param {RequestOptions} [options]
 * @returns {Promise<HealthOut>}
 * @throws {ApiError} 400 validation_error
 * @throws {ApiError} 405 method_not_allowed
 * @throws {ApiError} 408 request_timeout
 * @throws {ApiError} 431 request_header_too_large
 * @throws {ApiError} 500 internal_error
 */
export function health(config, args = {}, options = {}) {
  return request(config, {"method": "GET", "path": "/health", "pathParams": [], "queryParams": [], "hasBody": false, "auth": false}, args, options);
}

/**
 * ListAgents: GET /v1/agents (200)
 *
 * @param {ClientConfig} config
 * @param {{}} [args]
 * @param {RequestOptions} [options]
 * @returns {Promise<AgentList>}
 * @throws {ApiError} 400 validation_error
 * @throws {ApiError} 401 unauthorized / invalid_token
 * @throws {ApiError} 405 method_not_allowed
 * @throws {ApiError} 408 request_timeout
 * @throws {ApiError} 429 rate_limited
 * @throws {ApiError} 431 request_header_too_large
 * @throws {ApiError} 500 internal_error
 * @throws {ApiError} 503 database_unavailable / database_not_migrated / identity_provider_unavailable
 */
export function listAgents(config, args = {}, options = {}) {
  return request(config, {"method": "GET", "path": "/v1/agents", "pathParams": [], "queryParams": [], "hasBody": false, "auth": true}, args, options);
}

/**
 * ListBranches: GET /v1/threads/{thread_id}/branches (200)
 *
 * @param {ClientConfig} config
 * @param {{thread_id: string}} args
 *   - thread_id: uuid
 * @param {RequestOptions} [options]
 * @returns {Promise<BranchPage>}
 * @throws {ApiError} 400 validation_error
 * @throws {ApiError} 401 unauthorized / invalid_token
 * @throws {ApiError} 404 not_found
 * @throws {ApiError} 405 method_not_allowed
 * @throws {ApiError} 408 request_timeout
 * @throws {ApiError} 429 rate_limited
 * @throws {ApiError} 431 request_header_too_large
 * @throws {ApiError} 500 internal_error
 * @throws {ApiError} 503 database_unavailable / database_not_migrated / identity_provider_unavailable
 */
export function listBranches(config, args = {}, options = {}) {
  return request(config, {"method": "GET", "path": "/v1/threads/{thread_id}/branches", "pathParams": ["thread_id"], "queryParams": [], "hasBody": false, "auth": true}, args, options);
}

/**
 * ListDocuments: GET /v1/knowledge-bases/{kb}/documents (200)
 *
 * @param {ClientConfig} config
 * @param {{kb: string, limit?: number, cursor?: (string | null)}} args
 *   - kb: pattern ^[A-Za-z0-9_.-]{1,100}$
 *   - limit: 1..200; default 50
 * @param {RequestOptions} [options]
 * @returns {Promise<DocumentPage>}
 * @throws {ApiError} 400 validation_error
 * @throws {ApiError} 401 unauthorized / invalid_token
 * @throws {ApiError} 405 method_not_allowed
 * @throws {ApiError} 408 request_timeout
 * @throws {ApiError} 429 rate_limited
 * @throws {ApiError} 431 request_header_too_large
 * @throws {ApiError} 500 internal_error
 * @throws {ApiError} 503 database_unavailable / database_not_migrated / identity_provider_unavailable
 */
export function listDocuments(config, args = {}, options = {}) {
  return request(config, {"method": "GET", "path": "/v1/knowledge-bases/{kb}/documents", "pathParams": ["kb"], "queryParams": ["limit", "cursor"], "hasBody": false, "auth": true}, args, options);
}

/**
 * ListMessages: GET /v1/threads/{thread_id}/messages (200)
 *
 * @param {ClientConfig} config
 * @param {{thread_id: string, after_seq?: number, limit?: number, branch_id?: (string | null)}} args
 *   - thread_id: uuid
 *   - after_seq: 0..9007199254740991; default 0
 *   - limit: 1..1000; default 200
 *   - branch_id: The branch to read (ListBranches; the thread's id is its first branch). Default: the current one. (uuid)
 * @param {RequestOptions} [options]
 * @returns {Promise<MessagePage>}
 * @throws {ApiError} 400 validation_error
 * @throws {ApiError} 401 unauthorized / invalid_token
 * @throws {ApiError} 404 not_found
 * @throws {ApiError} 405 method_not_allowed
 * @throws {ApiError} 408 request_timeout
 * @throws {ApiError} 429 rate_limited
 * @throws {ApiError} 431 request_header_too_large
 * @throws {ApiError} 500 internal_error
 * @throws {ApiError} 503 database_unavailable / database_not_migrated / identity_provider_unavailable
 */
export function listMessages(config, args = {}, options = {}) {
  return request(config, {"method": "GET", "path": "/v1/threads/{thread_id}/messages", "pathParams": ["thread_id"], "queryParams": ["after_seq", "limit", "branch_id"], "hasBody": false, "auth": true}, args, options);
}

/**
 * ListRuns: GET /v1/threads/{thread_id}/runs (200)
 *
 * @param {ClientConfig} config
 * @param {{thread_id: string, limit?: number}} args
 *   - thread_id: uuid
 *   - limit: 1..200; default 50
 * @param {RequestOptions} [options]
 * @returns {Promise<RunList>}
 * @throws {ApiError} 400 validation_error
 * @throws {ApiError} 401 unauthorized / invalid_token
 * @throws {ApiError} 404 not_found
 * @throws {ApiError} 405 method_not_allowed
 * @throws {ApiError} 408 request_timeout
 * @throws {ApiError} 429 rate_limited
 * @throws {ApiError} 431 request_header_too_large
 * @throws {ApiError} 500 internal_error
 * @throws {ApiError} 503 database_unavailable / database_not_migrated / identity_provider_unavailable
 */
export function listRuns(config, args = {}, options = {}) {
  return request(config, {"method": "GET", "path": "/v1/threads/{thread_id}/runs", "pathParams": ["thread_id"], "queryParams": ["limit"], "hasBody": false, "auth": true}, args, options);
}

/**
 * ListThreads: GET /v1/threads (200)
 *
 * @param {ClientConfig} config
 * @param {{limit?: number, cursor?: (string | null), metadata?: (string | null)}} [args]
 *   - limit: 1..200; default 50
 *   - metadata: A JSON object, e.g. {"project":"apollo"}: only threads whose metadata contains it (every key with an equal value; nested objects likewise). (length 0..4096)
 * @param {RequestOptions} [options]
 * @returns {Promise<ThreadPage>}
 * @throws {ApiError} 400 validation_error
 * @throws {ApiError} 401 unauthorized / invalid_token
 * @throws {ApiError} 405 method_not_allowed
 * @throws {ApiError} 408 request_timeout
 * @throws {ApiError} 429 rate_limited
 * @throws {ApiError} 431 request_header_too_large
 * @throws {ApiError} 500 internal_error
 * @throws {ApiError} 503 database_unavailable / database_not_migrated / identity_provider_unavailable
 */
export function listThreads(config, args = {}, options = {}) {
  return request(config, {"method": "GET", "path": "/v1/threads", "pathParams": [], "queryParams": ["limit", "cursor", "metadata"], "hasBody": false, "auth": true}, args, options);
}

/**
 * PostMessage: POST /v1/threads/{thread_id}/messages (202)
 *
 * Queue a user message. With an `Idempotency-Key` header (per thread), a retry with the same body answers the first 202 again and writes nothing; the same key with another body is refused with 422 `idempotency_key_reused`. While the thread's agent cannot run (an MCP server it uses does not answer; it is retried), the message is refused with 409 `agent_unavailable` and `Retry-After` (the next attempt), and nothing is written. On a thread whose run waits for approval, the message supersedes it (unless the agent sets `on_input_while_interrupted = "queue"`): that run is cancelled (error code `superseded`, named in `superseded_run_id`), its pending tool calls are answered as not run, and the message runs next.
 *
 * @param {ClientConfig} config
 * @param {{thread_id: string, body: PostMessageIn}} args
 *   - thread_id: uuid
 * @param {RequestOptions} [options]
 * @returns {Promise<PostMessageOut>}
 * @throws {ApiError} 400 validation_error
 * @throws {ApiError} 401 unauthorized / invalid_token
 * @throws {ApiError} 404 not_found
 * @throws {ApiError} 405 method_not_allowed
 * @throws {ApiError} 408 request_timeout
 * @throws {ApiError} 409 thread_busy / agent_unavailable
 * @throws {ApiError} 413 payload_too_large
 * @throws {ApiError} 422 idempotency_key_reused
 * @throws {ApiError} 429 rate_limited
 * @throws {ApiError} 431 request_header_too_large
 * @throws {ApiError} 500 internal_error
 * @throws {ApiError} 503 database_unavailable / database_not_migrated / identity_provider_unavailable
 */
export function postMessage(config, args = {}, options = {}) {
  return request(config, {"method": "POST", "path": "/v1/threads/{thread_id}/messages", "pathParams": ["thread_id"], "queryParams": [], "hasBody": true, "auth": true}, args, options);
}

/**
 * ReadWorkdirFile: GET /v1/threads/{thread_id}/workdir/{path} (200)
 *
 * @param {ClientConfig} config
 * @param {{thread_id: string, path: string}} args
 *   - thread_id: uuid
 * @param {RequestOptions} [options]
 * @returns {Promise<string>}
 * @throws {ApiError} 400 validation_error
 * @throws {ApiError} 401 unauthorized / invalid_token
 * @throws {ApiError} 404 not_found
 * @throws {ApiError} 405 method_not_allowed
 * @throws {ApiError} 408 request_timeout
 * @throws {ApiError} 429 rate_limited
 * @throws {ApiError} 431 request_header_too_large
 * @throws {ApiError} 500 internal_error
 * @throws {ApiError} 503 database_unavailable / database_not_migrated / identity_provider_unavailable
 */
export function readWorkdirFile(config, args = {}, options = {}) {
  return request(config, {"method": "GET", "path": "/v1/threads/{thread_id}/workdir/{path}", "pathParams": ["thread_id", "path"], "queryParams": [], "hasBody": false, "auth": true}, args, options);
}

/**
 * Ready: GET /ready (200)
 *
 * @param {ClientConfig} config
 * @param {{}} [args]
 * @param {RequestOptions} [options]
 * @returns {Promise<HealthOut>}
 * @throws {ApiError} 400 validation_error
 * @throws {ApiError} 405 method_not_allowed
 * @throws {ApiError} 408 request_timeout
 * @throws {ApiError} 431 request_header_too_large
 * @throws {ApiError} 500 internal_error
 * @throws {ApiError} 503 Not ready: `starting`, `unavailable` (the database does not answer) or `migrating` (the schema is not at the code's version; `detail` says where it is).
 */
export function ready(config, args = {}, options = {}) {
  return request(config, {"method": "GET", "path": "/ready", "pathParams": [], "queryParams": [], "hasBody": false, "auth": false}, args, options);
}

/**
 * RegenerateAnswer: POST /v1/threads/{thread_id}/regenerate (202)
 *
 * @param {ClientConfig} config
 * @param {{thread_id: string, body: (RegenerateIn | null)}} args
 *   - thread_id: uuid
 * @param {RequestOptions} [options]
 * @returns {Promise<ForkOut>}
 * @throws {ApiError} 400 validation_error
 * @throws {ApiError} 401 unauthorized / invalid_token
 * @throws {ApiError} 404 not_found / checkpoint_not_found
 * @throws {ApiError} 405 method_not_allowed
 * @throws {ApiError} 408 request_timeout
 * @throws {ApiError} 409 thread_busy / agent_unavailable
 * @throws {ApiError} 413 payload_too_large
 * @throws {ApiError} 422 checkpoint_not_forkable
 * @throws {ApiError} 429 rate_limited
 * @throws {ApiError} 431 request_header_too_large
 * @throws {ApiError} 500 internal_error
 * @throws {ApiError} 503 database_unavailable / database_not_migrated / identity_provider_unavailable
 */
export function regenerateAnswer(config, args = {}, options = {}) {
  return request(config, {"method": "POST", "path": "/v1/threads/{thread_id}/regenerate", "pathParams": ["thread_id"], "queryParams": [], "hasBody": true, "auth": true}, args, options);
}

/**
 * ResumeRun: POST /v1/runs/{run_id}/resume (200)
 *
 * Answer an interrupted run, one decision per pending tool call: approve, reject (optional message), edit (`edited_action: {name, args}` as on the LangGraph API, or `args`; the arguments are checked against the tool's schema: 422 validation_error), or respond (message returned as the tool's result; the tool does not run). A decision the interrupt does not allow is 400.
 *
 * @param {ClientConfig} config
 * @param {{run_id: string, body: ResumeIn}} args
 *   - run_id: uuid
 * @param {RequestOptions} [options]
 * @returns {Promise<RunOut>}
 * @throws {ApiError} 400 validation_error
 * @throws {ApiError} 401 unauthorized / invalid_token
 * @throws {ApiError} 404 not_found
 * @throws {ApiError} 405 method_not_allowed
 * @throws {ApiError} 408 request_timeout
 * @throws {ApiError} 409 thread_busy / invalid_state / agent_unavailable
 * @throws {ApiError} 413 payload_too_large
 * @throws {ApiError} 422 invalid_tool_arguments
 * @throws {ApiError} 429 rate_limited
 * @throws {ApiError} 431 request_header_too_large
 * @throws {ApiError} 500 internal_error
 * @throws {ApiError} 503 database_unavailable / database_not_migrated / identity_provider_unavailable
 */
export function resumeRun(config, args = {}, options = {}) {
  return request(config, {"method": "POST", "path": "/v1/runs/{run_id}/resume", "pathParams": ["run_id"], "queryParams": [], "hasBody": true, "auth": true}, args, options);
}

/**
 * SearchKnowledgeBase: GET /v1/knowledge-bases/{kb}/search (200)
 *
 * @param {ClientConfig} config
 * @param {{kb: string, q: string, limit?: number}} args
 *   - kb: pattern ^[A-Za-z0-9_.-]{1,100}$
 *   - q: length 1..1000
 *   - limit: 1..50; default 8
 * @param {RequestOptions} [options]
 * @returns {Promise<KbSearchOut>}
 * @throws {ApiError} 400 validation_error
 * @throws {ApiError} 401 unauthorized / invalid_token
 * @throws {ApiError} 405 method_not_allowed
 * @throws {ApiError} 408 request_timeout
 * @throws {ApiError} 429 rate_limited
 * @throws {ApiError} 431 request_header_too_large
 * @throws {ApiError} 500 internal_error
 * @throws {ApiError} 503 database_unavailable / database_not_migrated / identity_provider_unavailable
 */
export function searchKnowledgeBase(config, args = {}, options = {}) {
  return request(config, {"method": "GET", "path": "/v1/knowledge-bases/{kb}/search", "pathParams": ["kb"], "queryParams": ["q", "limit"], "hasBody": false, "auth": true}, args, options);
}

/**
 * StreamRunEvents: GET /v1/runs/{run_id}/events (200)
 *
 * Server-sent events: `status` (running/interrupted/resumed/completed/failed/cancelled; `final: true` marks the last event), `delta` (streamed model text), `message` (the id and seq of an AI/tool message the run stored: read it with ListMessages), `compression` (the model view was compressed), `provider_retry` (a model call failed transiently: retrying after a wait, or given up; `discarded_lc_id` names text streamed by the failed attempt, which is void). Resumable with Last-Event-ID or `after`. The body also ends, without a final event, when the server shuts down: reconnect with Last-Event-ID. Open streams and WaitRun long-polls per API key are capped: 429 `too_many_streams`; 503 `streams_unavailable` when the server cannot take more (both before the stream starts, with `Retry-After`). A reconnect after the final event answers 204 (EventSource clients stop). Browsers' EventSource, which cannot send the API key, authenticates with `?stream_token=` from CreateStreamToken instead.
 *
 * @param {ClientConfig} config
 * @param {{run_id: string, after?: number, stream_token?: (string | null)}} args
 *   - run_id: uuid
 *   - after: 0..9007199254740991; default 0
 *   - stream_token: CreateStreamToken's token, in place of the Authorization header (for EventSource in a browser); read by the auth guard. (length 0..1000)
 * @param {RequestOptions} [options]
 * @returns {Promise<string>}
 * @throws {ApiError} 400 validation_error
 * @throws {ApiError} 401 unauthorized / invalid_token
 * @throws {ApiError} 404 not_found
 * @throws {ApiError} 405 method_not_allowed
 * @throws {ApiError} 408 request_timeout
 * @throws {ApiError} 429 rate_limited / too_many_streams
 * @throws {ApiError} 431 request_header_too_large
 * @throws {ApiError} 500 internal_error
 * @throws {ApiError} 503 database_unavailable / database_not_migrated / identity_provider_unavailable / streams_unavailable
 */
export function streamRunEvents(config, args = {}, options = {}) {
  return request(config, {"method": "GET", "path": "/v1/runs/{run_id}/events", "pathParams": ["run_id"], "queryParams": ["after", "stream_token"], "hasBody": false, "auth": true}, args, options);
}

/**
 * UpdateThread: PATCH /v1/threads/{thread_id} (200)
 *
 * Change the title and/or replace the metadata; omitted fields are kept.
 *
 * @param {ClientConfig} config
 * @param {{thread_id: string, body: UpdateThreadIn}} args
 *   - thread_id: uuid
 * @param {RequestOptions} [options]
 * @returns {Promise<ThreadOut>}
 * @throws {ApiError} 400 validation_error
 * @throws {ApiError} 401 unauthorized / invalid_token
 * @throws {ApiError} 404 not_found
 * @throws {ApiError} 405 method_not_allowed
 * @throws {ApiError} 408 request_timeout
 * @throws {ApiError} 409 thread_busy
 * @throws {ApiError} 413 payload_too_large
 * @throws {ApiError} 429 rate_limited
 * @throws {ApiError} 431 request_header_too_large
 * @throws {ApiError} 500 internal_error
 * @throws {ApiError} 503 database_unavailable / database_not_migrated / identity_provider_unavailable
 */
export function updateThread(config, args = {}, options = {}) {
  return request(config, {"method": "PATCH", "path": "/v1/threads/{thread_id}", "pathParams": ["thread_id"], "queryParams": [], "hasBody": true, "auth": true}, args, options);
}

/**
 * WaitRequest: GET /v1/requests/{request_id}/wait (200)
 *
 * Long-poll: answers as soon as the request is no longer `queued` — `dispatched` with the `run_id` of the run answering it (follow it with WaitRun or StreamRunEvents), or `cancelled` — or after `timeout` seconds (0-30, default 30) still `queued` (earlier when the server shuts down); call again then. Counts towards the same cap as event streams and WaitRun: 429 `too_many_streams`.
 *
 * @param {ClientConfig} config
 * @param {{request_id: string, timeout?: number}} args
 *   - request_id: uuid
 *   - timeout: 0..30; default 30.0
 * @param {RequestOptions} [options]
 * @returns {Promise<RequestOut>}
 * @throws {ApiError} 400 validation_error
 * @throws {ApiError} 401 unauthorized / invalid_token
 * @throws {ApiError} 404 not_found
 * @throws {ApiError} 405 method_not_allowed
 * @throws {ApiError} 408 request_timeout
 * @throws {ApiError} 429 rate_limited / too_many_streams
 * @throws {ApiError} 431 request_header_too_large
 * @throws {ApiError} 500 internal_error
 * @throws {ApiError} 503 database_unavailable / database_not_migrated / identity_provider_unavailable / streams_unavailable
 */
export function waitRequest(config, args = {}, options = {}) {
  return request(config, {"method": "GET", "path": "/v1/requests/{request_id}/wait", "pathParams": ["request_id"], "queryParams": ["timeout"], "hasBody": false, "auth": true}, args, options);
}

/**
 * WaitRun: GET /v1/runs/{run_id}/wait (200)
 *
 * Long-poll: answers as soon as the run is no longer `running` (interrupted, completed, failed, cancelled), or after `timeout` seconds (0-30, default 30) with its current status (earlier when the server shuts down); call again while it is `running`. Open long-polls and event streams per API key are capped: 429 `too_many_streams` with `Retry-After`.
 *
 * @param {ClientConfig} config
 * @param {{run_id: string, timeout?: number}} args
 *   - run_id: uuid
 *   - timeout: 0..30; default 30.0
 * @param {RequestOptions} [options]
 * @returns {Promise<RunOut>}
 * @throws {ApiError} 400 validation_error
 * @throws {ApiError} 401 unauthorized / invalid_token
 * @throws {ApiError} 404 not_found
 * @throws {ApiError} 405 method_not_allowed
 * @throws {ApiError} 408 request_timeout
 * @throws {ApiError} 429 rate_limited / too_many_streams
 * @throws {ApiError} 431 request_header_too_large
 * @throws {ApiError} 500 internal_error
 * @throws {ApiError} 503 database_unavailable / database_not_migrated / identity_provider_unavailable / streams_unavailable
 */
export function waitRun(config, args = {}, options = {}) {
  return request(config, {"method": "GET", "path": "/v1/runs/{run_id}/wait", "pathParams": ["run_id"], "queryParams": ["timeout"], "hasBody": false, "auth": true}, args, options);
}

/**
 * Every operation bound to one config: `createClient({apiKey}).getThread({thread_id})`.
 * @param {ClientConfig} [config]
 */
export function createClient(config = {}) {
  return {
    addDocument: (args, options) => addDocument(config, args, options),
    cancelRequest: (args, options) => cancelRequest(config, args, options),
    cancelRun: (args, options) => cancelRun(config, args, options),
    compressContext: (args, options) => compressContext(config, args, options),
    createStreamToken: (args, options) => createStreamToken(config, args, options),
    createThread: (args, options) => createThread(config, args, options),
    deleteDocument: (args, options) => deleteDocument(config, args, options),
    deleteThread: (args, options) => deleteThread(config, args, options),
    editMessage: (args, options) => editMessage(config, args, options),
    getAgent: (args, options) => getAgent(config, args, options),
    getAgentState: (args, options) => getAgentState(config, args, options),
    getRequest: (args, options) => getRequest(config, args, options),
    getRun: (args, options) => getRun(config, args, options),
    getThread: (args, options) => getThread(config, args, options),
    health: (args, options) => health(config, args, options),
    listAgents: (args, options) => listAgents(config, args, options),
    listBranches: (args, options) => listBranches(config, args, options),
    listDocuments: (args, options) => listDocuments(config, args, options),
    listMessages: (args, options) => listMessages(config, args, options),
    listRuns: (args, options) => listRuns(config, args, options),
    listThreads: (args, options) => listThreads(config, args, options),
    postMessage: (args, options) => postMessage(config, args, options),
    readWorkdirFile: (args, options) => readWorkdirFile(config, args, options),
    ready: (args, options) => ready(config, args, options),
    regenerateAnswer: (args, options) => regenerateAnswer(config, args, options),
    resumeRun: (args, options) => resumeRun(config, args, options),
    searchKnowledgeBase: (args, options) => searchKnowledgeBase(config, args, options),
    streamRunEvents: (args, options) => streamRunEvents(config, args, options),
    updateThread: (args, options) => updateThread(config, args, options),
    waitRequest: (args, options) => waitRequest(config, args, options),
    waitRun: (args, options) => waitRun(config, args, options),
  };
}
