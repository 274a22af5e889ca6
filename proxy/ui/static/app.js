// rollwire trace viewer: runs, a run's rollouts, and one rollout (timeline, reward, tokens).
// Data comes from /ui/api (the admin store, read by the proxy); the operator key travels as a cookie.
"use strict";

const API = "/ui/api";
const CHUNK = 2000; // tokens per frame: keeps each task short so a 50k-token page stays responsive
const main = document.getElementById("main");

function esc(s) {
  return String(s).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);
}
function fmt(x, digits = 3) {
  return x === null || x === undefined ? "–" : typeof x === "number" ? x.toFixed(digits) : esc(x);
}
async function getJSON(path) {
  const r = await fetch(API + path, { credentials: "same-origin" });
  if (!r.ok) {
    let msg = r.status + " " + r.statusText;
    try { msg = (await r.json()).error.message; } catch (e) { /* keep the status line */ }
    throw new Error(msg);
  }
  return r.json();
}
function statusCell(s) { return `<span class="status-${esc(s)}">${esc(s)}</span>`; }

function rewardChart(points) {
  if (!points.length) return "";
  const w = 24, h = 60, vals = points.map((p) => p.mean_reward);
  const lo = Math.min(0, ...vals), hi = Math.max(1e-9, ...vals);
  const bars = points.map((p, i) => {
    const bh = Math.max(1, ((p.mean_reward - lo) / (hi - lo)) * (h - 14));
    return `<rect x="${i * w + 2}" y="${h - 12 - bh}" width="${w - 4}" height="${bh}"><title>v${p.version}: ` +
      `${fmt(p.mean_reward)} (n=${p.n})</title></rect><text x="${i * w + 4}" y="${h - 1}">v${p.version}</text>`;
  });
  return `<svg class="chart" width="${points.length * w + 4}" height="${h}">${bars.join("")}</svg>`;
}

async function runsPage() {
  const runs = await getJSON("/runs");
  const rows = runs.map((r) => {
    const counts = Object.entries(r.counts).map(([s, n]) => `${statusCell(s)} ${n}`).join(", ");
    return `<tr><td><a class="run-link" href="#/run/${encodeURIComponent(r.id)}">${esc(r.id)}</a></td>` +
      `<td>${esc(r.name)}</td><td>${esc(r.kind)}</td><td class="num">${r.total}</td><td>${counts}</td>` +
      `<td class="num">${fmt(r.mean_reward)}</td><td>${r.policy_versions.join(", ")}</td>` +
      `<td>${rewardChart(r.reward_by_version)}</td></tr>`;
  });
  main.innerHTML = `<h2>Runs</h2><table id="runs"><tr><th>run</th><th>name</th><th>kind</th><th>rollouts</th>` +
    `<th>by status</th><th>mean reward</th><th>policy versions</th><th>reward by policy version</th></tr>` +
    `${rows.join("") || '<tr><td colspan="8">no runs yet</td></tr>'}</table>`;
}

function versionCurve(versions) {
  // train reward by the version a group was drawn at, held-out pass@1 by the version evaluated; x: policy version
  const series = [["train", versions.train, "mean_reward"], ["held-out", versions.held_out, "pass@1"]]
    .filter(([, points]) => points.length);
  if (!series.length) return "";
  const all = series.flatMap(([, points]) => points.map((p) => p.version));
  const lo = Math.min(...all), hi = Math.max(lo + 1, ...all), w = 420, h = 140, pad = 24;
  const x = (v) => pad + ((v - lo) / (hi - lo)) * (w - 2 * pad), y = (r) => h - pad - r * (h - 2 * pad);
  const lines = series.map(([name, points, key]) => {
    const xy = points.map((p) => `${x(p.version).toFixed(1)},${y(p[key]).toFixed(1)}`);
    const dots = points.map((p) => `<circle class="point" cx="${x(p.version).toFixed(1)}" cy="${y(p[key]).toFixed(1)}" ` +
      `r="3"><title>${name} v${p.version}: ${fmt(p[key])} (n=${p.n})</title></circle>`);
    return `<g class="curve ${name}"><polyline points="${xy.join(" ")}"/>${dots.join("")}</g>`;
  });
  const axis = `<text x="${pad}" y="${h - 4}">v${lo}</text><text x="${w - pad - 16}" y="${h - 4}">v${hi}</text>` +
    `<text x="2" y="${pad}">1</text><text x="2" y="${h - pad}">0</text>`;
  const legend = series.map(([name], i) => `<text class="legend ${name}" x="${pad + i * 90}" y="12">${name}</text>`);
  return `<svg class="versions" width="${w}" height="${h}">${axis}${legend.join("")}${lines.join("")}</svg>`;
}

