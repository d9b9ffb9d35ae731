// Groups: the consumer instances this gateway holds that you may see (your own; every one with the admin
// action), with each held partition's read position, end and lag, and below the lag of the groups this
// gateway has served as TubeMQ's committed offsets tell it; refreshed every two seconds. Lag has one
// definition, computed by the gateway (as in the metrics and GET /v1/consumers/{group}/lag): messages from
// the read position to the end of the partition's store, a store counted once in a total. Partitions of one
// store share its index, so they are shown together, with the store's figure once.

import { get } from './api.js';
import { clear, errorBox, fmtNumber, h, table } from './dom.js';

// Characters of an instance id shown: its end, where ids differ (the start encodes the replica's address).
const ID_TAIL = 12;

function shortId(id) {
  return id.length > ID_TAIL ? `…${id.slice(-ID_TAIL)}` : id;
}

function offset(value) {
  return value < 0 ? '–' : fmtNumber(value);
}

// Rows of one store: its partitions in the first cell, the store's figure (its slowest partition) once.
function byStore(partitions) {
  const stores = new Map();
  for (const p of partitions) {
    if (!stores.has(p.store)) stores.set(p.store, []);
    stores.get(p.store).push(p);
  }
  return [...stores.entries()].map(([store, parts]) => {
    const known = parts.filter((p) => p.lag !== null);
    const slowest = known.length ? known.reduce((a, b) => (b.lag > a.lag ? b : a)) : parts[0];
    return { store, parts, slowest };
  });
}

function partitionCell(parts) {
  const keys = parts.map((p) => p.partitionKey).join(', ');
  return parts.length > 1 ? `${keys} (one store)` : keys;
}

function instanceBlock(i) {
  const topics = Object.entries(i.topics).map(([t, ids]) => (ids.length ? `${t} (streams ${ids.join(', ')})` : t));
  return h('section', { class: 'card instance', dataset: { group: i.group, instance: i.instanceId } },
    h('h3', {}, `group ${i.group}`),
    h('p', { class: 'muted' }, 'instance ', h('code', { class: 'instance-id', title: i.instanceId }, shortId(i.instanceId)),
      ` of ${i.owner}`, i.worker === null ? '' : `, worker ${i.worker}`, `; topics ${topics.join(', ')}; `,
      `${i.pendingMessages} delivered not committed, ${i.bufferedMessages} buffered; `,
      `idle ${i.idleSeconds.toFixed(0)} s; lag `, h('strong', { class: 'total-lag' }, fmtNumber(i.lag))),
    i.partitions.length ? table(['partition', 'read position', 'delivered to', 'end', 'lag', 'reading'],
      byStore(i.partitions).map(({ store, parts, slowest }) => h('tr', { dataset: { store, partition: parts[0].partitionKey } },
        h('td', {}, partitionCell(parts)),
        h('td', { class: 'num position' }, offset(slowest.readPosition)),
        h('td', { class: 'num delivered' }, offset(Math.max(...parts.map((p) => p.deliveredTo)))),
        h('td', { class: 'num end' }, offset(slowest.endOffset)),
        h('td', { class: 'num lag' }, slowest.lag === null ? '–' : fmtNumber(slowest.lag)),
        h('td', {}, parts.some((p) => p.inUse) ? 'yes' : 'no')))) : h('p', { class: 'muted' }, 'No partition assigned yet.'));
}

function groupRow(g) {
  const idle = g.consumers === 0 && g.lag > 0;
  return h('section', { class: 'card tubemq-group', dataset: { group: g.group } },
    h('h3', {}, `group ${g.group}`),
    h('p', { class: idle ? 'bad' : 'muted' },
      g.consumers < 0 ? 'consumers unknown' : `${g.consumers} consumer(s) in the group`,
      idle ? ' — lag and nobody consuming' : '',
      `; read ${new Date(g.readAt).toLocaleTimeString()}; lag `,
      h('strong', { class: 'total-lag' }, fmtNumber(g.lag))),
    table(['partition', 'committed', 'end', 'lag'], byStore(g.partitions).map(({ store, parts, slowest }) =>
      h('tr', { dataset: { store, partition: parts[0].partitionKey } },
        h('td', {}, partitionCell(parts)),
        h('td', { class: 'num position' }, offset(slowest.committedOffset)),
        h('td', { class: 'num end' }, offset(slowest.endOffset)),
        h('td', { class: 'num lag' }, fmtNumber(slowest.lag))))));
}

export async function render(root) {
  const box = h('div', { id: 'groups' }, h('p', { class: 'muted' }, 'Loading…'));
  const offsets = h('div', { id: 'group-offsets' });
  root.append(h('h1', {}, 'Groups'),
    h('p', { class: 'muted' }, 'Consumer instances held by this gateway. Lag = messages from the read ' +
      'position to the end of the partition\'s store (28 bytes per index entry); partitions of one store ' +
      'share its index and show its figure once. Positions are the newest known: the instance\'s last ' +
      'fetch or TubeMQ\'s last reading below, whichever is further on; "delivered to" is how far this ' +
      'instance has handed messages out, committed or not.'), box,
    h('h2', {}, 'Lag from TubeMQ\'s offsets'),
    h('p', { class: 'muted' }, 'The groups this gateway has served, as the brokers\' committed offsets tell ' +
      'it (read every few seconds); it stays when their consumers leave. When nothing moves, an instance ' +
      'above and its group here show the same lag.'), offsets);
  async function refresh() {
    try {
      const data = await get('v1/consumers');
      clear(box).append(...(data.instances.length ? data.instances.map(instanceBlock)
        : [h('p', { class: 'muted' }, 'No consumer instance that you may see.')]));
      clear(offsets).append(...(data.groups.length ? data.groups.map(groupRow)
        : [h('p', { class: 'muted' }, 'No reading yet (or TubeMQ\'s web API is not reachable).')]));
      if (data.incompleteWorkers.length) {
        box.prepend(errorBox(`worker(s) ${data.incompleteWorkers.join(', ')} did not answer: their instances are missing`));
      }
    } catch (error) {
      clear(box).append(errorBox(error));
    }
  }
  await refresh();
  const timer = setInterval(refresh, 2000);
  return () => clearInterval(timer);
}
