// Push subscriptions: those you may manage (GET /v1/subscriptions: manage_subscriptions on their group and
// topics), with their state in the gateway process that answered (each process of each replica delivers
// its share of the group's partitions and counts its own), refreshed every two seconds. Those made through
// the API can be paused and resumed here (on every gateway); those of push.subscriptions_file only by
// changing the file.

import { call, get, seg } from './api.js';
import { clear, errorBox, fmtNumber, h, table } from './dom.js';

const STATUS = { running: 'running', paused: 'paused', failing: 'failing', starting: 'starting' };

function topicsText(topics) {
  return Object.entries(topics).map(([t, ids]) => (ids.length ? `${t} (streams ${ids.join(', ')})` : t)).join(', ');
}

function deliveriesText(deliveries) {
  const entries = Object.entries(deliveries || {}).filter(([, n]) => n > 0);
  return entries.length ? entries.map(([outcome, n]) => `${outcome} ${fmtNumber(n)}`).join(', ') : '–';
}

// The endpoint without its query string, which may carry a token (the logs leave it out too).
function endpointText(endpoint) {
  try {
    const u = new URL(endpoint);
    return `${u.origin}${u.pathname}${u.search ? '?…' : ''}`;
  } catch {
    return endpoint;
  }
}

function lastText(state) {
  if (!state.lastOutcome) return '–';
  const at = state.lastDeliveryAt ? new Date(state.lastDeliveryAt).toLocaleTimeString() : '';
  return at ? `${state.lastOutcome} at ${at}` : state.lastOutcome;
}

function statusCell(state) {
  const status = state.status;
  return h('td', { class: `status status-${status}${status === 'failing' ? ' bad' : ''}` },
    STATUS[status] || status,
    state.lastError ? h('div', { class: 'muted last-error' }, state.lastError) : null);
}

export async function render(root) {
  const notice = h('div', { id: 'subscriptions-notice' });
  const box = h('div', { id: 'subscriptions' }, h('p', { class: 'muted' }, 'Loading…'));
  root.append(h('h1', {}, 'Push subscriptions'),
    h('p', { class: 'muted' }, 'The subscriptions you may manage. The state is this gateway process\'s: ' +
      'every process of every replica delivers its share of a group\'s partitions and counts its own. ' +
      'Pause and resume act on every gateway; a subscription of the subscriptions file changes only with ' +
      'the file.'), notice, box);
  let busy = false;

  async function act(name, verb) {
    busy = true;
    clear(notice);
    try {
      await call('POST', `v1/subscriptions/${seg(name)}/${verb}`);
    } catch (error) {
      notice.append(errorBox(error));
    } finally {
      busy = false;
    }
    await refresh();
  }

  function actionCell(s) {
    if (s.source !== 'api') {
      return h('td', { class: 'actions muted', title: 'defined in push.subscriptions_file: change the file' },
        'in the file');
    }
    const verb = s.paused ? 'resume' : 'pause';
    return h('td', { class: 'actions' }, h('button', {
      type: 'button',
      class: `${verb}-button`,
      onclick: (event) => {
        event.currentTarget.disabled = true;
        act(s.name, verb);
      },
    }, s.paused ? 'Resume' : 'Pause'));
  }

  async function refresh() {
    if (busy) return;
    try {
      const data = await get('v1/subscriptions');
      clear(box).append(data.subscriptions.length ? table(
        ['name', 'group', 'topics', 'endpoint', 'source', 'state', 'in flight', 'deliveries', 'last', ''],
        data.subscriptions.map((s) => h('tr', { dataset: { subscription: s.name } },
          h('td', { class: 'name' }, s.name),
          h('td', {}, s.group),
          h('td', {}, topicsText(s.topics)),
          h('td', { class: 'endpoint' }, h('code', {}, endpointText(s.endpoint))),
          h('td', { class: 'source' }, s.source),
          statusCell(s.state),
          h('td', { class: 'num in-flight' }, fmtNumber(s.state.inFlight)),
          h('td', { class: 'deliveries' }, deliveriesText(s.state.deliveries)),
          h('td', { class: 'last' }, lastText(s.state)),
          actionCell(s))),
        { id: 'subscriptions-table' },
      ) : h('p', { class: 'muted' }, 'No push subscription that you may manage.'));
    } catch (error) {
      clear(box).append(errorBox(error));
    }
  }
  await refresh();
  const timer = setInterval(refresh, 2000);
  return () => clearInterval(timer);
}
