// badput report page: draws the charts from the JSON document #badput-data with uPlot.
// Every string from the log reaches the page through textContent or the canvas only.
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("badput-data").textContent);
  var t0 = data.t0;
  var names = data.buckets.map(function (b) { return b.name; });
  var colors = data.buckets.map(function (b) { return b.color; });
  var tip = document.getElementById("tooltip");
  var view = { lanes: 0, bucketBars: 0, charts: [], binned: false, spans: 0 };
  window.badputView = view;

  function utc(ts) { return uPlot.tzDate(new Date(ts * 1e3), "Etc/UTC"); }
  function fmtDur(s) {
    if (s === null || s === undefined || !isFinite(s)) return "n/a";
    if (s < 0) return "-" + fmtDur(-s);
    if (s === 0) return "0s";
    if (s < 1e-3) return (s * 1e6).toFixed(0) + "µs";
    if (s < 0.01) return (s * 1e3).toFixed(2) + "ms";
    if (s < 1) return (s * 1e3).toFixed(0) + "ms";
    if (s < 60) return s.toFixed(1) + "s";
    if (s < 3600) { var m = Math.floor(s / 60); return m + "m " + String(Math.round(s - m * 60)).padStart(2, "0") + "s"; }
    if (s < 86400) { var h = Math.floor(s / 3600); return h + "h " + String(Math.round((s - h * 3600) / 60)).padStart(2, "0") + "m"; }
    var d = Math.floor(s / 86400); return d + "d " + Math.round((s - d * 86400) / 3600) + "h";
  }
  function fmtTs(ts) { return new Date(ts * 1e3).toISOString().replace(".000Z", "Z"); }
  function width() { return Math.max(480, Math.min(1240, document.body.clientWidth - 40)); }
  function showTip(text, ev) {
    if (!text) { tip.hidden = true; return; }
    tip.textContent = text;
    tip.hidden = false;
    tip.style.left = Math.min(ev.clientX + 14, window.innerWidth - tip.offsetWidth - 4) + "px";
    tip.style.top = (ev.clientY + 14) + "px";
  }
  var lastMouse = { clientX: 0, clientY: 0 };
  document.addEventListener("mousemove", function (ev) { lastMouse = ev; });

  // Zoom one time chart, zoom them all.
  var timeCharts = [];
  window.badputTimeCharts = timeCharts;
  var syncing = false;
  function syncX(u, key) {
    if (key !== "x" || syncing) return;
    syncing = true;
    timeCharts.forEach(function (o) {
      if (o !== u) o.setScale("x", { min: u.scales.x.min, max: u.scales.x.max });
    });
    syncing = false;
  }

  // ------------------------------------------------------------ bucket bars
  (function () {
    var shown = data.shown;
    var xs = shown.map(function (_, i) { return i; });
    var series = [{}];
    var rows = [xs];
    shown.forEach(function (name, i) {
      var b = data.buckets[names.indexOf(name)];
      var ys = xs.map(function (j) { return j === i ? (data.total > 0 ? 100 * b.seconds / data.total : 0) : null; });
      rows.push(ys);
      series.push({
        label: name, fill: b.color, stroke: b.color, width: 1,
        paths: uPlot.paths.bars({ size: [0.7, 60] }), points: { show: false },
        value: function (u, v) { return v === null ? "" : v.toFixed(1) + "%"; }
      });
    });
    var el = document.getElementById("buckets-chart");
    var u = new uPlot({
      width: Math.min(640, width()), height: 300, series: series,
      legend: { show: false },
      cursor: { show: false },
      scales: { x: { time: false, range: [-0.5, Math.max(shown.length - 0.5, 0.5)] }, y: { range: [0, 100] } },
      axes: [
        { splits: function () { return xs; }, values: function () { return shown.map(function (n) { return n.length > 18 ? n.slice(0, 17) + "…" : n; }); }, rotate: -35, size: 100, gap: 4 },
        { values: function (u, v) { return v.map(function (x) { return x + "%"; }); }, label: "% of total" }
      ]
    }, rows, el);
    view.bucketBars = series.length - 1;
    view.charts.push("buckets");
    window.badputBuckets = u;
  })();

  // ------------------------------------------------------------ timeline
  (function () {
    var lanes = data.lanes;
    var nL = lanes.length;
    var laneH = Math.max(8, Math.min(26, Math.floor(640 / nL)));
    view.lanes = nL;
    var legend = document.getElementById("legend");
    var used = {};
    if (names.indexOf("untracked") >= 0) used[names.indexOf("untracked")] = true;
    data.jobLane.b.forEach(function (b) { used[b] = true; });
    data.spans.forEach(function (sp) {
      sp.base.b.forEach(function (b) { used[b] = true; });
      (sp.base.sh || []).forEach(function (row) { row.forEach(function (v, b) { if (v > 0) used[b] = true; }); });
      sp.top.b.forEach(function (b) { used[b] = true; });
      if (sp.binned) view.binned = true;
      view.spans += sp.base.b.length + sp.top.b.length;
    });
    names.forEach(function (n, i) {
      if (!used[i]) return;
      var item = document.createElement("span");
      var sw = document.createElement("span");
      sw.className = "sw";
      sw.style.background = colors[i];
      item.appendChild(sw);
      item.appendChild(document.createTextNode(n));
      legend.appendChild(item);
    });
    if (view.binned) {
      var bins = data.spans.filter(function (s) { return s.binned; }).map(function (s) { return s.binSeconds; });
      document.getElementById("binned-note").textContent =
        "Lanes with more spans than a screen can show are drawn in bins of " + fmtDur(Math.min.apply(null, bins)) +
        " (each bin stacks its buckets by their share of its time; hover for the figures). " +
        "Every step is in the trace export (badput export trace).";
    }
    function laneTop(u, i) { return u.valToPos(nL - i, "y", true); }
    function laneBot(u, i) { return u.valToPos(nL - i - 1, "y", true); }
    function first(x1, lo) { // first index whose end is >= lo (spans in start order; ends nearly so)
      var a = 0, b = x1.length;
      while (a < b) { var m = (a + b) >> 1; if (x1[m] < lo) a = m + 1; else b = m; }
      return a;
    }
    function drawSet(u, ctx, set, i, inset) {
      var y0 = laneTop(u, i), y1 = laneBot(u, i);
      var pad = (y1 - y0) * inset;
      var h = y1 - y0 - 2 * pad;
      var lo = u.scales.x.min - t0, hi = u.scales.x.max - t0;
      for (var k = first(set.x1, lo); k < set.x0.length; k++) {
        if (set.x0[k] > hi) break;
        var xa = u.valToPos(t0 + set.x0[k], "x", true), xb = u.valToPos(t0 + set.x1[k], "x", true);
        var w = Math.max(xb - xa, 1);
        if (set.sh) { // a time bin: its buckets stacked by their share of the bin's time
          var tot = 0, b;
          for (b = 0; b < set.sh[k].length; b++) tot += set.sh[k][b];
          var y = y0 + pad;
          for (b = 0; b < set.sh[k].length; b++) {
            if (!(set.sh[k][b] > 0) || !(tot > 0)) continue;
            var part = h * set.sh[k][b] / tot;
            ctx.fillStyle = colors[b];
            ctx.fillRect(xa, y, w, Math.max(part, 0.5));
            y += part;
          }
          continue;
        }
        ctx.fillStyle = colors[set.b[k]];
        ctx.fillRect(xa, y0 + pad, w, h);
      }
    }
    function draw(u) {
      var ctx = u.ctx;
      ctx.save();
      ctx.beginPath();
      ctx.rect(u.bbox.left, u.bbox.top, u.bbox.width, u.bbox.height);
      ctx.clip();
      drawSet(u, ctx, data.jobLane, 0, 0.15);
      data.spans.forEach(function (sp, j) {
        var ln = lanes[j + 1];
        drawSet(u, ctx, { x0: [ln.a0], x1: [ln.a1], b: [names.indexOf("untracked") >= 0 ? names.indexOf("untracked") : names.indexOf("attempt")] }, j + 1, 0.15);
        drawSet(u, ctx, sp.base, j + 1, 0.15);
        drawSet(u, ctx, sp.top, j + 1, 0.3);
      });
      ctx.restore();
    }
    function find(set, t, tol) {
      var k = first(set.x1, t - tol);
      var best = -1;
      for (; k < set.x0.length && set.x0[k] <= t + tol; k++) {
        if (set.x1[k] >= t - tol) { best = k; if (set.x0[k] <= t && set.x1[k] >= t) return k; }
      }
      return best;
    }
    function describe(lane, t, tol) {
      if (lane === 0) {
        var jl = data.jobLane, k = find(jl, t, tol);
        if (k < 0) return "";
        var dur = fmtDur(jl.x1[k] - jl.x0[k]);
        if (jl.a[k] >= 0) {
          var a = data.attempts[jl.a[k]];
          return "attempt " + a.id + " (" + dur + ")\n" + fmtTs(a.start) + " → " + fmtTs(a.end) +
            "\nended by " + a.ended + (a.restore !== null ? "\nrestored from step " + a.restore : "");
        }
        return names[jl.b[k]] + " (" + dur + ")";
      }
      var sp = data.spans[lane - 1];
      var label = lanes[lane].full + "\n";
      var j = find(sp.top, t, tol);
      if (j >= 0) return label + names[sp.top.b[j]] + " · " + fmtDur(sp.top.x1[j] - sp.top.x0[j]) + "\nfrom " + fmtTs(t0 + sp.top.x0[j]);
      j = find(sp.base, t, tol);
      if (j >= 0) {
        var base = sp.base;
        if (sp.binned) {
          var tot = base.sh[j].reduce(function (x, y) { return x + y; }, 0);
          var out = label + fmtTs(t0 + base.x0[j]) + " → " + fmtTs(t0 + base.x1[j]);
          if (base.n[j] > 0) out += "\nsteps " + base.s0[j] + "–" + base.s1[j] + " (" + base.n[j] + " steps)";
          base.sh[j].forEach(function (v, b) {
            if (v > 0) out += "\n" + names[b] + ": " + fmtDur(v) + " (" + (100 * v / tot).toFixed(1) + "%)";
          });
          return out;
        }
        var open = base.open && base.open.indexOf(j) >= 0
          ? "\nno step_end (crash or hang): drawn as long as a typical step" : "";
        return label + "step " + base.s[j] + " · " + names[base.b[j]] + open + "\nstep time " + fmtDur(base.d[j]) +
          (data.ideal ? " (ideal " + fmtDur(data.ideal) + ")" : "") + "\nspan " + fmtDur(base.x1[j] - base.x0[j]) +
          " from " + fmtTs(t0 + base.x0[j]);
      }
      var ln = lanes[lane];
      if (t >= ln.a0 && t <= ln.a1) return label + "untracked: inside the attempt, covered by no event";
      return "";
    }
    var el = document.getElementById("timeline");
    var u = new uPlot({
      width: width(), height: nL * laneH + 50, tzDate: utc,
      series: [{}, { label: "lanes", points: { show: false }, stroke: "rgba(0,0,0,0)" }],
      legend: { show: false },
      cursor: { drag: { x: true, y: false }, points: { show: false }, y: false },
      scales: { x: { time: true, min: data.t0, max: data.t1 }, y: { auto: false, range: [0, nL] } },
      axes: [
        {},
        {
          size: 190, gap: 4, ticks: { show: false }, grid: { show: false },
          splits: function () { return lanes.map(function (_, i) { return nL - i - 0.5; }); },
          values: function (u, splits) {
            return splits.map(function (v) {
              var s = lanes[Math.round(nL - v - 0.5)].label;
              return s.length > 26 ? s.slice(0, 25) + "…" : s;
            });
          }
        }
      ],
      hooks: {
        draw: [draw],
        setScale: [syncX],
        setCursor: [function (u) {
          var left = u.cursor.left, top = u.cursor.top;
          if (left === undefined || left < 0 || top < 0) { showTip("", lastMouse); return; }
          var t = u.posToVal(left, "x") - t0;
          var tol = u.posToVal(left + 3, "x") - t0 - t;
          var lane = Math.floor(nL - u.posToVal(top, "y"));
          if (lane < 0 || lane >= nL) { showTip("", lastMouse); return; }
          showTip(describe(lane, t, tol), lastMouse);
        }]
      }
    }, [[data.t0, data.t1], [null, null]], el);
    u.over.addEventListener("mouseleave", function () { showTip("", lastMouse); });
    timeCharts.push(u);
    view.charts.push("timeline");
    window.badputTimeline = u;
  })();

  // ------------------------------------------------------------ goodput over time
  (function () {
    var g = data.goodput;
    var pct = function (xs) { return xs.map(function (v) { return v === null ? null : 100 * v; }); };
    var el = document.getElementById("goodput-chart");
    view.charts.push("goodput");
    if (!g.t.length) { el.textContent = "No time to account for."; return; }
    var u = new uPlot({
      width: width(), height: 260, tzDate: utc,
      series: [
        {},
        { label: "goodput (cumulative)", stroke: "#2e9e44", width: 2, spanGaps: true, value: function (u, v) { return v === null ? "-" : v.toFixed(1) + "%"; } },
        { label: g.rollingLabel, stroke: "#3b6fd8", width: 1.5, value: function (u, v) { return v === null ? "-" : v.toFixed(1) + "%"; } },
        { label: "observed goodput (cumulative)", stroke: "#a6c83a", width: 1, dash: [5, 4], spanGaps: true, value: function (u, v) { return v === null ? "-" : v.toFixed(1) + "%"; } }
      ],
      scales: { x: { time: true }, y: { range: [0, 100] } },
      axes: [{}, { values: function (u, v) { return v.map(function (x) { return x + "%"; }); } }],
      cursor: { drag: { x: true, y: false } },
      hooks: { setScale: [syncX] }
    }, [g.t, pct(g.cumulative), pct(g.rolling), pct(g.observed)], el);
    timeCharts.push(u);
  })();

  // ------------------------------------------------------------ MFU over time
  (function () {
    var m = data.mfu;
    var el = document.getElementById("mfu-chart");
    if (!m || !el) return;
    if (m.absent) { el.textContent = m.absent; el.className = "dim"; return; }
    var pct = function (xs) { return xs.map(function (v) { return v === null ? null : 100 * v; }); };
    var shown = function (u, v) { return v === null ? "-" : v.toFixed(1) + "%"; };
    var top = Math.max.apply(null, m.rolling.concat(m.cumulative).map(function (v) { return v || 0; }));
    view.charts.push("mfu");
    var u = new uPlot({
      width: width(), height: 220, tzDate: utc,
      series: [
        {},
        { label: "MFU (cumulative)", stroke: "#8e44ad", width: 2, value: shown },
        { label: m.rollingLabel, stroke: "#e67e22", width: 1.5, value: shown }
      ],
      scales: { x: { time: true }, y: { range: [0, Math.min(100, Math.max(10, Math.ceil(top * 10) * 10))] } },
      axes: [{}, { values: function (u, v) { return v.map(function (x) { return x + "%"; }); } }],
      cursor: { drag: { x: true, y: false } },
      hooks: { setScale: [syncX] }
    }, [m.t, pct(m.cumulative), pct(m.rolling)], el);
    timeCharts.push(u);
    window.badputMfu = u;
  })();

  // ------------------------------------------------------------ step time
  (function () {
    var st = data.stepTime;
    var ideal = data.ideal;
    var series = [{}, {
      label: st.binned ? "step time (median per bin)" : "step time", stroke: "#3b6fd8", width: 1,
      points: { show: !st.binned, size: 3 }, value: function (u, v) { return fmtDur(v); }
    }];
    var rows = [st.t.map(function (x) { return x + t0; }), st.y];
    if (st.binned) {
      series.push({ label: "step time (max per bin)", stroke: "#d64541", width: 1, value: function (u, v) { return fmtDur(v); } });
      rows.push(st.max);
    }
    if (ideal) {
      series.push({ label: "ideal step time", stroke: "#2e9e44", width: 2, dash: [6, 4], points: { show: false }, value: function (u, v) { return fmtDur(v); } });
      rows.push(st.t.map(function (x, i) { return st.y[i] === null ? null : ideal; }));
    }
    var el = document.getElementById("steptime-chart");
    view.charts.push("steptime");
    if (!st.t.length) { el.textContent = "No step times recorded."; return; }
    var u = new uPlot({
      width: width(), height: 260, tzDate: utc, series: series,
      scales: { x: { time: true, min: st.t.length ? undefined : data.t0, max: st.t.length ? undefined : data.t1 }, y: { distr: 3 } },
      axes: [{}, { size: 70, values: function (u, v) { return v.map(function (x) { return x === null ? "" : fmtDur(x); }); } }],
      cursor: { drag: { x: true, y: false } },
      hooks: { setScale: [syncX] }
    }, rows, el);
    timeCharts.push(u);
  })();

  view.renderMs = Math.round(performance.now());  // since navigation started
  document.documentElement.setAttribute("data-rendered", "1");
})();
