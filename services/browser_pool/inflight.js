// Installed in every document of an episode's context (context.add_init_script): counts fetch and
// XMLHttpRequest calls in flight, so observe.js can wait for a page's own requests before it reads the DOM.
// When the count drops to zero it fires the window event "webrl-idle". It also counts popups the page opens
// (window.open, links with a target) in window.__webrlPopups, so the episode knows to wait for the new tab.
(() => {
  if (window.__webrlInflight !== undefined) return;
  window.__webrlInflight = 0;
  window.__webrlPopups = 0;
  const open = window.open;
  window.open = function (...args) {
    window.__webrlPopups += 1;
    return open.apply(this, args);
  };
  document.addEventListener("click", (event) => {
    const link = event.target instanceof Element ? event.target.closest("a[href][target]") : null;
    const target = link ? link.getAttribute("target").toLowerCase() : "_self";
    if (!["_self", "_parent", "_top", ""].includes(target) && !event.defaultPrevented) window.__webrlPopups += 1;
  }, true);
  const begin = () => { window.__webrlInflight += 1; };
  const end = () => {
    window.__webrlInflight = Math.max(0, window.__webrlInflight - 1);
    if (window.__webrlInflight === 0) window.dispatchEvent(new Event("webrl-idle"));
  };
  const fetch = window.fetch;
  if (fetch) {
    window.fetch = function (...args) {
      begin();
      let pending;
      try { pending = fetch.apply(this, args); } catch (err) { end(); throw err; }
      return pending.finally(end);
    };
  }
  const send = XMLHttpRequest.prototype.send;
  XMLHttpRequest.prototype.send = function (...args) {
    begin();
    this.addEventListener("loadend", end, { once: true });
    try { return send.apply(this, args); } catch (err) { end(); throw err; }
  };
})();
