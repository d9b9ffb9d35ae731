// Publish form: one message with value, key, attributes, streamId and partition; shows where the broker
// stored it (partition, offset, message id) or the API's error.

import { call, seg } from './api.js';
import { clear, errorBox, field, h } from './dom.js';
import { topicPicker } from './topic_picker.js';

function parseAttributes(text) {
  const attributes = {};
  for (const line of text.split(/\n|,/)) {
    const item = line.trim();
    if (!item) continue;
    const eq = item.indexOf('=');
    if (eq <= 0) throw new Error(`attribute "${item}" is not name=value`);
    attributes[item.slice(0, eq).trim()] = item.slice(eq + 1).trim();
  }
  return attributes;
}

export async function render(root, params) {
  const [topic, topicChoices] = topicPicker(params.get('topic') || '');
  const value = h('textarea', { name: 'value', rows: 5, spellcheck: 'false' });
  const encoding = h('select', { name: 'encoding' },
    h('option', { value: 'utf8' }, 'text'), h('option', { value: 'json' }, 'JSON'),
    h('option', { value: 'base64' }, 'base64'));
  const key = h('input', { name: 'key' });
  const streamId = h('input', { name: 'streamId' });
  const partition = h('input', { name: 'partition', type: 'number', min: 0, placeholder: 'any' });
  const attributes = h('textarea', { name: 'attributes', rows: 2, placeholder: 'name=value, one a line' });
  const out = h('div', { id: 'publish-result', 'aria-live': 'polite' });

  async function submit(event) {
    event.preventDefault();
    clear(out);
    let message;
    try {
      message = { value: value.value };
      if (encoding.value === 'json') message.value = JSON.parse(value.value);
      if (encoding.value !== 'utf8') message.encoding = encoding.value;
      if (key.value) message.key = key.value;
      if (streamId.value) message.streamId = streamId.value;
      if (partition.value !== '') message.partition = Number(partition.value);
      const attrs = parseAttributes(attributes.value);
      if (Object.keys(attrs).length) message.attributes = attrs;
    } catch (error) {
      out.append(errorBox(error));
      return;
    }
    try {
      const answer = await call('POST', `v1/topics/${seg(topic.value.trim())}/messages`, { messages: [message] });
      const r = answer.results[0];
      if (r.status !== 200) {
        out.append(errorBox(r.error ? r.error.message : `status ${r.status}`));
        return;
      }
      out.append(h('p', { class: 'ok' }, 'Stored by broker ', String(r.brokerId), '.'),
        h('dl', { class: 'facts' },
          h('dt', {}, 'partition'), h('dd', { id: 'published-partition' }, String(r.partition)),
          h('dt', {}, 'partition key'), h('dd', {}, r.partitionKey),
          h('dt', {}, 'offset'), h('dd', { id: 'published-offset' }, String(r.offset)),
          h('dt', {}, 'message id'), h('dd', {}, r.messageId),
          h('dt', {}, 'append time'), h('dd', {}, new Date(r.appendTime).toISOString())));
    } catch (error) {
      out.append(errorBox(error));
    }
  }

  root.append(
    h('h1', {}, 'Publish'),
    h('form', { id: 'publish-form', class: 'stack', onsubmit: submit },
      field('Topic', topic), topicChoices, field('Value', value), field('Value is', encoding), field('Key', key),
      field('Attributes', attributes), field('Stream id', streamId), field('Partition', partition),
      h('button', { type: 'submit' }, 'Publish')),
    out,
  );
}
