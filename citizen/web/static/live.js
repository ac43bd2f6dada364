// Live parts of a page: an element with data-live="<url>" listens to that event stream and
// takes each event's HTML (rendered and escaped by the server) into data-live-target (an
// id; else the element itself). The event's name is data-live-event (default "rows"):
// the civilization page's rows, a debate's moves. No inline script: CSP.
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  if (!window.EventSource) { return; }
  document.querySelectorAll("[data-live]").forEach(function (live) {
    var target = document.getElementById(live.getAttribute("data-live-target") || "") || live;
    var source = new EventSource(live.getAttribute("data-live"));
    source.addEventListener(live.getAttribute("data-live-event") || "rows", function (event) {
      target.innerHTML = event.data;
    });
  });
});
