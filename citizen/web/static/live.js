// Live rows of the civilization page: the server sends the rows again (rendered and
// escaped by the server) whenever a heartbeat or a wake log changes. No inline script: CSP.
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  var table = document.querySelector("[data-live]");
  if (!table || !window.EventSource) { return; }
  var rows = document.getElementById("rows");
  var source = new EventSource(table.getAttribute("data-live"));
  source.addEventListener("rows", function (event) { rows.innerHTML = event.data; });
});