async function runPage(runId) {
  const [rollouts, versions] = await Promise.all([
    getJSON(`/runs/${encodeURIComponent(runId)}/rollouts`), getJSON(`/runs/${encodeURIComponent(runId)}/versions`)]);
  const rows = rollouts.map((r) =>
    `<tr><td><a class="rollout-link" href="#/rollout/${encodeURIComponent(r.id)}">${esc(r.id)}</a></td>` +
    `<td>${esc(r.task_id ?? "")}</td><td>${esc(r.group_id ?? "")}</td><td class="num">${r.sample_index}</td>` +
    `<td>${statusCell(r.status)}</td><td class="num">${fmt(r.reward)}</td><td class="num">${r.num_calls}</td>` +
    `<td class="num">${r.num_tool_events}</td><td class="num">${fmt(r.exit_code, 0)}</td></tr>`);
  const curve = versionCurve(versions);
  main.innerHTML = `<h2>Run ${esc(runId)}</h2>${curve ? `<h3>Across policy versions</h3>${curve}` : ""}<table id="rollouts"><tr><th>rollout</th><th>task</th><th>group</th>` +
    `<th>sample</th><th>status</th><th>reward</th><th>model calls</th><th>tool events</th><th>exit</th></tr>` +
    `${rows.join("") || '<tr><td colspan="9">no rollouts</td></tr>'}</table>`;
}

function timeline(view) {
  const events = view.calls.map((c) => ({
    kind: "model", name: `call ${c.id} (${c.prompt_tokens}+${c.completion_tokens} tok, ${c.finish_reason ?? "?"})`,
    start: c.started_ns, ms: c.latency_ms, error: c.status !== "complete" ? c.error || c.status : null,
  })).concat(view.tool_events.map((e) => ({
    kind: "tool", name: `${e.server}.${e.tool}`, start: e.started_ns, ms: e.latency_ms,
    error: e.is_error ? e.error || "tool returned an error" : null,
  }))).sort((a, b) => a.start - b.start);
  if (!events.length) return "<p>no model calls or tool events</p>";
  const t0 = events[0].start;
  const end = Math.max(...events.map((e) => (e.start - t0) / 1e6 + e.ms), 1e-3);
  const scale = 400 / end;
  const rows = events.map((e) => {
    const off = (e.start - t0) / 1e6;
    const cls = (e.kind === "tool" ? "tool" : "model") + (e.error ? " err" : "");
    return `<tr class="${e.kind === "tool" ? "tool-event" : "model-call"}${e.error ? " error" : ""}">` +
      `<td>${e.kind}</td><td>${esc(e.name)}</td><td class="num">${off.toFixed(1)}</td>` +
      `<td class="num">${e.ms.toFixed(1)}</td><td class="bar"><span class="${cls}" style="margin-left:` +
      `${(off * scale).toFixed(1)}px;width:${(e.ms * scale).toFixed(1)}px"></span></td>` +
      `<td>${e.error ? "✗ " + esc(e.error) : "ok"}</td></tr>`;
  });
  return `<table class="timeline" id="timeline"><tr><th>kind</th><th>what</th><th>start ms</th><th>latency ms</th>` +
    `<th>bar</th><th>result</th></tr>${rows.join("")}</table>`;
}

function summary(view) {
  const breakdown = Object.entries(view.reward_breakdown || {}).map(([k, v]) =>
    `<tr><td>${esc(k)}</td><td class="num">${typeof v === "number" ? fmt(v) : esc(JSON.stringify(v))}</td></tr>`);
  const raw = `${API}/rollouts/${encodeURIComponent(view.id)}/trajectory`;
  return `<h2>Rollout ${esc(view.id)}</h2><table id="summary">` +
    `<tr><th>run</th><td><a href="#/run/${encodeURIComponent(view.run_id)}">${esc(view.run_id)}</a></td></tr>` +
    `<tr><th>task / group</th><td>${esc(view.task_id ?? "–")} / ${esc(view.group_id ?? "–")}</td></tr>` +
    `<tr><th>status</th><td>${statusCell(view.status)}</td></tr><tr><th>reward</th><td>${fmt(view.reward)}</td></tr>` +
    `<tr><th>exit code</th><td>${fmt(view.exit_code, 0)}</td></tr>` +
    `<tr><th>error</th><td class="${view.error ? "error" : ""}">${esc(view.error ?? "–")}</td></tr>` +
    `<tr><th>final answer</th><td>${esc(view.final_answer ?? "–")}</td></tr>` +
    `<tr><th>raw JSON</th><td><a id="raw-json" href="${raw}">trajectory</a> · ` +
    `<a href="${API}/rollouts/${encodeURIComponent(view.id)}">rollout</a></td></tr></table>` +
    `<section><h2>Reward breakdown</h2><table id="reward-breakdown"><tr><th>criterion</th><th>value</th></tr>` +
    `${breakdown.join("") || '<tr><td colspan="2">none recorded</td></tr>'}</table></section>` +
    `<section><h2>Harness log tail</h2><pre id="log-tail">${esc(view.log_tail || "(empty)")}</pre></section>`;
}

