/* stkrelay panel: live sections over htmx, with no inline script and no eval.
 *
 * #poller (hx-trigger "every 2s") asks the current URL for the sections whose
 * version changed (the versions it has are sent as _v=id:version,...); the
 * server answers 204 or out-of-band swaps. Requests are skipped while the tab
 * is hidden and sent at once when it becomes visible. A session that expired
 * answers 401 with HX-Redirect, which htmx follows to the login page.
 * Below the page, "updated N s ago"; after STALE_S without a good answer a
 * banner says the data may be out of date. The tab title and favicon turn red
 * while any [data-alarm="1"] marker is on the page (the title says the
 * marker's data-alarm-text: NO LEADER, SECURITY).
 */
(function () {
  "use strict";
  var STALE_S = 10;
  var lastOk = Date.now();
  var visibleSince = Date.now();

  function isPoller(evt) {
    var elt = evt.detail && evt.detail.elt;
    return elt && elt.id === "poller";
  }

  function versions() {
    var out = [];
    document.querySelectorAll("[data-v]").forEach(function (el) {
      if (el.id) out.push(el.id + ":" + el.getAttribute("data-v"));
    });
    return out.join(",");
  }

  // The page's words in the reader's language (base.html's data-t-* attributes).
  function t(name, fallback, n) {
    var text = document.body.getAttribute("data-t-" + name) || fallback;
    return n === undefined ? text : text.replace("{n}", n);
  }

  function applyAlarm() {
    var marker = document.querySelector('[data-alarm="1"]');
    var alarm = marker !== null;
    var text = (marker && marker.getAttribute("data-alarm-text")) || t("no-leader", "NO LEADER");
    var base = document.body.getAttribute("data-title") || document.title;
    document.title = (alarm ? "\u26a0 " + text + " \u00b7 " : "") + base;
    document.body.classList.toggle("alarm", alarm);
    var icon = document.getElementById("favicon");
    if (icon) {
      var href = icon.getAttribute(alarm ? "data-alarm" : "data-ok");
      if (icon.getAttribute("href") !== href) icon.setAttribute("href", href);
    }
  }

  function tick() {
    var age = document.getElementById("live-age");
    if (!age) return;
    var s = Math.round((Date.now() - lastOk) / 1000);
    age.textContent = s <= 1 ? t("just-now", "just now") : t("ago", "{n} s ago", s);
    var banner = document.getElementById("live-banner");
    var visible = document.visibilityState === "visible";
    var stale = visible && s >= STALE_S && Date.now() - visibleSince > 3000;
    if (stale) {
      banner.textContent = t("stale", "Live updates stopped: the last good answer from this agent is " +
        "{n} s old. The data on this page may be out of date.", s);
    }
    if (banner.hidden === stale) banner.hidden = !stale;
  }

  document.addEventListener("htmx:configRequest", function (evt) {
    if (isPoller(evt)) evt.detail.parameters["_v"] = versions();
  });
  document.addEventListener("htmx:beforeRequest", function (evt) {
    if (isPoller(evt) && document.visibilityState !== "visible") evt.preventDefault();
  });
  document.addEventListener("htmx:afterRequest", function (evt) {
    if (!isPoller(evt)) return;
    var status = evt.detail.xhr ? evt.detail.xhr.status : 0;
    if (status === 200 || status === 204) {
      lastOk = Date.now();
      tick();
    }
  });
  document.addEventListener("htmx:oobAfterSwap", applyAlarm);
  document.addEventListener("htmx:afterSettle", applyAlarm);
  document.addEventListener("visibilitychange", function () {
    if (document.visibilityState === "visible") {
      visibleSince = Date.now();
      if (window.htmx) window.htmx.trigger(document.body, "stk-refresh");
    }
  });
  document.addEventListener("DOMContentLoaded", applyAlarm);
  // The language menu applies itself (its button is there for a browser without scripts).
  document.addEventListener("change", function (evt) {
    if (evt.target && evt.target.id === "language") evt.target.form.submit();
  });
  setInterval(tick, 1000);
})();
