// The backprop explorer: interprets the exported graph (GRAPH) in float64, draws the
// forward graph and its mirror, the backward graph, and walks the backward pass.
// Every rule below is written in the order JAX's own rule evaluates it (lax's
// `_integer_pow`, `logistic_impl`, the jvp rules of tanh, logistic, div, max), so the
// page computes what jax.grad computes; a browser test holds it to that.
"use strict";

const GRAPH = JSON.parse(document.getElementById("graph-data").textContent);
// A value is a number (a scalar) or a flat row-major Array; node.shape says which.
const isVec = Array.isArray;
function mapN(f, ...xs) { // elementwise over scalars and equal-length arrays
  const vec = xs.find(isVec);
  if (!vec) return f(...xs);
  return vec.map((_, i) => f(...xs.map((x) => (isVec(x) ? x[i] : x))));
}
const map1 = (a, f) => mapN(f, a);
const map2 = (a, b, f) => mapN(f, a, b);
function sum(a) { let s = 0; for (const v of a) s += v; return s; }
const gather = (a, map) => map.map((j) => a[j]);
function scatter(g, map, size) { // the transpose of a gather: add each back where it came from
  const out = new Array(size).fill(0);
  map.forEach((j, i) => { out[j] += isVec(g) ? g[i] : g; });
  return out;
}
const sizeOf = (shape) => shape.reduce((n, d) => n * d, 1);

function intPow(x, y) { // lax._integer_pow: binary powering, reciprocal for y < 0
  if (y === 0) return 1;
  const reciprocal = y < 0;
  if (reciprocal) y = -y;
  let acc = null;
  while (y > 0) {
    if (y & 1) acc = acc === null ? x : acc * x;
    y >>= 1;
    if (y > 0) x = x * x;
  }
  return reciprocal ? 1 / acc : acc;
}
const logistic = (x) => 1 / (1 + Math.exp(-x)); // lax's logistic_impl
const balancedEq = (x, z, y) => (x === z ? 1 : 0) / (y === z ? 2 : 1);

// Elementwise primitives: forward rule and vector-Jacobian product side by side, on
// operands already broadcast to the output's shape.
const ELEMENTWISE = {
  add: { f: (a, b) => map2(a, b, (x, y) => x + y), vjp: (g) => [g, g] },
  sub: { f: (a, b) => map2(a, b, (x, y) => x - y), vjp: (g) => [g, map1(g, (v) => -v)] },
  mul: { f: (a, b) => map2(a, b, (x, y) => x * y),
         vjp: (g, [a, b]) => [map2(g, b, (u, y) => u * y), map2(g, a, (u, x) => u * x)] },
  div: { f: (a, b) => map2(a, b, (x, y) => x / y),
         vjp: (g, [a, b]) => [map2(g, b, (u, y) => u / y),
                              mapN((u, x, y) => -u * x * intPow(y, -2), g, a, b)] },
  neg: { f: (a) => map1(a, (x) => -x), vjp: (g) => [map1(g, (v) => -v)] },
  integer_pow: { f: (a, p) => map1(a, (x) => intPow(x, p.y)),
                 vjp: (g, [a], ans, p) => [map2(g, a, (u, x) => (p.y === 0 ? 0 : p.y === 1 ? u
                   : p.y === 2 ? u * (2 * x) : u * (p.y * intPow(x, p.y - 1))))] },
  square: { f: (a) => map1(a, (x) => x * x), vjp: (g, [a]) => [map2(g, a, (u, x) => u * (2 * x))] },
  sqrt: { f: (a) => map1(a, Math.sqrt), vjp: (g, args, ans) => [map2(g, ans, (u, r) => u * (0.5 / r))] },
  max: { f: (a, b) => map2(a, b, Math.max),
         vjp: (g, [a, b], ans) => [mapN((u, x, z, y) => u * balancedEq(x, z, y), g, a, ans, b),
                                   mapN((u, y, z, x) => u * balancedEq(y, z, x), g, b, ans, a)] },
  min: { f: (a, b) => map2(a, b, Math.min),
         vjp: (g, [a, b], ans) => ELEMENTWISE.max.vjp(g, [a, b], ans) },
  exp: { f: (a) => map1(a, Math.exp), vjp: (g, args, ans) => [map2(g, ans, (u, e) => u * e)] },
  log: { f: (a) => map1(a, Math.log), vjp: (g, [a]) => [map2(g, a, (u, x) => u / x)] },
  log1p: { f: (a) => map1(a, Math.log1p), vjp: (g, [a]) => [map2(g, a, (u, x) => u / (1 + x))] },
  tanh: { f: (a) => map1(a, Math.tanh),
          vjp: (g, args, ans) => [map2(g, ans, (u, t) => (u + u * t) * (1 - t))] },
  logistic: { f: (a) => map1(a, logistic),
              vjp: (g, args, ans) => [map2(g, ans, (u, s) => u * (s * (1 - s)))] },
  convert_element_type: { f: (a) => a, vjp: (g) => [g] },
  copy: { f: (a) => a, vjp: (g) => [g] },
};
// Structural primitives: the exporter computed their index maps.
const GATHER = { f: (a, p) => gather(a, p.gather), vjp: (g, [a], ans, p, shapes) => [scatter(g, p.gather, sizeOf(shapes[0]))] };
const STRUCTURAL = {
  transpose: GATHER, broadcast_in_dim: GATHER, reshape: GATHER, squeeze: GATHER, expand_dims: GATHER,
  reduce_sum: { f: (a, p) => unwrap(scatter(a, p.scatter, p.size), p.size),
                vjp: (g, [a], ans, p) => [p.scatter.map((j) => (isVec(g) ? g[j] : g))] },
  dot_general: {
    f: (a, b, p) => {
      const out = new Array(p.size).fill(0);
      for (const [o, i, j] of p.triples) out[o] += (isVec(a) ? a[i] : a) * (isVec(b) ? b[j] : b);
      return unwrap(out, p.size);
    },
    vjp: (g, [a, b], ans, p) => {
      const da = isVec(a) ? new Array(a.length).fill(0) : 0, db = isVec(b) ? new Array(b.length).fill(0) : 0;
      const at = (v, k) => (isVec(v) ? v[k] : v);
      const out = [da, db];
      for (const [o, i, j] of p.triples) {
        if (isVec(da)) da[i] += at(g, o) * at(b, j); else out[0] += at(g, o) * at(b, j);
        if (isVec(db)) db[j] += at(g, o) * at(a, i); else out[1] += at(g, o) * at(a, i);
      }
      return out;
    },
  },
};
const unwrap = (out, size) => (size === 1 && out.length === 1 ? out[0] : out); // scalar results

