// The console's one script, served from the binary at /console/static/console.js
// (docs/console.md#script). Every page works without it: it only adds conveniences.
// Plain and small on purpose: no framework, no build step, no inline code, no eval.
"use strict";

// Copy buttons: <button data-copy="ID" hidden> copies the value (or text) of element ID.
// Hidden in the markup, shown here, so a browser without script shows no dead button;
// the target stays a readonly input there, selectable by hand.
function setUpCopyButtons() {
  for (const button of document.querySelectorAll("button[data-copy]")) {
    const target = document.getElementById(button.dataset.copy);
    if (!target) continue;
    button.hidden = false;
    button.addEventListener("click", () => copyFrom(target, button));
  }
}

async function copyFrom(target, button) {
  const text = "value" in target ? target.value : target.textContent;
  try {
    await navigator.clipboard.writeText(text);
    say(button, "Copied");
  } catch {
    // No clipboard access (an old browser, or permission refused): select it for Ctrl+C.
    if (target.select) target.select();
    say(button, "Selected: press Ctrl+C");
  }
}

// The button's label says what happened for a moment (the button is aria-live).
function say(button, text) {
  const label = button.dataset.label || button.textContent;
  button.dataset.label = label;
  button.textContent = text;
  setTimeout(() => { button.textContent = label; }, 2000);
}

// Live turns: <section id="turns" data-poll="MS"> is fetched again every MS milliseconds
// (the same page, same origin) and replaced when its turns changed, so new user messages
// show without a reload. Only that section is replaced: a half-typed answer stays. Without
// script the page is the same, reloaded by hand.
function setUpPolling() {
  const section = document.getElementById("turns");
  const every = section && Number(section.dataset.poll);
  if (!every) return;
  let busy = false;
  setInterval(async () => {
    if (busy || document.hidden) return;
    busy = true;
    try {
      const response = await fetch(location.href, { credentials: "same-origin", cache: "no-store" });
      if (!response.ok) return;
      const page = new DOMParser().parseFromString(await response.text(), "text/html");
      const fresh = page.getElementById("turns");
      const current = document.getElementById("turns");
      if (fresh && current && fresh.innerHTML !== current.innerHTML) {
        const following = atEnd();
        current.replaceWith(document.adoptNode(fresh));
        if (following) toEnd();
      }
    } catch {
      // The next tick tries again (the gateway may be restarting).
    } finally {
      busy = false;
    }
  }, every);
}

// A conversation opens at its newest turn, just above the answer box (<span id="end">
// closes the page; links to a conversation name it too, for a browser without script).
function atEnd() {
  const page = document.documentElement;
  return page.scrollHeight - page.scrollTop - page.clientHeight < 80;
}

function toEnd() {
  if (document.getElementById("end")) window.scrollTo(0, document.documentElement.scrollHeight);
}

document.addEventListener("DOMContentLoaded", () => {
  setUpCopyButtons();
  setUpPolling();
  if (!location.hash) toEnd();
});
