// tubemq-gateway over gRPC with @grpc/grpc-js and @grpc/proto-loader: publish, consume with commits,
// handle an INVALID_ARGUMENT. Next to ./scripts/run.sh:  npm ci && node grpc.mjs
// GW_GRPC (default localhost:9090), GW_TOKEN (API key or JWT) and TOPIC (default demo) change the defaults.
// The proto imports google/rpc/status.proto: this repository ships it in proto/third_party/googleapis;
// outside it, `npm install google-proto-files` and add its build/protos directory to includeDirs.
import { fileURLToPath } from 'node:url';
import grpc from '@grpc/grpc-js';
import protoLoader from '@grpc/proto-loader';

const PROTO = fileURLToPath(new URL('../../proto', import.meta.url));
const definition = protoLoader.loadSync('tubemq/gateway/v1/gateway.proto', {
  includeDirs: [PROTO, `${PROTO}/third_party/googleapis`],
  longs: String, // int64 ids as decimal strings: a JavaScript number cannot hold them
  enums: String,
  defaults: true,
  oneofs: true,
});
const { GatewayService } = grpc.loadPackageDefinition(definition).tubemq.gateway.v1;
const client = new GatewayService(process.env.GW_GRPC ?? 'localhost:9090', grpc.credentials.createInsecure());
const TOPIC = process.env.TOPIC ?? 'demo';
const metadata = new grpc.Metadata();
if (process.env.GW_TOKEN) metadata.set('authorization', `Bearer ${process.env.GW_TOKEN}`);

const call = (method, request) =>
  new Promise((resolve, reject) =>
    client[method](request, metadata, { deadline: Date.now() + 30_000 }, (error, answer) =>
      error ? reject(error) : resolve(answer),
    ),
  );

const run = `grpc-${process.pid}-${Date.now()}`;
const messages = [1, 2, 3].map((i) => ({ value: Buffer.from(`hello ${i}`), key: run }));
const published = await call('Publish', { topic: TOPIC, messages });
if (published.failed !== 0) throw new Error(`failed: ${JSON.stringify(published.results)}`);
console.log(`published ${published.results.length}: ids ${published.results.map((r) => r.stored.messageId)}`);

const group = `examples-${run}`;
const { instanceId } = await call('CreateConsumer', { group, topics: [TOPIC], startPosition: 'START_POSITION_EARLIEST' });
const received = [];
try {
  const deadline = Date.now() + 60_000;
  while (received.length < messages.length) {
    if (Date.now() > deadline) throw new Error(`received ${received.length} of ${messages.length} in 60 s`);
    const poll = await call('Poll', { group, instanceId, maxMessages: 500, timeoutMs: 5000 });
    received.push(...poll.messages.filter((m) => m.key === run).map((m) => m.value.toString()));
    if (poll.messages.length > 0) {
      const commit = await call('Commit', { group, instanceId, tokens: poll.messages.map((m) => m.token) });
      console.log(`committed ${commit.committed}, stale ${commit.stale.length}`);
    }
  }
} finally {
  await call('DeleteConsumer', { group, instanceId });
}
console.log(`consumed ${JSON.stringify(received)}`);
if (received.join() !== 'hello 1,hello 2,hello 3') throw new Error(`unexpected ${received}`);

// the REST 400's equivalent: INVALID_ARGUMENT, whose message starts with the field at fault
try {
  await call('Publish', { topic: TOPIC, messages: [{ value: Buffer.alloc(0) }] });
  throw new Error('an empty message was accepted');
} catch (error) {
  if (error.code !== grpc.status.INVALID_ARGUMENT) throw error;
  console.log(`INVALID_ARGUMENT as expected: ${error.details} (request ${error.metadata.get('x-request-id')})`);
}
client.close();
console.log('grpc example: OK');
