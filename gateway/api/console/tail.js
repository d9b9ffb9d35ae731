// Live tail: a consumer instance of a group of its own (startPosition latest, autoCommit) streams a topic's
// new messages over Server-Sent Events, read with fetch() so the credential travels in a header. Newest
// first; pause holds new messages back, resume shows them; stop leaves the group and keeps what was shown.
// The tail lives on while you visit other pages of the console.

import { call, headers, openStream, seg, url } from './api.js';
import { clear, errorBox, field, h } from './dom.js';
import { attributesText, bytesOf, msgTimeText, valueNode, viewPicker } from './values.js';
import { events } from './sse.js';
import { topicPicker } from './topic_picker.js';

const MAX_ROWS = 500;
const state = {
  topic: '', streamId: '', group: `console-tail-${Math.random().toString(36).slice(2, 10)}`,
  running: false, paused: false, instance: null, controller: null, lastId: null,
  messages: [], held: [], status: 'stopped', error: null, view: 'text', partitions: null, watcher: null,
};
let redraw = () => {};

function setStatus(text, error = null) {
  state.status = text;
  state.error = error;
  redraw();
}

function instancePath() {
  return `v1/consumers/${seg(state.group)}/instances/${seg(state.instance)}`;
}

function receive(message) {
  if (state.streamId && message.streamId !== state.streamId) return;
  message.receivedAt = new Date();
  if (state.paused) state.held.push(message);
  else state.messages.unshift(message);
  state.messages.length = Math.min(state.messages.length, MAX_ROWS);
  redraw();
}

async function pump() {
  while (state.running) {
    state.controller = new AbortController();
    try {
      const answer = await openStream(`${instancePath()}/stream?format=base64`,
        { signal: state.controller.signal, lastEventId: state.lastId });
      setStatus(state.paused ? 'paused' : 'tailing');
      for await (const ev of events(answer)) {
        if (ev.event === 'message') {
          if (ev.id) state.lastId = ev.id;
          if (state.error) setStatus(state.paused ? 'paused' : 'tailing');
          receive(JSON.parse(ev.data));
        } else if (ev.event === 'unavailable') {
          // a broker outage: the stream stays open and goes on by itself once the broker is back
          const body = JSON.parse(ev.data);
          setStatus('waiting for the broker', new Error(body.error ? body.error.message : ev.event));
        } else if (ev.event === 'gone' || ev.event === 'cut') {
          const body = JSON.parse(ev.data);
          throw new Error(body.error ? body.error.message : ev.event);
        }
      }
    } catch (error) {
      if (!state.running) return;
      if (error && error.status === 410) {
        state.running = false;
        clearInterval(state.watcher);
        setStatus('stopped', error);
        return;
      }
      setStatus('reconnecting', error);
    }
    if (state.running) await new Promise((resolve) => setTimeout(resolve, 1000));
  }
}

// Which partitions the tail's instance holds and reads (from a known offset: from then on every new message
// reaches it), shown beside the status.
async function watch() {
  if (!state.running || !state.instance) return;
  try {
    const held = await call('GET', instancePath());
    const reading = held.partitions.filter((p) => p.currOffset >= 0).length;
    // until the master has balanced the new group (its next balance round), the instance holds nothing yet
    const text = held.partitions.length ? `reading ${reading} of ${held.partitions.length} partition(s)`
      : 'waiting for the master to assign partitions to the group';
    if (text !== state.partitions) {
      state.partitions = text;
      redraw();
    }
  } catch {
    // the stream's own errors say what is wrong
  }
}

async function start(topic, streamId, group) {
  Object.assign(state, { topic, streamId, group, messages: state.messages, held: [], lastId: null,
    paused: false, error: null });
  setStatus('joining');
  try {
    const body = { topics: [topic], startPosition: 'latest', autoCommit: true };
    if (streamId) body.filters = { [topic]: [streamId] };
    const created = await call('POST', `v1/consumers/${seg(group)}`, body);
    state.instance = created.instanceId;
    state.running = true;
    state.partitions = null;
    state.watcher = setInterval(watch, 1000);
    watch();
    pump();
  } catch (error) {
    setStatus('stopped', error);
  }
}

