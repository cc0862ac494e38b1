// Follows one run's event stream with the `eventsource` npm package, as a web page would, and
// reports (one JSON line) what it saw once the package closed the connection by itself.
//   node follow.mjs <events URL> [bearer key]
// Without a key the URL must carry ?stream_token= (a browser's native EventSource cannot send
// headers). Exit 0: closed after the final event; 1: never closed; 2: reconnected in a loop.
import { EventSource } from "eventsource";

const [url, key] = process.argv.slice(2);
const responses = [];
const fetchWithKey = async (input, init) => {
  const headers = { ...(init?.headers ?? {}) };
  if (key) headers.Authorization = `Bearer ${key}`;
  const response = await fetch(input, { ...init, headers });
  responses.push({ status: response.status, lastEventId: headers["Last-Event-ID"] ?? null });
  if (responses.length > 3) {
    console.log(JSON.stringify({ error: "reconnect loop", responses }));
    process.exit(2);
  }
  return response;
};

const events = [];
const source = new EventSource(url, { fetch: fetchWithKey });
for (const type of ["status", "delta", "message", "compression"]) {
  source.addEventListener(type, (e) => {
    const data = JSON.parse(e.data);
    events.push({ event: type, id: e.lastEventId, type: data.type, final: data.final ?? null });
  });
}
source.onerror = () => {
  if (source.readyState === EventSource.CLOSED) {
    console.log(JSON.stringify({ closed: true, responses, events }));
    process.exit(0);
  }
};
setTimeout(() => {
  console.log(JSON.stringify({ error: "still open", responses, events }));
  process.exit(1);
}, 60_000);
