// The console's entry: sign-in, navigation between pages (#/page?params) and the page life cycle.

import { ApiError, credential, forget, get, remember } from './api.js';
import { clear, errorBox, hashParams, visible } from './dom.js';
import * as brokers from './brokers.js';
import * as groups from './groups.js';
import * as messages from './messages.js';
import * as publish from './publish.js';
import * as subscriptions from './subscriptions.js';
import * as tail from './tail.js';
import * as topics from './topics.js';

const PAGES = { topics, messages, tail, publish, groups, brokers, subscriptions };
const main = document.getElementById('main');
const nav = document.getElementById('nav');
const signin = document.getElementById('signin');
const who = document.getElementById('who');
const signout = document.getElementById('signout');
let cleanup = null;
let generation = 0;

function showSignin(message) {
  if (cleanup) cleanup();
  cleanup = null;
  clear(main);
  nav.hidden = true;
  signout.hidden = true;
  who.textContent = '';
  signin.hidden = false;
  document.getElementById('signin-error').textContent = visible(message || '');
  document.getElementById('signin-secret').focus();
}

async function route() {
  const { page, params } = hashParams();
  const module = PAGES[page] || topics;
  if (cleanup) cleanup();
  cleanup = null;
  const mine = ++generation;
  for (const a of nav.querySelectorAll('a')) a.classList.toggle('current', a.dataset.page === page);
  clear(main);
  try {
    const done = await module.render(main, params);
    if (mine === generation) cleanup = typeof done === 'function' ? done : null;
    else if (typeof done === 'function') done();
  } catch (error) {
    main.append(errorBox(error));
  }
}

function enter(mode) {
  signin.hidden = true;
  nav.hidden = false;
  const c = credential();
  who.textContent = mode === 'open' ? 'open mode (no sign-in needed)'
    : `signed in with ${c && c.kind === 'apikey' ? 'an API key' : 'a bearer token'}`;
  signout.hidden = mode === 'open';
  route();
}

// Whether the credential (or none, in open mode) gets into the API: 401 means no.
async function probe() {
  try {
    await get('v1/topics');
    return 'ok';
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) return 'unauthenticated';
    return 'ok'; // 403 and others: signed in, the pages say what is refused
  }
}

document.getElementById('signin-form').addEventListener('submit', async (event) => {
  event.preventDefault();
  const secret = document.getElementById('signin-secret');
  remember(document.getElementById('signin-kind').value, secret.value.trim());
  secret.value = '';
  if ((await probe()) === 'unauthenticated') {
    forget();
    showSignin('The gateway did not accept this credential.');
    return;
  }
  enter('signed-in');
});

signout.addEventListener('click', () => {
  forget();
  showSignin('Signed out.');
});

window.addEventListener('console:unauthenticated', () => {
  forget();
  showSignin('Your credential is no longer accepted: sign in again.');
});

window.addEventListener('hashchange', () => {
  if (!nav.hidden) route();
});

(async () => {
  const had = credential();
  const result = await probe();
  if (result === 'ok') enter(had ? 'signed-in' : 'open');
  else {
    forget();
    showSignin(had ? 'Your credential is no longer accepted: sign in again.' : '');
  }
})();
