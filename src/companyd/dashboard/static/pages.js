// companyd dashboard, the Spend page's chart (no inline script: the CSP forbids it).
// An element .chart[data-stacked] holds {epochs, groups, usd: [[per day] per group], limit}:
// it is drawn with uPlot as bars stacked by group (each bar is the running sum, drawn
// largest first), the legend showing each group's own amount, and the daily budget as a
// dashed line. The page's table has the same numbers for readers without the chart.
(function () {
  "use strict";
  var COLOURS = ["#2457c5", "#1f7a3d", "#a35b00", "#7b3fb5", "#00838f", "#b3261e", "#6d4c41", "#546e7a"];

  function money(v) {
    if (v == null) { return "–"; }
    var n = Number(v);
    return "$" + (n > 0 && n < 0.01 ? n.toFixed(4) : n.toFixed(2));
  }

  function own(values) {
    return function (u, raw, si, i) { return i == null ? "–" : money(values[i]); };
  }

  var charts = [];

  function fit() {
    charts.forEach(function (c) {
      var width = Math.max(260, c.el.clientWidth || 300);
      if (width !== c.plot.width) { c.plot.setSize({ width: width, height: 240 }); }
    });
  }

  function drawStacked(root) {
    if (typeof uPlot === "undefined") { return; }
    root.querySelectorAll(".chart[data-stacked]").forEach(function (el) {
      if (el.getAttribute("data-drawn")) { return; }
      el.setAttribute("data-drawn", "1");
      var s = JSON.parse(el.getAttribute("data-stacked"));
      var sums = [];
      var running = s.epochs.map(function () { return 0; });
      s.usd.forEach(function (values) {
        running = running.map(function (v, i) { return v + values[i]; });
        sums.push(running.slice());
      });
      var data = [s.epochs];
      var series = [{}];
      var bars = uPlot.paths.bars({ size: [0.8, 48] });
      for (var g = s.groups.length - 1; g >= 0; g--) {
        var colour = COLOURS[g % COLOURS.length];
        data.push(sums[g]);
        series.push({ label: s.groups[g], stroke: colour, fill: colour, paths: bars, points: { show: false }, value: own(s.usd[g]) });
      }
      if (s.limit !== null) {
        data.push(s.epochs.map(function () { return s.limit; }));
        series.push({ label: "daily budget", stroke: "#b3261e", dash: [6, 4], points: { show: false }, value: function () { return money(s.limit); } });
      }
      var width = Math.max(260, el.clientWidth || 300);
      var plot = new uPlot({
        width: width,
        height: 240,
        series: series,
        scales: { x: { time: true } },
        axes: [{}, { size: 64, values: function (u, vals) { return vals.map(money); } }]
      }, data, el);
      charts.push({ el: el, plot: plot });
    });
  }

  document.addEventListener("DOMContentLoaded", function () { drawStacked(document); });
  document.addEventListener("htmx:afterSettle", function (e) { drawStacked(e.target || document); });
  window.addEventListener("resize", fit);
})();
