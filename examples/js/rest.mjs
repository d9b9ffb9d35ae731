// tubemq-gateway over REST with Node's own fetch: publish, consume with commits, handle a 4xx.
// Next to ./scripts/run.sh:  npm ci && node rest.mjs
// GW (default http://localhost:8080), GW_TOKEN (an API key or JWT, sent as a bearer token) and TOPIC
// (default demo) change what it talks to.
const GW = process.env.GW ?? 'http://localhost:8080';
const TOPIC = process.env.TOPIC ?? 'demo';
const headers = { 'content-type': 'application/json' };
if (process.env.GW_TOKEN) headers.authorization = `Bearer ${process.env.GW_TOKEN}`;

// Every error answer is {"error": {code, message, field?, index?, limit?, ...}, "requestId"}.
class GatewayError extends Error {
  constructor(status, body, retryAfter) {
    super(`${status} ${body.error.code}: ${body.error.message} (request ${body.requestId})`);
    Object.assign(this, { status, ...body.error, requestId: body.requestId, retryAfter });
  }
}

async function call(method, url, body) {
  for (let attempt = 1; ; attempt++) {
    const answer = await fetch(url, { method, headers, body: body && JSON.stringify(body) });
    if (answer.status === 204) return null;
    const doc = await answer.json();
    if (answer.ok) return doc;
    const retryAfter = Number(answer.headers.get('retry-after') ?? 0);
    // 503 (overloaded, broker unavailable) and 429 (above a quota) say when to come back
    if ((answer.status === 503 || answer.status === 429) && attempt < 5) {
      await new Promise((resolve) => setTimeout(resolve, Math.max(retryAfter, 1) * 1000));
      continue;
    }
    throw new GatewayError(answer.status, doc, retryAfter);
  }
}

const run = `node-${process.pid}-${Date.now()}`;

// 1. publish three messages under one key (one partition, in order); 200 = a broker stored every one
const messages = [1, 2, 3].map((i) => ({ value: `hello ${i}`, key: run, attributes: { example: 'node' } }));
const published = await call('POST', `${GW}/v1/topics/${TOPIC}/messages`, { messages });
console.log(`published ${published.results.length}: ids ${published.results.map((r) => r.messageId)}`);

// 2. consume them in a new group from the earliest message, committing what each poll delivered
const consumer = await call('POST', `${GW}/v1/consumers/examples-${run}`, {
  topics: [TOPIC],
  startPosition: 'earliest',
});
const received = [];
try {
  const deadline = Date.now() + 60_000;
  while (received.length < messages.length) {
    if (Date.now() > deadline) throw new Error(`received ${received.length} of ${messages.length} in 60 s`);
    const poll = await call('GET', `${consumer.baseUrl}/messages?format=utf8&timeout_ms=5000&max_messages=500`);
    received.push(...poll.messages.filter((m) => m.key === run).map((m) => m.value));
    if (poll.messages.length > 0) {
      const commit = await call('POST', `${consumer.baseUrl}/commits`, { tokens: poll.messages.map((m) => m.token) });
      console.log(`committed ${commit.committed}, stale ${commit.stale.length}`);
    }
  }
} finally {
  await call('DELETE', consumer.baseUrl);
}
console.log(`consumed ${JSON.stringify(received)}`);
if (received.join() !== 'hello 1,hello 2,hello 3') throw new Error(`unexpected ${received}`);

// 3. a 4xx: the error body names the field at fault
try {
  await call('POST', `${GW}/v1/topics/${TOPIC}/messages`, { messages: [{ value: 'x', encoding: 'hex' }] });
  throw new Error('an invalid encoding was accepted');
} catch (error) {
  if (!(error instanceof GatewayError) || error.status !== 400) throw error;
  console.log(`400 as expected: ${error.code} at ${error.field}: ${error.message}`);
}
console.log('rest example: OK');