const NODES = GRAPH.nodes;
const OPS = NODES.filter((n) => n.op !== "constant");
const CONST = new Set(NODES.filter((n) => n.op === "constant").map((n) => n.id));
const LABEL = Object.fromEntries(GRAPH.inputs.map((i) => [i.id, i.label]));
const SHAPE = Object.fromEntries([...GRAPH.inputs, ...NODES].map((n) => [n.id, n.shape]));
// jax.nn.relu's custom rule on its max(x, 0): gradient where x > 0 only (0 at exactly 0,
// where a bare max splits it half and half)
const reluVjp = (node) => (g, args) =>
  node.inputs.map((i, k) => (CONST.has(i) ? null : map2(g, args[k], (u, x) => (x > 0 ? u : 0))));
// lax broadcasts size-1 dimensions: operands are gathered up to the output's shape, and
// their gradients summed back down
const widen = (node, args) => args.map((a, k) => (node.params.broadcast && node.params.broadcast[k] ? gather(a, node.params.broadcast[k]) : a));
function narrow(node, k, part) {
  if (part === null) return null;
  const map = node.params.broadcast && node.params.broadcast[k];
  if (map) return scatter(part, map, sizeOf(SHAPE[node.inputs[k]]));
  if (isVec(part) && SHAPE[node.inputs[k]].length === 0) return sum(part); // a scalar operand
  return part;
}

function apply(node, values) {
  const args = node.inputs.map((i) => values[i]);
  if (node.op in ELEMENTWISE) return ELEMENTWISE[node.op].f(...widen(node, args), node.params);
  return STRUCTURAL[node.op].f(...args, node.params);
}

function evaluate(point) { // point: input label -> value; returns node id -> value
  const values = {};
  for (const input of GRAPH.inputs) values[input.id] = point[input.label];
  for (const node of NODES) values[node.id] = node.op === "constant" ? node.value : apply(node, values);
  return values;
}

