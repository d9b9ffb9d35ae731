// tubemq-gateway from TypeScript with types generated from openapi.yaml (openapi-typescript) and the
// openapi-fetch client: publish, consume with commits, handle a 4xx, all checked by tsc --strict.
// Next to ./scripts/run.sh:  npm ci && npm run generate && npm run build && npm run typed
// GW (default http://localhost:8080), GW_TOKEN (API key or JWT) and TOPIC (default demo).
import createClient from 'openapi-fetch';
import type { components, paths } from './generated/schema.js';

type MessageIn = components['schemas']['MessageIn'];
type ErrorResponse = components['schemas']['ErrorResponse'];

const TOPIC = process.env.TOPIC ?? 'demo';
const client = createClient<paths>({
  baseUrl: process.env.GW ?? 'http://localhost:8080',
  headers: process.env.GW_TOKEN ? { authorization: `Bearer ${process.env.GW_TOKEN}` } : {},
});

function fail(status: number, error: ErrorResponse | undefined): never {
  const detail = error ? `${error.error.code} at ${error.error.field ?? '-'}: ${error.error.message}` : 'no body';
  throw new Error(`${status} ${detail} (request ${error?.requestId ?? '-'})`);
}

const run = `ts-${process.pid}-${Date.now()}`;
// only value is required: encoding, key, attributes... may be left out
const messages: MessageIn[] = [1, 2, 3].map((i) => ({ value: `hello ${i}`, key: run }));
const published = await client.POST('/v1/topics/{topic}/messages', {
  params: { path: { topic: TOPIC } },
  body: { messages },
});
if (!published.data) fail(published.response.status, published.error);
console.log(`published ${published.data.results.length}: ids ${published.data.results.map((r) => r.messageId)}`);

const group = `examples-${run}`;
const created = await client.POST('/v1/consumers/{group}', {
  params: { path: { group } },
  body: { topics: [TOPIC], startPosition: 'earliest' },
});
if (!created.data) fail(created.response.status, created.error);
const instance = { group, instance_id: created.data.instanceId };

const received: string[] = [];
try {
  const deadline = Date.now() + 60_000;
  while (received.length < messages.length) {
    if (Date.now() > deadline) throw new Error(`received ${received.length} of ${messages.length} in 60 s`);
    const poll = await client.GET('/v1/consumers/{group}/instances/{instance_id}/messages', {
      params: { path: instance, query: { format: 'utf8', timeout_ms: 5000, max_messages: 500 } },
    });
    if (!poll.data) fail(poll.response.status, poll.error);
    for (const message of poll.data.messages) {
      if (message.key === run && typeof message.value === 'string') received.push(message.value);
    }
    if (poll.data.messages.length > 0) {
      const commit = await client.POST('/v1/consumers/{group}/instances/{instance_id}/commits', {
        params: { path: instance },
        body: { tokens: poll.data.messages.map((m) => m.token) },
      });
      if (!commit.data) fail(commit.response.status, commit.error);
      console.log(`committed ${commit.data.committed}, stale ${commit.data.stale.length}`);
    }
  }
} finally {
  await client.DELETE('/v1/consumers/{group}/instances/{instance_id}', { params: { path: instance } });
}
console.log(`consumed ${JSON.stringify(received)}`);
if (received.join() !== 'hello 1,hello 2,hello 3') throw new Error(`unexpected ${received.join()}`);

// a 4xx: a topic name TubeMQ does not allow; `error` is typed as the contract's ErrorResponse
const refused = await client.GET('/v1/topics/{topic}', { params: { path: { topic: '1x' } } });
if (refused.response.status !== 400 || !refused.error) throw new Error(`expected 400, got ${refused.response.status}`);
console.log(`400 as expected: ${refused.error.error.code} at ${refused.error.error.field}: ${refused.error.error.message}`);
console.log('typescript example: OK');
