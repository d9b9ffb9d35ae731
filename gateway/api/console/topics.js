// Topics: the topics the gateway knows (that the rules let you describe), their partitions and brokers,
// and the publish rate from the gateway's own counters (read every few seconds; rate = change / time).

import { get, seg } from './api.js';
import { clear, errorBox, field, fmtNumber, h, link, table } from './dom.js';

const REFRESH_MS = 3000;
let previous = null; // {at, counts: Map(topic -> messages)} of the last read, for rates

function rateOf(topic, messages, at) {
  if (!previous || !previous.counts.has(topic)) return null;
  const seconds = (at - previous.at) / 1000;
  const delta = messages - previous.counts.get(topic);
  return seconds > 0 && delta >= 0 ? delta / seconds : null;
}

function topicRow(t, at, selected) {
  const rate = rateOf(t.topic, t.publishedMessages, at);
  return h(
    'tr',
    { dataset: { topic: t.topic }, class: t.topic === selected ? 'selected' : null },
    h('td', {}, link('topics', { topic: t.topic }, t.topic)),
    h('td', { class: 'num' }, t.partitions ?? '–'),
    h('td', {}, t.brokerIds.join(', ') || '–'),
    h('td', { class: t.shieldedBrokers.length ? 'bad' : '' }, t.shieldedBrokers.join(', ') || 'none'),
    h('td', { class: 'num' }, fmtNumber(t.publishedMessages)),
    h('td', { class: 'num rate' }, rate === null ? '…' : rate.toFixed(1)),
    h('td', { class: 'num' }, fmtNumber(t.publishedBytes)),
    h('td', { class: 'num' + (t.publishErrors ? ' bad' : '') }, fmtNumber(t.publishErrors)),
    h('td', { class: 'actions' },
      link('messages', { topic: t.topic }, 'messages'), ' ',
      link('tail', { topic: t.topic }, 'tail'), ' ',
      link('publish', { topic: t.topic }, 'publish')),
  );
}

async function detail(box, topic) {
  clear(box).append(h('p', { class: 'muted' }, `Loading ${topic}…`));
  try {
    const t = await get(`v1/topics/${seg(topic)}`);
    clear(box).append(
      h('h2', {}, `Topic ${t.topic}`),
      h('p', { class: 'muted' }, `max message size ${fmtNumber(t.maxMessageSize)} bytes; shielded brokers: `,
        t.shieldedBrokers.join(', ') || 'none'),
      table(
        ['index', 'partition key', 'broker id', 'broker', 'partition id'],
        t.partitions.map((p) => h('tr', {},
          h('td', { class: 'num' }, p.index), h('td', {}, p.partitionKey), h('td', { class: 'num' }, p.brokerId),
          h('td', {}, p.broker ?? '(hidden: needs describe_cluster)'), h('td', { class: 'num' }, p.partitionId))),
        { id: 'topic-partitions' },
      ),
    );
  } catch (error) {
    clear(box).append(errorBox(error));
  }
}

export async function render(root, params) {
  const selected = params.get('topic');
  const list = h('div', { id: 'topics-list' }, h('p', { class: 'muted' }, 'Loading…'));
  const box = h('div', { id: 'topic-detail' });
  const name = h('input', { name: 'topic', placeholder: 'topic name', required: true, value: selected || '' });
  const open = h('form', { class: 'inline', onsubmit: (e) => {
    e.preventDefault();
    location.hash = `#/topics?topic=${encodeURIComponent(name.value.trim())}`;
  } }, field('Open a topic', name), h('button', { type: 'submit' }, 'Describe'));
  root.append(h('h1', {}, 'Topics'),
    h('p', { class: 'muted' }, 'Topics this gateway knows that your rules let you describe. Publish counters ' +
      'are the gateway\'s own (since its start); the rate is their change over the last few seconds.'),
    open, list, box);
  let stopped = false;
  async function refresh() {
    try {
      const data = await get('v1/topics');
      const at = Date.now();
      clear(list).append(data.topics.length ? table(
        ['topic', 'partitions', 'brokers', 'shielded', 'published', 'msg/s', 'bytes', 'errors', ''],
        data.topics.map((t) => topicRow(t, at, selected)),
        { id: 'topics-table' },
      ) : h('p', { class: 'muted' }, 'No topic yet: open one by name above.'));
      previous = { at, counts: new Map(data.topics.map((t) => [t.topic, t.publishedMessages])) };
    } catch (error) {
      clear(list).append(errorBox(error));
    }
  }
  await refresh();
  if (selected) await detail(box, selected);
  const timer = setInterval(() => { if (!stopped) refresh(); }, REFRESH_MS);
  return () => { stopped = true; clearInterval(timer); };
}