function localVjp(node, upstream, values) { // each input's share of the upstream gradient
  const args = node.inputs.map((i) => values[i]);
  const shapes = node.inputs.map((i) => SHAPE[i]);
  if (node.op in ELEMENTWISE) {
    const vjp = node.rule === "relu" ? reluVjp(node) : ELEMENTWISE[node.op].vjp;
    return vjp(upstream, widen(node, args), values[node.id], node.params).map((part, k) => narrow(node, k, part));
  }
  return STRUCTURAL[node.op].vjp(upstream, args, values[node.id], node.params, shapes);
}

function backward(values) { // the chain rule, node by node, from the output back
  const grads = { [GRAPH.output.id]: 1 };
  const steps = [];
  for (const node of [...OPS].reverse()) {
    if (!(node.id in grads)) continue;
    const upstream = grads[node.id];
    const parts = localVjp(node, upstream, values);
    const scalarNode = !isVec(values[node.id]);
    const unit = scalarNode ? localVjp(node, 1, values) : null;
    const rows = [];
    node.inputs.forEach((input, k) => {
      if (CONST.has(input) || parts[k] === null) return;
      const gradient = parts[k];
      const local = unit && !isVec(values[input]) ? unit[k] : null;
      rows.push({ input, upstream, local, gradient });
      grads[input] = input in grads ? map2(grads[input], gradient, (x, y) => x + y) : gradient;
    });
    steps.push({ node, rows });
  }
  const inputGrads = {};
  for (const input of GRAPH.inputs) {
    inputGrads[input.label] = input.id in grads ? grads[input.id] : map1(input.value, () => 0);
  }
  return { grads, steps, inputGrads };
}

// ---- formatting ---------------------------------------------------------------------
function fmt(v) {
  if (v === null || v === undefined) return "—";
  if (isVec(v) && v.length > 4) return `${v.length} values, |max| ${fmt(Math.max(...v.map(Math.abs)))}`;
  if (isVec(v)) return "[" + v.map(fmt).join(", ") + "]";
  if (Object.is(v, -0)) v = 0;
  return Number.isInteger(v) && Math.abs(v) < 1e15 ? String(v) : Number(v.toPrecision(6)).toString();
}
// in a graph box: small arrays in full, others as shape and largest magnitude
function fmtBox(v, shape) {
  if (!isVec(v) || v.length <= 3) return fmt(v);
  return `[${shape.join("×")}] |max| ${Number(Math.max(...v.map(Math.abs)).toPrecision(3))}`;
}
const exact = (v) => (v === null || v === undefined ? "" : JSON.stringify(v));
function el(tag, attrs = {}, text = "") {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== "") node.textContent = text;
  return node;
}
function nodeName(id) { return id in LABEL ? LABEL[id] : id; }
function opText(node) {
  const args = node.inputs.map((i) => (CONST.has(i) ? fmt(NODES.find((n) => n.id === i).value) : nodeName(i)));
  if (node.rule === "relu") return `relu(${args[node.inputs.findIndex((i) => !CONST.has(i))]})`;
  if (node.op === "integer_pow") return `${args[0]}^${node.params.y}`;
  const short = { dot_general: "dot", broadcast_in_dim: "broadcast", convert_element_type: "convert" };
  return `${short[node.op] || node.op}(${args.join(", ")})`;
}

// ---- drawing ------------------------------------------------------------------------
const SVGNS = "http://www.w3.org/2000/svg";
const BOX = { w: 150, h: 54, dx: 176, dy: 66, pad: 16 };
const FITS = 22; // characters of a title that fit a box; the full text is its tooltip
function layout() {
  const rows = {}, pos = {};
  const drawn = [...GRAPH.inputs.map((i) => i.id), ...OPS.map((n) => n.id)];
  for (const id of drawn) {
    const col = GRAPH.columns[id];
    rows[col] = (rows[col] || 0) + 1;
    pos[id] = { col, row: rows[col] - 1 };
  }
  const cols = Math.max(...Object.keys(rows).map(Number)) + 1;
  const height = Math.max(...Object.values(rows));
  return { pos, cols, height, drawn };
}
const LAYOUT = layout();

