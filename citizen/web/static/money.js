// The Money page's charts: each <figure data-chart="{json}"> drawn with uPlot (vendored:
// static/uPlot.iife.min.js). The data comes in the attribute, escaped by the server; no
// inline script (CSP).
"use strict";
var COLOURS = ["#4a7bd0", "#3a9a5a", "#b07a00", "#a03a8a", "#c0392b", "#2c8c99", "#666"];
document.addEventListener("DOMContentLoaded", function () {
  document.querySelectorAll("[data-chart]").forEach(function (figure) {
    var spec = JSON.parse(figure.getAttribute("data-chart"));
    var names = Object.keys(spec.series);
    if (!names.length) {
      figure.textContent = spec.title + ": nothing to draw yet.";
      return;
    }
    var data = [spec.x].concat(names.map(function (n) { return spec.series[n]; }));
    var series = [{}].concat(names.map(function (n, i) {
      return { label: n, stroke: COLOURS[i % COLOURS.length], width: 2, spanGaps: false,
               points: { show: true, size: 6 } };
    }));
    var width = Math.max(280, Math.min(figure.parentNode.clientWidth - 16, 600));
    new uPlot({ title: spec.title, width: width, height: 220, series: series,
                axes: [{}, { label: spec.unit }] }, data, figure);
  });
});
