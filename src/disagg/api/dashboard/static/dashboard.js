// disagg's dashboard: progressive updates, nothing more. Every page works without this script;
// with it, the page's live part (#live) is fetched again every few seconds from the same URL with
// `partial=1` and swapped in, and a job's log tail follows the log. Same origin only.
"use strict";

function refreshLive(el) {
  const every = Number(el.dataset.refresh) * 1000;
  const tick = async () => {
    if (!document.hidden) {
      try {
        const r = await fetch(el.dataset.src, { credentials: "same-origin", cache: "no-store" });
        if (r.redirected && r.url.includes("/login")) { window.location = r.url; return; }
        if (r.ok) { el.innerHTML = await r.text(); }
      } catch (e) { /* the server is away for a moment: try again at the next tick */ }
    }
    setTimeout(tick, every);
  };
  setTimeout(tick, every);
}

function followLog(pre) {
  const every = Number(pre.dataset.refresh) * 1000;
  const tick = async () => {
    try {
      const r = await fetch(pre.dataset.logSrc, { credentials: "same-origin", cache: "no-store" });
      if (r.ok) {
        const text = await r.text();
        const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
        pre.textContent = text || "(nothing written yet)";
        if (atEnd) { pre.scrollTop = pre.scrollHeight; }
      }
    } catch (e) { /* try again */ }
    setTimeout(tick, every);
  };
  tick();
}

document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll("#live[data-refresh]").forEach(refreshLive);
  document.querySelectorAll("pre[data-log-src]").forEach(followLog);
  // the filters apply as they change (delegated: the live part, filters included, is swapped in anew)
  document.addEventListener("change", (e) => {
    if (e.target.matches("form.filters select")) { e.target.form.submit(); }
  });
});
