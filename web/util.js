// util.js - small DOM and text helpers every view uses.

export const $ = (id) => document.getElementById(id);

// A token's text made visible: spaces, newlines and tabs shown as symbols, long ones cut.
export function visible(s, max = 14) {
  let t = String(s).replace(/ /g, '·').replace(/\n/g, '⏎').replace(/\t/g, '⇥').replace(/\r/g, '␍');
  if (t === '') t = '∅';
  return t.length > max ? t.slice(0, max - 1) + '…' : t;
}

// Fills a <select> with the options 0 .. n-1 and selects value.
export function fillSelect(sel, n, value) {
  sel.textContent = '';
  for (let i = 0; i < n; i++) {
    const o = document.createElement('option');
    o.value = String(i);
    o.textContent = String(i);
    sel.appendChild(o);
  }
  sel.value = String(value);
}
