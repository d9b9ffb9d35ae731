// tubemq-gateway's Server-Sent Events with the `eventsource` package: stream, commit by token, resume
// after a cut without loss, and the 410 of a deleted instance.
// Next to ./scripts/run.sh:  npm ci && node sse.mjs   (GW, GW_TOKEN, TOPIC as in rest.mjs)
import { EventSource } from 'eventsource';

const GW = process.env.GW ?? 'http://localhost:8080';
const TOPIC = process.env.TOPIC ?? 'demo';
const auth = process.env.GW_TOKEN ? { authorization: `Bearer ${process.env.GW_TOKEN}` } : {};
const json = { 'content-type': 'application/json', ...auth };

async function call(method, url, body) {
  const answer = await fetch(url, { method, headers: json, body: body && JSON.stringify(body) });
  const doc = answer.status === 204 ? null : await answer.json();
  if (!answer.ok) throw new Error(`${answer.status} ${doc.error.code} at ${doc.error.field}: ${doc.error.message}`);
  return doc;
}

// EventSource sends no custom header by itself: its `fetch` option adds the credentials.
function open(url) {
  return new EventSource(url, {
    fetch: (input, init) => fetch(input, { ...init, headers: { ...init.headers, ...auth } }),
  });
}

// Reads the stream until `enough(ours)` holds, committing every event's token, one commit at a time in the
// order of the events; resolves with the last event's id once every commit is answered. EventSource does
// not wait for an async handler, so the commits are chained rather than awaited in `onmessage`. Events that
// arrive after the end are not taken (nor committed): the next connection, resuming after the last id,
// delivers them again.
function stream(url, run, ours, enough) {
  const commits = `${url.split('/stream')[0]}/commits`;
  return new Promise((resolve, reject) => {
    const source = open(url);
    let last = null;
    let ended = false;
    let committed = Promise.resolve();
    const end = (settle) => {
      if (ended) return;
      ended = true;
      clearTimeout(timer);
      source.close();
      committed.then(settle, reject);
    };
    const timer = setTimeout(() => end(() => reject(new Error('stream: too slow'))), 60_000);
    source.onmessage = (event) => {
      if (ended) return;
      const message = JSON.parse(event.data);
      last = event.lastEventId; // = message.token
      if (message.key === run) ours.push(message.value);
      committed = committed.then(() => call('POST', commits, { tokens: [message.token] }));
      committed.catch((error) => end(() => reject(error)));
      if (enough(ours)) end(() => resolve(last));
    };
    source.onerror = (error) => { if (error.code) end(() => reject(error)); };
  });
}

const run = `sse-${process.pid}-${Date.now()}`;
const consumer = await call('POST', `${GW}/v1/consumers/examples-${run}`, { topics: [TOPIC], startPosition: 'earliest' });
const messages = ['one', 'two', 'three'].map((value) => ({ value, key: run }));
await call('POST', `${GW}/v1/topics/${TOPIC}/messages`, { messages });

const ours = [];
// first connection: stop after the first of our messages (a cut connection, as a network would)
const last = await stream(`${consumer.baseUrl}/stream?format=utf8`, run, ours, (got) => got.length >= 1);
console.log(`cut after event ${last}`);
// resume after the last event id: EventSource sends Last-Event-ID itself when it reconnects; a new
// EventSource names it with ?last_event_id=
if (ours.length < 3) {
  await stream(`${consumer.baseUrl}/stream?format=utf8&last_event_id=${last}`, run, ours, (got) => got.length >= 3);
}
console.log(`streamed ${JSON.stringify(ours)}`);
if (ours.join() !== 'one,two,three') throw new Error(`unexpected ${ours}`);

// a 4xx: the stream of a deleted instance is refused (410); EventSource reports its status and stops
await call('DELETE', consumer.baseUrl);
try {
  await stream(`${consumer.baseUrl}/stream`, run, [], () => false);
  throw new Error('the stream of a deleted instance opened');
} catch (error) {
  if (error.code !== 410) throw error;
  console.log(`410 as expected: ${error.message}`);
}
console.log('sse example: OK');
