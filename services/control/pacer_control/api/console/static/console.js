// Pacer console: the token lives in this tab's sessionStorage and goes out as a bearer header
// on every htmx request; no cookie, nothing in a URL. Everything else is server-rendered.
(function () {
  "use strict";
  var KEY = "pacer.token";
  var token = function () { return sessionStorage.getItem(KEY); };
  var onLogin = location.pathname === "/console/login";

  if (!onLogin && !token()) { location.replace("/console/login"); return; }

  function flash(message, ok) {
    var box = document.getElementById("flash");
    if (!box) { return; }
    var div = document.createElement("div");
    div.className = "flash " + (ok ? "ok" : "err");
    div.textContent = message;
    box.replaceChildren(div);
  }

  function widths(root) {  // progress bars: widths from data-w (no inline styles under the CSP)
    (root || document).querySelectorAll("[data-w]").forEach(function (el) {
      el.style.width = el.getAttribute("data-w") + "%";
    });
  }

  // The view shown in #main (a filter, a sort, a page of a list): an action's refresh reloads
  // that view, not the page's first one, so an operator stays where the action was taken.
  var shown = null;
  document.addEventListener("htmx:afterRequest", function (e) {
    var d = e.detail;
    if (d.successful && d.target && d.target.id === "main" && d.requestConfig.verb === "get") {
      shown = d.pathInfo.finalRequestPath;
    }
  });
  document.addEventListener("htmx:configRequest", function (e) {
    if (token()) { e.detail.headers["Authorization"] = "Bearer " + token(); }
    var ev = e.detail.triggeringEvent;
    if (shown && e.detail.elt.id === "main" && ev && ev.type === "pacer-changed") { e.detail.path = shown; }
  });
  document.addEventListener("htmx:afterSwap", function (e) { widths(e.detail.target); });
  document.addEventListener("htmx:responseError", function (e) {
    var xhr = e.detail.xhr;
    if (xhr.status === 401) { sessionStorage.removeItem(KEY); location.replace("/console/login"); return; }
    var detail = xhr.statusText;
    try { detail = JSON.parse(xhr.responseText).detail || detail; } catch (_) { /* not JSON */ }
    flash(xhr.status + ": " + detail, false);
    // The page's own content could not be read: it says so where "Loading…" stood.
    var loading = document.querySelector("#main > [data-loading]");
    if (loading && e.detail.target && e.detail.target.id === "main") {
      loading.className = "err";
      loading.removeAttribute("data-loading");
      loading.textContent = "This page cannot be shown: " + detail;
    }
  });
  // A part that polls (data-poll) is read only while its tab is shown: a hidden tab asks the
  // database for nothing, and one shown again reads at once each part whose poll it refused
  // meanwhile (pacer-visible); a part whose poll did not come round waits for it.
  // (htmx's own poll filter, [document.visibilityState…], is an eval the CSP refuses.)
  document.addEventListener("htmx:beforeRequest", function (e) {
    var elt = e.detail.elt;
    if (document.hidden && elt.hasAttribute("data-poll")) { e.preventDefault(); elt.setAttribute("data-poll-missed", ""); }
  });
  document.addEventListener("visibilitychange", function () {
    if (document.hidden) { return; }
    document.querySelectorAll("[data-poll-missed]").forEach(function (el) {
      el.removeAttribute("data-poll-missed");
      htmx.trigger(el, "pacer-visible");
    });
  });
  document.addEventListener("htmx:sendError", function () { flash("Pacer cannot be reached; retrying", false); });

  document.addEventListener("click", function (e) {
    var t = e.target;
    if (t.closest("[data-logout]")) { sessionStorage.removeItem(KEY); location.replace("/console/login"); }
    var dl = t.closest("[data-download]");
    if (dl) {  // a file behind the bearer token: fetched, then saved
      fetch(dl.getAttribute("data-download"), {headers: {Authorization: "Bearer " + token()}})
        .then(function (r) {
          if (!r.ok) { throw new Error(r.status + " " + r.statusText); }
          var name = (r.headers.get("Content-Disposition") || "").split('filename="')[1] || "report.csv";
          return r.blob().then(function (b) { return [b, name.replace(/"$/, "")]; });
        })
        .then(function (x) {
          var a = document.createElement("a");
          a.href = URL.createObjectURL(x[0]); a.download = x[1]; a.click(); URL.revokeObjectURL(a.href);
        })
        .catch(function (err) { flash("download failed: " + err.message, false); });
    }
  });

  document.addEventListener("DOMContentLoaded", function () {
    var nav = document.getElementById("nav");
    if (nav) {
      nav.addEventListener("htmx:afterSwap", function () {
        var here = nav.querySelector('[data-nav="' + nav.getAttribute("data-page") + '"]');
        if (here) { here.classList.add("here"); }
      });
    }
    var form = document.getElementById("login-form");
    if (!form) { return; }
    form.addEventListener("submit", function (e) {
      e.preventDefault();
      var value = document.getElementById("token").value.trim();
      fetch("/console/part/nav", {headers: {Authorization: "Bearer " + value}}).then(function (r) {
        if (r.ok) { sessionStorage.setItem(KEY, value); location.replace("/console/jobs"); return; }
        return r.json().then(function (b) {
          var err = document.getElementById("login-error");
          err.textContent = "Refused: " + (b.detail || r.status); err.hidden = false;
        });
      });
    });
  });
})();
