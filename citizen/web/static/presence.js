// A room's presence (seed §8.5): the element with data-presence="<url>" holds that event
// stream open while the page is visible - the server counts it as a person watching the
// room - and closes it when the page is hidden; each "room" event carries the room's facts
// (rendered and escaped by the server). No inline script: CSP.
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  var box = document.querySelector("[data-presence]");
  if (!box || !window.EventSource) { return; }
  var source = null;
  function watch() {
    if (document.hidden) {
      if (source) { source.close(); source = null; }
    } else if (!source) {
      source = new EventSource(box.getAttribute("data-presence"));
      source.addEventListener("room", function (event) { box.innerHTML = event.data; });
    }
  }
  document.addEventListener("visibilitychange", watch);
  window.addEventListener("pagehide", function () { if (source) { source.close(); source = null; } });
  watch();
});