async function stop() {
  state.running = false;
  clearInterval(state.watcher);
  state.partitions = null;
  if (state.controller) state.controller.abort();
  const instance = state.instance;
  state.instance = null;
  setStatus(`stopped; ${state.messages.length} message(s) kept`);
  if (instance) {
    try {
      await call('DELETE', `v1/consumers/${seg(state.group)}/instances/${seg(instance)}`);
    } catch {
      // gone already: nothing to leave
    }
  }
}

function pause() {
  state.paused = true;
  setStatus('paused');
}

function resume() {
  state.paused = false;
  state.messages.unshift(...state.held.reverse());
  state.held = [];
  state.messages.length = Math.min(state.messages.length, MAX_ROWS);
  setStatus(state.running ? 'tailing' : state.status);
}

// Leave the group when the tab goes away (the instance's lease would end it later otherwise).
window.addEventListener('pagehide', () => {
  if (!state.instance) return;
  fetch(url(instancePath()), { method: 'DELETE', headers: headers(), credentials: 'omit', keepalive: true });
});

function row(m) {
  const bytes = bytesOf(m.value);
  const tr = h('tr', { dataset: { token: m.token } },
    h('td', {}, m.receivedAt.toLocaleTimeString()),
    h('td', {}, msgTimeText(m.msgTime)),
    h('td', {}, m.partitionKey),
    h('td', {}, m.key ?? '–'),
    h('td', {}, m.streamId ?? '–'),
    h('td', {}, attributesText(m.attributes) || '–'),
    h('td', { class: 'value-cell' }, valueNode(bytes, state.view)));
  return tr;
}

export async function render(root, params) {
  const [topic, topicChoices] = topicPicker(params.get('topic') || state.topic);
  const streamId = h('input', { name: 'streamId', placeholder: 'every stream', value: state.streamId });
  const group = h('input', { name: 'group', required: true, value: state.group });
  const buttons = h('span', { class: 'buttons' });
  const status = h('p', { id: 'tail-status', class: 'muted', 'aria-live': 'polite' });
  const list = h('div', { id: 'tail-list' });
  const picker = viewPicker(state.view, (v) => { state.view = v; redraw(); });

  redraw = () => {
    const running = state.running;
    clear(buttons).append(
      h('button', { type: 'submit', id: 'tail-start', disabled: running }, 'Start'),
      h('button', { type: 'button', id: 'tail-pause', disabled: !running || state.paused, onclick: pause }, 'Pause'),
      h('button', { type: 'button', id: 'tail-resume', disabled: !state.paused, onclick: resume },
        state.held.length ? `Resume (${state.held.length} new)` : 'Resume'),
      h('button', { type: 'button', id: 'tail-stop', disabled: !running, onclick: stop }, 'Stop'),
      h('button', { type: 'button', id: 'tail-clear', onclick: () => { state.messages = []; redraw(); } }, 'Clear'),
    );
    clear(status).append(`${state.status}` + (state.running ? ` (group ${state.group})` : ''),
      state.running && state.partitions ? h('span', { id: 'tail-partitions' }, `; ${state.partitions}`) : '');
    if (state.error) status.append(errorBox(state.error));
    clear(list).append(state.messages.length
      ? h('table', { id: 'tail-table' },
        h('thead', {}, h('tr', {}, ['received', 'time', 'partition', 'key', 'streamId', 'attributes', 'value']
          .map((c) => h('th', {}, c)))),
        h('tbody', {}, state.messages.map(row)))
      : h('p', { class: 'muted' }, 'No message yet.'));
  };
  root.append(
    h('h1', {}, 'Live tail'),
    h('p', { class: 'muted' }, 'Joins its own consumer group from the newest message on (your rules must ' +
      'allow consume on the topic and group); newest first, at most 500 kept.'),
    h('form', { id: 'tail-form', class: 'inline', onsubmit: (e) => {
      e.preventDefault();
      if (!state.running) start(topic.value.trim(), streamId.value.trim(), group.value.trim());
    } }, field('Topic', topic), topicChoices, field('Stream id', streamId), field('Group', group), buttons,
    field('Values as', picker)),
    status, list,
  );
  redraw();
  return () => { redraw = () => {}; };
}
