// kafkasim dashboard: renders each state the server pushes (server-sent events). No build step, no library.
"use strict";

// set once per page load: a test reads it back to prove the page was never reloaded
window.dashboardLoadMark = String(Date.now()) + "-" + String(Math.random()).slice(2);
window.dashboardUpdates = 0;

const $ = (id) => document.getElementById(id);

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined) continue;
    if (key === "class") node.className = value;
    else if (key.startsWith("data-")) node.setAttribute(key, String(value));
    else if (key === "title") node.title = value;
    else node[key] = value;
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function fmtRate(value) {
  if (value === undefined || value === null) return "—";
  return value >= 100 ? value.toFixed(0) : value.toFixed(1);
}

function fmtBytes(value) {
  if (value === undefined) return "—";
  const units = ["B", "KiB", "MiB", "GiB"];
  let i = 0;
  while (value >= 1024 && i < units.length - 1) { value /= 1024; i++; }
  return value.toFixed(1) + " " + units[i] + "/s";
}

function fmtTime(ms) {
  const d = new Date(ms);
  return d.toTimeString().slice(0, 8) + "." + String(d.getMilliseconds()).padStart(3, "0");
}

let allowFaults = false;

function renderHeader(state) {
  const c = $("controller");
  c.dataset.controller = state.controller.id;
  c.dataset.controllerEpoch = state.controller.epoch;
  c.textContent = state.controller.id >= 0
    ? `controller: broker ${state.controller.id}, controller epoch ${state.controller.epoch}`
    : `no controller (controller epoch ${state.controller.epoch})`;
  const zk = $("zookeeper");
  zk.textContent = state.zookeeper.answering ? "ZooKeeper: answering" : `ZooKeeper: NOT answering (${state.zookeeper.error}); last known state shown`;
  zk.className = state.zookeeper.answering ? "" : "offline";
  allowFaults = state.allow_faults;
  document.body.classList.toggle("faults-on", allowFaults);
  $("mode").textContent = allowFaults ? "fault buttons on" : "read-only";
  const u = $("updated");
  u.dataset.seq = state.seq;
  u.dataset.time = state.time;
  u.textContent = `update ${state.seq} at ${fmtTime(state.time * 1000)} (poll ${state.poll_ms} ms)`;
}

function faultButton(action, broker, label) {
  return el("button", { "data-action": action, "data-broker": broker, onclick: () => fault(action, broker) }, label);
}

function renderBrokers(state) {
  const body = $("brokers").tBodies[0];
  body.replaceChildren(...state.brokers.map((b) => {
    const detail = [];
    if (!b.registered) detail.push("not registered in ZooKeeper");
    if (!b.answering) detail.push(`DescribeBroker: ${b.silent_why || "not asked"}`);
    if (b.cut_off.length) detail.push("cut off from " + b.cut_off.join(", "));
    const stateClass = "badge state-" + b.state.replace(/ /g, "-");
    return el("tr", { "data-broker": b.id, "data-state": b.state, "data-process": b.process },
      el("td", {}, `broker ${b.id}`),
      el("td", {}, el("span", { class: stateClass }, b.state)),
      el("td", {}, b.broker_epoch === null ? "—" : b.broker_epoch),
      el("td", {}, b.controller ? "controller" : ""),
      el("td", {}, detail.join("; ")),
      el("td", { class: "faults" },
        faultButton("kill", b.id, "kill -9"), faultButton("pause", b.id, "pause"),
        faultButton("resume", b.id, "resume"), faultButton("start", b.id, "start"),
        faultButton("isolate", b.id, "isolate")));
  }));
}

function renderPartition(p) {
  const leos = Object.entries(p.leo).filter(([, v]) => v !== null && v >= 0).map(([, v]) => v);
  const top = Math.max(1, p.high_watermark || 0, ...leos);
  const axis = el("div", { class: "axis", title: `offsets 0 … ${top}` });
  if (p.high_watermark !== null) {
    axis.append(el("div", { class: "hw", "data-hw": p.high_watermark, title: `high watermark ${p.high_watermark}`,
      style: "" }));
    axis.lastChild.style.left = (100 * p.high_watermark / top) + "%";
  }
  // one lane per replica, so equal offsets do not hide each other
  axis.style.height = (4 + 15 * p.replicas.length) + "px";
  for (const [lane, replica] of p.replicas.entries()) {
    const leo = p.leo[String(replica)];
    if (leo === null || leo === undefined || leo < 0) continue;
    const mark = el("span", { class: "mark" + (replica === p.leader ? " leader-mark" : ""),
      "data-replica": replica, "data-leo": leo, title: `broker ${replica}: LEO ${leo}` }, `${replica}:${leo}`);
    mark.style.left = Math.min(97, Math.max(3, 100 * leo / top)) + "%";
    mark.style.top = (2 + 15 * lane) + "px";
    axis.append(mark);
  }
  axis.append(el("span", { class: "scale" }, `HW ${p.high_watermark ?? "?"}`));
  const replicas = el("span", { class: "replicas" }, "[");
  p.replicas.forEach((r, i) => {
    if (i) replicas.append(",");
    replicas.append(el("span", { class: (r === p.leader ? "leader" : "") + (p.isr.includes(r) ? "" : " out"),
      title: r === p.leader ? "leader" : p.isr.includes(r) ? "in sync" : "out of sync" }, r));
  });
  replicas.append("]");
  const cls = "partition" + (p.offline ? " offline" : p.under_replicated ? " urp" : "");
  return el("div", { class: cls, "data-partition": p.name, "data-leader": p.leader, "data-isr": p.isr.join(","),
      "data-leader-epoch": p.leader_epoch, "data-offline": p.offline, "data-under-replicated": p.under_replicated },
    el("span", { title: `leader epoch ${p.leader_epoch}` }, el("b", {}, p.name), ` e${p.leader_epoch}`),
    el("span", { title: "replicas (leader underlined, out of sync in red); ISR" }, replicas,
      ` ISR [${p.isr.join(",")}]`),
    axis);
}