function svgEl(tag, attrs) {
  const node = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  return node;
}
function drawGraph(svg, mirrored) {
  const { pos, cols, height, drawn } = LAYOUT;
  const width = BOX.pad * 2 + (cols - 1) * BOX.dx + BOX.w;
  const tall = BOX.pad * 2 + (height - 1) * BOX.dy + BOX.h;
  svg.setAttribute("width", width); svg.setAttribute("height", tall);
  svg.setAttribute("viewBox", `0 0 ${width} ${tall}`);
  const at = (id) => ({ x: BOX.pad + (mirrored ? cols - 1 - pos[id].col : pos[id].col) * BOX.dx,
                        y: BOX.pad + pos[id].row * BOX.dy });
  const defs = svgEl("defs", {});
  const marker = svgEl("marker", { id: `arrow-${svg.id}`, markerWidth: 8, markerHeight: 8, refX: 7, refY: 4,
                                     orient: "auto", markerUnits: "userSpaceOnUse" });
  marker.appendChild(svgEl("path", { d: "M0,0 L8,4 L0,8 z", class: "arrowhead" }));
  defs.appendChild(marker); svg.appendChild(defs);
  for (const node of OPS) {
    for (const input of node.inputs) {
      if (CONST.has(input)) continue;
      const [from, to] = mirrored ? [at(node.id), at(input)] : [at(input), at(node.id)];
      const x1 = from.x + BOX.w, y1 = from.y + BOX.h / 2, x2 = to.x, y2 = to.y + BOX.h / 2;
      svg.appendChild(svgEl("path", { d: `M${x1},${y1} C${x1 + 24},${y1} ${x2 - 24},${y2} ${x2 - 2},${y2}`,
                                      class: "edge", "data-from": input, "data-to": node.id,
                                      "marker-end": `url(#arrow-${svg.id})` }));
    }
  }
  for (const id of drawn) {
    const p = at(id);
    const node = OPS.find((n) => n.id === id);
    const kind = node ? (id === GRAPH.output.id ? "output" : "operation") : "input";
    const g = svgEl("g", { class: `node ${kind}`, "data-id": id, transform: `translate(${p.x},${p.y})` });
    g.appendChild(svgEl("rect", { width: BOX.w, height: BOX.h, rx: kind === "input" ? 22 : 6 }));
    const title = mirrored ? `∂${GRAPH.output.label}/∂${nodeName(id)}`
      : node ? `${id} = ${opText(node)}` : nodeName(id);
    const tip = svgEl("title", {}); tip.textContent = title; g.appendChild(tip);
    const t1 = svgEl("text", { x: BOX.w / 2, y: 17, class: "title" });
    t1.textContent = title.length > FITS ? title.slice(0, FITS - 1) + "…" : title;
    const t2 = svgEl("text", { x: BOX.w / 2, y: 33, class: "value" });
    const t3 = svgEl("text", { x: BOX.w / 2, y: 48, class: "kind" });
    t3.textContent = !node ? (mirrored ? ".grad" : "input")
      : mirrored ? (GRAPH.torch ? GRAPH.torch.grad_fn[id] : "") : (id === GRAPH.output.id ? GRAPH.output.label : "");
    g.appendChild(t1); g.appendChild(t2); g.appendChild(t3); svg.appendChild(g);
  }
}

// ---- state and rendering ------------------------------------------------------------
const START = Object.fromEntries(GRAPH.inputs.map((i) => [i.label, i.value]));
const state = { point: { ...START }, position: 0 };
let result = null; // {values, back}
const FORWARD_STEPS = OPS.length;

function recompute() {
  const values = evaluate(state.point);
  result = { values, back: backward(values) };
}
function total() { return FORWARD_STEPS + result.back.steps.length; }
function atStart() { return GRAPH.inputs.every((i) => exact(state.point[i.label]) === exact(i.value)); }

// the k-th record for (node, input): w * w sends two gradients to w
const nth = (records, nodeId, inputId, k) =>
  records.filter((s) => s.node === nodeId && s.input === inputId)[k];
const jaxStep = (nodeId, inputId, k) => nth(GRAPH.jax.steps, nodeId, inputId, k);
const torchPassed = (nodeId, inputId, k) => (GRAPH.torch ? nth(GRAPH.torch.passed, nodeId, inputId, k) : undefined);

