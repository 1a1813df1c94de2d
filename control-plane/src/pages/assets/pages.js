// Behaviour of the control plane's own small pages (pages.ts): each one
// completes its action through the public API with fetch, from the same
// origin. Plain script, no build step, no inline code (the pages' CSP allows
// scripts from 'self' only). The page is named by <body data-page="...">.
'use strict';
(function () {
  var $ = function (id) { return document.getElementById(id); };
  var page = document.body.dataset.page;
  var form = $('form');
  var status = $('status');
  var token = new URLSearchParams(location.search).get('token') || '';

  function show(message, kind) {
    status.textContent = message;
    status.className = kind || '';
  }

  function busy(on) {
    var button = $('submit');
    if (button) button.disabled = on;
  }

  async function post(path, body, headers) {
    var res;
    try {
      res = await fetch(path, {
        method: 'POST',
        headers: Object.assign({ 'content-type': 'application/json', accept: 'application/json' }, headers || {}),
        body: JSON.stringify(body),
        credentials: 'same-origin',
      });
    } catch (e) {
      return { status: 0, body: null };
    }
    var json = null;
    try { json = await res.json(); } catch (e) { /* no body */ }
    return { status: res.status, body: json };
  }

  async function get(path, headers) {
    try {
      var res = await fetch(path, { headers: Object.assign({ accept: 'application/json' }, headers || {}), credentials: 'same-origin' });
      return { status: res.status, body: await res.json() };
    } catch (e) {
      return { status: 0, body: null };
    }
  }

  function fieldErrors(res) {
    return (res.body && Array.isArray(res.body.errors)) ? res.body.errors : [];
  }

  /** One sentence for an error answer. */
  function problem(res) {
    if (res.status === 0) return 'The server could not be reached. Check the connection and try again.';
    if (res.status === 429) return 'Too many attempts. Wait a few minutes and try again.';
    if (fieldErrors(res).some(function (e) { return e.field === 'token'; })) {
      return 'This link is invalid, has expired or was already used. Ask for a new one.';
    }
    var messages = fieldErrors(res).map(function (e) { return e.field ? e.field.replace(/_/g, ' ') + ': ' + e.message : e.message; });
    if (messages.length) return messages.join(' ');
    return (res.body && res.body.message) || 'Something went wrong (HTTP ' + res.status + '). Try again later.';
  }

  function needsToken() {
    if (token) return true;
    form.hidden = true;
    show('This link is incomplete: it carries no token. Open the whole link from the e-mail, or copy it into the address bar.', 'error');
    return false;
  }

  function newPasswordOrComplain() {
    var password = $('password').value;
    if (password !== $('password-again').value) {
      show('The two passwords differ.', 'error');
      return undefined;
    }
    return password;
  }

  var actions = {
    'verify-email': {
      needsToken: true,
      async submit() {
        // This page asks for the password chosen at registration (checked; the API takes the token alone too), or a new one to replace it.
        var body = { token: token };
        if ($('new-password').value) {
          if ($('new-password').value !== $('new-password-again').value) return show('The two new passwords differ.', 'error');
          body.new_password = $('new-password').value;
        } else if ($('password').value) {
          body.password = $('password').value;
        } else {
          return show('Enter the password you chose when you registered, or choose a new one.', 'error');
        }
        var res = await post('/v1/auth/email/verify', body);
        if (res.status === 200) {
          return done(body.new_password
            ? 'Your e-mail address is confirmed and your new password is set. Every device was signed out: sign in with the new password.'
            : 'Your e-mail address is confirmed. Every device was signed out: sign in with your password.');
        }
        show(problem(res), 'error');
      },
    },
    'reset-password': {
      needsToken: true,
      async submit() {
        var password = newPasswordOrComplain();
        if (password === undefined) return;
        var res = await post('/v1/auth/password/reset', { token: token, new_password: password });
        if (res.status === 200) return done('Your password is changed and every device was signed out. Sign in with the new password.');
        show(problem(res), 'error');
      },
    },
    'accept-invitation': {
      needsToken: true,
      async submit() {
        var password = newPasswordOrComplain();
        if (password === undefined) return;
        var res = await post('/v1/auth/invitation/accept', { token: token, new_password: password });
        if (res.status === 200) return done('Your account is active. Sign in with your e-mail address and the password you chose.');
        show(problem(res), 'error');
      },
    },
    'forgot-password': {
      async submit() {
        var res = await post('/v1/auth/password/forgot', { email: $('email').value });
        if (res.status === 200) return done('If an account uses this address, a link to choose a new password is on its way. It works for 15 minutes.');
        show(problem(res), 'error');
      },
    },
    login: {
      async submit() {
        var body = { email: $('email').value, password: $('password').value };
        var code = $('code').value.trim();
        if (code) {
          if (/^\d+$/.test(code)) body.totp_code = code;
          else body.recovery_code = code;
        }
        var res = await post('/v1/auth/login', body);
        if (res.status === 401 && res.body && res.body.code === 'MFA_REQUIRED') {
          $('code-field').hidden = false;
          return show('Enter the code from your authenticator app (or a recovery code).', 'info');
        }
        if (res.status !== 200) return show(problem(res), 'error');
        var me = await get('/v1/users/me', { authorization: 'Bearer ' + res.body.data.access_token });
        var who = me.status === 200 ? me.body.data.email : body.email;
        done('Signed in as ' + who + '. The API reference at /docs lists what you can do with the access token.');
      },
    },
  };

  function done(message) {
    form.hidden = true;
    show(message, 'ok');
  }

  var action = actions[page];
  if (!action || !form) return;
  if (action.needsToken && !needsToken()) return;
  form.addEventListener('submit', async function (event) {
    event.preventDefault();
    busy(true);
    show('Working…', 'info');
    try {
      await action.submit();
    } finally {
      busy(false);
    }
  });
})();
