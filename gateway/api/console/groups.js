// Groups: the consumer instances this gateway holds that you may see (your own; every one with the admin
// action), with each held partition's offsets and lag in messages, refreshed every two seconds.

import { get } from './api.js';
import { clear, errorBox, fmtNumber, h, table } from './dom.js';

// A group's total lag: partitions of one store (partition id = store * 10000 + index) share its index and
// each reports the store's backlog, so a store counts once, with its largest figure (as the metrics do).
function totalLag(partitions) {
  const stores = new Map();
  for (const p of partitions) {
    const store = `${p.brokerId}:${p.topic}:${Math.floor(p.partitionId / 10000)}`;
    stores.set(store, Math.max(stores.get(store) ?? 0, p.lag ?? 0));
  }
  return [...stores.values()].reduce((sum, lag) => sum + lag, 0);
}

function instanceBlock(i) {
  const lag = totalLag(i.partitions);
  const topics = Object.entries(i.topics).map(([t, ids]) => (ids.length ? `${t} (streams ${ids.join(', ')})` : t));
  return h('section', { class: 'card instance', dataset: { group: i.group, instance: i.instanceId } },
    h('h3', {}, `group ${i.group}`),
    h('p', { class: 'muted' }, `instance ${i.instanceId.slice(0, 16)}… of ${i.owner}`,
      i.worker === null ? '' : `, worker ${i.worker}`, `; topics ${topics.join(', ')}; `,
      `${i.pendingMessages} delivered not committed, ${i.bufferedMessages} buffered; `,
      `idle ${i.idleSeconds.toFixed(0)} s; total lag `, h('strong', { class: 'total-lag' }, fmtNumber(lag))),
    i.partitions.length ? table(['partition', 'read position', 'end', 'lag', 'reading'],
      i.partitions.map((p) => h('tr', { dataset: { partition: p.partitionKey } },
        h('td', {}, p.partitionKey),
        h('td', { class: 'num' }, p.currOffset < 0 ? '–' : fmtNumber(p.currOffset)),
        h('td', { class: 'num' }, p.maxOffset < 0 ? '–' : fmtNumber(p.maxOffset)),
        h('td', { class: 'num lag' }, p.lag === null ? '–' : String(p.lag)),
        h('td', {}, p.inUse ? 'yes' : 'no')))) : h('p', { class: 'muted' }, 'No partition assigned yet.'));
}

function groupRow(g) {
  const lag = totalLag(g.partitions);
  const idle = g.consumers === 0 && lag > 0;
  return h('section', { class: 'card tubemq-group', dataset: { group: g.group } },
    h('h3', {}, `group ${g.group}`),
    h('p', { class: idle ? 'bad' : 'muted' },
      g.consumers < 0 ? 'consumers unknown' : `${g.consumers} consumer(s) in the group`,
      idle ? ' — lag and nobody consuming' : '',
      `; read ${new Date(g.readAt).toLocaleTimeString()}; total lag `,
      h('strong', { class: 'total-lag' }, fmtNumber(lag))),
    table(['partition', 'lag'], g.partitions.map((p) => h('tr', { dataset: { partition: p.partitionKey } },
      h('td', {}, p.partitionKey), h('td', { class: 'num lag' }, String(p.lag))))));
}

export async function render(root) {
  const box = h('div', { id: 'groups' }, h('p', { class: 'muted' }, 'Loading…'));
  const offsets = h('div', { id: 'group-offsets' });
  root.append(h('h1', {}, 'Groups'),
    h('p', { class: 'muted' }, 'Consumer instances held by this gateway. Lag = (end − read position) / 28 ' +
      'bytes per index entry: exact with one partition per store, an upper bound otherwise.'), box,
    h('h2', {}, 'Lag from TubeMQ\'s offsets'),
    h('p', { class: 'muted' }, 'The groups this gateway has served, as the brokers\' committed offsets tell ' +
      'it (read every few seconds); it stays when their consumers leave.'), offsets);
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