function render() {
  const { values, back } = result;
  const forwardShown = Math.min(state.position, FORWARD_STEPS);
  const backwardShown = Math.max(0, state.position - FORWARD_STEPS);
  const known = new Set(GRAPH.inputs.map((i) => i.id).concat(OPS.slice(0, forwardShown).map((n) => n.id)));
  document.querySelectorAll("#forward g.node").forEach((g) => {
    const id = g.dataset.id;
    g.querySelector(".value").textContent = known.has(id) ? "= " + fmtBox(values[id], SHAPE[id]) : "";
    g.dataset.value = known.has(id) ? exact(values[id]) : "";
    g.classList.toggle("current", state.position <= FORWARD_STEPS && forwardShown > 0 && OPS[forwardShown - 1].id === id);
  });
  // gradients are final once every consumer has been stepped through
  const done = new Set(), current = backwardShown > 0 ? back.steps[backwardShown - 1] : null;
  const partial = {};
  if (backwardShown > 0) done.add(GRAPH.output.id);
  back.steps.slice(0, backwardShown).forEach((s) => {
    done.add(s.node.id);
    for (const r of s.rows) partial[r.input] = r.input in partial ? map2(partial[r.input], r.gradient, (x, y) => x + y) : r.gradient;
  });
  const finished = backwardShown === back.steps.length && backwardShown > 0;
  document.querySelectorAll("#backward g.node").forEach((g) => {
    const id = g.dataset.id;
    const isInput = id in LABEL;
    let shown = null;
    if (done.has(id)) shown = back.grads[id];
    else if (isInput && id in partial) shown = partial[id];
    if (isInput && finished && shown === null) shown = 0;
    g.querySelector(".value").textContent = shown === null ? "" : "= " + fmtBox(shown, SHAPE[id]);
    g.dataset.grad = shown === null ? "" : exact(shown);
    g.classList.toggle("current", current !== null && current.node.id === id);
  });
  document.querySelectorAll("path.edge").forEach((p) => p.classList.remove("active"));
  if (current) {
    document.querySelectorAll(`#backward path.edge[data-to="${current.node.id}"]`).forEach((p) => p.classList.add("active"));
  }
  renderStep(current, forwardShown);
  renderGrads();
  renderCheck();
  document.getElementById("position").textContent = `step ${state.position} of ${total()}`;
  document.getElementById("position").dataset.position = state.position;
  document.getElementById("position").dataset.total = total();
  document.getElementById("step").disabled = state.position >= total();
  document.getElementById("stale").hidden = atStart();
}

function renderStep(current, forwardShown) {
  const box = document.getElementById("step-text");
  const body = document.querySelector("#step-table tbody");
  body.replaceChildren();
  const { values } = result;
  if (state.position === 0) {
    box.textContent = "Nothing computed yet. Step runs the forward pass, one operation at a time, then the backward pass.";
    return;
  }
  if (!current) {
    const node = OPS[forwardShown - 1];
    const args = node.inputs.map((i) => (CONST.has(i) ? fmt(values[i]) : `${nodeName(i)}=${fmt(values[i])}`));
    box.textContent = `forward: ${node.id} = ${node.rule === "relu" ? "relu" : node.op}(${args.join(", ")}) = ${fmt(values[node.id])}` +
      (state.position === FORWARD_STEPS ? `  —  the forward pass is done: ${GRAPH.output.label} = ${fmt(values[GRAPH.output.id])}. Step to start the backward pass.` : "");
    return;
  }
  const L = GRAPH.output.label, node = current.node;
  box.textContent = `backward through ${node.id} = ${opText(node)}: the gradient arriving at it, ∂${L}/∂${node.id} = ${fmt(result.back.grads[node.id])}, times each local derivative`;
  const fresh = atStart();
  const seen = {};
  for (const row of current.rows) {
    const k = seen[row.input] = (seen[row.input] ?? -1) + 1;
    const j = jaxStep(node.id, row.input, k), t = torchPassed(node.id, row.input, k);
    const tr = el("tr", { "data-node": node.id, "data-input": nodeName(row.input) });
    const cells = [
      ["input", nodeName(row.input), ""],
      ["local", row.local === null ? "(vector: vjp)" : fmt(row.local), exact(row.local)],
      ["upstream", fmt(row.upstream), exact(row.upstream)],
      ["product", fmt(row.gradient), exact(row.gradient)],
      ["jax", fresh && j ? fmt(j.gradient) : "—", fresh && j ? exact(j.gradient) : ""],
      ["torch", fresh && t ? fmt(t.value) : "—", fresh && t ? exact(t.value) : ""],
      ["grad-fn", GRAPH.torch ? GRAPH.torch.grad_fn[node.id] || "" : "", ""],
    ];
    for (const [cls, text, value] of cells) tr.appendChild(el("td", { class: cls, "data-value": value }, text));
    body.appendChild(tr);
  }
}

