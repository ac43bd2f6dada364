// The live tail of a wake in progress: the transcript list with data-tail="<url>" listens
// to that event stream; each "events" event carries new <li> rows (rendered and escaped by
// the server) appended in order, and the "end" event the wake's final summary line, which
// replaces #summary - then the stream is closed (else the browser would reconnect). A
// reconnect after a dropped connection resumes from the last byte offset it got (the
// server reads Last-Event-ID). No inline script: CSP.
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  var list = document.querySelector("[data-tail]");
  if (!list || !window.EventSource) { return; }
  var source = new EventSource(list.getAttribute("data-tail"));
  source.addEventListener("events", function (event) {
    list.insertAdjacentHTML("beforeend", event.data);
  });
  source.addEventListener("end", function (event) {
    source.close();
    var summary = document.getElementById("summary");
    if (summary) { summary.outerHTML = event.data; }
    list.removeAttribute("data-tail");
  });
});
