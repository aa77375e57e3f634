// tachyon's flame graph page: draws the call tree embedded as JSON in
// #data (see src/collect/flamegraph.rs, PageData) on a canvas, with the
// sidebar (summary, GIL/CPU shares, view toggles, thread filter, hot
// spots, legend), search, zoom and tooltips. No libraries.
(function () {
  "use strict";
  var t0 = performance.now();
  var D = JSON.parse(document.getElementById("data").textContent);
  var S = D.strings, FR = D.frames, diff = D.kind === "diff";
  var scale = diff ? D.baseline.scale : 1;
  // The tree drawn: the call tree, or the inverted one (the functions that
  // ran at the roots, their callers above them). Per node, for the current
  // thread filter: subtree samples, own (self) samples, status counts over
  // the subtree; the baseline's (scaled) for a diff.
  var T, E, W, N, parent, frame, depth, kids, maxDepth;
  var tot, own, gil, wait, cpu, known, exc, btot, bown, ops;
  function load(name) {
    T = D[name]; E = T.ends; W = T.w; N = T.nodes.length / 2;
    // --opcodes: per node, [[opcode, samples], ..], most samples first.
    ops = {};
    var O = T.ops || [];
    for (var o = 0; o < O.length; o += 3) (ops[O[o]] = ops[O[o]] || []).push([O[o + 1], O[o + 2]]);
    for (var on in ops) ops[on].sort(function (a, b) { return b[1] - a[1] || a[0] - b[0]; });
    parent = new Int32Array(N); frame = new Int32Array(N); depth = new Int32Array(N);
    kids = []; maxDepth = 0;
    for (var i = 0; i < N; i++) {
      parent[i] = T.nodes[2 * i];
      frame[i] = T.nodes[2 * i + 1];
      kids.push([]);
      if (i > 0) {
        kids[parent[i]].push(i);
        depth[i] = depth[parent[i]] + 1;
        if (depth[i] > maxDepth) maxDepth = depth[i];
      }
    }
    tot = new Float64Array(N); own = new Float64Array(N);
    gil = new Float64Array(N); wait = new Float64Array(N); cpu = new Float64Array(N); known = new Float64Array(N);
    exc = new Float64Array(N); btot = new Float64Array(N); bown = new Float64Array(N);
  }
  var st = { thread: -1, icicle: false, inverted: false, module: false, zoom: 0, re: null, pick: null };
  var $ = function (id) { return document.getElementById(id); };
  var body = document.body, canvas = $("fg"), ctx = canvas.getContext("2d");
  var tip = $("tip"), side = $("side");
  var RH = 18;

  function fmt(n) { return Math.round(n).toLocaleString("en-US"); }
  function pct(a, b) { return b > 0 ? (100 * a / b).toFixed(2) + "%" : "0%"; }
  function esc(s) {
    return String(s).replace(/[&<>"]/g, function (c) {
      return { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" }[c];
    });
  }
  function func(n) { return n === 0 ? "all" : S[FR[5 * frame[n]]]; }
  function fileOf(f) { return FR[5 * f + 1] < 0 ? null : S[FR[5 * f + 1]]; }
  function shortFile(p) {
    if (p.length <= 50) return p;
    var parts = p.split("/");
    return parts.length > 2 ? ".../" + parts.slice(-2).join("/") : p;
  }
  // "func (file:line)" or "func (module:line)"; the frame's alone when
  // it has no file.
  function frameLabel(f) {
    var name = S[FR[5 * f]], file = fileOf(f), line = FR[5 * f + 3];
    if (file === null) return name;
    var where = st.module ? S[FR[5 * f + 2]] : shortFile(file);
    return name + " (" + where + (line > 0 ? ":" + line : "") + ")";
  }
  function label(n) { return n === 0 ? "all" : frameLabel(frame[n]); }
  function searchText(n) {
    if (n === 0) return "all";
    var f = frame[n], file = fileOf(f);
    return file === null ? S[FR[5 * f]] : S[FR[5 * f]] + " " + file + " " + S[FR[5 * f + 2]];
  }

  // A box's function, as the hot-spot list names it: function and file.
  function pickId(n) {
    var f = frame[n], file = fileOf(f);
    return S[FR[5 * f]] + "\u0000" + (file === null ? "" : file);
  }

  function hotId(e) { return S[e[0]] + "\u0000" + (e[1] < 0 ? "" : S[e[1]]); }
  function hotList() { return D.hot[diff ? 0 : st.thread + 1] || []; }

  function compute() {
    tot.fill(0); own.fill(0); gil.fill(0); wait.fill(0); cpu.fill(0); known.fill(0); exc.fill(0);
    btot.fill(0); bown.fill(0);
    for (var k = 0; k < E.length; k += W) {
      var n = E[k], s = E[k + 1];
      if (diff && s === 1) {
        bown[n] += E[k + 2] * scale;
        btot[n] += (E[k + 2] + E[k + 3]) * scale;
        continue;
      }
      if (!diff && st.thread >= 0 && s !== st.thread) continue;
      own[n] += E[k + 2];
      tot[n] += E[k + 2] + E[k + 3];
      if (W === 9) {
        gil[n] += E[k + 4]; wait[n] += E[k + 5]; cpu[n] += E[k + 6]; known[n] += E[k + 7]; exc[n] += E[k + 8];
      }
    }
    for (var j = N - 1; j > 0; j--) {
      var p = parent[j];
      tot[p] += tot[j]; btot[p] += btot[j];
      gil[p] += gil[j]; wait[p] += wait[j]; cpu[p] += cpu[j]; known[p] += known[j]; exc[p] += exc[j];
    }
    for (j = 0; j < N; j++) {
      if (kids[j].length > 1) kids[j].sort(function (a, b) { return tot[b] - tot[a] || a - b; });
    }
    if (tot[st.zoom] <= 0) st.zoom = 0;
  }

  // Colours: the hue from the frame's kind, the shade from its function
  // and file (FNV-1a), so a function keeps its colour between runs.
  function hash(s) {
    var h = 0x811c9dc5;
    for (var k = 0; k < s.length; k++) { h ^= s.charCodeAt(k); h = Math.imul(h, 0x01000193); }
    return (h >>> 0) / 4294967296;
  }
  var KINDS = [
    ["your code", function (v, w) { return [205 + 50 * v, 75 + 90 * w, 45 + 40 * v]; }],
    ["standard library", function (v, w) { return [200 + 40 * v, 180 + 50 * v, 40 + 40 * w]; }],
    ["installed packages", function (v, w) { return [60 + 50 * w, 175 + 50 * v, 185 + 50 * v]; }],
    ["<GC> garbage collection", function () { return [60, 170, 90]; }],
    ["<native> C calling Python", function () { return [120, 140, 215]; }],
    ["unreadable", function () { return [175, 175, 175]; }],
    ["process", function () { return [150, 160, 200]; }],
    ["C, C++ and Rust (--native-frames)", function (v, w) { return [150 + 40 * w, 110 + 40 * v, 190 + 50 * v]; }]
  ];
  function rgb(c) { return "rgb(" + (c[0] | 0) + "," + (c[1] | 0) + "," + (c[2] | 0) + ")"; }
  var colorCache = {};
  function kindColor(n) {
    if (n === 0) return "rgb(200,200,200)";
    var f = frame[n];
    if (colorCache[f]) return colorCache[f];
    var key = S[FR[5 * f]] + "\u0000" + (fileOf(f) || "");
    var v = hash(key), w = hash(key + "~");
    return (colorCache[f] = rgb(KINDS[FR[5 * f + 4]][1](v, w)));
  }
  var maxChange = 0;
  // What a diff's colour shows: the change in a box's self samples; in the
  // inverted tree, in its samples (its roots' are the functions' self).
  function change(n) { return st.inverted ? tot[n] - btot[n] : own[n] - bown[n]; }
  function diffColor(n) {
    if (n !== 0 && btot[n] === 0) return "rgb(190,130,230)";
    var d = change(n);
    if (Math.abs(d) < 0.005 || maxChange === 0) return "rgb(245,245,245)";
    var t = 40 + 175 * Math.min(1, Math.abs(d) / maxChange);
    return d > 0 ? rgb([255, 255 - t, 255 - t]) : rgb([255 - t, 255 - t, 255]);
  }

  // A diff box deep enough in colour to need white text.
  function dark(n) {
    return n !== 0 && btot[n] > 0 && maxChange > 0 && Math.abs(change(n)) / maxChange > 0.6;
  }

  // Which nodes the search (or a picked hot spot) matches, and the share
  // of samples under them (each sample once).
  var match = null;
  function findMatches() {
    match = null;
    var out = $("match");
    if (!st.re && st.pick === null) { out.textContent = ""; delete body.dataset.matched; return; }
    match = new Uint8Array(N);
    var under = new Uint8Array(N), sum = 0, count = 0;
    for (var n = 1; n < N; n++) {
      var m = st.pick !== null ? pickId(n) === st.pick : st.re.test(searchText(n));
      if (m) { match[n] = 1; count++; if (!under[parent[n]]) sum += tot[n]; }
      under[n] = m || under[parent[n]];
    }
    out.textContent = count ? "matched " + pct(sum, tot[0]) + " of samples (" + fmt(sum) + ") in " + count + " box" + (count === 1 ? "" : "es") : "no match";
    body.dataset.matched = (tot[0] > 0 ? (100 * sum / tot[0]) : 0).toFixed(2);
  }

  // Layout and drawing. Boxes are drawn from the zoomed node down; its
  // callers keep the full width. `rows[d]` holds the drawn boxes of depth
  // d left to right, for finding the box under the pointer.
  var rows = [], width = 0, height = 0, charW = 7;
  function layout() {
    rows = [];
    var z = st.zoom, path = [], n;
    for (n = z; n !== 0; n = parent[n]) path.push(n);
    path.push(0);
    path.reverse();
    for (var k = 0; k < path.length; k++) rows.push([[path[k], 0, width, 1]]);
    var unit = tot[z] > 0 ? width / tot[z] : 0;
    var todo = [[z, 0]];
    while (todo.length) {
      var item = todo.pop(), node = item[0], x = item[1];
      var c = kids[node];
      for (var j = 0; j < c.length; j++) {
        var w = tot[c[j]] * unit;
        if (w >= 0.4) {
          var d = depth[c[j]];
          if (!rows[d]) rows[d] = [];
          rows[d].push([c[j], x, w, 0]);
          if (kids[c[j]].length) todo.push([c[j], x]);
        }
        x += w;
      }
    }
    // Children were pushed in pre-order per parent; sort each row by x.
    for (k = 0; k < rows.length; k++) if (rows[k]) rows[k].sort(function (a, b) { return a[1] - b[1]; });
  }
  function rowY(d) { return st.icicle ? d * RH : height - (d + 1) * RH; }
  function draw() {
    var main = $("main");
    width = Math.max(200, main.clientWidth - 20);
    layout();
    var depthShown = Math.min(rows.length, Math.floor(32000 / RH));
    height = depthShown * RH + 4;
    var dpr = window.devicePixelRatio || 1;
    canvas.width = width * dpr; canvas.height = height * dpr;
    canvas.style.width = width + "px"; canvas.style.height = height + "px";
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, width, height);
    ctx.font = "12px sans-serif";
    ctx.textBaseline = "middle";
    charW = ctx.measureText("abcdefghijklmnopqrstuvwxyz_( )").width / 30;
    if (diff) {
      maxChange = 0;
      for (var n = 1; n < N; n++) maxChange = Math.max(maxChange, Math.abs(change(n)));
    }
    var boxes = 0;
    for (var d = 0; d < depthShown; d++) {
      var row = rows[d] || [], y = rowY(d);
      for (var k = 0; k < row.length; k++) {
        var b = row[k], node = b[0], x = b[1], w = b[2];
        boxes++;
        var faded = match && !match[node];
        ctx.globalAlpha = b[3] && node !== st.zoom ? 0.55 : faded ? 0.35 : 1;
        ctx.fillStyle = match && match[node] ? "rgb(238,0,238)" : diff ? diffColor(node) : kindColor(node);
        ctx.fillRect(x, y, Math.max(w - 0.5, 0.5), RH - 1);
        if (w > 24) {
          var text = label(node), fit = Math.floor((w - 6) / charW);
          if (text.length > fit) text = fit > 2 ? text.slice(0, fit - 2) + ".." : "";
          if (text) {
            ctx.fillStyle = (match && match[node]) || (diff && dark(node)) ? "#fff" : "#000";
            ctx.fillText(text, x + 3, y + RH / 2);
          }
        }
      }
    }
    ctx.globalAlpha = 1;
    body.dataset.boxes = boxes;
    crumbs();
    keepRootInView();
  }
  // The root row in sight whenever the view or the canvas's height
  // changes (opening, flame/icicle, zoom, thread): a deep stack makes the
  // canvas taller than its pane, and the flame view's root, at its
  // bottom, would open below the fold with only the deepest frames shown.
  var shown = "";
  function keepRootInView() {
    var shape = (st.icicle ? "icicle " : "flame ") + height;
    if (shape === shown) return;
    shown = shape;
    var pane = $("main");
    pane.scrollTop = st.icicle ? 0 : pane.scrollHeight;
  }
  function hit(ev) {
    var r = canvas.getBoundingClientRect(), x = ev.clientX - r.left, y = ev.clientY - r.top;
    var d = st.icicle ? Math.floor(y / RH) : Math.floor((height - y) / RH);
    var row = rows[d];
    if (!row) return -1;
    var lo = 0, hi = row.length - 1;
    while (lo <= hi) {
      var m = (lo + hi) >> 1, b = row[m];
      if (x < b[1]) hi = m - 1;
      else if (x >= b[1] + b[2]) lo = m + 1;
      else return b[0];
    }
    return -1;
  }
  function crumbs() {
    var el = $("crumbs"), path = [], n;
    for (n = st.zoom; n !== 0; n = parent[n]) path.push(n);
    path.push(0);
    path.reverse();
    el.innerHTML = path.map(function (p) {
      return '<a href="#" data-node="' + p + '">' + esc(label(p)) + "</a>";
    }).join(" › ");
  }

  function statusLines(n) {
    var out = "";
    if (D.status.gil && tot[n] > 0) {
      out += "<div>GIL: held " + pct(gil[n], tot[n]) + " · waiting " + pct(wait[n], tot[n]) +
        " · released " + pct(Math.max(0, tot[n] - gil[n] - wait[n]), tot[n]) + "</div>";
    }
    if (D.status.cpu && known[n] > 0) out += "<div>On CPU: " + pct(cpu[n], known[n]) + "</div>";
    if (D.status.exception && tot[n] > 0) out += "<div>Handling an exception: " + pct(exc[n], tot[n]) + "</div>";
    return out;
  }
  // The instructions a box's frame was at (all threads), at most eight.
  function opcodeLines(n) {
    var list = ops[n];
    if (!list || !D.opnames) return "";
    var sum = 0, k;
    for (k = 0; k < list.length; k++) sum += list[k][1];
    var out = "<div class=\"ops\">Instructions:";
    for (k = 0; k < list.length && k < 8; k++) {
      out += "<div>" + esc(D.opnames[list[k][0]] || "<" + list[k][0] + ">") + " " + pct(list[k][1], sum) + "</div>";
    }
    if (list.length > 8) out += "<div>… " + (list.length - 8) + " more</div>";
    return out + "</div>";
  }
  function tooltip(n) {
    var h = "<b>" + esc(n === 0 ? "all" : S[FR[5 * frame[n]]]) + "</b>";
    if (n !== 0) {
      var f = frame[n], file = fileOf(f), line = FR[5 * f + 3];
      if (file !== null) {
        h += "<div class=\"where\">" + esc(file) + (line > 0 ? ":" + line : "") + "</div>";
        h += "<div class=\"where\">module " + esc(S[FR[5 * f + 2]]) + "</div>";
      }
    }
    h += "<div>Samples: " + fmt(tot[n]) + " (" + pct(tot[n], tot[0]) + ")" +
      (n !== 0 ? ", " + pct(tot[n], tot[parent[n]]) + (st.inverted ? " of its callee's" : " of its caller's") : "") + "</div>";
    if (!st.inverted) h += "<div>Self: " + fmt(own[n]) + " (" + pct(own[n], tot[0]) + ")</div>";
    if (diff) {
      var d = change(n), was = st.inverted ? btot[n] : bown[n], now = st.inverted ? tot[n] : own[n];
      h += "<div>Baseline: " + (+btot[n].toFixed(2)) + " samples (scaled ×" + (+scale.toFixed(3)) + ")</div>";
      h += "<div>" + (st.inverted ? "Samples " : "Self ") + fmt(now) + " vs " + (+was.toFixed(2)) + ": " + (d >= 0.005 ? "+" : "") + (+d.toFixed(2)) +
        (was > 0 ? ", " + (d >= 0 ? "+" : "") + (100 * d / was).toFixed(1) + "%" : now > 0 ? ", new" : "") + "</div>";
    }
    h += statusLines(n);
    h += opcodeLines(n);
    h += "<div class=\"hint\">click to zoom</div>";
    return h;
  }

  function bar(name, v, id) {
    return '<div class="bar" id="' + id + '"><span>' + name + '</span><b>' + v.toFixed(1) + '%</b><i style="width:' +
      Math.min(100, Math.max(0, v)).toFixed(1) + '%"></i></div>';
  }
  function sidebar() {
    var s = D.stats, h = "", sel = st.thread;
    var samples = tot[0];
    h += "<section><h2>Profile summary</h2><dl>";
    h += "<dt>Samples</dt><dd id=\"s-samples\">" + fmt(samples) + (sel >= 0 ? " of " + fmt(s.samples) : "") + "</dd>";
    h += "<dt>Duration</dt><dd>" + s.duration.toFixed(2) + " s</dd>";
    h += "<dt>Rate</dt><dd>" + s.rate.toFixed(1) + " /s</dd>";
    h += "<dt>Error rate</dt><dd>" + s.error_pct.toFixed(2) + "% (" + fmt(s.failures) + " of " + fmt(s.attempts) + ")</dd>";
    h += "<dt>Missed samples</dt><dd>" + s.missed_pct.toFixed(2) + "%</dd>";
    h += "<dt>Mode</dt><dd>" + esc(s.mode) + ", every " + (s.interval_us % 1000 ? s.interval_us + " µs" : s.interval_us / 1000 + " ms") + "</dd>";
    h += "<dt>Threads</dt><dd>" + s.threads + "</dd>";
    if (diff) {
      var b = D.baseline;
      h += "<dt>Baseline</dt><dd>" + fmt(b.samples) + " samples in " + b.duration.toFixed(2) + " s, ×" + (+b.scale.toFixed(3)) + "</dd>";
      h += "<dt>Changed</dt><dd>" + b.grew + " grew, " + b.shrank + " shrank</dd>";
      if (b.vanished) h += "<dt>Not drawn</dt><dd>" + b.vanished + " call path" + (b.vanished === 1 ? "" : "s") + " only in the baseline (" + (+b.vanished_samples.toFixed(2)) + " samples)</dd>";
    }
    h += "</dl>";
    if (s.shutdown) h += "<p class=\"note\" id=\"s-shutdown\">" + fmt(s.shutdown) + " sample" + (s.shutdown === 1 ? "" : "s") + " during interpreter shutdown, not shown.</p>";
    if (T.dropped) h += "<p class=\"note\">" + fmt(T.dropped) + " call paths under " + T.threshold + "% of the samples are not drawn; their samples count in their " + (st.inverted ? "callees" : "callers") + ".</p>";
    h += "</section>";
    var gcs = 0;
    D.gc.forEach(function (g, k) { if (sel < 0 || k === sel) gcs += g; });
    if ((D.status.gil || D.status.cpu || D.status.exception || gcs > 0) && samples > 0) {
      h += "<section><h2>Runtime" + (sel >= 0 ? " (this thread)" : "") + "</h2>";
      if (D.status.gil) {
        h += bar("GIL held", 100 * gil[0] / samples, "gil-held") + bar("GIL waiting", 100 * wait[0] / samples, "gil-wait") +
          bar("GIL released", 100 * Math.max(0, samples - gil[0] - wait[0]) / samples, "gil-released");
      }
      if (D.status.cpu && known[0] > 0) h += bar("On CPU", 100 * cpu[0] / known[0], "on-cpu");
      h += bar("Garbage collection", 100 * gcs / samples, "gc");
      if (D.status.exception) h += bar("Handling an exception", 100 * exc[0] / samples, "exception");
      h += "</section>";
    }
    h += "<section><h2>View</h2><div class=\"toggles\">";
    h += '<button type="button" id="t-normal"' + (st.inverted ? "" : ' class="on"') + ">Call tree</button>";
    h += '<button type="button" id="t-inverted"' + (st.inverted ? ' class="on"' : "") + ">Inverted</button></div><div class=\"toggles\">";
    h += '<button type="button" id="v-flame"' + (st.icicle ? "" : ' class="on"') + ">Flame</button>";
    h += '<button type="button" id="v-icicle"' + (st.icicle ? ' class="on"' : "") + ">Icicle</button></div><div class=\"toggles\">";
    h += '<button type="button" id="l-file"' + (st.module ? "" : ' class="on"') + ">File paths</button>";
    h += '<button type="button" id="l-module"' + (st.module ? ' class="on"' : "") + ">Module names</button></div>";
    if (!diff) {
      h += '<label>Thread <select id="thread"><option value="-1">All threads (' + D.threads.length + ")</option>";
      D.threads.forEach(function (t, k) {
        var name = t[1] !== null ? t[1] + " (" + t[0] + ")" : "thread " + t[0];
        h += '<option value="' + k + '"' + (k === sel ? " selected" : "") + ">" + esc(name) + (t[2] ? " · main" : "") + " · " + fmt(t[3]) + "</option>";
      });
      h += "</select></label>";
    }
    h += "</section>";
    var hot = hotList();
    h += "<section><h2>Hot spots" + (sel >= 0 ? " (this thread)" : "") + "</h2><ol id=\"hot\">";
    hot.slice(0, 10).forEach(function (e, k) {
      var name = S[e[0]], where = e[1] < 0 ? "" : st.module ? S[e[2]] : shortFile(S[e[1]]);
      var id = hotId(e);
      h += '<li data-hot="' + k + '"' + (st.pick === id ? ' class="on"' : "") + "><b>" + esc(name) + "</b><span>" +
        esc(where) + "</span><em>self " + pct(e[4], samples) + " (" + fmt(e[4]) + ") · total " + pct(e[5], samples) +
        (diff ? " · baseline self " + (+(e[6] * scale).toFixed(2)) : "") + "</em></li>";
    });
    h += "</ol></section><section><h2>Colours</h2><div class=\"legend\">";
    if (diff) {
      [["rgb(255,60,60)", "more self samples than the baseline"], ["rgb(60,60,255)", "fewer"],
        ["rgb(245,245,245)", "unchanged"], ["rgb(190,130,230)", "new: not in the baseline"]].forEach(function (k) {
        h += '<span><i style="background:' + k[0] + '"></i>' + esc(k[1]) + "</span>";
      });
    } else {
      KINDS.forEach(function (k, i) { if (i === 6 && !D.processes) return; h += '<span><i style="background:' + rgb(k[1](0.5, 0.5)) + '"></i>' + esc(k[0]) + "</span>"; });
    }
    h += "</div><p class=\"note\">Width is samples" + (diff ? " in this run; colour is the change in a box's " + (st.inverted ? "samples" : "self samples") : "") +
      (st.inverted ? "; inverted: the functions that ran at the roots, their callers stacked on them" : "") +
      ". Click a box to zoom, Escape to zoom out, / to search.</p></section>";
    side.innerHTML = h;
  }

  function setHash() {
    var parts = [];
    if (st.inverted) parts.push("inverted");
    if (st.icicle) parts.push("icicle");
    if (st.module) parts.push("labels=module");
    if (st.thread >= 0) parts.push("thread=" + D.threads[st.thread][0]);
    var q = $("search").value;
    if (q) parts.push("search=" + encodeURIComponent(q));
    var h = parts.length ? "#" + parts.join("&") : " ";
    try { history.replaceState(null, "", h === " " ? location.pathname + location.search : h); } catch (e) { /* file: URLs may refuse */ }
    body.dataset.view = st.icicle ? "icicle" : "flame";
    body.dataset.tree = st.inverted ? "inverted" : "call";
    body.dataset.labels = st.module ? "module" : "file";
    body.dataset.thread = st.thread >= 0 ? String(D.threads[st.thread][0]) : "all";
  }
  function setSearch(q) {
    st.pick = null;
    st.re = null;
    if (q) {
      try { st.re = new RegExp(q, "i"); } catch (e) {
        st.re = new RegExp(q.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"), "i");
      }
    }
  }
  function refresh(all) {
    if (all) compute();
    findMatches();
    sidebar();
    draw();
    setHash();
  }

  // The state in the address: #icicle&labels=module&thread=TID&search=RE.
  location.hash.replace(/^#/, "").split("&").forEach(function (p) {
    var kv = p.split("="), v = kv.length > 1 ? decodeURIComponent(kv.slice(1).join("=")) : "";
    if (kv[0] === "icicle") st.icicle = true;
    else if (kv[0] === "inverted") st.inverted = true;
    else if (kv[0] === "labels") st.module = v === "module";
    else if (kv[0] === "thread") {
      D.threads.forEach(function (t, k) { if (String(t[0]) === v) st.thread = k; });
    } else if (kv[0] === "search") { $("search").value = v; setSearch(v); }
  });

  side.addEventListener("click", function (ev) {
    var t = ev.target.closest("button, li");
    if (!t) return;
    if (t.id === "t-normal" || t.id === "t-inverted") {
      if (st.inverted !== (t.id === "t-inverted")) {
        st.inverted = !st.inverted;
        load(st.inverted ? "inverted" : "tree");
        st.zoom = 0;
        refresh(true);
      }
      return;
    }
    if (t.id === "v-flame" || t.id === "v-icicle") st.icicle = t.id === "v-icicle";
    else if (t.id === "l-file" || t.id === "l-module") st.module = t.id === "l-module";
    else if (t.dataset.hot !== undefined) {
      var f = hotId(hotList()[+t.dataset.hot]);
      $("search").value = "";
      st.re = null;
      st.pick = st.pick === f ? null : f;
    } else return;
    refresh(false);
  });
  side.addEventListener("change", function (ev) {
    if (ev.target.id === "thread") { st.thread = +ev.target.value; refresh(true); }
  });
  var pending = 0;
  $("search").addEventListener("input", function () {
    cancelAnimationFrame(pending);
    pending = requestAnimationFrame(function () { setSearch($("search").value); refresh(false); });
  });
  $("reset").addEventListener("click", function () { st.zoom = 0; draw(); });
  $("crumbs").addEventListener("click", function (ev) {
    var a = ev.target.closest("a");
    if (a) { ev.preventDefault(); st.zoom = +a.dataset.node; draw(); }
  });
  canvas.addEventListener("click", function (ev) {
    var n = hit(ev);
    if (n >= 0) { st.zoom = n; tip.hidden = true; draw(); }
  });
  canvas.addEventListener("mousemove", function (ev) {
    var n = hit(ev);
    if (n < 0) { tip.hidden = true; return; }
    tip.innerHTML = tooltip(n);
    tip.hidden = false;
    var x = ev.clientX + 14, y = ev.clientY + 14;
    if (x + tip.offsetWidth > window.innerWidth) x = Math.max(0, ev.clientX - tip.offsetWidth - 14);
    if (y + tip.offsetHeight > window.innerHeight) y = Math.max(0, ev.clientY - tip.offsetHeight - 14);
    tip.style.left = x + "px"; tip.style.top = y + "px";
  });
  canvas.addEventListener("mouseleave", function () { tip.hidden = true; });
  document.addEventListener("keydown", function (ev) {
    if (ev.key === "Escape") { st.zoom = 0; draw(); }
    else if (ev.key === "/" && document.activeElement !== $("search")) { ev.preventDefault(); $("search").focus(); }
  });
  window.addEventListener("resize", function () { draw(); });

  load(st.inverted ? "inverted" : "tree");
  refresh(true);
  // Load to interactive (since navigation started), and the script's part.
  body.dataset.script = (performance.now() - t0).toFixed(1);
  body.dataset.ready = performance.now().toFixed(1);
})();
