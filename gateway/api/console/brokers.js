// Brokers: those holding the partitions of the topics you may describe, with the gateway's shielding state
// (a shielded broker gets no sends until its cooldown ends). Addresses need describe_cluster.

import { get } from './api.js';
import { clear, errorBox, fmtNumber, h, table } from './dom.js';

const STATES = { closed: 'in use', open: 'shielded', half_open: 'on trial' };

export async function render(root) {
  const box = h('div', {}, h('p', { class: 'muted' }, 'Loading…'));
  root.append(h('h1', {}, 'Brokers'),
    h('p', { class: 'muted' }, 'Brokers of the topics listed on the Topics page, as this gateway process ' +
      'sees them.'), box);
  async function refresh() {
    try {
      const data = await get('v1/topics');
      clear(box).append(data.brokers.length ? table(
        ['broker id', 'address', 'state', 'reason', 'shielded for', 'failures in a row', 'sends', 'successes',
          'partitions'],
        data.brokers.map((b) => h('tr', { dataset: { broker: String(b.brokerId) } },
          h('td', { class: 'num' }, b.brokerId),
          h('td', {}, b.broker ?? '(hidden: needs describe_cluster)'),
          h('td', { class: `state state-${b.state}` }, STATES[b.state] || b.state),
          h('td', {}, b.reason ?? '–'),
          h('td', { class: 'num' }, b.shieldedForSeconds ? `${b.shieldedForSeconds.toFixed(1)} s` : '–'),
          h('td', { class: 'num' }, b.consecutiveFailures),
          h('td', { class: 'num' }, fmtNumber(b.sends)),
          h('td', { class: 'num' }, fmtNumber(b.successes)),
          h('td', { class: 'num' }, b.partitions))),
        { id: 'brokers-table' },
      ) : h('p', { class: 'muted' }, 'No broker known yet: publish to or open a topic first.'));
    } catch (error) {
      clear(box).append(errorBox(error));
    }
  }
  await refresh();
  const timer = setInterval(refresh, 3000);
  return () => clearInterval(timer);
}
