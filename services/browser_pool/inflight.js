// Installed in every document of an episode's context (context.add_init_script), before the page's own
// scripts. It records what observe.js cannot see from the DOM alone:
// - fetch and XMLHttpRequest calls in flight, response bodies being read included (window.__webrlInflight);
// - short timers pending (window.__webrlTimers): a setTimeout of at most SHORT_TIMER_MS set by page code that
//   does not itself run in a timer callback (a debounce after typing, a submenu shown after a hover), so a
//   polling loop (a timer that sets the next one) is never waited for;
// - elements given a click-like listener with addEventListener (window.__webrlClickable, a WeakSet), so a
//   control inside a cursor:pointer wrapper gets its own id;
// - popups the page opens (window.open, links with a target) in window.__webrlPopups, so the episode knows
//   to wait for the new tab.
// - when the page last changed its DOM (window.__webrlLastMutation, performance.now() of the last mutation
//   other than observe.js's own id marks), so an observation can count the quiet time that already passed;
// - animation-frame callbacks pending (window.__webrlFrames): work the page scheduled for its next frame, which
//   an observation waits a frame for;
// - that the document is about to be replaced (window.__webrlLeaving, the event that said so): a form submitted
//   in this tab (its navigation starts in a later task, after the key or click that submitted it returned) or a
//   cross-document navigation begun (Navigation API "navigate"), so an observation does not read the old page;
// When the fetch/XHR count or the short-timer count drops to zero it fires the window event "webrl-idle".
// observe.js waits with window.__webrlSetTimeout (the page's original setTimeout), which is never counted.
(() => {
  if (window.__webrlInflight !== undefined) return;
  const SHORT_TIMER_MS = 500;  // a page's "in a moment" (debounce, hover intent); longer timers are not waited for
  const CLICK_EVENTS = new Set(["click", "mousedown", "mouseup", "pointerdown", "pointerup", "touchstart"]);
  window.__webrlInflight = 0;
  window.__webrlTimers = 0;
  window.__webrlPopups = 0;
  window.__webrlClickable = new WeakSet();
  const idle = () => window.dispatchEvent(new Event("webrl-idle"));

  window.__webrlLastMutation = performance.now();
  new MutationObserver((records) => {
    for (const r of records) {
      if (r.type !== "attributes" || r.attributeName !== "data-webrl-id") {
        window.__webrlLastMutation = performance.now();
        return;
      }
    }
  }).observe(document, { subtree: true, childList: true, attributes: true, characterData: true });

  const addEventListener = EventTarget.prototype.addEventListener;
  EventTarget.prototype.addEventListener = function (type, ...rest) {
    if (CLICK_EVENTS.has(type) && this instanceof Element) window.__webrlClickable.add(this);
    return addEventListener.call(this, type, ...rest);
  };

  const setTimeout = window.setTimeout;
  const clearTimeout = window.clearTimeout;
  window.__webrlSetTimeout = setTimeout.bind(window);
  window.__webrlClearTimeout = clearTimeout.bind(window);
  const pending = new Set();
  let inTimer = false;  // true while a timer callback and the microtasks it queued run
  const forget = (id) => {
    if (pending.delete(id)) {
      window.__webrlTimers = pending.size;
      if (pending.size === 0) idle();
    }
  };
  window.setTimeout = function (handler, delay, ...args) {
    const counted = typeof handler === "function" && !inTimer && (Number(delay) || 0) <= SHORT_TIMER_MS;
    if (typeof handler !== "function") return setTimeout.call(window, handler, delay, ...args);
    const id = setTimeout.call(window, function (...callArgs) {
      inTimer = true;
      setTimeout.call(window, () => { inTimer = false; }, 0);
      try {
        return handler.apply(this, callArgs);
      } finally {
        forget(id);
      }
    }, delay, ...args);
    if (counted) {
      pending.add(id);
      window.__webrlTimers = pending.size;
    }
    return id;
  };
  window.clearTimeout = function (id) {
    forget(id);
    return clearTimeout.call(window, id);
  };

  window.__webrlFrames = 0;
  const frames = new Set();
  const requestFrame = window.requestAnimationFrame;
  const cancelFrame = window.cancelAnimationFrame;
  if (requestFrame && cancelFrame) {
    window.__webrlRequestFrame = requestFrame.bind(window);  // observe.js's own frame wait, never counted
    window.requestAnimationFrame = function (callback) {
      const id = requestFrame.call(window, (time) => {
        frames.delete(id);
        window.__webrlFrames = frames.size;
        return callback(time);
      });
      frames.add(id);
      window.__webrlFrames = frames.size;
      return id;
    };
    window.cancelAnimationFrame = function (id) {
      frames.delete(id);
      window.__webrlFrames = frames.size;
      return cancelFrame.call(window, id);
    };
  }

  window.__webrlLeaving = null;
  const SELF_TARGETS = ["_self", "_parent", "_top", ""];
  window.addEventListener("submit", (event) => {
    const form = event.target;
    const target = (event.submitter && event.submitter.getAttribute("formtarget")) || form.getAttribute("target") || "";
    const method = (event.submitter && event.submitter.getAttribute("formmethod")) || form.getAttribute("method") || "";
    if (SELF_TARGETS.includes(target.toLowerCase()) && method.toLowerCase() !== "dialog") window.__webrlLeaving = event;
  }, true);
  if (window.navigation) {
    window.navigation.addEventListener("navigate", (event) => {
      if (!event.destination.sameDocument && !event.downloadRequest) window.__webrlLeaving = event;
    });
    // a single-page app that intercepted the navigation stays: its entry changes in this document
    const stayed = () => { window.__webrlLeaving = null; };
    window.navigation.addEventListener("currententrychange", stayed);
    window.navigation.addEventListener("navigateerror", stayed);
  }
  window.addEventListener("pageshow", (event) => { if (event.persisted) window.__webrlLeaving = null; });  // back from bfcache

  const open = window.open;
  window.open = function (...args) {
    window.__webrlPopups += 1;
    return open.apply(this, args);
  };
  document.addEventListener("click", (event) => {
    const link = event.target instanceof Element ? event.target.closest("a[href][target]") : null;
    const target = link ? link.getAttribute("target").toLowerCase() : "_self";
    if (!SELF_TARGETS.includes(target) && !event.defaultPrevented) window.__webrlPopups += 1;
  }, true);
  const begin = () => { window.__webrlInflight += 1; };
  const end = () => {
    window.__webrlInflight = Math.max(0, window.__webrlInflight - 1);
    if (window.__webrlInflight === 0) idle();
  };
  const fetch = window.fetch;
  if (fetch) {
    window.fetch = function (...args) {
      begin();
      let request;
      try { request = fetch.apply(this, args); } catch (err) { end(); throw err; }
      return request.finally(end);
    };
  }
  // Reading a response's body is part of the request: a page that does fetch(...).then((r) => r.json())
  // has nothing in flight between the headers and the body otherwise.
  for (const method of ["text", "json", "arrayBuffer", "blob", "formData"]) {
    const read = Response.prototype[method];
    if (!read) continue;
    Response.prototype[method] = function (...args) {
      begin();
      let body;
      try { body = read.apply(this, args); } catch (err) { end(); throw err; }
      return body.finally(end);
    };
  }
  const send = XMLHttpRequest.prototype.send;
  XMLHttpRequest.prototype.send = function (...args) {
    begin();
    this.addEventListener("loadend", end, { once: true });
    try { return send.apply(this, args); } catch (err) { end(); throw err; }
  };
})();
