// WebRL's simplified HTML, built in one page.evaluate call (services/browser_pool/observe.py).
//
// 0. When the page said it is about to be replaced (inflight.js: a form submitted, a navigation begun, and the
//    page's handlers did not cancel it), wait `leaveMs` for the new document: the evaluate is then interrupted
//    and observe.py observes the new page. A document still here by then is not read: the call returns
//    { stayed: true } and observe.py waits for the navigation (the episode knows its requests, episode.py)
//    before it calls again (the mark is cleared, so that call reads whatever page is there).
// 1. Wait until the page is settled, at most `capMs` (event-driven: MutationObserver and inflight.js's
//    "webrl-idle" event): no DOM mutation for `quietMs`, no fetch/XHR in flight and, with `settleTimers`, no
//    short page timer pending (inflight.js). With `quietSinceLast`, the quiet time counts from the page's last
//    mutation (inflight.js records it), not from this call, and when the page has animation-frame callbacks
//    pending (inflight.js counts them: what an action scheduled for the next frame), after one frame: a page
//    that has not changed since and scheduled nothing gives its observation at once. With
//    `settleMedia`, then also wait for what changes the page
//    without a mutation: images in the viewport still loading, web fonts loading, and CSS transitions and
//    animations that end within `animationMs`; then for DOM quiet again; all of it within `mediaCapMs`.
// 2. Mark interactive elements with integer ids (attribute data-webrl-id, in document order, so the same
//    page always gets the same ids). An element is interactive when it is a link, button, form control,
//    summary, label with a control, has an interactive ARIA role, an onclick handler or a click-like
//    listener (inflight.js), tabindex >= 0, is the root of a contenteditable region, or sets cursor:pointer
//    itself (not inherited). It must be rendered, have its centre inside the viewport and be hit-testable
//    there (elementFromPoint lands on it or inside it). When interactive elements nest, only the innermost
//    gets an id, except that a <select multiple> keeps its id and its options shown in the list get theirs.
// 3. Render: scripts, styles, comments, hidden and off-viewport nodes dropped; wrappers without text
//    unwrapped; only the attributes docs/design.md keeps (id, title, value, type, placeholder, selected,
//    data-value, data-text, data-bbox, data-status); long text truncated. An element with an id and no text
//    is named in data-text from what the page gives (aria-label, alt, an inner svg title, CSS ::before text,
//    icon class names such as "fa-trash", else the words of its own id and class names such as
//    "toolbar-discard"); the current page of a pagination widget says data-status="current".
async (opts) => {
  const { quietMs, capMs, mediaCapMs, maxText, maxValue, maxField, maxOptions, bbox, paths, settleTimers,
    settleMedia, animationMs, quietSinceLast, frameMs, leaveMs } = opts;
  const later = window.__webrlSetTimeout || setTimeout;  // inflight.js: the page's timer, not counted as pending
  const cancel = window.__webrlClearTimeout || clearTimeout;
  const nextFrame = window.__webrlRequestFrame || requestAnimationFrame;  // inflight.js: not counted as pending
  const vw = window.innerWidth;
  const vh = window.innerHeight;

  const leaving = window.__webrlLeaving;
  window.__webrlLeaving = null;
  if (leaving && !leaving.defaultPrevented) {
    await new Promise((resolve) => later(resolve, leaveMs));
    return { stayed: true };  // not gone yet: observe.py waits for the navigation, then observes again
  }
  if (document.readyState === "loading") {
    await new Promise((resolve) => {
      document.addEventListener("DOMContentLoaded", resolve, { once: true });
      later(resolve, capMs);
    });
  }
  const started = performance.now();
  const remaining = (limit) => Math.max(0, started + limit - performance.now());

  // Quiet = no DOM mutation for quietMs and none of the page's fetch/XHR calls (nor, with settleTimers, its
  // short timers) in flight (inflight.js). `sinceLast`: the first quiet window is what is left of quietMs
  // since the page's last mutation and, when the page has frame callbacks pending, nothing finishes before a
  // frame has passed (rAF, or frameMs where frames are throttled). A page without inflight.js (no counts)
  // always waits the frame.
  function domQuiet(limitMs, sinceLast) {
    return new Promise((resolve) => {
      let quiet = null;
      let quietEnough = false;
      let framed = !sinceLast || window.__webrlFrames === 0;
      const observer = new MutationObserver(() => arm());
      const onIdle = () => arm();
      const cap = later(() => finish(), limitMs);
      const busy = () => (window.__webrlInflight || 0) > 0 || (settleTimers && (window.__webrlTimers || 0) > 0);
      function finish() {
        observer.disconnect();
        window.removeEventListener("webrl-idle", onIdle);
        cancel(quiet);
        cancel(cap);
        resolve();
      }
      function arm(waitMs = quietMs) {
        cancel(quiet);
        quietEnough = false;
        quiet = later(() => {
          if (busy()) return;  // "webrl-idle" re-arms
          quietEnough = true;
          if (framed) finish();
        }, waitMs);
      }
      function frame() {
        if (framed) return;
        framed = true;
        if (quietEnough) finish();
      }
      observer.observe(document, { subtree: true, childList: true, attributes: true, characterData: true });
      window.addEventListener("webrl-idle", onIdle);
      const last = window.__webrlLastMutation;
      if (!framed) {
        nextFrame(frame);
        later(frame, frameMs);
      }
      arm(sinceLast && last !== undefined ? Math.max(0, quietMs - (performance.now() - last)) : quietMs);
    });
  }

  function inViewport(r) {
    return r.bottom >= 0 && r.right >= 0 && r.top <= vh && r.left <= vw;
  }

  // Promises for what still changes the page without a DOM mutation: images in the viewport, web fonts,
  // transitions and animations that end within animationMs (infinite ones, spinners, never count).
  function mediaWaits() {
    void document.documentElement.offsetHeight;  // lay out first: a web font starts loading when text needs it
    const waits = [];
    if (document.fonts && document.fonts.status === "loading") waits.push(document.fonts.ready);
    for (const img of document.images) {
      if (img.complete || !img.getAttribute("src") || !inViewport(img.getBoundingClientRect())) continue;
      waits.push(new Promise((resolve) => {
        img.addEventListener("load", resolve, { once: true });
        img.addEventListener("error", resolve, { once: true });
      }));
    }
    for (const animation of document.getAnimations()) {
      if (animation.playState !== "running" || !animation.effect) continue;
      const timing = animation.effect.getComputedTiming();
      const left = timing.endTime - (timing.localTime || 0);
      if (Number.isFinite(left) && left > 0 && left <= animationMs) waits.push(animation.finished.catch(() => null));
    }
    return waits;
  }

  await domQuiet(capMs, quietSinceLast);
  while (settleMedia && remaining(mediaCapMs) > 0) {
    const waits = mediaWaits();
    if (!waits.length) break;
    await Promise.race([Promise.all(waits), new Promise((resolve) => later(resolve, remaining(mediaCapMs)))]);
    await domQuiet(Math.min(capMs, remaining(mediaCapMs)), quietSinceLast);
  }
  const settleMs = performance.now() - started;

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
  const clickable = window.__webrlClickable;  // inflight.js: elements with a click-like listener
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
    if (clickable && clickable.has(el) && el !== document.body) return true;
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
    if (el.tagName === "SELECT") return markSelect(el);
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
  // A select gets an id; the options of a <select multiple> that its list shows get theirs (Click toggles one).
  function markSelect(el) {
    const box = firstBox(el);
    if (!box || !hittable(el, box)) return false;
    interactive.add(el);
    if (!el.multiple) return true;
    for (const option of Array.from(el.options).slice(0, maxOptions)) {
      const optionBox = firstBox(option);
      if (optionBox && hittable(option, optionBox)) interactive.add(option);
    }
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
    if (isCurrentPage(el)) status.push("current");
    return status.join(" ");
  }

  // The current page of a pagination widget: aria-current, or a class word active/current/selected, on an
  // element inside a container named like a pager. Only there: elsewhere (tabs, menus) the rendering stays
  // as it was, which our sandbox sites' observations rely on.
  const PAGER = /pagination|pager|paging|\bpages\b/i;
  const CURRENT_WORDS = new Set(["active", "current", "selected"]);
  function isCurrentPage(el) {
    const aria = el.getAttribute("aria-current");
    const marked = (aria && aria !== "false") || Array.from(el.classList)
      .some((name) => name.toLowerCase().split(/[-_]/).some((word) => CURRENT_WORDS.has(word)));
    if (!marked) return false;
    for (let e = el.parentElement, depth = 0; e && depth < 4; e = e.parentElement, depth++) {
      const names = `${e.getAttribute("class") || ""} ${e.id} ${e.getAttribute("aria-label") || ""} ${e.getAttribute("role") || ""}`;
      if (PAGER.test(names)) return true;
    }
    return false;
  }

  // Names for a control with no text (icon buttons drawn by CSS or an icon font), from what the page gives.
  const ICON_WORDS = new Set(["close", "cancel", "dismiss", "trash", "delete", "remove", "star", "favorite",
    "heart", "like", "send", "edit", "search", "menu", "plus", "add", "minus", "cart", "basket", "user",
    "account", "profile", "settings", "home", "share", "download", "upload", "bell", "notifications", "filter",
    "sort", "refresh", "reload", "sync", "copy", "print", "info", "help", "check", "arrow", "chevron", "caret",
    "next", "previous", "prev", "back", "play", "pause", "stop", "bookmark", "flag", "reply", "forward", "more",
    "external", "lock", "unlock", "eye", "calendar", "mail", "comment", "chat", "phone", "camera", "image",
    "attach", "save", "expand", "collapse", "logout", "login", "upvote", "downvote", "archive", "undo", "redo",
    "zoom", "location", "tag", "folder", "video", "volume", "mute", "microphone"]);
  const ICON_SYNONYMS = { times: "close", xmark: "close", bin: "trash", pencil: "edit", cog: "settings",
    gear: "settings", magnifier: "search", hamburger: "menu", bars: "menu", ellipsis: "more", dots: "more",
    kebab: "more", envelope: "mail", paperclip: "attach", thumbs: "like" };
  const DIRECTIONS = new Set(["left", "right", "up", "down"]);  // kept only after an icon word ("arrow left")
  const PRIVATE_USE = /[\uE000-\uF8FF]|[\u{F0000}-\u{10FFFD}]/gu;  // icon-font glyphs: no meaning as text

  function iconClassName(el) {
    const words = [];
    const nodes = [el, ...Array.from(el.querySelectorAll("[class]")).slice(0, 10)];
    for (const node of nodes) {
      for (const name of Array.from(node.classList)) {
        for (const raw of name.replace(/([a-z])([A-Z])/g, "$1-$2").toLowerCase().split(/[-_]+/)) {
          const word = ICON_SYNONYMS[raw] || raw;
          const known = ICON_WORDS.has(word) || (DIRECTIONS.has(word) && words.length > 0);
          if (known && !words.includes(word)) words.push(word);
        }
      }
    }
    return words.slice(0, 3).join(" ");
  }

  // Words of a control's own id and class names, when none is an icon word: "toolbar-discard", id="compose-mail".
  // Framework and layout words say nothing of what the control does; a token with a digit or no vowel is a
  // generated name ("xyz-1a2b", "ember42").
  const NOISE_WORDS = new Set(["icon", "icons", "ico", "btn", "button", "fa", "fas", "far", "fab", "bi", "glyphicon",
    "material", "mdi", "svg", "img", "js", "is", "has", "active", "disabled", "hidden", "visible", "small", "large",
    "primary", "secondary", "default", "outline", "link", "inline", "block", "flex", "pull", "float", "col", "row",
    "item", "wrap", "wrapper", "container", "inner", "outer", "clickable", "pointer", "control", "action", "the",
    "and", "for", "with", "fill", "filled", "solid", "regular", "light", "dark", "center"]);

  function tokenName(el) {
    const words = [];
    for (const name of [el.id, ...Array.from(el.classList)]) {
      for (const raw of (name || "").replace(/([a-z])([A-Z])/g, "$1-$2").toLowerCase().split(/[-_\s.:]+/)) {
        const word = ICON_SYNONYMS[raw] || raw;
        if (/^[a-z]{3,}$/.test(word) && /[aeiou]/.test(word) && !NOISE_WORDS.has(word) && !words.includes(word)) {
          words.push(word);
        }
      }
    }
    return words.slice(0, 3).join(" ");
  }

  function pseudoText(el) {
    const nodes = [el, ...Array.from(el.querySelectorAll("*")).slice(0, 10)];
    for (const node of nodes) {
      for (const pseudo of ["::before", "::after"]) {
        const content = getComputedStyle(node, pseudo).content;
        if (!content || content[0] !== '"') continue;
        const text = norm(content.slice(1, -1).replace(PRIVATE_USE, ""));
        if (/\p{L}/u.test(text)) return text;
      }
    }
    return "";
  }

  function innerLabel(el) {
    const ids = (el.getAttribute("aria-labelledby") || "").split(/\s+/).filter(Boolean);
    const labelled = norm(ids.map((id) => document.getElementById(id)?.textContent || "").join(" "));
    if (labelled) return labelled;
    if (el.tagName === "INPUT" && el.type === "image") return el.getAttribute("alt") || "";
    for (const inner of el.querySelectorAll("[aria-label], img[alt], svg title")) {
      const text = norm(inner.getAttribute("aria-label") || inner.getAttribute("alt") || inner.textContent || "");
      if (text) return text;
    }
    return "";
  }

  // aria-label first (as before); nothing more when a title already names it.
  function nameOf(el) {
    const label = el.getAttribute("aria-label");
    if (label) return label;
    if (el.getAttribute("title")) return null;
    return innerLabel(el) || pseudoText(el) || iconClassName(el) || tokenName(el) || null;
  }

  // A field's value: up to maxField characters; a textarea scrolled down shows the part at its scroll
  // position, so Scroll on it reaches the end. Markers say how much is left out on each side.
  function fieldValue(el, text) {
    const value = norm(text);
    if (value.length <= maxField) return value;
    let start = 0;
    if (el.tagName === "TEXTAREA" && el.scrollTop > 0 && el.scrollHeight > 0) {
      start = Math.min(value.length - maxField, Math.floor(value.length * el.scrollTop / el.scrollHeight));
    }
    const end = start + maxField;
    const before = start > 0 ? `(${start} earlier characters) ...` : "";
    const after = end < value.length ? `... (${value.length - end} more characters)` : "";
    return before + value.slice(start, end) + after;
  }

  function attrsOf(el, id, hasText) {
    const out = [];
    const put = (name, value) => { if (value) out.push(`${name}="${esc(value)}"`); };
    const add = (name, value) => {
      if (value !== null && value !== undefined && value !== "") put(name, clip(norm(String(value)), maxValue));
    };
    if (id !== undefined) add("id", id);
    add("title", el.getAttribute("title") || (el.tagName === "IMG" ? el.getAttribute("alt") : null));
    const tag = el.tagName;
    if (tag === "INPUT") add("type", el.type);
    else if (tag === "BUTTON" && el.hasAttribute("type")) add("type", el.getAttribute("type"));
    else if (tag === "SELECT" && el.multiple) add("type", "select-multiple");
    if (tag === "INPUT" && !["checkbox", "radio", "submit", "button", "reset", "file", "image"].includes(el.type)) {
      put("value", fieldValue(el, el.type === "password" ? "*".repeat(el.value.length) : el.value));
    } else if (tag === "TEXTAREA") {
      put("value", fieldValue(el, el.value));
    } else if (tag === "INPUT" && (el.type === "submit" || el.type === "button" || el.type === "reset")) {
      add("value", el.value);
    }
    add("placeholder", el.getAttribute("placeholder"));
    add("data-value", el.getAttribute("data-value"));
    const label = el.getAttribute("data-text") || (!hasText && id !== undefined ? nameOf(el) : null);
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
      const optionId = ids.has(opt) ? ` id="${ids.get(opt)}"` : "";
      options.push(`<option${optionId}${sel}> ${esc(clip(norm(opt.textContent || ""), maxText))} </option>`);
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
    if (isCurrentPage(el)) return `<${tag} data-status="current"> ${body} </${tag}>`;
    return KEEP.has(el.tagName) ? `<${tag}> ${body} </${tag}>` : body;
  }

  const html = document.body ? `<html> ${render(document.body)} </html>` : "<html> </html>";
  const popups = window.__webrlPopups || 0;
  window.__webrlPopups = 0;
  return { html, elements, url: location.href, title: document.title, popups, settleMs };
}
