// Small DOM helpers: elements built from data (text always goes in as text,
// never as HTML), labelled form fields, notices for screen readers, and the
// formatters the pages share.

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (key === "class") el.className = value;
    else if (key in el && typeof value !== "string") el[key] = value;
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

export function clear(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

let fieldSeq = 0;

// A labelled input (or select/textarea): returns { wrap, input }.
export function field(label, attrs = {}, tag = "input", options = []) {
  const id = attrs.id || `f${++fieldSeq}`;
  const input = tag === "select"
    ? h("select", { ...attrs, id }, options.map(([value, text]) => h("option", { value }, text)))
    : h(tag, { ...attrs, id });
  const hint = attrs["data-hint"] ? h("small", { id: `${id}-hint`, class: "hint" }, attrs["data-hint"]) : null;
  if (hint) input.setAttribute("aria-describedby", hint.id);
  return { wrap: h("div", { class: "field" }, h("label", { for: id }, label), input, hint), input };
}

export function button(text, onclick, attrs = {}) {
  return h("button", { type: "button", ...attrs, onclick }, text);
}

// A polite announcement in the page's live region and a visible notice.
export function notify(text, kind = "info") {
  const region = document.getElementById("notices");
  if (!region) return;
  const item = h("p", { class: `notice ${kind}` }, text);
  region.append(item);
  setTimeout(() => item.remove(), kind === "error" ? 12000 : 5000);
}

export function errorText(err) {
  return err?.message || String(err);
}

export function ago(ms) {
  if (!ms) return "never";
  const s = Math.round((Date.now() - ms) / 1000);
  if (s < 0) return `in ${duration(-s * 1000)}`;
  if (s < 60) return `${s} s ago`;
  return `${duration(s * 1000)} ago`;
}

export function duration(ms) {
  const s = Math.round(ms / 1000);
  const two = (big, bigUnit, small, smallUnit) => (small ? `${big} ${bigUnit} ${small} ${smallUnit}` : `${big} ${bigUnit}`);
  if (s < 60) return `${s} s`;
  if (s < 3600) return two(Math.floor(s / 60), "min", s % 60, "s");
  if (s < 86400) return two(Math.floor(s / 3600), "h", Math.floor((s % 3600) / 60), "min");
  return two(Math.floor(s / 86400), "d", Math.floor((s % 86400) / 3600), "h");
}

export function plural(n, word) {
  return `${n} ${word}${n === 1 ? "" : "s"}`;
}

// A checkbox with its label beside it.
export function checkbox(label, attrs = {}) {
  const input = h("input", { type: "checkbox", ...attrs });
  return { wrap: h("div", { class: "check" }, input, h("label", { for: attrs.id }, label)), input };
}

export function bytes(n) {
  if (n === undefined || n === null) return "—";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = Number(n);
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) { value /= 1024; unit++; }
  return `${value.toFixed(unit && value < 10 ? 1 : 0)} ${units[unit]}`;
}

export function when(ms) {
  return ms ? new Date(ms).toLocaleString() : "—";
}

// A page's heading, focused when the page opens (keyboard and screen reader users land on it).
export function heading(text) {
  return h("h1", { tabindex: "-1", class: "page-title" }, text);
}

// A status word with its colour: ok, warn, bad, off.
export function chip(text, tone) {
  return h("span", { class: `chip ${tone}` }, text);
}
