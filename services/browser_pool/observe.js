// WebRL's simplified HTML, built in one page.evaluate call (services/browser_pool/observe.py).
//
// 1. Wait until the page is quiet: no DOM mutation for `quietMs` and no fetch/XHR in flight (inflight.js),
//    at most `capMs` (event-driven: MutationObserver and inflight.js's "webrl-idle" event).
// 2. Mark interactive elements with integer ids (attribute data-webrl-id, in document order, so the same
//    page always gets the same ids). An element is interactive when it is a link, button, form control,
//    summary, label with a control, has an interactive ARIA role, an onclick handler, tabindex >= 0, is the
//    root of a contenteditable region, or sets cursor:pointer itself (not inherited). It must be rendered,
//    have its centre inside the viewport and be hit-testable there (elementFromPoint lands on it or inside
//    it). When interactive elements nest, only the innermost gets an id.
// 3. Render: scripts, styles, comments, hidden and off-viewport nodes dropped; wrappers without text
//    unwrapped; only the attributes DESIGN.md keeps (id, title, value, type, placeholder, selected,
//    data-value, data-text, data-bbox, data-status); long text truncated.
async (opts) => {
  const { quietMs, capMs, maxText, maxValue, maxOptions, bbox, paths } = opts;

  if (document.readyState === "loading") {
    await new Promise((resolve) => {
      document.addEventListener("DOMContentLoaded", resolve, { once: true });
      setTimeout(resolve, capMs);
    });
  }
  // Quiet = no DOM mutation for quietMs and none of the page's fetch/XHR calls in flight (inflight.js).
  await new Promise((resolve) => {
    let quiet = null;
    const observer = new MutationObserver(() => arm());
    const cap = setTimeout(() => finish(), capMs);
    const inflight = () => window.__webrlInflight || 0;
    function finish() {
      observer.disconnect();
      window.removeEventListener("webrl-idle", arm);
      clearTimeout(quiet);
      clearTimeout(cap);
      resolve();
    }
    function arm() {
      clearTimeout(quiet);
      quiet = setTimeout(() => { if (inflight() === 0) finish(); }, quietMs);
    }
    observer.observe(document, { subtree: true, childList: true, attributes: true, characterData: true });
    window.addEventListener("webrl-idle", arm);
    arm();
  });

  const MARK = "data-webrl-id";
  const SKIP = new Set(["SCRIPT", "STYLE", "NOSCRIPT", "TEMPLATE", "HEAD", "META", "LINK", "IFRAME", "OBJECT",
    "EMBED", "CANVAS", "BR", "HR", "WBR"]);
  const CONTROL = new Set(["BUTTON", "SELECT", "TEXTAREA", "SUMMARY"]);
  const ROLES = new Set(["button", "link", "checkbox", "radio", "tab", "menuitem", "menuitemcheckbox",
    "menuitemradio", "option", "switch", "textbox", "searchbox", "combobox", "slider", "spinbutton", "treeitem"]);
  // Elements kept as tags (they carry structure the agent reads); others are unwrapped into their text.
  const KEEP = new Set(["H1", "H2", "H3", "H4", "H5", "H6", "P", "LI", "TABLE", "TR", "TD", "TH", "FORM", "LABEL",
    "NAV", "MAIN", "HEADER", "FOOTER", "DL", "DT", "DD", "UL", "OL", "IMG"]);
  const VOID = new Set(["INPUT", "IMG"]);
  const vw = window.innerWidth;
  const vh = window.innerHeight;

  for (const el of document.querySelectorAll(`[${MARK}]`)) el.removeAttribute(MARK);

  // getComputedStyle is the costly call here: once per element, shared by both passes.
  const styles = new Map();
  const styleOf = (el) => {
    let style = styles.get(el);
    if (style === undefined) {
      style = getComputedStyle(el);
      styles.set(el, style);
    }
    return style;
  };

  const clip = (text, n) => (text.length > n ? text.slice(0, n) + "..." : text);
  const norm = (text) => text.replace(/\s+/g, " ").trim();
  const esc = (text) => text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")
    .replace(/"/g, "&quot;");

  function isCandidate(el, style) {
    const tag = el.tagName;
    if (tag === "A" && el.hasAttribute("href")) return true;
    if (tag === "INPUT") return el.type !== "hidden";
    if (CONTROL.has(tag)) return true;
    if (tag === "LABEL" && el.control) return true;
    const role = (el.getAttribute("role") || "").trim().toLowerCase();
    if (ROLES.has(role)) return true;
    if (el.hasAttribute("onclick") || typeof el.onclick === "function") return true;
    if (el.hasAttribute("tabindex") && el.tabIndex >= 0) return true;
    if (el.isContentEditable && !(el.parentElement && el.parentElement.isContentEditable)) return true;
    if (style.cursor === "pointer") {
      const parent = el.parentElement;
      return !parent || styleOf(parent).cursor !== "pointer";
    }
    return false;
  }

  // The first box of the element that has area, as [x, y, w, h] (inline links wrap onto several boxes).
  function firstBox(el) {
    for (const r of el.getClientRects()) {
      if (r.width > 0 && r.height > 0) return [r.left, r.top, r.width, r.height];
    }
    return null;
  }

  function hittable(el, box) {
    const cx = box[0] + box[2] / 2;
    const cy = box[1] + box[3] / 2;
    if (cx < 0 || cy < 0 || cx >= vw || cy >= vh) return false;
    if (!el.checkVisibility({ checkOpacity: true, checkVisibilityCSS: true })) return false;
    const hit = document.elementFromPoint(cx, cy);
    if (!hit) return false;
    return hit === el || el.contains(hit) || (hit.tagName === "LABEL" && hit.control === el);
  }

  // Pass 1: which elements are interactive (innermost wins). Returns true if the subtree holds one.
  const interactive = new Set();
  function mark(el) {
    if (SKIP.has(el.tagName)) return false;
    const style = styleOf(el);
    if (style.display === "none") return false;
    let inner = false;
    for (const child of el.children) inner = mark(child) || inner;
    if (inner) return true;
    if (el.tagName === "OPTION" || el.tagName === "OPTGROUP") return false;
    if (!isCandidate(el, style)) return false;
    const box = firstBox(el);
    if (!box || !hittable(el, box)) return false;
    interactive.add(el);
    return true;
  }
  if (document.body) mark(document.body);

  // Ids in document order: stable for the same page.
  const elements = {};
  let next = 0;
  const ids = new Map();
  const walker = document.createTreeWalker(document.body || document.documentElement, NodeFilter.SHOW_ELEMENT);
  for (let node = walker.currentNode; node; node = walker.nextNode()) {
    if (!interactive.has(node)) continue;
    const id = String(next++);
    ids.set(node, id);
    node.setAttribute(MARK, id);
    const info = { tag: node.tagName.toLowerCase(), type: node.tagName === "INPUT" ? node.type : "" };
    if (paths) info.path = cssPath(node);
    elements[id] = info;
  }

  function cssPath(el) {
    const parts = [];
    for (let e = el; e && e.nodeType === 1 && e !== document.documentElement; e = e.parentElement) {
      let i = 1;
      for (let s = e.previousElementSibling; s; s = s.previousElementSibling) if (s.tagName === e.tagName) i++;
      parts.unshift(`${e.tagName.toLowerCase()}:nth-of-type(${i})`);
    }
    return "html > " + parts.join(" > ");
  }

  function textVisible(node) {
    const range = document.createRange();
    range.selectNodeContents(node);
    for (const r of range.getClientRects()) {
      if (r.width > 0 && r.height > 0 && r.right > 0 && r.bottom > 0 && r.left < vw && r.top < vh) return true;
    }
    return false;
  }

  function statusOf(el) {
    const status = [];
    if (el.tagName === "INPUT" && (el.type === "checkbox" || el.type === "radio")) {
      status.push(el.checked ? "checked" : "unchecked");
    }
    const expanded = el.getAttribute("aria-expanded");
    if (expanded === "true") status.push("expanded");
    if (expanded === "false") status.push("collapsed");
    if (el.getAttribute("aria-selected") === "true" || el.getAttribute("aria-checked") === "true") {
      status.push("selected");
    }
    if (el.disabled || el.getAttribute("aria-disabled") === "true") status.push("disabled");
    return status.join(" ");
  }

  function attrsOf(el, id, hasText) {
    const out = [];
    const add = (name, value) => {
      if (value !== null && value !== undefined && value !== "") out.push(`${name}="${esc(clip(norm(String(value)), maxValue))}"`);
    };
    if (id !== undefined) add("id", id);
    add("title", el.getAttribute("title") || (el.tagName === "IMG" ? el.getAttribute("alt") : null));
    const tag = el.tagName;
    if (tag === "INPUT") add("type", el.type);
    else if (tag === "BUTTON" && el.hasAttribute("type")) add("type", el.getAttribute("type"));
    if (tag === "INPUT" && !["checkbox", "radio", "submit", "button", "reset", "file", "image"].includes(el.type)) {
      add("value", el.type === "password" ? "*".repeat(el.value.length) : el.value);
    } else if (tag === "TEXTAREA") {
      add("value", el.value);
    } else if (tag === "INPUT" && (el.type === "submit" || el.type === "button" || el.type === "reset")) {
      add("value", el.value);
    }
    add("placeholder", el.getAttribute("placeholder"));
    add("data-value", el.getAttribute("data-value"));
    const label = el.getAttribute("data-text") || (!hasText && id !== undefined ? el.getAttribute("aria-label") : null);
    add("data-text", label);
    if (id !== undefined) add("data-status", statusOf(el));
    if (bbox && id !== undefined) {
      const box = firstBox(el);
      if (box) add("data-bbox", box.map((v) => Math.round(v)).join(","));
    }
    return out.length ? " " + out.join(" ") : "";
  }

  function renderSelect(el, id) {
    const options = [];
    for (const opt of Array.from(el.options).slice(0, maxOptions)) {
      const sel = opt.selected ? " selected" : "";
      options.push(`<option${sel}> ${esc(clip(norm(opt.textContent || ""), maxText))} </option>`);
    }
    if (el.options.length > maxOptions) options.push(`... ${el.options.length - maxOptions} more options`);
    return `<select${attrsOf(el, id, true)}> ${options.join(" ")} </select>`;
  }

  function render(el) {
    if (SKIP.has(el.tagName)) return "";
    const style = styleOf(el);
    if (style.display === "none") return "";
    const id = ids.get(el);
    if (el.tagName === "SELECT") return id !== undefined ? renderSelect(el, id) : "";
    const parts = [];
    for (const child of el.childNodes) {
      if (child.nodeType === Node.TEXT_NODE) {
        const text = norm(child.textContent || "");
        if (text && style.visibility === "visible" && textVisible(child)) parts.push(esc(clip(text, maxText)));
      } else if (child.nodeType === Node.ELEMENT_NODE) {
        const inner = render(child);
        if (inner) parts.push(inner);
      }
    }
    const body = parts.join(" ");
    const tag = el.tagName.toLowerCase();
    if (id !== undefined) {
      if (VOID.has(el.tagName) || el.tagName === "TEXTAREA") return `<${tag}${attrsOf(el, id, false)}>`;
      return `<${tag}${attrsOf(el, id, body !== "")}> ${body} </${tag}>`.replace("  ", " ");
    }
    if (el.tagName === "IMG") {
      const box = firstBox(el);
      const seen = box && box[0] + box[2] > 0 && box[1] + box[3] > 0 && box[0] < vw && box[1] < vh;
      return seen && el.getAttribute("alt") ? `<img${attrsOf(el, undefined, false)}>` : "";
    }
    if (!body) return "";
    return KEEP.has(el.tagName) ? `<${tag}> ${body} </${tag}>` : body;
  }

  const html = document.body ? `<html> ${render(document.body)} </html>` : "<html> </html>";
  const popups = window.__webrlPopups || 0;
  window.__webrlPopups = 0;
  return { html, elements, url: location.href, title: document.title, popups };
}
