// The topic field of the Messages, Live tail and Publish pages: the topics the gateway lists (GET /v1/topics,
// those your rules let you describe) to pick from, and any other name can be typed.

import { get } from './api.js';
import { h } from './dom.js';

let fields = 0;

// An input named `topic` with its own list of choices; returns [input, datalist] to place together.
export function topicPicker(value) {
  fields += 1;
  const id = `topic-choices-${fields}`;
  const choices = h('datalist', { id });
  const input = h('input', { name: 'topic', required: true, value, list: id, autocomplete: 'off',
    placeholder: 'pick or type a topic' });
  get('v1/topics').then((data) => {
    choices.append(...data.topics.map((t) => h('option', { value: t.topic })));
  }).catch(() => {
    // no list (not allowed, or the gateway is starting): the field still takes any name
  });
  return [input, choices];
}
