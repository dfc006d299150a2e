// companyd dashboard: the only script of our own (the CSP allows no inline script).
// 1. A node of the org chart whose restart count went up since the last swap flashes.
// 2. Charts: an element .chart[data-series] is drawn with uPlot (days, usd, limit).
// 3. Tables become cards at phone width (see label below).
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

  // 3. Tables become cards on a phone (dashboard.css): each cell gets its column's name as
  //    data-label, read from the table's header, and the table the class "cards".
  function label(root) {
    var tables = root.tagName === "TABLE" ? [root] : root.querySelectorAll("table");
    if (root.closest) { var up = root.closest("table"); if (up) { tables = [up]; } }
    Array.prototype.forEach.call(tables, function (table) {
      var heads = table.querySelectorAll("thead th");
      if (!heads.length) { return; }
      table.classList.add("cards");
      var names = Array.prototype.map.call(heads, function (th) { return th.textContent.trim(); });
      table.querySelectorAll("tbody tr").forEach(function (tr) {
        Array.prototype.forEach.call(tr.children, function (cell, i) {
          if (names[i] && !cell.hasAttribute("data-label")) { cell.setAttribute("data-label", names[i]); }
        });
      });
    });
  }

  function refresh(root) { remember(root); draw(root); label(root); }

  document.addEventListener("DOMContentLoaded", function () { refresh(document); });
  document.addEventListener("htmx:afterSettle", function (e) { refresh(e.target || document); });
  document.addEventListener("htmx:sseMessage", function (e) { refresh(e.target || document); });
})();
