// companyd dashboard: the only script of our own (the CSP allows no inline script).
// 1. A node of the org chart whose restart count went up since the last swap flashes.
// 2. Charts: an element .chart[data-series] is drawn with uPlot (days, usd, limit).
(function () {
  "use strict";
  var restarts = {};

  function remember(root) {
    root.querySelectorAll("[data-node][data-restarts]").forEach(function (el) {
      var key = el.getAttribute("data-node");
      var now = parseInt(el.getAttribute("data-restarts"), 10) || 0;
      if (key in restarts && now > restarts[key]) {
        el.classList.remove("flash");
        void el.offsetWidth; // restart the animation
        el.classList.add("flash");
      }
      restarts[key] = now;
    });
  }

  function draw(root) {
    if (typeof uPlot === "undefined") { return; }
    root.querySelectorAll(".chart[data-series]").forEach(function (el) {
      if (el.getAttribute("data-drawn")) { return; }
      el.setAttribute("data-drawn", "1");
      var s = JSON.parse(el.getAttribute("data-series"));
      var data = [s.days, s.usd];
      var series = [{}, { label: "spend ($)", stroke: "#2457c5", fill: "rgba(36,87,197,0.15)" }];
      if (s.limit !== null) {
        data.push(s.days.map(function () { return s.limit; }));
        series.push({ label: "daily budget ($)", stroke: "#b3261e", dash: [6, 4] });
      }
      var width = Math.max(260, el.clientWidth || 300);
      new uPlot({ width: width, height: 200, series: series, scales: { x: { time: true } } }, data, el);
    });
  }

  function refresh(root) { remember(root); draw(root); }

  document.addEventListener("DOMContentLoaded", function () { refresh(document); });
  document.addEventListener("htmx:afterSettle", function (e) { refresh(e.target || document); });
  document.addEventListener("htmx:sseMessage", function (e) { refresh(e.target || document); });
})();