function renderPartitions(state) {
  const byTopic = new Map();
  for (const p of state.partitions) {
    if (!byTopic.has(p.topic)) byTopic.set(p.topic, []);
    byTopic.get(p.topic).push(p);
  }
  const blocks = [];
  for (const [topic, parts] of byTopic) {
    const urp = parts.filter((p) => p.under_replicated).length;
    const offline = parts.filter((p) => p.offline).length;
    blocks.push(el("h3", { "data-topic": topic }, topic,
      el("small", {}, ` ${parts.length} partitions` + (urp ? `, ${urp} under-replicated` : "")
        + (offline ? `, ${offline} offline` : "")
        + (state.topics_being_deleted.includes(topic) ? " (being deleted)" : ""))));
    for (const p of parts) blocks.push(renderPartition(p));
  }
  $("partitions").replaceChildren(...blocks);
}

function renderFeed(state) {
  const items = state.feed.slice().reverse().map((line) =>
    el("li", { class: line.kind, "data-kind": line.kind, "data-ts": line.ts_ms },
      el("time", {}, fmtTime(line.ts_ms)), line.text));
  $("feed").replaceChildren(...items);
}

function renderRates(state) {
  const r = state.rates;
  const rows = [el("tr", {}, el("th", {}, "produced (leaders' LEO)"),
    el("td", { "data-rate": "produce" }, fmtRate(r.produce_messages_per_s_total) + " msg/s"))];
  for (const [topic, value] of Object.entries(r.produce_messages_per_s)) {
    rows.push(el("tr", {}, el("td", {}, `  ${topic}`), el("td", {}, fmtRate(value) + " msg/s")));
  }
  for (const [group, value] of Object.entries(r.consumed_messages_per_s)) {
    rows.push(el("tr", {}, el("th", {}, `consumed by ${group} (commits)`),
      el("td", { "data-rate": "consumed", "data-group": group }, fmtRate(value) + " msg/s")));
  }
  const m = r.metrics_total;
  if (m && Object.keys(m).length) {
    rows.push(el("tr", {}, el("th", {}, "bytes in / out (metrics)"),
      el("td", { "data-rate": "bytes" }, `${fmtBytes(m.bytes_in)} / ${fmtBytes(m.bytes_out)}`)));
    rows.push(el("tr", {}, el("th", {}, "messages in (metrics)"), el("td", {}, fmtRate(m.messages_in) + " msg/s")));
  }
  $("rates").replaceChildren(el("table", {}, el("tbody", {}, ...rows)));
}

function renderGroups(state) {
  const g = state.groups;
  const out = [];
  if (g.error) out.push(el("p", { class: "offline" }, `groups: ${g.error}`));
  if (!g.groups.length) out.push(el("p", {}, g.updated ? "no consumer groups" : "asking the coordinators…"));
  for (const group of g.groups) {
    if (group.error) { out.push(el("p", {}, `${group.group}: ${group.error}`)); continue; }
    out.push(el("h3", { "data-group": group.group, "data-group-state": group.state },
      `${group.group}: ${group.state}, ${group.members.length} members, lag ${group.lag}`,
      el("small", {}, ` coordinator ${group.coordinator ?? "?"}`)));
    const rows = group.partitions.map((p) => el("tr", {},
      el("td", {}, `${p.topic}-${p.partition}`), el("td", {}, p.committed ?? "—"),
      el("td", {}, p.high_watermark ?? "—"), el("td", {}, p.lag ?? "—"),
      el("td", {}, p.owner ? (group.members.find((m) => m.member_id === p.owner)?.client_id || p.owner) : "—")));
    out.push(el("table", {}, el("thead", {}, el("tr", {}, ...["partition", "committed", "HW", "lag", "owner"]
      .map((h) => el("th", {}, h)))), el("tbody", {}, ...rows)));
  }
  $("groups").replaceChildren(...out);
}

function render(state) {
  renderHeader(state);
  renderBrokers(state);
  renderRates(state);
  renderPartitions(state);
  renderFeed(state);
  renderGroups(state);
  window.dashboardUpdates += 1;
  document.body.classList.remove("stale");
}

async function fault(action, broker) {
  const peers = $("peers").value;
  const what = action === "heal" ? "heal every cut and slow link"
    : action === "isolate" ? `isolate broker ${broker} from ${peers}` : `${action} broker ${broker}`;
  if (!window.confirm(`Really ${what}?`)) return;
  const result = $("fault-result");
  result.className = "";
  result.textContent = `${what}…`;
  try {
    const response = await fetch("/api/fault", { method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ action, broker, peers }) });
    const body = await response.json();
    result.textContent = response.ok ? body.done : `refused: ${body.error}`;
    result.className = response.ok ? "" : "error";
  } catch (error) {
    result.textContent = `failed: ${error}`;
    result.className = "error";
  }
}

$("heal").onclick = () => fault("heal", null);

const source = new EventSource("/api/events");
source.onmessage = (message) => render(JSON.parse(message.data));
source.onerror = () => document.body.classList.add("stale");
