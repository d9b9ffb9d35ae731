// A topic's messages: read a range [from, to) of one partition by index offset (28 bytes per message
// entry), one page at a time, and show values as text, JSON or hex with key, streamId, attributes, time.

import { get, seg } from './api.js';
import { clear, errorBox, field, fmtNumber, h, table } from './dom.js';
import { topicPicker } from './topic_picker.js';
import { attributesText, bytesOf, msgTimeText, valueNode, viewPicker } from './values.js';

const ENTRY = 28;
// TubeMQ numbers a topic's partitions on a broker store * 10000 + index; the partitions of a store share its
// index, so a partition's offset range counts its siblings' messages too.
const STORE_BASE = 10000;

function sameStore(a, b) {
  return a.brokerId === b.brokerId &&
    Math.floor(a.partitionId / STORE_BASE) === Math.floor(b.partitionId / STORE_BASE);
}
let view = 'text';

function messageRows(messages) {
  return messages.map((m) => {
    const bytes = bytesOf(m.value);
    const row = h('tr', { dataset: { offset: String(m.offset) } },
      m.offset === null
        ? h('td', { class: 'num', title: 'not known: the partition shares its store\'s index with others, ' +
          'and the broker tells no offset per message' }, '–')
        : h('td', { class: 'num' }, m.offset),
      h('td', {}, msgTimeText(m.msgTime)),
      h('td', {}, m.key ?? '–'),
      h('td', {}, m.streamId ?? '–'),
      h('td', {}, attributesText(m.attributes) || '–'),
      h('td', { class: 'value-cell' }, valueNode(bytes, view)),
    );
    row.bytes = bytes;
    return row;
  });
}

export async function render(root, params) {
  const [topic, topicChoices] = topicPicker(params.get('topic') || '');
  const partition = h('select', { name: 'partition' });
  const from = h('input', { name: 'from', type: 'number', min: 0, step: ENTRY });
  const to = h('input', { name: 'to', type: 'number', min: 0, step: ENTRY });
  const limit = h('input', { name: 'limit', type: 'number', min: 1, max: 1000, value: 50 });
  const bounds = h('span', { class: 'muted', id: 'bounds' });
  const out = h('div', { id: 'range' });
  const status = h('p', { class: 'muted', id: 'range-status' });
  let partitions = [];
  let rows = [];
  let next = null;
  let generation = 0; // a newer read makes the answers of older ones moot

  function showBounds() {
    const p = partitions.find((x) => x.partitionKey === partition.value);
    if (!p) return;
    const entries = fmtNumber(Math.round((p.maxOffset - p.minOffset) / ENTRY));
    const sharing = partitions.filter((x) => sameStore(x, p)).length;
    bounds.textContent = `offsets ${fmtNumber(p.minOffset)} – ${fmtNumber(p.maxOffset)} ` + (sharing > 1
      ? `(${entries} entries of a store this partition shares with ${sharing - 1} other(s): ` +
        'only some of them are its messages)'
      : `(${entries} message(s))`);
    // By default the newest entries: the last `limit` of them.
    const wanted = Math.max(1, Number(limit.value) || 50) * ENTRY;
    from.value = String(Math.max(p.minOffset, p.maxOffset - wanted));
    to.value = String(p.maxOffset);
    readFresh(); // the partition's newest entries at once
  }

  function readFresh() {
    generation += 1;
    rows = [];
    next = null;
    read(from.value || '0', generation);
  }

  async function loadPartitions(event) {
    if (event) event.preventDefault();
    clear(partition);
    clear(out);
    status.textContent = '';
    try {
      const data = await get(`v1/topics/${seg(topic.value.trim())}/partitions`);
      partitions = data.partitions;
      for (const p of partitions) {
        partition.append(h('option', { value: p.partitionKey }, `${p.partitionKey} (${p.broker ?? 'broker ' + p.brokerId})`));
      }
      const wanted = params.get('partition');
      if (wanted && partitions.some((p) => p.partitionKey === wanted)) partition.value = wanted;
      showBounds();
    } catch (error) {
      out.append(errorBox(error));
    }
  }

  function draw() {
    clear(out).append(rows.length ? table(['offset', 'time', 'key', 'streamId', 'attributes', 'value'], rows,
      { id: 'messages-table' }) : h('p', { class: 'muted' }, 'No message in this range.'));
  }

  async function read(start, mine) {
    const t = topic.value.trim();
    const query = new URLSearchParams({ from: String(start), to: to.value, limit: limit.value || '50' });
    try {
      const page = await get(`v1/topics/${seg(t)}/partitions/${seg(partition.value)}/messages?${query}`);
      if (mine !== generation) return;
      rows.push(...messageRows(page.messages));
      next = page.next < page.to ? page.next : null;
      draw();
      status.textContent = `${rows.length} message(s) of [${fmtNumber(Number(from.value))}, ` +
        `${fmtNumber(page.to)})` + (next === null ? '' : `; more from ${fmtNumber(next)}`);
      more.hidden = next === null;
    } catch (error) {
      if (mine === generation) out.append(errorBox(error));
    }
  }

  const more = h('button', { type: 'button', hidden: true, onclick: () => read(next, generation) }, 'Read more');
  const picker = viewPicker(view, (v) => {
    view = v;
    for (const row of rows) row.lastChild.replaceChildren(valueNode(row.bytes, view));
  });
  partition.addEventListener('change', showBounds);
  root.append(
    h('h1', {}, 'Messages'),
    h('form', { class: 'inline', onsubmit: loadPartitions }, field('Topic', topic), topicChoices,
      h('button', { type: 'submit' }, 'Partitions')),
    h('form', { class: 'inline', id: 'range-form', onsubmit: (e) => {
      e.preventDefault();
      readFresh();
    } }, field('Partition', partition), field('From', from), field('To', to), field('Limit', limit),
    h('button', { type: 'submit' }, 'Read'), ' ', field('Values as', picker)),
    bounds, status, out, more,
  );
  if (topic.value) await loadPartitions();
}