function renderGrads() {
  const body = document.querySelector("#grads tbody");
  body.replaceChildren();
  const fresh = atStart();
  for (const input of GRAPH.inputs) {
    const g = result.back.inputGrads[input.label];
    const jaxValue = GRAPH.jax.grads[input.label];
    const torchValue = GRAPH.torch ? GRAPH.torch.grads[input.label] : undefined;
    const tr = el("tr", { "data-input": input.label });
    tr.appendChild(el("td", { class: "input" }, input.label));
    tr.appendChild(el("td", { class: "value", "data-value": exact(state.point[input.label]) }, fmt(state.point[input.label])));
    tr.appendChild(el("td", { class: "grad", "data-value": exact(g) }, fmt(g)));
    tr.appendChild(el("td", { class: "jax", "data-value": fresh ? exact(jaxValue) : "" }, fresh ? fmt(jaxValue) : "—"));
    tr.appendChild(el("td", { class: "torch", "data-value": fresh && torchValue !== undefined ? exact(torchValue) : "" },
                      fresh && torchValue !== undefined ? fmt(torchValue) : "—"));
    body.appendChild(tr);
  }
  const out = document.getElementById("loss");
  out.textContent = `${GRAPH.output.label} = ${fmt(result.values[GRAPH.output.id])}`;
  out.dataset.value = exact(result.values[GRAPH.output.id]);
}

// ---- gradient check: central differences, float64, eps 1e-6 -------------------------
const CHECK = { eps: 1e-6, atol: 1e-8, rtol: 1e-6 };
function renderCheck() {
  // the option's value is "label" for a scalar, "label\u0000k" for element k of an array
  const [label, element] = document.getElementById("check-input").value.split("\u0000");
  const k = element === undefined ? null : Number(element);
  const h = CHECK.eps;
  const lossAt = (delta) => {
    const value = state.point[label];
    const moved = k === null ? value + delta : value.map((x, i) => (i === k ? x + delta : x));
    return evaluate({ ...state.point, [label]: moved })[GRAPH.output.id];
  };
  const numeric = (lossAt(h) - lossAt(-h)) / (2 * h);
  const grad = result.back.inputGrads[label];
  const analytic = k === null ? grad : grad[k];
  const diff = Math.abs(analytic - numeric);
  const passed = diff <= CHECK.atol + CHECK.rtol * Math.abs(numeric);
  const put = (id, value, text) => { const e = document.getElementById(id); e.textContent = text; e.dataset.value = exact(value); };
  put("check-analytic", analytic, fmt(analytic));
  put("check-numeric", numeric, Number(numeric.toPrecision(10)).toString());
  put("check-diff", diff, diff.toExponential(2));
  const verdict = document.getElementById("check-verdict");
  verdict.textContent = passed ? "agree" : "DISAGREE";
  verdict.dataset.value = passed ? "pass" : "fail";
  verdict.className = passed ? "pass" : "fail";
}

// ---- controls -----------------------------------------------------------------------
function buildControls() {
  const sliders = document.getElementById("sliders");
  const select = document.getElementById("check-input");
  const elements = []; // array elements to nudge, listed after the scalars
  for (const input of GRAPH.inputs) {
    if (!input.slider) {
      sliders.appendChild(el("div", { class: "fixed" }, `${input.label}: ${input.shape.join("×")} array, fixed`));
      input.value.forEach((_, k) => elements.push(el("option", { value: `${input.label}\u0000${k}` },
        `${input.label}[${input.shape.length === 2 ? [Math.floor(k / input.shape[1]), k % input.shape[1]] : k}]`)));
      continue;
    }
    const row = el("label", { class: "slider" });
    row.appendChild(el("span", { class: "name" }, input.label));
    const range = el("input", { type: "range", min: input.slider.min, max: input.slider.max,
                                step: input.slider.step, value: input.value, "data-input": input.label });
    const shown = el("span", { class: "shown" }, fmt(input.value));
    range.addEventListener("input", () => {
      state.point[input.label] = parseFloat(range.value);
      shown.textContent = fmt(state.point[input.label]);
      recompute(); render();
    });
    row.appendChild(range); row.appendChild(shown); sliders.appendChild(row);
    select.appendChild(el("option", { value: input.label }, input.label));
  }
  elements.forEach((option) => select.appendChild(option));
  select.addEventListener("change", render);
  document.getElementById("step").addEventListener("click", () => { state.position = Math.min(state.position + 1, total()); render(); });
  document.getElementById("reset").addEventListener("click", () => { state.position = 0; render(); });
}

drawGraph(document.getElementById("forward"), false);
drawGraph(document.getElementById("backward"), true);
buildControls();
recompute();
state.position = FORWARD_STEPS; // the page opens with the forward pass done
render();
window.explorerReady = true;