function tokenHTML(seg, pieces, from, to) {
  const out = [];
  for (let i = from; i < to; i++) {
    const id = seg.token_ids[i], text = esc(pieces[id] ?? `<${id}>`);
    if (seg.loss_mask[i] === 1) {
      const shade = (0.1 + 0.7 * (1 - Math.exp(seg.logprobs[i]))).toFixed(2);
      out.push(`<span class="s" data-i="${i}" style="background:rgba(40,170,100,${shade})">${text}</span>`);
    } else {
      out.push(`<span class="p" data-i="${i}">${text}</span>`);
    }
  }
  return out.join("");
}

function renderTokens(traj, container) {
  // Segments are appended CHUNK tokens per task so the page is usable after the first chunk.
  const jobs = [];
  traj.segments.forEach((seg, k) => {
    const box = document.createElement("div");
    box.className = "segment";
    const sampled = seg.loss_mask.reduce((a, b) => a + b, 0);
    box.innerHTML = (k > 0 ? `<div class="break">segment break: ${esc(seg.break_reason ?? "unknown")}</div>` : "") +
      `<h2>segment ${k}: ${seg.token_ids.length} tokens, ${sampled} sampled (calls ${seg.call_ids.join(", ")})</h2>` +
      `<div class="tokens" data-segment="${k}"></div>`;
    container.appendChild(box);
    for (let i = 0; i < seg.token_ids.length; i += CHUNK) jobs.push([seg, box.lastChild, i, k]);
  });
  const info = document.getElementById("token-info");
  container.addEventListener("mouseover", (ev) => {
    const el = ev.target, box = el.parentNode;
    if (!el.dataset || el.dataset.i === undefined) return;
    const seg = traj.segments[+box.dataset.segment], i = +el.dataset.i;
    info.textContent = `token ${i}: id ${seg.token_ids[i]}, mask ${seg.loss_mask[i]}, ` +
      `logprob ${seg.logprobs[i].toFixed(4)}, policy v${seg.policy_versions[i]}`;
  });
  let longest = 0;
  return new Promise((resolve) => {
    const step = (n) => {
      const t = performance.now();
      const [seg, el, from] = jobs[n];
      el.insertAdjacentHTML("beforeend", tokenHTML(seg, traj.pieces, from, Math.min(from + CHUNK, seg.token_ids.length)));
      longest = Math.max(longest, performance.now() - t);
      // usable: the first chunk has been laid out and painted, and the page is taking input again
      if (n === 0) requestAnimationFrame(() => setTimeout(() => performance.mark("rw-usable"), 0));
      if (n + 1 < jobs.length) setTimeout(() => step(n + 1), 0);
      else resolve(longest);
    };
    if (jobs.length) step(0); else { performance.mark("rw-usable"); resolve(0); }
  });
}

async function rolloutPage(id) {
  const [view, traj] = await Promise.all([
    getJSON(`/rollouts/${encodeURIComponent(id)}`), getJSON(`/rollouts/${encodeURIComponent(id)}/tokens`)]);
  performance.mark("rw-data");
  const n = traj.segments.reduce((a, s) => a + s.token_ids.length, 0);
  main.innerHTML = summary(view) + `<section><h2>Timeline</h2>${timeline(view)}</section>` +
    `<section><h2>Trajectory (${n} tokens)</h2><p class="legend"><span class="p">prompt (mask 0)</span>` +
    `<span class="s" style="border-bottom:2px solid #2a6;background:rgba(40,170,100,.5)">sampled (mask 1), ` +
    `darker = lower logprob</span></p><div id="token-info">hover a token</div><div id="tokens"></div></section>`;
  const longest = await renderTokens(traj, document.getElementById("tokens"));
  await new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));
  performance.mark("rw-tokens-done");
  const at = (name) => performance.getEntriesByName(name)[0].startTime;
  const perf = { tokens: n, data_ms: at("rw-data"), usable_ms: at("rw-usable"),
    done_ms: at("rw-tokens-done"), longest_chunk_ms: longest };
  const pre = document.createElement("pre");
  pre.id = "rw-perf";
  pre.hidden = true;
  pre.textContent = JSON.stringify(perf);
  document.body.appendChild(pre);
}

async function route() {
  const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  document.getElementById("where").textContent = parts[0] ? `${parts[0]} ${parts[1] ?? ""}` : "runs";
  try {
    if (parts[0] === "run" && parts[1]) await runPage(parts[1]);
    else if (parts[0] === "rollout" && parts[1]) await rolloutPage(parts[1]);
    else await runsPage();
  } catch (err) {
    main.innerHTML = `<p class="error" id="load-error">could not load: ${esc(err.message)}</p>`;
  }
  document.body.dataset.ready = "1";
}

window.addEventListener("hashchange", route);
route();
